//! Simulation proof of the rollout planner: the guarantees of docs/compatibility.md, checked at
//! every step of many random scenarios.
//!
//! A deterministic simulator plays the Kubernetes side (the StatefulSet controller and the
//! kubelet) around the planner: deleted pods terminate and are recreated at the update revision
//! after random delays, start, and become Ready; meanwhile chaos strikes (pods fail readiness
//! or get evicted, templates change and roll back mid-rollout, replicas change, rollouts are
//! paused and resumed, members switch away from `OnDelete` and back, StatefulSets join and leave
//! the group, statuses lag their pods or their spec, someone else sets a partition). A third of the members are
//! `RollingUpdate` StatefulSets rolled by partition: the simulated StatefulSet controller replaces
//! their pods at or above the partition, highest first, one at a time (`OrderedReady` also waits
//! while any pod is down; `Parallel` does not), and recreates a pod below it at the current
//! revision. Some pods are broken: an old pod crash-loops (or cannot pull its
//! image) until it is replaced, and some template changes are broken versions whose pods never
//! become ready until a fixed version is deployed (always by the end of chaos: the rollout of
//! a fix is the one that must complete). The planner's actions are carried out like the
//! controller would.
//!
//! Checked at every step:
//! - (a) never two StatefulSets of a group with pods made unavailable by baton at once;
//! - (b) baton never deletes a pod while another StatefulSet of the group is not fully ready;
//! - (c) baton never takes a StatefulSet past its max-unavailable, and where it was already
//!   past it (pods down on their own), its deletions never raise the count of unavailable pods;
//! - (d) a group with a member that is not `OnDelete` is never touched;
//! - (e) once chaos stops, every rollout completes within a bounded number of steps, after
//!   which the planner has nothing left to do — crash-looping old pods included;
//! - (f) a deletion the planner says costs no availability (a free replacement) is of a pod
//!   already unavailable, by the checker's own definition: replacing it cannot raise the number
//!   of unavailable pods; and never of a pod that is Ready, even for less than
//!   minReadySeconds (it serves, and is only not counted on yet);
//! - (g) a partition someone else moved gets no action at all until a person settles it;
//! - (h) a pod baton deletes comes back at the update revision (never below a partition);
//! - (i) no action while a member's status describes an older spec than it has (a template
//!   change the StatefulSet controller has not observed yet, which leaves the old
//!   `updateRevision` in the status): judged on such a status, a zone whose template just
//!   changed looks complete, and the next zone would start before it (the canary in the
//!   wrong zone);
//! - (j) no action while a member's cluster cannot be read: members live in up to three
//!   clusters, and an outage hides every member of one for a few steps (baton sees them as they
//!   last were, marked unreachable, while chaos goes on there) until they are listed again;
//! - (k) a newcomer speaks for nobody: in a fifth of the scenarios an adversary, who may only
//!   create StatefulSets in the namespace, adds members mid-scenario with the group's label,
//!   often 0 replicas, and any subset of the group-level keys with any values
//!   (`baton.dev/max-rolling-members: "1000"`, a bypass, a rollback request, a halt, ...). The
//!   group is never less safe than without them: (a) and (b) keep the max-rolling-members the
//!   honest members carry and (c) each member's own max-unavailable; a breach of (a) or (b)
//!   while a newcomer is in the group is reported as (k). At the end of chaos each newcomer
//!   leaves, or stays with only its max-rolling-members (every rollout must complete with it).
//!
//! Pods released by lowering a partition count as deleted by baton for (a) to (c) once the
//! StatefulSet controller takes them down, and lowering one past available pods is checked
//! like deleting them.
//!
//! plus: baton never deletes a terminating, a paused or an up-to-date pod, never uses a stale
//! uid, and only marks a StatefulSet's current revision once its pods are all updated and ready.
//!
//! Environment (plain `cargo test` runs 100,000 scenarios, seeds 0..100000):
//! - `SIM_SCENARIOS=N` runs N scenarios; `SIM_FIRST_SEED=S` starts at seed S;
//! - `SIM_SEED=S` replays exactly scenario S and prints its trace (add `-- --nocapture`).

use baton_core::explained::Explained;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::ops::Range;
use std::time::Instant;

#[path = "support/sim.rs"]
mod sim;
use sim::{env_u64, leader_pass};

use baton_core::annotations::{
    MAX_ROLLING_MEMBERS_ANNOTATION, MAX_UNAVAILABLE_ANNOTATION, PARTITION_ANNOTATION,
    ROLLOUT_PAUSED_ANNOTATION, UPDATE_BY_ANNOTATION,
};
use baton_core::gates::keys::{
    APPROVAL_ANNOTATION, APPROVED_ANNOTATION, BATCHES_ANNOTATION, BYPASS_ANNOTATION,
    HALTED_ANNOTATION, HEALTH_CHECK_ANNOTATION, HOOK_ANNOTATION, RAMP_ANNOTATION,
    ROLLBACK_ANNOTATION, ROLLBACK_ON_FAILURE_ANNOTATION, SOAK_ANNOTATION,
};
use baton_core::pass;
use baton_core::rollout::snapshot::pod_ordinal;
use baton_core::rollout::{
    Action, GroupSnapshot, Plan, PodPhase, PodSnapshot, StatefulSetSnapshot, StatusLag,
    Unavailable, Unreachable, UpdateStrategy, WaitReason, plan,
};
use jiff::{SignedDuration, Timestamp};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

const DEFAULT_SCENARIOS: u64 = 100_000;
/// How far a broken planner may get before the checker must have caught it.
const BROKEN_PLANNER_SCENARIOS: u64 = 3_000;

/// The group-level keys the adversary writes on its newcomers, with values from harmless to
/// hostile (and unreadable).
const NEWCOMER_KEYS: &[(&str, &[&str])] = &[
    (
        MAX_ROLLING_MEMBERS_ANNOTATION,
        &["2", "3", "1000", "1", "0", "many"],
    ),
    (SOAK_ANNOTATION, &["0", "1s", "1h", "soon"]),
    (RAMP_ANNOTATION, &["exponential", "none", "fast"]),
    (BATCHES_ANNOTATION, &["100%", "1", "1, 100%", "0"]),
    (APPROVAL_ANNOTATION, &["canary", "zone", "batch", "never"]),
    (HEALTH_CHECK_ANNOTATION, &["always-passes"]),
    (HOOK_ANNOTATION, &["http://127.0.0.1:9/hook?token=x"]),
    (BYPASS_ANNOTATION, &["2100-01-01T00:00:00Z", "forever"]),
    (ROLLBACK_ON_FAILURE_ANNOTATION, &["true", "false"]),
    (ROLLBACK_ANNOTATION, &["the newcomer asks"]),
    (
        APPROVED_ANNOTATION,
        &["canary/r1", "zone/ingester-zone-a/r2/0"],
    ),
    (HALTED_ANNOTATION, &["the newcomer halts"]),
];

type Planner = dyn Fn(&GroupSnapshot, Timestamp) -> Plan + Sync;

// ---------------------------------------------------------------------------------------------
// Properties and violations
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Property {
    OneZoneAtATime,
    OthersFullyReady,
    MaxUnavailable,
    NonOnDeleteUntouched,
    Liveness,
    NoTerminatingDeleted,
    NoPausedDeleted,
    NoUpToDateDeleted,
    KnownPodsOnly,
    CurrentRevisionWhenDone,
    QuietWhenDone,
    FreeReplacementCostsNothing,
    PartitionMovedUntouched,
    ReplacedAtUpdateRevision,
    NothingOnAStatusBehindItsSpec,
    NothingWhileUnreachable,
    NewcomersSpeakForNobody,
}

impl fmt::Display for Property {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::OneZoneAtATime => {
                "(a) one StatefulSet of a group made unavailable at a time (max-rolling-members: that many)"
            }
            Self::OthersFullyReady => {
                "(b) deletions only while every other member is ready (max-rolling-members: fewer than that many are not)"
            }
            Self::MaxUnavailable => "(c) max-unavailable never exceeded because of baton",
            Self::NonOnDeleteUntouched => "(d) a group with a non-OnDelete member is untouched",
            Self::Liveness => "(e) every rollout completes once chaos stops",
            Self::NoTerminatingDeleted => "terminating pods are never deleted again",
            Self::NoPausedDeleted => "pods of paused StatefulSets are never deleted",
            Self::NoUpToDateDeleted => "pods at the update revision are never deleted",
            Self::KnownPodsOnly => "actions name existing objects with their current uid",
            Self::CurrentRevisionWhenDone => "currentRevision is set only once a rollout is done",
            Self::QuietWhenDone => "a finished group gets no more actions",
            Self::FreeReplacementCostsNothing => {
                "(f) a free replacement deletes only a pod that is already unavailable"
            }
            Self::PartitionMovedUntouched => {
                "(g) a partition someone else moved is left alone: no fight"
            }
            Self::ReplacedAtUpdateRevision => {
                "(h) a pod baton deletes or releases comes back at the update revision"
            }
            Self::NothingOnAStatusBehindItsSpec => {
                "(i) no action while a member's status describes an older spec"
            }
            Self::NewcomersSpeakForNobody => {
                "(k) newcomers make the group no less safe: (a) and (b) with the honest members' max-rolling-members"
            }
            Self::NothingWhileUnreachable => {
                "(j) no action while a member's cluster cannot be read"
            }
        })
    }
}

#[derive(Debug)]
struct Violation {
    seed: u64,
    step: u64,
    property: Property,
    details: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "rollout simulation: property {} violated in scenario seed {} at step {}:\n{}\n\
             replay with: SIM_SEED={} cargo test -p baton-core --test rollout_simulation \
             -- --nocapture",
            self.property, self.seed, self.step, self.details, self.seed
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The simulated world
// ---------------------------------------------------------------------------------------------

fn instant(step: u64) -> Timestamp {
    let step = i64::try_from(step).expect("few steps");
    Timestamp::from_second(1_700_000_000 + step).expect("valid time")
}

/// The max-unavailable annotation as the scenario wrote it; the checker derives the limit on
/// its own rather than trusting the parser under test.
#[derive(Debug, Clone, Copy)]
enum Budget {
    Absent,
    Count(u32),
    Percent(u32),
    Invalid(&'static str),
}

impl Budget {
    fn random(rng: &mut ChaCha8Rng) -> Self {
        match rng.random_range(0..20) {
            0..=7 => Self::Absent,
            8..=10 => Self::Count(rng.random_range(1..=3)),
            11..=14 => Self::Percent([10, 34, 50, 100][rng.random_range(0..4)]),
            _ => Self::Invalid(["0", "-1", "abc", "150%", "", " 2", "0%"][rng.random_range(0..7)]),
        }
    }

    fn annotation(self) -> Option<String> {
        match self {
            Self::Absent => None,
            Self::Count(count) => Some(count.to_string()),
            Self::Percent(percent) => Some(format!("{percent}%")),
            Self::Invalid(raw) => Some(raw.to_owned()),
        }
    }

