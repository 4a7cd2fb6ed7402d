//! The pure scaling planner: a group snapshot (StatefulSets with their parsed scaling settings
//! and, for mirroring members, the reference's scale as read just before) and the time → the
//! one replica change to make this pass, what to tell the reference and the pods, and a
//! sentence for every decision and every reason to hold one back.
//!
//! Like the Go operator, leader/follower scaling runs first and at most one StatefulSet changes
//! per pass, so zones step one at a time and every decision is made on fresh objects.

use std::time::Duration;

use crate::annotations::InvalidAnnotation;
use crate::annotations::scaling::{DelayedDownscale, MirrorReference};
use crate::duration::go as go_duration;
use crate::min_time::{self, Downscaled, Whose};
use jiff::Timestamp;

/// The scaling-relevant view of one rollout group, StatefulSets sorted by name.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingSnapshot {
    pub group: String,
    pub members: Vec<Member>,
    /// The member clusters of the group that could not be read for this pass (their watches
    /// out, or their downscale records unread): the members there are known only as they last
    /// were, and their downscales may be unknown, so nothing is decided ([`plan`]).
    pub unread: Vec<Unread>,
}

/// A member cluster whose part of the group could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    pub cluster: String,
    /// What failed, for the person reading the hold.
    pub why: String,
}

/// One StatefulSet of the group.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub name: String,
    /// `spec.replicas` (1 when unset, as Kubernetes defaults it).
    pub replicas: i32,
    /// `status.readyReplicas`.
    pub ready_replicas: i32,
    /// The StatefulSet it follows (`grafana.com/rollout-downscale-leader`).
    pub leader: Option<String>,
    /// Scale up only once the leader's ready replicas equal its spec. Not applied to a forced
    /// count: force-replicas is a person's explicit order, not the leader's.
    pub upscale_only_when_leader_ready: bool,
    /// A valid `grafana.com/rollout-force-replicas`.
    pub force_replicas: Option<i32>,
    /// The min-time annotation (or label); `Ok(None)` when absent.
    pub min_time_between_downscale: Result<Option<Duration>, InvalidAnnotation>,
    /// The newest of the downscale records (`crate::downscale_history`); `Err` says
    /// which record cannot be read.
    pub last_downscale: Result<Option<Timestamp>, String>,
    /// Mirroring settings and the reference's scale, when configured.
    pub mirror: Result<Option<Mirror>, InvalidAnnotation>,
    /// Delayed-downscale settings; `Ok(None)` when disabled.
    pub delayed_downscale: Result<Option<DelayedDownscale>, InvalidAnnotation>,
    /// Bad values that were ignored (the StatefulSet still scales).
    pub warnings: Vec<InvalidAnnotation>,
}

/// A mirroring member's reference and what reading its scale gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Mirror {
    pub reference: MirrorReference,
    /// The reference's scale, or why it could not be read.
    pub scale: Result<ReferenceScale, String>,
}

/// The reference's `scale` subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceScale {
    pub spec_replicas: i32,
    pub status_replicas: Option<i32>,
}

/// Something to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScalingAction {
    /// Patch the StatefulSet's `/scale` to `to` replicas (the admission webhooks judge it).
    SetReplicas {
        statefulset: String,
        from: i32,
        to: i32,
    },
    /// Set the reference's `status.replicas` to `replicas`.
    WriteBack { statefulset: String, replicas: i32 },
    /// DELETE to the delayed-downscale URL of pods `[0, keep)`; failures are only logged.
    CancelDelayedDownscale { statefulset: String, keep: i32 },
    /// DELETE to `[0, to)`, POST to `[to, from)`, then scale down as far as the pods' answers
    /// allow ([`super::delayed_downscale::decide`]).
    DelayedDownscale {
        statefulset: String,
        from: i32,
        to: i32,
    },
}

impl ScalingAction {
    /// Whether this action changes a StatefulSet's replicas (the pass ends after it).
    pub fn scales(&self) -> bool {
        matches!(
            self,
            ScalingAction::SetReplicas { .. } | ScalingAction::DelayedDownscale { .. }
        )
    }
}

