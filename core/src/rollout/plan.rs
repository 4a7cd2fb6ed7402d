//! The rollout planner's walk: from a snapshot of one group, what to do next and, if nothing can
//! be done, why (the answer's types and their wording are [`super::model`]). A pure function, so
//! that every rule of docs/compatibility.md's "Rollout algorithm" can be unit tested and the
//! guarantees users rely on can be checked by simulation.
//!
//! The walk, in short (docs/compatibility.md, with baton's changes):
//! 1. a member that is not `OnDelete` → the whole group is left alone;
//! 2. more than one not-ready member → wait (free replacements aside, below); exactly one → it
//!    goes first;
//! 3. walk the members in order: delete the lowest-ordinal pods not at the update revision, at
//!    most `max-unavailable - not-ready` of them; stop at a member that had deletions or is not
//!    ready; mark a finished member's currentRevision; paused members are treated as done.
//!
//! **Free replacements** (where the Go operator waits forever on a crash-looping old pod): an outdated
//! pod that is *already unavailable* (by `availability`, the same rule that counts
//! unavailable pods: not Running, not Ready, Ready for less than minReadySeconds; a terminating
//! pod is not deleted again) is deleted first and outside the budget. Its replacement is
//! unavailable until it becomes ready, so the count of unavailable pods does not rise; a
//! rollout that fixes a crash-looping pod can then complete. It does not free budget either:
//! the budget for available pods is still `max-unavailable - not-ready`, the unavailable pod
//! included, since its replacement counts until it is ready.
//!
//! Where: an unavailable pod makes its member not ready, so free replacements are in
//! not-ready members. With one not-ready member, it is the one the walk works on (it goes
//! first). With several (`MultipleNotReady`), each one's unavailable outdated pods are replaced
//! too, but only while no pod at an update revision is unavailable anywhere in the group:
//! while a new pod is starting or failing, the new version is unproven and must not spread to
//! other zones, and a pod down only *transiently* elsewhere is not restarted while a zone is
//! down because of baton. Without that exception, a broken version crash-looping in several
//! zones would hold its own fix forever. Available pods never move while another member is not
//! ready. Paused members get none (hands off), and pods outside spec.replicas are not
//! "replaced" (nothing recreates them), so they follow the budget.

use std::cmp::{Ordering, Reverse};

use crate::annotations::group::{EVERY_MEMBER_ACCEPTED, MAX_ROLLING_MEMBERS};
use crate::annotations::rollout::{UpdateBy, max_rolling_members, partition_set, update_by};
use crate::annotations::{InvalidAnnotation, max_unavailable, paused};
use crate::annotations::{MAX_ROLLING_MEMBERS_ANNOTATION, UPDATE_BY_ANNOTATION};
use jiff::Timestamp;

use super::model::{
    Action, Order, Plan, PodRevision, Progress, Released, Unavailable, UnavailablePod, WaitReason,
    Warning,
};
use super::snapshot::{
    GroupSnapshot, PodSnapshot, StatefulSetSnapshot, UpdateStrategy, natural_cmp, pod_ordinal,
};

/// Plans the next step of a group's rollout. Pure: the same snapshot and `now` give the same
/// plan. `now` only serves spec.minReadySeconds (see [`Plan::recheck_after`]).
pub fn plan(group: &GroupSnapshot, now: Timestamp) -> Plan {
    plan_in_order(group, now, Order::Rollout)
}

/// [`plan()`], each member's pods going in `order`.
pub fn plan_in_order(group: &GroupSnapshot, now: Timestamp, order: Order) -> Plan {
    let members: Vec<Member<'_>> = group
        .statefulsets
        .iter()
        .map(|statefulset| Member::assess(statefulset, now, order))
        .collect();
    let (max_rolling, rolling_warnings) = group_max_rolling(group);
    let mut plan = Plan {
        actions: Vec::new(),
        waiting: None,
        warnings: members
            .iter()
            .flat_map(|member| member.warnings.iter().cloned())
            .chain(rolling_warnings)
            .collect(),
        progress: members.iter().map(Member::progress).collect(),
        recheck_after: members
            .iter()
            .filter_map(|member| member.available_at)
            .min(),
    };
    plan.waiting = walk(&members, max_rolling, &mut plan.actions);
    plan
}

