//! Leader election on the real API server: one leader among candidates, fast handover on release,
//! handover only after the lease duration when the leader dies, a lost term followed by a new
//! one in the same elector, and the fencing test — a minute of candidates stopped, killed,
//! partitioned (and healed) and restarted at random with delayed API calls, where no two
//! candidates ever report `is_leader()` at the same moment.
//!
//! The fencing check is shown to bite: the same chaos with the Lease written by unconditional
//! merge patches (what `kube-leader-election` does) finds two leaders at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_controller::error::Error;
use baton_controller::leader::{
    EndReason, KubeLeaseStore, LeaderElector, Leadership, LeadershipPhase, LeaseStore, Span,
    Status, Term,
};
use baton_core::lease::decide::{LeaseTiming, LostReason};
use baton_e2e::{ControlPlane, TestNamespace, wait_until};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const LEASE: &str = "baton-controller";

/// Short durations for the chaos: many handovers per minute.
const FAST: LeaseTiming = LeaseTiming {
    duration: Duration::from_secs(2),
    renew_deadline: Duration::from_millis(1500),
    retry_period: Duration::from_millis(300),
};

/// A longer lease for the handover tests, so "well under the duration" has room on a busy
/// machine.
const HANDOVER: LeaseTiming = LeaseTiming {
    duration: Duration::from_secs(4),
    renew_deadline: Duration::from_secs(3),
    retry_period: Duration::from_millis(300),
};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(30);

fn init_logs() {
    // RUST_LOG as `level` / `target=level` directives; nothing logged without it.
    let filter: tracing_subscriber::filter::Targets = std::env::var("RUST_LOG")
        .ok()
        .and_then(|directives| directives.parse().ok())
        .unwrap_or_default();
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_test_writer())
        .try_init();
}

