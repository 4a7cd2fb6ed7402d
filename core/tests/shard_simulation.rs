//! Controller replicas sharing a cluster's namespaces through shard Leases, simulated: replicas
//! join, die, and pause past their Leases (SIGSTOP) and wake; some are configured with another
//! shard count (two versions mid-upgrade); someone edits the shard map. Each replica decides
//! alone, from Leases it reads on its own clock, with the core's rules ([`baton_core::shards`]
//! and the election's [`baton_core::lease::decide`]); the Lease store applies conditional
//! writes as the API server does.
//!
//! Properties (docs/rollout-guarantees.md: (S-a), (S-b)), checked at every tick:
//! - (one actor) no namespace is acted on by two replicas at once: a replica acts on a
//!   namespace while the term of a Lease of its shard lasts, by its own clock;
//! - (balanced) once nothing has changed for a while, every shard of the map's count is held
//!   by a running replica, and the running replicas' loads differ by at most one.
//!
//! Each property has mutation tests: rules broken on purpose must be caught.
//!
//! - `SIM_SCENARIOS=N` runs N scenarios; `SIM_FIRST_SEED=S` starts at seed S;
//! - `SIM_SEED=S` replays exactly scenario S and prints its trace (add `-- --nocapture`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::time::{Duration, Instant};

use baton_core::lease::decide::{
    LeaseDecision, LeaseRecord, LeaseTiming, Observation, decide, observe,
};
use baton_core::shards::{
    ShardId, ShardLease, ShardPlan, acting_until, alive, count_to_share_by, plan,
    shard_map_settled_at, shard_of,
};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

#[path = "support/sim.rs"]
#[allow(dead_code, reason = "its rollout pass is the rollout simulations'")]
mod sim;
use sim::env_u64;

const DEFAULT_SCENARIOS: u64 = 1_000;
const BROKEN_SCENARIOS: u64 = 2_000;
/// One tick of the shared clock.
const TICK: Duration = Duration::from_millis(100);
/// Ticks of a scenario: events happen before `QUIET_FROM`, none after.
const STEPS: u64 = 900;
const QUIET_FROM: u64 = 500;
/// From this tick on, the replicas must have settled (a dead replica's presence expires, its
/// shards are taken, handed over).
const SETTLED_FROM: u64 = 800;
const NAMESPACES: usize = 24;
const TIMING: LeaseTiming = LeaseTiming {
    duration: Duration::from_millis(3_000),
    renew_deadline: Duration::from_millis(2_000),
    retry_period: Duration::from_millis(500),
};

type PlanRule = dyn Fn(&str, u32, &BTreeSet<String>, &[ShardLease]) -> ShardPlan + Sync;

/// The rules under test (the real ones, or one broken on purpose).
struct Rules<'a> {
    plan: &'a PlanRule,
    /// Until when a term lasts after a renewal sent at `sent`, decided on the map read then.
    acting_until: &'a (dyn Fn(Instant, Instant, &LeaseTiming) -> Instant + Sync),
    /// From when the map observed so may be shared by.
    settled_at: &'a (dyn Fn(&Observation, &LeaseTiming) -> Option<Instant> + Sync),
    /// The count to share by, from the configured one and the shard map's.
    count: &'a (dyn Fn(u32, Option<u32>) -> (u32, Option<String>) + Sync),
}

const REAL: Rules<'static> = Rules {
    plan: &plan,
    acting_until: &acting_until,
    settled_at: &shard_map_settled_at,
    count: &count_to_share_by,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Property {
    OneActor,
    Balanced,
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Property::OneActor => "one actor per namespace",
            Property::Balanced => "every shard held, loads even, once settled",
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
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scenario {} violated `{}` at tick {}: {}\nreplay with: SIM_SEED={} cargo test -p \
             baton-core --test shard_simulation -- --nocapture",
            self.seed, self.property, self.step, self.details, self.seed
        )
    }
}