/// How many members may be not ready at once, by the group rule
/// ([`crate::annotations::group`]): more than 1 (the zone rule) only when every member says so,
/// then the smallest. A warning per bad value (read as 1), and one per member whose value does
/// not count, naming the members without one.
fn group_max_rolling(group: &GroupSnapshot) -> (u32, Vec<Warning>) {
    if !MAX_ROLLING_MEMBERS.carried_in(group) {
        return (MAX_ROLLING_MEMBERS.absent, Vec::new());
    }
    let mut warnings = Vec::new();
    let readings = group.statefulsets.iter().map(|statefulset| {
        let carried = max_rolling_members(&statefulset.annotations).map(|parsed| {
            if let Some(problem) = parsed.warning {
                warnings.push(Warning::InvalidAnnotation {
                    statefulset: statefulset.name.clone(),
                    problem,
                });
            }
            let raw = &statefulset.annotations[MAX_ROLLING_MEMBERS_ANNOTATION];
            (raw.as_str(), parsed.value)
        });
        (statefulset.name.as_str(), carried)
    });
    let combined = MAX_ROLLING_MEMBERS.combine(readings);
    warnings.extend(
        combined
            .overruled
            .iter()
            .map(|reading| Warning::InvalidAnnotation {
                statefulset: reading.statefulset.to_owned(),
                problem: InvalidAnnotation {
                    key: MAX_ROLLING_MEMBERS_ANNOTATION,
                    value: reading.raw.unwrap_or_default().to_owned(),
                    accepted: EVERY_MEMBER_ACCEPTED,
                    fallback: format!("using {}", combined.instead(combined.value)),
                },
            }),
    );
    (combined.value, warnings)
}