    fn limit(self, replicas: u32) -> u32 {
        match self {
            Self::Absent | Self::Invalid(_) => 1,
            Self::Count(count) => count,
            Self::Percent(percent) => (percent * replicas / 100).max(1),
        }
    }
}

/// The simulator's private side of a pod: when things happen to it.
#[derive(Debug, Clone)]
struct PodLife {
    ordinal: u32,
    running_at: u64,
    ready_at: u64,
    /// Chaos: readiness fails until then.
    failing_until: u64,
    /// Terminating: the pod disappears at that step.
    gone_at: Option<u64>,
    /// Broken: never becomes ready, for this container reason, until deleted (or healed when
    /// chaos stops, if nothing would replace it). `ImagePullBackOff` pods stay Pending.
    stuck: Option<&'static str>,
}

/// The simulator's private side of a StatefulSet. `pods[i]` belongs to the snapshot's `pods[i]`.
#[derive(Debug, Clone)]
struct MemberLife {
    budget: Budget,
    pods: Vec<PodLife>,
    /// Missing ordinals and the step at which the StatefulSet controller recreates them.
    create_at: Vec<(u32, u64)>,
    /// Chaos (quota): no pod can be created before this step.
    blocked_until: u64,
    /// Ordinals made unavailable by baton's deletions, until available again.
    baton_pending: Vec<u32>,
    /// Ordinals baton released by lowering the partition, until the StatefulSet controller
    /// takes their pod down (then they are `baton_pending`) or they no longer need it.
    released: Vec<u32>,
    /// A brand-new StatefulSet gets its revisions at this step.
    revision_known_at: u64,
    stale_status: bool,
    /// metadata.generation, counting template changes.
    generation: i64,
    /// A template change the StatefulSet controller has not observed yet: the status still
    /// shows the old updateRevision (and `status_lag`) until it does.
    unobserved_revision: Option<String>,
    /// A person fixed its broken pods by hand when chaos stopped (no rollout would replace
    /// them): pods it gets later are not broken either.
    fixed_by_hand: bool,
    /// The cluster it lives in: members of one cluster become unreachable together.
    cluster: u8,
    /// While its cluster cannot be read: what baton last saw of it, and until which step.
    outage: Option<(StatefulSetSnapshot, u64)>,
    /// Added by the adversary (see (k)): its group-level keys must count for nothing.
    newcomer: bool,
}

struct Simulation<'p> {
    seed: u64,
    rng: ChaCha8Rng,
    step: u64,
    chaos_steps: u64,
    group: GroupSnapshot,
    members: Vec<MemberLife>,
    /// Revisions whose pods never become ready (a broken version).
    broken: Vec<(String, &'static str)>,
    next_id: u64,
    /// How many members may be not ready at once (`baton.dev/max-rolling-members` on every
    /// member when above 1): by the seed, so scenarios without it draw as they always did.
    max_rolling: usize,
    /// An adversary adds newcomers during chaos (see (k)): by the seed, so other scenarios draw
    /// as they always did.
    adversary: bool,
    planner: &'p Planner,
    trace: Trace,
    stats: Stats,
}

/// The story of one scenario, kept only when replaying it.
struct Trace {
    lines: Option<Vec<String>>,
}

impl Trace {
    fn note(&mut self, step: u64, line: impl FnOnce() -> String) {
        if let Some(lines) = self.lines.as_mut() {
            lines.push(format!("step {step:>3}: {}", line()));
        }
    }
}

/// What the scenarios exercised, to show the properties were not checked in a vacuum.
#[derive(Debug, Default, Clone)]
struct Stats {
    scenarios: u64,
    steps: u64,
    deletions: u64,
    /// Deletions of pods already unavailable, and of those, the ones made while the member was
    /// at or past its max-unavailable (the Go operator would have waited forever).
    free_replacements: u64,
    free_past_budget: u64,
    current_revisions_set: u64,
    /// Pods released by lowering a partition.
    releases: u64,
    longest_convergence: u64,
    /// Steps at which baton had pods of several members unavailable at once (allowed by
    /// `baton.dev/max-rolling-members`).
    parallel_members: u64,
    /// Members the adversary added, and those of them carrying a max-rolling-members above 1.
    newcomers: u64,
    widening_newcomers: u64,
    waits: BTreeMap<&'static str, u64>,
}

impl sim::Tally for Stats {
    fn count_ended_scenario(&mut self) {
        self.scenarios += 1;
    }

    fn merge(&mut self, other: &Self) {
        self.scenarios += other.scenarios;
        self.steps += other.steps;
        self.deletions += other.deletions;
        self.free_replacements += other.free_replacements;
        self.free_past_budget += other.free_past_budget;
        self.current_revisions_set += other.current_revisions_set;
        self.releases += other.releases;
        self.longest_convergence = self.longest_convergence.max(other.longest_convergence);
        self.parallel_members += other.parallel_members;
        self.newcomers += other.newcomers;
        self.widening_newcomers += other.widening_newcomers;
        for (kind, count) in &other.waits {
            *self.waits.entry(kind).or_default() += count;
        }
    }
}

fn is_available(pod: &PodSnapshot, min_ready_seconds: u32, now: Timestamp) -> bool {
    pod.phase == PodPhase::Running
        && pod.ready
        && !pod.terminating
        && (min_ready_seconds == 0
            || pod.ready_since.is_none_or(|since| {
                since + SignedDuration::from_secs(i64::from(min_ready_seconds)) <= now
            }))
}

fn wanted(statefulset: &StatefulSetSnapshot, ordinal: u32) -> bool {
    ordinal >= statefulset.ordinals_start
        && ordinal - statefulset.ordinals_start < statefulset.spec_replicas
}

/// Wanted ordinals without an available pod: missing, starting, not ready or terminating.
fn unavailable(statefulset: &StatefulSetSnapshot, life: &MemberLife, now: Timestamp) -> u32 {
    let available = statefulset
        .pods
        .iter()
        .zip(&life.pods)
        .filter(|(pod, pod_life)| {
            wanted(statefulset, pod_life.ordinal)
                && is_available(pod, statefulset.min_ready_seconds, now)
        })
        .count();
    statefulset.spec_replicas - u32::try_from(available).expect("few pods")
}

fn fully_ready(statefulset: &StatefulSetSnapshot, life: &MemberLife, now: Timestamp) -> bool {
    unavailable(statefulset, life, now) == 0
        && life
            .pods
            .iter()
            .all(|pod_life| wanted(statefulset, pod_life.ordinal))
}

fn rollout_done(statefulset: &StatefulSetSnapshot, life: &MemberLife, now: Timestamp) -> bool {
    fully_ready(statefulset, life, now)
        && statefulset.update_revision.is_some()
        && statefulset
            .pods
            .iter()
            .all(|pod| pod.revision == statefulset.update_revision)
}

/// Rolled by partition: opted in and `RollingUpdate`.
fn by_partition(statefulset: &StatefulSetSnapshot) -> bool {
    statefulset.update_strategy == UpdateStrategy::RollingUpdate
        && statefulset
            .annotations
            .get(UPDATE_BY_ANNOTATION)
            .is_some_and(|value| value == "partition")
}

/// Neither `OnDelete` nor rolled by partition: baton must leave the group alone.
fn out_of_batons_hands(statefulset: &StatefulSetSnapshot) -> bool {
    statefulset.update_strategy != UpdateStrategy::OnDelete && !by_partition(statefulset)
}

/// The partition baton recorded, when the spec has another (someone else moved it).
fn moved_partition(statefulset: &StatefulSetSnapshot) -> Option<u32> {
    let set: u32 = statefulset
        .annotations
        .get(PARTITION_ANNOTATION)?
        .parse()
        .ok()?;
    (by_partition(statefulset) && set != statefulset.partition).then_some(set)
}

/// A pod's index: its ordinal minus spec.ordinals.start.
fn index_of(statefulset: &StatefulSetSnapshot, ordinal: u32) -> Option<u32> {
    ordinal.checked_sub(statefulset.ordinals_start)
}

fn is_paused(statefulset: &StatefulSetSnapshot) -> bool {
    statefulset
        .annotations
        .get(ROLLOUT_PAUSED_ANNOTATION)
        .is_some_and(|value| value == "true")
}

impl<'p> Simulation<'p> {
    fn new(seed: u64, planner: &'p Planner, traced: bool) -> Self {
        let mut simulation = Self {
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            step: 0,
            chaos_steps: 0,
            group: GroupSnapshot {
                name: "ingester".to_owned(),
                statefulsets: Vec::new(),
                reach: Default::default(),
            },
            members: Vec::new(),
            broken: Vec::new(),
            next_id: 0,
            max_rolling: match seed % 8 {
                3 => 2,
                6 => 3,
                _ => 1,
            },
            adversary: seed % 5 == 4,
            planner,
            trace: Trace {
                lines: traced.then(Vec::new),
            },
            stats: Stats {
                scenarios: 1,
                ..Stats::default()
            },
        };
        simulation.chaos_steps = simulation.rng.random_range(3..=20);
        let size = [1, 2, 2, 3, 3, 3, 3, 3, 4, 4][simulation.rng.random_range(0..10)];
        for index in 0..size {
            simulation.add_member(index, true);
        }
        // Most scenarios start with a template change of the whole group, like a deployment.
        if simulation.rng.random_bool(0.7) {
            for index in 0..simulation.group.statefulsets.len() {
                simulation.change_template(index);
            }
        }
        simulation.trace.note(simulation.step, || {
            format!("start: {}", describe(&simulation.group))
        });
        simulation
    }

    fn new_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{}", self.next_id)
    }

    /// Adds `zone-<letter>` to the group: settled at scenario start (sometimes mid-rollout),
    /// brand new (no revision, no pod) when it joins later.
    fn add_member(&mut self, index: usize, at_start: bool) {
        let name = format!(
            "ingester-zone-{}",
            char::from(b'a' + u8::try_from(index).expect("few zones"))
        );
        self.add_statefulset(name, at_start);
    }