#[derive(Debug, Default)]
struct Stats {
    scenarios: u64,
    joins: u64,
    deaths: u64,
    long_pauses: u64,
    map_edits: u64,
    handovers: u64,
}

impl sim::Tally for Stats {
    fn count_ended_scenario(&mut self) {
        self.scenarios += 1;
    }

    fn merge(&mut self, other: &Self) {
        self.scenarios += other.scenarios;
        self.joins += other.joins;
        self.deaths += other.deaths;
        self.long_pauses += other.long_pauses;
        self.map_edits += other.map_edits;
        self.handovers += other.handovers;
    }
}

/// A Lease as the API server stores it.
#[derive(Debug, Clone)]
struct Stored {
    version: u64,
    holder: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Running,
    /// Stopped until this tick.
    Paused(u64),
    Dead,
}

struct Replica {
    name: String,
    configured: u32,
    run: Run,
    /// Ticks between its rounds, and the next one.
    every: u64,
    next_round: u64,
    observations: BTreeMap<String, Observation>,
    /// What it has seen of the shard map.
    map: Observation,
    /// The shard Leases it leads, until when by its clock.
    terms: BTreeMap<ShardId, Instant>,
    /// The writes of its last round, sent at `send_at` (later if it is paused by then).
    pending: Option<Pending>,
}

/// A round's writes, decided on what it read (the map at `map_read`), not sent yet.
struct Pending {
    send_at: u64,
    map_read: Instant,
    writes: Vec<Write>,
}

/// A conditional write (`expected` None creates); a successful one starts or extends the
/// term of `term`.
struct Write {
    name: String,
    expected: Option<u64>,
    holder: Option<String>,
    term: Option<ShardId>,
}

struct Simulation<'a> {
    seed: u64,
    rng: ChaCha8Rng,
    rules: &'a Rules<'a>,
    start: Instant,
    step: u64,
    leases: BTreeMap<String, Stored>,
    next_version: u64,
    /// The shard map: its version and count.
    shard_map: Option<(u64, u32)>,
    replicas: Vec<Replica>,
    namespaces: Vec<String>,
    stats: Stats,
    trace: Option<Vec<String>>,
}

const PRESENCE: &str = "baton-replica-";