/// How a finding is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// A replica change decided this pass.
    Scale,
    /// A change that is wanted but held back for an expected reason.
    Hold,
    /// A configuration or reference problem someone must fix.
    Problem,
}

/// One sentence about one StatefulSet: a decision or a reason to hold it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub statefulset: String,
    pub kind: FindingKind,
    /// CamelCase Event reason.
    pub reason: &'static str,
    pub note: String,
}

/// What to do about a group's replicas this pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScalingPlan {
    pub actions: Vec<ScalingAction>,
    pub findings: Vec<Finding>,
    /// A held downscale becomes possible at this time: look again then.
    pub recheck_at: Option<Timestamp>,
    /// The group mirrors a reference resource: its changes are not watched, poll.
    pub poll: bool,
}

impl ScalingPlan {
    fn find(&mut self, statefulset: &str, kind: FindingKind, reason: &'static str, note: String) {
        self.findings.push(Finding {
            statefulset: statefulset.to_owned(),
            kind,
            reason,
            note,
        });
    }

    /// A setting whose value was not taken; the error says which and what is accepted.
    fn invalid(&mut self, statefulset: &str, invalid: &InvalidAnnotation) {
        self.find(
            statefulset,
            FindingKind::Problem,
            reasons::INVALID,
            invalid.to_string(),
        );
    }

    /// Plans `statefulset`'s change from `current` to `target` replicas; `source` says why.
    fn set_replicas(&mut self, statefulset: &str, current: i32, target: i32, source: &str) {
        let (reason, direction) = if target > current {
            (reasons::SCALE_UP, "up")
        } else {
            (reasons::SCALE_DOWN, "down")
        };
        self.find(
            statefulset,
            FindingKind::Scale,
            reason,
            format!("{statefulset} scales {direction} from {current} to {target}: {source}"),
        );
        self.actions.push(ScalingAction::SetReplicas {
            statefulset: statefulset.to_owned(),
            from: current,
            to: target,
        });
    }

    fn recheck(&mut self, at: Timestamp) {
        self.recheck_at = Some(self.recheck_at.map_or(at, |current| current.min(at)));
    }

    /// Whether a replica change was planned.
    pub fn scales(&self) -> bool {
        self.actions.iter().any(ScalingAction::scales)
    }
}

/// Event reasons.
pub mod reasons {
    pub const SCALE_UP: &str = "ScalingUp";
    pub const SCALE_DOWN: &str = "ScalingDown";
    pub const HELD: &str = "ScalingHeld";
    pub const INVALID: &str = "ScalingInvalidSetting";
    pub const LEADER_NOT_FOUND: &str = "ScalingLeaderNotFound";
    pub const REFERENCE_UNAVAILABLE: &str = "ScalingReferenceUnavailable";
    pub const DENIED: &str = "ScalingDenied";
    pub const DELAYED_DOWNSCALE_WAITING: &str = "DelayedDownscaleWaiting";
    pub const DELAYED_DOWNSCALE_FAILED: &str = "DelayedDownscaleFailed";
}

/// Plans the group's scaling at `now`. A group of which a part could not be read
/// ([`ScalingSnapshot::unread`]) is not scaled at all: a follower's min-time reads every other
/// zone's downscales and a leader's replicas may be in the part unread, so any change decided
/// on a partial view could break what the whole would hold; each member is told why it waits.
pub fn plan(snapshot: &ScalingSnapshot, now: Timestamp) -> ScalingPlan {
    let mut plan = ScalingPlan::default();
    if !snapshot.unread.is_empty() {
        let unread: Vec<String> = snapshot
            .unread
            .iter()
            .map(|unread| format!("cluster {} cannot be read: {}", unread.cluster, unread.why))
            .collect();
        for member in &snapshot.members {
            let name = member.name.as_str();
            plan.find(
                name,
                FindingKind::Hold,
                reasons::HELD,
                format!(
                    "{name} stays at {}: rollout group {} is scaled only on a whole view of its members, and {}",
                    member.replicas,
                    snapshot.group,
                    unread.join("; ")
                ),
            );
        }
        // Come back: a cluster that is listed again brings the group back by its watch
        // events, a ledger that could not be read does not.
        plan.poll = true;
        return plan;
    }
    for member in &snapshot.members {
        for warning in &member.warnings {
            plan.invalid(&member.name, warning);
        }
    }
    plan.poll = snapshot
        .members
        .iter()
        .any(|member| matches!(member.mirror, Ok(Some(_))));
    for member in &snapshot.members {
        if follow_leader(snapshot, member, now, &mut plan) {
            return plan;
        }
    }
    for member in &snapshot.members {
        if mirror(member, &mut plan) {
            return plan;
        }
    }
    plan
}

