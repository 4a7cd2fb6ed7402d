//! Health checks as a gate: consecutive passes let the next step go, consecutive
//! failures halt the group. Pure, composed after [`super::decide()`]: it only ever takes
//! deletions away from the gated plan, and says what check state to store.
//!
//! The rules (the phased rollout operator's, adapted to zones):
//! - a run's outcome is `Pass`, `Fail` (the query and the value that failed it) or
//!   `Inconclusive` (Prometheus or a web endpoint unreachable, a query error, a web answer with
//!   nothing to judge): an inconclusive run never passes
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
//! The state (counts, last run, last step, and the revisions they are about) is group-wide,
//! stored in `baton.dev/check-state` on **every member**, and read from every member merged to
//! its most cautious ([`CheckState::read`]): the fewest passes, the most failures, the latest
//! run and the latest step. Why: the members are whatever StatefulSets carry the group's label,
//! so whoever may create one (without any right on the others) adds a member, and may delete
//! or recreate one they made. Kept on one member (the first by name, as it once was), a
//! newcomer sorting first and holding nothing made the state fresh: the `initialDelay` after a
//! step and the `interval` between runs were skipped and the failures counted towards a halt
//! forgotten. Read from all and merged, a member with no state (or an older one: a member
//! cluster back after an outage, a partial write) can only lengthen a wait; written to all
//! (each member whose stored state differs, a newcomer included), removing or renaming any
//! member leaves the state on the others. A member that cannot be read now (its cluster is out)
//! is read as last known and not written; it is rewritten once back. A member with no pods, or
//! that is no zone at all, is a member like any other.
//!
//! The counts are about the members' update revisions, by member: passes count for nothing once
//! any of them differs (a template changed, a member came or went); failures are forgotten only
//! when a member the counts were about rolls to another revision (its template changed: a new
//! rollout), never because a member came or went. In the cluster the state is written by the
//! leader with the resourceVersion it read, like the zones' gate state.

use std::collections::BTreeMap;
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
    /// No verdict: Prometheus or the web endpoint could not be asked, answered with an error,
    /// or (a web check) answered nothing to judge: no value at the path, too large, not JSON.
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
    /// What the queries returned, when the outcome does not say it (a pass: a failure names
    /// its own value), for the stored last outcome.
    pub seen: Option<String>,
}

impl CheckRun {
    /// The run as the stored last outcome (the status page, `kubectl baton`, the wait's
    /// message) tells it: a pass with the values seen (`passed (error-rate: 0.01)`), else the
    /// outcome.
    pub fn described(&self) -> String {
        match (&self.outcome, &self.seen) {
            (CheckOutcome::Pass, Some(seen)) => format!("passed ({seen})"),
            (outcome, _) => outcome.to_string(),
        }
    }
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
    /// The members' update revisions the counts are about, by member ([`revisions`]): passes
    /// seen before a template change say nothing of the new revision (module header).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub revisions: BTreeMap<String, String>,
    /// What an earlier baton stored instead of `revisions`: the update revisions joined in
    /// member order ([`target`]). Read, never written: it cannot tell a template change from a
    /// member that came or went, so a difference forgets the passes and keeps the failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl CheckState {
    /// The group's state: every member's stored state, each as it stands for the revisions the
    /// group rolls to now ([`CheckState::about`]), merged to the most cautious (module header);
    /// a fresh one when no member holds one. A member's state that cannot be read is left out
    /// with a warning naming the member (read alone, a fresh state passes nothing).
    pub fn read(group: &GroupSnapshot) -> (Self, Vec<GateWarning>) {
        let now = revisions(group);
        let mut merged: Option<Self> = None;
        let mut warnings = Vec::new();
        for member in &group.statefulsets {
            let Some(raw) = member.annotations.get(CHECK_STATE_ANNOTATION) else {
                continue;
            };
            match serde_json::from_str::<Self>(raw) {
                Ok(state)
                    if state.time(&state.last_run).is_ok()
                        && state.time(&state.last_step).is_ok() =>
                {
                    let state = state.about(&now);
                    merged = Some(match merged {
                        None => state,
                        Some(held) => held.most_cautious(state),
                    });
                }
                Ok(_) | Err(_) => warnings.push(GateWarning::UnreadableState {
                    statefulset: member.name.clone(),
                    value: raw.clone(),
                    error: format!("annotation {CHECK_STATE_ANNOTATION} is not a check state"),
                }),
            }
        }
        (merged.unwrap_or_default(), warnings)
    }

