//! A group's whole rollout pass, decided in one call: from what the controller read (the
//! snapshot, the gate keys and state parsed once, the health check and the run that ended, the
//! hook's answer, what was seen rolling, `now`) to the ordered effects to carry out, why the
//! group waits and when to look again.
//!
//! Why one call: the planner, the gates, the checks, the hooks, the rollbacks and the Events
//! each decide a part of a pass, and a pass is only as safe as the order they are composed in
//! (a rollback before anything is planned; gate state stored before any pod goes; a budget
//! consulted before each deletion; an Event only for what happened). Composed here once, the
//! controller only reads and runs [`Pass::effects`] in order, and the simulations drive the
//! very function the leader runs.
//!
//! The order of the effects is the pass's:
//! 1. a rollback asked for starts, or a template goes back ([`Effect::StartRollback`],
//!    [`Effect::RestoreTemplates`]): either is the whole pass, its watch event brings the next;
//! 2. the hook's answer is recorded, or the hook due is called; a due health check run starts;
//! 3. what people should hear: a zone completed, the planner's warnings and wait, the gates'
//!    warnings, notices and wait ([`Effect::Tell`]);
//! 4. the gates' state is stored ([`Effect::Store`]; stale: the pass ends, acting on nothing);
//! 5. the actions, each deletion after its zone-aware budget was consulted
//!    ([`Effect::ConsultBudget`]: a budget that holds ends the pass).
//!
//! I/O stays out: reading the check and its Secrets, the queries, the hook's POST, the budget's
//! record and every write are the controller's, which also checks once per effect that its
//! leadership term still lasts ([`Effect::needs_term`]).

use std::time::Duration;

use jiff::Timestamp;

use crate::explained::{Explained, Explanation, Severity};
use crate::gates::checks::{self, CheckOutcome, CheckPolicy, CheckRun, CheckState};
use crate::gates::health_check::{
    self, Author, QuerySpec, Source, Spec, holding_policy, render_query,
};
use crate::gates::hooks::{self, HookAnswer, HookCall};
use crate::gates::job_check::{self, JobRun};
use crate::gates::keys::{self, GateConfig, GateWarning, HEALTH_CHECK_ANNOTATION};
use crate::gates::rollback::{self, RollbackRecord, Status};
use crate::gates::{AnnotationWrite, GateDecision, GateNotice, GateState, GateWait};
use crate::rollout::completion::{self, Rolling};
use crate::rollout::{Action, GroupSnapshot, Plan, Told, WaitReason, plan};

#[cfg(test)]
mod tests;

/// The group's gate keys and stored state, parsed once for the whole pass.
#[derive(Debug, Clone)]
pub struct Gates {
    pub config: GateConfig,
    /// What could not be read of the keys and the stored gate state.
    pub warnings: Vec<GateWarning>,
    pub state: GateState,
    pub check_state: CheckState,
    /// Members whose stored check state could not be read.
    pub check_warnings: Vec<GateWarning>,
}

impl Gates {
    pub fn read(group: &GroupSnapshot) -> Self {
        let (config, mut warnings) = keys::read(group);
        let (state, state_warnings) = GateState::read(group);
        warnings.extend(state_warnings);
        let (check_state, check_warnings) = CheckState::read(group);
        Self {
            config,
            warnings,
            state,
            check_state,
            check_warnings,
        }
    }

    /// The health check to read for this pass: the one the group names, unless its keys are
    /// invalid or it is halted (then no check decides anything, and none is read).
    pub fn check_to_read(&self) -> Option<&str> {
        self.check_named().filter(|_| self.state.halted.is_empty())
    }

    /// The group's hook, unless its keys are invalid.
    pub fn hook(&self) -> Option<&str> {
        self.config
            .hook
            .as_deref()
            .filter(|_| self.config.invalid.is_none())
    }

    fn check_named(&self) -> Option<&str> {
        self.config
            .health_check
            .as_deref()
            .filter(|_| self.config.invalid.is_none())
    }
}

/// What the controller read of the group's health check.
#[derive(Debug, Clone, Default)]
pub enum CheckRead {
    /// None named, or none to read ([`Gates::check_to_read`]).
    #[default]
    NotRead,
    /// The check could not be read (the message says why): it holds every step.
    Unreadable(String),
    Read(Box<ReadCheck>),
}