/// The most replicas baton ever gives a StatefulSet by itself. Targets come from annotations
/// and reference resources that anyone editing them writes; past this, a target is a mistake
/// (`rollout-force-replicas: "2147483647"`), not a plan, and the StatefulSet controller would
/// create pods without end. A cluster holds at most 150,000 pods.
pub const MAX_REPLICAS: i32 = 100_000;

/// Holds `name` at `current` when `target` is a scale-up past [`MAX_REPLICAS`], saying why.
fn beyond_ceiling(
    plan: &mut ScalingPlan,
    name: &str,
    current: i32,
    target: i32,
    source: &str,
) -> bool {
    if target <= current || target <= MAX_REPLICAS {
        return false;
    }
    plan.find(
        name,
        FindingKind::Problem,
        reasons::INVALID,
        format!(
            "{name} stays at {current}: {source}, more than the {MAX_REPLICAS} replicas baton ever sets"
        ),
    );
    true
}

/// Leader/follower rule for `member`; true when it planned a change (the pass ends).
fn follow_leader(
    snapshot: &ScalingSnapshot,
    member: &Member,
    now: Timestamp,
    plan: &mut ScalingPlan,
) -> bool {
    let Some(leader_name) = member.leader.as_deref() else {
        return false;
    };
    let name = member.name.as_str();
    let Some(leader) = snapshot.members.iter().find(|m| m.name == leader_name) else {
        plan.find(
            name,
            FindingKind::Problem,
            reasons::LEADER_NOT_FOUND,
            format!(
                "{name} does not scale: its leader {leader_name} is not a StatefulSet of rollout group {}",
                snapshot.group
            ),
        );
        return false;
    };
    let (target, source) = match member.force_replicas {
        Some(forced) => (forced, format!("force-replicas is {forced}")),
        None => (
            leader.replicas,
            format!("its leader {leader_name} has {} replicas", leader.replicas),
        ),
    };
    let current = member.replicas;
    if beyond_ceiling(plan, name, current, target, &source) {
        return false;
    }
    if target > current {
        let leader_ready = leader.ready_replicas == leader.replicas;
        if member.upscale_only_when_leader_ready && member.force_replicas.is_none() && !leader_ready
        {
            plan.find(
                name,
                FindingKind::Hold,
                reasons::HELD,
                format!(
                    "{name} stays at {current}: {source} but only {} are ready, and it scales up only when its leader is ready",
                    leader.ready_replicas
                ),
            );
            return false;
        }
        plan.set_replicas(name, current, target, &source);
        return true;
    }
    if target == current {
        return false;
    }
    // The min time protects the time after another zone's downscale: with none recorded
    // anywhere there is nothing to wait for, and the follower goes down without the label, as
    // the Go operator reads it (a user switching keeps followers that followed).
    let none_downscaled = snapshot
        .members
        .iter()
        .filter(|other| other.name != name)
        .all(|other| matches!(other.last_downscale, Ok(None)));
    let min_time = match &member.min_time_between_downscale {
        Ok(Some(min_time)) => *min_time,
        Ok(None) | Err(_) if none_downscaled => {
            // (a label baton cannot read is still told: it will hold the next downscale)
            if let Err(invalid) = &member.min_time_between_downscale {
                plan.invalid(name, invalid);
            }
            plan.set_replicas(name, current, target, &source);
            return true;
        }
        Ok(None) => {
            plan.find(
                name,
                FindingKind::Problem,
                reasons::INVALID,
                format!(
                    "{name} stays at {current} ({source}): it has no {} label, which a follower needs to scale down",
                    crate::annotations::MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL
                ),
            );
            return false;
        }
        Err(invalid) => {
            plan.invalid(name, invalid);
            return false;
        }
    };
    // The follower's own min-time after every other zone's downscale: the newest decides.
    let others = snapshot
        .members
        .iter()
        .filter(|other| other.name != name)
        .map(|other| match &other.last_downscale {
            Ok(at) => Ok(at.map(|at| Downscaled {
                zone: other.name.as_str(),
                at,
                its_min_time: None,
            })),
            Err(text) => Err((other.name.as_str(), text)),
        });
    match min_time::blocker(others, Whose::ZoneGoingDown(min_time), now) {
        Err((other, text)) => {
            plan.find(
                name,
                FindingKind::Problem,
                reasons::INVALID,
                format!(
                    "{name} stays at {current} ({source}): the last downscale of {other} cannot be read: {text}"
                ),
            );
            return false;
        }
        Ok(Some(blocker)) => {
            // Absolute times only: the note must not change from one pass to the next, or
            // the Event would be published again on every pass.
            plan.find(
                name,
                FindingKind::Hold,
                reasons::HELD,
                format!(
                    "{name} stays at {current} ({source}): {} was downscaled at {}, min time {}; not before {}",
                    blocker.zone,
                    blocker.at,
                    go_duration::format(blocker.min_time_nanos()),
                    blocker.until,
                ),
            );
            plan.recheck(blocker.until);
            return false;
        }
        Ok(None) => {}
    }
    plan.set_replicas(name, current, target, &source);
    true
}

