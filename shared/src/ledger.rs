//! Ledgers: ConfigMaps that replicas claim things in by resourceVersion-conditioned writes.
//! The downscale ledger of a rollout group is ONE ConfigMap per group
//! (`baton-downscale-<group>` in the StatefulSets' namespace) whose data maps a StatefulSet
//! name to its last approved downscale; the zone-aware budgets' eviction records
//! ([`crate::zpdb::record`]) are written the same way. Here, not in the webhook, because the
//! controller claims its rollout deletions in the same budget records the webhook writes.
//!
//! Why: webhook replicas share nothing in memory, so "no other zone was downscaled within its
//! min-time" must be judged and claimed atomically through the API server. Every claim is a
//! write conditioned on the resourceVersion the judgement was made on (create-if-absent for
//! the first one), so of two replicas judging the same ledger only one can write; the other
//! gets 409, re-reads and is judged again against the winner's claim.

use std::collections::BTreeMap;

use crate::annotations::ROLLOUT_GROUP_LABEL;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Error};
use serde::{Deserialize, Serialize};

/// Prefix of ledger ConfigMap names.
pub const LEDGER_PREFIX: &str = "baton-downscale-";
/// Label on ledgers, so people can find them.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The ledger's name for `group`. Group names are label values (may hold `_`, `.` and
/// capitals, which object names may not): such names are lowered and cleaned, and get a hash of
/// the original so two groups never share a ledger. The hash is FNV-1a, stable across builds,
/// because replicas of different versions must agree during an upgrade.
pub fn ledger_name(group: &str) -> String {
    let cleaned: String = group
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let cleaned = cleaned.trim_matches('-');
    if cleaned == group && !group.is_empty() {
        return format!("{LEDGER_PREFIX}{group}");
    }
    let hash = group.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    if cleaned.is_empty() {
        format!("{LEDGER_PREFIX}{hash:08x}")
    } else {
        format!("{LEDGER_PREFIX}{cleaned}-{hash:08x}")
    }
}

/// One StatefulSet's last approved downscale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// RFC 3339 time of the approval.
    pub last_downscale: String,
    /// UID of the admission request that claimed it, so an undo removes only its own claim.
    pub request: String,
}

impl Entry {
    pub fn new(at: Timestamp, request: &str) -> Self {
        Self {
            last_downscale: at.to_string(),
            request: request.to_owned(),
        }
    }
}

/// A ledger as read: its data and the version a conditional write must name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// `None`: the ConfigMap does not exist yet (a claim creates it).
    pub resource_version: Option<String>,
    pub data: BTreeMap<String, String>,
}

impl Ledger {
    pub fn from_config_map(config_map: ConfigMap) -> Self {
        Self {
            resource_version: config_map.metadata.resource_version,
            data: config_map.data.unwrap_or_default(),
        }
    }

    /// The entry of `statefulset`, if any; an unreadable one is an error naming it.
    pub fn entry(&self, statefulset: &str) -> Result<Option<Entry>, String> {
        let Some(raw) = self.data.get(statefulset) else {
            return Ok(None);
        };
        serde_json::from_str(raw).map(Some).map_err(|error| {
            format!("entry {statefulset:?} is not {{\"lastDownscale\":…,\"request\":…}}: {error}")
        })
    }

    /// When `statefulset` was last downscaled according to the ledger.
    pub fn last_downscale(&self, statefulset: &str) -> Result<Option<Timestamp>, String> {
        match self.entry(statefulset)? {
            None => Ok(None),
            Some(entry) => entry
                .last_downscale
                .parse::<Timestamp>()
                .map(Some)
                .map_err(|error| {
                    format!(
                        "entry {statefulset:?} has an invalid time {:?}: {error}",
                        entry.last_downscale
                    )
                }),
        }
    }

    /// This ledger with `statefulset`'s entry replaced (or removed with `None`).
    pub fn with_entry(&self, statefulset: &str, entry: Option<&Entry>) -> Ledger {
        let mut data = self.data.clone();
        match entry {
            Some(entry) => {
                data.insert(
                    statefulset.to_owned(),
                    serde_json::to_string(entry).unwrap_or_default(),
                );
            }
            None => {
                data.remove(statefulset);
            }
        }
        Ledger {
            resource_version: self.resource_version.clone(),
            data,
        }
    }
}

