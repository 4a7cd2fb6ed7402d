//! Simulation proof of the rollout gates: the real planner composed with the real gate
//! decision, in random scenarios, checked at every step.
//!
//! The simulator plays Kubernetes (deleted pods terminate and come back at the update
//! revision, then become Ready after random delays) and the controller (the core's whole pass,
//! `baton_core::pass::decide_gated_by`, with its effects carried out in order: a rollback's step,
//! the gate's writes stored on the StatefulSets, the actions) around a group with a random soak (sometimes
//! conflicting values on two members) and, in half the scenarios, a health check. Meanwhile chaos strikes: pods fail readiness for a
//! while (old pods too, so the planner wants free replacements in later zones), a person (or
//! a failing check) halts the group and later resumes it, the gate's state write loses a
//! resourceVersion conflict (the controller then acts on nothing), and the leader fails over
//! (the gate keeps nothing in memory: the new leader reads what the old one stored).
//!
//! Checked at every step, by the checker's own bookkeeping (never the gate's state), under
//! letters of their own, (G-a) to (G-k), apart from the rollout simulation's (a) to (k) (both are
//! cited in docs/rollout-guarantees.md):
//! - (G-a) a zone's first deletion comes only once every zone that started before it has been
//!   completely updated and available, and at least the soak after it completed;
//! - (G-b) a halted group deletes nothing;
//! - (G-e) with a ramp (30% of scenarios), a zone's step comes only once it is fully available
//!   and takes at most 1, 2, 4, … pods;
//! - (G-d) with a health check (half the scenarios; random passes, failures and inconclusive
//!   runs during chaos, failures halting the group), no step is taken before the check passed
//!   `successThreshold` times in a row, counting only runs `initialDelay` after the last step;
//! - (G-c) once chaos stops (and halts are lifted), the rollout completes within a bounded
//!   number of steps;
//! - (G-f) with a health check, in half those scenarios the template changes again mid-rollout:
//!   passes seen for the earlier revision count for nothing after it (the checker starts its
//!   count, its zone order and the initial delay afresh for the new revision).
//!
//! - (G-g) with batches (30% of the scenarios without a ramp: random cumulative percentages), a
//!   zone's step comes only once it is fully available and ends at most at the next
//!   cumulative size, by the checker's own arithmetic;
//! - (G-h) with approvals (`canary`, `zone` or `batch`, 30% of scenarios), no step is taken
//!   before the approval it needs is written, by the checker's own reading of the step names
//!   (zone, revision, pods updated; the canary's names the group's revisions); a simulated
//!   person approves what the gate awaits after a random delay (always, once chaos stops) on
//!   every member, as `kubectl baton approve` does, and during chaos sometimes writes a stale or
//!   wrong approval (an earlier revision, another step) or the right one on one member only (a
//!   newcomer's word), which must let nothing go: a step counts as approved by the checker only
//!   when every member carries it;
//! - a bypass (`baton.dev/bypass-gates-until`, 25% of scenarios) that ends at a random step:
//!   while it is in force (G-a) drops the soak's time and (G-d) the passes; from the step it ends,
//!   both hold again (an expired bypass bypasses nothing). A bypass on one member only (30% of
//!   them) is never in force by the checker's clock.
//!
//! - the pass's effects run in their order, as the leader runs them: a gate state write that
//!   conflicts ends the pass with what came before it done, so a pass acting before it stores
//!   its state is caught (its mutation test);
//! - (G-i) at every deletion of an available pod, no other zone has a pod that baton deleted and
//!   that is not ready again: baton's disruption stays in one zone at a time, rollbacks
//!   included (replacing a pod that is down already takes nothing away);
//! - (G-j) rollbacks (25% of the scenarios without a second template change, asked for by a
//!   person at a random step or, in a fifth of the checks, by the check's `onFailure:
//!   Rollback`; a person sometimes asks again while one runs): the simulated controller starts
//!   it and writes the templates back as the real one does, and the checker, by its own
//!   bookkeeping, requires each deletion to be in the first zone of its turn order (the zones
//!   the rollout started last first) not yet back at the old revision, and of an available pod,
//!   the highest ordinal not yet back; soaks, checks, ramps, batches and approvals hold
//!   nothing; (G-c) then requires the rollback to complete.
//!
//! - (G-k) in half the scenarios, during chaos, the group's membership changes under it, as
//!   whoever may create a StatefulSet with the group's label can make it: a member with no
//!   pods (no zone) joins with a name sorting before the zones, between them or after them,
//!   holding no state; one leaves; one that left comes back, under its name or another, with
//!   the (older) state it held. And a store that conflicts has written the members before the
//!   one that conflicted (the leader patches them one by one, in name order), so members may
//!   hold older states too. Property `CheckStateForgotten`, by the checker's own clock: with a
//!   health check, no run comes sooner than `interval` after the last one the gate stored, no
//!   step sooner than `initialDelay` after the last step, and once `failureThreshold` failures
//!   in a row were stored (no bypass in force) the pass halts the group or asks for its
//!   rollback. A gate that reads the check's state from the first member only, or keeps it
//!   there only, is caught by it (mutation tests).
//!
//! - (G-l) the check's results come from two sources alike: in half the scenarios with a check,
//!   its runs are a web check's (`spec.web`), the real judge (`web_check::judge`) reading what
//!   the simulated endpoint answered (an error rate under or over the threshold, a JSON answer
//!   without the path, one too large to read, one not JSON). The checker counts passes and
//!   failures by its own reading of the answer, never the judge's: a judge that trusts an
//!   answer past its threshold is caught by (G-d) and (G-k) (its mutation test).
//!
//! - (G-m) and from a third: in half the scenarios with a check that is not a web check, its
//!   runs are a Job check's (`spec.job`), the real verdict (`JobRun::verdict`) on the Job as the
//!   simulated cluster shows it (complete; failed; running, past its deadline, stopped for it,
//!   or a Job of that name the check does not own; or none, as it could not be created). The
//!   checker counts by the Job it drew, never the verdict: a judge that takes a failed Job for
//!   a pass is caught by (G-d) and (G-k) (its mutation test).
//!
//! This is not `rollout_simulation.rs`: that one proves the planner under much richer chaos;
//! this one keeps the cluster simple and varies what the gate sees. Environment: plain
//! `cargo test` runs 2,000 scenarios; `SIM_SCENARIOS=N`, `SIM_SEED=S` (replay and print one).

use baton_core::explained::Explained;
use std::collections::BTreeMap;
use std::fmt;

#[path = "support/sim.rs"]
#[allow(
    dead_code,
    reason = "its parallel seed search is for simulations whose planner is Sync"
)]
mod sim;
use sim::{env_u64, leader_pass};

use baton_core::annotations::MAX_UNAVAILABLE_ANNOTATION;
use baton_core::gates::checks::{self, CheckOutcome, CheckPolicy, CheckRun, CheckState};
use baton_core::gates::job_check::{self, JobRun};
use baton_core::gates::rollback::{self, ROLLBACK_ANNOTATION, ROLLBACK_STATE_ANNOTATION};
use baton_core::gates::web_check::{self, WebAnswer, WebQuery};
use baton_core::gates::{self};
use baton_core::gates::{
    APPROVAL_ANNOTATION, APPROVED_ANNOTATION, AnnotationWrite, BATCHES_ANNOTATION,
    BYPASS_ANNOTATION, CHECK_STATE_ANNOTATION, GateDecision, GateWait, HALTED_ANNOTATION,
    HEALTH_CHECK_ANNOTATION, RAMP_ANNOTATION, SOAK_ANNOTATION,
};
use baton_core::pass::{Effect, Pass};
use baton_core::rollout::{
    Action, GroupSnapshot, Plan, PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy,
};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

const DEFAULT_SCENARIOS: u64 = 2_000;
/// How far a broken gate may get before the checker must have caught it.
const BROKEN_GATE_SCENARIOS: u64 = 2_000;

type Gate = dyn Fn(
    &GroupSnapshot,
    Option<&CheckPolicy>,
    Option<&CheckRun>,
    Timestamp,
) -> (Plan, GateDecision);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Property {
    ZoneBeforeSoak,
    HaltedGroupDeleted,
    StepBeforeCheck,
    RampSkipped,
    BatchSkipped,
    StepBeforeApproval,
    TwoZonesDisrupted,
    RollbackOutOfOrder,
    CheckStateForgotten,
    NeverCompletes,
}

#[derive(Debug)]
struct Violation {
    seed: u64,
    step: u64,
    property: Property,
    detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "seed {} step {}: {:?}: {} (replay: SIM_SEED={} cargo test -p baton-core \
             --test gate_simulation -- --nocapture)",
            self.seed, self.step, self.property, self.detail, self.seed
        )
    }
}

fn instant(step: u64) -> Timestamp {
    let step = i64::try_from(step).expect("few steps");
    Timestamp::from_second(1_700_000_000 + step).expect("valid time")
}

/// The simulator's side of a pod.
#[derive(Debug, Clone)]
struct PodLife {
    /// Becomes Ready at this step (unless failing).
    ready_at: u64,
    /// Chaos: not ready until this step.
    failing_until: u64,
    /// Terminating: recreated at the update revision at this step.
    gone_at: Option<u64>,
    /// Checker: the step it was (re)created at.
    born: u64,
}

#[derive(Debug, Default, Clone)]
struct Stats {
    deletions: u64,
    held: BTreeMap<&'static str, u64>,
    halts: u64,
    retargets: u64,
    longest_rollout: u64,
    approvals: u64,
    wrong_approvals: u64,
    bypassed_deletions: u64,
    rollbacks: u64,
    rollback_deletions: u64,
    /// Members that joined, left or came back (G-k).
    membership_changes: u64,
    /// Failure counts that reached the threshold, each checked to halt the group (G-k).
    failure_halts_checked: u64,
    /// Runs judged from a web endpoint's answer (G-l).
    web_runs: u64,
    /// Runs judged from a Job's status (G-m).
    job_runs: u64,
}

