//! Health checks as a gate: consecutive passes let the next step go, consecutive
//! failures halt the group. Pure, composed after [`super::decide()`]: it only ever takes
//! deletions away from the gated plan, and says what check state to store.
//!
//! The rules (the phased rollout operator's, adapted to zones):
//! - a run's outcome is `Pass`, `Fail` (the query and the value that failed it) or
//!   `Inconclusive` (Prometheus unreachable, a query error): an inconclusive run never passes
//!   a gate — it resets the consecutive passes — and never counts towards a halt;
//! - every step (a batch of pod deletions) needs `successThreshold` consecutive passes, counted
//!   only from runs at least `initialDelay` after the previous step; a step resets the count;
//!   so the first zone's first pod (the canary) and the first step of every later zone (after
//!   its soak) are gated like any other;
//! - `failureThreshold` consecutive failures halt the group: `baton.dev/halted` is written on
//!   the zone rolling (or about to), naming the check, the query, its value and the zone; the
//!   counts restart at zero and runs while halted count for nothing (whoever halted it), so
//!   resuming re-runs the gate before the next step;
//! - runs are due every `interval` while the group's rollout is in progress; the time of the
//!   last run is stored, so a new leader keeps the pace.
//!
//! - `onFailure: Warn` makes the check advisory: it runs and is stored the same, but never
//!   holds a step or halts; each failure is told ([`GateNotice::CheckFailed`]);
//! - while `baton.dev/bypass-gates-until` is in force, steps go without waiting for passes and
//!   failures halt nothing; each step that went without is told ([`GateNotice::Bypassed`]).
//!
//! The state (counts, last run, last step) is group-wide, stored in `baton.dev/check-state` on
//! the group's first member by name — in the cluster, written by the leader with the
//! resourceVersion it read, like the zones' gate state.

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::decision::{AnnotationWrite, GateDecision, GateNotice, GateVerdict, GateWait};
use super::keys::{CHECK_STATE_ANNOTATION, GateWarning, HALTED_ANNOTATION, STATE_ANNOTATION};
use super::rollback::ROLLBACK_ANNOTATION;
use crate::rollout::{GroupSnapshot, Plan};

/// A health check's timing and thresholds (a `RolloutHealthCheck`'s spec, as read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckPolicy {
    /// The `RolloutHealthCheck`'s name, for messages.
    pub name: String,
    pub interval: SignedDuration,
    pub initial_delay: SignedDuration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// What failing does: hold and halt, or only warn.
    pub on_failure: OnFailure,
}

/// What a failing check does (a `RolloutHealthCheck`'s `onFailure`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnFailure {
    /// Steps wait for passes; `failureThreshold` failures in a row halt the group.
    #[default]
    Halt,
    /// Nothing waits: a failure is an Event and a metric. For trying a check before trusting
    /// it.
    Warn,
    /// As `Halt`, but `failureThreshold` failures roll the group back instead of halting it
    /// ([`super::rollback`]).
    Rollback,
}

/// What one run of the check's queries came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckOutcome {
    Pass,
    /// `query` (as sent) failed; `value` is what it returned (`no samples` when none).
    Fail {
        query: String,
        value: String,
    },
    /// No verdict: Prometheus could not be asked or answered with an error.
    Inconclusive {
        why: String,
    },
}

impl fmt::Display for CheckOutcome {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pass => formatter.write_str("passed"),
            Self::Fail { query, value } => write!(formatter, "query `{query}` returned {value}"),
            Self::Inconclusive { why } => write!(formatter, "inconclusive: {why}"),
        }
    }
}

/// One run of the check, made by the I/O layer because it was [`CheckState::due`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    pub at: Timestamp,
    pub outcome: CheckOutcome,
}