impl<'a> Simulation<'a> {
    fn new(seed: u64, rules: &'a Rules<'a>, traced: bool) -> Self {
        let mut simulation = Self {
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            rules,
            start: Instant::now(),
            step: 0,
            leases: BTreeMap::new(),
            next_version: 1,
            shard_map: None,
            replicas: Vec::new(),
            namespaces: (0..NAMESPACES).map(|i| format!("tenant-{i}")).collect(),
            stats: Stats::default(),
            trace: traced.then(Vec::new),
        };
        let first = simulation.rng.random_range(1..=4);
        for _ in 0..first {
            simulation.join();
        }
        simulation
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push(format!("{:>4} {}", self.step, line()));
        }
    }

    fn now(&self) -> Instant {
        self.start + TICK * u32::try_from(self.step).expect("few ticks")
    }

    fn violation(&self, property: Property, details: String) -> Violation {
        Violation {
            seed: self.seed,
            step: self.step,
            property,
            details,
        }
    }

    /// A new replica; a fifth of them configured with another shard count.
    fn join(&mut self) {
        let configured = if self.rng.random_ratio(1, 5) {
            [4, 16][self.rng.random_range(0..2)]
        } else {
            8
        };
        let name = format!("replica-{}", self.replicas.len());
        let every = 4 + self.rng.random_range(0..3);
        let next_round = self.step + self.rng.random_range(0..every);
        self.note(|| format!("{name} joins, configured with {configured} shards"));
        self.replicas.push(Replica {
            name,
            configured,
            run: Run::Running,
            every,
            next_round,
            observations: BTreeMap::new(),
            map: Observation::Unknown,
            terms: BTreeMap::new(),
            pending: None,
        });
        self.stats.joins += 1;
    }

    fn chaos(&mut self) {
        if self.step >= QUIET_FROM {
            return;
        }
        let running: Vec<usize> = (0..self.replicas.len())
            .filter(|&i| self.replicas[i].run == Run::Running)
            .collect();
        let roll = self.rng.random_range(0..1_000);
        match roll {
            0..4 if self.replicas.len() < 8 => self.join(),
            4..6 if running.len() > 1 => {
                let victim = running[self.rng.random_range(0..running.len())];
                self.replicas[victim].run = Run::Dead;
                self.stats.deaths += 1;
                let name = self.replicas[victim].name.clone();
                self.note(|| format!("{name} dies"));
            }
            6..12 if !running.is_empty() => {
                // half the time one with writes decided and not sent: stopped in between
                let pending: Vec<usize> = running
                    .iter()
                    .copied()
                    .filter(|&i| self.replicas[i].pending.is_some())
                    .collect();
                let victim = if !pending.is_empty() && self.rng.random_ratio(1, 2) {
                    pending[self.rng.random_range(0..pending.len())]
                } else {
                    running[self.rng.random_range(0..running.len())]
                };
                // past the Lease's duration (30 ticks) half the time
                let ticks = self.rng.random_range(5..70);
                let until = (self.step + ticks).min(QUIET_FROM);
                self.replicas[victim].run = Run::Paused(until);
                if ticks > 30 {
                    self.stats.long_pauses += 1;
                }
                let name = self.replicas[victim].name.clone();
                self.note(|| format!("{name} pauses for {ticks} ticks"));
            }
            12..15 if self.shard_map.is_some() => {
                let count = [4, 8, 16][self.rng.random_range(0..3)];
                self.shard_map = Some((self.next_version, count));
                self.next_version += 1;
                self.stats.map_edits += 1;
                self.note(|| format!("someone edits the shard map to {count}"));
            }
            _ => {}
        }
    }

    /// A conditional write, as the API server applies it: `expected` None creates.
    fn write(&mut self, name: &str, expected: Option<u64>, holder: Option<String>) -> bool {
        let current = self.leases.get(name).map(|stored| stored.version);
        if current != expected {
            return false;
        }
        let version = self.next_version;
        self.next_version += 1;
        self.leases
            .insert(name.to_owned(), Stored { version, holder });
        true
    }

    fn record(stored: Option<&Stored>) -> Option<LeaseRecord> {
        stored.map(|stored| LeaseRecord {
            resource_version: stored.version.to_string(),
            holder: stored.holder.clone(),
            duration: Some(TIMING.duration),
        })
    }

    /// One round of replica `index`: the shard map and every Lease read, the plan decided;
    /// its writes are sent later ([`Simulation::send`]): a replica may stop in between.
    fn round(&mut self, index: usize) {
        let now = self.now();
        let me = self.replicas[index].name.clone();
        let presence = format!("{PRESENCE}{me}");
        let mut writes = vec![Write {
            name: presence.clone(),
            expected: self.leases.get(&presence).map(|stored| stored.version),
            holder: Some(me.clone()),
            term: None,
        }];
        if self.shard_map.is_none() {
            // (its create is atomic: the first replica's count)
            self.shard_map = Some((self.next_version, self.replicas[index].configured));
            self.next_version += 1;
        }
        let (map_version, map_count) = self.shard_map.expect("created above");
        let replica = &mut self.replicas[index];
        let read = LeaseRecord {
            resource_version: map_version.to_string(),
            holder: None,
            duration: None,
        };
        replica.map = observe(&replica.map, Some(read), now);
        let (count, _) = (self.rules.count)(replica.configured, Some(map_count));
        // its terms of another count end with the count it shared by
        replica.terms.retain(|shard, _| shard.count == count);
        let settled = (self.rules.settled_at)(&replica.map, &TIMING);
        if settled.is_none_or(|settled| now < settled) {
            self.replicas[index].pending = Some(Pending {
                send_at: self.step + self.rng.random_range(0..4),
                map_read: now,
                writes,
            });
            return;
        }

        // every Lease read (a shard Lease of its count not there yet is read as absent)
        let mut names: BTreeSet<String> = self.leases.keys().cloned().collect();
        names.extend((0..count).map(|shard| ShardId { count, shard }.lease_name()));
        for name in &names {
            let read = Self::record(self.leases.get(name));
            let replica = &mut self.replicas[index];
            let previous = replica
                .observations
                .get(name)
                .cloned()
                .unwrap_or(Observation::Unknown);
            replica
                .observations
                .insert(name.clone(), observe(&previous, read, now));
        }
        let replica = &self.replicas[index];
        let others: BTreeSet<String> = replica
            .observations
            .iter()
            .filter_map(|(name, observation)| {
                let other = name.strip_prefix(PRESENCE)?;
                (other != me && alive(observation, now, &TIMING)).then(|| other.to_owned())
            })
            .collect();
        let leases: Vec<ShardLease> = self
            .leases
            .iter()
            .filter_map(|(name, stored)| {
                let id = parse_shard(name)?;
                Some(ShardLease {
                    shard: id.shard,
                    count: id.count,
                    holder: stored.holder.clone(),
                    alive: alive(&replica.observations[name], now, &TIMING),
                })
            })
            .collect();
        let ShardPlan {
            compete,
            keep,
            release,
        } = (self.rules.plan)(&me, count, &others, &leases);
        for id in release {
            // acting on it stops before the release is written
            self.replicas[index].terms.remove(&id);
            let name = id.lease_name();
            if let Some(expected) = self.observed_version(index, &name) {
                self.stats.handovers += 1;
                self.note(|| format!("{me} releases {name}"));
                writes.push(Write {
                    name,
                    expected: Some(expected),
                    holder: None,
                    term: None,
                });
            }
        }
        for shard in compete.into_iter().chain(keep) {
            let id = ShardId { count, shard };
            let name = id.lease_name();
            let observation = self.replicas[index].observations[&name].clone();
            match decide(&observation, &me, now, &TIMING) {
                LeaseDecision::Create => writes.push(Write {
                    name,
                    expected: None,
                    holder: Some(me.clone()),
                    term: Some(id),
                }),
                LeaseDecision::Renew | LeaseDecision::Acquire(_) => writes.push(Write {
                    expected: self.observed_version(index, &name),
                    name,
                    holder: Some(me.clone()),
                    term: Some(id),
                }),
                LeaseDecision::Read | LeaseDecision::Wait { .. } => {
                    self.replicas[index].terms.remove(&id);
                }
            }
        }
        self.replicas[index].pending = Some(Pending {
            send_at: self.step + self.rng.random_range(0..4),
            map_read: now,
            writes,
        });
    }

    /// The version of Lease `name` as replica `index` last read it.
    fn observed_version(&self, index: usize, name: &str) -> Option<u64> {
        match self.replicas[index].observations.get(name)? {
            Observation::Present { record, .. } => record.resource_version.parse().ok(),
            _ => None,
        }
    }

    /// Sends replica `index`'s pending writes now: each applied if its condition holds; a
    /// successful one starts or extends its term, counted from now and the map's read.
    fn send(&mut self, index: usize) {
        let Some(pending) = self.replicas[index].pending.take() else {
            return;
        };
        let now = self.now();
        let me = self.replicas[index].name.clone();
        for write in pending.writes {
            let won = self.write(&write.name, write.expected, write.holder);
            let Some(id) = write.term else {
                continue;
            };
            if won {
                let until = (self.rules.acting_until)(now, pending.map_read, &TIMING);
                if !self.replicas[index].terms.contains_key(&id) {
                    let name = id.lease_name();
                    self.note(|| format!("{me} leads {name}"));
                }
                self.replicas[index].terms.insert(id, until);
            } else {
                self.replicas[index].terms.remove(&id);
            }
        }
    }

    /// Who acts on each namespace now: a replica running whose term of its shard lasts.
    fn check_one_actor(&self) -> Result<(), Violation> {
        let now = self.now();
        for namespace in &self.namespaces {
            let actors: Vec<String> = self
                .replicas
                .iter()
                .filter(|replica| replica.run == Run::Running)
                .filter_map(|replica| {
                    replica.terms.iter().find_map(|(id, until)| {
                        (now < *until && shard_of(namespace, id.count) == id.shard)
                            .then(|| format!("{} (by {})", replica.name, id.lease_name()))
                    })
                })
                .collect();
            if actors.len() > 1 {
                return Err(self.violation(
                    Property::OneActor,
                    format!("{namespace} is acted on by {}", actors.join(" and ")),
                ));
            }
        }
        Ok(())
    }

    fn check_balanced(&self) -> Result<(), Violation> {
        let Some((_, count)) = self.shard_map else {
            return Ok(());
        };
        let now = self.now();
        let running: Vec<&Replica> = self
            .replicas
            .iter()
            .filter(|replica| replica.run == Run::Running)
            .collect();
        let mut loads: BTreeMap<&str, u32> = running
            .iter()
            .map(|replica| (replica.name.as_str(), 0))
            .collect();
        for shard in 0..count {
            let id = ShardId { count, shard };
            let holders: Vec<&str> = running
                .iter()
                .filter(|replica| replica.terms.get(&id).is_some_and(|until| now < *until))
                .map(|replica| replica.name.as_str())
                .collect();
            let [holder] = holders[..] else {
                return Err(self.violation(
                    Property::Balanced,
                    format!("{} is led by {holders:?}", id.lease_name()),
                ));
            };
            *loads.entry(holder).or_insert(0) += 1;
        }
        let most = loads.values().max().copied().unwrap_or(0);
        let fewest = loads.values().min().copied().unwrap_or(0);
        if most - fewest > 1 {
            return Err(self.violation(
                Property::Balanced,
                format!("the running replicas lead {loads:?} of {count} shards"),
            ));
        }
        Ok(())
    }

    fn run(mut self) -> Result<Stats, Violation> {
        self.run_traced().map(|()| {
            let mut stats = std::mem::take(&mut self.stats);
            stats.scenarios = 1;
            stats
        })
    }

    fn run_traced(&mut self) -> Result<(), Violation> {
        while self.step < STEPS {
            self.chaos();
            for index in 0..self.replicas.len() {
                if let Run::Paused(until) = self.replicas[index].run
                    && until <= self.step
                {
                    self.replicas[index].run = Run::Running;
                    let name = self.replicas[index].name.clone();
                    self.note(|| format!("{name} wakes"));
                }
            }
            // a replica waking acts on its terms before it looks at anything: the pass it
            // was in when it stopped goes on
            self.check_one_actor()?;
            for index in 0..self.replicas.len() {
                let replica = &self.replicas[index];
                if replica.run != Run::Running {
                    continue;
                }
                if replica
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.send_at <= self.step)
                {
                    // what it sent is acted on until its next round, a tick later at the
                    // soonest (a replica waking sends what it had decided, then acts)
                    self.send(index);
                    continue;
                }
                let replica = &self.replicas[index];
                if replica.pending.is_none() && replica.next_round <= self.step {
                    self.round(index);
                    if self.replicas[index]
                        .pending
                        .as_ref()
                        .is_some_and(|p| p.send_at <= self.step)
                    {
                        self.send(index);
                    }
                    let replica = &mut self.replicas[index];
                    replica.next_round = self.step + replica.every;
                }
            }
            self.check_one_actor()?;
            if self.step >= SETTLED_FROM {
                self.check_balanced()?;
            }
            self.step += 1;
        }
        Ok(())
    }
}