/// How a web check's answer is judged: the real `web_check::judge`, but for its mutation test.
type WebJudge = fn(&str, &WebQuery, Result<WebAnswer, String>) -> CheckOutcome;

/// How a Job check's Job is judged: the real `JobRun::verdict`, but for its mutation test.
type JobJudge = fn(&JobRun, &Job, &str, Timestamp) -> CheckOutcome;

struct Simulation<'g> {
    seed: u64,
    rng: ChaCha8Rng,
    step: u64,
    chaos_steps: u64,
    group: GroupSnapshot,
    /// `lives[zone][ordinal]`.
    lives: Vec<Vec<PodLife>>,
    /// The longest soak written, in steps (seconds): what the checker enforces.
    soak: u64,
    /// Checker: zones in the order of their first deletion, and when each completed.
    started: Vec<usize>,
    completed_at: Vec<Option<u64>>,
    gate: &'g Gate,
    /// What becomes of the pass before it is run: nothing, but for the mutation tests of the
    /// pass's order.
    mangle: fn(&mut Pass),
    /// The group's health check, if it has one.
    policy: Option<CheckPolicy>,
    /// Zones ramp 1, 2, 4, … pods.
    ramp: bool,
    /// Zones roll in these cumulative percentages (then the rest).
    batches: Option<Vec<u32>>,
    /// Which steps wait for approval: "canary", "zone" or "batch".
    approval: Option<&'static str>,
    /// The bypass is in force before this step.
    bypass_until: Option<u64>,
    /// A person asks for a rollback at this step.
    rollback_at: Option<u64>,
    /// Checker: the rollback under way, in its own turn order (zone indices).
    rolling_back: Option<Vec<usize>>,
    /// Checker: per zone, the ordinals of pods baton deleted that are not ready again.
    disrupted: Vec<std::collections::BTreeSet<usize>>,
    /// Checker: passes in a row (of runs at least the initial delay after the last step)
    /// since the last step, by the checker's own count.
    settled_passes: u32,
    last_step: Option<u64>,
    /// The step at which the template changes again, if it does.
    retarget_at: Option<u64>,
    /// (G-k) Members that joined the group and are no zone (no pods), in no order.
    newcomers: Vec<StatefulSetSnapshot>,
    /// (G-k) Members that left, as they were (with the state they held), to come back.
    departed: Vec<StatefulSetSnapshot>,
    /// (G-k) The membership changes in this scenario; by its own random stream, so that the
    /// other scenarios' draws are as they were without it.
    membership: Option<ChaCha8Rng>,
    /// The group as the leader reads it: itself, but for the mutation tests of where the
    /// check's state is read from.
    reads: fn(GroupSnapshot) -> GroupSnapshot,
    /// Checker (G-k): failures in a row the gate surely stored, and the step of the last run it
    /// stored.
    failures_in_row: u32,
    last_run_stored: Option<u64>,
    /// (G-l) The check's runs are a web check's, their answers drawn from this stream (its
    /// own, so that the other scenarios' draws are as they were without it).
    web: Option<ChaCha8Rng>,
    judge_web: WebJudge,
    /// (G-m) The check's runs are a Job check's, their Jobs drawn from this stream.
    job: Option<ChaCha8Rng>,
    judge_job: JobJudge,
    trace: Option<Vec<String>>,
    stats: Stats,
}

impl<'g> Simulation<'g> {
    fn new(seed: u64, gate: &'g Gate, traced: bool) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let zones = rng.random_range(2..=4_usize);
        let soaks: Vec<u64> = (0..zones)
            .map(|_| [0, 0, 1, 2, 3, 5, 8][rng.random_range(0..7)])
            .collect();
        let mut statefulsets = Vec::new();
        let mut lives = Vec::new();
        let mut soak = 0;
        for (index, zone_soak) in soaks.iter().enumerate() {
            let name = format!("ingester-zone-{}", char::from(b'a' + index as u8));
            let replicas = rng.random_range(1..=4_u32);
            let mut annotations = BTreeMap::new();
            // The soak on the first member, sometimes a (conflicting) one on others too.
            if index == 0 || rng.random_bool(0.2) {
                annotations.insert(SOAK_ANNOTATION.to_owned(), format!("{zone_soak}s"));
                soak = soak.max(*zone_soak);
            }
            if rng.random_bool(0.4) {
                annotations.insert(
                    MAX_UNAVAILABLE_ANNOTATION.to_owned(),
                    rng.random_range(1..=3_u32).to_string(),
                );
            }
            let pods = (0..replicas)
                .map(|ordinal| PodSnapshot {
                    name: format!("{name}-{ordinal}"),
                    uid: format!("{name}-{ordinal}-0"),
                    revision: Some(format!("{name}-old")),
                    phase: PodPhase::Running,
                    ready: true,
                    ready_since: Some(instant(0)),
                    terminating: false,
                    container_state: None,
                    created_at: None,
                })
                .collect();
            statefulsets.push(StatefulSetSnapshot {
                unreachable: None,
                uid: format!("uid-{name}"),
                spec_replicas: replicas,
                ordinals_start: 0,
                min_ready_seconds: 0,
                status_replicas: replicas,
                ready_replicas: replicas,
                current_revision: Some(format!("{name}-old")),
                // The whole group's template changed: the rollout to check.
                update_revision: Some(format!("{name}-new")),
                status_lag: None,
                update_strategy: UpdateStrategy::OnDelete,
                partition: 0,
                ordered_ready: true,
                annotations,
                pods,
                name,
            });
            lives.push(
                (0..replicas)
                    .map(|_| PodLife {
                        ready_at: 0,
                        failing_until: 0,
                        gone_at: None,
                        born: 0,
                    })
                    .collect(),
            );
        }
        let policy = rng.random_bool(0.5).then(|| CheckPolicy {
            name: "errors".to_owned(),
            interval: SignedDuration::from_secs(rng.random_range(1..=3)),
            initial_delay: SignedDuration::from_secs(rng.random_range(0..=4)),
            success_threshold: rng.random_range(1..=3),
            failure_threshold: rng.random_range(1..=3),
            on_failure: if rng.random_bool(0.2) {
                checks::OnFailure::Rollback
            } else {
                checks::OnFailure::Halt
            },
        });
        let ramp = rng.random_bool(0.3);
        if ramp {
            statefulsets[0]
                .annotations
                .insert(RAMP_ANNOTATION.to_owned(), "exponential".to_owned());
        }
        let batches = (!ramp && rng.random_bool(0.3)).then(|| {
            let mut percents: Vec<u32> = (0..rng.random_range(1..=3))
                .map(|_| [10, 25, 34, 50, 75, 100][rng.random_range(0..6)])
                .collect();
            percents.sort_unstable();
            percents
        });
        if let Some(percents) = &batches {
            let listed: Vec<String> = percents
                .iter()
                .map(|percent| format!("{percent}%"))
                .collect();
            let member = rng.random_range(0..statefulsets.len());
            statefulsets[member]
                .annotations
                .insert(BATCHES_ANNOTATION.to_owned(), listed.join(", "));
        }
        let approval = rng
            .random_bool(0.3)
            .then(|| ["canary", "zone", "batch"][rng.random_range(0..3)]);
        if let Some(approval) = approval {
            statefulsets[0]
                .annotations
                .insert(APPROVAL_ANNOTATION.to_owned(), approval.to_owned());
        }
        if policy.is_some() {
            statefulsets[0]
                .annotations
                .insert(HEALTH_CHECK_ANNOTATION.to_owned(), "errors".to_owned());
        }
        let chaos_steps = rng.random_range(5..=60);
        let rolls_back = policy
            .as_ref()
            .is_some_and(|policy| policy.on_failure == checks::OnFailure::Rollback);
        let retarget_at =
            if (policy.is_some() || approval.is_some()) && !rolls_back && rng.random_bool(0.5) {
                Some(rng.random_range(1..chaos_steps))
            } else {
                None
            };
        let rollback_at = (retarget_at.is_none() && rng.random_bool(0.25))
            .then(|| rng.random_range(1..chaos_steps + 10));
        let bypass_until = rng
            .random_bool(0.25)
            .then(|| rng.random_range(0..chaos_steps + 20));
        // Written on every member, as it must be to count; sometimes on one member only (a
        // newcomer's word), which bypasses nothing: the checker's clock then has no bypass.
        let lone_bypass = statefulsets.len() > 1 && rng.random_bool(0.3);
        if let Some(until) = bypass_until {
            let lone = lone_bypass.then(|| rng.random_range(0..statefulsets.len()));
            for (index, member) in statefulsets.iter_mut().enumerate() {
                if lone.is_none_or(|lone| lone == index) {
                    member
                        .annotations
                        .insert(BYPASS_ANNOTATION.to_owned(), instant(until).to_string());
                }
            }
        }
        let bypass_until = bypass_until.filter(|_| !lone_bypass);
        let mut membership = ChaCha8Rng::seed_from_u64(seed ^ 0x6d65_6d62_6572_7321);
        let membership = membership.random_bool(0.5).then_some(membership);
        let mut web = ChaCha8Rng::seed_from_u64(seed ^ 0x7765_6263_6865_636b);
        let web = (policy.is_some() && web.random_bool(0.5)).then_some(web);
        let mut job = ChaCha8Rng::seed_from_u64(seed ^ 0x6a6f_6263_6865_636b);
        let job = (policy.is_some() && web.is_none() && job.random_bool(0.5)).then_some(job);
        Self {
            seed,
            rng,
            step: 0,
            chaos_steps,
            group: GroupSnapshot {
                name: "ingester".to_owned(),
                statefulsets,
                reach: Default::default(),
            },
            lives,
            soak,
            started: Vec::new(),
            completed_at: vec![None; zones],
            gate,
            policy,
            ramp,
            batches,
            approval,
            bypass_until,
            rollback_at,
            rolling_back: None,
            mangle: |_| {},
            disrupted: vec![std::collections::BTreeSet::new(); zones],
            settled_passes: 0,
            last_step: None,
            retarget_at,
            newcomers: Vec::new(),
            departed: Vec::new(),
            membership,
            web,
            judge_web: web_check::judge,
            job,
            judge_job: JobRun::verdict,
            reads: |group| group,
            failures_in_row: 0,
            last_run_stored: None,
            trace: traced.then(Vec::new),
            stats: Stats::default(),
        }
    }