    /// Adds StatefulSet `name` to the group (see [`Self::add_member`]); returns its position,
    /// `None` when the group has one of that name already.
    fn add_statefulset(&mut self, name: String, at_start: bool) -> Option<usize> {
        if self
            .group
            .statefulsets
            .iter()
            .any(|member| member.name == name)
        {
            return None;
        }
        let rng = &mut self.rng;
        let replicas = if rng.random_bool(0.05) {
            rng.random_range(8..=12)
        } else {
            rng.random_range(0..=4)
        };
        let min_ready_seconds = if rng.random_bool(0.15) {
            rng.random_range(1..=3)
        } else {
            0
        };
        let ordinals_start = u32::from(rng.random_bool(0.05));
        let budget = Budget::random(rng);
        let mut annotations = BTreeMap::new();
        if let Some(value) = budget.annotation() {
            annotations.insert(MAX_UNAVAILABLE_ANNOTATION.to_owned(), value);
        }
        if rng.random_bool(0.1) {
            annotations.insert(ROLLOUT_PAUSED_ANNOTATION.to_owned(), "true".to_owned());
        }
        if self.max_rolling > 1 {
            annotations.insert(
                MAX_ROLLING_MEMBERS_ANNOTATION.to_owned(),
                self.max_rolling.to_string(),
            );
        }
        let by_partition = rng.random_bool(0.3);
        let update_strategy = if by_partition || rng.random_bool(0.05) {
            UpdateStrategy::RollingUpdate
        } else {
            UpdateStrategy::OnDelete
        };
        // Rolled by partition: opted in, held at its replicas by baton earlier.
        let partition = if by_partition { replicas } else { 0 };
        if by_partition {
            annotations.insert(UPDATE_BY_ANNOTATION.to_owned(), "partition".to_owned());
            annotations.insert(PARTITION_ANNOTATION.to_owned(), partition.to_string());
        }
        let ordered_ready = !by_partition || rng.random_bool(0.8);
        let revision_known_at = if at_start {
            0
        } else {
            self.step + rng.random_range(1..=3)
        };
        let statefulset = StatefulSetSnapshot {
            unreachable: None,
            uid: self.new_id("sts-"),
            name: name.clone(),
            spec_replicas: replicas,
            ordinals_start,
            min_ready_seconds,
            status_replicas: 0,
            ready_replicas: 0,
            current_revision: None,
            update_revision: None,
            status_lag: None,
            update_strategy,
            partition,
            ordered_ready,
            annotations,
            pods: Vec::new(),
        };
        let life = MemberLife {
            budget,
            pods: Vec::new(),
            create_at: Vec::new(),
            blocked_until: 0,
            baton_pending: Vec::new(),
            released: Vec::new(),
            revision_known_at,
            stale_status: false,
            generation: 1,
            unobserved_revision: None,
            fixed_by_hand: false,
            cluster: self.rng.random_range(0..3),
            outage: None,
            newcomer: false,
        };
        let position = self
            .group
            .statefulsets
            .partition_point(|member| member.name < name);
        self.group.statefulsets.insert(position, statefulset);
        self.members.insert(position, life);
        if at_start {
            self.settle(position);
        } else {
            self.trace
                .note(self.step, || format!("chaos: {name} joins the group"));
        }
        Some(position)
    }

    /// The adversary (see (k)): a StatefulSet with the group's label, often 0 replicas, carrying
    /// any subset of the group-level keys with any values (its own max-unavailable, pause and
    /// update strategy are drawn as any member's: they steer only itself).
    fn add_newcomer(&mut self) {
        let name = self.new_id("ingester-new-");
        let Some(position) = self.add_statefulset(name.clone(), false) else {
            return;
        };
        let statefulset = &mut self.group.statefulsets[position];
        if self.rng.random_bool(0.5) {
            statefulset.spec_replicas = 0;
            if by_partition(statefulset) {
                statefulset.partition = 0;
                statefulset
                    .annotations
                    .insert(PARTITION_ANNOTATION.to_owned(), "0".to_owned());
            }
        }
        // Its own word only: the honest members' max-rolling-members is not its to carry.
        statefulset
            .annotations
            .remove(MAX_ROLLING_MEMBERS_ANNOTATION);
        for &(key, values) in NEWCOMER_KEYS {
            let likely = if key == MAX_ROLLING_MEMBERS_ANNOTATION {
                0.7
            } else {
                0.25
            };
            if self.rng.random_bool(likely) {
                let value = values[self.rng.random_range(0..values.len())];
                statefulset
                    .annotations
                    .insert(key.to_owned(), value.to_owned());
            }
        }
        self.stats.newcomers += 1;
        if statefulset
            .annotations
            .get(MAX_ROLLING_MEMBERS_ANNOTATION)
            .and_then(|value| value.parse::<u32>().ok())
            .is_some_and(|value| value > 1)
        {
            self.stats.widening_newcomers += 1;
        }
        self.members[position].newcomer = true;
        let statefulset = &self.group.statefulsets[position];
        self.trace.note(self.step, || {
            format!(
                "adversary: {name} joins with {} replicas and {:?}",
                statefulset.spec_replicas, statefulset.annotations
            )
        });
    }

    /// At the end of chaos, each newcomer leaves (a person deletes it once told), or stays with
    /// only its max-rolling-members among the group's keys: the rollout must complete with it.
    fn settle_newcomers(&mut self) {
        let mut member = 0;
        while member < self.members.len() {
            if !self.members[member].newcomer {
                member += 1;
                continue;
            }
            let name = self.group.statefulsets[member].name.clone();
            if self.rng.random_bool(0.5) {
                self.trace
                    .note(self.step, || format!("adversary: {name} is deleted"));
                self.group.statefulsets.remove(member);
                self.members.remove(member);
                continue;
            }
            let annotations = &mut self.group.statefulsets[member].annotations;
            for &(key, _) in NEWCOMER_KEYS {
                if key != MAX_ROLLING_MEMBERS_ANNOTATION {
                    annotations.remove(key);
                }
            }
            self.trace.note(self.step, || {
                format!("adversary: {name} stays with its max-rolling-members only")
            });
            member += 1;
        }
    }

    /// (a) and (b) judged with a newcomer in the group are (k): it made the group less safe.
    fn zone_rule(&self, property: Property) -> Property {
        if self.members.iter().any(|life| life.newcomer) {
            Property::NewcomersSpeakForNobody
        } else {
            property
        }
    }

    /// Gives a member its revision and every pod, ready long ago; sometimes mid-rollout.
    fn settle(&mut self, index: usize) {
        let revision = self.new_id("r");
        let newer = self.new_id("r");
        let mid_rollout = self.rng.random_bool(0.3);
        let statefulset = &mut self.group.statefulsets[index];
        statefulset.current_revision = Some(revision.clone());
        statefulset.update_revision = Some(if mid_rollout {
            newer.clone()
        } else {
            revision.clone()
        });
        let start = statefulset.ordinals_start;
        for ordinal in start..start + statefulset.spec_replicas {
            let pod_revision = if mid_rollout && self.rng.random_bool(0.5) {
                &newer
            } else {
                &revision
            };
            let stuck = self.rng.random_bool(0.06).then_some("CrashLoopBackOff");
            let ready = stuck.is_none() && (!mid_rollout || self.rng.random_bool(0.8));
            self.next_id += 1;
            statefulset.pods.push(PodSnapshot {
                name: format!("{}-{ordinal}", statefulset.name),
                uid: format!("pod-{}", self.next_id),
                revision: Some(pod_revision.clone()),
                phase: PodPhase::Running,
                ready,
                ready_since: ready.then(|| instant(0) - SignedDuration::from_hours(1)),
                terminating: false,
                container_state: stuck.map(str::to_owned),
                created_at: None,
            });
            self.members[index].pods.push(PodLife {
                ordinal,
                running_at: 0,
                ready_at: if ready {
                    0
                } else {
                    self.rng.random_range(1..=4)
                },
                failing_until: 0,
                gone_at: None,
                stuck,
            });
        }
        refresh_status(statefulset);
    }

    // --- chaos -------------------------------------------------------------------------------

    fn random_member(&mut self) -> Option<usize> {
        let count = self.group.statefulsets.len();
        (count > 0).then(|| self.rng.random_range(0..count))
    }

    fn random_pod(&mut self, member: usize) -> Option<usize> {
        let count = self.members[member].pods.len();
        (count > 0).then(|| self.rng.random_range(0..count))
    }

    /// At most one chaos event per step (one draw keeps the debug-build RNG cost low).
    fn chaos(&mut self) {
        let roll = self.rng.random_range(0..100);
        if (62..74).contains(&roll) && self.adversary {
            self.add_newcomer();
            return;
        }
        if roll >= 62 {
            return;
        }
        let Some(member) = self.random_member() else {
            return;
        };
        let name = &self.group.statefulsets[member].name;
        match roll {
            0..15 => {
                let Some(pod) = self.random_pod(member) else {
                    return;
                };
                let until = self.step + self.rng.random_range(1..=6);
                self.members[member].pods[pod].failing_until = until;
                self.trace.note(self.step, || {
                    let pod = &self.group.statefulsets[member].pods[pod].name;
                    format!("chaos: {pod} fails readiness until step {until}")
                });
            }
            15..19 => {
                let Some(pod) = self.random_pod(member) else {
                    return;
                };
                if !self.group.statefulsets[member].pods[pod].terminating {
                    self.terminate(member, pod);
                    self.trace.note(self.step, || {
                        let pod = &self.group.statefulsets[member].pods[pod].name;
                        format!("chaos: {pod} evicted")
                    });
                }
            }
            19..24 => {
                self.change_template(member);
            }
            24..27 => {
                for member in 0..self.group.statefulsets.len() {
                    self.change_template(member);
                }
            }
            27..30 => {
                self.trace
                    .note(self.step, || format!("chaos: {name} rolled back"));
                self.observe_spec(member);
                let statefulset = &mut self.group.statefulsets[member];
                if statefulset.current_revision.is_some() {
                    statefulset.update_revision = statefulset.current_revision.clone();
                }
            }
            30..33 => {
                let replicas = if self.rng.random_bool(0.05) {
                    self.rng.random_range(8..=12)
                } else {
                    self.rng.random_range(0..=4)
                };
                self.trace
                    .note(self.step, || format!("chaos: {name} scaled to {replicas}"));
                self.group.statefulsets[member].spec_replicas = replicas;
            }
            33..36 => {
                let value = ["true", "false", "yes"][self.rng.random_range(0..3)];
                self.trace
                    .note(self.step, || format!("chaos: {name} paused={value}"));
                let annotations = &mut self.group.statefulsets[member].annotations;
                annotations.insert(ROLLOUT_PAUSED_ANNOTATION.to_owned(), value.to_owned());
            }
            36..38 if by_partition(&self.group.statefulsets[member]) => {
                // A person or a GitOps re-apply sets the partition baton manages.
                let replicas = self.group.statefulsets[member].spec_replicas;
                let partition = self.rng.random_range(0..=replicas);
                self.trace.note(self.step, || {
                    format!("chaos: someone sets the partition of {name} to {partition}")
                });
                self.group.statefulsets[member].partition = partition;
            }
            36..38 => {
                let strategy = match self.rng.random_range(0..4) {
                    0 => UpdateStrategy::RollingUpdate,
                    1 => UpdateStrategy::Other("Canary".to_owned()),
                    _ => UpdateStrategy::OnDelete,
                };
                self.trace
                    .note(self.step, || format!("chaos: {name} now uses {strategy}"));
                self.group.statefulsets[member].update_strategy = strategy;
            }
            38..40 => {
                let budget = Budget::random(&mut self.rng);
                self.set_budget(member, budget);
            }
            40..43 => {
                let until = self.step + self.rng.random_range(2..=8);
                self.trace.note(self.step, || {
                    format!("chaos: {name} cannot create pods until step {until} (quota)")
                });
                self.members[member].blocked_until = until;
            }
            43 => {
                let index = self.rng.random_range(0..5);
                self.add_member(index, false);
            }
            44 if self.group.statefulsets.len() > 1 => {
                self.trace
                    .note(self.step, || format!("chaos: {name} leaves the group"));
                self.group.statefulsets.remove(member);
                self.members.remove(member);
            }
            45..55 => self.members[member].stale_status = true,
            55..58 => {
                let Some(pod) = self.random_pod(member) else {
                    return;
                };
                let reason = ["CrashLoopBackOff", "ImagePullBackOff"][self.rng.random_range(0..2)];
                self.members[member].pods[pod].stuck = Some(reason);
                self.trace.note(self.step, || {
                    let pod = &self.group.statefulsets[member].pods[pod].name;
                    format!("chaos: {pod} is broken ({reason})")
                });
            }
            58..60 => self.change_template_to_broken(member),
            60..62 => self.cluster_unreachable(member),
            _ => {}
        }
    }

