//! The gate state that must survive a failover, and where it lives: on the StatefulSets.
//!
//! Why annotations on the members rather than memory or a separate object: a new leader must
//! neither restart a soak from zero nor skip it, so the state is in the cluster; keeping it on
//! the zone it is about makes it visible with `kubectl get sts -o yaml`, needs no new RBAC nor
//! object lifecycle, and goes away with the StatefulSet. Only the leader writes it, as a merge
//! patch carrying the resourceVersion it read (a conflict fails the reconcile, which retries
//! from a fresh snapshot).
//!
//! A zone's state names the update revision it is about: when the template changes again the
//! old state no longer applies (a new rollout starts its gates afresh), without anyone having
//! to clean it up. [`super::decide()`] also removes it once the group's rollout is complete.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::keys::{GateWarning, HALTED_ANNOTATION, STATE_ANNOTATION};
use crate::rollout::GroupSnapshot;

/// What the gate remembers about one zone (StatefulSet) for one update revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneState {
    /// The StatefulSet's update revision this state is about.
    pub revision: String,
    /// When the soak before this zone started (the previous zones were then complete).
    pub soak_started_at: Option<Timestamp>,
    /// The zones that soak followed: if another zone finished since, the soak starts again.
    pub soak_after: Vec<String>,
    /// When this zone was cleared to roll: from then on its deletions pass the gate.
    pub cleared_at: Option<Timestamp>,
}

/// The stored form: JSON with RFC 3339 times, stable field names (a newer baton reads an
/// older one's state; unknown fields are ignored).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    soak_started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    soak_after: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cleared_at: Option<String>,
}

impl ZoneState {
    /// A fresh state for `revision`.
    pub fn new(revision: &str) -> Self {
        Self {
            revision: revision.to_owned(),
            soak_started_at: None,
            soak_after: Vec::new(),
            cleared_at: None,
        }
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        let stored = Stored {
            revision: self.revision.clone(),
            soak_started_at: self.soak_started_at.map(|at| at.to_string()),
            soak_after: self.soak_after.clone(),
            cleared_at: self.cleared_at.map(|at| at.to_string()),
        };
        serde_json::to_string(&stored).expect("a struct of strings always serialises")
    }

    /// Reads an annotation value; the error says what is wrong with it.
    pub fn from_annotation(value: &str) -> Result<Self, String> {
        let stored: Stored = serde_json::from_str(value).map_err(|error| error.to_string())?;
        let time = |field: &str, raw: Option<String>| {
            raw.map(|raw| {
                raw.parse::<Timestamp>()
                    .map_err(|error| format!("{field}: {error}"))
            })
            .transpose()
        };
        Ok(Self {
            revision: stored.revision,
            soak_started_at: time("soakStartedAt", stored.soak_started_at)?,
            soak_after: stored.soak_after,
            cleared_at: time("clearedAt", stored.cleared_at)?,
        })
    }
}

/// The group's stored gate state, as read from its members.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateState {
    /// Per StatefulSet, its state for its *current* update revision (stale states left out).
    pub zones: BTreeMap<String, ZoneState>,
    /// Members carrying [`HALTED_ANNOTATION`], with its value (why), in member order.
    pub halted: Vec<(String, String)>,
    /// Members carrying a state annotation at all (stale or unreadable included): what to
    /// remove once the rollout is complete.
    pub stored: BTreeSet<String>,
}

impl GateState {
    /// Reads the state from the members' annotations. Pure.
    pub fn read(group: &GroupSnapshot) -> (Self, Vec<GateWarning>) {
        let mut state = Self::default();
        let mut warnings = Vec::new();
        for statefulset in &group.statefulsets {
            let name = &statefulset.name;
            if let Some(why) = statefulset.annotations.get(HALTED_ANNOTATION) {
                state.halted.push((name.clone(), why.clone()));
            }
            let Some(raw) = statefulset.annotations.get(STATE_ANNOTATION) else {
                continue;
            };
            state.stored.insert(name.clone());
            match ZoneState::from_annotation(raw) {
                Ok(zone) if statefulset.update_revision.as_ref() == Some(&zone.revision) => {
                    state.zones.insert(name.clone(), zone);
                }
                Ok(_stale) => {}
                Err(error) => warnings.push(GateWarning::UnreadableState {
                    statefulset: name.clone(),
                    value: raw.clone(),
                    error,
                }),
            }
        }
        (state, warnings)
    }