// ---------------------------------------------------------------------------------------------
// Scenarios

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_three_candidates_leads_and_the_others_stand_by() {
    init_logs();
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "leader-one").await;
    let candidates: Vec<Candidate> = (0..3)
        .map(|i| Candidate::start(&namespace, FAST, format!("candidate-{i}"), Faults::none()))
        .collect();

    // There is no Lease yet: the first create wins, the others get AlreadyExists.
    wait_until(WAIT, "one candidate leads", || async {
        leaders(&candidates).len() == 1
    })
    .await;
    let leader = leaders(&candidates)[0];

    // And for three lease durations that stays so: same leader, the others standing by.
    let watch_until = Instant::now() + FAST.duration * 3;
    while Instant::now() < watch_until {
        assert_eq!(leaders(&candidates), [leader], "exactly one leader");
        for (i, candidate) in candidates.iter().enumerate() {
            if i != leader {
                assert_eq!(
                    candidate.leadership.status().phase,
                    LeadershipPhase::Standby
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lease = lease_spec(&namespace).await;
    assert_eq!(
        lease.holder_identity.as_deref(),
        Some(candidates[leader].identity.as_str())
    );
    assert_eq!(lease.lease_duration_seconds, Some(2));
    assert!(lease.renew_time.is_some() && lease.acquire_time.is_some());
    for candidate in candidates {
        candidate.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_releasing_on_shutdown_hands_over_well_under_the_lease_duration() {
    init_logs();
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "leader-release").await;
    let (leader, candidates) = three_candidates_one_leading(&namespace, HANDOVER).await;
    let leader_identity = leader.identity.clone();

    // When the leader is shut down (SIGTERM), it stops acting, then releases the Lease
    let stopped = leader.stop().await;
    let (LeadershipPhase::Ended(EndReason::Shutdown), Some(last)) =
        (&stopped.status.phase, stopped.status.past.last())
    else {
        panic!("unexpected final status {:?}", stopped.status);
    };
    assert_eq!(last.end, EndReason::Shutdown);
    let old = last.led;
    // Released: the old leader no longer holds it (a standby may already have taken it).
    let holder = lease_spec(&namespace).await.holder_identity;
    assert!(
        holder.is_none()
            || candidates
                .iter()
                .any(|c| Some(&c.identity) == holder.as_ref()),
        "after release the lease is held by {holder:?}, not by a standby (old leader {leader_identity})"
    );

    // Then a standby leads soon after: well under the lease duration, and not before
    wait_until(WAIT, "a standby leads", || async {
        leaders(&candidates).len() == 1
    })
    .await;
    let new = candidates[leaders(&candidates)[0]].leadership.status();
    let Some(&new) = new.led().last() else {
        panic!("the new leader has no span: {new:?}")
    };
    let gap = new.from - old.to;
    eprintln!("handover after release took {gap:?}");
    assert!(
        new.from >= old.to,
        "the new leader started before the old one stopped"
    );
    assert!(
        gap < HANDOVER.duration / 2,
        "handover after a release took {gap:?}, not well under the lease duration {:?}",
        HANDOVER.duration
    );
    for candidate in candidates {
        candidate.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_only_after_the_lease_duration() {
    init_logs();
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "leader-kill").await;
    let (leader, candidates) = three_candidates_one_leading(&namespace, HANDOVER).await;
    let term = leader.leadership.term().expect("it leads");
    let ended = tokio::spawn({
        let leadership = leader.leadership.clone();
        async move { leadership.term_ended(term).await }
    });

    // When the leader is killed (its task aborted: no release)
    let killed_at = Instant::now();
    let killed = leader.kill().await;
    let LeadershipPhase::Leader { renewed, until, .. } = killed.status.phase else {
        panic!("the killed leader was leading: {:?}", killed.status);
    };
    // An in-process observer learns at once that this elector can no longer lead.
    assert_eq!(
        ended.await.unwrap(),
        EndReason::Lost(LostReason::ElectorGone)
    );

    // Then a standby leads, but only a whole lease duration after the last renewal was sent
    wait_until(WAIT, "a standby leads", || async {
        leaders(&candidates).len() == 1
    })
    .await;
    let Some(&new) = candidates[leaders(&candidates)[0]]
        .leadership
        .status()
        .led()
        .last()
    else {
        panic!("the new leader has no span");
    };
    let since_renewal = new.from - renewed;
    eprintln!(
        "takeover {since_renewal:?} after the last renewal, {:?} after the kill",
        new.from - killed_at
    );
    assert!(
        since_renewal >= HANDOVER.duration,
        "took over {since_renewal:?} after the last renewal, before the lease duration {:?}",
        HANDOVER.duration
    );
    assert!(
        new.from >= until,
        "the new leader started before the killed one's deadline"
    );
    for candidate in candidates {
        candidate.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_at_its_renew_deadline_and_campaigns_again() {
    init_logs();
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "leader-stall").await;
    let stalls: Vec<Faults> = (0..2).map(|_| Faults::none()).collect();
    let mut candidates: Vec<Candidate> = stalls
        .iter()
        .enumerate()
        .map(|(i, faults)| {
            Candidate::start(&namespace, FAST, format!("candidate-{i}"), faults.clone())
        })
        .collect();
    wait_until(WAIT, "one candidate leads", || async {
        leaders(&candidates).len() == 1
    })
    .await;
    let index = leaders(&candidates)[0];

    // When every API call of the leader hangs (a partitioned node)
    stalls[index].stalled.store(true, Ordering::SeqCst);
    let leader = candidates.remove(index);
    let term = leader.leadership.term().expect("it leads");
    let reason = tokio::time::timeout(WAIT, leader.leadership.term_ended(term))
        .await
        .expect("the stalled leader gives up");

    // Then it stops acting exactly at its renew deadline, and keeps campaigning
    assert_eq!(
        reason,
        EndReason::Lost(LostReason::RenewDeadline(FAST.renew_deadline))
    );
    assert!(!leader.leadership.is_leader());
    assert!(
        !leader.task.is_finished(),
        "the elector goes on campaigning"
    );
    let old = leader.leadership.status().past[0].led;

    // And the standby takes over only after that
    wait_until(WAIT, "the standby leads", || async {
        leaders(&candidates).len() == 1
    })
    .await;
    let new = *candidates[0]
        .leadership
        .status()
        .led()
        .last()
        .expect("it leads");
    eprintln!(
        "stalled leader stopped {:?} before the standby started",
        new.from - old.to
    );
    assert!(new.from >= old.to + (FAST.duration - FAST.renew_deadline));

    // And when its partition heals and the standby shuts down (releasing), the old leader
    // leads again: a new term of the same elector
    stalls[index].stalled.store(false, Ordering::SeqCst);
    let standby = candidates.pop().expect("the standby").stop().await;
    let standby_led = standby.status.past.last().expect("it led").led;
    let again = tokio::time::timeout(WAIT, leader.leadership.acquired_after(Some(term)))
        .await
        .expect("the old leader leads again in time");
    assert_eq!(again, Ok(Term(term.0 + 1)));
    let spans = leader.leadership.status().led();
    assert_eq!(spans.len(), 2);
    assert!(
        spans[1].from >= standby_led.to,
        "its new term starts after the standby's ended"
    );
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_stops_at_once() {
    init_logs();
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "leader-taken").await;
    let leader = Candidate::start(&namespace, FAST, "candidate".to_owned(), Faults::none());
    let term = tokio::time::timeout(WAIT, leader.leadership.acquired())
        .await
        .expect("it leads in time")
        .expect("it leads");

    // When someone else writes its name into the Lease (and then never renews it)
    let api: Api<Lease> = namespace.api();
    let mut lease = api.get(LEASE).await.unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some("intruder".to_owned());
    let intruded = Instant::now();
    api.replace(LEASE, &PostParams::default(), &lease)
        .await
        .unwrap();

    // Then the leader notices at its next renewal and stops acting
    let reason = tokio::time::timeout(WAIT, leader.leadership.term_ended(term))
        .await
        .expect("the leader notices");
    assert_eq!(
        reason,
        EndReason::Lost(LostReason::TakenBy("intruder".to_owned()))
    );
    assert!(!leader.leadership.is_leader_in(term));

    // And, campaigning again, it takes the Lease back in a new term only once the intruder's
    // lease has gone unrenewed for its whole duration
    let again = tokio::time::timeout(WAIT, leader.leadership.acquired_after(Some(term)))
        .await
        .expect("it leads again in time");
    assert_eq!(again, Ok(Term(term.0 + 1)));
    let new = *leader.leadership.status().led().last().unwrap();
    assert!(
        new.from >= intruded + FAST.duration,
        "took the intruder's lease back {:?} after the intrusion, before its duration {:?}",
        new.from - intruded,
        FAST.duration
    );
    assert!(
        !leader.leadership.is_leader_in(term),
        "the old term stays over"
    );
    leader.stop().await;
}

/// A fresh install (no Lease object yet) leads at once: the create is atomic, so there is
/// nothing to wait for. A replica restarted under a new identity still waits out the lease its
/// predecessor left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_lease_is_created_and_led_at_once_and_a_new_identity_waits_out_the_old_one() {
    init_logs();
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "leader-fresh").await;
    assert!(
        namespace
            .api::<Lease>()
            .get_opt(LEASE)
            .await
            .unwrap()
            .is_none()
    );

    // Given no Lease, when a candidate starts with a long lease
    let started = Instant::now();
    let first = Candidate::start(&namespace, HANDOVER, "first".to_owned(), Faults::none());

    // Then it leads well before a lease duration
    tokio::time::timeout(HANDOVER.duration / 2, first.leadership.acquired())
        .await
        .expect("a fresh install leads well before the lease duration")
        .expect("it leads");
    eprintln!("fresh install led after {:?}", started.elapsed());

    // When it is killed and restarted under a new identity (no release)
    let killed = first.kill().await;
    let LeadershipPhase::Leader { renewed, .. } = killed.status.phase else {
        panic!("it was leading: {:?}", killed.status);
    };
    let second = Candidate::start(&namespace, HANDOVER, "second".to_owned(), Faults::none());

    // Then the new identity leads only a whole lease duration after the last renewal
    tokio::time::timeout(WAIT, second.leadership.acquired())
        .await
        .expect("the new identity leads in time")
        .expect("it leads");
    let new = *second.leadership.status().led().last().unwrap();
    eprintln!(
        "new identity led {:?} after the last renewal",
        new.from - renewed
    );
    assert!(
        new.from >= renewed + HANDOVER.duration,
        "the new identity led {:?} after its predecessor's last renewal, before the lease duration",
        new.from - renewed
    );
    second.stop().await;
}

/// THE fencing test.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_a_minute_of_chaos_there_is_never_more_than_one_leader() {
    init_logs();
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "leader-chaos").await;
    let report = chaos(
        &namespace,
        Writes::Conditional,
        Duration::from_secs(60),
        false,
    )
    .await;
    report.print("conditional writes");

    assert!(
        report.sampled_doubles.is_empty(),
        "two candidates answered is_leader() == true at once: {:#?}",
        report.sampled_doubles
    );
    let overlaps = report.overlaps();
    assert!(
        overlaps.is_empty(),
        "leadership spans overlap: {overlaps:#?}"
    );
    // Not vacuous: leadership changed hands many times, through every path.
    assert!(
        report.spans().len() >= 8,
        "too few leaderships: {:#?}",
        report.ends
    );
    assert!(report.count("released") >= 2, "{:#?}", report.ends);
    assert!(report.count("killed") >= 2, "{:#?}", report.ends);
    assert!(
        report.count("lost: no renewal") >= 1,
        "no leader was partitioned: {:#?}",
        report.ends
    );
}

/// The fencing test's check finds two leaders when the writes are not conditional.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fencing_check_catches_unconditional_writes() {
    init_logs();
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "leader-naive").await;
    let report = chaos(
        &namespace,
        Writes::Unconditional,
        Duration::from_secs(60),
        true,
    )
    .await;
    report.print("unconditional writes");
    assert!(
        !report.sampled_doubles.is_empty() && !report.overlaps().is_empty(),
        "unconditional writes went unnoticed: {:#?}",
        report.ends
    );
}

