//! Several baton-controller replicas: exactly one acts, and the rollout survives losing it.

use std::time::{Duration, Instant};

use baton_e2e::controller_support::{
    Controller, event_reporters, roll_out, wait_group_ready, wait_rollout_complete,
};
use baton_e2e::fixtures::rollout_group;
use baton_e2e::timeline::{Zone, check_rollout_guarantees};
use baton_e2e::{ControlPlane, PodSimulator, SimulatorOptions, TestNamespace, wait_until};

const TIMEOUT: Duration = Duration::from_secs(120);
/// The lease duration `Controller::start` configures.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);

async fn create_group(namespace: &TestNamespace, zones: &[&str], replicas: i32) -> Vec<String> {
    let mut names = Vec::new();
    for fixture in rollout_group("ingester", zones, replicas) {
        let created = fixture.create(&namespace.client(), namespace.name()).await;
        names.push(created.metadata.name.unwrap_or_default());
    }
    wait_group_ready(&namespace.client(), namespace.name(), &names).await;
    names
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

/// Does what Kubernetes does for a controller that exited (a lost lease exits non-zero): start
/// a new one.
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

    // Then the standby takes over well before the lease would have expired, and finishes
    wait_until(TIMEOUT, "the standby leads", || standby.is_leader()).await;
    let takeover = terminated.elapsed();
    assert!(
        takeover < LEASE_DURATION,
        "the released lease was taken over in {takeover:?}, not after expiry"
    );
    wait_rollout_complete(&namespace.client(), namespace.name(), &names).await;
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

    // Then the standby waits out the lease, takes over, and finishes the rollout
    wait_until(TIMEOUT, "the standby leads", || standby.is_leader()).await;
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
