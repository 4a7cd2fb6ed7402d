//! Simulation proof of the majority claim across member clusters
//! ([`baton_core::member_claims`]): two or three member clusters, each with its own downscale
//! ledger and its own webhook, claiming downscales of their zones at random moments.
//!
//! Every step the simulator picks one thing to happen, at random: a webhook asked to downscale
//! its cluster's zone (a new claim, timed by the simulated clock, asked of its own cluster's
//! ledger first, then of every other member at once), one step of one member's ask of a claim under way (a ledger read, or a write
//! conditioned on the version read: another webhook's write in between makes it a conflict,
//! read and judged again), in any order across members and claims, the clock moving on, a
//! member cluster going away or coming back (a claim meeting it gets "unreachable", a
//! withdrawal there fails and leaves the claim behind), a claim's deadline passing as the
//! clock moves (the members that have not answered are unreachable, while their reads and
//! writes go on and may still land), a webhook dying in the middle of a claim (its half-written claim stays, its
//! writes in flight may land), the same zone asked again. Asks still in flight once a claim
//! is decided go on too, their answers unheard.
//!
//! Checked over every scenario:
//! - (D-a) `NoTwoWithinMinTime`: no two downscales of different members are approved where
//!   either falls within the other's min-time.
//!
//! Mutation tests, each caught by (D-a): a rule that counts an unreachable member for the
//! claim; one that counts a member that has not answered yet for it; one whose majority is
//! half the members; a ledger that judges the min-time one way
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
    next: fn(&[String], &[Option<Reached>], &str) -> Next,
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

/// Where one member's ask of a claim is.
enum Ask {
    /// Not asked before the own ledger took the claim.
    Queued,
    /// Read the member's ledger (`writes` lost races so far).
    Reading { writes: usize },
    /// Write what was judged on `read`.
    Writing { read: Ledger, writes: usize },
    /// Answered (or given up).
    Finished,
}

/// Where a claim is, once asked.
enum Stage {
    /// Waiting for the members' answers.
    Asking,
    /// Withdraw from each of these (by index), one per step.
    Withdrawing(Vec<usize>),
    /// Decided (or its webhook died): only asks still in flight go on, unheard.
    Done,
}

struct Claim {
    member: usize,
    key: String,
    claim: MemberClaim,
    order: Vec<String>,
    /// One per member of `order`; `None` until it answered.
    answers: Vec<Option<Reached>>,
    /// One per member of `order`.
    asks: Vec<Ask>,
    stage: Stage,
}

impl Claim {
    fn busy(&self) -> bool {
        !matches!(self.stage, Stage::Done) || self.asks.iter().any(Ask::in_flight)
    }
}

