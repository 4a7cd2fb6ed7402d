//! When each StatefulSet of a rollout group was last downscaled, the one fact min-time is judged
//! on. Three records may say it, and a switch from the Go operator (or back to it) must lose
//! none of them:
//! - baton's ledger ([`crate::ledger`], `baton-downscale-<group>`): the source of truth, because
//!   only it is written atomically with the judgement (a resourceVersion-conditioned claim) and
//!   only it knows whether an approved downscale happened ([`Entry::judge`]);
//! - the Go operator's zone tracker ConfigMap (`rollout-operator-zone-tracker`, one data key per
//!   StatefulSet, `{"lastDownscaled":"<RFC 3339>"}`), written by the Go operator run with
//!   `-use-zone-tracker=true`, as its own and Mimir's jsonnet do;
//! - the `grafana.com/last-downscale` annotation, written by the Go operator without the tracker
//!   and by earlier baton versions.
//!
//! min-time is judged on the newest of the three ([`last_downscale`]). baton's controller copies
//! every downscale it sees happen into the tracker and the annotation, after the fact (never
//! from inside the admission of the update), so the Go operator finds the same history.
//!
//! Pure: reading and writing the tracker is `baton_shared::downscale_history`.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};

use crate::annotations::LAST_DOWNSCALE_ANNOTATION;
use crate::clock::MAX_CLOCK_SKEW;
use crate::ledger::{Entry, Ledger};
use crate::pods::{CachedPod, Controls};
use crate::statefulset::{StatefulSetState, pod_ordinal};

/// The Go operator's zone tracker as read: one entry per StatefulSet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneTracker {
    /// `None`: the ConfigMap does not exist.
    pub resource_version: Option<String>,
    pub data: BTreeMap<String, String>,
}

/// The value of one tracker entry, as the Go operator writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TrackerEntry {
    #[serde(rename = "lastDownscaled")]
    last_downscaled: String,
}

/// A tracker entry that is not `{"lastDownscaled":"<RFC 3339>"}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the zone tracker's entry {key:?} is {value:?}, not {{\"lastDownscaled\":\"<RFC 3339 time>\"}}"
)]
pub struct MalformedTrackerEntry {
    pub key: String,
    pub value: String,
}

impl ZoneTracker {
    pub fn from_config_map(config_map: ConfigMap) -> Self {
        Self {
            resource_version: config_map.metadata.resource_version,
            data: config_map.data.unwrap_or_default(),
        }
    }

    /// When the tracker says `statefulset` was last downscaled.
    pub fn last_downscaled(
        &self,
        statefulset: &str,
    ) -> Result<Option<Timestamp>, MalformedTrackerEntry> {
        let Some(raw) = self.data.get(statefulset) else {
            return Ok(None);
        };
        serde_json::from_str::<TrackerEntry>(raw)
            .ok()
            .and_then(|entry| entry.last_downscaled.parse::<Timestamp>().ok())
            .map(Some)
            .ok_or_else(|| MalformedTrackerEntry {
                key: statefulset.to_owned(),
                value: raw.clone(),
            })
    }

    /// The malformed entries of `statefulsets` (a group's members), to warn about each. Only
    /// theirs: the tracker is written by anyone who may edit ConfigMaps in the namespace and
    /// can hold any number of keys, which no admission or pass should parse or log.
    pub fn malformed<'a>(
        &self,
        statefulsets: impl IntoIterator<Item = &'a str>,
    ) -> Vec<MalformedTrackerEntry> {
        statefulsets
            .into_iter()
            .filter_map(|name| self.last_downscaled(name).err())
            .collect()
    }
}

/// The value the Go operator writes for a downscale at `at`: RFC 3339 in whole seconds, which
/// its parser reads.
pub fn tracker_value(at: Timestamp) -> String {
    let entry = TrackerEntry {
        last_downscaled: at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    };
    serde_json::to_string(&entry).unwrap_or_default()
}

/// Which record a last downscale comes from, to say so in a denial or a hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Ledger,
    ZoneTracker,
    Annotation,
    /// A malformed tracker entry: taken as a downscale now, so it never allows what a
    /// well-formed entry could deny.
    MalformedTracker(MalformedTrackerEntry),
}

/// A StatefulSet's last downscale and the record that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastDownscale {
    pub at: Timestamp,
    pub source: Source,
}

impl LastDownscale {
    /// How a denial or a hold names it: "was downscaled at …" or why it is taken as now.
    pub fn describe(&self, statefulset: &str) -> String {
        let at = self.at.strftime("%Y-%m-%d %H:%M:%S +0000 UTC");
        match &self.source {
            Source::MalformedTracker(malformed) => {
                format!("statefulset {statefulset} counts as downscaled at {at}: {malformed}")
            }
            Source::Ledger | Source::ZoneTracker | Source::Annotation => {
                format!("statefulset {statefulset} was downscaled at {at}")
            }
        }
    }
}

/// The records a group's last downscales are read from, and how long an approved downscale
/// may take to land ([`Entry::judge`]).
#[derive(Debug, Clone, Copy)]
pub struct Records<'a> {
    pub ledger: &'a Ledger,
    pub tracker: &'a ZoneTracker,
    pub claim_grace: Duration,
}