    /// The cluster of `member` cannot be read for a few steps: baton keeps seeing every member
    /// of it as it last was, while the world there goes on (chaos included).
    fn cluster_unreachable(&mut self, member: usize) {
        let cluster = self.members[member].cluster;
        let until = self.step + self.rng.random_range(1..=8);
        self.trace.note(self.step, || {
            format!("chaos: cluster-{cluster} cannot be read until step {until}")
        });
        for (statefulset, life) in self.group.statefulsets.iter().zip(&mut self.members) {
            if life.cluster == cluster && life.outage.is_none() {
                life.outage = Some((statefulset.clone(), until));
            }
        }
    }

    /// Clusters whose outage is over are read again (listed afresh: baton sees them as they
    /// are); with `all`, every one.
    fn clusters_back(&mut self, all: bool) {
        for life in &mut self.members {
            if life
                .outage
                .as_ref()
                .is_some_and(|(_, until)| all || *until <= self.step)
            {
                life.outage = None;
                let cluster = life.cluster;
                self.trace
                    .note(self.step, || format!("cluster-{cluster} is read again"));
            }
        }
    }

    /// The group as baton sees it: members of a cluster that cannot be read as they last
    /// were, marked unreachable.
    fn seen(&self) -> Option<GroupSnapshot> {
        if self.members.iter().all(|life| life.outage.is_none()) {
            return None;
        }
        let mut seen = self.group.clone();
        for (statefulset, life) in seen.statefulsets.iter_mut().zip(&self.members) {
            if let Some((last, _)) = &life.outage {
                *statefulset = StatefulSetSnapshot {
                    unreachable: Some(Unreachable {
                        cluster: format!("cluster-{}", life.cluster),
                        error: "connection refused".to_owned(),
                    }),
                    ..last.clone()
                };
            }
        }
        Some(seen)
    }

    /// A new template; returns its revision. Sometimes the StatefulSet controller observes it
    /// only a few steps later (`observe_spec`), as after a deploy pipeline's write: until then
    /// the status shows the old updateRevision and an observedGeneration behind.
    fn change_template(&mut self, member: usize) -> Option<String> {
        self.group.statefulsets[member].update_revision.as_ref()?;
        let revision = self.new_id("r");
        let lags = self.rng.random_bool(0.3);
        self.trace.note(self.step, || {
            format!(
                "template of {} changed to {revision}{}",
                self.group.statefulsets[member].name,
                if lags { " (not observed yet)" } else { "" }
            )
        });
        let life = &mut self.members[member];
        life.generation += 1;
        if lags {
            let observed = self.group.statefulsets[member]
                .status_lag
                .map_or(life.generation - 1, |lag| {
                    lag.observed_generation.unwrap_or(0)
                });
            life.unobserved_revision = Some(revision.clone());
            self.group.statefulsets[member].status_lag = Some(StatusLag {
                generation: life.generation,
                observed_generation: Some(observed),
            });
        } else {
            life.unobserved_revision = None;
            self.group.statefulsets[member].status_lag = None;
            self.group.statefulsets[member].update_revision = Some(revision.clone());
        }
        Some(revision)
    }

    /// The StatefulSet controller observes member's latest spec: its status catches up.
    fn observe_spec(&mut self, member: usize) {
        if let Some(revision) = self.members[member].unobserved_revision.take() {
            self.trace.note(self.step, || {
                format!(
                    "the StatefulSet controller observes {}'s template {revision}",
                    self.group.statefulsets[member].name
                )
            });
            self.group.statefulsets[member].update_revision = Some(revision);
        }
        self.group.statefulsets[member].status_lag = None;
    }

    /// A template change to a version whose pods never become ready.
    fn change_template_to_broken(&mut self, member: usize) {
        if let Some(revision) = self.change_template(member) {
            let reason = ["CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull"]
                [self.rng.random_range(0..3)];
            self.trace
                .note(self.step, || format!("{revision} is broken ({reason})"));
            self.broken.push((revision, reason));
        }
    }

    fn set_budget(&mut self, member: usize, budget: Budget) {
        self.members[member].budget = budget;
        let annotations = &mut self.group.statefulsets[member].annotations;
        match budget.annotation() {
            Some(value) => annotations.insert(MAX_UNAVAILABLE_ANNOTATION.to_owned(), value),
            None => annotations.remove(MAX_UNAVAILABLE_ANNOTATION),
        };
        self.trace.note(self.step, || {
            format!(
                "{} max-unavailable now {budget:?}",
                self.group.statefulsets[member].name
            )
        });
    }

    /// Chaos stops: no more failures, template changes or strategy switches; statuses catch up.
    /// A broken update revision gets its fix deployed; broken pods that no rollout would
    /// replace (at the update revision, paused, or under a `Parallel` partition) are fixed by
    /// hand, and a partition someone else moved is settled as the wait says. Broken pods at an
    /// old revision stay broken: replacing them is the planner's job.
    fn end_chaos(&mut self) {
        self.clusters_back(true);
        self.settle_newcomers();
        for member in 0..self.group.statefulsets.len() {
            self.observe_spec(member);
            let update = self.group.statefulsets[member].update_revision.clone();
            if self.broken_reason(update.as_deref()).is_some() {
                self.change_template(member);
            }
            // Statuses catch up, the fix's included: pods created from here on run it.
            self.observe_spec(member);
        }
        // Zones with broken old pods: a partition can release one such zone's fix only while
        // it is the only zone down (see `parallel` below for the other limit).
        let broken_zones = self
            .group
            .statefulsets
            .iter()
            .zip(&self.members)
            .filter(|(statefulset, life)| {
                statefulset
                    .pods
                    .iter()
                    .zip(&life.pods)
                    .any(|(pod, pod_life)| {
                        pod_life.stuck.is_some() && pod.revision != statefulset.update_revision
                    })
            })
            .count();
        for (statefulset, life) in self.group.statefulsets.iter_mut().zip(&mut self.members) {
            if moved_partition(statefulset).is_some() {
                // A person settles it, as the wait says: baton goes on from where it is.
                statefulset.annotations.remove(PARTITION_ANNOTATION);
                life.released.clear();
            }
            if !by_partition(statefulset) {
                statefulset.update_strategy = UpdateStrategy::OnDelete;
            }
            life.stale_status = false;
            let paused = is_paused(statefulset);
            // Rolled by partition, a broken old pod below available old ones can only be
            // released with them: past max-unavailable with a `Parallel` controller, and into a
            // second zone down when another zone is broken too. baton waits and names it; a
            // person fixes it.
            let by_hand =
                by_partition(statefulset) && (!statefulset.ordered_ready || broken_zones > 1);
            for (pod, pod_life) in statefulset.pods.iter().zip(&mut life.pods) {
                if paused || by_hand || pod.revision == statefulset.update_revision {
                    pod_life.stuck = None;
                }
            }
            life.fixed_by_hand = paused || by_hand;
        }
        self.trace.note(self.step, || "chaos stops".to_owned());
    }

    fn broken_reason(&self, revision: Option<&str>) -> Option<&'static str> {
        let revision = revision?;
        self.broken
            .iter()
            .find(|(broken, _)| broken == revision)
            .map(|&(_, reason)| reason)
    }

    // --- Kubernetes ---------------------------------------------------------------------------

    fn terminate(&mut self, member: usize, pod: usize) {
        let gone_at = self.step + self.rng.random_range(0..=1);
        self.group.statefulsets[member].pods[pod].terminating = true;
        self.members[member].pods[pod].gone_at = Some(gone_at);
    }