    /// Whether `statefulset` is cleared to roll at its current update revision.
    pub fn cleared(&self, statefulset: &str) -> bool {
        self.zones
            .get(statefulset)
            .is_some_and(|zone| zone.cleared_at.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::StatefulSetSnapshot;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).expect("valid time")
    }

    fn member(name: &str, revision: &str, annotations: &[(&str, String)]) -> StatefulSetSnapshot {
        let borrowed: Vec<(&str, &str)> = annotations
            .iter()
            .map(|(key, value)| (*key, value.as_str()))
            .collect();
        let mut member = crate::testing::member_with(name, &borrowed);
        member.update_revision = Some(revision.to_owned());
        member
    }

    #[test]
    fn zone_state_round_trips_through_its_annotation() {
        let state = ZoneState {
            revision: "web-a-6f9c".to_owned(),
            soak_started_at: Some(at(5)),
            soak_after: vec!["web-a".to_owned()],
            cleared_at: Some(at(10)),
        };
        let text = state.to_annotation();
        assert_eq!(
            text,
            r#"{"revision":"web-a-6f9c","soakStartedAt":"2023-11-14T22:13:25Z","soakAfter":["web-a"],"clearedAt":"2023-11-14T22:13:30Z"}"#
        );
        assert_eq!(ZoneState::from_annotation(&text), Ok(state));
        let fresh = ZoneState::new("r");
        assert_eq!(fresh.to_annotation(), r#"{"revision":"r"}"#);
        assert_eq!(
            ZoneState::from_annotation(&fresh.to_annotation()),
            Ok(fresh)
        );
    }

    #[test]
    fn unreadable_state_is_a_warning_naming_the_statefulset_and_the_zone_starts_afresh() {
        for bad in [
            "{",
            r#"{"soakStartedAt":"x"}"#,
            r#"{"revision":"r","clearedAt":"yesterday"}"#,
        ] {
            let group = GroupSnapshot {
                name: "g".to_owned(),
                statefulsets: vec![member("zone-a", "r", &[(STATE_ANNOTATION, bad.to_owned())])],
                reach: Default::default(),
            };
            let (state, warnings) = GateState::read(&group);
            assert!(state.zones.is_empty(), "{bad}");
            assert!(state.stored.contains("zone-a"), "{bad}");
            let [warning] = warnings.as_slice() else {
                panic!("one warning for {bad}: {warnings:?}");
            };
            let text = warning.to_string();
            assert!(
                text.contains("zone-a") && text.contains(STATE_ANNOTATION),
                "{text}"
            );
        }
    }

    #[test]
    fn state_of_another_revision_is_stale_and_ignored() {
        let cleared = ZoneState {
            cleared_at: Some(at(0)),
            ..ZoneState::new("old")
        };
        let group = GroupSnapshot {
            name: "g".to_owned(),
            statefulsets: vec![
                member("a", "new", &[(STATE_ANNOTATION, cleared.to_annotation())]),
                member("b", "old", &[(STATE_ANNOTATION, cleared.to_annotation())]),
            ],
            reach: Default::default(),
        };
        let (state, warnings) = GateState::read(&group);
        assert!(warnings.is_empty());
        assert!(!state.cleared("a"));
        assert!(state.cleared("b"));
        assert_eq!(state.stored.len(), 2);
    }

    #[test]
    fn any_member_halted_is_read_with_its_reason() {
        let group = GroupSnapshot {
            name: "g".to_owned(),
            statefulsets: vec![
                member("a", "r", &[]),
                member(
                    "b",
                    "r",
                    &[(HALTED_ANNOTATION, "error rate 0.3".to_owned())],
                ),
            ],
            reach: Default::default(),
        };
        let (state, _) = GateState::read(&group);
        assert_eq!(
            state.halted,
            vec![("b".to_owned(), "error rate 0.3".to_owned())]
        );
    }
}