/// The result of a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Written; the ledger now has this resourceVersion.
    Done(Ledger),
    /// Someone wrote first (409): re-read and judge again.
    Conflict,
}

/// Reads the ledger; a missing ConfigMap is an empty ledger.
pub async fn read(api: &Api<ConfigMap>, name: &str) -> Result<Ledger, Error> {
    Ok(api
        .get_opt(name)
        .await?
        .map(Ledger::from_config_map)
        .unwrap_or_default())
}

/// Writes `ledger` if nobody else wrote since it was read: a replace conditioned on its
/// resourceVersion, or a create when it did not exist.
pub async fn write(
    api: &Api<ConfigMap>,
    name: &str,
    group: &str,
    ledger: &Ledger,
) -> Result<Written, Error> {
    write_labelled(api, name, (ROLLOUT_GROUP_LABEL, group), ledger).await
}

/// [`write`] for any ledger: labelled managed-by baton and with `label` (what it belongs to).
/// The zone-aware disruption budgets' eviction records use it too.
pub async fn write_labelled(
    api: &Api<ConfigMap>,
    name: &str,
    label: (&str, &str),
    ledger: &Ledger,
) -> Result<Written, Error> {
    let mut labels = BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), "baton".to_owned())]);
    labels.insert(label.0.to_owned(), label.1.to_owned());
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            resource_version: ledger.resource_version.clone(),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        data: Some(ledger.data.clone()),
        ..ConfigMap::default()
    };
    let result = match &ledger.resource_version {
        None => api.create(&PostParams::default(), &config_map).await,
        Some(_) => api.replace(name, &PostParams::default(), &config_map).await,
    };
    match result {
        Ok(written) => Ok(Written::Done(Ledger::from_config_map(written))),
        // 409 is both "AlreadyExists" (lost the create race) and "Conflict" (stale version).
        Err(Error::Api(status)) if status.code == 409 => Ok(Written::Conflict),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_names_are_valid_and_distinct() {
        let cases = [
            ("ingester", "baton-downscale-ingester"),
            ("store-gateway", "baton-downscale-store-gateway"),
            ("Ingester", "baton-downscale-ingester-"),
            ("ingester_v2", "baton-downscale-ingester-v2-"),
            ("a.b", "baton-downscale-a-b-"),
            ("_", "baton-downscale-"),
            ("", "baton-downscale-"),
        ];
        let mut seen = std::collections::HashSet::new();
        for (group, prefix) in cases {
            let name = ledger_name(group);
            assert!(name.starts_with(prefix), "{group:?} -> {name}");
            assert!(name.len() <= 253);
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{name}"
            );
            assert!(!name.ends_with('-'), "{name}");
            assert!(seen.insert(name), "{group:?} collides");
        }
        assert_ne!(ledger_name("Ingester"), ledger_name("ingester"));
        assert_eq!(ledger_name("a_b"), ledger_name("a_b"), "stable");
        let longest = ledger_name(&"X".repeat(63));
        assert!(longest.len() <= 253);
    }

    #[test]
    fn entries_round_trip_and_bad_ones_are_named() {
        let at: Timestamp = "2026-11-21T05:14:45.5Z".parse().unwrap();
        let ledger = Ledger::default().with_entry("zone-a", Some(&Entry::new(at, "uid-1")));
        assert_eq!(ledger.last_downscale("zone-a"), Ok(Some(at)));
        assert_eq!(ledger.last_downscale("zone-b"), Ok(None));
        assert_eq!(ledger.entry("zone-a").unwrap().unwrap().request, "uid-1");
        assert_eq!(ledger.with_entry("zone-a", None).data.len(), 0);

        let mut broken = Ledger::default();
        broken.data.insert("zone-a".into(), "yesterday".into());
        broken.data.insert(
            "zone-b".into(),
            r#"{"lastDownscale":"yesterday","request":"u"}"#.into(),
        );
        assert!(broken.entry("zone-a").unwrap_err().contains("zone-a"));
        assert!(
            broken
                .last_downscale("zone-b")
                .unwrap_err()
                .contains("invalid time \"yesterday\"")
        );
        // Writing one entry keeps the others as they were.
        let rewritten = broken.with_entry("zone-c", Some(&Entry::new(at, "u")));
        assert_eq!(rewritten.data["zone-a"], "yesterday");
    }
}
