//! The zone gate, and the gates composed after it: the group's plan as the gates allow it, why
//! the rest waits, and what gate state to store (the decision's types are [`super::decision`]).
//! Pure: the same snapshot, stored state and `now` give the same decision.
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

use crate::annotations::{ROLLOUT_PAUSED_ANNOTATION, paused};
use jiff::Timestamp;

use super::decision::{AnnotationWrite, GateDecision, GateNotice, GateWait, deleted_in};
use super::keys::{self, GateConfig, STATE_ANNOTATION};
use super::rollback::{self, Status};
use super::state::{GateState, ZoneState};
use crate::rollout::{GroupSnapshot, Order, Plan, plan, plan_in_order};

/// Plans the group and gates the plan (see the module header): the plan to carry out, and the
/// decision (why deletions wait, what to store first, warnings).
pub fn decide(group: &GroupSnapshot, now: Timestamp) -> (Plan, GateDecision) {
    let (config, mut warnings) = keys::read(group);
    let (state, state_warnings) = GateState::read(group);
    warnings.extend(state_warnings);
    let (plan, mut decision) = decide_read(group, &config, &state, now);
    decision.warnings = warnings;
    (plan, decision)
}

/// [`decide`] from an already read configuration and state (warnings left to the caller).
pub fn decide_read(
    group: &GroupSnapshot,
    config: &GateConfig,
    state: &GateState,
    now: Timestamp,
) -> (Plan, GateDecision) {
    decide_planned(group, config, state, plan(group, now), now)
}

/// [`decide_read`] on the planner's plan `full` of `group` at `now`: the gates narrow what the
/// planner decided (a simulation hands a broken planner's plan here to prove it is caught).
pub fn decide_planned(
    group: &GroupSnapshot,
    config: &GateConfig,
    state: &GateState,
    full: Plan,
    now: Timestamp,
) -> (Plan, GateDecision) {
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
            reach: Box::new(group.reach.clone()),
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

/// The wait of a group whose gate configuration `config` (read from `group`) has a key that
/// cannot be read: it holds until a person fixes that annotation (rule 3). `kubectl baton
/// resume` asks it too, to say what resuming does not lift.
pub fn invalid_configuration(group: &GroupSnapshot, config: &GateConfig) -> Option<GateWait> {
    config
        .invalid
        .as_ref()
        .map(|invalid| GateWait::InvalidGate {
            statefulset: invalid.statefulset.clone(),
            key: invalid.key,
            value: invalid.value.clone(),
            accepted: invalid.accepted,
            reach: Box::new(group.reach.clone()),
        })
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
            reach: Box::new(group.reach.clone()),
        };
        return GateDecision::hold(wait, BTreeSet::new()).apply(full);
    }
    if !config.enabled {
        let decision = forget_when_complete(group, &full, state);
        return (full, decision);
    }
    if let Some(wait) = invalid_configuration(group, config) {
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
pub(crate) mod tests;
