//! The zone-aware disruption budget webhooks, as pure functions of the review:
//! `/admission/pod-eviction` (what the review alone decides, and the answer for a
//! [`Verdict`]) and `/admission/zpdb-validation` (the budget's validation as an answer). The
//! decision itself is `baton_shared::zpdb::decide`; `crate::evictions` reads the caches and
//! claims the eviction in the budget's record.
//!
//! The record: ONE ConfigMap per budget (`baton-zpdb-<budget>`, see [`record_name`]) mapping
//! each pod whose eviction was just allowed to when and by which request. Replicas claim an
//! eviction by a write conditioned on the record's resourceVersion (the prepare-downscale
//! ledger's mechanism, `ledger.rs`), so two replicas cannot both allow evictions the budget
//! allows only one of.

use baton_shared::zpdb::{
    AllowedEviction, Budget, RecentlyAllowed, Verdict, ZoneAwarePodDisruptionBudget,
};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::decision::Decision;
use super::ledger::Ledger;
use super::review::AdmissionRequest;

/// Label on a record naming its budget.
pub const RECORD_LABEL: &str = "rollout-operator.grafana.com/zpdb";
/// Prefix of record ConfigMap names.
pub const RECORD_PREFIX: &str = "baton-zpdb-";
/// How long an allowed eviction counts as unavailable when the pod does not go (the API
/// server refused the eviction after the webhook allowed it, e.g. for a PodDisruptionBudget).
pub const RECORD_EXPIRY: SignedDuration = SignedDuration::from_secs(30);

/// The record ConfigMap of `budget` (budget names are object names, valid here too).
pub fn record_name(budget: &str) -> String {
    format!("{RECORD_PREFIX}{budget}")
}

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

/// One entry of a record, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordEntry {
    /// RFC 3339.
    pub allowed_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The admission request that allowed it.
    pub request: String,
}

/// The record's entries; unreadable ones are skipped (and dropped on the next write), as an
/// entry is only ever a reason to wait.
pub fn recently_allowed(ledger: &Ledger) -> RecentlyAllowed {
    let pods = ledger
        .data
        .iter()
        .filter_map(|(pod, raw)| {
            let entry: RecordEntry = serde_json::from_str(raw).ok()?;
            let at = entry.allowed_at.parse::<Timestamp>().ok()?;
            Some((pod.clone(), AllowedEviction { at, uid: entry.uid }))
        })
        .collect();
    RecentlyAllowed { pods }
}

/// The record with `pod`'s eviction added at `now` and every expired or unreadable entry
/// dropped.
pub fn with_eviction(
    ledger: &Ledger,
    pod: &str,
    uid: Option<&str>,
    request: &str,
    now: Timestamp,
) -> Ledger {
    let current = recently_allowed(ledger);
    let mut data: std::collections::BTreeMap<String, String> = ledger
        .data
        .iter()
        .filter(|(name, _)| {
            current
                .pods
                .get(*name)
                .is_some_and(|entry| !RecentlyAllowed::is_expired(entry, now, RECORD_EXPIRY))
        })
        .map(|(name, raw)| (name.clone(), raw.clone()))
        .collect();
    let entry = RecordEntry {
        allowed_at: now.to_string(),
        uid: uid.map(str::to_owned),
        request: request.to_owned(),
    };
    data.insert(
        pod.to_owned(),
        serde_json::to_string(&entry).unwrap_or_default(),
    );
    Ledger {
        resource_version: ledger.resource_version.clone(),
        data,
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
            reason: baton_shared::zpdb::DenyReason::OtherZoneUnavailable,
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

    #[test]
    fn records_keep_fresh_entries_only() {
        let now: Timestamp = "2026-11-23T04:00:00Z".parse().unwrap();
        let ledger = with_eviction(
            &Ledger::default(),
            "a-0",
            Some("uid-a0"),
            "r1",
            now - SignedDuration::from_secs(29),
        );
        let ledger = with_eviction(
            &ledger,
            "b-0",
            None,
            "r2",
            now - SignedDuration::from_secs(5),
        );
        let mut ledger = with_eviction(&ledger, "c-0", None, "r3", now);
        assert_eq!(
            ledger.data.keys().collect::<Vec<_>>(),
            ["a-0", "b-0", "c-0"]
        );
        ledger.data.insert("junk".into(), "yesterday".into());
        let read = recently_allowed(&ledger);
        assert_eq!(read.pods.len(), 3, "unreadable entries are skipped");
        assert_eq!(read.pods["a-0"].uid.as_deref(), Some("uid-a0"));
        let next = with_eviction(
            &ledger,
            "d-0",
            None,
            "r4",
            now + SignedDuration::from_secs(2),
        );
        assert_eq!(
            next.data.keys().collect::<Vec<_>>(),
            ["b-0", "c-0", "d-0"],
            "a-0 expired (30 s), junk dropped"
        );
    }
}
