//! Simulation proof of the scaling pass: its guarantees, checked at every replica change of
//! many random scenarios.
//!
//! A deterministic simulator plays everything around the pass ([`pass::decide`]): a group of
//! two or three zones, the first mirroring a reference resource (half the time with delayed
//! downscale), the others following it or each other with a min-time between zones' downscales
//! (some scaling up only once their leader is ready). An autoscaler moves the reference's
//! replicas; the StatefulSet controller creates and removes one pod per step, new pods becoming
//! ready a step or two later; each pod's delayed-downscale endpoint remembers since when it
//! prepared (a POST starts it, a DELETE cancels it, a removed pod forgets it) and sometimes
//! fails; the reference is sometimes unreadable; someone sometimes writes a malformed zone
//! tracker entry or a force-replicas; a `/scale` write is sometimes stale. Every downscale that
//! happens is recorded in the zone tracker, as prepare-downscale and the claims' follow-up do.
//! The pass's effects are carried out in the [`Sequence`] the controller runs them in, each
//! answered with its outcome, and a delayed downscale concluded from the pods' answers with
//! [`pass::conclude`].
//!
//! Checked at every replica change baton makes:
//! - (a) never below what the StatefulSet's rule asks: the reference's replicas it mirrors,
//!   its leader's replicas, or its force-replicas, as the pass read them;
//! - (b) never a follower's downscale inside its min-time after another zone's downscale (by the
//!   simulator's own record of when each zone went down);
//! - (c) a delayed downscale removes only pods that said, in answer to the prepare call, that
//!   they prepared at least the delay ago (by the simulator's own record of each pod);
//! - (d) nothing is written and no pod is called while a member cluster of the group cannot be
//!   read (the zones are then spread over clusters, and one of them is sometimes out for a few
//!   steps): a pass on a partial view only tells.
//!
//! Environment (plain `cargo test` runs 1,000 scenarios, seeds 0..1000):
//! - `SIM_SCENARIOS=N` runs N scenarios; `SIM_FIRST_SEED=S` starts at seed S;
//! - `SIM_SEED=S` replays exactly scenario S and prints its trace (add `-- --nocapture`).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/sim.rs"]
#[allow(dead_code, reason = "its rollout pass is the rollout simulations'")]
mod sim;
use sim::env_u64;

use baton_core::annotations::scaling::{MirrorReference, mirror_reference};
use baton_core::annotations::{
    DELAYED_DOWNSCALE_ANNOTATION, DOWNSCALE_LEADER_ANNOTATION, FORCE_REPLICAS_ANNOTATION,
    MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, MIRROR_REPLICAS_API_VERSION_ANNOTATION,
    MIRROR_REPLICAS_KIND_ANNOTATION, MIRROR_REPLICAS_NAME_ANNOTATION,
    PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION, UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION,
};
use baton_core::downscale_history::{Records, ZoneTracker, tracker_value};
use baton_core::ledger::Ledger;
use baton_core::pod_address::PodAddressing;
use baton_core::pods::CachedPod;
use baton_core::scaling::delayed_downscale::{self, DelayedDownscaleDecision};
use baton_core::scaling::pass::{
    self, DelayedDecider, Effect, Outcome, Planner, PodCalls, Read, Sequence,
};
use baton_core::scaling::plan::{ReferenceScale, ScalingPlan, ScalingSnapshot, Unread, plan};
use baton_core::scaling::snapshot::ReferenceScales;
use baton_core::statefulset::PodNames;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

const DEFAULT_SCENARIOS: u64 = 1_000;
/// How far a broken pass may get before the checker must have caught it.
const BROKEN_PASS_SCENARIOS: u64 = 1_000;
const STEPS: u64 = 150;
const NAMESPACE: &str = "simulation";
const REFERENCE: &str = "ingester";

// ---------------------------------------------------------------------------------------------
// Properties and violations
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Property {
    NeverBelowWanted,
    NoDownscaleInsideMinTime,
    DelayedOnlyWhenPrepared,
    NothingOnAPartialView,
}