/// Walks the members (docs/compatibility.md steps 1 to 6), pushing actions; returns why it
/// stopped. At most `max_rolling` members are not ready at once (1: the zone rule); the
/// deletions of one pass are still of one member.
fn walk(members: &[Member<'_>], max_rolling: u32, actions: &mut Vec<Action>) -> Option<WaitReason> {
    // A member whose cluster cannot be read is only known as it was: every rule below reads
    // the other members' readiness, and its own could have changed since. Nothing goes.
    if let Some((statefulset, unreachable)) = members.iter().find_map(|member| {
        let statefulset = member.statefulset;
        statefulset
            .unreachable
            .as_ref()
            .map(|why| (statefulset, why))
    }) {
        return Some(WaitReason::MemberUnreachable {
            statefulset: statefulset.name.clone(),
            cluster: unreachable.cluster.clone(),
            error: unreachable.error.clone(),
        });
    }
    if let Some(member) = members.iter().find(|member| {
        member.mode == Mode::Delete
            && member.statefulset.update_strategy != UpdateStrategy::OnDelete
    }) {
        return Some(WaitReason::NonOnDeleteMember {
            statefulset: member.statefulset.name.clone(),
            strategy: member.statefulset.update_strategy.clone(),
        });
    }
    // A partition someone else moved: whatever baton did next could fight them.
    if let Some((member, set)) = members.iter().find_map(|member| match member.mode {
        Mode::Partition {
            moved_from: Some(set),
            ..
        } => Some((member, set)),
        _ => None,
    }) {
        return Some(WaitReason::PartitionMoved {
            statefulset: member.statefulset.name.clone(),
            set,
            found: member.statefulset.partition,
        });
    }

    // Every judgement below reads statuses: one that describes an older spec could make a zone
    // whose template just changed look complete and start the next one first.
    if let Some((statefulset, lag)) = members.iter().find_map(|member| {
        let statefulset = member.statefulset;
        statefulset.status_lag.map(|lag| (statefulset, lag))
    }) {
        return Some(WaitReason::StatusBehindSpec {
            statefulset: statefulset.name.clone(),
            generation: lag.generation,
            observed_generation: lag.observed_generation,
        });
    }

    let not_ready: Vec<&Member<'_>> = members
        .iter()
        .filter(|member| member.unreadiness.is_some())
        .collect();
    if not_ready.len() > usize::try_from(max_rolling).unwrap_or(usize::MAX) {
        // Every not-ready member is down on its own, unless a new pod is still unproven
        // somewhere: then wait for it, as before. Otherwise waiting may never end (a broken
        // version crash-looping in several zones), and replacing pods that are down costs
        // nothing (module header).
        if !members.iter().any(|member| member.unproven) {
            let free: Vec<Action> = not_ready
                .iter()
                .filter(|member| !member.paused)
                .flat_map(|member| member.free_replacements(false))
                .collect();
            if !free.is_empty() {
                actions.extend(free);
                return None;
            }
        }
        return Some(WaitReason::MultipleNotReady {
            statefulsets: not_ready
                .iter()
                .map(|member| member.statefulset.name.clone())
                .collect(),
        });
    }
    // The not-ready members go first: no other member may roll before one of them is ready.
    let mut order: Vec<&Member<'_>> = members.iter().collect();
    order.sort_by_key(|member| Reverse(member.unreadiness.is_some()));

    // Members not ready (or waiting on themselves) met so far, and the first one's reason: each
    // takes one of the `max_rolling` places; the walk stops once none is left.
    let mut holding = Holding {
        left: max_rolling.max(1),
        first: None,
    };
    let mut paused_with_updates = Vec::new();
    for member in order {
        let statefulset = member.statefulset;
        if member.paused {
            // Paused means "no deletions here, move on", never "ignore its unavailability".
            if let Some(reason) = &member.unreadiness {
                match holding.hold(reason.clone()) {
                    Some(reason) => return Some(reason),
                    None => continue,
                }
            }
            if !member.to_update.is_empty() {
                paused_with_updates.push(statefulset.name.clone());
            }
            continue;
        }
        let Some(update_revision) = &statefulset.update_revision else {
            return Some(WaitReason::NoUpdateRevision {
                statefulset: statefulset.name.clone(),
            });
        };
        if let Mode::Partition { partition, .. } = member.mode {
            match member.roll_by_partition(partition) {
                Turn::Acted(taken) => {
                    actions.extend(taken);
                    return None;
                }
                Turn::Waits(reason) => match holding.hold(reason) {
                    Some(reason) => return Some(reason),
                    None => continue,
                },
                Turn::Done(hold) => {
                    actions.extend(hold);
                    continue;
                }
            }
        }
        if !member.to_update.is_empty() {
            // The budget counts every unavailable pod, free replacements included: their
            // replacements are unavailable too until ready.
            let budget = member.max_unavailable.saturating_sub(member.not_ready);
            // Already unavailable: replaced first, at no cost (see the module header).
            let free = member.free_replacements(true);
            // Terminating pods already count as not ready and are on their way out.
            let budgeted = member
                .to_update
                .iter()
                .filter(|outdated| {
                    !outdated.pod.terminating && outdated.free_replacement().is_none()
                })
                .take(usize::try_from(budget).unwrap_or(usize::MAX))
                .map(|outdated| member.delete(outdated, None));
            let deletions: Vec<Action> = free.into_iter().chain(budgeted).collect();
            if !deletions.is_empty() {
                actions.extend(deletions);
                return None;
            }
            if budget == 0 {
                let reason = WaitReason::MaxUnavailable {
                    statefulset: statefulset.name.clone(),
                    not_ready: member.not_ready,
                    max_unavailable: member.max_unavailable,
                    waiting_for: member.waiting_for.clone(),
                };
                match holding.hold(reason) {
                    Some(reason) => return Some(reason),
                    None => continue,
                }
            }
            // Every pod left to update is terminating, so the member cannot be ready.
        }
        if let Some(reason) = &member.unreadiness {
            match holding.hold(reason.clone()) {
                Some(reason) => return Some(reason),
                None => continue,
            }
        }
        if member.to_update.is_empty()
            && statefulset.current_revision.as_ref() != Some(update_revision)
        {
            actions.push(Action::SetCurrentRevision {
                statefulset: statefulset.name.clone(),
                revision: update_revision.clone(),
            });
        }
    }
    if let Some(first) = holding.first {
        return Some(first);
    }
    if paused_with_updates.is_empty() {
        None
    } else {
        Some(WaitReason::Paused {
            statefulsets: paused_with_updates,
        })
    }
}

/// The places of members not ready in one walk.
struct Holding {
    left: u32,
    first: Option<WaitReason>,
}

impl Holding {
    /// A member is not ready for `reason`: it takes a place. The walk stops (with the first
    /// member's reason) once none is left, else it goes on to the next member.
    fn hold(&mut self, reason: WaitReason) -> Option<WaitReason> {
        self.left = self.left.saturating_sub(1);
        let first = self.first.get_or_insert(reason);
        (self.left == 0).then(|| first.clone())
    }
}

/// One StatefulSet, assessed once per plan.
struct Member<'a> {
    statefulset: &'a StatefulSetSnapshot,
    mode: Mode,
    max_unavailable: u32,
    paused: bool,
    warnings: Vec<Warning>,
    /// Pods not at the update revision, in the planner's [`Order`] (empty without update
    /// revision).
    to_update: Vec<Outdated<'a>>,
    /// The unavailable pod to name when the member holds the group.
    waiting_for: Option<UnavailablePod>,
    /// A pod at the update revision is unavailable: a new pod not (yet) proven ready.
    unproven: bool,
    /// How many pods count against max-unavailable: the worst of what the pods and the
    /// status say, missing pods included.
    not_ready: u32,
    /// Why the StatefulSet is not ready (None when it is).
    unreadiness: Option<WaitReason>,
    /// Pods in range at the update revision and not terminating.
    updated: u32,
    /// Pods in range that are available.
    available: u32,
    /// When the first Ready-but-too-young pod becomes available.
    available_at: Option<Timestamp>,
}

