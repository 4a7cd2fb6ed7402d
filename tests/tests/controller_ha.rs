//! Several baton-controller replicas: exactly one acts, and the rollout survives losing it.
//! One replica outlives an API server outage mid-rollout; a fresh install leads at once.

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use baton_e2e::controller_support::{
    Controller, create_ready_group, event_reporters, roll_out, rollout_state, wait_rollout_complete,
};
use baton_e2e::pod_simulator::PodEvent;
use baton_e2e::timeline::{Zone, check_rollout_guarantees};
use baton_e2e::{ControlPlane, PodSimulator, SimulatorOptions, TestNamespace, wait_until};

const TIMEOUT: Duration = Duration::from_secs(120);
/// The lease duration `Controller::start` configures.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);

async fn create_group(namespace: &TestNamespace, zones: &[&str], replicas: i32) -> Vec<String> {
    create_ready_group(&namespace.client(), namespace.name(), zones, replicas).await
}

/// Waits until exactly one of `controllers` reports leading and returns its index.
async fn the_leader(controllers: &[&Controller]) -> usize {
    wait_until(TIMEOUT, "one controller leads", || async {
        let mut leaders = 0;
        for controller in controllers {
            leaders += usize::from(controller.is_leader().await);
        }
        leaders == 1
    })
    .await;
    for (index, controller) in controllers.iter().enumerate() {
        if controller.is_leader().await {
            return index;
        }
    }
    unreachable!("a leader was seen just before")
}

/// Whether `controller` logged that it became leader `how` (its lease decision: `Create`,
/// `Acquire(Released)`, `Acquire(Expired …)`).
fn became_leader(controller: &Controller, how: &str) -> bool {
    controller
        .process
        .output()
        .lines()
        .any(|line| line.contains("became leader") && line.contains(how))
}

/// Does what Kubernetes does for a controller that exited (a crash: a lost lease no longer
/// exits): start a new one.
async fn restart_exited(
    controllers: &mut Vec<Controller>,
    control_plane: &ControlPlane,
    namespace: &str,
    config: &[(&str, &str)],
) {
    let before = controllers.len();
    controllers.retain_mut(|controller| !controller.process.has_exited());
    for _ in controllers.len()..before {
        controllers.push(Controller::start(control_plane, namespace, config).await);
    }
}

/// Two controller replicas over a group of 4-pod zones whose rollout the leader has started.
struct TwoReplicas {
    namespace: TestNamespace,
    _simulator: PodSimulator,
    names: Vec<String>,
    leading: Controller,
    standby: Controller,
}

impl TwoReplicas {
    async fn mid_rollout(prefix: &str, zones: &[&str]) -> Self {
        let control_plane = ControlPlane::shared().await;
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let options = SimulatorOptions {
            ready_after: Duration::from_millis(400),
        };
        let simulator = PodSimulator::start(namespace.client(), namespace.name(), options).await;
        let first = Controller::start(control_plane, namespace.name(), &[]).await;
        let second = Controller::start(control_plane, namespace.name(), &[]).await;
        let names = create_group(&namespace, zones, 4).await;
        let leader = the_leader(&[&first, &second]).await;
        let (leading, standby) = if leader == 0 {
            (first, second)
        } else {
            (second, first)
        };
        roll_out(&namespace.client(), namespace.name(), &names, "v2").await;
        wait_until(TIMEOUT, "the leader deleted a pod", || async {
            !event_reporters(&namespace.client(), namespace.name(), "RolloutPodDeleted")
                .await
                .is_empty()
        })
        .await;
        Self {
            namespace,
            _simulator: simulator,
            names,
            leading,
            standby,
        }
    }
}

