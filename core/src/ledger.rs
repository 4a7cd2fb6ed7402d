//! Ledgers: ConfigMaps that replicas claim things in by resourceVersion-conditioned writes, as
//! decisions read and change them. The downscale ledger of a rollout group is ONE ConfigMap per
//! group (`baton-downscale-<group>` in the StatefulSets' namespace) whose data maps a StatefulSet
//! name to its last approved downscale; the zone-aware budgets' eviction records
//! ([`crate::zpdb::record`]) are kept the same way. Reading, writing and the claim loop are
//! `baton_shared::ledger`.
//!
//! Why: webhook replicas share nothing in memory, so "no other zone was downscaled within its
//! min-time" must be judged and claimed atomically through the API server. Every claim is a
//! write conditioned on the resourceVersion the judgement was made on (create-if-absent for
//! the first one), so of two replicas judging the same ledger only one can write; the other
//! gets 409, re-reads and is judged again against the winner's claim.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ConfigMap;
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
///
/// An entry written by prepare-downscale is a *claim*: the webhook approved the downscale, but
/// the API server may still fail the update after admission (a conflict, another webhook's
/// denial, a timeout). So a claim says what it approved (`fromReplicas` → `toReplicas` on the
/// StatefulSet at `generation`) and which time it replaced; [`Entry::judge`] tells from the
/// StatefulSet as it is now whether the downscale happened, and the controller confirms it
/// (clearing `pending`) or voids it. Entries without these fields (earlier baton versions)
/// are confirmed downscales.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// RFC 3339 time of the approval.
    pub last_downscale: String,
    /// UID of the admission request that claimed it, so an undo removes only its own claim.
    pub request: String,
    /// Approved, not yet seen to have happened.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    /// `spec.replicas` the downscale was judged on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_replicas: Option<i32>,
    /// `spec.replicas` it approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_replicas: Option<i32>,
    /// `metadata.generation` of the StatefulSet it was judged on: while the StatefulSet still
    /// has it, its spec has not changed since, so the downscale has not happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The last downscale before this claim (RFC 3339), which counts again if it is voided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

/// Whether a claimed downscale happened, judged on the StatefulSet as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// Confirmed, or the StatefulSet's spec changed since the claim: it counts.
    Happened,
    /// The update may still be in the API server's hands: it counts until `until`.
    InFlight { until: Timestamp },
    /// The StatefulSet's spec is unchanged long after the approval: the update failed after
    /// admission. It does not count; the pods told to prepare must be told to cancel.
    DidNotHappen,
}

impl Entry {
    /// A confirmed downscale (what earlier versions wrote, and what tests seed).
    pub fn new(at: Timestamp, request: &str) -> Self {
        Self {
            last_downscale: at.to_string(),
            request: request.to_owned(),
            pending: false,
            from_replicas: None,
            to_replicas: None,
            generation: None,
            previous: None,
        }
    }

    /// A claim approved at `at` by `request` for `from` → `to` replicas on the StatefulSet at
    /// `generation`, replacing the last downscale `previous`.
    pub fn claim(
        at: Timestamp,
        request: &str,
        (from, to): (i32, i32),
        generation: i64,
        previous: Option<Timestamp>,
    ) -> Self {
        Self {
            pending: true,
            from_replicas: Some(from),
            to_replicas: Some(to),
            generation: Some(generation),
            previous: previous.map(|at| at.to_string()),
            ..Self::new(at, request)
        }
    }

    /// This entry, confirmed.
    pub fn confirmed(&self) -> Self {
        Self {
            pending: false,
            ..self.clone()
        }
    }

    /// When the downscale was approved; an unreadable time is an error naming it.
    pub fn at(&self) -> Result<Timestamp, String> {
        parse_time(&self.last_downscale)
    }