// ---------------------------------------------------------------------------------------------
// The chaos

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// baton's store: replace conditional on resourceVersion.
    Conditional,
    /// Merge patches without a resourceVersion: the last writer wins.
    Unconditional,
}

/// What the chaos does to a candidate.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// Shut down as on SIGTERM: stops acting, releases the Lease.
    Release,
    /// Aborted as by `kill -9`: no release.
    Kill,
    /// Every API call hangs from now on (only done to a leader).
    Partition,
    Nothing,
}

impl Action {
    fn random(rng: &Rng) -> Self {
        match rng.below(10) {
            0..=3 => Action::Release,
            4..=6 => Action::Kill,
            7 => Action::Partition,
            _ => Action::Nothing,
        }
    }
}

/// How one term of one candidate ended.
#[derive(Debug)]
struct End {
    identity: String,
    how: String,
    led: Option<Span>,
}

#[derive(Debug)]
struct ChaosReport {
    seed: u64,
    ends: Vec<End>,
    /// Moments when the sampler saw several candidates answer `is_leader() == true`.
    sampled_doubles: Vec<Vec<String>>,
    samples: u64,
    ran_for: Duration,
}

impl ChaosReport {
    fn spans(&self) -> Vec<(&str, Span)> {
        self.ends
            .iter()
            .filter_map(|end| Some((end.identity.as_str(), end.led?)))
            .collect()
    }