/// The shard of a Lease named `baton-shard-<shard>-of-<count>`.
fn parse_shard(name: &str) -> Option<ShardId> {
    let (shard, count) = name.strip_prefix("baton-shard-")?.split_once("-of-")?;
    Some(ShardId {
        count: count.parse().ok()?,
        shard: shard.parse().ok()?,
    })
}

fn run_scenarios(
    rules: &Rules<'_>,
    seeds: Range<u64>,
    wanted: &(dyn Fn(Property) -> bool + Sync),
) -> Result<Stats, Violation> {
    sim::search(
        seeds,
        &|seed| Simulation::new(seed, rules, false).run(),
        &|violation: &Violation| wanted(violation.property),
        |violation| violation.seed,
    )
}

fn replay(seed: u64, rules: &Rules<'_>) -> (Result<(), Violation>, Vec<String>) {
    let mut simulation = Simulation::new(seed, rules, true);
    let result = simulation.run_traced();
    (result, simulation.trace.take().unwrap_or_default())
}

#[test]
fn replicas_sharing_shards_keep_one_actor_per_namespace_and_settle_evenly() {
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
    let stats = match run_scenarios(&REAL, first..first + count, &|_| true) {
        Ok(stats) => stats,
        Err(violation) => panic!("{violation}"),
    };
    println!("{stats:?}");
    assert_eq!(stats.scenarios, count);
    if count >= 1_000 {
        // Not vacuous: every kind of event happened many times.
        for (what, done) in [
            ("joins", stats.joins),
            ("deaths", stats.deaths),
            ("pauses past the Lease", stats.long_pauses),
            ("shard map edits", stats.map_edits),
            ("handovers", stats.handovers),
        ] {
            assert!(done > count / 10, "{what}: {done} in {stats:?}");
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
// The checker is not vacuous: rules broken on purpose get caught, each by its property
// ---------------------------------------------------------------------------------------------

fn assert_caught(rules: &Rules<'_>, property: Property) {
    match run_scenarios(rules, 0..BROKEN_SCENARIOS, &|found| found == property) {
        Ok(stats) => panic!(
            "broken rules ran {} scenarios without violating {property}: it is not really checked",
            stats.scenarios
        ),
        Err(violation) => {
            assert_eq!(violation.property, property, "{violation}");
            let (replayed, trace) = replay(violation.seed, rules);
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
fn checker_catches_a_term_that_outlasts_the_lease() {
    assert_caught(
        &Rules {
            acting_until: &|sent, _, timing| sent + timing.duration * 2,
            ..REAL
        },
        Property::OneActor,
    );
}

#[test]
fn checker_catches_a_term_counted_from_the_renewal_alone_not_the_maps_read() {
    assert_caught(
        &Rules {
            acting_until: &|sent, _, timing| timing.leading_until(sent),
            ..REAL
        },
        Property::OneActor,
    );
}

#[test]
fn checker_catches_replicas_sharing_by_a_new_map_at_once() {
    assert_caught(
        &Rules {
            settled_at: &|map, _| match map {
                Observation::Present { since, .. } => Some(*since),
                _ => None,
            },
            ..REAL
        },
        Property::OneActor,
    );
}

#[test]
fn checker_catches_replicas_sharing_by_their_own_count_not_the_maps() {
    assert_caught(
        &Rules {
            count: &|configured, _| (configured, None),
            ..REAL
        },
        Property::OneActor,
    );
}

#[test]
fn checker_catches_a_plan_blind_to_the_other_replicas() {
    assert_caught(
        &Rules {
            plan: &|me, count, _others, leases| plan(me, count, &BTreeSet::new(), leases),
            ..REAL
        },
        Property::Balanced,
    );
}

#[test]
fn checker_catches_a_plan_that_never_hands_a_shard_over() {
    assert_caught(
        &Rules {
            plan: &|me, count, others, leases| {
                let mut shards = plan(me, count, others, leases);
                let (other_counts, ours): (Vec<ShardId>, Vec<ShardId>) =
                    shards.release.iter().partition(|id| id.count != count);
                shards.keep.extend(ours.iter().map(|id| id.shard));
                shards.release = other_counts;
                shards
            },
            ..REAL
        },
        Property::Balanced,
    );
}