/// The group's stored check state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckState {
    #[serde(default)]
    pub passes: u32,
    #[serde(default)]
    pub failures: u32,
    /// When the check last ran (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// When the last step (batch of deletions) was made (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_step: Option<String>,
    /// The last outcome, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_outcome: Option<String>,
    /// The revisions the counts are about ([`target`]): passes seen before a template change
    /// say nothing of the new revision. Absent (a state stored before it was kept): the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl CheckState {
    /// The state stored on the group's first member, or a fresh one (with a warning when the
    /// stored one cannot be read: a fresh state passes nothing).
    pub fn read(group: &GroupSnapshot) -> (Self, Option<GateWarning>) {
        let Some((member, raw)) = group.statefulsets.first().and_then(|member| {
            let raw = member.annotations.get(CHECK_STATE_ANNOTATION)?;
            Some((member, raw))
        }) else {
            return (Self::default(), None);
        };
        match serde_json::from_str::<Self>(raw) {
            Ok(state)
                if state.time(&state.last_run).is_ok() && state.time(&state.last_step).is_ok() =>
            {
                (state, None)
            }
            Ok(_) | Err(_) => (
                Self::default(),
                Some(GateWarning::UnreadableState {
                    statefulset: member.name.clone(),
                    value: raw.clone(),
                    error: format!("annotation {CHECK_STATE_ANNOTATION} is not a check state"),
                }),
            ),
        }
    }

    fn time(&self, field: &Option<String>) -> Result<Option<Timestamp>, jiff::Error> {
        field.as_deref().map(str::parse).transpose()
    }

    fn last_run(&self) -> Option<Timestamp> {
        self.time(&self.last_run).ok().flatten()
    }

    fn last_step(&self) -> Option<Timestamp> {
        self.time(&self.last_step).ok().flatten()
    }

    /// Whether the I/O layer should run the check now.
    pub fn due(&self, policy: &CheckPolicy, now: Timestamp) -> bool {
        self.next_run(policy).is_none_or(|next| next <= now)
    }

    fn next_run(&self, policy: &CheckPolicy) -> Option<Timestamp> {
        let last = self.last_run()?;
        Some(
            last.saturating_add(policy.interval)
                .unwrap_or(Timestamp::MAX),
        )
    }

    fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a struct of numbers and strings always serialises")
    }
}

/// What the group rolls to: its members' update revisions. A run is about this target; when it
/// changes, the counts start again.
pub fn target(group: &GroupSnapshot) -> String {
    group.update_revisions(",")
}

/// Whether the group still has pods to update: only then do checks run.
pub fn rollout_in_progress(plan: &Plan) -> bool {
    plan.progress.iter().any(|progress| !progress.done)
}

/// Applies the health check to the gated plan (see the module header). `run` is the check run
/// made this pass, if one was due.
pub fn apply(
    group: &GroupSnapshot,
    policy: &CheckPolicy,
    run: Option<&CheckRun>,
    (plan, mut decision): (Plan, GateDecision),
    now: Timestamp,
) -> (Plan, GateDecision) {
    let (stored, warning) = CheckState::read(group);
    decision.warnings.extend(warning);
    apply_with(group, &stored, policy, run, (plan, decision), now)
}

/// [`apply`] on the check state already read (its warning left to the caller): a pass reads
/// the group's stored state once.
pub fn apply_with(
    group: &GroupSnapshot,
    stored: &CheckState,
    policy: &CheckPolicy,
    run: Option<&CheckRun>,
    (mut plan, mut decision): (Plan, GateDecision),
    now: Timestamp,
) -> (Plan, GateDecision) {
    let Some(holder) = group.statefulsets.first().map(|member| member.name.clone()) else {
        return (plan, decision);
    };
    if decision.rolling_back || matches!(decision.wait(), Some(GateWait::InvalidGate { .. })) {
        return (plan, decision);
    }
    if matches!(decision.wait(), Some(GateWait::Halted { .. })) {
        // Runs while halted count for nothing: resuming re-runs the gate from zero.
        let mut state = CheckState {
            passes: 0,
            failures: 0,
            ..stored.clone()
        };
        if let Some(run) = run {
            state.last_run = Some(run.at.to_string());
            state.last_outcome = Some(run.outcome.to_string());
        }
        if state != *stored {
            decision.writes.push(AnnotationWrite {
                statefulset: holder,
                key: CHECK_STATE_ANNOTATION,
                value: Some(state.to_annotation()),
            });
        }
        return (plan, decision);
    }
    let forgetting = decision
        .writes
        .iter()
        .any(|write| write.key == STATE_ANNOTATION && write.value.is_none());
    if !rollout_in_progress(&plan) {
        if forgetting
            && group.statefulsets[0]
                .annotations
                .contains_key(CHECK_STATE_ANNOTATION)
        {
            decision.writes.push(AnnotationWrite {
                statefulset: holder,
                key: CHECK_STATE_ANNOTATION,
                value: None,
            });
        }
        return (plan, decision);
    }
    let bypass = decision.bypass.filter(|until| now < *until);
    let mut state = stored.clone();
    let rolling_to = target(group);
    if state
        .target
        .as_ref()
        .is_some_and(|seen| *seen != rolling_to)
    {
        state.passes = 0;
        state.failures = 0;
    }
    state.target = Some(rolling_to);
    if let Some(run) = run {
        state.last_run = Some(run.at.to_string());
        state.last_outcome = Some(run.outcome.to_string());
        match &run.outcome {
            CheckOutcome::Pass => {
                let settled = state.last_step().is_none_or(|step| {
                    run.at
                        >= step
                            .saturating_add(policy.initial_delay)
                            .unwrap_or(Timestamp::MAX)
                });
                state.passes += u32::from(settled);
                state.failures = 0;
            }
            CheckOutcome::Fail { .. } => {
                state.passes = 0;
                state.failures += 1;
            }
            CheckOutcome::Inconclusive { .. } => state.passes = 0,
        }
        if policy.on_failure == OnFailure::Warn
            && let CheckOutcome::Fail { .. } = &run.outcome
        {
            decision.notices.push(GateNotice::CheckFailed {
                zone: about(group, &plan),
                check: policy.name.clone(),
                outcome: run.outcome.to_string(),
            });
        }
        if state.failures >= policy.failure_threshold
            && policy.on_failure != OnFailure::Warn
            && bypass.is_none()
        {
            return halt(group, policy, run, state, plan, decision, &holder);
        }
    }
    let deleting_in = plan
        .deletions()
        .find_map(|action| action.rolls().map(str::to_owned));
    if let Some(zone) = deleting_in {
        let passed = state.passes >= policy.success_threshold;
        if passed || policy.on_failure == OnFailure::Warn || bypass.is_some() {
            if let (false, Some(until)) = (passed || policy.on_failure == OnFailure::Warn, bypass) {
                decision.notices.push(GateNotice::Bypassed {
                    zone,
                    gate: format!(
                        "health check {} ({} of {} passes)",
                        policy.name, state.passes, policy.success_threshold
                    ),
                    until,
                });
            }
            state.passes = 0;
            state.last_step = Some(now.to_string());
        } else {
            plan.actions.retain(|action| action.rolls().is_none());
            decision.verdict = GateVerdict::Hold {
                wait: GateWait::HealthCheck {
                    zone,
                    check: policy.name.clone(),
                    passes: state.passes,
                    needed: policy.success_threshold,
                    last: state.last_outcome.clone(),
                },
                pass: Default::default(),
            };
        }
    }
    let next = state.next_run(policy).unwrap_or(now).max(now);
    plan.recheck_after = Some(plan.recheck_after.map_or(next, |at| at.min(next)));
    decision.recheck_after = Some(decision.recheck_after.map_or(next, |at| at.min(next)));
    if state != *stored {
        decision.writes.push(AnnotationWrite {
            statefulset: holder,
            key: CHECK_STATE_ANNOTATION,
            value: Some(state.to_annotation()),
        });
    }
    decision.settle(&plan);
    (plan, decision)
}