    fn overlaps(&self) -> Vec<(String, String, Duration)> {
        let spans = self.spans();
        let mut overlaps = Vec::new();
        for (i, (a, span_a)) in spans.iter().enumerate() {
            for (b, span_b) in &spans[i + 1..] {
                if span_a.overlaps(span_b) {
                    let shared = span_a.to.min(span_b.to) - span_a.from.max(span_b.from);
                    overlaps.push(((*a).to_owned(), (*b).to_owned(), shared));
                }
            }
        }
        overlaps
    }

    fn count(&self, how: &str) -> usize {
        self.ends
            .iter()
            .filter(|end| end.led.is_some() && end.how.starts_with(how))
            .count()
    }

    fn print(&self, title: &str) {
        let mut hows: Vec<&str> = self
            .ends
            .iter()
            .filter(|end| end.led.is_some())
            .map(|end| end.how.as_str())
            .collect();
        hows.sort_unstable();
        eprintln!(
            "chaos with {title} (seed {}) for {:?}: {} candidates, {} leaderships ({hows:?}), {} samples, {} double-leader samples, {} overlapping spans",
            self.seed,
            self.ran_for,
            self.ends.len(),
            self.spans().len(),
            self.samples,
            self.sampled_doubles.len(),
            self.overlaps().len(),
        );
    }
}