    /// The group as it is: the zones and the newcomers, sorted by name.
    fn view(&self) -> GroupSnapshot {
        let mut statefulsets: Vec<StatefulSetSnapshot> = self
            .group
            .statefulsets
            .iter()
            .chain(&self.newcomers)
            .cloned()
            .collect();
        statefulsets.sort_by(|a, b| a.name.cmp(&b.name));
        GroupSnapshot {
            name: self.group.name.clone(),
            statefulsets,
            reach: Default::default(),
        }
    }

    /// Every member, zones and newcomers.
    fn members_mut(&mut self) -> impl Iterator<Item = &mut StatefulSetSnapshot> {
        self.group
            .statefulsets
            .iter_mut()
            .chain(self.newcomers.iter_mut())
    }

    /// The member named `name`, zone or newcomer.
    fn member_mut(&mut self, name: &str) -> &mut StatefulSetSnapshot {
        self.members_mut()
            .find(|member| member.name == name)
            .unwrap_or_else(|| panic!("{name} is no member"))
    }

    /// Whether a rollback is asked for, under way or recorded: the membership then stays as it
    /// is (a newcomer without a record would make the records incomplete, which is not what
    /// this simulation checks).
    fn rollback_in_play(&self) -> bool {
        self.rolling_back.is_some()
            || self.view().statefulsets.iter().any(|member| {
                member.annotations.contains_key(ROLLBACK_ANNOTATION)
                    || member.annotations.contains_key(ROLLBACK_STATE_ANNOTATION)
            })
    }

    /// (G-k) The membership changes, sometimes, during chaos: a member with no pods joins (named
    /// to sort first, between the zones or last, holding nothing), a newcomer leaves, or one
    /// that left comes back under its name or another with the state it held then.
    fn membership_changes(&mut self) {
        if !self.chaos() || self.rollback_in_play() {
            return;
        }
        let Some(mut rng) = self.membership.take() else {
            return;
        };
        if rng.random_bool(0.1) {
            let choice = rng.random_range(0..10);
            if choice < 3 && !self.newcomers.is_empty() {
                let gone = self
                    .newcomers
                    .remove(rng.random_range(0..self.newcomers.len()));
                self.note(|| format!("{} leaves the group", gone.name));
                self.departed.push(gone);
            } else if choice < 6 && !self.departed.is_empty() {
                let mut back = self
                    .departed
                    .remove(rng.random_range(0..self.departed.len()));
                let old = back.name.clone();
                if rng.random_bool(0.5) {
                    // Another object: its revisions are named after it.
                    back.name = self.newcomer_name(&mut rng);
                    back.uid = format!("uid-{}", back.name);
                    back.current_revision = Some(format!("{}-new", back.name));
                    back.update_revision = back.current_revision.clone();
                }
                if !self
                    .view()
                    .statefulsets
                    .iter()
                    .any(|member| member.name == back.name)
                {
                    let name = back.name.clone();
                    self.note(|| format!("{old} comes back as {name}, with what it held"));
                    self.newcomers.push(back);
                }
            } else {
                let name = self.newcomer_name(&mut rng);
                if !self
                    .view()
                    .statefulsets
                    .iter()
                    .any(|member| member.name == name)
                {
                    let revision = Some(format!("{name}-new"));
                    self.note(|| format!("{name} joins the group, holding nothing"));
                    self.newcomers.push(StatefulSetSnapshot {
                        unreachable: None,
                        uid: format!("uid-{name}"),
                        spec_replicas: 0,
                        ordinals_start: 0,
                        min_ready_seconds: 0,
                        status_replicas: 0,
                        ready_replicas: 0,
                        current_revision: revision.clone(),
                        update_revision: revision,
                        status_lag: None,
                        update_strategy: UpdateStrategy::OnDelete,
                        partition: 0,
                        ordered_ready: true,
                        annotations: BTreeMap::new(),
                        pods: Vec::new(),
                        name,
                    });
                }
            }
            self.stats.membership_changes += 1;
        }
        self.membership = Some(rng);
    }

    /// A newcomer's name: sorting before the zones (half the time), between two of them, or
    /// after them.
    fn newcomer_name(&self, rng: &mut ChaCha8Rng) -> String {
        let n = self.stats.membership_changes;
        match rng.random_range(0..4) {
            0 | 1 => format!("ingester-a{n}"),
            2 => format!(
                "ingester-zone-{}{n}",
                char::from(b'a' + rng.random_range(0..self.group.statefulsets.len()) as u8)
            ),
            _ => format!("ingester-zz{n}"),
        }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = self.trace.as_mut() {
            trace.push(format!("step {:>3}: {}", self.step, line()));
        }
    }

    fn violation(&self, property: Property, detail: String) -> Violation {
        Violation {
            seed: self.seed,
            step: self.step,
            property,
            detail,
        }
    }

    fn chaos(&self) -> bool {
        self.step < self.chaos_steps
    }

    /// Kubernetes' side of one step: the template may change again, terminated pods come back
    /// at the update revision, pods become ready; chaos fails readiness and halts or resumes
    /// the group.
    fn kubernetes(&mut self) {
        let step = self.step;
        if self.retarget_at == Some(step) {
            for member in &mut self.group.statefulsets {
                member.update_revision = Some(format!("{}-v3", member.name));
            }
            // Property (G-f): a new rollout, counted afresh by the checker, its initial delay
            // from its own steps (a completed rollout's state is forgotten by the gate).
            self.settled_passes = 0;
            self.failures_in_row = 0;
            self.last_step = None;
            self.started.clear();
            self.completed_at = vec![None; self.group.statefulsets.len()];
            self.stats.retargets += 1;
            self.note(|| "the template changes again".to_owned());
        }
        let chaos = self.chaos();
        let asks_again = self.rolling_back.is_some() && chaos && self.rng.random_bool(0.02);
        if self.rollback_at == Some(step) || asks_again {
            for member in self.members_mut() {
                member.annotations.insert(
                    ROLLBACK_ANNOTATION.to_owned(),
                    "a person: errors up".to_owned(),
                );
            }
            self.note(|| "a person asks for a rollback".to_owned());
        }
        for (zone, statefulset) in self.group.statefulsets.iter_mut().enumerate() {
            for (ordinal, pod) in statefulset.pods.iter_mut().enumerate() {
                let life = &mut self.lives[zone][ordinal];
                if life.gone_at.is_some_and(|gone| gone <= step) {
                    life.gone_at = None;
                    life.ready_at = step + self.rng.random_range(1..=3);
                    pod.revision = statefulset.update_revision.clone();
                    pod.uid = format!("{}-{step}", pod.name);
                    pod.created_at = Some(instant(step));
                    life.born = step;
                    pod.terminating = false;
                    pod.phase = PodPhase::Pending;
                }
                if chaos && life.gone_at.is_none() && self.rng.random_bool(0.02) {
                    life.failing_until = step + self.rng.random_range(1..=6);
                }
                if !chaos {
                    life.failing_until = 0;
                }
                if life.gone_at.is_none() && life.ready_at <= step {
                    pod.phase = PodPhase::Running;
                }
                let ready = pod.phase == PodPhase::Running
                    && !pod.terminating
                    && life.failing_until <= step;
                if ready && !pod.ready {
                    pod.ready_since = Some(instant(step));
                }
                pod.ready = ready;
                if !ready {
                    pod.ready_since = None;
                } else {
                    self.disrupted[zone].remove(&ordinal);
                }
            }
            let ready = statefulset.pods.iter().filter(|pod| pod.ready).count();
            statefulset.ready_replicas = u32::try_from(ready).expect("few pods");
            statefulset.status_replicas = statefulset.spec_replicas;
        }
        let halted = self
            .view()
            .statefulsets
            .iter()
            .find(|member| member.annotations.contains_key(HALTED_ANNOTATION))
            .map(|member| member.name.clone());
        match halted {
            Some(name) if !chaos || self.rng.random_bool(0.15) => {
                self.member_mut(&name).annotations.remove(HALTED_ANNOTATION);
                self.note(|| format!("a person resumes ({name})"));
            }
            None if chaos && self.rng.random_bool(0.04) => {
                let zone = self.rng.random_range(0..self.group.statefulsets.len());
                self.group.statefulsets[zone]
                    .annotations
                    .insert(HALTED_ANNOTATION.to_owned(), "error rate 0.3".to_owned());
                self.stats.halts += 1;
                self.note(|| format!("halted at zone {zone}"));
            }
            _ => {}
        }
        self.membership_changes();
    }

    fn zone_complete(&self, zone: usize) -> bool {
        let statefulset = &self.group.statefulsets[zone];
        statefulset.pods.iter().all(|pod| {
            pod.revision == statefulset.update_revision
                && pod.ready
                && !pod.terminating
                && pod.phase == PodPhase::Running
        })
    }

    fn rollout_complete(&self) -> bool {
        (0..self.group.statefulsets.len()).all(|zone| {
            self.zone_complete(zone)
                && self.group.statefulsets[zone].current_revision
                    == self.group.statefulsets[zone].update_revision
        })
    }