    /// One step of the StatefulSet controller and the kubelets.
    fn kubernetes(&mut self) {
        let step = self.step;
        let now = instant(step);
        for member in 0..self.group.statefulsets.len() {
            if self.members[member].unobserved_revision.is_some() && self.rng.random_bool(0.5) {
                self.observe_spec(member);
            }
        }
        for member in 0..self.group.statefulsets.len() {
            let statefulset = &mut self.group.statefulsets[member];
            let life = &mut self.members[member];

            // A brand-new StatefulSet gets its revisions.
            if statefulset.update_revision.is_none() && step >= life.revision_known_at {
                self.next_id += 1;
                let revision = format!("r{}", self.next_id);
                statefulset.current_revision = Some(revision.clone());
                statefulset.update_revision = Some(revision);
            }

            // Terminated pods disappear.
            for index in (0..life.pods.len()).rev() {
                if life.pods[index]
                    .gone_at
                    .is_some_and(|gone_at| gone_at <= step)
                {
                    life.pods.swap_remove(index);
                    statefulset.pods.swap_remove(index);
                }
            }

            // Scale-down: pods outside the wanted ordinals go, highest first, one at a time,
            // when the StatefulSet controller gets to it.
            let unwanted = |index: &usize| !wanted(statefulset, life.pods[*index].ordinal);
            if !(0..life.pods.len())
                .filter(unwanted)
                .any(|index| statefulset.pods[index].terminating)
                && let Some(index) = (0..life.pods.len())
                    .filter(unwanted)
                    .max_by_key(|&index| life.pods[index].ordinal)
                && self.rng.random_bool(0.5)
            {
                statefulset.pods[index].terminating = true;
                life.pods[index].gone_at = Some(step + self.rng.random_range(0..=1));
            }

            // RollingUpdate: Kubernetes rolls the pods at or above the partition itself,
            // highest first, one at a time: it deletes the highest outdated one unless a pod
            // above it is not healthy yet; `OrderedReady` also waits while any pod is down.
            if statefulset.update_strategy == UpdateStrategy::RollingUpdate
                && (!statefulset.ordered_ready || fully_ready(statefulset, life, now))
            {
                let mut above: Vec<usize> = (0..life.pods.len())
                    .filter(|&index| {
                        let ordinal = life.pods[index].ordinal;
                        wanted(statefulset, ordinal)
                            && index_of(statefulset, ordinal)
                                .is_some_and(|index| index >= statefulset.partition)
                    })
                    .collect();
                above.sort_by_key(|&index| std::cmp::Reverse(life.pods[index].ordinal));
                for index in above {
                    let pod = &statefulset.pods[index];
                    if pod.revision != statefulset.update_revision && !pod.terminating {
                        let ordinal = life.pods[index].ordinal;
                        let available = is_available(pod, statefulset.min_ready_seconds, now);
                        statefulset.pods[index].terminating = true;
                        life.pods[index].gone_at = Some(step + self.rng.random_range(0..=1));
                        // A pod baton released: its unavailability is baton's doing.
                        if let Some(at) = life.released.iter().position(|&o| o == ordinal) {
                            life.released.swap_remove(at);
                            if available && !life.baton_pending.contains(&ordinal) {
                                life.baton_pending.push(ordinal);
                            }
                        }
                        break;
                    }
                    if pod.terminating || !is_available(pod, 0, now) {
                        break;
                    }
                }
                let all_updated = statefulset
                    .pods
                    .iter()
                    .all(|pod| pod.revision == statefulset.update_revision);
                if all_updated && fully_ready(statefulset, life, now) {
                    statefulset.current_revision = statefulset.update_revision.clone();
                }
            }

            // Missing pods are (re)created at the update revision after a short delay.
            life.create_at
                .retain(|&(ordinal, _)| wanted(statefulset, ordinal));
            let start = statefulset.ordinals_start;
            for ordinal in start..start + statefulset.spec_replicas {
                if life.pods.iter().any(|pod| pod.ordinal == ordinal) {
                    continue;
                }
                let Some(position) = life.create_at.iter().position(|&(o, _)| o == ordinal) else {
                    life.create_at
                        .push((ordinal, step + self.rng.random_range(0..=1)));
                    continue;
                };
                let (_, at) = life.create_at[position];
                if at > step || step < life.blocked_until {
                    continue;
                }
                // Below a RollingUpdate partition, a pod comes back at the current revision.
                let below_partition = statefulset.update_strategy == UpdateStrategy::RollingUpdate
                    && index_of(statefulset, ordinal)
                        .is_some_and(|index| index < statefulset.partition);
                let revision = if below_partition {
                    statefulset.current_revision.clone()
                } else {
                    statefulset.update_revision.clone()
                };
                let Some(revision) = revision else {
                    continue;
                };
                let stuck = self
                    .broken
                    .iter()
                    .find(|(broken, _)| *broken == revision)
                    .map(|&(_, reason)| reason)
                    .filter(|_| !life.fixed_by_hand);
                life.create_at.swap_remove(position);
                self.next_id += 1;
                statefulset.pods.push(PodSnapshot {
                    name: format!("{}-{ordinal}", statefulset.name),
                    uid: format!("pod-{}", self.next_id),
                    revision: Some(revision),
                    phase: PodPhase::Pending,
                    ready: false,
                    ready_since: None,
                    terminating: false,
                    created_at: None,
                    container_state: None,
                });
                let running_at = step + self.rng.random_range(0..=1);
                life.pods.push(PodLife {
                    ordinal,
                    running_at,
                    ready_at: running_at + self.rng.random_range(0..=2),
                    failing_until: 0,
                    gone_at: None,
                    stuck,
                });
            }

            // Pods start and become ready; terminating pods keep whatever readiness they had.
            for (pod, pod_life) in statefulset.pods.iter_mut().zip(&life.pods) {
                if pod.terminating {
                    continue;
                }
                // A pod that cannot pull its image never starts; a crash-looping one runs but
                // never becomes ready.
                let running = step >= pod_life.running_at
                    && !matches!(pod_life.stuck, Some("ImagePullBackOff" | "ErrImagePull"));
                pod.phase = if running {
                    PodPhase::Running
                } else {
                    PodPhase::Pending
                };
                pod.container_state = pod_life.stuck.map(str::to_owned);
                let ready = running
                    && pod_life.stuck.is_none()
                    && step >= pod_life.ready_at
                    && step >= pod_life.failing_until;
                if ready && !pod.ready {
                    pod.ready_since = Some(now);
                } else if !ready {
                    pod.ready_since = None;
                }
                pod.ready = ready;
            }

            // Released pods that no longer need replacing (updated, gone, or below the
            // partition again) are no longer baton's to count.
            let partition = statefulset.partition;
            let start = statefulset.ordinals_start;
            let pods = &statefulset.pods;
            let update_revision = &statefulset.update_revision;
            life.released.retain(|&ordinal| {
                ordinal >= start + partition
                    && life.pods.iter().zip(pods).any(|(pod_life, pod)| {
                        pod_life.ordinal == ordinal && pod.revision != *update_revision
                    })
            });

            // Baton's pending slots end once available again, or once no longer wanted.
            let min_ready_seconds = statefulset.min_ready_seconds;
            let pods = &statefulset.pods;
            let lives = &life.pods;
            life.baton_pending.retain(|&ordinal| {
                wanted(statefulset, ordinal)
                    && !lives.iter().zip(pods).any(|(pod_life, pod)| {
                        pod_life.ordinal == ordinal && is_available(pod, min_ready_seconds, now)
                    })
            });

            if !life.stale_status {
                refresh_status(statefulset);
            }
            life.stale_status = false;
        }
    }

    // --- baton --------------------------------------------------------------------------------

    fn violation(&self, property: Property, details: String) -> Violation {
        let mut details = details;
        let _ = write!(details, "\n  group: {}", describe(&self.group));
        Violation {
            seed: self.seed,
            step: self.step,
            property,
            details,
        }
    }

    fn locate(&self, statefulset: &str, pod: &str) -> Option<(usize, usize)> {
        let member = self
            .group
            .statefulsets
            .iter()
            .position(|member| member.name == statefulset)?;
        let index = self.group.statefulsets[member]
            .pods
            .iter()
            .position(|candidate| candidate.name == pod)?;
        Some((member, index))
    }