/// How a member's pods are replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// baton deletes them (`OnDelete`).
    Delete,
    /// baton lowers the partition and the StatefulSet controller replaces them.
    Partition {
        /// spec's partition, at most spec.replicas.
        partition: u32,
        /// The partition baton set, when the spec has another (someone else moved it).
        moved_from: Option<u32>,
    },
}

/// What a member rolled by partition does on its turn.
enum Turn {
    /// These actions take pods down: the walk stops here.
    Acted(Vec<Action>),
    Waits(WaitReason),
    /// Nothing to roll here (these actions only hold the partition): on to the next member.
    Done(Vec<Action>),
}

/// Which unavailable pod a wait names: not terminating first, then at the update revision
/// (the new version failing is what a person must look at), then the lowest ordinal.
type NamingOrder = (bool, bool, Option<u32>);

/// A pod not at the update revision.
struct Outdated<'a> {
    ordinal: Option<u32>,
    /// Its ordinal minus spec.ordinals.start.
    index: Option<u32>,
    pod: &'a PodSnapshot,
    /// Its ordinal is one of spec.replicas': the StatefulSet controller recreates it.
    wanted: bool,
    /// Why it is unavailable (None: available).
    unavailable: Option<Unavailable>,
}

impl Outdated<'_> {
    /// Why replacing this pod costs nothing, if it does: it is already unavailable, not
    /// terminating (that one is on its way out), and will be recreated. A pod Ready for less
    /// than minReadySeconds is not down: it serves (it is in its Service's endpoints) and is
    /// only not counted on yet, so deleting it would take a serving pod out; it is waited for
    /// (and counted as unavailable meanwhile), never replaced for free. Otherwise every pod of
    /// a group whose template changed within minReadySeconds of its pods becoming Ready would
    /// go at once, in every zone.
    fn free_replacement(&self) -> Option<Unavailable> {
        self.unavailable.clone().filter(|why| {
            self.wanted
                && !matches!(
                    why,
                    Unavailable::Terminating | Unavailable::ReadyTooRecently
                )
        })
    }
}

/// Whether a pod can be counted on. The one rule for "unavailable": counting unavailable
/// pods, free replacements and messages all use it.
enum Availability {
    Available,
    /// Ready, but not yet for minReadySeconds: available from then on.
    From(Timestamp),
    Unavailable(Unavailable),
}

impl Availability {
    fn unavailable(&self) -> Option<Unavailable> {
        match self {
            Self::Available => None,
            Self::From(_) => Some(Unavailable::ReadyTooRecently),
            Self::Unavailable(why) => Some(why.clone()),
        }
    }
}

/// Why `pod` is not available at `now`, if it is not: the planner's rule (`availability`),
/// for callers that describe a rollout rather than plan one.
pub fn unavailable(
    pod: &PodSnapshot,
    min_ready_seconds: u32,
    now: Timestamp,
) -> Option<Unavailable> {
    availability(pod, min_ready_seconds, now).unavailable()
}