/// The zone a run is about: the one deleting, else rolling (pods updated, not done), else the
/// next to roll.
fn about(group: &GroupSnapshot, plan: &Plan) -> String {
    plan.deletions()
        .find_map(|action| action.rolls().map(str::to_owned))
        .or_else(|| {
            plan.rolling_or_next()
                .map(|progress| progress.statefulset.clone())
        })
        .unwrap_or_else(|| group.statefulsets[0].name.clone())
}

/// `failureThreshold` consecutive failures: halt (or ask for a rollback), on the zone rolling or
/// next.
fn halt(
    group: &GroupSnapshot,
    policy: &CheckPolicy,
    run: &CheckRun,
    mut state: CheckState,
    mut plan: Plan,
    mut decision: GateDecision,
    holder: &str,
) -> (Plan, GateDecision) {
    let zone = about(group, &plan);
    let why = format!(
        "health check {} failed {} times in a row while {zone} rolled: {}",
        policy.name, state.failures, run.outcome
    );
    state.passes = 0;
    state.failures = 0;
    plan.actions.retain(|action| action.rolls().is_none());
    // Asking for a rollback instead of halting: the controller starts it on the next pass.
    let rolls_back = policy.on_failure == OnFailure::Rollback || decision.rollback_on_failure;
    let (key, wait) = if rolls_back {
        (
            ROLLBACK_ANNOTATION,
            GateWait::RollingBack {
                zone: zone.clone(),
                why: why.clone(),
            },
        )
    } else {
        (
            HALTED_ANNOTATION,
            GateWait::Halted {
                statefulset: zone.clone(),
                why: why.clone(),
            },
        )
    };
    decision.verdict = GateVerdict::Hold {
        wait,
        pass: Default::default(),
    };
    if rolls_back {
        decision.writes.extend(super::rollback::ask(group, &why));
    } else {
        decision.writes.push(AnnotationWrite {
            statefulset: zone,
            key,
            value: Some(why),
        });
    }
    decision.writes.push(AnnotationWrite {
        statefulset: holder.to_owned(),
        key: CHECK_STATE_ANNOTATION,
        value: Some(state.to_annotation()),
    });
    decision.settle(&plan);
    (plan, decision)
}

#[cfg(test)]
mod tests;