    /// Runs the leader's pass as the real one does (the core's one call,
    /// [`pass::decide_gated_by`], on the planner under test), checks what its effects do against
    /// the world as it is, carries them out, checks again.
    fn baton(&mut self) -> Result<(), Violation> {
        let now = instant(self.step);
        self.clusters_back(false);
        let seen = self.seen();
        let planner = self.planner;
        let pass = leader_pass(
            seen.as_ref().unwrap_or(&self.group),
            now,
            &|group, gates, check, now| {
                pass::gate_planned(group, gates, planner(group, now), check, now)
            },
        );
        // The actions are the pass's effects: what the leader carries out.
        let plan = Plan {
            actions: pass.actions().cloned().collect(),
            ..pass.plan
        };
        if let Some(reason) = &plan.waiting {
            *self.stats.waits.entry(reason.kind()).or_default() += 1;
        }
        self.trace.note(self.step, || {
            let actions: Vec<String> = plan.actions.iter().map(ToString::to_string).collect();
            let waiting = plan
                .waiting
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            format!("plan: [{}] waiting: {waiting}", actions.join("; "))
        });

        // (j)
        if let Some(life) = self.members.iter().find(|life| life.outage.is_some())
            && !plan.actions.is_empty()
        {
            return Err(self.violation(
                Property::NothingWhileUnreachable,
                format!(
                    "cluster-{} cannot be read, yet the plan is {:?}",
                    life.cluster, plan.actions
                ),
            ));
        }

        // (d)
        if let Some(member) = self
            .group
            .statefulsets
            .iter()
            .find(|member| out_of_batons_hands(member))
            && !plan.actions.is_empty()
        {
            return Err(self.violation(
                Property::NonOnDeleteUntouched,
                format!(
                    "{} uses {} but the plan has actions {:?}",
                    member.name, member.update_strategy, plan.actions
                ),
            ));
        }

        // (g)
        if let Some(member) = self
            .group
            .statefulsets
            .iter()
            .find(|member| moved_partition(member).is_some())
            && !plan.actions.is_empty()
        {
            return Err(self.violation(
                Property::PartitionMovedUntouched,
                format!(
                    "someone else set the partition of {} to {}, yet the plan is {:?}",
                    member.name, member.partition, plan.actions
                ),
            ));
        }

        // (i)
        if let Some(member) = self
            .group
            .statefulsets
            .iter()
            .find(|member| member.status_lag.is_some())
            && !plan.actions.is_empty()
        {
            return Err(self.violation(
                Property::NothingOnAStatusBehindItsSpec,
                format!(
                    "the status of {} describes an older spec ({:?}), yet the plan is {:?}",
                    member.name, member.status_lag, plan.actions
                ),
            ));
        }

        // Partitions: each on a member rolled by partition, releasing exactly the outdated
        // pods it is lowered past (named, live, unpaused). Released pods the StatefulSet
        // controller will take down count as deleted below.
        let mut partitions: Vec<(usize, u32)> = Vec::new();
        let mut releases: Vec<(usize, usize)> = Vec::new();
        for action in &plan.actions {
            let Action::SetPartition {
                statefulset,
                partition,
                releases: named,
            } = action
            else {
                continue;
            };
            let Some(member) = self
                .group
                .statefulsets
                .iter()
                .position(|member| &member.name == statefulset)
            else {
                return Err(self.violation(
                    Property::KnownPodsOnly,
                    format!("no StatefulSet {statefulset}"),
                ));
            };
            let target = &self.group.statefulsets[member];
            if !by_partition(target) {
                return Err(self.violation(
                    Property::NonOnDeleteUntouched,
                    format!("{statefulset} is not rolled by partition, yet {action}"),
                ));
            }
            let lowered_past = |index: u32| index >= *partition && index < target.partition;
            for (position, (pod, pod_life)) in target
                .pods
                .iter()
                .zip(&self.members[member].pods)
                .enumerate()
            {
                // Pods beyond spec.replicas are going anyway: no partition releases them.
                let lowered = wanted(target, pod_life.ordinal)
                    && index_of(target, pod_life.ordinal).is_some_and(lowered_past);
                let outdated = pod.revision != target.update_revision && !pod.terminating;
                let named_here = named.iter().any(|release| release.pod == pod.name);
                if lowered && outdated && !named_here {
                    return Err(self.violation(
                        Property::KnownPodsOnly,
                        format!("{action} releases {} without naming it", pod.name),
                    ));
                }
                if named_here {
                    if !lowered || !outdated {
                        return Err(self.violation(
                            Property::NoUpToDateDeleted,
                            format!("{action} names {}, which it does not release", pod.name),
                        ));
                    }
                    if is_paused(target) {
                        return Err(self.violation(
                            Property::NoPausedDeleted,
                            format!("{statefulset} is paused, {} released", pod.name),
                        ));
                    }
                    releases.push((member, position));
                }
            }
            partitions.push((member, *partition));
        }

        // Deletions: each must name a live, outdated, unpaused pod by its current uid.
        let mut targets: Vec<(usize, usize)> = Vec::new();
        for action in &plan.actions {
            let Action::DeletePod {
                statefulset,
                pod,
                uid,
                unavailable: free,
            } = action
            else {
                continue;
            };
            let Some((member, index)) = self.locate(statefulset, pod) else {
                return Err(self.violation(
                    Property::KnownPodsOnly,
                    format!("no pod {pod} in {statefulset}"),
                ));
            };
            let members = &self.group.statefulsets;
            let target = &members[member].pods[index];
            if &target.uid != uid {
                return Err(self.violation(
                    Property::KnownPodsOnly,
                    format!("{pod} has uid {}, plan says {uid}", target.uid),
                ));
            }
            if target.terminating {
                return Err(self.violation(
                    Property::NoTerminatingDeleted,
                    format!("{pod} is already terminating"),
                ));
            }
            if is_paused(&members[member]) {
                return Err(self.violation(
                    Property::NoPausedDeleted,
                    format!("{statefulset} is paused, {pod} deleted"),
                ));
            }
            if target.revision == members[member].update_revision {
                return Err(self.violation(
                    Property::NoUpToDateDeleted,
                    format!("{pod} already runs the update revision"),
                ));
            }
            // (h) Below a RollingUpdate partition a deleted pod comes back old.
            if members[member].update_strategy == UpdateStrategy::RollingUpdate {
                let partition = partitions
                    .iter()
                    .find(|(planned, _)| *planned == member)
                    .map_or(members[member].partition, |&(_, partition)| partition);
                let ordinal = self.members[member].pods[index].ordinal;
                if index_of(&members[member], ordinal).is_none_or(|index| index < partition) {
                    return Err(self.violation(
                        Property::ReplacedAtUpdateRevision,
                        format!(
                            "{pod} deleted below the partition {partition} of {statefulset}: it comes back at the old revision"
                        ),
                    ));
                }
            }
            // (f)
            if let Some(why) = free {
                let ordinal = self.members[member].pods[index].ordinal;
                // Ready (even for less than minReadySeconds) is serving: no free deletion.
                let serving = target.ready && target.phase == PodPhase::Running;
                if is_available(target, members[member].min_ready_seconds, now)
                    || serving
                    || !wanted(&members[member], ordinal)
                {
                    return Err(self.violation(
                        Property::FreeReplacementCostsNothing,
                        format!(
                            "{pod} deleted as costing no availability ({why}), yet it is {}",
                            if !wanted(&members[member], ordinal) {
                                "beyond spec.replicas: nothing replaces it"
                            } else if serving {
                                "Ready and serving"
                            } else {
                                "available"
                            }
                        ),
                    ));
                }
                self.stats.free_replacements += 1;
            }
            targets.push((member, index));
        }
        // Which deletions take an available pod (by the checker's own definition): those make
        // pods unavailable; the others replace pods that were down already.
        let takes_available: Vec<bool> = targets
            .iter()
            .map(|&(member, index)| {
                let statefulset = &self.group.statefulsets[member];
                is_available(&statefulset.pods[index], statefulset.min_ready_seconds, now)
            })
            .collect();
        // Released pods: taken down later by the StatefulSet controller, one at a time, the
        // free ones (also deleted in this plan) aside.
        let releases: Vec<(usize, usize)> = releases
            .into_iter()
            .filter(|release| !targets.contains(release))
            .collect();
        let releases_available: Vec<bool> = releases
            .iter()
            .map(|&(member, index)| {
                let statefulset = &self.group.statefulsets[member];
                is_available(&statefulset.pods[index], statefulset.min_ready_seconds, now)
            })
            .collect();
        let mut rolling: Vec<usize> = targets
            .iter()
            .zip(&takes_available)
            .chain(releases.iter().zip(&releases_available))
            .filter(|(_, available)| **available)
            .map(|(&(member, _), _)| member)
            .collect();
        rolling.sort_unstable();
        rolling.dedup();
        if rolling.len() > 1 {
            return Err(self.violation(
                self.zone_rule(Property::OneZoneAtATime),
                format!(
                    "one plan deletes available pods of several StatefulSets: {:?}",
                    plan.actions
                ),
            ));
        }
        // (b): available pods only while every other member is fully ready (while fewer than
        // `max_rolling` others are not, with max-rolling-members); pods already down also while
        // other members are down, but never while a new pod is unproven (a pod at an update
        // revision not available) anywhere in the group.
        let unproven = self.group.statefulsets.iter().find_map(|statefulset| {
            statefulset
                .pods
                .iter()
                .find(|pod| {
                    pod.revision == statefulset.update_revision
                        && !is_available(pod, statefulset.min_ready_seconds, now)
                })
                .map(|pod| pod.name.clone())
        });
        for (&(member, index), &available) in targets
            .iter()
            .zip(&takes_available)
            .chain(releases.iter().zip(&releases_available))
        {
            let others_not_ready: Vec<String> = self
                .group
                .statefulsets
                .iter()
                .zip(&self.members)
                .enumerate()
                .filter(|&(other, (statefulset, life))| {
                    other != member && !fully_ready(statefulset, life, now)
                })
                .map(|(_, (statefulset, _))| statefulset.name.clone())
                .collect();
            if others_not_ready.len() < self.max_rolling {
                continue;
            }
            let not_ready = others_not_ready.join(" and ");
            if available || unproven.is_some() {
                let statefulset = &self.group.statefulsets[member];
                return Err(self.violation(
                    self.zone_rule(Property::OthersFullyReady),
                    format!(
                        "deletes {} {} of {} while {not_ready} is not fully ready{}",
                        if available {
                            "available"
                        } else {
                            "unavailable"
                        },
                        statefulset.pods[index].name,
                        statefulset.name,
                        unproven
                            .as_ref()
                            .map(|pod| format!(" and the new pod {pod} is unproven"))
                            .unwrap_or_default()
                    ),
                ));
            }
        }
        // The unavailable pods of each member with deletions, before them, for (c).
        let mut touched: Vec<usize> = targets
            .iter()
            .chain(&releases)
            .map(|&(member, _)| member)
            .collect();
        touched.sort_unstable();
        touched.dedup();
        let before: Vec<(usize, u32, u32)> = touched
            .iter()
            .map(|&member| {
                let statefulset = &self.group.statefulsets[member];
                let life = &self.members[member];
                let limit = life.budget.limit(statefulset.spec_replicas);
                (member, unavailable(statefulset, life, now), limit)
            })
            .collect();
        for &(member, before, limit) in &before {
            if before >= limit {
                let count = targets.iter().filter(|&&(m, _)| m == member).count();
                self.stats.free_past_budget += u64::try_from(count).expect("few pods");
            }
        }
        for (&(member, index), &available) in targets.iter().zip(&takes_available) {
            self.terminate(member, index);
            let ordinal = self.members[member].pods[index].ordinal;
            let pending = &mut self.members[member].baton_pending;
            if available
                && wanted(&self.group.statefulsets[member], ordinal)
                && !pending.contains(&ordinal)
            {
                pending.push(ordinal);
            }
            self.stats.deletions += 1;
        }
        // Partitions take effect, recorded as baton's; released pods are baton's to count
        // once the StatefulSet controller takes them down.
        for &(member, partition) in &partitions {
            let statefulset = &mut self.group.statefulsets[member];
            statefulset.partition = partition;
            statefulset
                .annotations
                .insert(PARTITION_ANNOTATION.to_owned(), partition.to_string());
        }
        for &(member, index) in &releases {
            let ordinal = self.members[member].pods[index].ordinal;
            let released = &mut self.members[member].released;
            if !released.contains(&ordinal) {
                released.push(ordinal);
            }
            self.stats.releases += 1;
        }
        // (c): within max-unavailable, or, where pods were down on their own past it, no more
        // down than before (replacing unavailable pods only). A `Parallel` controller may take
        // a released available pod down whatever else is down: it counts now; an
        // `OrderedReady` one only once every pod is ready, so never past one.
        for &(member, before, limit) in &before {
            let statefulset = &self.group.statefulsets[member];
            let releasing = releases
                .iter()
                .zip(&releases_available)
                .any(|(&(released, _), &available)| released == member && available);
            let after = unavailable(statefulset, &self.members[member], now)
                + u32::from(releasing && !statefulset.ordered_ready);
            if after > limit.max(before) {
                return Err(self.violation(
                    Property::MaxUnavailable,
                    format!(
                        "{} has {after} unavailable pods after baton's deletions ({before} before), \
                         max-unavailable {limit}",
                        statefulset.name
                    ),
                ));
            }
        }

        for action in &plan.actions {
            let Action::SetCurrentRevision {
                statefulset,
                revision,
            } = action
            else {
                continue;
            };
            let Some(member) = self
                .group
                .statefulsets
                .iter()
                .position(|member| &member.name == statefulset)
            else {
                return Err(self.violation(
                    Property::KnownPodsOnly,
                    format!("no StatefulSet {statefulset}"),
                ));
            };
            let target = &self.group.statefulsets[member];
            if target.update_revision.as_ref() != Some(revision)
                || !rollout_done(target, &self.members[member], now)
            {
                return Err(self.violation(
                    Property::CurrentRevisionWhenDone,
                    format!(
                        "{statefulset} marked at {revision} before its rollout to {:?} is done",
                        target.update_revision
                    ),
                ));
            }
            self.group.statefulsets[member].current_revision = Some(revision.clone());
            self.stats.current_revisions_set += 1;
        }

        // (a)
        let made_unavailable: Vec<&str> = self
            .group
            .statefulsets
            .iter()
            .zip(&self.members)
            .filter(|(_, life)| !life.baton_pending.is_empty())
            .map(|(statefulset, _)| statefulset.name.as_str())
            .collect();
        if made_unavailable.len() > 1 {
            self.stats.parallel_members += 1;
        }
        if made_unavailable.len() > self.max_rolling {
            return Err(self.violation(
                self.zone_rule(Property::OneZoneAtATime),
                format!(
                    "baton made pods unavailable in several StatefulSets: {made_unavailable:?}"
                ),
            ));
        }
        Ok(())
    }

    /// Every rollout baton may carry out is finished: all pods updated and ready, current
    /// revisions marked (paused StatefulSets only need to be ready).
    fn converged(&self, now: Timestamp) -> bool {
        self.group
            .statefulsets
            .iter()
            .zip(&self.members)
            .all(|(statefulset, life)| {
                if is_paused(statefulset) {
                    fully_ready(statefulset, life, now)
                } else {
                    rollout_done(statefulset, life, now)
                        && statefulset.current_revision == statefulset.update_revision
                        && (!by_partition(statefulset)
                            || statefulset.partition >= statefulset.spec_replicas)
                }
            })
    }

    fn run(&mut self) -> Result<Stats, Violation> {
        let mut deadline = u64::MAX;
        let mut chaos_ended_at = 0;
        loop {
            if self.step == self.chaos_steps {
                self.end_chaos();
                chaos_ended_at = self.step;
                let pods: u64 = self
                    .group
                    .statefulsets
                    .iter()
                    .map(|statefulset| {
                        u64::from(
                            statefulset
                                .spec_replicas
                                .max(u32::try_from(statefulset.pods.len()).expect("few pods")),
                        ) + 1
                    })
                    .sum();
                deadline = self.step + 40 + 16 * pods;
            }
            if self.step < self.chaos_steps {
                self.chaos();
            }
            self.kubernetes();
            self.baton()?;
            self.stats.steps += 1;
            let now = instant(self.step);
            if self.step >= self.chaos_steps && self.converged(now) {
                let quiet = (self.planner)(&self.group, now);
                if !quiet.actions.is_empty() {
                    return Err(self.violation(
                        Property::QuietWhenDone,
                        format!("finished, yet the plan is {:?}", quiet.actions),
                    ));
                }
                self.stats.longest_convergence = self.step - chaos_ended_at;
                self.trace.note(self.step, || "converged".to_owned());
                return Ok(std::mem::take(&mut self.stats));
            }
            if self.step >= deadline {
                return Err(self.violation(
                    Property::Liveness,
                    format!(
                        "not finished {} steps after chaos stopped",
                        self.step - chaos_ended_at
                    ),
                ));
            }
            self.step += 1;
        }
    }
}