    /// The controller's side of one step, checked.
    /// The leader's pass, as the real one runs: the core's one call ([`pass::decide_gated_by`]),
    /// its effects carried out in order. The health check is the simulation's own (a run made
    /// when due, its outcome random), handed to the gate with its policy.
    fn controller(&mut self) -> Result<(), Violation> {
        let now = instant(self.step);
        // What the gate is given, and what the checker counts (the same, but for a web
        // check's judge: G-l).
        let (run, truth) = self.check_run(now)?.unzip();
        let seen = (self.reads)(self.view());
        // Checker (G-k): runs while halted or rolling back count for nothing.
        let uncounted = self.rollback_in_play()
            || seen
                .statefulsets
                .iter()
                .any(|member| member.annotations.contains_key(HALTED_ANNOTATION));
        let (gate, policy) = (self.gate, self.policy.as_ref());
        let mut pass = leader_pass(&seen, now, &|group, _gates, _check, now| {
            gate(group, policy, run.as_ref(), now)
        });
        (self.mangle)(&mut pass);
        match pass.effects.first() {
            Some(Effect::StartRollback { why, refused, .. }) => {
                let (why, refused) = (why.clone(), refused.clone());
                self.start_rollback(&why, refused.as_deref(), now);
                return Ok(());
            }
            Some(Effect::RestoreTemplates(records)) => {
                let records = records.clone();
                self.restore_templates(&records);
                return Ok(());
            }
            _ => {}
        }
        let gated = pass.plan.clone();
        if let Some(wait) = &pass.gate_wait {
            *self.stats.held.entry(wait.kind()).or_default() += 1;
            self.note(|| format!("gate holds: {wait}"));
        }
        let wait = pass.gate_wait.clone();
        // The effects in order, as the leader runs them: a stale store ends the pass, and
        // what came before it happened.
        let mut counted = false;
        let mut checked = false;
        // What the pass stored, for the checker's (G-k): whether it stored the run, a halt.
        let mut stored: Vec<AnnotationWrite> = Vec::new();
        for effect in &pass.effects {
            match effect {
                Effect::Store(writes) => {
                    for write in writes {
                        self.note(|| {
                            format!(
                                "gate writes {} {}: {:?}",
                                write.statefulset, write.key, write.value
                            )
                        });
                    }
                    if self.chaos() && self.rng.random_bool(0.1) {
                        let written = self.written_before_the_conflict(writes);
                        self.note(|| {
                            format!(
                                "the gate state write conflicts after {} writes: nothing more",
                                written.len()
                            )
                        });
                        self.store(&written);
                        stored.extend(written);
                        self.cut_short(truth.as_ref(), &stored);
                        self.person_approves(wait.as_ref());
                        return Ok(());
                    }
                    if !counted {
                        counted = true;
                        if let Some(truth) = &truth {
                            self.count(truth);
                        }
                    }
                    self.store(writes);
                    stored.extend(writes.iter().cloned());
                }
                Effect::Act { action, .. } => {
                    if !checked {
                        checked = true;
                        if !counted {
                            counted = true;
                            if let Some(truth) = &truth {
                                self.count(truth);
                            }
                        }
                        if self.rolling_back.is_none() {
                            self.check_ramp(&gated)?;
                            self.check_batches(&gated)?;
                            self.check_approval(&gated)?;
                        }
                    }
                    self.act(action)?;
                }
                _ => {}
            }
        }
        if !counted && let Some(truth) = &truth {
            self.count(truth);
        }
        if gated.deletions().next().is_some() {
            self.last_step = Some(self.step);
            self.settled_passes = 0;
        }
        self.check_failures(truth.as_ref(), &stored, uncounted)?;
        // After the pass, like a person reading the status the pass left.
        self.person_approves(wait.as_ref());
        Ok(())
    }

    /// The writes of a store that conflicts which went through before it: the leader patches
    /// the members one by one in name order, and the conflict may come at any of them. Only in
    /// the scenarios whose membership changes (G-k); in the others nothing is written.
    fn written_before_the_conflict(&mut self, writes: &[AnnotationWrite]) -> Vec<AnnotationWrite> {
        let Some(rng) = self.membership.as_mut() else {
            return Vec::new();
        };
        let mut members: Vec<&str> = writes
            .iter()
            .map(|write| write.statefulset.as_str())
            .collect();
        members.sort_unstable();
        members.dedup();
        let before = rng.random_range(0..members.len().max(1));
        let written = &members[..before.min(members.len())];
        writes
            .iter()
            .filter(|write| written.contains(&write.statefulset.as_str()))
            .cloned()
            .collect()
    }

    /// Checker (G-k), for a pass whose store conflicted after `stored` went through: the gate may
    /// have stored the run on some members, and read it back from them or not. The checker
    /// takes whatever lets the gate most: a pass counted, no failure counted, and no run
    /// remembered but an older one.
    fn cut_short(&mut self, run: Option<&CheckRun>, stored: &[AnnotationWrite]) {
        if stored.is_empty() {
            // Nothing written: the run is lost, for the gate as for the checker.
            return;
        }
        if stored
            .iter()
            .any(|write| write.key == CHECK_STATE_ANNOTATION && write.value.is_none())
        {
            self.last_run_stored = None;
        }
        if let Some(run) = run
            && run.outcome == CheckOutcome::Pass
        {
            self.count(run);
            self.failures_in_row = 0;
        }
        if stored.iter().any(halts) {
            self.failures_in_row = 0;
        }
    }

    /// Property `CheckStateForgotten` (G-k), after a pass that stored `stored` in full: once
    /// `failureThreshold` failures in a row were stored, the pass halts the group (or asks for
    /// its rollback), unless a bypass is in force. Runs the gate does not count (`uncounted`:
    /// halted or rolling back; or the run not stored) start the checker's count again.
    fn check_failures(
        &mut self,
        run: Option<&CheckRun>,
        stored: &[AnnotationWrite],
        uncounted: bool,
    ) -> Result<(), Violation> {
        let Some(threshold) = self.policy.as_ref().map(|policy| policy.failure_threshold) else {
            return Ok(());
        };
        let wrote = |set: bool| {
            stored
                .iter()
                .any(|write| write.key == CHECK_STATE_ANNOTATION && write.value.is_some() == set)
        };
        if wrote(false) {
            self.last_run_stored = None;
        }
        let Some(run) = run else {
            return Ok(());
        };
        if !wrote(true) || uncounted {
            self.failures_in_row = 0;
            return Ok(());
        }
        self.last_run_stored = Some(self.step);
        let halted = stored.iter().any(halts);
        match run.outcome {
            CheckOutcome::Pass => self.failures_in_row = 0,
            CheckOutcome::Fail { .. } => {
                self.failures_in_row += 1;
                if self.failures_in_row >= threshold && !self.bypassing() {
                    self.stats.failure_halts_checked += 1;
                    if !halted {
                        return Err(self.violation(
                            Property::CheckStateForgotten,
                            format!(
                                "{} failures in a row stored (failureThreshold {threshold}) and \
                                 the group is neither halted nor rolled back",
                                self.failures_in_row
                            ),
                        ));
                    }
                }
            }
            CheckOutcome::Inconclusive { .. } => {}
        }
        if halted {
            self.failures_in_row = 0;
        }
        Ok(())
    }

    /// A run of the health check when one is due, with a random outcome during chaos (a
    /// failing or unreachable Prometheus, or web endpoint) and passing after: the run the gate
    /// is given, and the checker's own verdict on it. For a web check (G-l) the run is the
    /// judge's verdict on the endpoint's answer, the checker's the answer it drew.
    /// Property `CheckStateForgotten` (G-k): no run sooner than `interval` after the last one the
    /// gate stored, by the checker's own clock.
    fn check_run(&mut self, now: Timestamp) -> Result<Option<(CheckRun, CheckRun)>, Violation> {
        let Some(policy) = self.policy.as_ref() else {
            return Ok(None);
        };
        let (state, _) = CheckState::read(&(self.reads)(self.view()));
        if !state.due(policy, now) {
            return Ok(None);
        }
        let interval = u64::try_from(policy.interval.as_secs()).expect("small");
        if let Some(last) = self.last_run_stored
            && self.step < last + interval
        {
            return Err(self.violation(
                Property::CheckStateForgotten,
                format!(
                    "a run {}s after the last one stored (interval {interval}s)",
                    self.step - last
                ),
            ));
        }
        let outcome = match self.rng.random_range(0..10) {
            _ if !self.chaos() => CheckOutcome::Pass,
            0 => CheckOutcome::Fail {
                query: "errors".to_owned(),
                value: "0.3".to_owned(),
            },
            1 => CheckOutcome::Inconclusive {
                why: "connection refused".to_owned(),
            },
            _ => CheckOutcome::Pass,
        };
        let judged = match self.web.as_mut() {
            Some(web) => {
                let answer = web_answer(&outcome, web.random_range(0..3));
                self.stats.web_runs += 1;
                self.note(|| format!("web endpoint answers {answer:?}"));
                (self.judge_web)("error-rate", &error_rate_query(), answer)
            }
            None => match self.job.as_mut() {
                Some(job) => {
                    let variant = job.random_range(0..4);
                    let run = smoke_job_run();
                    self.stats.job_runs += 1;
                    match job_status(&run, &outcome, variant, now) {
                        Some(read) => {
                            self.note(|| format!("Job reads {:?}", read.status));
                            (self.judge_job)(&run, &read, CHECK_UID, now)
                        }
                        None => run.not_created("exceeded quota: count/jobs.batch=0"),
                    }
                }
                None => outcome.clone(),
            },
        };
        self.note(|| format!("check run: {judged}"));
        let run = |outcome| CheckRun {
            at: now,
            outcome,
            seen: None,
        };
        Ok(Some((run(judged), run(outcome))))
    }

    /// The checker's own count of passes in a row since the last step.
    fn count(&mut self, run: &CheckRun) {
        let Some(policy) = &self.policy else {
            return;
        };
        let delay = u64::try_from(policy.initial_delay.as_secs()).expect("small");
        match run.outcome {
            CheckOutcome::Pass if self.last_step.is_none_or(|step| self.step >= step + delay) => {
                self.settled_passes += 1;
            }
            CheckOutcome::Pass => {}
            _ => self.settled_passes = 0,
        }
    }

