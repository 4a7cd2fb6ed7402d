//! The gate decision: the group's plan as the gates allow it, why the rest waits, and what
//! gate state to store. Pure: the same snapshot, stored state and `now` give the same decision.
//!
//! The rules, in order:
//! 0. a rollback is under way ([`super::rollback`]) → it alone decides: the planner's plan in
//!    reverse order with every zone but the one in turn paused; a person's halt holds it;
//! 1. a member carries `baton.dev/halted` → no deletion anywhere (`Halted`), until a person
//!    removes the annotation;
//! 2. no member carries a gate key → the planner's plan as is, nothing stored
//!    (docs/compatibility.md);
//! 3. a gate key is invalid → no deletion (`InvalidGate`; see [`super::keys`] for why);
//! 4. a zone is *cleared* for the update revision it rolls to once its gate passed. While a
//!    cleared zone is unfinished (not updated and available, and not paused), the planner
//!    plans with every zone that is not cleared **paused**: the zone that started finishes
//!    before another starts, whatever order the planner would otherwise pick (it moves to a
//!    not-ready zone first, and replaces an unavailable old pod there for free). Pausing is
//!    an input the planner honours with all its guarantees, so the gate never adds a deletion
//!    the planner did not make for some valid snapshot; a not-ready zone that is not cleared
//!    blocks, as in the Go operator (`ZoneUnfinished`);
//! 5. otherwise the zone the planner deletes in next is gated: the first zone of a rollout
//!    (no zone cleared yet for its current revision) is cleared at once — it is the canary;
//!    a later one waits for the soak after the finished zones (`Soak`), whose start and the
//!    zones it follows are stored on the waiting zone, so a new leader honours the rest of it
//!    (and a zone finishing meanwhile starts it again). Only that one zone is cleared;
//! 6. once every member is finished, the stored state is removed: the next rollout starts
//!    afresh.

use std::collections::BTreeSet;
use std::fmt;

use crate::explained::Explained;

use crate::annotations::{ROLLOUT_PAUSED_ANNOTATION, paused};
use jiff::{SignedDuration, Timestamp};

use super::keys::{self, GateConfig, GateWarning, STATE_ANNOTATION, format_duration};
use super::rollback::{self, Status};
use super::state::{GateState, ZoneState};
use crate::rollout::{GroupSnapshot, Order, Plan, plan, plan_in_order};

/// Why deletions of the plan wait; `Display` explains it, [`Explained::kind`] names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateWait {
    /// `statefulset` carries `baton.dev/halted`; `why` is its value.
    Halted { statefulset: String, why: String },
    /// A gate key cannot be read.
    InvalidGate {
        statefulset: String,
        key: &'static str,
        value: String,
    },
    /// `zone` waits for the group's hook, which the operator's bounds do not let baton call.
    RefusedHook { zone: String, why: String },
    /// `zone` is next, but `unfinished`, already rolling, is not finished.
    ZoneUnfinished { zone: String, unfinished: String },
    /// Deletions in `zone` wait for the health check `check` to pass `needed` times in a row
    /// (it has `passes`); `last` is its last outcome.
    HealthCheck {
        zone: String,
        check: String,
        passes: u32,
        needed: u32,
        last: Option<String>,
    },
    /// `zone` waits for its hook of `phase` to answer 2xx (`attempts` failed so far).
    Hook {
        zone: String,
        phase: String,
        attempts: u32,
        last: Option<String>,
    },
    /// `zone` ramps: its last step is not available yet (`updated` of `total` pods updated).
    Ramp {
        zone: String,
        updated: u32,
        total: u32,
    },
    /// `zone` rolls in batches: batch `batch` (1-based, of `batches`) goes once the last one is
    /// available (`updated` of `total` pods updated).
    Batch {
        zone: String,
        batch: u32,
        batches: u32,
        updated: u32,
        total: u32,
    },
    /// A rollback is under way and holds the rest: templates are being written back, or a
    /// rollback was asked for (`why`) and is about to start.
    RollingBack { zone: String, why: String },
    /// `zone`'s template went back to the revision baton rolled it back from (`from`, instead
    /// of `to`): a GitOps tool re-applying it? The group holds until the template changes.
    TemplateReverted {
        zone: String,
        from: String,
        to: String,
    },
    /// `zone`'s next step waits for a person: `kubectl baton approve` records `step`.
    AwaitingApproval {
        zone: String,
        group: String,
        /// What is approved, as people read it.
        what: String,
        /// The value `baton.dev/approved` must hold (on any member).
        step: String,
    },
    /// `zone` is next and soaks until `until` after the zones before it finished.
    Soak {
        zone: String,
        after: Vec<String>,
        remaining: SignedDuration,
        until: Timestamp,
    },
}

