//! Three baton-controller replicas sharing 6 shards through Leases on the real API server:
//! every shard Lease held by exactly one live replica, two each; a killed replica's shards
//! taken over once its Leases expire; a replica stopped (SIGSTOP) past its lease loses its
//! shards, and when it wakes it takes none back by a stale write, only as they are handed over.
//!
//! The groups still follow the single leader (namespaces are not served by shard yet): these
//! scenarios read the shard Leases and the replicas' metrics, nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use baton_e2e::controller_support::Controller;
use baton_e2e::shard_support::{Holding, Replica, ShardLeaseHistory};
use baton_e2e::{ControlPlane, TestNamespace, wait_until};
use k8s_openapi::api::coordination::v1::Lease;

const TIMEOUT: Duration = Duration::from_secs(120);
/// The lease timings `Controller::start` configures.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
const SHARDS: u32 = 6;

/// Three replicas sharing `SHARDS` shards in a namespace of their own (it is their system
/// namespace too, so the Leases are there).
async fn three_replicas(prefix: &str) -> (TestNamespace, Vec<Replica>) {
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, prefix).await;
    let mut replicas = Vec::new();
    for index in 0..3 {
        let host = format!("{prefix}-replica-{index}");
        let controller = Controller::start(
            control_plane,
            namespace.name(),
            &[
                ("BATON_CONTROLLER__SHARDS", "6"),
                ("HOSTNAME", host.as_str()),
            ],
        )
        .await;
        replicas.push(Replica { controller, host });
    }
    (namespace, replicas)
}

/// The holder of each shard Lease of `SHARDS` (`None`: missing or released).
async fn shard_holders(namespace: &TestNamespace) -> Vec<Option<String>> {
    let leases = namespace.api::<Lease>();
    let mut holders = Vec::new();
    for shard in 0..SHARDS {
        let lease = leases
            .get_opt(&format!("baton-shard-{shard}-of-{SHARDS}"))
            .await
            .expect("reading a shard Lease");
        holders.push(
            lease
                .and_then(|lease| lease.spec?.holder_identity)
                .filter(|holder| !holder.is_empty()),
        );
    }
    holders
}

/// Whether every shard Lease is held by one of `live` and each of them holds `each`, by the
/// Leases and by each replica's own count of what it leads.
async fn shared_evenly(namespace: &TestNamespace, live: &[&Replica], each: usize) -> bool {
    let holders = shard_holders(namespace).await;
    let mut per_replica = vec![0; live.len()];
    for holder in &holders {
        let Some(holder) = holder else { return false };
        let Some(index) = live.iter().position(|replica| replica.is(holder)) else {
            return false;
        };
        per_replica[index] += 1;
    }
    if per_replica.iter().any(|held| *held != each) {
        return false;
    }
    for replica in live {
        let held = replica
            .controller
            .metric("baton_controller_shards_held")
            .await;
        if held != Some(each as f64) {
            return false;
        }
    }
    true
}

/// The shards `replica` holds by the Leases.
async fn held_by(namespace: &TestNamespace, replica: &Replica) -> BTreeSet<usize> {
    shard_holders(namespace)
        .await
        .iter()
        .enumerate()
        .filter(|(_, holder)| holder.as_deref().is_some_and(|holder| replica.is(holder)))
        .map(|(shard, _)| shard)
        .collect()
}