    /// Whether the downscale happened, given the StatefulSet's `generation` now. A claim is
    /// given `grace` (at least the API server's request timeout) to land.
    pub fn judge(&self, generation: Option<i64>, now: Timestamp, grace: Duration) -> ClaimState {
        let (true, Some(claimed), Ok(at)) = (self.pending, self.generation, self.at()) else {
            return ClaimState::Happened;
        };
        if generation != Some(claimed) {
            return ClaimState::Happened;
        }
        let until = at
            .checked_add(SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MAX);
        if now < until {
            ClaimState::InFlight { until }
        } else {
            ClaimState::DidNotHappen
        }
    }

    /// What a new claim replacing this entry keeps as the last downscale before it: this
    /// entry's time if it happened; if it did not, or is still in flight (the same update
    /// admitted again, or a competing update of the same StatefulSet: at most one lands, and
    /// if it does the generation moves and the new claim counts), the one this entry replaced.
    pub fn history(
        &self,
        generation: Option<i64>,
        now: Timestamp,
        grace: Duration,
    ) -> Option<Timestamp> {
        match self.judge(generation, now, grace) {
            ClaimState::Happened => self.at().ok(),
            ClaimState::InFlight { .. } | ClaimState::DidNotHappen => self
                .previous
                .as_deref()
                .and_then(|text| parse_time(text).ok()),
        }
    }

    /// Whether this entry is a claim of the same downscale (`from` → `to` on `generation`)
    /// made less than half of `grace` ago: its pods were told to prepare and nobody has told
    /// them to cancel yet (the controller voids a claim only after the whole grace). The API
    /// server runs admission again when its cached copy of the object was stale; the pods are
    /// then not told twice.
    pub fn prepared_the_same(
        &self,
        (from, to): (i32, i32),
        generation: Option<i64>,
        now: Timestamp,
        grace: Duration,
    ) -> bool {
        let young = self.at().is_ok_and(|at| {
            now.duration_since(at) < SignedDuration::try_from(grace / 2).unwrap_or_default()
        });
        self.pending
            && young
            && self.from_replicas == Some(from)
            && self.to_replicas == Some(to)
            && generation.is_some()
            && self.generation == generation
    }

    /// The last downscale this entry stands for now: its own time unless it did not happen,
    /// then the one it replaced.
    pub fn effective(
        &self,
        generation: Option<i64>,
        now: Timestamp,
        grace: Duration,
    ) -> Result<Option<Timestamp>, String> {
        match self.judge(generation, now, grace) {
            ClaimState::Happened | ClaimState::InFlight { .. } => self.at().map(Some),
            ClaimState::DidNotHappen => self.previous.as_deref().map(parse_time).transpose(),
        }
    }
}