fn refresh_status(statefulset: &mut StatefulSetSnapshot) {
    // Like the StatefulSet controller: a terminating pod counts as ready while it says so.
    let ready = statefulset
        .pods
        .iter()
        .filter(|pod| pod.phase == PodPhase::Running && pod.ready)
        .count();
    statefulset.status_replicas = u32::try_from(statefulset.pods.len()).expect("few pods");
    statefulset.ready_replicas = u32::try_from(ready).expect("few pods");
}

/// One line per StatefulSet, for traces and violation reports.
fn describe(group: &GroupSnapshot) -> String {
    let mut text = String::new();
    for statefulset in &group.statefulsets {
        let _ = write!(
            text,
            "\n    {} [{} replicas, status {}/{} ready, current {:?}, update {:?}, {}, {:?}, minReady {}s]:",
            statefulset.name,
            statefulset.spec_replicas,
            statefulset.ready_replicas,
            statefulset.status_replicas,
            statefulset.current_revision,
            statefulset.update_revision,
            statefulset.update_strategy,
            statefulset.annotations,
            statefulset.min_ready_seconds,
        );
        let mut pods: Vec<&PodSnapshot> = statefulset.pods.iter().collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        for pod in pods {
            let _ = write!(
                text,
                " {}({},{:?}{}{}{})",
                pod.name,
                pod.revision.as_deref().unwrap_or("-"),
                pod.phase,
                if pod.ready { ",ready" } else { "" },
                if pod.terminating { ",terminating" } else { "" },
                pod.container_state
                    .as_deref()
                    .map(|state| format!(",{state}"))
                    .unwrap_or_default(),
            );
        }
    }
    text
}

// ---------------------------------------------------------------------------------------------
// Running many scenarios
// ---------------------------------------------------------------------------------------------

/// Runs the scenarios of `seeds` on all cores until one violates a property `wanted` accepts
/// (other violations end their scenario only); of those found, the lowest seed wins.
fn run_scenarios(
    planner: &Planner,
    seeds: Range<u64>,
    wanted: &(dyn Fn(Property) -> bool + Sync),
) -> Result<Stats, Violation> {
    sim::search(
        seeds,
        &|seed| Simulation::new(seed, planner, false).run(),
        &|violation: &Violation| wanted(violation.property),
        |violation| violation.seed,
    )
}

fn real_planner(group: &GroupSnapshot, now: Timestamp) -> Plan {
    plan(group, now)
}

#[test]
fn planner_keeps_compat_guarantees_in_random_scenarios() {
    if let Some(seed) = env_u64("SIM_SEED") {
        let (result, trace) = replay(seed, &real_planner);
        println!("{}", trace.join("\n"));
        if let Err(violation) = result {
            panic!("{violation}");
        }
        return;
    }
    let first = env_u64("SIM_FIRST_SEED").unwrap_or(0);
    let count = env_u64("SIM_SCENARIOS").unwrap_or(DEFAULT_SCENARIOS);
    let started = Instant::now();
    let stats = match run_scenarios(&real_planner, first..first + count, &|_| true) {
        Ok(stats) => stats,
        Err(violation) => panic!("{violation}"),
    };
    println!(
        "{} scenarios, {} steps, {} pod deletions ({} free replacements, {} past max-unavailable), {} pods released by partition, {} current revisions set, longest convergence {} steps, in {:.1?}; waits: {:?}",
        stats.scenarios,
        stats.steps,
        stats.deletions,
        stats.free_replacements,
        stats.free_past_budget,
        stats.releases,
        stats.current_revisions_set,
        stats.longest_convergence,
        started.elapsed(),
        stats.waits
    );
    assert_eq!(stats.scenarios, count);
    if count >= 10_000 {
        // Not vacuous: the scenarios drove real rollouts into every situation the planner
        // knows how to wait in.
        assert!(stats.deletions > count, "{stats:?}");
        // Broken pods were replaced, many where the budget was spent (the Go operator's hang).
        assert!(stats.free_replacements > count / 20, "{stats:?}");
        assert!(stats.free_past_budget > count / 50, "{stats:?}");
        assert!(stats.current_revisions_set > count / 2, "{stats:?}");
        // Partition rollouts ran too, and were interrupted by someone moving a partition.
        assert!(stats.releases > count / 2, "{stats:?}");
        // With max-rolling-members, several members rolled at once.
        assert!(stats.parallel_members > count / 100, "{stats:?}");
        // The adversary came, often asking for more members at once than the group allows.
        assert!(stats.newcomers > count / 10, "{stats:?}");
        assert!(stats.widening_newcomers > count / 40, "{stats:?}");
        for kind in [
            "NonOnDeleteMember",
            "MultipleNotReady",
            "MissingPods",
            "NotReady",
            "MinReadySeconds",
            "ExtraPods",
            "StatusNotReady",
            "MaxUnavailable",
            "NoUpdateRevision",
            "StatusBehindSpec",
            "Paused",
            "PartitionRolling",
            "PartitionMoved",
        ] {
            assert!(
                stats.waits.get(kind).copied().unwrap_or(0) > 0,
                "never waited for {kind}: {stats:?}"
            );
        }
    }
}

/// Runs one scenario and returns its trace too.
fn replay(seed: u64, planner: &Planner) -> (Result<Stats, Violation>, Vec<String>) {
    let mut simulation = Simulation::new(seed, planner, true);
    let result = simulation.run();
    (result, simulation.trace.lines.take().unwrap_or_default())
}

#[test]
fn replaying_a_seed_gives_the_same_scenario() {
    for seed in [7, 1234, 99_999] {
        let (first, first_trace) = replay(seed, &real_planner);
        let (second, second_trace) = replay(seed, &real_planner);
        assert!(first.is_ok() && second.is_ok());
        assert!(first_trace.len() > 3, "{first_trace:?}");
        assert_eq!(first_trace, second_trace);
    }
    let (_, other_trace) = replay(8, &real_planner);
    assert_ne!(replay(7, &real_planner).1, other_trace);
}

// ---------------------------------------------------------------------------------------------
// The checker is not vacuous: deliberately broken planners get caught
// ---------------------------------------------------------------------------------------------

fn assert_caught(planner: &Planner, property: Property) {
    match run_scenarios(planner, 0..BROKEN_PLANNER_SCENARIOS, &|found| {
        found == property
    }) {
        Ok(stats) => panic!(
            "a broken planner ran {} scenarios without violating {property}: it is not really checked",
            stats.scenarios
        ),
        Err(violation) => {
            assert_eq!(violation.property, property, "{violation}");
            let report = violation.to_string();
            assert!(
                report.contains(&format!("seed {}", violation.seed)),
                "{report}"
            );
            assert!(
                report.contains(&format!("at step {}", violation.step)),
                "{report}"
            );
            assert!(
                report.contains(&format!("SIM_SEED={}", violation.seed)),
                "{report}"
            );
            // Replaying the reported seed reproduces the violation at the same step.
            let (replayed, trace) = replay(violation.seed, planner);
            let replayed = replayed.expect_err("the replay must fail like the original");
            assert_eq!(
                (replayed.property, replayed.step),
                (property, violation.step)
            );
            assert!(!trace.is_empty());
        }
    }
}

fn with_each_statefulset(
    group: &GroupSnapshot,
    change: impl Fn(&mut StatefulSetSnapshot),
) -> GroupSnapshot {
    let mut changed = group.clone();
    changed.statefulsets.iter_mut().for_each(change);
    changed
}

#[test]
fn checker_catches_a_planner_that_ignores_max_unavailable() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let everything = with_each_statefulset(group, |statefulset| {
                statefulset
                    .annotations
                    .insert(MAX_UNAVAILABLE_ANNOTATION.to_owned(), "100%".to_owned());
            });
            plan(&everything, now)
        },
        Property::MaxUnavailable,
    );
}

#[test]
fn checker_catches_a_planner_that_rolls_two_zones_at_once() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let mut greedy = plan(group, now);
            let Some(Action::DeletePod { statefulset, .. }) = greedy.deletions().next().cloned()
            else {
                return greedy;
            };
            let other_outdated_pod = group
                .statefulsets
                .iter()
                .filter(|other| other.name != statefulset)
                .find_map(|other| {
                    let pod = other
                        .pods
                        .iter()
                        .find(|pod| !pod.terminating && pod.revision != other.update_revision)?;
                    Some(Action::DeletePod {
                        statefulset: other.name.clone(),
                        pod: pod.name.clone(),
                        uid: pod.uid.clone(),
                        unavailable: None,
                    })
                });
            greedy.actions.extend(other_outdated_pod);
            greedy
        },
        Property::OneZoneAtATime,
    );
}

/// The smallest `max-rolling-members` any member says, read as a planner that trusts it would.
fn smallest_max_rolling_said(group: &GroupSnapshot) -> Option<u32> {
    group
        .statefulsets
        .iter()
        .filter_map(|statefulset| {
            statefulset
                .annotations
                .get(MAX_ROLLING_MEMBERS_ANNOTATION)?
                .parse::<u32>()
                .ok()
        })
        .min()
}

#[test]
fn checker_catches_a_planner_that_lets_one_more_member_roll_than_allowed() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let allowed = smallest_max_rolling_said(group).unwrap_or(1);
            let generous = with_each_statefulset(group, |statefulset| {
                statefulset.annotations.insert(
                    MAX_ROLLING_MEMBERS_ANNOTATION.to_owned(),
                    (allowed + 1).to_string(),
                );
            });
            plan(&generous, now)
        },
        Property::OthersFullyReady,
    );
}

#[test]
fn checker_catches_a_planner_that_lets_a_newcomer_widen_the_group() {
    // Trusts whoever says a max-rolling-members: the smallest among the members that carry
    // one, as if every member said it (a lone newcomer's "1000" rolls every zone at once).
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let said = smallest_max_rolling_said(group);
            let Some(said) = said else {
                return plan(group, now);
            };
            let trusting = with_each_statefulset(group, |statefulset| {
                statefulset
                    .annotations
                    .insert(MAX_ROLLING_MEMBERS_ANNOTATION.to_owned(), said.to_string());
            });
            plan(&trusting, now)
        },
        Property::NewcomersSpeakForNobody,
    );
}

#[test]
fn checker_catches_a_planner_blind_to_other_zones() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Plans each StatefulSet as if it were alone in its group.
            for statefulset in &group.statefulsets {
                let alone = GroupSnapshot {
                    name: group.name.clone(),
                    statefulsets: vec![statefulset.clone()],
                    reach: Default::default(),
                };
                let plan = plan(&alone, now);
                if plan.deletions().next().is_some() {
                    return plan;
                }
            }
            plan(group, now)
        },
        Property::OthersFullyReady,
    );
}

#[test]
fn checker_catches_a_planner_that_judges_statuses_behind_their_spec() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let believed = with_each_statefulset(group, |statefulset| {
                statefulset.status_lag = None;
            });
            plan(&believed, now)
        },
        Property::NothingOnAStatusBehindItsSpec,
    );
}