/// A health check as read, and its run for this spec and target ([`run_key`]).
#[derive(Debug, Clone)]
pub struct ReadCheck {
    pub spec: Spec,
    pub generation: i64,
    /// The check's uid: a Job check's Jobs are owned by it.
    pub uid: String,
    pub author: Author,
    /// The run that ended since the last pass, taken from the controller's runs.
    pub ended: Option<EndedRun>,
    /// A run is in flight.
    pub running: bool,
}

/// A check run that ended: its outcome, and when it could not be made as asked (a refused
/// address or credential), why, for a Warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedRun {
    pub run: CheckRun,
    pub problem: Option<String>,
}

/// The key a check run is made and taken for: the check as written now (its generation) and
/// what the group rolls to now, so a run made before either changed never counts after it.
pub fn run_key(generation: i64, group: &GroupSnapshot) -> String {
    format!("{generation}/{}", checks::target(group))
}

/// What the controller knows of the group's hook calls.
#[derive(Debug, Clone, Default)]
pub struct HookRead {
    /// Why the operator's bounds refuse the hook's address, if they do.
    pub refused: Option<String>,
    /// An answer not yet recorded, under its call's key ([`hooks::key`]).
    pub ended: Option<(String, HookAnswer)>,
    /// The key of the call in flight.
    pub running: Option<String>,
}

/// Everything a pass decides on.
#[derive(Debug, Clone, Copy)]
pub struct Read<'a> {
    /// The group, with the deletions made but not seen yet counted in.
    pub snapshot: &'a GroupSnapshot,
    pub gates: &'a Gates,
    pub check: &'a CheckRead,
    pub hook: &'a HookRead,
    /// The zones this leader saw rolling ([`completion`]).
    pub rolling: &'a Rolling,
    /// The group's namespace, for the check's queries.
    pub namespace: &'a str,
    pub now: Timestamp,
}

/// The planner and the gates, composed on a pass's check: the planner's plan narrowed by soak,
/// halt, zone order, steps, approvals and rollbacks, then the health check's policy and run. One
/// seam, so that a simulation can hand the pass a broken one and see it caught.
pub type Gate<'a> = dyn Fn(
        &GroupSnapshot,
        &Gates,
        Option<(&CheckPolicy, Option<&CheckRun>)>,
        Timestamp,
    ) -> (Plan, GateDecision)
    + 'a;

/// The real [`Gate`].
pub fn gate(
    group: &GroupSnapshot,
    gates: &Gates,
    check: Option<(&CheckPolicy, Option<&CheckRun>)>,
    now: Timestamp,
) -> (Plan, GateDecision) {
    gate_planned(group, gates, plan(group, now), check, now)
}

/// [`gate`] on the planner's plan `full`.
pub fn gate_planned(
    group: &GroupSnapshot,
    gates: &Gates,
    full: Plan,
    check: Option<(&CheckPolicy, Option<&CheckRun>)>,
    now: Timestamp,
) -> (Plan, GateDecision) {
    let (plan, mut decision) =
        crate::gates::decide_planned(group, &gates.config, &gates.state, full, now);
    decision.warnings = gates.warnings.clone();
    let Some((policy, run)) = check else {
        return (plan, decision);
    };
    if decision.rolling_back {
        // Checks hold no rollback: nothing of theirs is read or told.
        return (plan, decision);
    }
    decision
        .warnings
        .extend(gates.check_warnings.iter().cloned());
    checks::apply_with(
        group,
        &gates.check_state,
        policy,
        run,
        (plan, decision),
        now,
    )
}

