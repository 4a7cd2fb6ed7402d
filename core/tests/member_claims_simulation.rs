//! Simulation proof of the majority claim across member clusters
//! ([`baton_core::member_claims`]): two or three member clusters, each with its own downscale
//! ledger and its own webhook, claiming downscales of their zones at random moments.
//!
//! Every step the simulator picks one thing to happen, at random: a webhook asked to downscale
//! its cluster's zone (a new claim, timed by the simulated clock), one step of a claim under
//! way (a ledger read, or a write conditioned on the version read: another webhook's write in
//! between makes it a conflict, read and judged again), the clock moving on, a member cluster
//! going away or coming back (a claim meeting it gets "unreachable", a withdrawal there fails
//! and leaves the claim behind), a webhook dying in the middle of a claim (its half-written
//! claim stays), the same zone asked again.
//!
//! Checked over every scenario:
//! - (D-a) `NoTwoWithinMinTime`: no two downscales of different members are approved where
//!   either falls within the other's min-time.
//!
//! Mutation tests, each caught by (D-a): a rule that counts an unreachable member for the
//! claim; one whose majority is half the members; a ledger that judges the min-time one way
//! only (a claim "earlier" by its clock slips under a later one's window); a ledger that keeps
//! one claim per member (a member's new claim replaces its approved one, and a slow claim of
//! another member slips into the window the approved one held).
//!
//! Environment: `SIM_SCENARIOS=N` (default 2,000), `SIM_SEED=S` replays scenario S with its
//! trace (`-- --nocapture`).

use std::time::Duration;

#[path = "support/sim.rs"]
#[allow(dead_code, reason = "its rollout pass is the rollout simulations'")]
mod sim;
use sim::env_u64;

use baton_core::ledger::{CLAIM_ATTEMPTS, Ledger};
use baton_core::member_claims::{self, Judged, MemberClaim, Next, Reached, conflict};
use jiff::{SignedDuration, Timestamp};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

/// The rule under test: the real one, or a weakened one a mutation test brings.
#[derive(Clone, Copy)]
struct Rule {
    judge: fn(&Ledger, &str, &MemberClaim, Timestamp, Duration) -> Judged,
    next: fn(&[String], &[Reached], &str) -> Next,
}

/// A claim's lifetime (the admission deadline).
const LIFETIME: Duration = Duration::from_secs(10);

const REAL: Rule = Rule {
    judge: member_claims::judge,
    next: member_claims::next,
};

/// One member cluster: its ledger (with the version a conditioned write names) and whether
/// it can be reached.
struct Cluster {
    name: String,
    ledger: Ledger,
    version: u64,
    up: bool,
}

/// Where a claim is.
enum Stage {
    /// Ask the rule what comes next.
    Deciding,
    /// Read `cluster`'s ledger (`writes` lost races so far).
    Reading {
        cluster: usize,
        writes: usize,
    },
    /// Write what was judged on `read` to `cluster`.
    Writing {
        cluster: usize,
        read: Ledger,
        writes: usize,
    },
    /// Withdraw from each of these (by index), one per step.
    Withdrawing(Vec<usize>),
    Done,
}

struct Claim {
    member: usize,
    key: String,
    claim: MemberClaim,
    order: Vec<String>,
    answers: Vec<Reached>,
    stage: Stage,
}

#[derive(Debug)]
struct Violation {
    seed: u64,
    details: String,
    trace: Vec<String>,
}

struct World {
    rng: ChaCha8Rng,
    clusters: Vec<Cluster>,
    claims: Vec<Claim>,
    /// Approved downscales: the member and its window.
    approved: Vec<(usize, (Timestamp, Duration))>,
    now: Timestamp,
    min_times: Vec<Duration>,
    rule: Rule,
    trace: Vec<String>,
    requests: u64,
}