/// Four candidate slots for `run_for`: at random moments the leader or a random candidate is
/// shut down (releases), killed (aborted, no release), partitioned (its calls hang until it has
/// given up its term, then it heals and campaigns again) or left alone; empty slots are refilled
/// like Kubernetes restarting a container. Half the candidates get delayed API calls. A sampler
/// checks every 2 ms that at most one candidate answers `is_leader()`.
async fn chaos(
    namespace: &TestNamespace,
    writes: Writes,
    run_for: Duration,
    stop_at_first_double: bool,
) -> ChaosReport {
    let seed = std::env::var("LEADER_CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(seed_from_time);
    eprintln!("chaos seed {seed} (set LEADER_CHAOS_SEED to replay the same choices)");
    let rng = Rng::new(seed);
    let watched: Arc<Mutex<Vec<(String, Leadership)>>> = Arc::default();
    let doubles: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let sampling = CancellationToken::new();
    let sampler = tokio::spawn({
        let (watched, doubles, sampling) = (watched.clone(), doubles.clone(), sampling.clone());
        async move {
            let mut samples = 0u64;
            while !sampling.is_cancelled() {
                let leading: Vec<String> = watched
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(_, leadership)| leadership.is_leader())
                    .map(|(identity, _)| identity.clone())
                    .collect();
                samples += 1;
                if leading.len() > 1 {
                    doubles.lock().unwrap().push(leading);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        }
    });

    let mut started = 0usize;
    let mut start = |rng: &Rng| {
        started += 1;
        let faults = if rng.chance(0.5) {
            Faults::delayed(rng.fork())
        } else {
            Faults::none()
        };
        let candidate = Candidate::start_with(
            namespace,
            FAST,
            format!(
                "c{started}{}",
                if faults.is_delayed() { "-slow" } else { "" }
            ),
            faults,
            writes,
        );
        watched
            .lock()
            .unwrap()
            .push((candidate.identity.clone(), candidate.leadership.clone()));
        candidate
    };
    let mut slots: Vec<Option<Candidate>> = (0..4).map(|_| Some(start(&rng))).collect();
    let mut ends = Vec::new();
    let mut scripted = vec![Action::Partition, Action::Kill, Action::Release];
    let began = Instant::now();
    let until = began + run_for;
    while Instant::now() < until {
        if stop_at_first_double && !doubles.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(rng.between(Duration::from_millis(100), Duration::from_millis(900)))
            .await;
        // A partitioned candidate that gave up its term is healed: it campaigns again (losing
        // a term does not end an elector).
        for candidate in slots.iter().flatten() {
            if candidate.stalled.load(Ordering::SeqCst) && !candidate.leadership.is_leader() {
                candidate.stalled.store(false, Ordering::SeqCst);
            }
        }
        // A partitioned leader is left alone until it gives up by itself.
        let partitioned = |slot: &Option<Candidate>| {
            slot.as_ref()
                .is_some_and(|candidate| candidate.stalled.load(Ordering::SeqCst))
        };
        let leader = slots.iter().position(|slot| {
            !partitioned(slot)
                && slot
                    .as_ref()
                    .is_some_and(|candidate| candidate.leadership.is_leader())
        });
        let (target, action) = match leader {
            // Every kind of leader failure happens at least once, whatever the seed.
            Some(leader) if !scripted.is_empty() => (leader, scripted.pop().unwrap()),
            Some(leader) if rng.chance(0.6) => (leader, Action::random(&rng)),
            _ => (rng.below(slots.len() as u64) as usize, Action::random(&rng)),
        };
        if partitioned(&slots[target]) {
            continue;
        }
        if let Some(candidate) = slots[target].take() {
            match action {
                Action::Release => ends.extend(candidate.stop().await.ends("released")),
                Action::Kill => ends.extend(candidate.kill().await.ends("killed")),
                Action::Partition if candidate.leadership.is_leader() => {
                    // Its calls hang: it must give up by itself at its renew deadline.
                    candidate.stalled.store(true, Ordering::SeqCst);
                    slots[target] = Some(candidate);
                }
                Action::Partition | Action::Nothing => slots[target] = Some(candidate),
            }
        }
        for slot in &mut slots {
            if slot.is_none() && rng.chance(0.5) {
                *slot = Some(start(&rng));
            }
        }
    }
    for candidate in slots.into_iter().flatten() {
        ends.extend(
            candidate
                .stop()
                .await
                .ends("running at the end, then released"),
        );
    }
    sampling.cancel();
    let samples = sampler.await.unwrap();
    let sampled_doubles = std::mem::take(&mut *doubles.lock().unwrap());
    ChaosReport {
        seed,
        ends,
        sampled_doubles,
        samples,
        ran_for: began.elapsed(),
    }
}

// ---------------------------------------------------------------------------------------------
// Candidates

struct Candidate {
    identity: String,
    leadership: Leadership,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    /// Set: every API call of this candidate hangs from now on.
    stalled: Arc<AtomicBool>,
}

/// A candidate after its task ended.
struct Stopped {
    identity: String,
    status: Status,
}

impl Stopped {
    /// One end per term it led (terms lost along the way say why; the last one ended `how`),
    /// or a single end without a span if it never led.
    fn ends(self, how: &str) -> Vec<End> {
        let mut ends: Vec<End> = self
            .status
            .past
            .iter()
            .map(|past| End {
                identity: self.identity.clone(),
                how: match &past.end {
                    EndReason::Lost(reason) => format!("lost: {reason}"),
                    EndReason::Shutdown => how.to_owned(),
                },
                led: Some(past.led),
            })
            .collect();
        // Killed while leading: the term never ended by itself; it counts up to its deadline.
        if let LeadershipPhase::Leader { since, until, .. } = self.status.phase {
            ends.push(End {
                identity: self.identity.clone(),
                how: how.to_owned(),
                led: Some(Span {
                    from: since,
                    to: until,
                }),
            });
        }
        if ends.is_empty() {
            ends.push(End {
                identity: self.identity,
                how: how.to_owned(),
                led: None,
            });
        }
        ends
    }
}

impl Candidate {
    fn start(namespace: &TestNamespace, timing: LeaseTiming, name: String, faults: Faults) -> Self {
        Self::start_with(namespace, timing, name, faults, Writes::Conditional)
    }

    fn start_with(
        namespace: &TestNamespace,
        timing: LeaseTiming,
        name: String,
        faults: Faults,
        writes: Writes,
    ) -> Self {
        let stalled = faults.stalled.clone();
        let store = TestStore {
            kube: KubeLeaseStore::new(namespace.client(), namespace.name(), LEASE),
            api: namespace.api(),
            writes,
            faults,
        };
        // Names are unique within a test, and each test has its own namespace.
        let identity = name;
        let elector = LeaderElector::with_store(store, timing, identity.clone(), REQUEST_TIMEOUT);
        let leadership = elector.leadership();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(elector.run(shutdown.clone()));
        Self {
            identity,
            leadership,
            shutdown,
            task,
            stalled,
        }
    }

    /// Shuts it down as SIGTERM would and waits for it to end (releasing a held Lease).
    async fn stop(self) -> Stopped {
        self.shutdown.cancel();
        self.task.await.expect("the elector task does not panic");
        Stopped {
            identity: self.identity,
            status: self.leadership.status(),
        }
    }

    /// Ends it without any release, as `kill -9` would.
    async fn kill(self) -> Stopped {
        self.task.abort();
        match self.task.await {
            Ok(()) => {}
            Err(error) if error.is_cancelled() => {}
            Err(error) => panic!("the elector task panicked: {error}"),
        }
        Stopped {
            identity: self.identity,
            status: self.leadership.status(),
        }
    }
}

/// Given three candidates with `timing`: waits until one leads; returns it and the standbys.
async fn three_candidates_one_leading(
    namespace: &TestNamespace,
    timing: LeaseTiming,
) -> (Candidate, Vec<Candidate>) {
    let mut candidates: Vec<Candidate> = (0..3)
        .map(|i| Candidate::start(namespace, timing, format!("candidate-{i}"), Faults::none()))
        .collect();
    wait_until(WAIT, "one candidate leads", || async {
        leaders(&candidates).len() == 1
    })
    .await;
    let leader = candidates.remove(leaders(&candidates)[0]);
    (leader, candidates)
}

fn leaders(candidates: &[Candidate]) -> Vec<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, candidate)| candidate.leadership.is_leader())
        .map(|(i, _)| i)
        .collect()
}