/// One thing a pass does, in order ([`Pass::effects`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Start the rollback every member asks for (reading the members' history, storing the
    /// records, removing the request), or when `refused` says why not, remove the request and
    /// say so. The pass ends with it.
    StartRollback {
        carrier: String,
        why: String,
        refused: Option<String>,
    },
    /// Write each member's pod template back from the revision its record returns to. The pass
    /// ends with it.
    RestoreTemplates(Vec<(String, RollbackRecord)>),
    /// Take the hook answer kept under `key` and store what it leaves, whatever changed
    /// meanwhile (a record lost to a resourceVersion race would call the hook again).
    RecordHookAnswer {
        key: String,
        writes: Vec<AnnotationWrite>,
    },
    /// Call the hook beside the reconciles, if a fresh read shows it still due (the cache may
    /// lag a call just made).
    CallHook(HookCall),
    /// Start a health check run beside the reconciles.
    StartCheck(Box<CheckStart>),
    /// Tell people (an Event), and with `history`, add it to the status page's history.
    Tell {
        statefulset: String,
        explanation: Explanation,
        history: bool,
    },
    /// Store the gates' state before acting: read at the snapshot's resourceVersions, so a
    /// stale one ends the pass (the write that made it stale brings the next).
    Store(Vec<AnnotationWrite>),
    /// Count what the gates let go (metrics), next to the Events that tell it: a stale
    /// [`Effect::Store`] after them ends the pass, and the run it was about is spent, so
    /// counting after the store would lose what the Events said.
    Noticed(Vec<GateNotice>),
    /// Judge the deletion of `pod` (by baton, or by the StatefulSet controller past a lowered
    /// partition) against the zone-aware budgets and claim it in the budget's record; a budget
    /// that holds it ends the pass, which waits for it.
    ConsultBudget {
        statefulset: String,
        pod: String,
        free_replacement: bool,
    },
    /// Carry out `action`; once done, tell `told` (and add it to the history).
    Act { action: Action, told: Option<Told> },
}

impl Effect {
    /// Whether the effect changes the cluster or claims something for the leader: carried out
    /// only within the term the pass started in.
    pub fn needs_term(&self) -> bool {
        !matches!(self, Self::Tell { .. } | Self::StartCheck(_))
    }
}

/// A health check run to start: the check, its queries as rendered for the zone now (each with
/// the query as sent, for messages), and the bound on the run (the operator's cap applies on
/// top).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckStart {
    /// The run's key ([`run_key`]).
    pub key: String,
    pub name: String,
    pub spec: Spec,
    pub author: Author,
    pub timeout: Duration,
    pub queries: Vec<(QuerySpec, String)>,
    /// A Job check's Job for the step, and the check's uid (its owner).
    pub job: Option<(JobRun, String)>,
}

/// A pass, decided.
#[derive(Debug, Clone)]
pub struct Pass {
    /// To carry out in order.
    pub effects: Vec<Effect>,
    /// The plan as the gates allow it: its progress and the planner's wait, for metrics.
    pub plan: Plan,
    /// Why a gate holds the group, if one does.
    pub gate_wait: Option<GateWait>,
    /// The gates' notices, for metrics.
    pub notices: Vec<GateNotice>,
    /// The zones seen rolling after this pass, for the next.
    pub rolling: Rolling,
}

impl Pass {
    /// The actions the pass takes, in order.
    pub fn actions(&self) -> impl Iterator<Item = &Action> {
        self.effects.iter().filter_map(|effect| match effect {
            Effect::Act { action, .. } => Some(action),
            _ => None,
        })
    }

    /// Whether the pass is a rollback's step, which is the whole pass: nothing planned.
    pub fn starts_with_rollback(&self) -> bool {
        matches!(
            self.effects.first(),
            Some(Effect::StartRollback { .. } | Effect::RestoreTemplates(_))
        )
    }

    /// What the group waits for and why, as the status page records it: a gate's hold, else
    /// the planner's.
    pub fn waiting(&self) -> Option<(&'static str, String)> {
        self.gate_wait
            .as_ref()
            .map(Explained::kind_and_message)
            .or_else(|| self.plan.waiting.as_ref().map(Explained::kind_and_message))
    }

    /// When to look again without any watch event (a soak ends, a pod becomes available).
    pub fn recheck_after(&self) -> Option<Timestamp> {
        self.plan.recheck_after
    }

    /// Some StatefulSet of the group still has pods to update.
    pub fn rollout_pending(&self) -> bool {
        rollout_pending(&self.plan)
    }

    /// Whether the group waits while it still has pods to roll (a wait once done is no wait).
    pub fn waiting_to_roll(&self) -> bool {
        (self.plan.waiting.is_some() || self.gate_wait.is_some()) && self.rollout_pending()
    }
}

/// The whole pass over `read`, with the real planner and gates.
pub fn decide(read: &Read<'_>) -> Pass {
    decide_gated_by(read, &gate)
}

