//! Rollback: taking a bad version back out, zone by zone, under the same availability
//! guarantees as the rollout that brought it.
//!
//! How it goes:
//! 1. someone asks: a person with `kubectl baton rollback` (or by hand) sets
//!    [`ROLLBACK_ANNOTATION`] on every member, its value saying who and why (one member alone
//!    asks for nothing: [`request`]); or, opt-in, a health check whose `onFailure` is `Rollback`
//!    fails instead of halting ([`ask`]);
//! 2. the controller decides the rollback ([`start`], pure, from the members and their
//!    ControllerRevisions): each member goes back `from` its update revision `to` the revision it
//!    ran before this rollout (its current revision while the zone rolls; once the zone finished,
//!    the revision numbered before its update revision), in a **turn order**: the zones the
//!    rollout reached last go first (by their newest pod at the bad revision), zones it never
//!    reached last. It stores one [`RollbackRecord`] per member ([`ROLLBACK_STATE_ANNOTATION`], baton's own,
//!    guarded like its other state) and removes the request ([`starting`]: the writes and the
//!    Event, in order; the controller only reads the history first);
//! 3. the controller writes each member's pod template back from the `to` ControllerRevision
//!    (once: [`RollbackRecord::restored`]); the StatefulSet's update revision becomes `to`, so its pods
//!    at `from` are the ones to replace;
//! 4. the gate (`decide`) rolls them back: one zone at a time in turn order, each zone's pods
//!    newest first (the pods the rollout replaced last go first), with the planner's
//!    max-unavailable and one-zone-at-a-time rules. Soaks, health checks, approvals, batches,
//!    ramps and hooks do not hold a rollback; a person's `baton.dev/halted` does;
//! 5. once every member is done at `to`, the group has *rolled back*; the records stay (the
//!    status says so) until the template changes to anything else, when they are forgotten and
//!    that change rolls out as any other.
//!
//! A GitOps tool re-applying the bad template must not make baton and it fight: a member whose
//! template was restored, whose update revision was then seen at `to` ([`RollbackRecord::settled`], a
//! write of the gate) and is `from` again is **reverted**: the group holds, saying so, and
//! baton never writes the template twice. Putting the previous version in
//! Git (the template at `to`) lets the rollback go on; a new version rolls forward.
//!
//! Members updated by partition are refused: their pods go back by the partition, which this
//! does not drive; roll their template back in Git.

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::annotations::rollout::{UpdateBy, update_by};
use crate::explained::{Explanation, Severity};
use crate::rollout::GroupSnapshot;

pub use super::keys::ROLLBACK_ANNOTATION;
/// Annotation written by baton only: one member's rollback ([`RollbackRecord`], JSON).
pub use crate::annotations::ROLLBACK_STATE_ANNOTATION;

/// One member's rollback, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackRecord {
    /// The update revision rolled back from (the bad one).
    pub from: String,
    /// The revision rolled back to (what the member ran before the rollout).
    pub to: String,
    /// Who asked and why (the request's value).
    pub why: String,
    /// When it started (RFC 3339).
    pub at: String,
    /// Its place in the turn order: 0 goes first.
    pub turn: u32,
    /// The template was written back from `to` (never written twice).
    #[serde(default)]
    pub restored: bool,
    /// The StatefulSet took the template back: its update revision was seen at `to`. Only
    /// then is an update revision at `from` someone re-applying the bad template, not the
    /// StatefulSet controller catching up.
    #[serde(default)]
    pub settled: bool,
}

impl RollbackRecord {
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a struct of strings and numbers always serialises")
    }
}

/// One of a StatefulSet's ControllerRevisions: its name (the revision) and number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    pub name: String,
    pub number: i64,
}

/// Each member's ControllerRevisions (those it controls, by owner reference), by member name,
/// from `revisions` (any of the namespace's).
pub fn history(
    members: &[&k8s_openapi::api::apps::v1::StatefulSet],
    revisions: &[k8s_openapi::api::apps::v1::ControllerRevision],
) -> BTreeMap<String, Vec<Revision>> {
    members
        .iter()
        .map(|member| {
            let owned = revisions
                .iter()
                .filter(|revision| is_revision_of(revision, member))
                .map(|revision| Revision {
                    name: revision.metadata.name.clone().unwrap_or_default(),
                    number: revision.revision,
                })
                .collect();
            (member.metadata.name.clone().unwrap_or_default(), owned)
        })
        .collect()
}