/// When `statefulset` was last downscaled: the newest of its ledger entry (as judged on its
/// generation now), its tracker entry and its `grafana.com/last-downscale` annotation. An
/// unreadable ledger entry or annotation is an error naming it (min-time cannot be judged), and
/// so is a time further ahead than [`MAX_CLOCK_SKEW`]; a malformed tracker entry counts as a
/// downscale `now` ([`Source::MalformedTracker`]).
pub fn last_downscale(
    statefulset: &StatefulSet,
    records: Records<'_>,
    now: Timestamp,
) -> Result<Option<LastDownscale>, String> {
    let name = statefulset.metadata.name.as_deref().unwrap_or("");
    let annotated = statefulset
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(LAST_DOWNSCALE_ANNOTATION))
        .map(|text| {
            text.parse::<Timestamp>().map_err(|error| {
                format!("can't parse {LAST_DOWNSCALE_ANNOTATION} annotation of {name}: {text:?}: {error}")
            })
        })
        .transpose()?;
    let recorded = records
        .ledger
        .last_downscale(
            name,
            statefulset.metadata.generation,
            now,
            records.claim_grace,
        )
        .map_err(|why| format!("the group's downscale ledger: {why}"))?;
    let tracked = match records.tracker.last_downscaled(name) {
        Ok(at) => at.map(|at| LastDownscale {
            at,
            source: Source::ZoneTracker,
        }),
        Err(malformed) => Some(LastDownscale {
            at: now,
            source: Source::MalformedTracker(malformed),
        }),
    };
    let candidates = [
        recorded.map(|at| LastDownscale {
            at,
            source: Source::Ledger,
        }),
        tracked,
        annotated.map(|at| LastDownscale {
            at,
            source: Source::Annotation,
        }),
    ];
    if let Some(future) = candidates
        .iter()
        .flatten()
        .find(|candidate| candidate.at > now + MAX_CLOCK_SKEW)
    {
        let record = match &future.source {
            Source::Ledger => "the group's downscale ledger",
            Source::ZoneTracker | Source::MalformedTracker(_) => "the zone tracker",
            Source::Annotation => LAST_DOWNSCALE_ANNOTATION,
        };
        return Err(format!(
            "{record} says {name} was downscaled at {}, more than {} after now ({now}): unreadable; correct or remove it",
            future.at,
            crate::duration::go::format(
                i64::try_from(MAX_CLOCK_SKEW.as_nanos()).unwrap_or(i64::MAX)
            ),
        ));
    }
    // The newest; on a tie the first (the ledger, then the tracker).
    Ok(candidates
        .into_iter()
        .flatten()
        .fold(None, |newest: Option<LastDownscale>, next| match newest {
            Some(newest) if newest.at >= next.at => Some(newest),
            _ => Some(next),
        }))
}

/// A pending claim in a ledger and what the controller should do about it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimFollowUp {
    /// It happened: copy it into the tracker and the annotation, then confirm it.
    Confirm { statefulset: String, entry: Entry },
    /// It did not happen: tell its pods to cancel, then put back what it replaced.
    Void { statefulset: String, entry: Entry },
    /// Not yet known: look again at `at`.
    Recheck { at: Timestamp },
}

/// What to do about each pending claim of `ledger`, given the group's StatefulSets now. Claims
/// of StatefulSets that are not in `members` are left alone (a StatefulSet deleted since, or not
/// yet in the cache).
pub fn follow_up_claims<'a>(
    ledger: &Ledger,
    members: impl IntoIterator<Item = &'a StatefulSet>,
    now: Timestamp,
    grace: Duration,
) -> Vec<ClaimFollowUp> {
    let mut follow_ups = Vec::new();
    for member in members {
        let name = member.metadata.name.as_deref().unwrap_or("");
        let Ok(Some(entry)) = ledger.entry(name) else {
            continue;
        };
        if !entry.pending {
            continue;
        }
        let statefulset = name.to_owned();
        match entry.judge(member.metadata.generation, now, grace) {
            crate::ledger::ClaimState::Happened => {
                follow_ups.push(ClaimFollowUp::Confirm { statefulset, entry });
            }
            crate::ledger::ClaimState::InFlight { until } => {
                follow_ups.push(ClaimFollowUp::Recheck { at: until });
            }
            crate::ledger::ClaimState::DidNotHappen => {
                follow_ups.push(ClaimFollowUp::Void { statefulset, entry });
            }
        }
    }
    follow_ups
}

/// The pods a claim told to prepare that are still there and stay: those whose index (ordinal
/// from `spec.ordinals.start`) is in `toReplicas..fromReplicas` and below `spec.replicas` now.
/// Chosen among the pods that exist, so a claim of any size costs what the StatefulSet has.
pub fn pods_to_cancel<'p>(
    entry: &Entry,
    statefulset: &StatefulSet,
    pods: impl IntoIterator<Item = &'p CachedPod>,
) -> Vec<&'p CachedPod> {
    let (Some(from), Some(to)) = (entry.from_replicas, entry.to_replicas) else {
        return Vec::new();
    };
    let state = StatefulSetState::of(statefulset);
    let staying = i64::from(from.min(state.replicas));
    let controls = Controls::of(statefulset);
    let mut cancel: Vec<&CachedPod> = pods
        .into_iter()
        .filter(|pod| controls.pod(pod))
        .filter(|pod| {
            pod_ordinal(&state.name, &pod.name).is_some_and(|ordinal| {
                let index = i64::from(ordinal) - i64::from(state.ordinals_start);
                (i64::from(to)..staying).contains(&index)
            })
        })
        .collect();
    cancel.sort_by(|a, b| a.name.cmp(&b.name));
    cancel
}

#[cfg(test)]
mod tests;