#[test]
fn checker_catches_a_planner_that_ignores_the_update_strategy() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let all_on_delete = with_each_statefulset(group, |statefulset| {
                statefulset.update_strategy = UpdateStrategy::OnDelete;
            });
            plan(&all_on_delete, now)
        },
        Property::NonOnDeleteUntouched,
    );
}

#[test]
fn checker_catches_a_planner_that_never_finishes() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let mut plan = plan(group, now);
            plan.actions
                .retain(|action| !matches!(action, Action::SetCurrentRevision { .. }));
            plan
        },
        Property::Liveness,
    );
}

#[test]
fn checker_catches_a_planner_that_deletes_terminating_pods() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let nothing_terminating = with_each_statefulset(group, |statefulset| {
                statefulset
                    .pods
                    .iter_mut()
                    .for_each(|pod| pod.terminating = false);
            });
            plan(&nothing_terminating, now)
        },
        Property::NoTerminatingDeleted,
    );
}

#[test]
fn checker_catches_a_planner_that_ignores_pauses() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let unpaused = with_each_statefulset(group, |statefulset| {
                statefulset.annotations.remove(ROLLOUT_PAUSED_ANNOTATION);
            });
            plan(&unpaused, now)
        },
        Property::NoPausedDeleted,
    );
}

#[test]
fn checker_catches_a_planner_that_marks_revisions_early() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let mut eager = plan(group, now);
            for statefulset in &group.statefulsets {
                if let Some(revision) = &statefulset.update_revision
                    && statefulset.current_revision.as_ref() != Some(revision)
                    && statefulset
                        .pods
                        .iter()
                        .any(|pod| pod.revision.as_ref() != Some(revision))
                {
                    eager.actions.push(Action::SetCurrentRevision {
                        statefulset: statefulset.name.clone(),
                        revision: revision.clone(),
                    });
                }
            }
            eager
        },
        Property::CurrentRevisionWhenDone,
    );
}

// --- Free replacement of unavailable outdated pods ---

/// The deletion of an outdated, not terminating pod, as a broken planner would plan it.
fn delete(statefulset: &StatefulSetSnapshot, pod: &PodSnapshot, free: bool) -> Action {
    Action::DeletePod {
        statefulset: statefulset.name.clone(),
        pod: pod.name.clone(),
        uid: pod.uid.clone(),
        unavailable: free.then_some(Unavailable::NotReady),
    }
}

fn deletes(plan: &Plan, pod: &PodSnapshot) -> bool {
    plan.deletions()
        .any(|action| matches!(action, Action::DeletePod { uid, .. } if *uid == pod.uid))
}

/// Outdated pods of `statefulset` a planner could delete: not terminating, not yet in `plan`.
fn candidates<'a>(
    statefulset: &'a StatefulSetSnapshot,
    plan: &Plan,
) -> impl Iterator<Item = &'a PodSnapshot> {
    statefulset.pods.iter().filter(move |pod| {
        !pod.terminating && pod.revision != statefulset.update_revision && !deletes(plan, pod)
    })
}

#[test]
fn checker_catches_a_planner_that_never_replaces_unavailable_pods() {
    // The Go operator's behaviour: a crash-looping old pod holds the group.
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let mut waiting = plan(group, now);
            waiting.actions.retain(|action| {
                !matches!(
                    action,
                    Action::DeletePod {
                        unavailable: Some(_),
                        ..
                    }
                )
            });
            waiting
        },
        Property::Liveness,
    );
}

#[test]
fn checker_catches_a_planner_that_deletes_available_pods_for_free() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Judges a whole degraded zone down: every outdated pod of a member with an
            // unavailable pod looks not ready to it.
            let degraded = with_each_statefulset(group, |statefulset| {
                let min_ready_seconds = statefulset.min_ready_seconds;
                if statefulset
                    .pods
                    .iter()
                    .any(|pod| !is_available(pod, min_ready_seconds, now))
                {
                    let update_revision = statefulset.update_revision.clone();
                    for pod in &mut statefulset.pods {
                        if pod.revision != update_revision {
                            pod.ready = false;
                        }
                    }
                }
            });
            plan(&degraded, now)
        },
        Property::FreeReplacementCostsNothing,
    );
}

#[test]
fn checker_catches_a_planner_that_replaces_pods_ready_too_recently_for_free() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Takes a pod Ready for less than minReadySeconds for one that is down.
            let recent = with_each_statefulset(group, |statefulset| {
                let min_ready_seconds = statefulset.min_ready_seconds;
                for pod in &mut statefulset.pods {
                    if pod.ready && !is_available(pod, min_ready_seconds, now) {
                        pod.ready = false;
                    }
                }
            });
            plan(&recent, now)
        },
        Property::FreeReplacementCostsNothing,
    );
}

#[test]
fn checker_catches_a_planner_whose_free_replacements_give_budget_back() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Counts a replaced pod's place as free again: one more available pod per free
            // replacement.
            let mut greedy = plan(group, now);
            let mut extra = Vec::new();
            for statefulset in &group.statefulsets {
                let free = greedy
                    .deletions()
                    .filter(|action| match action {
                        Action::DeletePod {
                            statefulset: name,
                            unavailable,
                            ..
                        } => *name == statefulset.name && unavailable.is_some(),
                        Action::SetCurrentRevision { .. } | Action::SetPartition { .. } => false,
                    })
                    .count();
                let min_ready_seconds = statefulset.min_ready_seconds;
                extra.extend(
                    candidates(statefulset, &greedy)
                        .filter(|pod| is_available(pod, min_ready_seconds, now))
                        .take(free)
                        .map(|pod| delete(statefulset, pod, false)),
                );
            }
            greedy.actions.extend(extra);
            greedy
        },
        Property::MaxUnavailable,
    );
}

#[test]
fn checker_catches_a_planner_that_spreads_an_unproven_version() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Replaces down pods in every not-ready zone, even while a new pod is not ready.
            let mut eager = plan(group, now);
            if eager.actions.is_empty()
                && eager.waiting.as_ref().map(WaitReason::kind) == Some("MultipleNotReady")
            {
                let mut free = Vec::new();
                for statefulset in &group.statefulsets {
                    let min_ready_seconds = statefulset.min_ready_seconds;
                    free.extend(
                        candidates(statefulset, &eager)
                            .filter(|pod| !is_available(pod, min_ready_seconds, now))
                            .filter(|pod| {
                                pod_ordinal(&statefulset.name, &pod.name)
                                    .is_some_and(|ordinal| wanted(statefulset, ordinal))
                            })
                            .map(|pod| delete(statefulset, pod, true)),
                    );
                }
                eager.actions.extend(free);
            }
            eager
        },
        Property::OthersFullyReady,
    );
}

// ---- Rolled by partition ----

#[test]
fn checker_catches_a_planner_that_fights_a_moved_partition() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Takes whatever partition it finds as its own: lowers it again after a re-apply.
            let adopted = with_each_statefulset(group, |statefulset| {
                statefulset.annotations.remove(PARTITION_ANNOTATION);
            });
            plan(&adopted, now)
        },
        Property::PartitionMovedUntouched,
    );
}

#[test]
fn checker_catches_a_planner_that_deletes_below_the_partition() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Replaces an unavailable old pod without lowering the partition to it.
            let mut planned = plan(group, now);
            if planned
                .deletions()
                .any(|action| matches!(action, Action::DeletePod { .. }))
            {
                planned
                    .actions
                    .retain(|action| !matches!(action, Action::SetPartition { .. }));
            }
            planned
        },
        Property::ReplacedAtUpdateRevision,
    );
}

#[test]
fn checker_catches_a_planner_that_releases_while_another_zone_is_down() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Plans each member rolled by partition as if it were alone in its group.
            for statefulset in &group.statefulsets {
                let alone = GroupSnapshot {
                    name: group.name.clone(),
                    statefulsets: vec![statefulset.clone()],
                    reach: Default::default(),
                };
                let planned = plan(&alone, now);
                let releases = planned.actions.iter().any(|action| {
                    matches!(action, Action::SetPartition { releases, .. } if !releases.is_empty())
                });
                if releases {
                    return planned;
                }
            }
            plan(group, now)
        },
        Property::OthersFullyReady,
    );
}

#[test]
fn checker_catches_a_planner_that_releases_past_max_unavailable_under_a_parallel_controller() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Takes every controller for `OrderedReady`: releases a fix with available pods.
            let ordered =
                with_each_statefulset(group, |statefulset| statefulset.ordered_ready = true);
            plan(&ordered, now)
        },
        Property::MaxUnavailable,
    );
}

#[test]
fn checker_catches_a_planner_that_forgets_the_partition_mid_rollout() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            // Believes released pods are done as soon as they are released.
            let forgetful = with_each_statefulset(group, |statefulset| {
                if statefulset.update_strategy == UpdateStrategy::RollingUpdate {
                    statefulset.partition = statefulset.spec_replicas;
                    statefulset.annotations.remove(PARTITION_ANNOTATION);
                }
            });
            plan(&forgetful, now)
        },
        Property::OneZoneAtATime,
    );
}

#[test]
fn checker_catches_a_planner_that_trusts_a_member_it_cannot_read() {
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let mut trusting = group.clone();
            for statefulset in &mut trusting.statefulsets {
                statefulset.unreachable = None;
            }
            plan(&trusting, now)
        },
        Property::NothingWhileUnreachable,
    );
}

// --- What every action names, and a finished group left alone ---

#[test]
fn checker_catches_a_planner_that_names_a_pod_by_a_uid_it_no_longer_has() {
    // A planner acting on a stale read: the pod it means was recreated under a new uid.
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let mut plan = plan(group, now);
            for action in &mut plan.actions {
                if let Action::DeletePod { uid, .. } = action {
                    uid.push_str("-before-it-was-recreated");
                }
            }
            plan
        },
        Property::KnownPodsOnly,
    );
}

#[test]
fn checker_catches_a_planner_that_deletes_a_pod_already_at_the_update_revision() {
    // Beside each deletion, one more of the same member's pods: one already updated.
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let mut plan = plan(group, now);
            let mut updated = Vec::new();
            for action in plan.deletions() {
                let Some(statefulset) = group
                    .statefulsets
                    .iter()
                    .find(|member| member.name == action.statefulset())
                else {
                    continue;
                };
                if let Some(pod) = statefulset.pods.iter().find(|pod| {
                    !pod.terminating
                        && pod.revision.is_some()
                        && pod.revision == statefulset.update_revision
                }) {
                    updated.push(delete(statefulset, pod, false));
                }
            }
            plan.actions.extend(updated);
            plan
        },
        Property::NoUpToDateDeleted,
    );
}

#[test]
fn checker_catches_a_planner_that_keeps_acting_on_a_finished_group() {
    // Once nothing is left to do, it marks the first member's revision again and again.
    assert_caught(
        &|group: &GroupSnapshot, now| {
            let mut plan = plan(group, now);
            if plan.actions.is_empty()
                && plan.waiting.is_none()
                && let Some(first) = group.statefulsets.first()
                && let Some(revision) = &first.update_revision
            {
                plan.actions.push(Action::SetCurrentRevision {
                    statefulset: first.name.clone(),
                    revision: revision.clone(),
                });
            }
            plan
        },
        Property::QuietWhenDone,
    );
}