/// Whether `revision` is one of `member`'s own: controlled by it (the StatefulSet controller's
/// owner reference, by uid). A template is only ever written back from one: a record's `to`
/// names a revision, and one of another StatefulSet's (or one a person made) is never baton's
/// to copy into this one.
pub fn is_revision_of(
    revision: &k8s_openapi::api::apps::v1::ControllerRevision,
    member: &k8s_openapi::api::apps::v1::StatefulSet,
) -> bool {
    let Some(uid) = member.metadata.uid.as_deref().filter(|uid| !uid.is_empty()) else {
        return false;
    };
    revision
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

/// What [`start`] decided, as people read it: each member from what to what, in turn order.
pub fn describe(records: &[(String, RollbackRecord)]) -> String {
    let steps: Vec<String> = records
        .iter()
        .map(|(name, record)| format!("{name} from {} to {}", record.from, record.to))
        .collect();
    steps.join(", then ")
}

/// Why a rollback cannot start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub statefulset: String,
    pub why: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "cannot roll back StatefulSet {}: {}",
            self.statefulset, self.why
        )
    }
}

/// The request to roll back, when every member carries one: (the first member, its value). One
/// member alone speaks for nobody: whoever may create a StatefulSet with the group's label,
/// without any right on its members, must not have baton rewrite their templates.
pub fn request(group: &GroupSnapshot) -> Option<(&str, &str)> {
    // The group rule (crate::annotations::group): a request loosens nothing, but rewrites
    // every member's template, so it needs every member's word.
    if !super::keys::ROLLBACK_REQUEST
        .of_group(group, |_| true)
        .value
    {
        return None;
    }
    let first = group.statefulsets.first()?;
    let why = first.annotations.get(ROLLBACK_ANNOTATION)?;
    Some((first.name.as_str(), why.as_str()))
}

/// The members carrying a rollback request, whether or not every member does.
pub fn requesters(group: &GroupSnapshot) -> Vec<&str> {
    group
        .statefulsets
        .iter()
        .filter(|member| member.annotations.contains_key(ROLLBACK_ANNOTATION))
        .map(|member| member.name.as_str())
        .collect()
}

/// The writes that ask for a rollback of `group` with `why`: the request on every member (what
/// [`request`] takes), as `kubectl baton rollback` writes it and a failing check or hook does.
pub fn ask(group: &GroupSnapshot, why: &str) -> Vec<super::decision::AnnotationWrite> {
    group
        .statefulsets
        .iter()
        .map(|member| super::decision::AnnotationWrite {
            statefulset: member.name.clone(),
            key: ROLLBACK_ANNOTATION,
            value: Some(why.to_owned()),
        })
        .collect()
}

/// Decides a rollback of `group` (see the module header), from each member's ControllerRevisions
/// (`history`, by member name), asked for with `why` at `now`: the record to store on each
/// member. Pure.
pub fn start(
    group: &GroupSnapshot,
    history: &BTreeMap<String, Vec<Revision>>,
    why: &str,
    now: Timestamp,
) -> Result<Vec<(String, RollbackRecord)>, Refused> {
    let refuse = |statefulset: &str, why: String| Refused {
        statefulset: statefulset.to_owned(),
        why,
    };
    let mut members = Vec::new();
    for member in &group.statefulsets {
        let name = member.name.as_str();
        if update_by(&member.annotations).value == UpdateBy::Partition {
            return Err(refuse(
                name,
                "it is updated by partition; roll its template back in Git".to_owned(),
            ));
        }
        let Some(from) = member.update_revision.clone() else {
            return Err(refuse(name, "it has no update revision yet".to_owned()));
        };
        let to = match member
            .current_revision
            .clone()
            .filter(|current| *current != from)
        {
            Some(current) => current,
            None => {
                let revisions = history.get(name).map(Vec::as_slice).unwrap_or_default();
                let number = revisions
                    .iter()
                    .find(|revision| revision.name == from)
                    .map(|revision| revision.number)
                    .ok_or_else(|| {
                        refuse(name, format!("its ControllerRevision {from} is not found"))
                    })?;
                revisions
                    .iter()
                    .filter(|revision| revision.number < number)
                    .max_by_key(|revision| revision.number)
                    .map(|revision| revision.name.clone())
                    .ok_or_else(|| {
                        refuse(
                            name,
                            format!("it has no revision before {from} to go back to"),
                        )
                    })?
            }
        };
        // When the rollout reached the zone last: its newest pod at `from`.
        let at_from = member
            .pods
            .iter()
            .filter(|pod| pod.revision.as_deref() == Some(from.as_str()));
        let reached = at_from.clone().next().is_some();
        let newest = at_from.filter_map(|pod| pod.created_at).max();
        members.push((name.to_owned(), from, to, reached, newest));
    }
    // The turn order: reached zones, the one with the newest pod at `from` first (reverse member
    // order when creation times do not tell), then the zones the rollout never reached.
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| {
        let (_, _, _, reached_a, newest_a) = &members[a];
        let (_, _, _, reached_b, newest_b) = &members[b];
        reached_b
            .cmp(reached_a)
            .then(newest_b.cmp(newest_a))
            .then(b.cmp(&a))
    });
    let at = now.to_string();
    // Stored on every member: a request's value (anyone who may edit the group writes it) is
    // kept to a size that fits, whatever its length.
    let why = bounded(why);
    Ok(order
        .into_iter()
        .enumerate()
        .map(|(turn, index)| {
            let (name, from, to, _, _) = &members[index];
            let record = RollbackRecord {
                from: from.clone(),
                to: to.clone(),
                why: why.clone(),
                at: at.clone(),
                turn: u32::try_from(turn).unwrap_or(u32::MAX),
                restored: false,
                settled: false,
            };
            (name.clone(), record)
        })
        .collect())
}