/// Mirroring rule for `member`; true when it planned a change (the pass ends).
fn mirror(member: &Member, plan: &mut ScalingPlan) -> bool {
    let name = member.name.as_str();
    let mirror = match &member.mirror {
        Ok(Some(mirror)) => mirror,
        Ok(None) => return false,
        Err(invalid) => {
            plan.invalid(name, invalid);
            return false;
        }
    };
    let reference = &mirror.reference;
    let described = format!(
        "{} {} ({})",
        reference.kind, reference.name, reference.api_version
    );
    let scale = match &mirror.scale {
        Ok(scale) => *scale,
        Err(error) => {
            plan.find(
                name,
                FindingKind::Problem,
                reasons::REFERENCE_UNAVAILABLE,
                format!("{name} does not scale: cannot read the scale of {described}: {error}"),
            );
            return false;
        }
    };
    let delayed = match &member.delayed_downscale {
        Ok(delayed) => delayed.as_ref(),
        Err(invalid) => {
            plan.invalid(name, invalid);
            return false;
        }
    };
    let current = member.replicas;
    let (target, source) = match member.force_replicas {
        Some(forced) => (forced, format!("force-replicas is {forced}")),
        None => (
            scale.spec_replicas,
            format!("{described} wants {} replicas", scale.spec_replicas),
        ),
    };
    if beyond_ceiling(plan, name, current, target, &source) {
        return false;
    }
    let write_back = |plan: &mut ScalingPlan, replicas: i32| {
        if reference.write_back && scale.status_replicas != Some(replicas) {
            plan.actions.push(ScalingAction::WriteBack {
                statefulset: name.to_owned(),
                replicas,
            });
        }
    };
    if target == current {
        write_back(plan, current);
        if delayed.is_some() {
            plan.actions.push(ScalingAction::CancelDelayedDownscale {
                statefulset: name.to_owned(),
                keep: current,
            });
        }
        return false;
    }
    if target > current {
        if delayed.is_some() {
            plan.actions.push(ScalingAction::CancelDelayedDownscale {
                statefulset: name.to_owned(),
                keep: target,
            });
        }
        plan.set_replicas(name, current, target, &source);
        write_back(plan, target);
        return true;
    }
    if delayed.is_some() {
        // The executor reports the outcome: it depends on the pods' answers.
        plan.actions.push(ScalingAction::DelayedDownscale {
            statefulset: name.to_owned(),
            from: current,
            to: target,
        });
        return true;
    }
    plan.set_replicas(name, current, target, &source);
    write_back(plan, target);
    true
}

#[cfg(test)]
mod tests;