/// [`decide`] with `gate` composing the planner and the gates.
pub fn decide_gated_by(read: &Read<'_>, gate: &Gate<'_>) -> Pass {
    let group = read.snapshot;
    if let Some(effect) = rollback_step(group) {
        return Pass {
            effects: vec![effect],
            plan: Plan::default(),
            gate_wait: None,
            notices: Vec::new(),
            rolling: read.rolling.clone(),
        };
    }
    let mut effects = Vec::new();
    let check = CheckInput::of(read);
    let (plan, mut decision) = gate(
        group,
        read.gates,
        check
            .policy
            .as_ref()
            .map(|policy| (policy, check.run.as_ref())),
        read.now,
    );
    if let Some(name) = read.gates.check_named() {
        let judged = !decision.rolling_back
            && !matches!(decision.wait(), Some(GateWait::Halted { .. }))
            && checks::rollout_in_progress(&plan);
        if judged {
            if let Some(why) = &check.problem {
                decision.warnings.push(GateWarning::UnusableHealthCheck {
                    statefulset: carrier(group),
                    why: why.clone(),
                });
            }
            if let Some(start) = check.start {
                let variables = health_check::variables(group, &plan, read.namespace);
                let queries = start
                    .spec
                    .queries
                    .iter()
                    .map(|query| render_query(query, &variables))
                    .collect();
                let job = match start.spec.source() {
                    Ok(Source::Job(spec)) => {
                        job_run(read, name, spec, &variables, &plan, check.policy.as_ref())
                    }
                    _ => Some(None),
                };
                // A Job check's run waits for the next pass when this one makes a step: the
                // Job is about the zone after the step, not during it.
                if let Some(job) = job {
                    effects.push(Effect::StartCheck(Box::new(CheckStart {
                        name: name.to_owned(),
                        queries,
                        job,
                        ..start
                    })));
                }
            }
        }
    }
    let plan = match read.gates.hook() {
        Some(url) => {
            let (plan, hooked, call) =
                hooks::apply_with(group, &read.gates.state, url, (plan, decision), read.now);
            decision = match &read.hook.refused {
                Some(why) => hooks::refuse(hooked, why.clone()),
                None => {
                    let mut hooked = hooked;
                    hooked.hook = call;
                    hooked
                }
            };
            effects.extend(hook_effect(read, &decision));
            plan
        }
        None => plan,
    };
    let mut rolling = read.rolling.clone();
    for (statefulset, revision) in completion::completed(&mut rolling, group, &plan) {
        let note = format!("every pod of {statefulset} runs revision {revision}");
        effects.push(tell(
            statefulset,
            Severity::Normal,
            "RolloutComplete",
            "UpdateStatus",
            note,
            true,
        ));
    }
    effects.extend(plan_told(&group.name, &plan));
    effects.extend(gate_told(&group.name, &decision));
    // Counted where they are told: a stale store below ends the pass, and the count must
    // still agree with the Events already written.
    if !decision.notices.is_empty() {
        effects.push(Effect::Noticed(decision.notices.clone()));
    }
    if !decision.writes.is_empty() {
        effects.push(Effect::Store(decision.writes.clone()));
    }
    effects.extend(acting(&plan));
    Pass {
        effects,
        gate_wait: decision.wait().cloned(),
        notices: decision.notices,
        plan,
        rolling,
    }
}

/// A Job check's run for this pass: `Some(None)` for any other check, `None` when the pass makes
/// a step (the run waits for the next pass, [`job_check`]'s header), else the Job of the step:
/// named after the last step stored, created from `initialDelay` after it.
fn job_run(
    read: &Read<'_>,
    name: &str,
    spec: &job_check::JobSpec,
    variables: &std::collections::BTreeMap<&str, &str>,
    plan: &Plan,
    policy: Option<&CheckPolicy>,
) -> Option<Option<(JobRun, String)>> {
    if plan.deletions().any(|action| action.rolls().is_some()) {
        return None;
    }
    let CheckRead::Read(read_check) = read.check else {
        return None;
    };
    let step = read.gates.check_state.last_step.as_deref();
    let target = job_check::Target {
        check: name,
        check_uid: &read_check.uid,
        generation: read_check.generation,
        variables,
        step,
    };
    let delay = policy.map_or(jiff::SignedDuration::ZERO, |policy| policy.initial_delay);
    let create_from = step
        .and_then(|step| step.parse::<Timestamp>().ok())
        .map(|step| step.saturating_add(delay).unwrap_or(Timestamp::MAX));
    let run = JobRun {
        job: target.job(spec),
        deadline: spec.deadline().ok()?,
        create_from,
    };
    Some(Some((run, read_check.uid.clone())))
}