/// What starting a rollback writes and tells ([`starting`]), in order: the records first,
/// conditioned on the versions the pass read (a member changed meanwhile ends the pass and the
/// next one starts it again), then the request's removal from every member carrying it, then
/// the Event. Until the request is gone, a reader seeing some records only knows the rollback
/// is starting, and a failed write loses nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Starting {
    /// Each member's [`RollbackRecord`] ([`ROLLBACK_STATE_ANNOTATION`]); empty when refused.
    pub records: Vec<super::decision::AnnotationWrite>,
    /// The request removed from every member carrying it, whatever their versions now (the
    /// records' write just moved them): a request written meanwhile would be refused as a
    /// second one anyway.
    pub remove_request: Vec<super::decision::AnnotationWrite>,
    /// Told once the request is removed: on the zone the rollback starts with, or when
    /// refused, on the first member asking.
    pub told_on: String,
    pub explanation: Explanation,
    /// The zone the rollback starts with; `None` when refused.
    pub first: Option<String>,
}

/// Decides what starting the rollback of `group_name` asked for with `why` writes and tells
/// ([`Starting`]), from the members' ControllerRevisions (`history`), or when the pass refused
/// before reading them, why. `carrier` is the first member asking. Pure.
pub fn starting(
    group_name: &str,
    group: &GroupSnapshot,
    history: Result<&BTreeMap<String, Vec<Revision>>, &str>,
    carrier: &str,
    why: &str,
    now: Timestamp,
) -> Starting {
    let remove_request = requesters(group)
        .into_iter()
        .map(|statefulset| super::decision::AnnotationWrite {
            statefulset: statefulset.to_owned(),
            key: ROLLBACK_ANNOTATION,
            value: None,
        })
        .collect();
    let decided = match history {
        Err(refused) => Err(refused.to_owned()),
        Ok(history) => start(group, history, why, now).map_err(|refused| refused.to_string()),
    };
    match decided {
        Err(refused) => Starting {
            records: Vec::new(),
            remove_request,
            told_on: carrier.to_owned(),
            explanation: Explanation {
                severity: Severity::Warning,
                reason: "RollbackRefused".to_owned(),
                action: "Rollback".to_owned(),
                note: format!("{refused}; the request is removed"),
            },
            first: None,
        },
        Ok(records) => {
            let order = describe(&records);
            let first = records
                .first()
                .map_or_else(|| carrier.to_owned(), |(name, _)| name.clone());
            let records = records
                .into_iter()
                .map(|(statefulset, record)| super::decision::AnnotationWrite {
                    statefulset,
                    key: ROLLBACK_STATE_ANNOTATION,
                    value: Some(record.to_annotation()),
                })
                .collect();
            Starting {
                records,
                remove_request,
                told_on: first.clone(),
                explanation: Explanation {
                    severity: Severity::Normal,
                    reason: "RollbackStarted".to_owned(),
                    action: "Rollback".to_owned(),
                    note: format!(
                        "rolling back rollout group {group_name}, in this order: {order} — asked: \
                         {why}"
                    ),
                },
                first: Some(first),
            }
        }
    }
}

/// The most of a request's reason kept in the records, in characters.
pub const MOST_WHY_CHARS: usize = 1_000;

fn bounded(why: &str) -> String {
    match why.char_indices().nth(MOST_WHY_CHARS) {
        None => why.to_owned(),
        Some((cut, _)) => format!("{}…", &why[..cut]),
    }
}

/// Where a group's rollback stands, from its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// No rollback.
    None,
    /// Templates to write back (the controller's part: those not `restored`), or written back
    /// and not yet taken by the StatefulSet controller.
    Restoring(Vec<(String, RollbackRecord)>),
    /// Pods to roll back, zones in this turn order.
    RollingBack(Vec<String>),
    /// `zone`'s template went back to `from` after baton restored it.
    Reverted {
        zone: String,
        record: RollbackRecord,
    },
    /// Every member runs `to`: rolled back. The records say from what and why.
    RolledBack(RollbackRecord),
    /// The template moved on: forget the records on these members.
    Stale(Vec<String>),
}