/// The shared rule ([`crate::pods::PodReadiness::availability`], by which
/// prepare-downscale judges the other zones too), with the container's reason when it has one.
fn availability(pod: &PodSnapshot, min_ready_seconds: u32, now: Timestamp) -> Availability {
    use crate::pods::{Availability as Rule, NotAvailable};
    let container = || pod.container_state.clone().map(Unavailable::Container);
    match pod.readiness().availability(min_ready_seconds, now) {
        Rule::Available => Availability::Available,
        Rule::From(from) => Availability::From(from),
        Rule::Unavailable(NotAvailable::Terminating) => {
            Availability::Unavailable(Unavailable::Terminating)
        }
        Rule::Unavailable(NotAvailable::Phase(phase)) => {
            Availability::Unavailable(container().unwrap_or(Unavailable::Phase(phase)))
        }
        Rule::Unavailable(NotAvailable::NotReady) => {
            Availability::Unavailable(container().unwrap_or(Unavailable::NotReady))
        }
    }
}

impl<'a> Member<'a> {
    /// Reads one StatefulSet once for the walk, in four steps: its annotations
    /// ([`Settings::read`]), its pods counted ([`Census::take`]), the outdated ones put in
    /// `order` ([`sort_in_order`]), and why it is not ready, if it is not
    /// ([`Census::unreadiness`]).
    fn assess(statefulset: &'a StatefulSetSnapshot, now: Timestamp, order: Order) -> Self {
        let settings = Settings::read(statefulset);
        let mut census = Census::take(statefulset, now);
        sort_in_order(&mut census.to_update, order);
        let waiting_for = census.waiting_for.take().map(|(_, pod)| pod);
        let in_flight = in_flight(settings.mode, &census.to_update);
        let unreadiness = census.unreadiness(statefulset, waiting_for.as_ref(), in_flight);
        Self {
            statefulset,
            mode: settings.mode,
            max_unavailable: settings.max_unavailable,
            paused: settings.paused,
            warnings: settings.warnings,
            not_ready: census.not_ready(statefulset),
            to_update: census.to_update,
            waiting_for,
            unproven: census.unproven,
            unreadiness,
            updated: census.updated,
            available: census.available,
            available_at: census.available_at,
        }
    }

    fn delete(&self, outdated: &Outdated<'_>, unavailable: Option<Unavailable>) -> Action {
        Action::DeletePod {
            statefulset: self.statefulset.name.clone(),
            pod: outdated.pod.name.clone(),
            uid: outdated.pod.uid.clone(),
            unavailable,
        }
    }

    /// Deletions of the outdated pods that are already unavailable, lowest ordinal first.
    /// `lone`: this is the one member not ready (a partition may then release available pods
    /// too, see [`Self::partition_free_replacements`]).
    fn free_replacements(&self, lone: bool) -> Vec<Action> {
        if let Mode::Partition { partition, .. } = self.mode {
            return self.partition_free_replacements(partition, lone);
        }
        self.to_update
            .iter()
            .filter_map(|outdated| {
                let why = outdated.free_replacement()?;
                Some(self.delete(outdated, Some(why)))
            })
            .collect()
    }