/// A rollback's step, which is the whole pass when there is one: a request starts it (or is
/// refused), then each template goes back.
fn rollback_step(group: &GroupSnapshot) -> Option<Effect> {
    let status = rollback::status(group, |_| false);
    if let Some((carrier, why)) = rollback::request(group) {
        return Some(Effect::StartRollback {
            carrier: carrier.to_owned(),
            why: why.to_owned(),
            refused: rollback::refuse_request(&group.name, &status),
        });
    }
    let Status::Restoring(restoring) = status else {
        return None;
    };
    let unwritten: Vec<(String, RollbackRecord)> = restoring
        .into_iter()
        .filter(|(_, record)| !record.restored)
        .collect();
    (!unwritten.is_empty()).then_some(Effect::RestoreTemplates(unwritten))
}

/// The check's policy and run for this pass, a problem to warn of, and a run to start (its
/// queries rendered once the plan is known).
#[derive(Default)]
struct CheckInput {
    policy: Option<CheckPolicy>,
    run: Option<CheckRun>,
    problem: Option<String>,
    start: Option<CheckStart>,
}

impl CheckInput {
    fn of(read: &Read<'_>) -> Self {
        let Some(name) = read.gates.check_named() else {
            return Self::default();
        };
        let now = read.now;
        let state = &read.gates.check_state;
        // A check that cannot be used is paced like a usable one: a run (and its write) per
        // interval, not per pass.
        let unusable = |policy: CheckPolicy, why: String| Self {
            run: state.due(&policy, now).then(|| CheckRun {
                at: now,
                seen: None,
                outcome: CheckOutcome::Inconclusive { why: why.clone() },
            }),
            policy: Some(policy),
            problem: Some(why),
            start: None,
        };
        let read_check = match read.check {
            CheckRead::NotRead => {
                return Self {
                    policy: Some(holding_policy(name)),
                    ..Self::default()
                };
            }
            CheckRead::Unreadable(why) => return unusable(holding_policy(name), why.clone()),
            CheckRead::Read(read_check) => read_check,
        };
        let kind = health_check::KIND;
        let policy = match read_check.spec.policy(name) {
            Ok(policy) => policy,
            Err(error) => return unusable(holding_policy(name), format!("{kind} {name}: {error}")),
        };
        if let Some(ended) = &read_check.ended {
            return Self {
                policy: Some(policy),
                run: Some(ended.run.clone()),
                problem: ended.problem.clone(),
                start: None,
            };
        }
        if !state.due(&policy, now) || read_check.running {
            return Self {
                policy: Some(policy),
                ..Self::default()
            };
        }
        let timeout = match read_check.spec.timeout() {
            Ok(timeout) => timeout,
            Err(error) => return unusable(policy, format!("{kind} {name}: {error}")),
        };
        Self {
            policy: Some(policy),
            start: Some(CheckStart {
                key: run_key(read_check.generation, read.snapshot),
                name: name.to_owned(),
                spec: read_check.spec.clone(),
                author: read_check.author.clone(),
                timeout,
                queries: Vec::new(),
                job: None,
            }),
            ..Self::default()
        }
    }
}

/// The member a check's warning is told on: the first naming it.
fn carrier(group: &GroupSnapshot) -> String {
    group
        .statefulsets
        .iter()
        .find(|member| member.annotations.contains_key(HEALTH_CHECK_ANNOTATION))
        .map(|member| member.name.clone())
        .unwrap_or_default()
}

/// The hook's answer to record, or the call to make, for the call due now.
fn hook_effect(read: &Read<'_>, decision: &GateDecision) -> Option<Effect> {
    let call = decision.hook.as_ref()?;
    let key = hooks::key(call);
    if let Some((ended, answer)) = &read.hook.ended
        && *ended == key
    {
        let writes = hooks::record_with(
            read.snapshot,
            read.gates.config.rollback_on_failure,
            call,
            answer.answer.clone(),
            answer.at,
        );
        return Some(Effect::RecordHookAnswer { key, writes });
    }
    (read.hook.running.as_ref() != Some(&key)).then(|| Effect::CallHook(call.clone()))
}

fn tell(
    statefulset: impl Into<String>,
    severity: Severity,
    reason: &str,
    action: &str,
    note: String,
    history: bool,
) -> Effect {
    Effect::Tell {
        statefulset: statefulset.into(),
        explanation: Explanation {
            severity,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note,
        },
        history,
    }
}