impl Ask {
    fn in_flight(&self) -> bool {
        matches!(self, Ask::Reading { .. } | Ask::Writing { .. })
    }
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
        let order = member_claims::order(&name, &self.names());
        self.claims.push(Claim {
            member,
            key: member_claims::key(&name, "ingester", &request),
            claim: MemberClaim::new(self.now, self.min_times[member], &request),
            answers: vec![None; order.len()],
            // The own ledger first (`order` starts with it), then every other member at once
            asks: order
                .iter()
                .enumerate()
                .map(|(index, _)| match index {
                    0 => Ask::Reading { writes: 0 },
                    _ => Ask::Queued,
                })
                .collect(),
            order,
            stage: Stage::Asking,
        });
    }

    /// One step of claim `index`: a withdrawal, or one step of one of its asks in flight.
    fn step(&mut self, index: usize) {
        if let Stage::Withdrawing(left) = &mut self.claims[index].stage {
            let Some(cluster) = left.pop() else {
                self.claims[index].stage = Stage::Done;
                return;
            };
            if self.clusters[cluster].up {
                let claim = &self.claims[index];
                let read = self.read(cluster);
                if let Some(without) =
                    member_claims::withdrawn(&read, &claim.key, &claim.claim.request)
                {
                    self.store(cluster, &read, without);
                }
            }
            return;
        }
        let flying: Vec<usize> = (0..self.claims[index].asks.len())
            .filter(|&ask| self.claims[index].asks[ask].in_flight())
            .collect();
        if flying.is_empty() {
            return;
        }
        let ask = flying[self.rng.random_range(0..flying.len())];
        let cluster = self.index(&self.claims[index].order[ask]);
        let state = std::mem::replace(&mut self.claims[index].asks[ask], Ask::Finished);
        let (state, reached) = match state {
            Ask::Reading { writes } => {
                if self.clusters[cluster].up {
                    let read = self.read(cluster);
                    (Ask::Writing { read, writes }, None)
                } else {
                    (Ask::Finished, Some(Reached::Unreachable("down".into())))
                }
            }
            Ask::Writing { read, writes } => {
                if !self.clusters[cluster].up {
                    // A write whose answer is lost may have landed: half the time it did.
                    if self.rng.random_bool(0.5)
                        && let Judged::Accepts(ledger) = self.judged(index, &read)
                    {
                        self.store(cluster, &read, ledger);
                    }
                    (
                        Ask::Finished,
                        Some(Reached::Unreachable("write lost".into())),
                    )
                } else {
                    let judged = self.judged(index, &read);
                    match &judged {
                        Judged::Accepts(ledger) => {
                            if self.store(cluster, &read, ledger.clone()) {
                                (Ask::Finished, Some(Reached::Accepted))
                            } else if writes + 1 < CLAIM_ATTEMPTS {
                                (Ask::Reading { writes: writes + 1 }, None)
                            } else {
                                let kept = Reached::Unreachable("kept changing".into());
                                (Ask::Finished, Some(kept))
                            }
                        }
                        _ => (Ask::Finished, Some(Reached::of(&judged))),
                    }
                }
            }
            Ask::Queued | Ask::Finished => (Ask::Finished, None),
        };
        self.claims[index].asks[ask] = state;
        if let Some(reached) = reached {
            self.answer(index, ask, reached);
        }
    }

    /// `reached` from the member `ask` of claim `index`, heard if the claim still waits for
    /// it; then what the rule decides.
    fn answer(&mut self, index: usize, ask: usize, reached: Reached) {
        let claim = &mut self.claims[index];
        if !matches!(claim.stage, Stage::Asking) || claim.answers[ask].is_some() {
            return;
        }
        let own_refused = ask == 0 && reached != Reached::Accepted;
        claim.answers[ask] = Some(reached);
        if own_refused {
            // As in the flow: refused by the own ledger, no other member asked.
            self.trace
                .push(format!("{} refused by its own ledger", claim.key));
            claim.stage = Stage::Done;
            claim.asks.fill_with(|| Ask::Finished);
            return;
        }
        if ask == 0 {
            for other in &mut claim.asks[1..] {
                *other = Ask::Reading { writes: 0 };
            }
        }
        self.decide(index);
    }

    /// The claim's deadline: every member not answered yet is unreachable (its ask goes on).
    fn deadline(&mut self, index: usize) {
        let claim = &mut self.claims[index];
        if !matches!(claim.stage, Stage::Asking) {
            return;
        }
        for answer in &mut claim.answers {
            answer.get_or_insert_with(|| Reached::Unreachable("deadline passed".into()));
        }
        for ask in &mut claim.asks {
            if matches!(ask, Ask::Queued) {
                *ask = Ask::Finished;
            }
        }
        self.trace
            .push(format!("{} passes its deadline", claim.key));
        self.decide(index);
    }

    fn decide(&mut self, index: usize) {
        let claim = &self.claims[index];
        let stage = match (self.rule.next)(&claim.order, &claim.answers, "downscale") {
            Next::Wait => Stage::Asking,
            Next::Approved { .. } => {
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
        };
        self.claims[index].stage = stage;
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
                    // Each claim whose deadline passed stops waiting for its members.
                    for index in 0..self.claims.len() {
                        let (at, _) = self.claims[index].claim.window().expect("its own claim");
                        let lifetime = SignedDuration::try_from(LIFETIME).expect("a lifetime");
                        if self.now > at + lifetime {
                            self.deadline(index);
                        }
                    }
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
                    // A webhook dies mid-claim: what it wrote stays, what it was writing may
                    // still land.
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
                        .filter(|&i| self.claims[i].busy())
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
    fn next(order: &[String], answers: &[Option<Reached>], downscale: &str) -> Next {
        let hopeful: Vec<Option<Reached>> = answers
            .iter()
            .map(|answer| match answer {
                Some(Reached::Unreachable(_)) => Some(Reached::Accepted),
                other => other.clone(),
            })
            .collect();
        member_claims::next(order, &hopeful, downscale)
    }
    assert_caught(Rule { next, ..REAL });
}

#[test]
fn checker_catches_a_rule_that_counts_a_member_not_answered_yet_for_the_claim() {
    fn next(order: &[String], answers: &[Option<Reached>], downscale: &str) -> Next {
        let hopeful: Vec<Option<Reached>> = (0..order.len())
            .map(|index| match answers.get(index).cloned().flatten() {
                None => Some(Reached::Accepted),
                answered => answered,
            })
            .collect();
        // Approved while in flight; otherwise as the real rule.
        match member_claims::next(order, &hopeful, downscale) {
            Next::Approved { warnings } => Next::Approved { warnings },
            _ => member_claims::next(order, answers, downscale),
        }
    }
    assert_caught(Rule { next, ..REAL });
}

#[test]
fn checker_catches_a_rule_whose_majority_is_half_the_members() {
    fn next(order: &[String], answers: &[Option<Reached>], downscale: &str) -> Next {
        let accepted = answers
            .iter()
            .filter(|answer| matches!(answer, Some(Reached::Accepted)))
            .count();
        if accepted >= order.len() / 2 {
            return Next::Approved { warnings: vec![] };
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