    /// Free replacements by partition. The StatefulSet controller does not replace an
    /// unavailable pod by itself (it waits for it), and a deleted pod below the partition comes
    /// back at the old revision: so the partition is lowered to the lowest such pod and the
    /// unavailable pods are deleted. Lowering it also releases the outdated pods between,
    /// which the controller replaces afterwards: allowed only when they are all unavailable
    /// too, or when this member is the only one not ready and its controller is
    /// `OrderedReady` (it then takes one pod at a time, each once every pod is ready again).
    fn partition_free_replacements(&self, partition: u32, lone: bool) -> Vec<Action> {
        let free: Vec<(&Outdated<'_>, u32, Unavailable)> = self
            .to_update
            .iter()
            .filter_map(|outdated| Some((outdated, outdated.index?, outdated.free_replacement()?)))
            .collect();
        let Some(lowest) = free.iter().map(|(_, index, _)| *index).min() else {
            return Vec::new();
        };
        let mut actions = Vec::new();
        if lowest < partition {
            let releases = self.releases(lowest..partition);
            let all_free = releases
                .iter()
                .all(|release| free.iter().any(|(_, index, _)| *index == release.index));
            let one_at_a_time = lone && self.statefulset.ordered_ready;
            if !(all_free || one_at_a_time) {
                return Vec::new();
            }
            actions.push(Action::SetPartition {
                statefulset: self.statefulset.name.clone(),
                partition: lowest,
                releases,
            });
        }
        actions.extend(
            free.into_iter()
                .map(|(outdated, _, why)| self.delete(outdated, Some(why))),
        );
        actions
    }

    /// The outdated pods (not terminating) whose index is in `indexes`, highest first.
    fn releases(&self, indexes: std::ops::Range<u32>) -> Vec<Released> {
        let mut releases: Vec<Released> = self
            .to_update
            .iter()
            .filter(|outdated| !outdated.pod.terminating)
            .filter_map(|outdated| {
                let index = outdated.index.filter(|index| indexes.contains(index))?;
                Some(Released {
                    pod: outdated.pod.name.clone(),
                    index,
                })
            })
            .collect();
        releases.sort_by_key(|release| Reverse(release.index));
        releases
    }

    /// This member's turn, rolled by partition: free replacements first; while the
    /// StatefulSet controller replaces released pods, wait for it; else lower the partition
    /// past as many outdated pods as max-unavailable allows (highest index first, the
    /// controller's order). Once nothing is left to roll, the partition goes back to
    /// spec.replicas, so the next template change waits for baton.
    fn roll_by_partition(&self, partition: u32) -> Turn {
        let statefulset = self.statefulset;
        let expected = statefulset.spec_replicas;
        if !self.to_update.is_empty() {
            let free = self.free_replacements(true);
            if !free.is_empty() {
                return Turn::Acted(free);
            }
            let in_flight = self
                .to_update
                .iter()
                .filter(|outdated| outdated.index.is_some_and(|index| index >= partition))
                .count();
            if in_flight > 0 {
                // Not ready, or (otherwise ready) `PartitionRolling`: see `assess`.
                return Turn::Waits(self.unreadiness.clone().unwrap_or(
                    WaitReason::PartitionRolling {
                        statefulset: statefulset.name.clone(),
                        partition,
                        pods: u32::try_from(in_flight).unwrap_or(u32::MAX),
                    },
                ));
            }
            let budget = self.max_unavailable.saturating_sub(self.not_ready);
            if budget == 0 {
                return Turn::Waits(WaitReason::MaxUnavailable {
                    statefulset: statefulset.name.clone(),
                    not_ready: self.not_ready,
                    max_unavailable: self.max_unavailable,
                    waiting_for: self.waiting_for.clone(),
                });
            }
            let mut releases = self.releases(0..partition);
            releases.truncate(usize::try_from(budget).unwrap_or(usize::MAX));
            if let Some(last) = releases.last() {
                return Turn::Acted(vec![Action::SetPartition {
                    statefulset: statefulset.name.clone(),
                    partition: last.index,
                    releases,
                }]);
            }
            // Every pod left to update is terminating: the member cannot be ready yet.
        }
        if let Some(reason) = &self.unreadiness {
            return Turn::Waits(reason.clone());
        }
        let hold = (self.to_update.is_empty() && statefulset.partition < expected).then(|| {
            Action::SetPartition {
                statefulset: statefulset.name.clone(),
                partition: expected,
                releases: Vec::new(),
            }
        });
        Turn::Done(hold.into_iter().collect())
    }

    fn progress(&self) -> Progress {
        Progress {
            statefulset: self.statefulset.name.clone(),
            updated: self.updated,
            total: self.statefulset.spec_replicas,
            ready: self.available,
            done: self.statefulset.update_revision.is_some()
                && self.to_update.is_empty()
                && self.unreadiness.is_none(),
        }
    }
}

/// What a member's annotations say: how its pods are replaced, how many may be unavailable,
/// whether it is paused, and what a person should fix about them (a bad value falls back to
/// a safe default and is warned about).
struct Settings {
    mode: Mode,
    max_unavailable: u32,
    paused: bool,
    warnings: Vec<Warning>,
}

impl Settings {
    fn read(statefulset: &StatefulSetSnapshot) -> Self {
        let expected = statefulset.spec_replicas;
        let max_unavailable = max_unavailable(&statefulset.annotations, expected);
        let paused = paused(&statefulset.annotations);
        let mut invalid = Vec::new();
        let mut warn = |problem| invalid.push(problem);
        if let Some(problem) = max_unavailable.warning {
            warn(problem);
        }
        if let Some(problem) = paused.warning {
            warn(problem);
        }
        let update_by = update_by(&statefulset.annotations);
        if let Some(problem) = update_by.warning {
            warn(problem);
        }
        let set = partition_set(&statefulset.annotations);
        if let Some(problem) = set.warning {
            warn(problem);
        }
        let mode = match (update_by.value, &statefulset.update_strategy) {
            (UpdateBy::Partition, UpdateStrategy::RollingUpdate) => Mode::Partition {
                partition: statefulset.partition.min(expected),
                moved_from: set.value.filter(|set| *set != statefulset.partition),
            },
            (UpdateBy::Partition, strategy) => {
                warn(InvalidAnnotation {
                    key: UPDATE_BY_ANNOTATION,
                    value: "partition".to_owned(),
                    accepted: "\"partition\" on a RollingUpdate StatefulSet only",
                    fallback: format!("using delete (the StatefulSet is {strategy})"),
                });
                Mode::Delete
            }
            (UpdateBy::Delete, _) => Mode::Delete,
        };
        let mut warnings: Vec<Warning> = invalid
            .into_iter()
            .map(|problem| Warning::InvalidAnnotation {
                statefulset: statefulset.name.clone(),
                problem,
            })
            .collect();
        if let Mode::Partition {
            moved_from: Some(set),
            ..
        } = mode
        {
            warnings.push(Warning::PartitionMoved {
                statefulset: statefulset.name.clone(),
                set,
                found: statefulset.partition,
            });
        }
        Self {
            mode,
            max_unavailable: max_unavailable.value,
            paused: paused.value,
            warnings,
        }
    }
}

/// Where a member's pods stand, counted in one pass over them.
#[derive(Default)]
struct Census<'a> {
    /// Pods not at the update revision, in the order they were listed.
    to_update: Vec<Outdated<'a>>,
    /// Pods whose ordinal is one of spec.replicas'.
    in_range: u32,
    /// Pods outside spec.replicas (a scale-down under way).
    extra: u32,
    /// Pods not available, terminating ones included.
    unavailable: u32,
    /// Pods Ready, but not yet for minReadySeconds.
    too_young: u32,
    /// Pods in range at the update revision and not terminating.
    updated: u32,
    /// Pods in range that are available.
    available: u32,
    /// When the first Ready-but-too-young pod becomes available.
    available_at: Option<Timestamp>,
    /// A pod at the update revision is unavailable.
    unproven: bool,
    /// The unavailable pod a wait names, with the key it was chosen by.
    waiting_for: Option<(NamingOrder, UnavailablePod)>,
}