/// The planner's warnings, and why it waits while there is something to roll (or while a
/// member blocks the group: a person must act).
fn plan_told(group: &str, plan: &Plan) -> Vec<Effect> {
    let mut told: Vec<Effect> = plan
        .warnings
        .iter()
        .map(|warning| Effect::Tell {
            statefulset: warning.statefulset().to_owned(),
            explanation: Explanation::of_warning(warning),
            history: false,
        })
        .collect();
    let Some(waiting) = &plan.waiting else {
        return told;
    };
    let blocking = matches!(
        waiting,
        WaitReason::NonOnDeleteMember { .. } | WaitReason::NoUpdateRevision { .. }
    );
    if !blocking && !rollout_pending(plan) {
        return told;
    }
    let subject = waiting
        .statefulset()
        .map(str::to_owned)
        .or_else(|| match waiting {
            WaitReason::MultipleNotReady { statefulsets } | WaitReason::Paused { statefulsets } => {
                statefulsets.first().cloned()
            }
            _ => None,
        });
    if let Some(statefulset) = subject {
        let severity = if blocking {
            Severity::Warning
        } else {
            Severity::Normal
        };
        let note = format!("rollout group {group} waits: {waiting}");
        told.push(tell(
            statefulset,
            severity,
            waiting.kind(),
            "Wait",
            note,
            false,
        ));
    }
    told
}

/// The gates' warnings, notices and wait. Halted, an invalid gate, a refused hook and a
/// reverted template are Warnings (a person must act); the other waits are Normal.
fn gate_told(group: &str, decision: &GateDecision) -> Vec<Effect> {
    let mut told: Vec<Effect> = decision
        .warnings
        .iter()
        .filter_map(|warning| {
            Some(Effect::Tell {
                statefulset: warning.statefulset()?.to_owned(),
                explanation: Explanation::of_warning(warning),
                history: false,
            })
        })
        .collect();
    for notice in &decision.notices {
        let severity = if notice.is_warning() {
            Severity::Warning
        } else {
            Severity::Normal
        };
        let note = format!("rollout group {group}: {notice}");
        told.push(tell(
            notice.statefulset(),
            severity,
            notice.kind(),
            "Gate",
            note,
            false,
        ));
    }
    if let Some(wait) = decision.wait() {
        let severity = match wait {
            GateWait::Halted { .. }
            | GateWait::InvalidGate { .. }
            | GateWait::RefusedHook { .. }
            | GateWait::TemplateReverted { .. } => Severity::Warning,
            GateWait::Soak { .. }
            | GateWait::ZoneUnfinished { .. }
            | GateWait::HealthCheck { .. }
            | GateWait::Ramp { .. }
            | GateWait::Batch { .. }
            | GateWait::AwaitingApproval { .. }
            | GateWait::RollingBack { .. }
            | GateWait::Hook { .. } => Severity::Normal,
        };
        let note = format!("rollout group {group} waits: {wait}");
        told.push(tell(
            wait.statefulset(),
            severity,
            wait.kind(),
            "Gate",
            note,
            false,
        ));
    }
    told
}

/// The plan's actions, each deletion after its budget: a pod baton deletes, and each pod a
/// lowered partition releases to the StatefulSet controller (a rollout deletion for the
/// budgets, as if baton deleted it; one the plan also replaces, being down already, takes no
/// availability away).
fn acting(plan: &Plan) -> Vec<Effect> {
    let mut effects = Vec::new();
    for action in &plan.actions {
        match action {
            Action::DeletePod {
                statefulset,
                pod,
                unavailable,
                ..
            } => effects.push(Effect::ConsultBudget {
                statefulset: statefulset.clone(),
                pod: pod.clone(),
                free_replacement: unavailable.is_some(),
            }),
            Action::SetPartition {
                statefulset,
                releases,
                ..
            } => {
                for release in releases {
                    let free_replacement = plan.actions.iter().any(|action| {
                        matches!(action, Action::DeletePod { pod, unavailable: Some(_), .. } if *pod == release.pod)
                    });
                    effects.push(Effect::ConsultBudget {
                        statefulset: statefulset.clone(),
                        pod: release.pod.clone(),
                        free_replacement,
                    });
                }
            }
            Action::SetCurrentRevision { .. } => {}
        }
        effects.push(Effect::Act {
            action: action.clone(),
            told: action.told(&plan.progress),
        });
    }
    effects
}

/// Some StatefulSet of the group still has pods to update.
fn rollout_pending(plan: &Plan) -> bool {
    plan.progress
        .iter()
        .any(|progress| progress.updated < progress.total)
}
