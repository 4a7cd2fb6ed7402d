//! The zone-aware disruption budget webhooks, as pure functions of the review:
//! `/admission/pod-eviction` (what the review alone decides, and the answer for a
//! [`Verdict`]) and `/admission/zpdb-validation` (the budget's validation as an answer). The
//! decision itself is `baton_core::budgets::decide`; `crate::evictions` reads the caches and
//! claims the eviction in the budget's record.
//!
//! The record: ONE ConfigMap per budget (`baton-zpdb-<budget>`, see
//! `baton_core::budgets::record`) mapping
//! each pod whose eviction was just allowed to when and by which request. Replicas claim an
//! eviction by a write conditioned on the record's resourceVersion (the prepare-downscale
//! ledger's mechanism), so two replicas cannot both allow evictions the budget allows only one
//! of. It is `baton_core::budgets::record`: the rollout controller claims its deletions there.

use baton_core::budgets::{Budget, Verdict, ZoneAwarePodDisruptionBudget};

use super::decision::Decision;
use super::review::AdmissionRequest;

/// An eviction the webhook allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionRequest {
    pub uid: String,
    pub namespace: String,
    pub pod: String,
    pub dry_run: bool,
}

/// What the review alone decides: anything but the CREATE of a pod's eviction is allowed (the
/// webhook configuration sends only those).
pub fn assess_eviction(request: &AdmissionRequest<'_>) -> Result<EvictionRequest, Decision> {
    if request.resource.resource != "pods" || request.sub_resource() != "eviction" {
        return Err(Decision::allow_with_warning(format!(
            "the pod-eviction webhook judges pods/eviction, not {}{}{}; allowing",
            request.resource.resource,
            if request.sub_resource().is_empty() {
                ""
            } else {
                "/"
            },
            request.sub_resource()
        )));
    }
    if request.operation != "CREATE" {
        return Err(Decision::allow());
    }
    Ok(EvictionRequest {
        uid: request.uid.to_string(),
        namespace: request.namespace().to_owned(),
        pod: request.name.to_string(),
        dry_run: request.is_dry_run(),
    })
}

/// The answer for a verdict: denials are 429, so a drain retries them.
pub fn answer(verdict: &Verdict) -> Decision {
    match verdict {
        Verdict::Allowed { message, .. } => Decision::allow_with_message(message.clone()),
        Verdict::Denied { message, .. } => Decision::deny_for_now(message.clone()),
    }
}

/// `/admission/zpdb-validation`: a budget that the eviction decision could not use is refused,
/// naming every bad field; so is one outside the namespace baton watches, which no eviction
/// would ever consult.
pub fn validate(request: &AdmissionRequest<'_>, watched_namespace: &str) -> Decision {
    if request.operation != "CREATE" && request.operation != "UPDATE" {
        return Decision::allow();
    }
    let Some(object) = request.object() else {
        return Decision::deny("the review has no object to validate");
    };
    let zpdb: ZoneAwarePodDisruptionBudget = match serde_json::from_str(object) {
        Ok(zpdb) => zpdb,
        Err(error) => {
            return Decision::deny(format!(
                "the object is not a ZoneAwarePodDisruptionBudget: {error}"
            ));
        }
    };
    let namespace = zpdb
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(request.namespace());
    if namespace != watched_namespace {
        return Decision::deny(format!(
            "ZoneAwarePodDisruptionBudget {} is in namespace {namespace}, but baton-webhook judges evictions in namespace {watched_namespace} only (its `namespace` setting): it would never be consulted",
            zpdb.name()
        ));
    }
    match Budget::parse(&zpdb) {
        Ok(_) => Decision::allow(),
        Err(invalid) => Decision::deny(invalid.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review;

    fn review(operation: &str, resource: &str, sub_resource: &str, object: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u1",
            "resource":{{"group":"","version":"v1","resource":"{resource}"}},"subResource":"{sub_resource}",
            "name":"ingester-zone-a-0","namespace":"mimir","operation":"{operation}","object":{object}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn only_evictions_are_judged() {
        let eviction = r#"{"apiVersion":"policy/v1beta1","kind":"Eviction","metadata":{"name":"ingester-zone-a-0","namespace":"mimir"}}"#;
        let body = review("CREATE", "pods", "eviction", eviction);
        let request = review::decode(&body).unwrap().request;
        assert_eq!(
            assess_eviction(&request),
            Ok(EvictionRequest {
                uid: "u1".into(),
                namespace: "mimir".into(),
                pod: "ingester-zone-a-0".into(),
                dry_run: false
            })
        );
        let body = review("CREATE", "pods", "", "{}");
        let decision = assess_eviction(&review::decode(&body).unwrap().request).unwrap_err();
        assert!(decision.allowed && decision.warnings[0].contains("not pods;"));
        let body = review("UPDATE", "pods", "eviction", eviction);
        assert!(
            assess_eviction(&review::decode(&body).unwrap().request)
                .unwrap_err()
                .allowed
        );
    }

    #[test]
    fn denials_are_429() {
        let verdict = Verdict::Denied {
            reason: baton_core::budgets::DenyReason::OtherZoneUnavailable,
            message: "wait".into(),
        };
        let decision = answer(&verdict);
        let encoded: serde_json::Value = serde_json::from_slice(&review::encode(
            review::ReviewVersion::V1Beta1,
            "u",
            &decision,
        ))
        .unwrap();
        assert_eq!(encoded["response"]["allowed"], false);
        assert_eq!(encoded["response"]["status"]["code"], 429);
        assert_eq!(encoded["response"]["status"]["message"], "wait");
    }

    #[test]
    fn validation_names_the_field_and_the_namespace() {
        let zpdb = |namespace: &str, spec: &str| {
            format!(
                r#"{{"apiVersion":"rollout-operator.grafana.com/v1","kind":"ZoneAwarePodDisruptionBudget","metadata":{{"name":"ingester","namespace":"{namespace}"}},"spec":{spec}}}"#
            )
        };
        let judge = |operation: &str, object: &str| {
            let body = review(operation, "zoneawarepoddisruptionbudgets", "", object);
            validate(&review::decode(&body).unwrap().request, "mimir")
        };
        let good = zpdb(
            "mimir",
            r#"{"selector":{"matchLabels":{"rollout-group":"ingester"}}}"#,
        );
        assert!(judge("CREATE", &good).allowed);
        assert!(judge("UPDATE", &good).allowed);
        let bad = zpdb(
            "mimir",
            r#"{"selector":{"matchLabels":{"a":"b"}},"maxUnavailable":1,"maxUnavailablePercentage":5,"podNamePartitionRegex":"(x"}"#,
        );
        let decision = judge("UPDATE", &bad);
        let message = decision.message.unwrap();
        assert!(!decision.allowed);
        assert!(
            message.contains("spec.maxUnavailable: only one of"),
            "{message}"
        );
        assert!(message.contains("spec.podNamePartitionRegex"), "{message}");
        let elsewhere = zpdb("loki", r#"{"selector":{"matchLabels":{"a":"b"}}}"#);
        let message = judge("CREATE", &elsewhere).message.unwrap();
        assert!(
            message.contains("namespace loki") && message.contains("namespace mimir"),
            "{message}"
        );
        assert!(judge("DELETE", "null").allowed);
    }
}