#[tokio::test]
async fn three_replicas_share_six_shards_and_a_killed_ones_are_taken_once_its_leases_expire() {
    // Given three replicas configured with 6 shards
    let (namespace, mut replicas) = three_replicas("shards-kill").await;

    // Then every shard Lease is held by exactly one of them, two each, and the map says 6
    wait_until(TIMEOUT, "the three hold two shards each", || async {
        shared_evenly(&namespace, &replicas.iter().collect::<Vec<_>>(), 2).await
    })
    .await;
    let map = namespace
        .api::<Lease>()
        .get("baton-shard-map")
        .await
        .expect("the shard map");
    assert_eq!(
        map.metadata.annotations.unwrap_or_default()["baton.dev/shards"],
        "6"
    );
    for replica in &replicas {
        assert_eq!(
            replica.controller.metric("baton_controller_shards").await,
            Some(6.0)
        );
    }

    // When one is killed (no release)
    let killed = replicas.remove(0);
    let its_shards = held_by(&namespace, &killed).await;
    let mut process = killed.controller.process;
    process.signal("KILL").unwrap();
    let at = Instant::now();
    let _ = process.wait().await;

    // Then the other two hold three each, having taken its two once its Leases went a lease
    // duration unchanged (not before: it renewed at most a retry period before it died), and
    // within a lease duration after that.
    wait_until(TIMEOUT, "the two others hold three shards each", || async {
        shared_evenly(&namespace, &replicas.iter().collect::<Vec<_>>(), 3).await
    })
    .await;
    let took = at.elapsed();
    assert!(
        took + RETRY_PERIOD >= LEASE_DURATION,
        "its shards were taken after {took:?}, before its Leases could expire"
    );
    assert!(
        took <= LEASE_DURATION * 2,
        "its shards were taken after {took:?}"
    );
    let holders = shard_holders(&namespace).await;
    for shard in its_shards {
        let holder = holders[shard].as_deref().expect("held");
        assert!(
            replicas.iter().any(|replica| replica.is(holder)),
            "shard {shard} held by {holder}"
        );
    }
}

#[tokio::test]
async fn a_replica_stopped_past_its_lease_loses_its_shards_and_takes_none_back_by_a_stale_write() {
    // Given three replicas sharing 6 shards, two each
    let (namespace, replicas) = three_replicas("shards-stop").await;
    wait_until(TIMEOUT, "the three hold two shards each", || async {
        shared_evenly(&namespace, &replicas.iter().collect::<Vec<_>>(), 2).await
    })
    .await;
    let history = ShardLeaseHistory::watch(&namespace);
    let stopped = &replicas[0];
    let others: Vec<&Replica> = replicas[1..].iter().collect();
    let its_shards = held_by(&namespace, stopped).await;

    // When one is stopped (SIGSTOP) until the two others hold every shard (past its lease)
    stopped.controller.process.signal("STOP").unwrap();
    let at = Instant::now();
    wait_until(TIMEOUT, "the two others hold three shards each", || async {
        shared_evenly(&namespace, &others, 3).await
    })
    .await;
    assert!(
        at.elapsed() + RETRY_PERIOD >= LEASE_DURATION,
        "taken after {:?}, before its Leases could expire",
        at.elapsed()
    );

    // and then woken
    stopped.controller.process.signal("CONT").unwrap();

    // Then the three share two each again, and every shard Lease the woken replica holds came
    // to it released by the replica that had taken it over: it wrote none over another's
    // holding (a stale renewal, conditional on a version from before its stop, is refused).
    wait_until(TIMEOUT, "the three hold two shards each again", || async {
        shared_evenly(&namespace, &replicas.iter().collect::<Vec<_>>(), 2).await
    })
    .await;
    let seen: BTreeMap<String, Vec<Option<String>>> = history
        .seen()
        .into_iter()
        .map(|(name, states)| (name, holders(states)))
        .collect();
    for shard in &its_shards {
        let name = format!("baton-shard-{shard}-of-{SHARDS}");
        let holders = &seen[&name];
        assert!(
            holders
                .iter()
                .any(|holder| holder.as_deref().is_some_and(|h| !stopped.is(h))),
            "{name} was taken over while it was stopped: {holders:?}"
        );
    }
    for (name, holders) in &seen {
        for pair in holders.windows(2) {
            if let [before, Some(after)] = pair
                && stopped.is(after)
            {
                assert_eq!(
                    before, &None,
                    "{name} went to the woken replica from another's holding: {holders:?}"
                );
            }
        }
    }
}

/// The holders a shard Lease went through, in order, from its states (a holder taking it again
/// with no release seen in between counts once).
fn holders(states: Vec<Option<Holding>>) -> Vec<Option<String>> {
    let mut holders = Vec::new();
    for holder in states
        .into_iter()
        .map(|state| state.map(|holding| holding.holder))
    {
        if holders.last() != Some(&holder) {
            holders.push(holder);
        }
    }
    holders
}