#[tokio::test]
async fn only_the_leader_acts_and_sigterm_hands_over_at_once() {
    // Given two controller replicas and a ready group, mid-rollout
    // When the leader gets SIGTERM once it has deleted a pod
    let TwoReplicas {
        namespace,
        names,
        mut leading,
        standby,
        _simulator,
    } = TwoReplicas::mid_rollout("ha-term", &["a", "b", "c"]).await;
    let reporters_before =
        event_reporters(&namespace.client(), namespace.name(), "RolloutPodDeleted").await;
    assert_eq!(
        reporters_before.len(),
        1,
        "only the leader acted: {reporters_before:?}"
    );
    leading.process.signal("TERM").unwrap();
    let terminated = Instant::now();
    assert_eq!(
        leading.process.wait().await.unwrap(),
        Some(0),
        "a clean shutdown exits 0"
    );
    let output = leading.process.output();
    assert!(
        output.contains("released the lease for a standby"),
        "{output}"
    );

    // Then the standby takes the released lease over (it does not wait for it to expire, which
    // would be taking over an expired one), and finishes the rollout
    wait_until(
        TIMEOUT,
        "the standby took the released lease over",
        || async { became_leader(&standby, "Acquire(Released)") },
    )
    .await;
    assert!(standby.is_leader().await, "the standby leads");
    eprintln!("the standby led {:?} after SIGTERM", terminated.elapsed());
    wait_rollout_complete(&namespace.client(), namespace.name(), &names).await;
    // (Events are published off the reconcile's path: wait for the standby's to land)
    wait_until(TIMEOUT, "the standby's deletions are reported", || async {
        event_reporters(&namespace.client(), namespace.name(), "RolloutPodDeleted")
            .await
            .len()
            >= 2
    })
    .await;
    let reporters_after =
        event_reporters(&namespace.client(), namespace.name(), "RolloutPodDeleted").await;
    assert_eq!(
        reporters_after.len(),
        2,
        "the standby finished the rollout: {reporters_after:?}"
    );
}

#[tokio::test]
async fn a_killed_leader_is_replaced_only_after_its_lease_expires() {
    // Given two controller replicas and a ready group, mid-rollout
    // When the leader is killed with SIGKILL (no release)
    let TwoReplicas {
        namespace,
        names,
        mut leading,
        standby,
        _simulator,
    } = TwoReplicas::mid_rollout("ha-kill", &["a", "b"]).await;
    leading.process.signal("KILL").unwrap();
    let killed = Instant::now();
    let _ = leading.process.wait().await;

    // Then the standby waits out the lease (not a moment less: a lower bound), takes the
    // expired lease over, and finishes the rollout
    wait_until(
        TIMEOUT,
        "the standby took the expired lease over",
        || async { became_leader(&standby, "Acquire(Expired") },
    )
    .await;
    let takeover = killed.elapsed();
    assert!(
        takeover + RETRY_PERIOD >= LEASE_DURATION,
        "took over after {takeover:?}: before the lease ({LEASE_DURATION:?}) could have expired"
    );
    wait_rollout_complete(&namespace.client(), namespace.name(), &names).await;
}