impl Explained for GateWait {
    fn kind(&self) -> &'static str {
        match self {
            Self::Halted { .. } => "Halted",
            Self::InvalidGate { .. } => "InvalidGate",
            Self::ZoneUnfinished { .. } => "ZoneUnfinished",
            Self::Soak { .. } => "Soak",
            Self::HealthCheck { .. } => "HealthCheck",
            Self::Ramp { .. } => "Ramp",
            Self::Batch { .. } => "Batch",
            Self::AwaitingApproval { .. } => "AwaitingApproval",
            Self::RollingBack { .. } => "RollingBack",
            Self::TemplateReverted { .. } => "TemplateReverted",
            Self::Hook { .. } => "Hook",
            Self::RefusedHook { .. } => "RefusedHook",
        }
    }

    fn statefulset(&self) -> Option<&str> {
        Some(GateWait::statefulset(self))
    }
}

impl GateWait {
    /// The StatefulSet the wait is about.
    pub fn statefulset(&self) -> &str {
        match self {
            Self::Halted { statefulset, .. } | Self::InvalidGate { statefulset, .. } => statefulset,
            Self::ZoneUnfinished { zone, .. }
            | Self::Soak { zone, .. }
            | Self::HealthCheck { zone, .. }
            | Self::Ramp { zone, .. }
            | Self::Batch { zone, .. }
            | Self::AwaitingApproval { zone, .. }
            | Self::RollingBack { zone, .. }
            | Self::TemplateReverted { zone, .. }
            | Self::Hook { zone, .. }
            | Self::RefusedHook { zone, .. } => zone,
        }
    }
}

impl fmt::Display for GateWait {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Halted { statefulset, why } => write!(
                formatter,
                "halted at {statefulset}: {why}; resume with \
                 kubectl annotate statefulset {statefulset} {}-",
                keys::HALTED_ANNOTATION
            ),
            Self::InvalidGate {
                statefulset,
                key,
                value,
            } => write!(
                formatter,
                "annotation {key} of {statefulset} has the invalid value {value:?}; {}",
                keys::HOLDING
            ),
            Self::ZoneUnfinished { zone, unfinished } => write!(
                formatter,
                "{zone} starts only once {unfinished} is updated and available"
            ),
            Self::Hook {
                zone,
                phase,
                attempts,
                last,
            } => {
                write!(formatter, "{zone} waits for its {phase} hook")?;
                match last {
                    Some(last) if *attempts > 0 => {
                        write!(formatter, " ({attempts} failed so far, last: {last})")
                    }
                    _ => Ok(()),
                }
            }
            Self::RefusedHook { zone, why } => write!(
                formatter,
                "{zone} waits for its hook, which baton may not call: {why}; {}",
                keys::HOLDING
            ),
            Self::Ramp {
                zone,
                updated,
                total,
            } => write!(
                formatter,
                "{zone} ramps: its last step must be available first ({updated} of {total} pods updated)"
            ),
            Self::Batch {
                zone,
                batch,
                batches,
                updated,
                total,
            } => write!(
                formatter,
                "{zone} rolls in batches: batch {batch} of {batches} goes once the last one is \
                 available ({updated} of {total} pods updated)"
            ),
            Self::AwaitingApproval {
                zone, group, what, ..
            } => write!(
                formatter,
                "{zone} awaits approval of {what}; approve with kubectl baton approve {group}"
            ),
            Self::RollingBack { why, .. } => write!(formatter, "rolling back: {why}"),
            Self::TemplateReverted { zone, from, to } => write!(
                formatter,
                "the template of {zone} went back to {from} after baton rolled it back to {to} \
                 (a GitOps tool re-applying it?); baton will not write it again: put the \
                 previous version in Git to finish the rollback, or a new version to roll \
                 forward"
            ),
            Self::HealthCheck {
                zone,
                check,
                passes,
                needed,
                last,
            } => {
                write!(
                    formatter,
                    "{zone} waits for health check {check}: {passes} of {needed} passes in a row"
                )?;
                match last {
                    Some(last) => write!(formatter, "; last run {last}"),
                    None => Ok(()),
                }
            }
            Self::Soak {
                zone,
                after,
                remaining,
                ..
            } => write!(
                formatter,
                "soaking after {}: {zone} starts in {}",
                after.join(", "),
                format_duration(*remaining)
            ),
        }
    }
}