    /// This state as it stands for a group rolling to `now` (members' update revisions, by
    /// member): passes counted for other revisions or other members count for nothing;
    /// failures are forgotten only when a member they were counted for rolls to another
    /// revision, not when members come or go (module header).
    pub fn about(mut self, now: &BTreeMap<String, String>) -> Self {
        if !self.revisions.is_empty() {
            if self.revisions != *now {
                self.passes = 0;
            }
            let retargeted = self
                .revisions
                .iter()
                .any(|(member, seen)| now.get(member).is_some_and(|revision| revision != seen));
            if retargeted {
                self.failures = 0;
            }
        } else if let Some(target) = &self.target
            && *target
                != now
                    .values()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
        {
            self.passes = 0;
        }
        self.revisions = now.clone();
        self.target = None;
        self
    }

    /// Two states of the same group (each already [`CheckState::about`] the same revisions)
    /// merged to the most cautious: the fewest passes, the most failures, the latest run (with
    /// its outcome) and the latest step. No wait it implies is shorter, and no failure fewer,
    /// than either's.
    fn most_cautious(self, other: Self) -> Self {
        let later = |a: Option<Timestamp>, b: Option<Timestamp>| a.max(b).map(|at| at.to_string());
        let last_outcome = if other.last_run() > self.last_run() {
            other.last_outcome.clone()
        } else {
            self.last_outcome.clone().or(other.last_outcome.clone())
        };
        Self {
            passes: self.passes.min(other.passes),
            failures: self.failures.max(other.failures),
            last_run: later(self.last_run(), other.last_run()),
            last_step: later(self.last_step(), other.last_step()),
            last_outcome,
            revisions: self.revisions,
            target: None,
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

/// What the group rolls to: its members' update revisions. A run is about this target: one
/// made before it changed is not taken after.
pub fn target(group: &GroupSnapshot) -> String {
    group.update_revisions(",")
}

/// What the group rolls to, by member: each member's update revision (empty while it has
/// none). The counts are about these ([`CheckState::about`]).
pub fn revisions(group: &GroupSnapshot) -> BTreeMap<String, String> {
    group
        .statefulsets
        .iter()
        .map(|member| {
            let revision = member.update_revision.clone().unwrap_or_default();
            (member.name.clone(), revision)
        })
        .collect()
}

/// The writes that store `state` on every member whose stored state differs (module header):
/// none when all hold it already. Members that cannot be read now are not written.
fn store(group: &GroupSnapshot, state: &CheckState) -> Vec<AnnotationWrite> {
    let value = state.to_annotation();
    group
        .statefulsets
        .iter()
        .filter(|member| member.unreachable.is_none())
        .filter(|member| member.annotations.get(CHECK_STATE_ANNOTATION) != Some(&value))
        .map(|member| AnnotationWrite {
            statefulset: member.name.clone(),
            key: CHECK_STATE_ANNOTATION,
            value: Some(value.clone()),
        })
        .collect()
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

/// [`apply`] on the check state already read (its warnings left to the caller): a pass reads
/// the group's stored state once.
pub fn apply_with(
    group: &GroupSnapshot,
    stored: &CheckState,
    policy: &CheckPolicy,
    run: Option<&CheckRun>,
    (mut plan, mut decision): (Plan, GateDecision),
    now: Timestamp,
) -> (Plan, GateDecision) {
    if group.statefulsets.is_empty() {
        return (plan, decision);
    }
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
            state.last_outcome = Some(run.described());
        }
        decision.writes.extend(store(group, &state));
        return (plan, decision);
    }
    let forgetting = decision
        .writes
        .iter()
        .any(|write| write.key == STATE_ANNOTATION && write.value.is_none());
    if !rollout_in_progress(&plan) {
        if forgetting {
            // Forgotten on every member that holds it: one left behind would be read again.
            let carriers = group.statefulsets.iter().filter(|member| {
                member.unreachable.is_none()
                    && member.annotations.contains_key(CHECK_STATE_ANNOTATION)
            });
            let removals: Vec<AnnotationWrite> = carriers
                .map(|member| AnnotationWrite {
                    statefulset: member.name.clone(),
                    key: CHECK_STATE_ANNOTATION,
                    value: None,
                })
                .collect();
            decision.writes.extend(removals);
        }
        return (plan, decision);
    }
    let bypass = decision.bypass.filter(|until| now < *until);
    // As read already ([`CheckState::read`]); again for a state handed in from elsewhere.
    let mut state = stored.clone().about(&revisions(group));
    if let Some(run) = run {
        state.last_run = Some(run.at.to_string());
        state.last_outcome = Some(run.described());
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
            return halt(group, policy, run, state, plan, decision);
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
    decision.writes.extend(store(group, &state));
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
                reach: Box::new(group.reach.clone()),
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
    decision.writes.extend(store(group, &state));
    decision.settle(&plan);
    (plan, decision)
}

#[cfg(test)]
mod tests;