#[tokio::test]
async fn leaders_killed_and_restarted_for_a_minute_never_break_the_rollout_guarantees() {
    // Given three controller replicas with short leases and a group of 3 zones × 6 pods
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "ha-race").await;
    let options = SimulatorOptions {
        ready_after: Duration::from_millis(300),
    };
    let simulator = PodSimulator::start(namespace.client(), namespace.name(), options).await;
    let short_lease = [
        ("BATON_CONTROLLER__LEASE__DURATION", "2s"),
        ("BATON_CONTROLLER__LEASE__RENEW_DEADLINE", "1400ms"),
        ("BATON_CONTROLLER__LEASE__RETRY_PERIOD", "300ms"),
    ];
    let mut controllers = Vec::new();
    for _ in 0..3 {
        controllers.push(Controller::start(control_plane, namespace.name(), &short_lease).await);
    }
    let names = create_group(&namespace, &["a", "b", "c"], 6).await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 6, 1)).collect();
    let from = Instant::now();

    // When rollouts keep coming for a minute while the leader is killed or stopped every few
    // seconds and a fresh replica takes its place
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut version = 2;
    let mut round = 0u64;
    while Instant::now() < deadline {
        restart_exited(
            &mut controllers,
            control_plane,
            namespace.name(),
            &short_lease,
        )
        .await;
        roll_out(
            &namespace.client(),
            namespace.name(),
            &names,
            &format!("v{version}"),
        )
        .await;
        version += 1;
        let refs: Vec<&Controller> = controllers.iter().collect();
        let leader = the_leader(&refs).await;
        // Let it work a little, then take it away (alternating a clean stop and a kill).
        tokio::time::sleep(Duration::from_millis(700 + (round % 4) * 300)).await;
        let mut leaving = controllers.remove(leader);
        leaving
            .process
            .signal(if round.is_multiple_of(2) {
                "KILL"
            } else {
                "TERM"
            })
            .unwrap();
        let _ = leaving.process.wait().await;
        controllers.push(Controller::start(control_plane, namespace.name(), &short_lease).await);
        round += 1;
    }

    restart_exited(
        &mut controllers,
        control_plane,
        namespace.name(),
        &short_lease,
    )
    .await;

    // Then the last rollout completes and, at every moment, at most one zone was unavailable
    // and never more than one pod of it: two controllers acting at once would break that
    wait_rollout_complete(&namespace.client(), namespace.name(), &names).await;
    check_rollout_guarantees(&simulator.timeline(), &zones, from).unwrap();
    assert!(round >= 5, "the leader changed {round} times");
}

#[tokio::test]
async fn a_controller_outlives_a_15s_api_server_outage_mid_rollout_and_finishes_it() {
    // Given a control plane of its own, one controller and a ready group of 3 zones × 3 pods,
    // whose rollout the controller has started
    let control_plane = ControlPlane::dedicated().await;
    let namespace = TestNamespace::create(&control_plane, "ha-outage").await;
    let options = SimulatorOptions {
        ready_after: Duration::from_millis(300),
    };
    let simulator = PodSimulator::start(namespace.client(), namespace.name(), options).await;
    let mut controller = Controller::start(&control_plane, namespace.name(), &[]).await;
    let pid = controller.process.pid();
    let names = create_group(&namespace, &["a", "b", "c"], 3).await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
    wait_until(TIMEOUT, "the controller leads", || controller.is_leader()).await;
    let mut old_revisions = BTreeMap::new();
    for name in &names {
        let state = rollout_state(&namespace.client(), namespace.name(), name).await;
        old_revisions.insert(name.clone(), state.update_revision);
    }
    // and whose pod ingester-zone-a-0 is not ready until the API server is back (baton
    // replaces it first, and its replacement stays not ready): the outage then starts while
    // the rollout waits, never while a deletion is in flight (a request cut by the outage
    // leaves baton unsure it happened, and the count below could not be exact)
    simulator.hold_not_ready("ingester-zone-a-0").await;
    let from = Instant::now();
    roll_out(&namespace.client(), namespace.name(), &names, "v2").await;
    wait_until(
        TIMEOUT,
        "the controller replaced the pod that is not ready",
        || async {
            !event_reporters(
                &namespace.client(),
                namespace.name(),
                "UnavailablePodReplaced",
            )
            .await
            .is_empty()
        },
    )
    .await;

    // When the API server is down for 15 s
    control_plane.stop_apiserver().await.unwrap();
    let stopped = Instant::now();
    wait_until(TIMEOUT, "the controller stops leading", || async {
        controller.metric("baton_leader").await == Some(0.0)
    })
    .await;
    let stopped_leading = stopped.elapsed();
    assert!(
        controller.metric("baton_leader_terms_total").await == Some(1.0),
        "one term so far"
    );
    // The outage's length is the scenario's input, not a wait for a condition.
    tokio::time::sleep_until((stopped + OUTAGE).into()).await;
    control_plane.start_apiserver().await.unwrap();
    let back = Instant::now();
    simulator.release("ingester-zone-a-0").await;

    // Then the same process leads again, in a second term
    wait_until(TIMEOUT, "the controller leads again", || {
        controller.is_leader()
    })
    .await;
    eprintln!(
        "stopped leading {stopped_leading:?} into the outage; leads again {:?} after the API server was back",
        back.elapsed()
    );
    assert!(
        !controller.process.has_exited(),
        "{}",
        controller.process.output()
    );
    assert_eq!(controller.process.pid(), pid, "the same process");
    assert_eq!(
        controller.metric("baton_leader_terms_total").await,
        Some(2.0),
        "it lost its term in the outage and won a new one"
    );

    // And the rollout completes with every guarantee kept and each old pod deleted exactly once
    wait_rollout_complete(&namespace.client(), namespace.name(), &names).await;
    eprintln!(
        "the rollout completed {:?} after the API server was back",
        back.elapsed()
    );
    let timeline = simulator.timeline();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();
    let deleted: Vec<_> = timeline
        .iter()
        .filter(|transition| transition.at >= from && transition.event == PodEvent::Terminating)
        .collect();
    for transition in &deleted {
        let owner = transition.statefulset.clone().unwrap_or_default();
        assert_eq!(
            transition.revision.as_ref(),
            old_revisions.get(&owner),
            "only old pods are deleted: {} of {owner}",
            transition.pod
        );
    }
    let mut uids: Vec<&str> = deleted.iter().map(|t| t.uid.as_str()).collect();
    uids.sort_unstable();
    uids.dedup();
    assert_eq!(
        uids.len(),
        deleted.len(),
        "a pod deleted twice: {deleted:#?}"
    );
    // The watch may miss a deletion made while it reconnects; baton's own count may not.
    let deletions: f64 = controller
        .metrics()
        .await
        .lines()
        .filter(|line| line.starts_with("baton_rollout_pod_deletions_total{"))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(
        deletions, 9.0,
        "each of the 9 old pods deleted once, no more"
    );
    let output = controller.process.output();
    assert!(
        output.contains("lost the leadership: every action stops now; campaigning again"),
        "{output}"
    );
}