/// One annotation to set (`Some`) or remove (`None`) on a member, by the leader, with the
/// resourceVersion it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationWrite {
    pub statefulset: String,
    pub key: &'static str,
    pub value: Option<String>,
}

/// Whether the plan's deletions may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateVerdict {
    /// Every deletion of the plan may go.
    Proceed,
    /// Only the deletions in `pass` may go (possibly none); the others wait for `wait`.
    Hold {
        wait: GateWait,
        pass: BTreeSet<String>,
    },
}

/// What the gate decided for one plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateDecision {
    pub verdict: GateVerdict,
    /// Store these before acting; if they fail, act on nothing (the next pass retries).
    /// Writing them is what makes the gate survive a failover.
    pub writes: Vec<AnnotationWrite>,
    pub warnings: Vec<GateWarning>,
    /// When the decision changes without any watch event (a soak ends).
    pub recheck_after: Option<Timestamp>,
    /// A hook call to make now; its answer gives more writes ([`super::hooks::record`]).
    pub hook: Option<super::hooks::HookCall>,
    /// What people should hear about this pass besides a wait (each an Event).
    pub notices: Vec<GateNotice>,
    /// A rollback holds the other gates off (the checks and hooks composed after [`decide()`]
    /// leave the decision as it is).
    pub rolling_back: bool,
    /// The group's bypass (`baton.dev/bypass-gates-until`), for the check composed after: read
    /// once, with the rest of the configuration.
    pub(super) bypass: Option<Timestamp>,
    /// The group asks for a rollback where a gate would halt it.
    pub(super) rollback_on_failure: bool,
    /// The zone state to store instead of the one in `writes` should no step go this pass:
    /// a zone cleared only because a bypass skipped its soak stays uncleared unless it steps
    /// while the bypass is in force (an expired bypass bypasses nothing).
    unstepped: Option<AnnotationWrite>,
}

/// Something a gate did that people should hear about, though nothing waits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateNotice {
    /// A step in `zone` went without waiting for `gate`: `baton.dev/bypass-gates-until`.
    Bypassed {
        zone: String,
        gate: String,
        until: Timestamp,
    },
    /// The health check `check`, whose `onFailure` is `Warn`, failed: nothing waits for it.
    CheckFailed {
        zone: String,
        check: String,
        outcome: String,
    },
}

impl Explained for GateNotice {
    fn kind(&self) -> &'static str {
        match self {
            Self::Bypassed { .. } => "GateBypassed",
            Self::CheckFailed { .. } => "HealthCheckWarning",
        }
    }

    fn statefulset(&self) -> Option<&str> {
        Some(GateNotice::statefulset(self))
    }
}

impl GateNotice {
    /// The StatefulSet the Event is about.
    pub fn statefulset(&self) -> &str {
        match self {
            Self::Bypassed { zone, .. } | Self::CheckFailed { zone, .. } => zone,
        }
    }

    /// Whether a person should look (a Warning Event) rather than just know (Normal).
    pub fn is_warning(&self) -> bool {
        matches!(self, Self::CheckFailed { .. })
    }
}

impl fmt::Display for GateNotice {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bypassed { zone, gate, until } => write!(
                formatter,
                "{zone} steps without waiting for {gate}: {} is {until}",
                keys::BYPASS_ANNOTATION
            ),
            Self::CheckFailed {
                zone,
                check,
                outcome,
            } => write!(
                formatter,
                "health check {check} failed while {zone} rolled ({outcome}); its onFailure is \
                 Warn, so nothing waits for it"
            ),
        }
    }
}

impl GateDecision {
    fn proceed() -> Self {
        Self {
            verdict: GateVerdict::Proceed,
            writes: Vec::new(),
            warnings: Vec::new(),
            recheck_after: None,
            hook: None,
            notices: Vec::new(),
            rolling_back: false,
            bypass: None,
            rollback_on_failure: false,
            unstepped: None,
        }
    }

    fn hold(wait: GateWait, pass: BTreeSet<String>) -> Self {
        Self {
            verdict: GateVerdict::Hold { wait, pass },
            ..Self::proceed()
        }
    }