impl<'a> Census<'a> {
    fn take(statefulset: &'a StatefulSetSnapshot, now: Timestamp) -> Self {
        let expected = statefulset.spec_replicas;
        let update_revision = statefulset.update_revision.as_deref();
        let mut census = Census::default();
        for pod in &statefulset.pods {
            let ordinal = pod_ordinal(&statefulset.name, &pod.name);
            let wanted = ordinal
                .and_then(|ordinal| ordinal.checked_sub(statefulset.ordinals_start))
                .is_some_and(|index| index < expected);
            let availability = availability(pod, statefulset.min_ready_seconds, now);
            if let Availability::From(from) = availability {
                census.too_young += 1;
                census.available_at = Some(
                    census
                        .available_at
                        .map_or(from, |earliest| earliest.min(from)),
                );
            }
            let why = availability.unavailable();
            let is_available = why.is_none();
            let at_update_revision =
                update_revision.is_some() && pod.revision.as_deref() == update_revision;
            census.unproven |= at_update_revision && !is_available;
            if let Some(why) = &why {
                census.unavailable += 1;
                census.consider_naming(statefulset, pod, ordinal, at_update_revision, why);
            }
            if update_revision.is_some() && !at_update_revision {
                census.to_update.push(Outdated {
                    ordinal,
                    index: ordinal
                        .and_then(|ordinal| ordinal.checked_sub(statefulset.ordinals_start)),
                    pod,
                    wanted,
                    unavailable: why,
                });
            }
            if wanted {
                census.in_range += 1;
                census.available += u32::from(is_available);
                census.updated += u32::from(at_update_revision && !pod.terminating);
            } else {
                census.extra += 1;
            }
        }
        census
    }

    /// Names `pod`, unavailable for `why`, in a wait if it comes before the one named so far
    /// (by [`NamingOrder`]).
    fn consider_naming(
        &mut self,
        statefulset: &StatefulSetSnapshot,
        pod: &PodSnapshot,
        ordinal: Option<u32>,
        at_update_revision: bool,
        why: &Unavailable,
    ) {
        // Unknown ordinals sort last (None < Some would put them first).
        let key = (
            pod.terminating,
            !at_update_revision,
            ordinal.or(Some(u32::MAX)),
        );
        if self
            .waiting_for
            .as_ref()
            .is_none_or(|(first, _)| key < *first)
        {
            let update_revision = statefulset.update_revision.as_deref();
            let named = UnavailablePod {
                pod: pod.name.clone(),
                revision: if !at_update_revision {
                    PodRevision::Old
                } else if statefulset.current_revision.as_deref() == update_revision {
                    PodRevision::Current
                } else {
                    PodRevision::New
                },
                why: why.clone(),
            };
            self.waiting_for = Some((key, named));
        }
    }