async fn lease_spec(namespace: &TestNamespace) -> LeaseSpec {
    namespace
        .api::<Lease>()
        .get(LEASE)
        .await
        .unwrap()
        .spec
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The store under test, with injected faults

/// Faults injected into one candidate's API calls.
#[derive(Clone)]
struct Faults {
    /// Random delays before the request and after the answer, as a slow API server or network
    /// would cause. A delay after the answer means the write was applied but the candidate may
    /// time out first, not knowing.
    delays: Option<Rng>,
    /// Every call hangs: a partitioned node.
    stalled: Arc<AtomicBool>,
}

impl Faults {
    fn none() -> Self {
        Self {
            delays: None,
            stalled: Arc::default(),
        }
    }

    fn delayed(rng: Rng) -> Self {
        Self {
            delays: Some(rng),
            stalled: Arc::default(),
        }
    }

    fn is_delayed(&self) -> bool {
        self.delays.is_some()
    }

    async fn before(&self, write: bool) {
        if self.stalled.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let Some(rng) = &self.delays else { return };
        let delay = match (write, rng.below(100)) {
            // Writes are often late: the window where a naive candidate overwrites others.
            (true, 0..=44) => rng.between(Duration::ZERO, Duration::from_millis(600)),
            // Sometimes too late for the renew deadline: the leader must give up in time.
            (true, 85..) => rng.between(Duration::from_millis(800), Duration::from_millis(2000)),
            (false, 90..) => rng.between(Duration::from_millis(200), Duration::from_millis(1500)),
            _ => rng.between(Duration::ZERO, Duration::from_millis(40)),
        };
        tokio::time::sleep(delay).await;
    }

    async fn after(&self) {
        let Some(rng) = &self.delays else { return };
        if rng.chance(0.3) {
            tokio::time::sleep(rng.between(Duration::ZERO, Duration::from_millis(400))).await;
        }
    }
}

struct TestStore {
    kube: KubeLeaseStore,
    api: Api<Lease>,
    writes: Writes,
    faults: Faults,
}

impl LeaseStore for TestStore {
    fn namespace(&self) -> &str {
        self.kube.namespace()
    }

    fn name(&self) -> &str {
        self.kube.name()
    }

    async fn get(&self) -> Result<Option<Lease>, Error> {
        self.faults.before(false).await;
        let result = self.kube.get().await;
        self.faults.after().await;
        result
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, Error> {
        self.faults.before(true).await;
        let result = self.kube.create(lease).await;
        self.faults.after().await;
        result
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, Error> {
        self.faults.before(true).await;
        let result = match self.writes {
            Writes::Conditional => self.kube.replace(lease).await,
            Writes::Unconditional => self.merge_patch(lease).await,
        };
        self.faults.after().await;
        result
    }
}

impl TestStore {
    /// What `kube-leader-election` 0.44 does: a merge patch of the spec, no resourceVersion.
    async fn merge_patch(&self, lease: &Lease) -> Result<Lease, Error> {
        let spec = lease.spec.clone().unwrap_or_default();
        let patch = serde_json::json!({
            "spec": {
                "holderIdentity": spec.holder_identity,
                "leaseDurationSeconds": spec.lease_duration_seconds,
                "acquireTime": spec.acquire_time,
                "renewTime": spec.renew_time,
                "leaseTransitions": spec.lease_transitions,
            }
        });
        self.api
            .patch(LEASE, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::LeaseCall {
                namespace: self.kube.namespace().to_owned(),
                name: LEASE.to_owned(),
                action: "merge-patching",
                source: Box::new(source),
            })
    }
}

// ---------------------------------------------------------------------------------------------
// Randomness: a seeded xorshift, shareable, so a failing run can be replayed.

#[derive(Clone)]
struct Rng(Arc<Mutex<u64>>);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(Arc::new(Mutex::new(seed.max(1))))
    }

    fn next(&self) -> u64 {
        let mut state = self.0.lock().unwrap();
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// An independent generator seeded from this one.
    fn fork(&self) -> Rng {
        Rng::new(self.next())
    }

    fn below(&self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    fn chance(&self, probability: f64) -> bool {
        (self.below(1_000_000) as f64) < probability * 1_000_000.0
    }

    fn between(&self, low: Duration, high: Duration) -> Duration {
        let span = (high - low).as_micros() as u64;
        low + Duration::from_micros(self.below(span + 1))
    }
}

fn seed_from_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}