    /// Once a later gate took every deletion away: a bypass is told for the steps it let go,
    /// not for those something else holds, and clears a zone only for a step it let go. Every
    /// gate composed after [`decide()`] settles its decision (idempotent).
    pub(crate) fn settle(&mut self, plan: &Plan) {
        if plan.deletions().next().is_some() {
            return;
        }
        self.notices
            .retain(|notice| !matches!(notice, GateNotice::Bypassed { .. }));
        if let Some(unstepped) = &self.unstepped {
            for write in &mut self.writes {
                if write.key == unstepped.key && write.statefulset == unstepped.statefulset {
                    write.value.clone_from(&unstepped.value);
                }
            }
        }
    }

    /// Why (some) deletions wait, if they do.
    pub fn wait(&self) -> Option<&GateWait> {
        match &self.verdict {
            GateVerdict::Proceed => None,
            GateVerdict::Hold { wait, .. } => Some(wait),
        }
    }

    /// The plan as gated: deletions the gate holds are taken out (nothing is added); the
    /// plan's recheck time becomes the earlier of both.
    fn apply(self, mut plan: Plan) -> (Plan, Self) {
        if let GateVerdict::Hold { pass, .. } = &self.verdict {
            plan.actions.retain(|action| match action.rolls() {
                Some(statefulset) => pass.contains(statefulset),
                None => true,
            });
        }
        plan.recheck_after = match (plan.recheck_after, self.recheck_after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (plan, self)
    }
}

/// Plans the group and gates the plan (see the module header): the plan to carry out, and the
/// decision (why deletions wait, what to store first, warnings).
pub fn decide(group: &GroupSnapshot, now: Timestamp) -> (Plan, GateDecision) {
    let (config, mut warnings) = keys::read(group);
    let (state, state_warnings) = GateState::read(group);
    warnings.extend(state_warnings);
    let (plan, mut decision) = decide_with(group, &config, &state, now);
    decision.warnings = warnings;
    (plan, decision)
}

/// [`decide`] from an already read configuration and state (warnings left to the caller).
pub fn decide_with(
    group: &GroupSnapshot,
    config: &GateConfig,
    state: &GateState,
    now: Timestamp,
) -> (Plan, GateDecision) {
    let full = plan(group, now);
    let done = |name: &str| {
        full.progress
            .iter()
            .any(|progress| progress.statefulset == name && progress.done)
    };
    let (plan, mut decision) = match rollback::status(group, done) {
        Status::None | Status::RolledBack(_) => gate_forward(group, config, state, full, now),
        Status::Stale(carriers) => {
            let (plan, mut decision) = gate_forward(group, config, state, full, now);
            decision
                .writes
                .extend(carriers.into_iter().map(|statefulset| AnnotationWrite {
                    statefulset,
                    key: rollback::ROLLBACK_STATE_ANNOTATION,
                    value: None,
                }));
            (plan, decision)
        }
        active => {
            let (plan, mut decision) = roll_back(group, active, full, state, now);
            // Stored before acting, like all gate state: the template was taken back.
            decision.writes.extend(rollback::settle(group));
            (plan, decision)
        }
    };
    decision.bypass = config.bypass_until;
    decision.rollback_on_failure = config.rollback_on_failure;
    (plan, decision)
}

/// A rollback in flight (see [`rollback`]): a person's halt holds it; nothing else does.
fn roll_back(
    group: &GroupSnapshot,
    status: Status,
    full: Plan,
    state: &GateState,
    now: Timestamp,
) -> (Plan, GateDecision) {
    let hold = |wait: GateWait| {
        let mut decision = GateDecision::hold(wait, BTreeSet::new());
        decision.rolling_back = true;
        decision.apply(full.clone())
    };
    if let Some((statefulset, why)) = state.halted.first() {
        return hold(GateWait::Halted {
            statefulset: statefulset.clone(),
            why: why.clone(),
        });
    }
    match status {
        Status::Reverted { zone, record } => hold(GateWait::TemplateReverted {
            zone,
            from: record.from,
            to: record.to,
        }),
        Status::Restoring(members) => match members.into_iter().next() {
            Some((zone, record)) if record.restored => hold(GateWait::RollingBack {
                zone,
                why: format!(
                    "waiting for the StatefulSet controller to take the template back to {} (if \
                     it stays at {}, a GitOps tool re-applied it: put the previous version in \
                     Git): {}",
                    record.to, record.from, record.why
                ),
            }),
            Some((zone, record)) => hold(GateWait::RollingBack {
                zone,
                why: format!("writing the template back to {}: {}", record.to, record.why),
            }),
            None => (full, GateDecision::proceed()),
        },
        Status::RollingBack(order) => {
            // One zone at a time, in turn order; its pods in reverse.
            let mut view = group.clone();
            for member in &mut view.statefulsets {
                if member.name != order[0] {
                    member
                        .annotations
                        .insert(ROLLOUT_PAUSED_ANNOTATION.to_owned(), "true".to_owned());
                }
            }
            let mut viewed = plan_in_order(&view, now, Order::Reverse);
            viewed.warnings.clone_from(&full.warnings);
            viewed.progress.clone_from(&full.progress);
            let mut decision = GateDecision::proceed();
            decision.rolling_back = true;
            (viewed, decision)
        }
        Status::None | Status::RolledBack(_) | Status::Stale(_) => (full, GateDecision::proceed()),
    }
}

/// The forward gates: zones, steps, approvals.
fn gate_forward(
    group: &GroupSnapshot,
    config: &GateConfig,
    state: &GateState,
    full: Plan,
    now: Timestamp,
) -> (Plan, GateDecision) {
    let gated = gate_zones(group, config, state, full, now);
    let stopped = matches!(
        gated.1.wait(),
        Some(GateWait::Halted { .. } | GateWait::InvalidGate { .. })
    );
    if stopped {
        return gated;
    }
    let stepped = super::steps::apply(group, config, gated);
    let (plan, mut decision) = super::approval::apply(group, config, stepped);
    decision.settle(&plan);
    (plan, decision)
}

/// Whether `config`'s bypass is in force at `now`: until when.
pub fn bypassing(config: &GateConfig, now: Timestamp) -> Option<Timestamp> {
    config.bypass_until.filter(|until| now < *until)
}

/// Rules 1 to 5 and 7 of the module header: halts, zone order, soaks.
fn gate_zones(
    group: &GroupSnapshot,
    config: &GateConfig,
    state: &GateState,
    full: Plan,
    now: Timestamp,
) -> (Plan, GateDecision) {
    if let Some((statefulset, why)) = state.halted.first() {
        let wait = GateWait::Halted {
            statefulset: statefulset.clone(),
            why: why.clone(),
        };
        return GateDecision::hold(wait, BTreeSet::new()).apply(full);
    }
    if !config.enabled {
        let decision = forget_when_complete(group, &full, state);
        return (full, decision);
    }
    if let Some(invalid) = &config.invalid {
        let wait = GateWait::InvalidGate {
            statefulset: invalid.statefulset.clone(),
            key: invalid.key,
            value: invalid.value.clone(),
        };
        return GateDecision::hold(wait, BTreeSet::new()).apply(full);
    }
    let finished = |name: &str| {
        let done = full
            .progress
            .iter()
            .any(|progress| progress.statefulset == name && progress.done);
        let is_paused = group
            .statefulsets
            .iter()
            .any(|member| member.name == name && paused(&member.annotations).value);
        done || is_paused
    };
    let cleared: Vec<&str> = state
        .zones
        .iter()
        .filter(|(_, zone)| zone.cleared_at.is_some())
        .map(|(name, _)| name.as_str())
        .collect();
    if let Some(rolling) = cleared.iter().copied().find(|name| !finished(name)) {
        return finish_first(group, &full, rolling, state, now);
    }
    let Some(next) = deleted_in(group, &full).into_iter().next() else {
        let decision = forget_when_complete(group, &full, state);
        return (full, decision);
    };
    let Some(revision) = group
        .statefulsets
        .iter()
        .find(|member| member.name == next)
        .and_then(|member| member.update_revision.clone())
    else {
        // The planner deletes only with an update revision: cannot happen.
        return (full, GateDecision::proceed());
    };
    let mut zone = state
        .zones
        .get(&next)
        .cloned()
        .unwrap_or_else(|| ZoneState::new(&revision));
    let write = |zone: &ZoneState| AnnotationWrite {
        statefulset: next.clone(),
        key: STATE_ANNOTATION,
        value: Some(zone.to_annotation()),
    };
    let before: Vec<String> = cleared
        .iter()
        .filter(|name| **name != next)
        .map(|name| (*name).to_owned())
        .collect();
    let pass = BTreeSet::from([next.clone()]);
    let mut bypassed = Vec::new();
    if let (Some(soak), false) = (config.soak, before.is_empty()) {
        let mut writes = Vec::new();
        let started = match zone.soak_started_at {
            Some(started) if zone.soak_after == before => started,
            _ => {
                zone.soak_started_at = Some(now);
                zone.soak_after.clone_from(&before);
                writes.push(write(&zone));
                now
            }
        };
        let until = started.saturating_add(soak).unwrap_or(Timestamp::MAX);
        let bypass = bypassing(config, now).filter(|_| now < until);
        if let Some(bypass) = bypass {
            bypassed.push(GateNotice::Bypassed {
                zone: next.clone(),
                gate: format!("the soak after {} (until {until})", before.join(", ")),
                until: bypass,
            });
        } else if now < until {
            let wait = GateWait::Soak {
                zone: next.clone(),
                after: before,
                remaining: until.duration_since(now),
                until,
            };
            let mut decision = GateDecision::hold(wait, BTreeSet::new());
            decision.writes = writes;
            decision.recheck_after = Some(until);
            return decision.apply(full);
        }
    }
    // The gate passed: the zone is cleared, and only its deletions go.
    let unstepped = (!bypassed.is_empty()).then(|| write(&zone));
    zone.cleared_at = Some(now);
    let held = deleted_in(group, &full)
        .into_iter()
        .find(|name| *name != next);
    let mut decision = match held {
        None => GateDecision::proceed(),
        Some(held) => GateDecision::hold(
            GateWait::ZoneUnfinished {
                zone: held,
                unfinished: next.clone(),
            },
            pass,
        ),
    };
    decision.writes.push(write(&zone));
    decision.notices = bypassed;
    decision.unstepped = unstepped;
    if let Some(until) = bypassing(config, now) {
        // The decision changes when the bypass ends.
        decision.recheck_after = Some(until);
    }
    decision.apply(full)
}

/// `rolling` is cleared and unfinished: plan with every zone that is not cleared paused, so
/// that it finishes first (rule 4).
fn finish_first(
    group: &GroupSnapshot,
    full: &Plan,
    rolling: &str,
    state: &GateState,
    now: Timestamp,
) -> (Plan, GateDecision) {
    let mut view = group.clone();
    for member in &mut view.statefulsets {
        if !state.cleared(&member.name) {
            member
                .annotations
                .insert(ROLLOUT_PAUSED_ANNOTATION.to_owned(), "true".to_owned());
        }
    }
    let mut viewed = plan(&view, now);
    // The view's own warnings are the group's (pausing adds none), its wait may say "paused"
    // where the truth is "gated": report the planner's view of the group as it is.
    viewed.warnings.clone_from(&full.warnings);
    // Held: what the planner would delete were it not for the gate, while the view deletes
    // nothing (when the rolling zone progresses, nothing is said to wait).
    let allowed = deleted_in(group, &viewed);
    let held = if allowed.is_empty() {
        deleted_in(group, full).into_iter().next()
    } else {
        None
    };
    let decision = match held {
        None => GateDecision::proceed(),
        Some(held) => GateDecision::hold(
            GateWait::ZoneUnfinished {
                zone: held,
                unfinished: rolling.to_owned(),
            },
            allowed.into_iter().collect(),
        ),
    };
    (viewed, decision)
}

/// The zones `plan` deletes in, in member order.
pub(super) fn deleted_in(group: &GroupSnapshot, plan: &Plan) -> Vec<String> {
    group
        .statefulsets
        .iter()
        .map(|member| &member.name)
        .filter(|name| {
            plan.deletions()
                .any(|action| action.rolls() == Some(name.as_str()))
        })
        .cloned()
        .collect()
}

/// Nothing to delete: once every member is finished, forget the stored state.
fn forget_when_complete(group: &GroupSnapshot, plan: &Plan, state: &GateState) -> GateDecision {
    let mut decision = GateDecision::proceed();
    let complete = !plan.progress.is_empty() && plan.progress.iter().all(|progress| progress.done);
    if complete {
        decision.writes = group
            .statefulsets
            .iter()
            .filter(|member| state.stored.contains(&member.name))
            .map(|member| AnnotationWrite {
                statefulset: member.name.clone(),
                key: STATE_ANNOTATION,
                value: None,
            })
            .collect();
    }
    decision
}

#[cfg(test)]
#[path = "decide_tests.rs"]
pub(crate) mod tests;