/// The group's rollback records, by member, in member order (unreadable ones left out).
pub fn records(group: &GroupSnapshot) -> Vec<(String, RollbackRecord)> {
    group
        .statefulsets
        .iter()
        .filter_map(|member| {
            let raw = member.annotations.get(ROLLBACK_STATE_ANNOTATION)?;
            let record = serde_json::from_str::<RollbackRecord>(raw).ok()?;
            Some((member.name.clone(), record))
        })
        .collect()
}

/// Where the rollback stands (pure). `done(member)` says whether a member is fully updated to
/// its update revision and available (the planner's progress).
pub fn status(group: &GroupSnapshot, done: impl Fn(&str) -> bool) -> Status {
    let records = records(group);
    if records.is_empty() {
        return Status::None;
    }
    let carriers: Vec<String> = group
        .statefulsets
        .iter()
        .filter(|member| member.annotations.contains_key(ROLLBACK_STATE_ANNOTATION))
        .map(|member| member.name.clone())
        .collect();
    let update = |name: &str| {
        group
            .statefulsets
            .iter()
            .find(|member| member.name == name)
            .and_then(|member| member.update_revision.as_deref())
    };
    // Every member has a record, and each member's template is at its `from` or `to`:
    // otherwise the template moved on (or the records are incomplete): forget them.
    let complete = group
        .statefulsets
        .iter()
        .all(|member| records.iter().any(|(name, _)| *name == member.name));
    let current = records.iter().all(|(name, record)| {
        update(name).is_some_and(|revision| revision == record.from || revision == record.to)
    });
    if !complete && request(group).is_some() {
        // Being started: the controller stores every member's record before it removes the
        // request, so records missing while the request stands are still to come.
        return Status::None;
    }
    if !complete || !current {
        return Status::Stale(carriers);
    }
    if let Some((zone, record)) = records
        .iter()
        .find(|(name, record)| record.settled && update(name) == Some(record.from.as_str()))
    {
        return Status::Reverted {
            zone: zone.clone(),
            record: record.clone(),
        };
    }
    let restoring: Vec<(String, RollbackRecord)> = records
        .iter()
        .filter(|(name, _)| update(name) == Some(record_from(&records, name)))
        .cloned()
        .collect();
    if !restoring.is_empty() {
        return Status::Restoring(restoring);
    }
    let mut order: Vec<&(String, RollbackRecord)> = records.iter().collect();
    order.sort_by_key(|(_, record)| record.turn);
    let left: Vec<String> = order
        .iter()
        .filter(|(name, _)| !done(name))
        .map(|(name, _)| name.clone())
        .collect();
    if left.is_empty() {
        return Status::RolledBack(order[0].1.clone());
    }
    Status::RollingBack(left)
}

/// Why a new request cannot start a rollback now (one is under way, or the group rolled back
/// already: a second rollback would roll forward to the bad revision), if it cannot.
pub fn refuse_request(group: &str, status: &Status) -> Option<String> {
    match status {
        Status::Restoring(_) | Status::RollingBack(_) | Status::Reverted { .. } => {
            Some(format!("rollout group {group} is rolling back already"))
        }
        Status::RolledBack(record) => Some(format!(
            "rollout group {group} is rolled back already (from {}); change the template to \
             roll forward",
            record.from
        )),
        Status::None | Status::Stale(_) => None,
    }
}

fn record_from<'r>(records: &'r [(String, RollbackRecord)], name: &str) -> &'r str {
    records
        .iter()
        .find(|(member, _)| member == name)
        .map_or("", |(_, record)| record.from.as_str())
}

/// The writes that mark records settled: restored members whose update revision is `to`.
pub fn settle(group: &GroupSnapshot) -> Vec<super::decision::AnnotationWrite> {
    records(group)
        .into_iter()
        .filter(|(name, record)| {
            record.restored
                && !record.settled
                && group.statefulsets.iter().any(|member| {
                    member.name == *name && member.update_revision.as_deref() == Some(&record.to)
                })
        })
        .map(|(statefulset, record)| super::decision::AnnotationWrite {
            statefulset,
            key: ROLLBACK_STATE_ANNOTATION,
            value: Some(
                RollbackRecord {
                    settled: true,
                    ..record
                }
                .to_annotation(),
            ),
        })
        .collect()
}

/// Whether a rollback holds the group's other gates off (restoring, rolling back, reverted).
pub fn active(status: &Status) -> bool {
    matches!(
        status,
        Status::Restoring(_) | Status::RollingBack(_) | Status::Reverted { .. }
    )
}

#[cfg(test)]
mod tests;