impl fmt::Display for Property {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Self::NeverBelowWanted => "(a) never below what mirroring or the leader asks",
            Self::NoDownscaleInsideMinTime => "(b) never a downscale inside min-time",
            Self::DelayedOnlyWhenPrepared => {
                "(c) a delayed downscale only after its pods said ready to go"
            }
            Self::NothingOnAPartialView => {
                "(d) nothing written while a member cluster cannot be read"
            }
        };
        formatter.write_str(text)
    }
}

#[derive(Debug)]
struct Violation {
    property: Property,
    seed: u64,
    step: u64,
    details: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "scaling simulation: property {} violated in scenario seed {} at step {}:\n{}\n\
             replay with: SIM_SEED={} cargo test -p baton-core --test scaling_simulation \
             -- --nocapture",
            self.property, self.seed, self.step, self.details, self.seed
        )
    }
}

/// What the scenarios did, so that a pass of the checker is known not to be vacuous.
#[derive(Debug, Default, Clone)]
struct Stats {
    scenarios: u64,
    upscales: u64,
    follower_downscales: u64,
    mirrored_downscales: u64,
    delayed_downscales: u64,
    partial_delayed_downscales: u64,
    repaired_tracker_entries: u64,
    stale_writes: u64,
    /// Passes over a group with a member cluster that could not be read.
    unread_passes: u64,
    /// Event reasons told, by reason.
    told: BTreeMap<String, u64>,
}

impl sim::Tally for Stats {
    fn count_ended_scenario(&mut self) {
        self.scenarios += 1;
    }

    fn merge(&mut self, other: &Self) {
        self.scenarios += other.scenarios;
        self.upscales += other.upscales;
        self.follower_downscales += other.follower_downscales;
        self.mirrored_downscales += other.mirrored_downscales;
        self.delayed_downscales += other.delayed_downscales;
        self.partial_delayed_downscales += other.partial_delayed_downscales;
        self.repaired_tracker_entries += other.repaired_tracker_entries;
        self.stale_writes += other.stale_writes;
        self.unread_passes += other.unread_passes;
        for (reason, count) in &other.told {
            *self.told.entry(reason.clone()).or_default() += count;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The simulated world
// ---------------------------------------------------------------------------------------------

/// A pod of a zone, by index.
#[derive(Debug, Clone)]
struct SimPod {
    /// Unique per pod created: a pod recreated at an index is another pod.
    uid: u64,
    ready: bool,
    /// Steps until it becomes ready.
    starting: u32,
    /// Since when it prepared for delayed downscale (its endpoint's memory).
    prepared_at: Option<Timestamp>,
    /// Its endpoint fails for this many more steps.
    failing: u32,
}

#[derive(Debug, Clone)]
struct Zone {
    name: String,
    replicas: i32,
    pods: Vec<SimPod>,
    leader: Option<String>,
    min_time: Option<Duration>,
    upscale_only_when_leader_ready: bool,
    force_replicas: Option<i32>,
    mirrors: bool,
    delay: Option<Duration>,
    resource_version: u64,
}

/// The planner a simulated pass runs.
type SimPlanner = dyn Fn(&ScalingSnapshot, Timestamp) -> ScalingPlan + Sync;
/// The delayed-downscale decision a simulated pass concludes with.
type SimDecider = dyn Fn(
        PodNames<'_>,
        i32,
        i32,
        Duration,
        &BTreeMap<i32, Result<Timestamp, String>>,
        Timestamp,
    ) -> DelayedDownscaleDecision
    + Sync;

/// Whose pass the simulation runs: the real one, or a broken one the checker must catch.
struct Scaling<'a> {
    planner: &'a SimPlanner,
    decider: &'a SimDecider,
}

const REAL: Scaling<'static> = Scaling {
    planner: &plan,
    decider: &delayed_downscale::decide,
};

struct Simulation<'a> {
    seed: u64,
    rng: ChaCha8Rng,
    scaling: &'a Scaling<'a>,
    step: u64,
    zones: Vec<Zone>,
    /// The reference's `spec.replicas` and `status.replicas`.
    reference: (i32, Option<i32>),
    reference_unreadable: u32,
    /// A member cluster cannot be read for this many more steps.
    cluster_unread: u32,
    tracker: ZoneTracker,
    /// When each zone last went down, by the simulator's own record.
    downscaled_at: BTreeMap<String, Timestamp>,
    next_uid: u64,
    stats: Stats,
    trace: Option<Vec<String>>,
}