    /// Property (G-e): with a ramp, a zone's step comes only once the zone is fully available,
    /// and takes at most the ramp's next size (1, 2, 4, …), by the checker's own count.
    fn check_ramp(&self, gated: &Plan) -> Result<(), Violation> {
        if !self.ramp {
            return Ok(());
        }
        for (zone, statefulset) in self.group.statefulsets.iter().enumerate() {
            let deleted = gated
                .deletions()
                .filter(|action| {
                    matches!(action, Action::DeletePod { statefulset: name, .. } if *name == statefulset.name)
                })
                .count();
            if deleted == 0 {
                continue;
            }
            let available = statefulset.pods.len() == statefulset.spec_replicas as usize
                && statefulset
                    .pods
                    .iter()
                    .all(|pod| pod.ready && !pod.terminating && pod.phase == PodPhase::Running);
            let updated = statefulset
                .pods
                .iter()
                .filter(|pod| pod.revision == statefulset.update_revision)
                .count();
            // Steps 1, 2, 4, …: after k steps 2^k - 1 pods are updated.
            let mut target = 1;
            while target <= updated {
                target = target * 2 + 1;
            }
            let size = target - updated;
            if !available || deleted > size {
                return Err(self.violation(
                    Property::RampSkipped,
                    format!(
                        "deleted {deleted} pods of zone {zone} ({updated} updated, available: \
                         {available}); the ramp allows {size} once the zone is available"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The gate's writes, stored on the members.
    fn store(&mut self, writes: &[AnnotationWrite]) {
        for write in writes {
            let member = self.member_mut(&write.statefulset);
            match &write.value {
                Some(value) => member
                    .annotations
                    .insert(write.key.to_owned(), value.clone()),
                None => member.annotations.remove(write.key),
            };
        }
    }

    /// One action of the pass, checked against the world as it is, then carried out.
    fn act(&mut self, action: &Action) -> Result<(), Violation> {
        let halted = self
            .view()
            .statefulsets
            .iter()
            .any(|member| member.annotations.contains_key(HALTED_ANNOTATION));
        match action {
            Action::DeletePod {
                statefulset, pod, ..
            } => {
                let zone = self
                    .group
                    .statefulsets
                    .iter()
                    .position(|member| &member.name == statefulset)
                    .expect("planned on members");
                if halted {
                    return Err(self.violation(
                        Property::HaltedGroupDeleted,
                        format!("deleted {pod} while the group is halted"),
                    ));
                }
                let ordinal = self.group.statefulsets[zone]
                    .pods
                    .iter()
                    .position(|candidate| &candidate.name == pod)
                    .expect("planned on existing pods");
                if self.group.statefulsets[zone].pods[ordinal].ready {
                    // Replacing a pod that is down already takes nothing away.
                    self.check_one_zone(zone, pod)?;
                }
                if self.rolling_back.is_some() {
                    self.check_rollback(zone, ordinal, pod)?;
                    self.stats.rollback_deletions += 1;
                } else {
                    self.check_zone_start(zone, pod)?;
                    self.check_initial_delay(pod)?;
                    self.check_health(pod)?;
                    if self.bypassing() {
                        self.stats.bypassed_deletions += 1;
                    }
                }
                self.disrupted[zone].insert(ordinal);
                let target = &mut self.group.statefulsets[zone].pods[ordinal];
                target.terminating = true;
                target.ready = false;
                self.lives[zone][ordinal].gone_at = Some(self.step + 1);
                self.stats.deletions += 1;
                self.note(|| format!("delete {pod}"));
            }
            Action::SetPartition { statefulset, .. } => {
                unreachable!("{statefulset}: the gate simulation rolls by deletion only")
            }
            Action::SetCurrentRevision {
                statefulset,
                revision,
            } => {
                let member = self.member_mut(statefulset);
                member.current_revision = Some(revision.clone());
            }
        }
        Ok(())
    }

    /// A rollback asked for, as the real controller starts it (records stored, request
    /// removed), or the request removed when the pass refuses it.
    fn start_rollback(&mut self, why: &str, refused: Option<&str>, now: Timestamp) {
        if refused.is_none() {
            let group = self.view();
            let history = group
                .statefulsets
                .iter()
                .map(|member| {
                    let revisions = ["old", "new", "v3"]
                        .iter()
                        .zip(1..)
                        .map(|(suffix, number)| rollback::Revision {
                            name: format!("{}-{suffix}", member.name),
                            number,
                        })
                        .collect();
                    (member.name.clone(), revisions)
                })
                .collect();
            let records = rollback::start(&group, &history, why, now).expect("a rollback starts");
            for (name, record) in records {
                self.member_mut(&name)
                    .annotations
                    .insert(ROLLBACK_STATE_ANNOTATION.to_owned(), record.to_annotation());
            }
            // The checker's own turn order: the zones started last first, then the rest.
            let mut order: Vec<usize> = self.started.iter().rev().copied().collect();
            order.retain(|&zone| {
                let member = &self.group.statefulsets[zone];
                member
                    .pods
                    .iter()
                    .any(|pod| pod.revision == member.update_revision)
            });
            for zone in 0..self.group.statefulsets.len() {
                if !order.contains(&zone) {
                    order.push(zone);
                }
            }
            self.rolling_back = Some(order);
            self.stats.rollbacks += 1;
            self.note(|| format!("rollback starts: {why}"));
        } else {
            self.note(|| "a rollback request is refused: one is under way".to_owned());
        }
        for member in self.members_mut() {
            member.annotations.remove(ROLLBACK_ANNOTATION);
        }
    }

    /// Templates written back, as the real controller writes them.
    fn restore_templates(&mut self, records: &[(String, rollback::RollbackRecord)]) {
        for (name, record) in records {
            let member = self.member_mut(name);
            member.update_revision = Some(record.to.clone());
            let restored = rollback::RollbackRecord {
                restored: true,
                ..record.clone()
            };
            member.annotations.insert(
                ROLLBACK_STATE_ANNOTATION.to_owned(),
                restored.to_annotation(),
            );
            self.note(|| format!("template of {name} written back"));
        }
    }

    /// Property (G-i), on a deletion in `zone`.
    fn check_one_zone(&self, zone: usize, pod: &str) -> Result<(), Violation> {
        for (other, disrupted) in self.disrupted.iter().enumerate() {
            if other != zone && !disrupted.is_empty() {
                return Err(self.violation(
                    Property::TwoZonesDisrupted,
                    format!(
                        "deleted {pod} while zone {other} has pods baton deleted not ready again \
                         ({disrupted:?})"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether every pod of `zone` runs its old revision again, ready.
    fn rolled_back(&self, zone: usize) -> bool {
        let member = &self.group.statefulsets[zone];
        let old = format!("{}-old", member.name);
        member.pods.iter().all(|pod| {
            pod.revision.as_deref() == Some(old.as_str()) && pod.ready && !pod.terminating
        })
    }

    /// Property (G-j), on a deletion of `zone`'s pod `ordinal` during a rollback.
    fn check_rollback(&self, zone: usize, ordinal: usize, pod: &str) -> Result<(), Violation> {
        let order = self.rolling_back.as_ref().expect("rolling back");
        let turn = order.iter().copied().find(|&zone| !self.rolled_back(zone));
        if turn != Some(zone) {
            return Err(self.violation(
                Property::RollbackOutOfOrder,
                format!(
                    "rolled back {pod} in zone {zone}, but it is zone {turn:?}'s turn ({order:?})"
                ),
            ));
        }
        let member = &self.group.statefulsets[zone];
        let old = format!("{}-old", member.name);
        let available = |pod: &PodSnapshot| pod.ready && !pod.terminating;
        if available(&member.pods[ordinal]) {
            // The newest (by the checker's own record of when each pod came), then the highest
            // ordinal.
            let newest = member
                .pods
                .iter()
                .enumerate()
                .filter(|(_, pod)| pod.revision.as_deref() != Some(old.as_str()) && available(pod))
                .map(|(ordinal, _)| ordinal)
                .max_by_key(|&ordinal| (self.lives[zone][ordinal].born, ordinal));
            if newest != Some(ordinal) {
                return Err(self.violation(
                    Property::RollbackOutOfOrder,
                    format!("rolled back {pod} before the newer pod {newest:?} of zone {zone}"),
                ));
            }
        }
        Ok(())
    }

    /// Whether the bypass is in force now, by the checker's own clock.
    fn bypassing(&self) -> bool {
        self.bypass_until.is_some_and(|until| self.step < until)
    }

    /// The simulated person: approves what the gate awaits after a random delay (always once
    /// chaos stops); during chaos, sometimes writes an approval for a wrong step.
    fn person_approves(&mut self, wait: Option<&GateWait>) {
        if self.approval.is_none() {
            return;
        }
        if let Some(GateWait::AwaitingApproval { zone, step, .. }) = wait
            && (!self.chaos() || self.rng.random_bool(0.3))
        {
            let step = step.clone();
            let lone =
                self.chaos() && self.group.statefulsets.len() > 1 && self.rng.random_bool(0.2);
            if lone {
                // The awaited step, written on one member only (a newcomer's word): it approves
                // nothing.
                let index = self.rng.random_range(0..self.group.statefulsets.len());
                self.group.statefulsets[index]
                    .annotations
                    .insert(APPROVED_ANNOTATION.to_owned(), step.clone());
                self.stats.wrong_approvals += 1;
                self.note(|| format!("one member alone approves {step} (zone {zone})"));
                return;
            }
            for member in self.members_mut() {
                member
                    .annotations
                    .insert(APPROVED_ANNOTATION.to_owned(), step.clone());
            }
            self.stats.approvals += 1;
            self.note(|| format!("a person approves {step}"));
            return;
        }
        if self.chaos() && self.rng.random_bool(0.05) {
            let zone = self.rng.random_range(0..self.group.statefulsets.len());
            let member = &self.group.statefulsets[zone];
            let updated = member
                .pods
                .iter()
                .filter(|pod| pod.revision == member.update_revision)
                .count();
            let wrong = match self.rng.random_range(0..3) {
                // An earlier revision's step.
                0 => format!("{}/{}-old/{updated}", member.name, member.name),
                // The canary of an earlier revision.
                1 => format!("canary/{}-old", member.name),
                // Another zone's step, written here.
                _ => {
                    let other =
                        &self.group.statefulsets[(zone + 1) % self.group.statefulsets.len()];
                    format!(
                        "{}/{}/{}",
                        other.name,
                        other.update_revision.as_deref().unwrap_or_default(),
                        updated + 7
                    )
                }
            };
            for member in self.members_mut() {
                member
                    .annotations
                    .insert(APPROVED_ANNOTATION.to_owned(), wrong.clone());
            }
            self.stats.wrong_approvals += 1;
            self.note(|| format!("a person writes a wrong approval {wrong}"));
        }
    }

    /// Property (G-g): with batches, a zone's step comes only once the zone is fully available,
    /// and ends at most at the next cumulative size, by the checker's own arithmetic.
    fn check_batches(&self, gated: &Plan) -> Result<(), Violation> {
        let Some(percents) = &self.batches else {
            return Ok(());
        };
        for (zone, statefulset) in self.group.statefulsets.iter().enumerate() {
            let deleted = gated
                .deletions()
                .filter(|action| action.rolls() == Some(statefulset.name.as_str()))
                .count();
            if deleted == 0 {
                continue;
            }
            let replicas = statefulset.pods.len();
            let available = replicas == statefulset.spec_replicas as usize
                && statefulset
                    .pods
                    .iter()
                    .all(|pod| pod.ready && !pod.terminating && pod.phase == PodPhase::Running);
            let updated = statefulset
                .pods
                .iter()
                .filter(|pod| pod.revision == statefulset.update_revision)
                .count();
            // Cumulative sizes, rounded up, then the whole zone.
            let next = percents
                .iter()
                .map(|percent| (replicas * *percent as usize).div_ceil(100))
                .chain([replicas])
                .find(|size| *size > updated)
                .unwrap_or(replicas);
            if !available || updated + deleted > next {
                return Err(self.violation(
                    Property::BatchSkipped,
                    format!(
                        "deleted {deleted} pods of zone {zone} ({updated} updated, available:                          {available}); the batch ends at {next} once the zone is available"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Property (G-h): a step goes only with the approvals it needs written on every member, by
    /// the checker's own naming of the step.
    fn check_approval(&self, gated: &Plan) -> Result<(), Violation> {
        let Some(approval) = self.approval else {
            return Ok(());
        };
        let Some(zone) = gated.deletions().find_map(|action| action.rolls()) else {
            return Ok(());
        };
        // What every member carries: one member's word alone approves nothing.
        fn of(member: &StatefulSetSnapshot) -> Vec<&str> {
            member
                .annotations
                .get(APPROVED_ANNOTATION)
                .map(|value| value.split(',').collect())
                .unwrap_or_default()
        }
        // Every member, newcomers (G-k) included: they are the group's members as much.
        let group = self.view();
        let mut members = group.statefulsets.iter();
        let first = members.next().map(of).unwrap_or_default();
        let rest: Vec<Vec<&str>> = members.map(of).collect();
        let written: Vec<&str> = first
            .into_iter()
            .filter(|step| rest.iter().all(|theirs| theirs.contains(step)))
            .collect();
        let updated_in = |member: &StatefulSetSnapshot| {
            member
                .pods
                .iter()
                .filter(|pod| pod.revision == member.update_revision && !pod.terminating)
                .count()
        };
        let member = self
            .group
            .statefulsets
            .iter()
            .find(|member| member.name == zone)
            .expect("deleting in a member");
        let revision = member.update_revision.as_deref().unwrap_or_default();
        let in_zone = updated_in(member);
        let in_group: usize = self.group.statefulsets.iter().map(updated_in).sum();
        let needed = match approval {
            "batch" => Some(format!("{zone}/{revision}/{in_zone}")),
            "zone" if in_zone == 0 => Some(format!("{zone}/{revision}/0")),
            "canary" if in_group > 0 => {
                let revisions: Vec<&str> = group
                    .statefulsets
                    .iter()
                    .map(|member| member.update_revision.as_deref().unwrap_or_default())
                    .collect();
                Some(format!("canary/{}", revisions.join("+")))
            }
            _ => None,
        };
        match needed {
            Some(needed) if !written.contains(&needed.as_str()) => Err(self.violation(
                Property::StepBeforeApproval,
                format!(
                    "a step in {zone} went without the approval {needed} (written: {written:?})"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Property `CheckStateForgotten` (G-k), on a deletion: no step sooner than `initialDelay`
    /// after the last step, by the checker's own clock.
    fn check_initial_delay(&self, pod: &str) -> Result<(), Violation> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        let delay = u64::try_from(policy.initial_delay.as_secs()).expect("small");
        match self.last_step {
            Some(last) if self.step < last + delay && !self.bypassing() => Err(self.violation(
                Property::CheckStateForgotten,
                format!(
                    "deleted {pod} {}s after the last step (initialDelay {delay}s)",
                    self.step - last
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Property (G-d), on a deletion.
    fn check_health(&self, pod: &str) -> Result<(), Violation> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        if self.bypassing() {
            return Ok(());
        }
        if self.settled_passes < policy.success_threshold {
            return Err(self.violation(
                Property::StepBeforeCheck,
                format!(
                    "deleted {pod} after {} passes in a row (needs {})",
                    self.settled_passes, policy.success_threshold
                ),
            ));
        }
        Ok(())
    }

    /// Property (G-a), on a deletion in `zone`.
    fn check_zone_start(&mut self, zone: usize, pod: &str) -> Result<(), Violation> {
        if self.started.contains(&zone) {
            return Ok(());
        }
        for &before in &self.started {
            let name = &self.group.statefulsets[before].name;
            match self.completed_at[before] {
                None => {
                    return Err(self.violation(
                        Property::ZoneBeforeSoak,
                        format!("deleted {pod} while {name}, started before, is not complete"),
                    ));
                }
                Some(completed) if self.step < completed + self.soak && !self.bypassing() => {
                    return Err(self.violation(
                        Property::ZoneBeforeSoak,
                        format!(
                            "deleted {pod} {}s after {name} completed (soak {}s)",
                            self.step - completed,
                            self.soak
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        self.started.push(zone);
        Ok(())
    }

    fn run(&mut self) -> Result<Stats, Violation> {
        let deadline_after_chaos = 40 + 12 * 16;
        loop {
            self.kubernetes();
            for zone in 0..self.group.statefulsets.len() {
                if self.completed_at[zone].is_none() && self.zone_complete(zone) {
                    self.completed_at[zone] = Some(self.step);
                }
            }
            self.controller()?;
            if !self.chaos() && self.rollout_complete() {
                self.stats.longest_rollout = self.step;
                return Ok(self.stats.clone());
            }
            if self.step > self.chaos_steps + deadline_after_chaos {
                return Err(self.violation(
                    Property::NeverCompletes,
                    format!("not complete {deadline_after_chaos} steps after chaos stopped"),
                ));
            }
            self.step += 1;
        }
    }
}

/// (G-l) The web check of the scenarios: the endpoint's error rate stays below 0.1.
fn error_rate_query() -> WebQuery {
    serde_json::from_value(serde_json::json!({
        "url": "https://app.example/zones/ingester-zone-a/stats",
        "jsonPath": "$.errorRate",
        "threshold": {"operator": "<", "value": 0.1},
    }))
    .expect("a web query")
}

/// (G-l) What the endpoint answers for a run the checker decided is `outcome`: an error rate
/// under the threshold, or over it, or (`variant`) no answer to judge: no such path, too large
/// to read, not JSON.
fn web_answer(outcome: &CheckOutcome, variant: u32) -> Result<WebAnswer, String> {
    let answer = |body: &str| {
        Ok(WebAnswer {
            status: 200,
            body: body.as_bytes().to_vec(),
        })
    };
    match (outcome, variant) {
        (CheckOutcome::Pass, 0) => answer(r#"{"errorRate": 0.01}"#),
        (CheckOutcome::Pass, 1) => answer(r#"{"errorRate": "0.05", "other": 7}"#),
        (CheckOutcome::Pass, _) => answer(r#"{"errorRate": 0}"#),
        (CheckOutcome::Fail { .. }, 0) => answer(r#"{"errorRate": 0.3}"#),
        (CheckOutcome::Fail { .. }, 1) => answer(r#"{"errorRate": 0.1}"#),
        (CheckOutcome::Fail { .. }, _) => answer(r#"{"errorRate": "12"}"#),
        (CheckOutcome::Inconclusive { .. }, 0) => answer(r#"{"rate": 0.01}"#),
        (CheckOutcome::Inconclusive { .. }, 1) => {
            Err("the answer is larger than 4194304 bytes".to_owned())
        }
        (CheckOutcome::Inconclusive { .. }, _) => answer("<html>a proxy's error page</html>"),
    }
}

/// (G-m) The uid of the Job check of the scenarios: its Jobs' owner.
const CHECK_UID: &str = "smoke-uid";

/// (G-m) The Job check of the scenarios' run: a smoke test's Job, with a 5m deadline.
fn smoke_job_run() -> JobRun {
    let spec: job_check::JobSpec = serde_json::from_value(serde_json::json!({
        "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "smoke", "image": "smoke:1"}]}}}},
        "deadline": "5m",
    }))
    .expect("a job spec");
    let variables = std::collections::BTreeMap::from([
        ("group", "ingester"),
        ("zone", "ingester-zone-a"),
        ("revision", "ingester-zone-a-2"),
    ]);
    let target = job_check::Target {
        check: "smoke",
        check_uid: CHECK_UID,
        generation: 1,
        variables: &variables,
        step: None,
    };
    JobRun {
        job: target.job(&spec),
        deadline: spec.deadline().expect("5m"),
        create_from: None,
    }
}

/// (G-m) The Job as read for a run the checker decided is `outcome`: complete, or failed, or
/// (`variant`) with no verdict: running, past its deadline, stopped for it, one of that name
/// the check does not own (complete, for all that); `None` for one that could not be created.
fn job_status(run: &JobRun, outcome: &CheckOutcome, variant: u32, now: Timestamp) -> Option<Job> {
    let minutes_ago = |minutes: i64| Time(now - jiff::SignedDuration::from_mins(minutes));
    let mut job = run.job.clone();
    let condition = |kind: &str, reason: &str| JobCondition {
        type_: kind.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(format!("{reason} after a while")),
        ..JobCondition::default()
    };
    let (started, conditions) = match (outcome, variant) {
        (CheckOutcome::Pass, _) => (1, vec![condition("Complete", "Completed")]),
        (CheckOutcome::Fail { .. }, 0) => (1, vec![condition("Failed", "BackoffLimitExceeded")]),
        (CheckOutcome::Fail { .. }, _) => (2, vec![condition("Failed", "PodFailurePolicy")]),
        (CheckOutcome::Inconclusive { .. }, 0) => (1, vec![]),
        (CheckOutcome::Inconclusive { .. }, 1) => (6, vec![]),
        (CheckOutcome::Inconclusive { .. }, 2) => {
            (6, vec![condition("Failed", "DeadlineExceeded")])
        }
        (CheckOutcome::Inconclusive { .. }, _) if now.as_second() % 2 == 0 => {
            let owners = job.metadata.owner_references.as_mut().expect("owned");
            owners[0].uid = "someone-else".to_owned();
            (1, vec![condition("Complete", "Completed")])
        }
        (CheckOutcome::Inconclusive { .. }, _) => return None,
    };
    job.status = Some(JobStatus {
        start_time: Some(minutes_ago(started)),
        conditions: Some(conditions),
        ..JobStatus::default()
    });
    Some(job)
}

/// Whether a write halts the group or asks for its rollback.
fn halts(write: &AnnotationWrite) -> bool {
    (write.key == HALTED_ANNOTATION || write.key == ROLLBACK_ANNOTATION) && write.value.is_some()
}

fn real_gate(
    group: &GroupSnapshot,
    policy: Option<&CheckPolicy>,
    run: Option<&CheckRun>,
    now: Timestamp,
) -> (Plan, GateDecision) {
    let gated = gates::decide(group, now);
    match policy {
        Some(policy) => checks::apply(group, policy, run, gated, now),
        None => gated,
    }
}

fn run_scenarios(gate: &Gate, count: u64) -> Result<Stats, Violation> {
    run_mangled_scenarios(gate, |_| {}, count)
}

fn run_mangled_scenarios(
    gate: &Gate,
    mangle: fn(&mut Pass),
    count: u64,
) -> Result<Stats, Violation> {
    run_scenarios_with(gate, |simulation| simulation.mangle = mangle, count)
}

/// The scenarios, each simulation `set` before it runs (for the mutation tests of the pass and
/// of what the leader reads).
fn run_scenarios_with(
    gate: &Gate,
    set: impl Fn(&mut Simulation<'_>),
    count: u64,
) -> Result<Stats, Violation> {
    let mut total = Stats::default();
    for seed in 0..count {
        let mut simulation = Simulation::new(seed, gate, false);
        set(&mut simulation);
        let stats = simulation.run()?;
        total.deletions += stats.deletions;
        total.halts += stats.halts;
        total.retargets += stats.retargets;
        total.longest_rollout = total.longest_rollout.max(stats.longest_rollout);
        total.approvals += stats.approvals;
        total.wrong_approvals += stats.wrong_approvals;
        total.bypassed_deletions += stats.bypassed_deletions;
        total.rollbacks += stats.rollbacks;
        total.rollback_deletions += stats.rollback_deletions;
        total.membership_changes += stats.membership_changes;
        total.failure_halts_checked += stats.failure_halts_checked;
        total.web_runs += stats.web_runs;
        total.job_runs += stats.job_runs;
        for (kind, count) in stats.held {
            *total.held.entry(kind).or_default() += count;
        }
    }
    Ok(total)
}

#[test]
fn gates_hold_zones_for_the_soak_and_halted_groups_in_random_scenarios() {
    if let Some(seed) = env_u64("SIM_SEED") {
        let mut simulation = Simulation::new(seed, &real_gate, true);
        let result = simulation.run();
        println!("{}", simulation.trace.take().unwrap_or_default().join("\n"));
        if let Err(violation) = result {
            panic!("{violation}");
        }
        return;
    }
    let count = env_u64("SIM_SCENARIOS").unwrap_or(DEFAULT_SCENARIOS);
    let stats = run_scenarios(&real_gate, count).unwrap_or_else(|violation| panic!("{violation}"));
    println!("{count} scenarios: {stats:?}");
    if count >= 1_000 {
        // Not vacuous: rollouts happened, and the gate held for every reason it knows.
        assert!(stats.deletions > count, "{stats:?}");
        assert!(stats.halts > count / 10, "{stats:?}");
        assert!(stats.retargets > count / 10, "{stats:?}");
        assert!(stats.approvals > count / 10, "{stats:?}");
        assert!(stats.wrong_approvals > count / 20, "{stats:?}");
        assert!(stats.bypassed_deletions > count / 20, "{stats:?}");
        assert!(stats.rollbacks > count / 10, "{stats:?}");
        assert!(stats.rollback_deletions > count / 10, "{stats:?}");
        assert!(stats.membership_changes > count, "{stats:?}");
        assert!(stats.failure_halts_checked > count / 20, "{stats:?}");
        assert!(stats.web_runs > count, "{stats:?}");
        assert!(stats.job_runs > count / 2, "{stats:?}");
        for kind in [
            "Soak",
            "Halted",
            "ZoneUnfinished",
            "HealthCheck",
            "Ramp",
            "Batch",
            "AwaitingApproval",
        ] {
            assert!(
                stats.held.get(kind).copied().unwrap_or(0) > 0,
                "never held for {kind}: {stats:?}"
            );
        }
    }
}

/// The checker must catch `gate`, breaking `property`, within the first scenarios.
fn assert_caught(gate: &Gate, property: Property) {
    assert_caught_as(gate, &[property]);
}

/// For a broken gate that breaks more than one property (a bypass relaxes soaks and checks
/// alike): the first violation found is one of `properties`.
fn assert_caught_as(gate: &Gate, properties: &[Property]) {
    match run_scenarios(gate, BROKEN_GATE_SCENARIOS) {
        Ok(stats) => panic!("the checker missed a broken gate ({properties:?}): {stats:?}"),
        Err(violation) => assert!(
            properties.contains(&violation.property),
            "{violation}, not one of {properties:?}"
        ),
    }
}

/// A copy of the group without `key` on any member.
fn without(group: &GroupSnapshot, key: &str) -> GroupSnapshot {
    let mut group = group.clone();
    for member in &mut group.statefulsets {
        member.annotations.remove(key);
    }
    group
}

#[test]
fn checker_catches_a_gate_that_ignores_the_soak() {
    assert_caught(
        &|group, policy, run, now| real_gate(&without(group, SOAK_ANNOTATION), policy, run, now),
        Property::ZoneBeforeSoak,
    );
}

#[test]
fn checker_catches_a_gate_that_ignores_a_halt() {
    assert_caught(
        &|group, policy, run, now| real_gate(&without(group, HALTED_ANNOTATION), policy, run, now),
        Property::HaltedGroupDeleted,
    );
}

#[test]
fn checker_catches_a_gate_that_keeps_no_state() {
    // Like a leader that kept the gate state in memory only, and failed over at every pass:
    // no zone is ever remembered as cleared, so each looks like the first, and none soaks.
    assert_caught(
        &|group, policy, run, now| {
            let (plan, mut decision) = real_gate(group, policy, run, now);
            decision.writes.clear();
            (plan, decision)
        },
        Property::ZoneBeforeSoak,
    );
}

#[test]
fn checker_catches_a_gate_that_ignores_the_health_check() {
    assert_caught(
        &|group, _policy, _run, now| gates::decide(group, now),
        Property::StepBeforeCheck,
    );
}

#[test]
fn checker_catches_a_gate_that_counts_passes_across_template_changes() {
    assert_caught(
        &|group, policy, run, now| real_gate(&without_check_target(group), policy, run, now),
        Property::StepBeforeCheck,
    );
}

#[test]
fn checker_catches_a_web_judge_that_trusts_an_answer_past_its_threshold() {
    // Like a judge that read the answer's status and never the value at the path: any 2xx
    // answer passes, an error rate of 0.3 included.
    fn trusting(name: &str, query: &WebQuery, answer: Result<WebAnswer, String>) -> CheckOutcome {
        let trusted = WebQuery {
            json_path: None,
            threshold: None,
            matches: None,
            status: Some("2xx".to_owned()),
            ..query.clone()
        };
        web_check::judge(name, &trusted, answer)
    }
    match run_scenarios_with(
        &real_gate,
        |simulation| simulation.judge_web = trusting,
        BROKEN_GATE_SCENARIOS,
    ) {
        Ok(stats) => panic!("the checker missed a judge trusting a web answer: {stats:?}"),
        Err(violation) => assert!(
            [Property::StepBeforeCheck, Property::CheckStateForgotten]
                .contains(&violation.property),
            "{violation}"
        ),
    }
}

#[test]
fn checker_catches_a_job_judge_that_takes_a_failed_job_for_a_pass() {
    // Like a judge that asked only whether the Job finished: a failed Job passes.
    fn finished_passes(run: &JobRun, job: &Job, uid: &str, now: Timestamp) -> CheckOutcome {
        match run.verdict(job, uid, now) {
            CheckOutcome::Fail { .. } => CheckOutcome::Pass,
            verdict => verdict,
        }
    }
    match run_scenarios_with(
        &real_gate,
        |simulation| simulation.judge_job = finished_passes,
        BROKEN_GATE_SCENARIOS,
    ) {
        Ok(stats) => panic!("the checker missed a judge passing a failed Job: {stats:?}"),
        Err(violation) => assert!(
            [Property::StepBeforeCheck, Property::CheckStateForgotten]
                .contains(&violation.property),
            "{violation}"
        ),
    }
}

#[test]
fn checker_catches_a_job_judge_that_takes_a_job_the_check_does_not_own() {
    // Like a judge that found the Job by its name alone: whoever made a Job of that name
    // answers for the check.
    fn any_owner(run: &JobRun, job: &Job, _uid: &str, now: Timestamp) -> CheckOutcome {
        let owner = job
            .metadata
            .owner_references
            .iter()
            .flatten()
            .next()
            .map(|owner| owner.uid.clone())
            .unwrap_or_default();
        run.verdict(job, &owner, now)
    }
    match run_scenarios_with(
        &real_gate,
        |simulation| simulation.judge_job = any_owner,
        BROKEN_GATE_SCENARIOS,
    ) {
        Ok(stats) => panic!("the checker missed a judge taking another's Job: {stats:?}"),
        Err(violation) => assert!(
            [Property::StepBeforeCheck, Property::CheckStateForgotten]
                .contains(&violation.property),
            "{violation}"
        ),
    }
}

/// A copy of the group whose stored check state does not say which revisions it counted for.
fn without_check_target(group: &GroupSnapshot) -> GroupSnapshot {
    let mut group = group.clone();
    for member in &mut group.statefulsets {
        if let Some(raw) = member.annotations.get_mut(CHECK_STATE_ANNOTATION)
            && let Ok(mut state) = serde_json::from_str::<serde_json::Value>(raw)
        {
            if let Some(fields) = state.as_object_mut() {
                fields.remove("target");
                fields.remove("revisions");
            }
            *raw = state.to_string();
        }
    }
    group
}

#[test]
fn checker_catches_a_gate_that_ignores_the_ramp() {
    assert_caught(
        &|group, policy, run, now| real_gate(&without(group, RAMP_ANNOTATION), policy, run, now),
        Property::RampSkipped,
    );
}

#[test]
fn checker_catches_a_gate_that_ignores_the_batches() {
    assert_caught(
        &|group, policy, run, now| real_gate(&without(group, BATCHES_ANNOTATION), policy, run, now),
        Property::BatchSkipped,
    );
}

#[test]
fn checker_catches_a_gate_that_ignores_approvals() {
    assert_caught(
        &|group, policy, run, now| {
            real_gate(&without(group, APPROVAL_ANNOTATION), policy, run, now)
        },
        Property::StepBeforeApproval,
    );
}

#[test]
fn checker_catches_a_gate_that_takes_any_approval_for_the_one_awaited() {
    // Like a gate that compared only that something was approved: any approval written lets
    // every step go.
    assert_caught(
        &|group, policy, run, now| {
            let approved = group
                .statefulsets
                .iter()
                .any(|member| member.annotations.contains_key(APPROVED_ANNOTATION));
            if approved {
                real_gate(&without(group, APPROVAL_ANNOTATION), policy, run, now)
            } else {
                real_gate(group, policy, run, now)
            }
        },
        Property::StepBeforeApproval,
    );
}

#[test]
fn checker_catches_a_gate_that_takes_one_members_approval_for_the_groups() {
    assert_caught(
        &|group, policy, run, now| {
            // Every approval any member carries, as if all carried it.
            let approvals: Vec<String> = group
                .statefulsets
                .iter()
                .filter_map(|member| member.annotations.get(APPROVED_ANNOTATION).cloned())
                .collect();
            let mut believed = group.clone();
            if !approvals.is_empty() {
                for member in &mut believed.statefulsets {
                    member
                        .annotations
                        .insert(APPROVED_ANNOTATION.to_owned(), approvals.join(","));
                }
            }
            real_gate(&believed, policy, run, now)
        },
        Property::StepBeforeApproval,
    );
}

#[test]
fn checker_catches_a_gate_that_takes_one_members_bypass_for_the_groups() {
    assert_caught_as(
        &|group, policy, run, now| {
            let bypass = group
                .statefulsets
                .iter()
                .find_map(|member| member.annotations.get(BYPASS_ANNOTATION).cloned());
            let mut believed = group.clone();
            if let Some(until) = bypass {
                for member in &mut believed.statefulsets {
                    member
                        .annotations
                        .insert(BYPASS_ANNOTATION.to_owned(), until.clone());
                }
            }
            real_gate(&believed, policy, run, now)
        },
        &[Property::ZoneBeforeSoak, Property::StepBeforeCheck],
    );
}

#[test]
fn checker_catches_a_gate_whose_bypass_never_expires() {
    assert_caught_as(
        &|group, policy, run, now| {
            let mut forever = group.clone();
            for member in &mut forever.statefulsets {
                if let Some(until) = member.annotations.get_mut(BYPASS_ANNOTATION) {
                    *until = Timestamp::MAX.to_string();
                }
            }
            real_gate(&forever, policy, run, now)
        },
        &[Property::ZoneBeforeSoak, Property::StepBeforeCheck],
    );
}

#[test]
fn checker_catches_a_gate_that_rolls_back_like_a_rollout() {
    // Like a rollback that only wrote the templates back and let the planner roll the pods as
    // a rollout: zones in member order, the lowest ordinals first.
    assert_caught(
        &|group, policy, run, now| {
            real_gate(&without(group, ROLLBACK_STATE_ANNOTATION), policy, run, now)
        },
        Property::RollbackOutOfOrder,
    );
}

#[test]
fn checker_catches_a_gate_that_disrupts_a_second_zone() {
    // Like a rollback that took a pod of the next zone too, while the zone in turn rolls back.
    assert_caught(
        &|group, policy, run, now| {
            let (mut plan, decision) = real_gate(group, policy, run, now);
            let deleting = plan
                .deletions()
                .find_map(|action| action.rolls().map(str::to_owned));
            if let (true, Some(deleting)) = (decision.rolling_back, deleting) {
                let extra = group
                    .statefulsets
                    .iter()
                    .filter(|member| member.name != deleting)
                    .find_map(|member| {
                        let pod = member.pods.iter().find(|pod| {
                            pod.ready && !pod.terminating && pod.revision != member.update_revision
                        })?;
                        Some(Action::DeletePod {
                            statefulset: member.name.clone(),
                            pod: pod.name.clone(),
                            uid: pod.uid.clone(),
                            unavailable: None,
                        })
                    });
                plan.actions.extend(extra);
            }
            (plan, decision)
        },
        Property::TwoZonesDisrupted,
    );
}

#[test]
fn checker_catches_a_pass_that_acts_before_it_stores_the_gates_state() {
    // The store moved after the actions: a write that then conflicts leaves steps taken that
    // the gate's state does not know of. What is lost first is that a zone was cleared to
    // roll: when the next zone's turn comes, the gate knows of no zone before it to soak after,
    // and lets it go the moment the first one completed.
    let mangle: fn(&mut Pass) = |pass| {
        if let Some(at) = pass
            .effects
            .iter()
            .position(|effect| matches!(effect, Effect::Store(_)))
        {
            let store = pass.effects.remove(at);
            pass.effects.push(store);
        }
    };
    match run_mangled_scenarios(&real_gate, mangle, BROKEN_GATE_SCENARIOS) {
        Ok(stats) => panic!("the checker missed a pass acting before its store: {stats:?}"),
        Err(violation) => assert_eq!(violation.property, Property::ZoneBeforeSoak, "{violation}"),
    }
}

#[test]
fn checker_catches_a_gate_that_keeps_the_check_state_on_the_first_member_only() {
    // Today's rule before it was hardened: the group's check state read from, and written to,
    // its first member by name. A member that joins sorting first, holding nothing, makes the
    // state fresh: the interval, the initial delay and the failures are forgotten.
    let first_only: fn(GroupSnapshot) -> GroupSnapshot = |mut group| {
        for member in group.statefulsets.iter_mut().skip(1) {
            member.annotations.remove(CHECK_STATE_ANNOTATION);
        }
        group
    };
    let gate =
        |group: &GroupSnapshot, policy: Option<&CheckPolicy>, run: Option<&CheckRun>, now| {
            let (plan, mut decision) = real_gate(group, policy, run, now);
            let first = group.statefulsets.first().map(|member| member.name.clone());
            decision.writes.retain(|write| {
                write.key != CHECK_STATE_ANNOTATION || Some(&write.statefulset) == first.as_ref()
            });
            (plan, decision)
        };
    match run_scenarios_with(
        &gate,
        |simulation| simulation.reads = first_only,
        BROKEN_GATE_SCENARIOS,
    ) {
        Ok(stats) => panic!("the checker missed a check state on the first member: {stats:?}"),
        Err(violation) => assert_eq!(
            violation.property,
            Property::CheckStateForgotten,
            "{violation}"
        ),
    }
}

#[test]
fn checker_catches_a_gate_that_never_lets_the_rollout_finish() {
    // Like a gate that holds for a reason that never passes: nothing unsafe is ever done, and
    // the rollout never completes.
    assert_caught(
        &|group, policy, run, now| {
            let (mut plan, decision) = real_gate(group, policy, run, now);
            plan.actions
                .retain(|action| !matches!(action, Action::DeletePod { .. }));
            (plan, decision)
        },
        Property::NeverCompletes,
    );
}