    /// How many pods count against max-unavailable: the worst of what the pods and the status
    /// say, missing pods included.
    fn not_ready(&self, statefulset: &StatefulSetSnapshot) -> u32 {
        let expected = statefulset.spec_replicas;
        let missing = expected.saturating_sub(self.in_range);
        let ready_replicas = statefulset.ready_replicas;
        (self.unavailable.saturating_add(missing))
            .max(statefulset.status_replicas.saturating_sub(ready_replicas))
            .max(expected.saturating_sub(ready_replicas))
    }

    /// Why the member is not ready (None when it is), the first that holds of: pods missing,
    /// pods only too young, pods unavailable, pods extra, released pods still to go
    /// (`in_flight`), a status that does not agree.
    fn unreadiness(
        &self,
        statefulset: &StatefulSetSnapshot,
        waiting_for: Option<&UnavailablePod>,
        in_flight: Option<(u32, u32)>,
    ) -> Option<WaitReason> {
        let expected = statefulset.spec_replicas;
        let missing = expected.saturating_sub(self.in_range);
        let ready_replicas = statefulset.ready_replicas;
        let name = || statefulset.name.clone();
        if missing > 0 {
            Some(WaitReason::MissingPods {
                statefulset: name(),
                present: self.in_range,
                expected,
            })
        } else if self.unavailable > 0 && self.unavailable == self.too_young {
            Some(WaitReason::MinReadySeconds {
                statefulset: name(),
                pods: self.too_young,
                min_ready_seconds: statefulset.min_ready_seconds,
            })
        } else if self.unavailable > 0 {
            Some(WaitReason::NotReady {
                statefulset: name(),
                pods: self.unavailable,
                waiting_for: waiting_for.cloned(),
            })
        } else if self.extra > 0 {
            Some(WaitReason::ExtraPods {
                statefulset: name(),
                present: self.in_range + self.extra,
                expected,
            })
        } else if let Some((partition, pods)) = in_flight {
            // Released pods the StatefulSet controller is still to take down: the member is
            // rolling, as one with a pod down is, so no other member may start meanwhile.
            Some(WaitReason::PartitionRolling {
                statefulset: name(),
                partition,
                pods,
            })
        } else if statefulset.status_replicas != ready_replicas || ready_replicas != expected {
            Some(WaitReason::StatusNotReady {
                statefulset: name(),
                replicas: statefulset.status_replicas,
                ready_replicas,
                expected,
            })
        } else {
            None
        }
    }
}

/// Puts a member's outdated pods in the order they go.
fn sort_in_order(to_update: &mut [Outdated<'_>], order: Order) {
    to_update.sort_by(|a, b| match (a.ordinal, b.ordinal) {
        // The newest first, then the highest ordinal (the reverse of a rollout's order).
        (Some(ordinal_a), Some(ordinal_b)) if order == Order::Reverse => b
            .pod
            .created_at
            .cmp(&a.pod.created_at)
            .then(ordinal_b.cmp(&ordinal_a)),
        (Some(ordinal_a), Some(ordinal_b)) => ordinal_a.cmp(&ordinal_b),
        // Names that are not `<statefulset>-<ordinal>` (never seen in practice) go last.
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => natural_cmp(&a.pod.name, &b.pod.name),
    });
}

/// For a member rolled by partition: its partition and how many outdated pods it has released
/// that the StatefulSet controller has not replaced yet, if any.
fn in_flight(mode: Mode, to_update: &[Outdated<'_>]) -> Option<(u32, u32)> {
    match mode {
        Mode::Partition { partition, .. } => {
            let pods = to_update
                .iter()
                .filter(|outdated| outdated.index.is_some_and(|index| index >= partition))
                .count();
            (pods > 0).then(|| (partition, u32::try_from(pods).unwrap_or(u32::MAX)))
        }
        Mode::Delete => None,
    }
}

#[cfg(test)]
mod tests;