fn instant(step: u64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + i64::try_from(step).expect("few steps") * 60)
        .expect("a time")
}

fn minutes(count: u64) -> Duration {
    Duration::from_secs(count * 60)
}

impl<'a> Simulation<'a> {
    fn new(seed: u64, scaling: &'a Scaling<'a>, traced: bool) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let start = rng.random_range(0..6);
        let delay = rng
            .random_bool(0.5)
            .then(|| minutes([2, 5, 10][rng.random_range(0..3)]));
        let mut zones = vec![Zone {
            name: "zone-a".into(),
            replicas: start,
            pods: Vec::new(),
            leader: None,
            min_time: None,
            upscale_only_when_leader_ready: false,
            force_replicas: None,
            mirrors: true,
            delay,
            resource_version: 1,
        }];
        let followers = rng.random_range(1..=2);
        for index in 0..followers {
            let leader = if index == 1 && rng.random_bool(0.5) {
                "zone-b"
            } else {
                "zone-a"
            };
            zones.push(Zone {
                name: ["zone-b", "zone-c"][index].into(),
                replicas: rng.random_range(0..6),
                pods: Vec::new(),
                leader: Some(leader.into()),
                min_time: Some(minutes([3, 10, 30][rng.random_range(0..3)])),
                upscale_only_when_leader_ready: rng.random_bool(0.3),
                force_replicas: None,
                mirrors: false,
                delay: None,
                resource_version: 1,
            });
        }
        let mut simulation = Self {
            seed,
            rng,
            scaling,
            step: 0,
            zones,
            reference: (start, None),
            reference_unreadable: 0,
            cluster_unread: 0,
            tracker: ZoneTracker {
                resource_version: Some("1".into()),
                data: BTreeMap::new(),
            },
            downscaled_at: BTreeMap::new(),
            next_uid: 0,
            stats: Stats {
                scenarios: 1,
                ..Stats::default()
            },
            trace: traced.then(Vec::new),
        };
        let group: Vec<String> = simulation
            .zones
            .iter()
            .map(|zone| {
                format!(
                    "{} ({} replicas, leader {:?}, min-time {:?}, delay {:?}, upscale only when ready {})",
                    zone.name,
                    zone.replicas,
                    zone.leader,
                    zone.min_time,
                    zone.delay,
                    zone.upscale_only_when_leader_ready
                )
            })
            .collect();
        simulation.note(|| format!("the group: {}", group.join("; ")));
        for zone in 0..simulation.zones.len() {
            let replicas = simulation.zones[zone].replicas;
            for _ in 0..replicas {
                let pod = simulation.new_pod(true);
                simulation.zones[zone].pods.push(pod);
            }
        }
        simulation
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        let step = self.step;
        if let Some(trace) = &mut self.trace {
            trace.push(format!("[{step}] {}", line()));
        }
    }

    fn now(&self) -> Timestamp {
        instant(self.step)
    }

    fn new_pod(&mut self, ready: bool) -> SimPod {
        self.next_uid += 1;
        SimPod {
            uid: self.next_uid,
            ready,
            starting: if ready {
                0
            } else {
                self.rng.random_range(1..=2)
            },
            prepared_at: None,
            failing: 0,
        }
    }

    fn zone(&self, name: &str) -> Option<&Zone> {
        self.zones.iter().find(|zone| zone.name == name)
    }

    /// The autoscaler, the people and the failures of the step.
    fn chaos(&mut self) {
        if self.rng.random_bool(0.12) {
            let change = self.rng.random_range(-3..=3);
            let wanted = (self.reference.0 + change).clamp(0, 8);
            self.note(|| format!("the autoscaler wants {wanted}"));
            self.reference.0 = wanted;
        }
        if self.reference_unreadable > 0 {
            self.reference_unreadable -= 1;
        } else if self.rng.random_bool(0.02) {
            self.reference_unreadable = self.rng.random_range(1..=4);
            self.note(|| "the reference cannot be read".into());
        }
        if self.cluster_unread > 0 {
            self.cluster_unread -= 1;
        } else if self.rng.random_bool(0.03) {
            self.cluster_unread = self.rng.random_range(1..=4);
            self.note(|| "cluster-b cannot be read".into());
        }
        if self.rng.random_bool(0.01) {
            let zone = self.rng.random_range(0..self.zones.len());
            let name = self.zones[zone].name.clone();
            self.note(|| format!("someone writes a malformed tracker entry for {name}"));
            self.tracker
                .data
                .insert(name, "{\"lastDownscaled\":\"soon\"}".into());
            self.bump_tracker();
        }
        if self.rng.random_bool(0.01) {
            let zone = self.rng.random_range(0..self.zones.len());
            let forced = self
                .rng
                .random_bool(0.6)
                .then(|| self.rng.random_range(0..6));
            self.zones[zone].force_replicas = forced;
            self.zones[zone].resource_version += 1;
            let name = self.zones[zone].name.clone();
            self.note(|| format!("someone sets {name}'s force-replicas to {forced:?}"));
        }
        for zone in &mut self.zones {
            for pod in &mut zone.pods {
                if pod.failing > 0 {
                    pod.failing -= 1;
                } else if self.rng.random_bool(0.01) {
                    pod.failing = self.rng.random_range(1..=5);
                }
            }
        }
    }

    fn bump_tracker(&mut self) {
        let version: u64 = self
            .tracker
            .resource_version
            .as_deref()
            .and_then(|version| version.parse().ok())
            .unwrap_or(0);
        self.tracker.resource_version = Some((version + 1).to_string());
    }

    /// The StatefulSet controller and the kubelet: one pod created or removed per zone and
    /// step, new pods ready a step or two later.
    fn kubernetes(&mut self) {
        for zone in 0..self.zones.len() {
            let wanted = usize::try_from(self.zones[zone].replicas).expect("not negative");
            let have = self.zones[zone].pods.len();
            if have < wanted {
                let pod = self.new_pod(false);
                self.zones[zone].pods.push(pod);
            } else if have > wanted {
                self.zones[zone].pods.pop();
            }
            for pod in &mut self.zones[zone].pods {
                if !pod.ready {
                    pod.starting = pod.starting.saturating_sub(1);
                    pod.ready = pod.starting == 0;
                }
            }
        }
    }

    fn statefulset(&self, zone: &Zone) -> StatefulSet {
        let mut annotations = BTreeMap::new();
        let mut labels = BTreeMap::from([("rollout-group".to_owned(), "ingester".to_owned())]);
        if let Some(leader) = &zone.leader {
            annotations.insert(DOWNSCALE_LEADER_ANNOTATION, leader.clone());
        }
        if zone.upscale_only_when_leader_ready {
            annotations.insert(UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION, "true".into());
        }
        if let Some(forced) = zone.force_replicas {
            annotations.insert(FORCE_REPLICAS_ANNOTATION, forced.to_string());
        }
        if zone.mirrors {
            annotations.insert(MIRROR_REPLICAS_NAME_ANNOTATION, REFERENCE.into());
            annotations.insert(MIRROR_REPLICAS_KIND_ANNOTATION, "ReplicaTemplate".into());
            annotations.insert(
                MIRROR_REPLICAS_API_VERSION_ANNOTATION,
                "rollout-operator.grafana.com/v1".into(),
            );
        }
        if let Some(delay) = zone.delay {
            annotations.insert(
                DELAYED_DOWNSCALE_ANNOTATION,
                format!("{}m", delay.as_secs() / 60),
            );
            annotations.insert(
                PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION,
                "http://pod:8080/prepare-delayed-downscale".into(),
            );
        }
        if let Some(min_time) = zone.min_time {
            labels.insert(
                MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL.to_owned(),
                format!("{}m", min_time.as_secs() / 60),
            );
        }
        let ready = zone.pods.iter().filter(|pod| pod.ready).count();
        let count = |count: usize| i32::try_from(count).expect("few pods");
        StatefulSet {
            metadata: ObjectMeta {
                name: Some(zone.name.clone()),
                namespace: Some(NAMESPACE.to_owned()),
                uid: Some(format!("uid-{}", zone.name)),
                generation: Some(1),
                resource_version: Some(zone.resource_version.to_string()),
                labels: Some(labels),
                annotations: Some(
                    annotations
                        .into_iter()
                        .map(|(key, value)| (key.to_owned(), value))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(zone.replicas),
                service_name: Some(zone.name.clone()),
                selector: LabelSelector {
                    match_labels: Some(BTreeMap::from([("zone".to_owned(), zone.name.clone())])),
                    match_expressions: None,
                },
                ..StatefulSetSpec::default()
            }),
            status: Some(StatefulSetStatus {
                replicas: count(zone.pods.len()),
                ready_replicas: Some(count(ready)),
                ..StatefulSetStatus::default()
            }),
        }
    }

    fn pods(&self) -> Vec<Arc<CachedPod>> {
        let mut pods = Vec::new();
        for zone in &self.zones {
            for (index, pod) in zone.pods.iter().enumerate() {
                let pod = Pod {
                    metadata: ObjectMeta {
                        name: Some(format!("{}-{index}", zone.name)),
                        namespace: Some(NAMESPACE.to_owned()),
                        uid: Some(format!("pod-{}", pod.uid)),
                        labels: Some(BTreeMap::from([("zone".to_owned(), zone.name.clone())])),
                        owner_references: Some(vec![OwnerReference {
                            api_version: "apps/v1".into(),
                            kind: "StatefulSet".into(),
                            name: zone.name.clone(),
                            uid: format!("uid-{}", zone.name),
                            controller: Some(true),
                            ..OwnerReference::default()
                        }]),
                        ..ObjectMeta::default()
                    },
                    spec: None,
                    status: Some(PodStatus {
                        pod_ip: Some(format!("10.0.0.{}", pod.uid % 250)),
                        ..PodStatus::default()
                    }),
                };
                pods.push(Arc::new(CachedPod::of(&pod)));
            }
        }
        pods
    }

    fn scales(&self, statefulsets: &[Arc<StatefulSet>]) -> ReferenceScales {
        let mut scales: ReferenceScales = Vec::new();
        for statefulset in statefulsets {
            let annotations = statefulset.metadata.annotations.clone().unwrap_or_default();
            if let Ok(Some(parsed)) = mirror_reference(&annotations) {
                let scale = if self.reference_unreadable > 0 {
                    Err("the API server is unavailable".to_owned())
                } else {
                    Ok(ReferenceScale {
                        spec_replicas: self.reference.0,
                        status_replicas: self.reference.1,
                    })
                };
                let reference: MirrorReference = parsed.value;
                if !scales.iter().any(|(read, _)| *read == reference) {
                    scales.push((reference, scale));
                }
            }
        }
        scales
    }

    fn violation(&self, property: Property, details: String) -> Violation {
        Violation {
            property,
            seed: self.seed,
            step: self.step,
            details,
        }
    }

    /// What `zone`'s rule asks as the checker reads it: force-replicas, else the reference's
    /// replicas or the leader's (none when it cannot be read).
    fn wanted(&self, zone: &Zone) -> Option<i32> {
        if let Some(forced) = zone.force_replicas {
            return Some(forced);
        }
        if zone.mirrors {
            return (self.reference_unreadable == 0).then_some(self.reference.0);
        }
        Some(self.zone(zone.leader.as_deref()?)?.replicas)
    }

    /// Checks a replica change of `name` from `from` to `to` before it is applied.
    fn check(&self, name: &str, from: i32, to: i32) -> Result<(), Violation> {
        let zone = self
            .zone(name)
            .expect("baton scales the group's zones only");
        let now = self.now();
        if let Some(wanted) = self.wanted(zone)
            && to < wanted
        {
            return Err(self.violation(
                Property::NeverBelowWanted,
                format!("{name} set to {to} (from {from}), its rule asks for {wanted}"),
            ));
        }
        if to >= from {
            return Ok(());
        }
        if let (Some(_), Some(min_time)) = (&zone.leader, zone.min_time) {
            let min_time = SignedDuration::try_from(min_time).expect("minutes");
            for (other, at) in &self.downscaled_at {
                if other != name && *at + min_time > now {
                    return Err(self.violation(
                        Property::NoDownscaleInsideMinTime,
                        format!(
                            "{name} goes down from {from} to {to} at {now}; {other} went down at {at}, min-time {min_time:#}"
                        ),
                    ));
                }
            }
        }
        if let Some(delay) = zone.delay {
            let delay = SignedDuration::try_from(delay).expect("minutes");
            for index in to..from {
                let pod = usize::try_from(index)
                    .ok()
                    .and_then(|index| zone.pods.get(index));
                let prepared = pod.and_then(|pod| pod.prepared_at);
                if prepared.is_none_or(|at| at + delay > now) {
                    return Err(self.violation(
                        Property::DelayedOnlyWhenPrepared,
                        format!(
                            "{name} goes down from {from} to {to} at {now}; its pod {index} prepared at {prepared:?}, delay {delay:#}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Applies a replica change that was checked; `Stale` now and then, as a cache behind.
    fn set_replicas(&mut self, name: &str, from: i32, to: i32) -> Result<Outcome, Violation> {
        if self.rng.random_bool(0.03) {
            self.stats.stale_writes += 1;
            self.note(|| format!("scaling {name} to {to} is stale"));
            return Ok(Outcome::Stale);
        }
        self.check(name, from, to)?;
        let now = self.now();
        let zone = self
            .zones
            .iter()
            .position(|zone| zone.name == name)
            .expect("checked");
        let (mirrors, delayed, follows) = {
            let zone = &self.zones[zone];
            (zone.mirrors, zone.delay.is_some(), zone.leader.is_some())
        };
        self.zones[zone].replicas = to;
        self.zones[zone].resource_version += 1;
        self.note(|| format!("{name} scaled from {from} to {to}"));
        if to > from {
            self.stats.upscales += 1;
        } else {
            // Recorded as prepare-downscale's claim and its follow-up record it.
            self.downscaled_at.insert(name.to_owned(), now);
            self.tracker
                .data
                .insert(name.to_owned(), tracker_value(now));
            self.bump_tracker();
            match (follows, mirrors, delayed) {
                (true, _, _) => self.stats.follower_downscales += 1,
                (_, true, false) => self.stats.mirrored_downscales += 1,
                (_, _, true) => self.stats.delayed_downscales += 1,
                _ => {}
            }
        }
        Ok(Outcome::Done)
    }

    /// The pass of this step, its effects carried out as the controller does.
    fn baton(&mut self) -> Result<(), Violation> {
        let statefulsets: Vec<Arc<StatefulSet>> = self
            .zones
            .iter()
            .map(|zone| Arc::new(self.statefulset(zone)))
            .collect();
        let scales = self.scales(&statefulsets);
        let pods = self.pods();
        let ledger = Ledger::default();
        let tracker = self.tracker.clone();
        let now = self.now();
        let unread: Vec<Unread> = (self.cluster_unread > 0)
            .then(|| Unread {
                cluster: "cluster-b".into(),
                why: "watching its pods failed".into(),
            })
            .into_iter()
            .collect();
        if !unread.is_empty() {
            self.stats.unread_passes += 1;
        }
        let read = Read {
            group: "ingester",
            statefulsets: &statefulsets,
            scales: &scales,
            pods: &pods,
            records: Records {
                ledger: &ledger,
                tracker: &tracker,
                claim_grace: minutes(5),
            },
            tracker: "rollout-operator-zone-tracker",
            calls: PodCalls {
                addressing: PodAddressing::Ip,
                cluster_domain: "cluster.local",
                namespace: NAMESPACE,
            },
            unread: &unread,
            now,
        };
        let planner: &Planner<'_> = self.scaling.planner;
        let decided = pass::decide_planned_by(&read, planner);
        let mut sequence = Sequence::new(decided);
        while let Some(effect) = sequence.next_effect() {
            if !unread.is_empty() && effect.needs_term() {
                return Err(self.violation(
                    Property::NothingOnAPartialView,
                    format!("{effect:?} while cluster-b cannot be read"),
                ));
            }
            let outcome = match &effect {
                Effect::Tell { explanation, .. } => {
                    *self
                        .stats
                        .told
                        .entry(explanation.reason.clone())
                        .or_default() += 1;
                    Outcome::Done
                }
                Effect::RepairTrackerEntry { statefulset, at } => {
                    self.stats.repaired_tracker_entries += 1;
                    self.tracker
                        .data
                        .insert(statefulset.clone(), tracker_value(*at));
                    self.bump_tracker();
                    Outcome::Done
                }
                Effect::SetReplicas {
                    statefulset,
                    from,
                    to,
                    ..
                } => self.set_replicas(statefulset, *from, *to)?,
                Effect::WriteBack { replicas, .. } => {
                    self.reference.1 = Some(*replicas);
                    Outcome::Done
                }
                Effect::CancelDelayedDownscale { pods, .. } => {
                    for endpoint in pods {
                        if let Some(pod) = self.pod_mut(&endpoint.pod)
                            && pod.failing == 0
                        {
                            pod.prepared_at = None;
                        }
                    }
                    Outcome::Done
                }
                Effect::PrepareDelayedDownscale(step) => {
                    let mut answers = BTreeMap::new();
                    for (index, endpoint) in &step.going {
                        let answer = match endpoint {
                            Ok(endpoint) => match self.pod_mut(&endpoint.pod) {
                                Some(pod) if pod.failing > 0 => Err("HTTP 500".to_owned()),
                                Some(pod) => Ok(*pod.prepared_at.get_or_insert(now)),
                                None => Err("connection refused".to_owned()),
                            },
                            Err(error) => Err(error.clone()),
                        };
                        answers.insert(*index, answer);
                    }
                    let decider: &DelayedDecider<'_> = self.scaling.decider;
                    let concluded = pass::conclude_with(step, &answers, now, decider);
                    for effect in &concluded.effects {
                        if let Effect::SetReplicas { to, .. } = effect
                            && *to > step.to
                        {
                            self.stats.partial_delayed_downscales += 1;
                        }
                    }
                    sequence.concluded(concluded);
                    Outcome::Done
                }
                Effect::FollowUp(_) => Outcome::Done,
            };
            sequence.answer(&effect, outcome);
        }
        Ok(())
    }

    fn pod_mut(&mut self, name: &str) -> Option<&mut SimPod> {
        let (zone, index) = name.rsplit_once('-')?;
        let index: usize = index.parse().ok()?;
        self.zones
            .iter_mut()
            .find(|candidate| candidate.name == zone)?
            .pods
            .get_mut(index)
    }

    fn run(&mut self) -> Result<Stats, Violation> {
        while self.step < STEPS {
            self.chaos();
            self.baton()?;
            self.kubernetes();
            self.step += 1;
        }
        Ok(self.stats.clone())
    }
}

// ---------------------------------------------------------------------------------------------
// Running many scenarios
// ---------------------------------------------------------------------------------------------

/// Runs the scenarios of `seeds` on all cores until one violates a property `wanted` accepts
/// (other violations end their scenario only); of those found, the lowest seed wins.
fn run_scenarios(
    scaling: &Scaling<'_>,
    seeds: Range<u64>,
    wanted: &(dyn Fn(Property) -> bool + Sync),
) -> Result<Stats, Violation> {
    sim::search(
        seeds,
        &|seed| Simulation::new(seed, scaling, false).run(),
        &|violation: &Violation| wanted(violation.property),
        |violation| violation.seed,
    )
}

/// Runs one scenario and returns its trace too.
fn replay(seed: u64, scaling: &Scaling<'_>) -> (Result<Stats, Violation>, Vec<String>) {
    let mut simulation = Simulation::new(seed, scaling, true);
    let result = simulation.run();
    (result, simulation.trace.take().unwrap_or_default())
}

#[test]
fn scaling_keeps_its_guarantees_in_random_scenarios() {
    if let Some(seed) = env_u64("SIM_SEED") {
        let (result, trace) = replay(seed, &REAL);
        println!("{}", trace.join("\n"));
        if let Err(violation) = result {
            panic!("{violation}");
        }
        return;
    }
    let first = env_u64("SIM_FIRST_SEED").unwrap_or(0);
    let count = env_u64("SIM_SCENARIOS").unwrap_or(DEFAULT_SCENARIOS);
    let started = Instant::now();
    let stats = match run_scenarios(&REAL, first..first + count, &|_| true) {
        Ok(stats) => stats,
        Err(violation) => panic!("{violation}"),
    };
    println!(
        "{} scenarios of {STEPS} steps in {:.1?}: {stats:?}",
        stats.scenarios,
        started.elapsed()
    );
    assert_eq!(stats.scenarios, count);
    if count >= 1_000 {
        // Not vacuous: every kind of replica change happened many times, and the pass held
        // for every reason the properties are about.
        for (what, done) in [
            ("upscales", stats.upscales),
            ("follower downscales", stats.follower_downscales),
            ("mirrored downscales", stats.mirrored_downscales),
            ("delayed downscales", stats.delayed_downscales),
            (
                "partial delayed downscales",
                stats.partial_delayed_downscales,
            ),
            ("repaired tracker entries", stats.repaired_tracker_entries),
            ("stale writes", stats.stale_writes),
            ("passes with a cluster unread", stats.unread_passes),
        ] {
            assert!(done > count / 10, "{what}: {done} in {stats:?}");
        }
        for reason in [
            "ScalingHeld",
            "DelayedDownscaleWaiting",
            "DelayedDownscaleFailed",
            "ScalingReferenceUnavailable",
            "ZoneTrackerEntryInvalid",
        ] {
            assert!(
                stats.told.get(reason).copied().unwrap_or(0) > 0,
                "never told {reason}: {stats:?}"
            );
        }
    }
}

#[test]
fn replaying_a_seed_gives_the_same_scenario() {
    for seed in [7, 1234] {
        let (first, first_trace) = replay(seed, &REAL);
        let (second, second_trace) = replay(seed, &REAL);
        assert!(first.is_ok() && second.is_ok());
        assert!(first_trace.len() > 3, "{first_trace:?}");
        assert_eq!(first_trace, second_trace);
    }
    assert_ne!(replay(7, &REAL).1, replay(8, &REAL).1);
}

// ---------------------------------------------------------------------------------------------
// The checker is not vacuous: deliberately broken passes get caught, each by its property
// ---------------------------------------------------------------------------------------------

fn assert_caught(scaling: &Scaling<'_>, property: Property) {
    match run_scenarios(scaling, 0..BROKEN_PASS_SCENARIOS, &|found| {
        found == property
    }) {
        Ok(stats) => panic!(
            "a broken pass ran {} scenarios without violating {property}: it is not really checked",
            stats.scenarios
        ),
        Err(violation) => {
            assert_eq!(violation.property, property, "{violation}");
            let report = violation.to_string();
            assert!(
                report.contains(&format!("SIM_SEED={}", violation.seed)),
                "{report}"
            );
            // Replaying the reported seed reproduces the violation at the same step.
            let (replayed, trace) = replay(violation.seed, scaling);
            let replayed = replayed.expect_err("the replay must fail like the original");
            assert_eq!(
                (replayed.property, replayed.step),
                (property, violation.step)
            );
            assert!(!trace.is_empty());
        }
    }
}

#[test]
fn checker_catches_a_pass_that_scales_one_below_the_reference() {
    assert_caught(
        &Scaling {
            planner: &|snapshot: &ScalingSnapshot, now| {
                let mut lower = snapshot.clone();
                for member in &mut lower.members {
                    if let Ok(Some(mirror)) = &mut member.mirror
                        && let Ok(scale) = &mut mirror.scale
                    {
                        scale.spec_replicas = (scale.spec_replicas - 1).max(0);
                    }
                }
                plan(&lower, now)
            },
            ..REAL
        },
        Property::NeverBelowWanted,
    );
}

#[test]
fn checker_catches_a_pass_blind_to_other_zones_downscales() {
    assert_caught(
        &Scaling {
            planner: &|snapshot: &ScalingSnapshot, now| {
                let mut blind = snapshot.clone();
                for member in &mut blind.members {
                    member.last_downscale = Ok(None);
                }
                plan(&blind, now)
            },
            ..REAL
        },
        Property::NoDownscaleInsideMinTime,
    );
}

#[test]
fn checker_catches_a_pass_that_downscales_before_its_pods_are_ready_to_go() {
    assert_caught(
        &Scaling {
            decider: &|_, _, to, _, _, _| DelayedDownscaleDecision::ScaleTo { replicas: to },
            ..REAL
        },
        Property::DelayedOnlyWhenPrepared,
    );
}

#[test]
fn checker_catches_a_pass_that_scales_on_a_partial_view() {
    assert_caught(
        &Scaling {
            planner: &|snapshot: &ScalingSnapshot, now| {
                let mut partial = snapshot.clone();
                partial.unread.clear();
                plan(&partial, now)
            },
            ..REAL
        },
        Property::NothingOnAPartialView,
    );
}