fn parse_time(text: &str) -> Result<Timestamp, String> {
    text.parse::<Timestamp>()
        .map_err(|error| format!("invalid time {text:?}: {error}"))
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

    /// When `statefulset` was last downscaled according to the ledger, judged on its
    /// `generation` now (see [`Entry::effective`]).
    pub fn last_downscale(
        &self,
        statefulset: &str,
        generation: Option<i64>,
        now: Timestamp,
        grace: Duration,
    ) -> Result<Option<Timestamp>, String> {
        match self.entry(statefulset)? {
            None => Ok(None),
            Some(entry) => entry
                .effective(generation, now, grace)
                .map_err(|error| format!("entry {statefulset:?} has an {error}")),
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

/// Attempts at a claim before giving up: each race lost to another writer costs one.
pub const CLAIM_ATTEMPTS: usize = 8;

/// What a judgement of the record read decides.
#[derive(Debug)]
pub enum Judged<T> {
    /// Decided without writing: nothing to claim, or refused.
    Settled(T),
    /// Store this record, conditioned on the version read; decided `T` once it is stored.
    Claim(Ledger, T),
    /// The copy judged may be stale and the decision rests on it: read it afresh.
    ReadAgain,
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
        let grace = Duration::from_secs(60);
        assert_eq!(
            ledger.last_downscale("zone-a", Some(1), at, grace),
            Ok(Some(at))
        );
        assert_eq!(
            ledger.last_downscale("zone-b", Some(1), at, grace),
            Ok(None)
        );
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
                .last_downscale("zone-b", None, at, grace)
                .unwrap_err()
                .contains("invalid time \"yesterday\"")
        );
        assert!(
            broken
                .last_downscale("zone-a", None, at, grace)
                .unwrap_err()
                .contains("zone-a")
        );
        // Writing one entry keeps the others as they were.
        let rewritten = broken.with_entry("zone-c", Some(&Entry::new(at, "u")));
        assert_eq!(rewritten.data["zone-a"], "yesterday");
    }

    /// Earlier versions wrote `{"lastDownscale","request"}` only: such an entry is a confirmed
    /// downscale, and a confirmed claim is written back in that shape plus its details.
    #[test]
    fn entries_of_earlier_versions_are_confirmed_downscales() {
        let old: Entry =
            serde_json::from_str(r#"{"lastDownscale":"2026-11-21T05:14:45Z","request":"u"}"#)
                .unwrap();
        assert!(!old.pending);
        let now: Timestamp = "2026-11-21T05:14:46Z".parse().unwrap();
        assert_eq!(
            old.judge(Some(7), now, Duration::from_secs(60)),
            ClaimState::Happened
        );
        let claim = Entry::claim(now, "u2", (3, 2), 7, Some(old.at().unwrap()));
        let text = serde_json::to_string(&claim).unwrap();
        assert!(text.contains(r#""pending":true"#), "{text}");
        let confirmed = serde_json::to_string(&claim.confirmed()).unwrap();
        assert!(!confirmed.contains("pending"), "{confirmed}");
        assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), claim);
    }

    /// A claim counts while its update may still land, stops counting once the StatefulSet's
    /// spec is unchanged past the grace (the one it replaced counts again), and counts for good
    /// once the spec changed.
    #[test]
    fn a_claim_counts_until_its_statefulset_shows_it_did_not_happen() {
        let earlier: Timestamp = "2026-11-21T00:00:00Z".parse().unwrap();
        let at: Timestamp = "2026-11-21T05:00:00Z".parse().unwrap();
        let grace = Duration::from_secs(60);
        let claim = Entry::claim(at, "u", (3, 2), 7, Some(earlier));
        let later = |seconds: i64| at + jiff::SignedDuration::from_secs(seconds);

        assert_eq!(
            claim.judge(Some(7), later(59), grace),
            ClaimState::InFlight { until: later(60) }
        );
        assert_eq!(claim.effective(Some(7), later(59), grace), Ok(Some(at)));
        assert_eq!(
            claim.judge(Some(7), later(60), grace),
            ClaimState::DidNotHappen
        );
        assert_eq!(
            claim.effective(Some(7), later(60), grace),
            Ok(Some(earlier))
        );
        assert_eq!(claim.judge(Some(8), later(1), grace), ClaimState::Happened);
        assert_eq!(claim.effective(Some(8), later(600), grace), Ok(Some(at)));
        // A first claim that did not happen leaves no downscale at all.
        let first = Entry::claim(at, "u", (3, 2), 7, None);
        assert_eq!(first.effective(Some(7), later(60), grace), Ok(None));
        // A claim replacing this one keeps what this one replaced while it is in flight or
        // did not happen, and this one once it happened.
        assert_eq!(claim.history(Some(7), later(1), grace), Some(earlier));
        assert_eq!(claim.history(Some(7), later(60), grace), Some(earlier));
        assert_eq!(claim.history(Some(8), later(1), grace), Some(at));
        // The same downscale admitted again soon after was prepared already; another one, an
        // older one or one on another generation was not.
        assert!(claim.prepared_the_same((3, 2), Some(7), later(29), grace));
        assert!(!claim.prepared_the_same((3, 2), Some(7), later(30), grace));
        assert!(!claim.prepared_the_same((3, 1), Some(7), later(1), grace));
        assert!(!claim.prepared_the_same((3, 2), Some(8), later(1), grace));
        assert!(
            !claim
                .confirmed()
                .prepared_the_same((3, 2), Some(7), later(1), grace)
        );
        // A confirmed claim is history whatever the generation.
        assert_eq!(
            claim.confirmed().judge(Some(7), later(600), grace),
            ClaimState::Happened
        );
    }
}