/// How long the API server is down in the outage scenario.
const OUTAGE: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_fresh_install_leads_at_once_and_a_restarted_replica_waits_out_the_old_lease() {
    // Given a namespace without a Lease and production-like lease timings
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "ha-fresh").await;
    let lease = [
        ("BATON_CONTROLLER__LEASE__DURATION", "8s"),
        ("BATON_CONTROLLER__LEASE__RENEW_DEADLINE", "6s"),
        ("BATON_CONTROLLER__LEASE__RETRY_PERIOD", "1s"),
    ];
    let duration = Duration::from_secs(8);

    // When a controller starts (its binary built beforehand: the build is not the start)
    tokio::task::spawn_blocking(|| baton_e2e::process::workspace_binary("baton-controller"))
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let mut first = Controller::start(control_plane, namespace.name(), &lease).await;

    // Then it creates the Lease and leads, without standing by first (no wait for a Lease
    // nobody ever held; how soon is in docs/benchmarks.md, "Start → first pod deleted")
    wait_until(
        TIMEOUT,
        "the fresh install created the lease and leads",
        || async { became_leader(&first, "Create") },
    )
    .await;
    eprintln!(
        "a fresh install led {:?} after it was started",
        started.elapsed()
    );
    let output = first.process.output();
    assert!(!output.contains("standing by"), "{output}");

    // When it is killed (no release) and a replica with a new identity starts at once
    first.process.signal("KILL").unwrap();
    let killed = Instant::now();
    let _ = first.process.wait().await;
    let second = Controller::start(control_plane, namespace.name(), &lease).await;

    // Then the new replica stands by until the old lease expired, then leads
    wait_until(TIMEOUT, "the new replica leads", || second.is_leader()).await;
    let takeover = killed.elapsed();
    eprintln!("the new identity led {takeover:?} after the kill");
    assert!(
        takeover + Duration::from_secs(1) >= duration,
        "the new identity led {takeover:?} after the kill, before the old lease ({duration:?}) could expire"
    );
    assert!(second.process.output().contains("standing by"));
}
