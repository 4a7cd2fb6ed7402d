//! A budget's eviction record: ONE ConfigMap per budget (`baton-zpdb-<budget>`, see
//! [`record_name`]) mapping each pod whose eviction (or rollout deletion) was just allowed to
//! when and by which request. Whoever lets a pod of the budget go claims it here by a write
//! conditioned on the record's resourceVersion (`baton_shared::ledger::write_labelled`): the
//! webhook's replicas for evictions and the rollout controller for its deletions. So the
//! judgements of all of them serialise on one object, and two of them cannot both let go pods
//! the budget allows only one of. The decision reads the record's fresh entries as
//! [`RecentlyAllowed`].

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{AllowedEviction, RecentlyAllowed};
use crate::ledger::Ledger;

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

/// The key of `pod`'s entry in a record: its name, a member cluster's pod (`cluster/pod`) with
/// `_` for the `/`, which a ConfigMap key may not hold. Neither pod nor cluster names hold `_`
/// (DNS names), so a key reads back as one name ([`pod_of_key`]), and a record of one cluster
/// alone is keyed as the Go operator's was.
pub fn record_key(pod: &str) -> String {
    pod.replacen(crate::clusters::SEPARATOR, "_", 1)
}

/// The pod a record's key names ([`record_key`]).
pub fn pod_of_key(key: &str) -> String {
    key.replacen('_', &crate::clusters::SEPARATOR.to_string(), 1)
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
        .filter_map(|(key, raw)| {
            let entry: RecordEntry = serde_json::from_str(raw).ok()?;
            let at = entry.allowed_at.parse::<Timestamp>().ok()?;
            Some((pod_of_key(key), AllowedEviction { at, uid: entry.uid }))
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
        .filter(|(key, _)| {
            current
                .pods
                .get(&pod_of_key(key))
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
        record_key(pod),
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

    /// A member cluster's pod is kept under a key a ConfigMap takes, and read back as itself.
    #[test]
    fn a_member_clusters_pod_is_kept_under_a_valid_key_and_read_back() {
        let now: Timestamp = "2026-11-23T04:00:00Z".parse().unwrap();
        let ledger = with_eviction(&Ledger::default(), "cluster-b/web-0", None, "r1", now);
        let ledger = with_eviction(&ledger, "web-1", None, "r2", now);
        assert_eq!(
            ledger.data.keys().collect::<Vec<_>>(),
            ["cluster-b_web-0", "web-1"]
        );
        let read = recently_allowed(&ledger);
        assert_eq!(
            read.pods.keys().collect::<Vec<_>>(),
            ["cluster-b/web-0", "web-1"]
        );
        // and it stays through the next write
        let next = with_eviction(&ledger, "cluster-c/web-0", None, "r3", now);
        assert_eq!(next.data.len(), 3);
    }

    /// An entry dated far ahead (anyone who may edit the ConfigMap can write 2099) makes no
    /// pod count as evicted and is dropped by the next write.
    #[test]
    fn entries_from_the_future_hold_nothing_and_are_dropped() {
        let now: Timestamp = "2026-11-23T04:00:00Z".parse().unwrap();
        let forged = with_eviction(
            &Ledger::default(),
            "a-0",
            None,
            "forged",
            "2099-01-01T00:00:00Z".parse().unwrap(),
        );
        let pod = crate::pods::CachedPod::of(&k8s_openapi::api::core::v1::Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("a-0".into()),
                ..k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::default()
            },
            ..k8s_openapi::api::core::v1::Pod::default()
        });
        let read = recently_allowed(&forged);
        assert_eq!(read.allowed_at(&pod, now, RECORD_EXPIRY), None);
        let next = with_eviction(&forged, "b-0", None, "r", now);
        assert_eq!(next.data.keys().collect::<Vec<_>>(), ["b-0"]);
        // Within clock skew an entry still counts.
        let skewed = with_eviction(
            &Ledger::default(),
            "a-0",
            None,
            "r",
            now + SignedDuration::from_secs(60),
        );
        let read = recently_allowed(&skewed);
        assert!(read.allowed_at(&pod, now, RECORD_EXPIRY).is_some());
    }
}