impl World {
    fn new(seed: u64, rule: Rule) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let count = if rng.random_bool(0.7) { 3 } else { 2 };
        let clusters = (0..count)
            .map(|index| Cluster {
                name: format!("cluster-{}", ["a", "b", "c"][index]),
                ledger: Ledger::default(),
                version: 0,
                up: true,
            })
            .collect();
        let min_times = (0..count)
            .map(|_| Duration::from_secs([0, 30, 60, 120][rng.random_range(0..4)]))
            .collect();
        Self {
            rng,
            clusters,
            claims: Vec::new(),
            approved: Vec::new(),
            now: Timestamp::from_second(1_800_000_000).expect("a valid time"),
            min_times,
            rule,
            trace: Vec::new(),
            requests: 0,
        }
    }

    fn names(&self) -> Vec<String> {
        self.clusters.iter().map(|c| c.name.clone()).collect()
    }

    fn index(&self, name: &str) -> usize {
        self.clusters
            .iter()
            .position(|c| c.name == name)
            .expect("a member of the order")
    }

    fn ask(&mut self) {
        let member = self.rng.random_range(0..self.clusters.len());
        self.requests += 1;
        let request = format!("uid-{}", self.requests);
        let name = self.clusters[member].name.clone();
        self.trace.push(format!("{} asks ({request})", name));
        self.claims.push(Claim {
            member,
            key: member_claims::key(&name, "ingester", &request),
            claim: MemberClaim::new(self.now, self.min_times[member], &request),
            order: member_claims::order(&name, &self.names()),
            answers: Vec::new(),
            stage: Stage::Deciding,
        });
    }

    /// One step of claim `index`.
    fn step(&mut self, index: usize) {
        let stage = std::mem::replace(&mut self.claims[index].stage, Stage::Done);
        let next = match stage {
            Stage::Deciding => {
                let claim = &self.claims[index];
                match (self.rule.next)(&claim.order, &claim.answers, "downscale") {
                    Next::Claim(member) => Stage::Reading {
                        cluster: self.index(&member),
                        writes: 0,
                    },
                    Next::Approved => {
                        let window = claim.claim.window().expect("its own claim");
                        self.trace
                            .push(format!("{} approved at {}", claim.key, window.0));
                        self.approved.push((claim.member, window));
                        Stage::Done
                    }
                    Next::Refused { withdraw, message } => {
                        self.trace.push(format!("refused: {message}"));
                        Stage::Withdrawing(withdraw.iter().map(|m| self.index(m)).collect())
                    }
                }
            }
            Stage::Reading { cluster, writes } => {
                if self.clusters[cluster].up {
                    Stage::Writing {
                        cluster,
                        read: self.read(cluster),
                        writes,
                    }
                } else {
                    self.answer(index, Reached::Unreachable("down".into()))
                }
            }
            Stage::Writing {
                cluster,
                read,
                writes,
            } => {
                if !self.clusters[cluster].up {
                    // A write whose answer is lost may have landed: half the time it did.
                    if self.rng.random_bool(0.5)
                        && let Judged::Accepts(ledger) = self.judged(index, &read)
                    {
                        self.store(cluster, &read, ledger);
                    }
                    self.answer(index, Reached::Unreachable("write lost".into()))
                } else {
                    let judged = self.judged(index, &read);
                    match &judged {
                        Judged::Accepts(ledger) => {
                            if self.store(cluster, &read, ledger.clone()) {
                                self.answer(index, Reached::Accepted)
                            } else if writes + 1 < CLAIM_ATTEMPTS {
                                Stage::Reading {
                                    cluster,
                                    writes: writes + 1,
                                }
                            } else {
                                self.answer(index, Reached::Unreachable("kept changing".into()))
                            }
                        }
                        _ => self.answer(index, Reached::of(&judged)),
                    }
                }
            }
            Stage::Withdrawing(mut left) => match left.pop() {
                None => Stage::Done,
                Some(cluster) => {
                    if self.clusters[cluster].up {
                        let claim = &self.claims[index];
                        let read = self.read(cluster);
                        if let Some(without) =
                            member_claims::withdrawn(&read, &claim.key, &claim.claim.request)
                        {
                            self.store(cluster, &read, without);
                        }
                    }
                    Stage::Withdrawing(left)
                }
            },
            Stage::Done => Stage::Done,
        };
        self.claims[index].stage = next;
    }

    fn answer(&mut self, index: usize, reached: Reached) -> Stage {
        self.claims[index].answers.push(reached);
        Stage::Deciding
    }

    fn judged(&self, index: usize, read: &Ledger) -> Judged {
        let claim = &self.claims[index];
        (self.rule.judge)(read, &claim.key, &claim.claim, self.now, LIFETIME)
    }

    fn read(&self, cluster: usize) -> Ledger {
        let cluster = &self.clusters[cluster];
        Ledger {
            resource_version: Some(cluster.version.to_string()),
            data: cluster.ledger.data.clone(),
        }
    }

    /// A write conditioned on the version `read` had: false on a conflict.
    fn store(&mut self, cluster: usize, read: &Ledger, ledger: Ledger) -> bool {
        let cluster = &mut self.clusters[cluster];
        if read.resource_version != Some(cluster.version.to_string()) {
            return false;
        }
        cluster.version += 1;
        cluster.ledger.data = ledger.data;
        true
    }

    fn run(&mut self, seed: u64) -> Result<(), Violation> {
        for _ in 0..200 {
            match self.rng.random_range(0..20) {
                0..=2 => self.ask(),
                3..=4 => {
                    let seconds = [1, 5, 20, 45, 90][self.rng.random_range(0..5)];
                    self.now += SignedDuration::from_secs(seconds);
                }
                5 => {
                    let cluster = self.rng.random_range(0..self.clusters.len());
                    let up = !self.clusters[cluster].up;
                    self.clusters[cluster].up = up;
                    let name = self.clusters[cluster].name.clone();
                    self.trace.push(format!(
                        "{name} {}",
                        if up { "comes back" } else { "goes away" }
                    ));
                }
                6 => {
                    // A webhook dies mid-claim: what it wrote stays.
                    if let Some(claim) = self
                        .claims
                        .iter_mut()
                        .find(|claim| !matches!(claim.stage, Stage::Done))
                    {
                        claim.stage = Stage::Done;
                        self.trace.push(format!("{} dies", claim.key));
                    }
                }
                _ => {
                    let busy: Vec<usize> = (0..self.claims.len())
                        .filter(|&i| !matches!(self.claims[i].stage, Stage::Done))
                        .collect();
                    if !busy.is_empty() {
                        let index = busy[self.rng.random_range(0..busy.len())];
                        self.step(index);
                    }
                }
            }
            self.check(seed)?;
        }
        Ok(())
    }

    /// (D-a): no two approved downscales of different members within either's min-time.
    fn check(&self, seed: u64) -> Result<(), Violation> {
        for (i, (a, window_a)) in self.approved.iter().enumerate() {
            for (b, window_b) in &self.approved[i + 1..] {
                if a != b && conflict(*window_a, *window_b) {
                    return Err(Violation {
                        seed,
                        details: format!(
                            "NoTwoWithinMinTime: {} at {} ({:?}) and {} at {} ({:?}) both approved",
                            self.clusters[*a].name,
                            window_a.0,
                            window_a.1,
                            self.clusters[*b].name,
                            window_b.0,
                            window_b.1
                        ),
                        trace: self.trace.clone(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Runs the scenarios: the first violation, and how many downscales were approved.
fn run_scenarios(rule: Rule) -> (Result<(), Violation>, usize) {
    let scenarios = env_u64("SIM_SCENARIOS").unwrap_or(2_000);
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..scenarios).collect(),
    };
    let mut approved = 0;
    for seed in seeds {
        let mut world = World::new(seed, rule);
        let result = world.run(seed);
        approved += world.approved.len();
        if env_u64("SIM_SEED").is_some() {
            for line in &world.trace {
                println!("{line}");
            }
        }
        if let Err(violation) = result {
            return (Err(violation), approved);
        }
    }
    (Ok(()), approved)
}

#[test]
fn no_two_members_are_approved_within_a_min_time_in_random_scenarios() {
    let (result, approved) = run_scenarios(REAL);
    if let Err(violation) = result {
        panic!(
            "seed {}: {}\n{}",
            violation.seed,
            violation.details,
            violation.trace.join("\n")
        );
    }
    // The scenarios approve downscales (a rule refusing everything would pass (D-a) vacuously).
    assert!(approved > 1_000, "only {approved} downscales approved");
}

fn assert_caught(rule: Rule) {
    let (result, _) = run_scenarios(rule);
    let violation = result.expect_err("the weakened rule is caught");
    assert!(
        violation.details.starts_with("NoTwoWithinMinTime"),
        "{}",
        violation.details
    );
}

#[test]
fn checker_catches_a_rule_that_counts_an_unreachable_member_for_the_claim() {
    fn next(order: &[String], answers: &[Reached], downscale: &str) -> Next {
        let hopeful: Vec<Reached> = answers
            .iter()
            .map(|answer| match answer {
                Reached::Unreachable(_) => Reached::Accepted,
                other => other.clone(),
            })
            .collect();
        member_claims::next(order, &hopeful, downscale)
    }
    assert_caught(Rule { next, ..REAL });
}

#[test]
fn checker_catches_a_rule_whose_majority_is_half_the_members() {
    fn next(order: &[String], answers: &[Reached], downscale: &str) -> Next {
        let accepted = answers
            .iter()
            .filter(|answer| matches!(answer, Reached::Accepted))
            .count();
        if accepted >= order.len() / 2 {
            return Next::Approved;
        }
        member_claims::next(order, answers, downscale)
    }
    assert_caught(Rule { next, ..REAL });
}

#[test]
fn checker_catches_a_ledger_that_judges_the_min_time_one_way_only() {
    fn judge(
        ledger: &Ledger,
        key: &str,
        claim: &MemberClaim,
        now: Timestamp,
        lifetime: Duration,
    ) -> Judged {
        // Only claims before this one count: a claim "earlier" by its clock slips under.
        let ours = claim.window().expect("readable");
        let mut earlier = ledger.clone();
        earlier.data.retain(|other, raw| {
            serde_json::from_str::<MemberClaim>(raw)
                .ok()
                .and_then(|theirs| theirs.window().ok())
                .is_none_or(|theirs| theirs.0 <= ours.0 || other == key)
        });
        match member_claims::judge(&earlier, key, claim, now, lifetime) {
            Judged::Accepts(_) => {
                let mut accepted = ledger.clone();
                accepted
                    .data
                    .insert(key.to_owned(), serde_json::to_string(claim).unwrap());
                Judged::Accepts(accepted)
            }
            other => other,
        }
    }
    assert_caught(Rule { judge, ..REAL });
}

#[test]
fn checker_catches_a_ledger_where_a_members_new_claim_replaces_its_earlier_one() {
    fn judge(
        ledger: &Ledger,
        key: &str,
        claim: &MemberClaim,
        now: Timestamp,
        lifetime: Duration,
    ) -> Judged {
        match member_claims::judge(ledger, key, claim, now, lifetime) {
            Judged::Accepts(mut accepted) => {
                // One claim per member: the earlier one (maybe approved) is replaced.
                let member = member_claims::member_of(key);
                accepted
                    .data
                    .retain(|other, _| other == key || member_claims::member_of(other) != member);
                Judged::Accepts(accepted)
            }
            other => other,
        }
    }
    assert_caught(Rule { judge, ..REAL });
}
