//! An eviction of a pod as the pod-eviction webhook judges it, and a zone-aware disruption
//! budget as zpdb-validation judges it. The eviction decision itself is
//! [`crate::zpdb::decide()`]; this module says which requests are evictions to judge and
//! turns the budgets' verdict into an admission one (denials are for now: a drain retries).

use crate::zpdb::{self, Budget, ZoneAwarePodDisruptionBudget};

use super::verdict::{Reason, Verdict};

/// An eviction to judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The request's uid: the budget's record names the request that evicted a pod.
    pub uid: String,
    pub namespace: String,
    pub pod: String,
    pub dry_run: bool,
}

/// Whether a request for `resource`/`sub_resource` by `operation` is an eviction to judge:
/// anything but the CREATE of a pod's eviction is allowed (the webhook configuration sends only
/// those), another resource with a warning saying so.
pub fn is_judged(resource: &str, sub_resource: &str, operation: &str) -> Result<(), Verdict> {
    if resource != "pods" || sub_resource != "eviction" {
        return Err(Verdict::allow_with_warning(format!(
            "the pod-eviction webhook judges pods/eviction, not {resource}{}{sub_resource}; allowing",
            if sub_resource.is_empty() { "" } else { "/" },
        )));
    }
    if operation != "CREATE" {
        return Err(Verdict::allow());
    }
    Ok(())
}

/// The admission verdict of the budgets' verdict: denials are for now, so a drain retries them.
pub fn answer(verdict: &zpdb::EvictionVerdict) -> Verdict {
    match verdict {
        zpdb::EvictionVerdict::Allowed { message, .. } => {
            Verdict::allow_with_message(message.clone())
        }
        zpdb::EvictionVerdict::Denied { message, .. } => {
            Verdict::refuse_for_now(Reason::Budget, message.clone())
        }
    }
}

/// A budget as written, in its own namespace (else the review's): refused when the eviction
/// decision could not use it, naming every bad field, or when it is outside the namespace
/// baton watches (`watched`), where no eviction would ever consult it.
pub fn validate_budget(
    zpdb: &ZoneAwarePodDisruptionBudget,
    review_namespace: &str,
    watched: &str,
) -> Verdict {
    let namespace = zpdb
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(review_namespace);
    if namespace != watched {
        return Verdict::refuse(
            Reason::InvalidBudget,
            format!(
                "ZoneAwarePodDisruptionBudget {} is in namespace {namespace}, but baton-webhook judges evictions in namespace {watched} only (its `namespace` setting): it would never be consulted",
                zpdb.name()
            ),
        );
    }
    match Budget::parse(zpdb) {
        Ok(_) => Verdict::allow(),
        Err(invalid) => Verdict::refuse(Reason::InvalidBudget, invalid.to_string()),
    }
}

/// A review to validate without an object: refused.
pub fn no_budget() -> Verdict {
    Verdict::refuse(Reason::Unreadable, "the review has no object to validate")
}

/// A review whose object is not a budget: refused.
pub fn not_a_budget(error: impl std::fmt::Display) -> Verdict {
    Verdict::refuse(
        Reason::Unreadable,
        format!("the object is not a ZoneAwarePodDisruptionBudget: {error}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_creation_of_a_pods_eviction_is_judged() {
        let warned = |what: &str| {
            Err(Verdict::allow_with_warning(format!(
                "the pod-eviction webhook judges pods/eviction, not {what}; allowing"
            )))
        };
        let cases = [
            ("pods", "eviction", "CREATE", Ok(())),
            ("pods", "eviction", "UPDATE", Err(Verdict::allow())),
            ("pods", "", "CREATE", warned("pods")),
            ("pods", "status", "CREATE", warned("pods/status")),
            (
                "statefulsets",
                "eviction",
                "CREATE",
                warned("statefulsets/eviction"),
            ),
        ];
        for (resource, sub_resource, operation, expected) in cases {
            assert_eq!(
                is_judged(resource, sub_resource, operation),
                expected,
                "{operation} {resource}/{sub_resource}"
            );
        }
    }

    #[test]
    fn budget_denials_are_for_now() {
        let denied = zpdb::EvictionVerdict::Denied {
            reason: zpdb::DenyReason::OtherZoneUnavailable,
            message: "wait".into(),
        };
        assert_eq!(
            answer(&denied),
            Verdict::refuse_for_now(Reason::Budget, "wait")
        );
    }

    #[test]
    fn a_budget_elsewhere_or_unusable_is_refused_naming_why() {
        let zpdb = |namespace: &str, spec: serde_json::Value| -> ZoneAwarePodDisruptionBudget {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "rollout-operator.grafana.com/v1",
                "kind": "ZoneAwarePodDisruptionBudget",
                "metadata": {"name": "ingester", "namespace": namespace},
                "spec": spec,
            }))
            .unwrap()
        };
        let good = zpdb(
            "mimir",
            serde_json::json!({"selector": {"matchLabels": {"rollout-group": "ingester"}}}),
        );
        assert_eq!(validate_budget(&good, "mimir", "mimir"), Verdict::allow());
        let elsewhere = validate_budget(
            &zpdb(
                "loki",
                serde_json::json!({"selector": {"matchLabels": {"a": "b"}}}),
            ),
            "mimir",
            "mimir",
        );
        assert_eq!(
            elsewhere.refusal().map(|refusal| refusal.message.as_str()),
            Some(
                "ZoneAwarePodDisruptionBudget ingester is in namespace loki, but baton-webhook judges evictions in namespace mimir only (its `namespace` setting): it would never be consulted"
            )
        );
        let bad = zpdb(
            "mimir",
            serde_json::json!({"selector": {"matchLabels": {"a": "b"}}, "maxUnavailable": 1, "maxUnavailablePercentage": 5}),
        );
        let refused = validate_budget(&bad, "mimir", "mimir");
        assert_eq!(refused.refusal().map(Refusal::kind), Some("invalid-budget"));
        assert!(
            refused
                .message()
                .unwrap()
                .contains("spec.maxUnavailable: only one of"),
            "{refused}"
        );
    }

    use super::super::verdict::Refusal;
}
