//! The zone-aware disruption budget webhooks' reviews, decoded: `/admission/pod-eviction` (the
//! eviction a review asks for) and `/admission/zpdb-validation` (the budget it writes). The
//! decisions are `baton_core::admission::eviction` and `baton_core::zpdb::decide`;
//! `crate::evictions` reads the caches and claims the eviction in the budget's record.
//!
//! The record: ONE ConfigMap per budget (`baton-zpdb-<budget>`, see
//! `baton_core::zpdb::record`) mapping
//! each pod whose eviction was just allowed to when and by which request. Replicas claim an
//! eviction by a write conditioned on the record's resourceVersion (the prepare-downscale
//! ledger's mechanism), so two replicas cannot both allow evictions the budget allows only one
//! of. It is `baton_core::zpdb::record`: the rollout controller claims its deletions there.

use baton_core::admission::Verdict;
pub use baton_core::admission::eviction::{Eviction, answer};
use baton_core::admission::eviction::{is_judged, no_budget, not_a_budget, validate_budget};
use baton_core::zpdb::ZoneAwarePodDisruptionBudget;

use super::review::AdmissionRequest;

/// The eviction a review asks for, or the verdict that ends it (anything but the CREATE of a
/// pod's eviction: [`is_judged`]).
pub fn eviction_of(request: &AdmissionRequest<'_>) -> Result<Eviction, Verdict> {
    is_judged(
        &request.resource.resource,
        request.sub_resource(),
        &request.operation,
    )?;
    Ok(Eviction {
        uid: request.uid.to_string(),
        namespace: request.namespace().to_owned(),
        pod: request.name.to_string(),
        dry_run: request.is_dry_run(),
    })
}

/// `/admission/zpdb-validation`: the budget a CREATE or UPDATE writes, decoded and validated
/// ([`validate_budget`]) against the namespace baton watches.
pub fn validate(request: &AdmissionRequest<'_>, watched_namespace: &str) -> Verdict {
    if request.operation != "CREATE" && request.operation != "UPDATE" {
        return Verdict::allow();
    }
    let Some(object) = request.object() else {
        return no_budget();
    };
    match serde_json::from_str::<ZoneAwarePodDisruptionBudget>(object) {
        Ok(zpdb) => validate_budget(&zpdb, request.namespace(), watched_namespace),
        Err(error) => not_a_budget(error),
    }
}

/// The namespace of the budget a review writes: the object's, else the review's (as
/// [`validate_budget`] reads it).
pub fn namespace_of(request: &AdmissionRequest<'_>) -> String {
    request
        .object()
        .and_then(|object| serde_json::from_str::<ZoneAwarePodDisruptionBudget>(object).ok())
        .and_then(|zpdb| zpdb.metadata.namespace)
        .unwrap_or_else(|| request.namespace().to_owned())
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
            eviction_of(&request),
            Ok(Eviction {
                uid: "u1".into(),
                namespace: "mimir".into(),
                pod: "ingester-zone-a-0".into(),
                dry_run: false
            })
        );
        let body = review("CREATE", "pods", "", "{}");
        let verdict = eviction_of(&review::decode(&body).unwrap().request).unwrap_err();
        let Verdict::Allow(allowed) = verdict else {
            panic!("allowed: {verdict}")
        };
        assert!(allowed.warnings[0].contains("not pods;"));
        let body = review("UPDATE", "pods", "eviction", eviction);
        assert!(
            eviction_of(&review::decode(&body).unwrap().request)
                .unwrap_err()
                .is_allowed()
        );
    }

    #[test]
    fn denials_are_429() {
        let verdict = baton_core::zpdb::EvictionVerdict::Denied {
            reason: baton_core::zpdb::DenyReason::OtherZoneUnavailable,
            message: "wait".into(),
        };
        let decision = crate::admission::Decision::of(answer(&verdict), false);
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
            crate::admission::Decision::of(
                validate(&review::decode(&body).unwrap().request, "mimir"),
                false,
            )
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
