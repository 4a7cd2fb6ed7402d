//! Scenarios of the shard loop against an in-memory Lease store that applies writes as the API
//! server does (conditional on the resourceVersion, 409 and 404), on tokio's paused clock.
//! Every wait also checks the one rule that matters: no shard is acted on by two replicas at
//! the same moment.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::lease::decide::LeaseTiming;
use baton_core::lease::record::holder_of;
use baton_core::shards::{ShardId, shard_of};
use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::error::Error;

const TIMING: LeaseTiming = LeaseTiming {
    duration: Duration::from_secs(3),
    renew_deadline: Duration::from_secs(2),
    retry_period: Duration::from_millis(500),
};
/// Long, so that a write held back by a test is still pending when its term is over.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const NAMESPACE: &str = "baton";
/// How often a wait looks.
const LOOK: Duration = Duration::from_millis(50);

/// A write the store answered.
#[derive(Debug, Clone)]
struct Written {
    by: String,
    name: String,
    accepted: bool,
}

#[derive(Default)]
struct Stored {
    leases: BTreeMap<String, Lease>,
    next_version: u64,
    writes: Vec<Written>,
}

/// The API server's Leases, shared by the replicas of a test.
#[derive(Clone, Default)]
struct Server(Arc<Mutex<Stored>>);

impl Server {
    fn holder(&self, name: &str) -> Option<String> {
        let stored = self.0.lock().unwrap();
        stored
            .leases
            .get(name)
            .and_then(holder_of)
            .map(str::to_owned)
    }

    fn lease(&self, name: &str) -> Option<Lease> {
        self.0.lock().unwrap().leases.get(name).cloned()
    }

    fn writes(&self) -> Vec<Written> {
        self.0.lock().unwrap().writes.clone()
    }
}

/// One replica's view of the server: its writes wait while `hold` says so.
struct MemoryLeases {
    server: Server,
    by: String,
    hold: watch::Receiver<bool>,
}

impl MemoryLeases {
    async fn write(
        &self,
        name: &str,
        apply: impl FnOnce(&mut Stored) -> Result<Option<Lease>, Error>,
    ) -> Result<Option<Lease>, Error> {
        let mut hold = self.hold.clone();
        let _ = hold.wait_for(|held| !held).await;
        let mut stored = self.server.0.lock().unwrap();
        let result = apply(&mut stored);
        let accepted = result.is_ok();
        stored.writes.push(Written {
            by: self.by.clone(),
            name: name.to_owned(),
            accepted,
        });
        result
    }
}

fn conflict(name: &str, action: &'static str) -> Error {
    Error::LeaseConflict {
        namespace: NAMESPACE.to_owned(),
        name: name.to_owned(),
        action,
    }
}

fn not_found(name: &str, action: &'static str) -> Error {
    Error::LeaseNotFound {
        namespace: NAMESPACE.to_owned(),
        name: name.to_owned(),
        action,
    }
}

/// Stores `lease` under a new version.
fn store(stored: &mut Stored, mut lease: Lease) -> Lease {
    stored.next_version += 1;
    lease.metadata.resource_version = Some(stored.next_version.to_string());
    let name = lease.metadata.name.clone().expect("a named Lease");
    stored.leases.insert(name, lease.clone());
    lease
}

impl Leases for MemoryLeases {
    fn namespace(&self) -> &str {
        NAMESPACE
    }

    async fn list(&self) -> Result<Vec<Lease>, Error> {
        Ok(self
            .server
            .0
            .lock()
            .unwrap()
            .leases
            .values()
            .cloned()
            .collect())
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, Error> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        self.write(&name, |stored| {
            if stored.leases.contains_key(&name) {
                return Err(conflict(&name, "creating"));
            }
            Ok(Some(store(stored, lease.clone())))
        })
        .await
        .map(|lease| lease.expect("stored"))
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, Error> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let version = lease.metadata.resource_version.clone();
        self.write(&name, |stored| {
            let Some(version) = version.filter(|version| !version.is_empty()) else {
                return Err(Error::LeaseUnconditional {
                    namespace: NAMESPACE.to_owned(),
                    name: name.clone(),
                });
            };
            match stored.leases.get(&name) {
                None => Err(not_found(&name, "replacing")),
                Some(current) if current.metadata.resource_version != Some(version) => {
                    Err(conflict(&name, "replacing"))
                }
                Some(_) => Ok(Some(store(stored, lease.clone()))),
            }
        })
        .await
        .map(|lease| lease.expect("stored"))
    }

    async fn delete(&self, name: &str, resource_version: &str) -> Result<(), Error> {
        self.write(name, |stored| match stored.leases.get(name) {
            None => Err(not_found(name, "deleting")),
            Some(current)
                if current.metadata.resource_version.as_deref() != Some(resource_version) =>
            {
                Err(conflict(name, "deleting"))
            }
            Some(_) => {
                stored.leases.remove(name);
                Ok(None)
            }
        })
        .await
        .map(|_| ())
    }
}

/// A replica running its shard loop.
struct Replica {
    name: String,
    shards: Shards,
    hold: watch::Sender<bool>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Replica {
    fn start(server: &Server, name: &str, configured: u32) -> Self {
        let (hold, held) = watch::channel(false);
        let leases = MemoryLeases {
            server: server.clone(),
            by: name.to_owned(),
            hold: held,
        };
        let sharer = ShardLoop::with_leases(leases, configured, TIMING, name, REQUEST_TIMEOUT);
        let shards = sharer.shards();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(sharer.run(shutdown.clone()));
        Self {
            name: name.to_owned(),
            shards,
            hold,
            shutdown,
            task,
        }
    }

    fn held(&self) -> BTreeSet<u32> {
        self.shards.held().shards
    }
}

/// A namespace of each shard of `count`.
fn namespace_per_shard(count: u32) -> Vec<String> {
    (0..count)
        .map(|shard| {
            (0..)
                .map(|i| format!("namespace-{i}"))
                .find(|namespace| shard_of(namespace, count) == shard)
                .expect("some name hashes to every shard")
        })
        .collect()
}

/// Waits (on the paused clock) until `done`, checking at every look that no namespace may be
/// acted on by two replicas at once. Fails after two minutes of that clock.
async fn wait_until(replicas: &[&Replica], what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        for namespace in (0..32).map(|i| format!("namespace-{i}")) {
            let actors: Vec<&str> = replicas
                .iter()
                .filter(|replica| replica.shards.may_act(&namespace).is_some())
                .map(|replica| replica.name.as_str())
                .collect();
            assert!(actors.len() <= 1, "{namespace} acted on by {actors:?}");
        }
        if done() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(LOOK).await;
    }
}

/// Replicas `a` and `b` started together, once they hold two of 4 shards each.
async fn two_sharing_four(server: &Server) -> (Replica, Replica) {
    let a = Replica::start(server, "a", 4);
    let b = Replica::start(server, "b", 4);
    wait_until(&[&a, &b], "each holds two shards", || {
        a.held().len() == 2 && b.held().len() == 2
    })
    .await;
    (a, b)
}

fn lease_names(count: u32) -> Vec<String> {
    (0..count)
        .map(|shard| ShardId { count, shard }.lease_name())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_replica_alone_holds_every_shard_once_the_map_settled() {
    // Given an empty namespace and one replica configured with 4 shards
    let server = Server::default();
    let started = tokio::time::Instant::now();
    let alone = Replica::start(&server, "alone", 4);

    // When it has shared for a while
    wait_until(&[&alone], "it holds every shard", || {
        alone.held() == BTreeSet::from([0, 1, 2, 3])
    })
    .await;

    // then it created the map with its count and waited for it to settle (a lease duration)
    // before leading, holds every shard Lease, renews its presence, and may act on a
    // namespace of each shard.
    assert!(
        started.elapsed() >= TIMING.duration,
        "led after {:?}, before the map settled",
        started.elapsed()
    );
    let map = server.lease(SHARD_MAP).expect("the shard map");
    assert_eq!(
        map.metadata.annotations.unwrap()[SHARD_COUNT_ANNOTATION],
        "4"
    );
    assert_eq!(holder_of(&server.lease(SHARD_MAP).unwrap()), None);
    for name in lease_names(4) {
        assert_eq!(server.holder(&name).as_deref(), Some("alone"), "{name}");
    }
    assert_eq!(
        server.holder(&presence_lease_name("alone")).as_deref(),
        Some("alone")
    );
    for namespace in namespace_per_shard(4) {
        let may_act = alone.shards.may_act(&namespace).expect(&namespace);
        let left = may_act().expect("the term lasts");
        assert!(left <= TIMING.renew_deadline, "{left:?}");
    }
    let status = alone.shards.status();
    assert_eq!(status.count, Some(4));
    assert!(status.settled);
    assert!(status.others.is_empty());
}

#[tokio::test(start_paused = true)]
async fn two_replicas_split_four_shards_two_and_two() {
    // Given two replicas started together
    // When they have shared for a while
    let server = Server::default();
    let (a, b) = two_sharing_four(&server).await;

    // then they hold disjoint halves, each Lease names its holder, and each sees the other.
    let (held_a, held_b) = (a.held(), b.held());
    assert!(held_a.is_disjoint(&held_b), "{held_a:?} {held_b:?}");
    for (shard, name) in lease_names(4).iter().enumerate() {
        let owner = if held_a.contains(&(shard as u32)) {
            "a"
        } else {
            "b"
        };
        assert_eq!(server.holder(name).as_deref(), Some(owner), "{name}");
    }
    assert_eq!(a.shards.status().others, BTreeSet::from(["b".to_owned()]));
    assert_eq!(b.shards.status().others, BTreeSet::from(["a".to_owned()]));
    assert_eq!(*a.shards.held_changes().borrow(), a.shards.held());
}

#[tokio::test(start_paused = true)]
async fn a_stopped_replicas_shards_are_taken_within_about_a_lease_duration() {
    // Given two replicas sharing 4 shards 2/2
    let server = Server::default();
    let (a, b) = two_sharing_four(&server).await;
    let held_by_a = a.held();

    // When a stops without a word (no renewal, no release)
    a.task.abort();
    let stopped = tokio::time::Instant::now();
    wait_until(&[&b], "b holds every shard", || b.held().len() == 4).await;

    // then b takes a's shards once their Leases went a lease duration unchanged, not before
    // (a renewed at most a retry period before it stopped), and within a few rounds after.
    let took = stopped.elapsed();
    assert!(
        took + TIMING.retry_period >= TIMING.duration,
        "took over after {took:?}: a's Leases could not have expired"
    );
    assert!(
        took <= TIMING.duration + TIMING.retry_period * 3,
        "took over after {took:?}"
    );
    assert!(a.shards.may_act(&namespace_per_shard(4)[0]).is_none());
    for shard in held_by_a {
        let name = ShardId { count: 4, shard }.lease_name();
        assert_eq!(server.holder(&name).as_deref(), Some("b"), "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_replica_paused_between_deciding_and_writing_never_acts_past_its_term() {
    // Given a replica alone holding every shard, and a pass that started on a namespace
    let server = Server::default();
    let a = Replica::start(&server, "a", 4);
    wait_until(&[&a], "a holds every shard", || a.held().len() == 4).await;
    let namespace = &namespace_per_shard(4)[0];
    let pass = a.shards.may_act(namespace).expect("a may act");

    // When a is stopped after reading the Leases and before writing (its writes held back),
    // and another replica comes
    a.hold.send_replace(true);
    let b = Replica::start(&server, "b", 4);
    let paused = tokio::time::Instant::now();

    // then a's pass stops by a's own clock within its renew deadline, and b leads every shard
    // only after it did (the wait checks no two actors at every look)
    wait_until(&[&a, &b], "a's pass has stopped", || pass().is_none()).await;
    assert!(
        paused.elapsed() <= TIMING.renew_deadline + LOOK,
        "stopped {:?} after the pause (the wait looks every {LOOK:?})",
        paused.elapsed()
    );
    wait_until(&[&a, &b], "b holds every shard", || b.held().len() == 4).await;
    assert!(a.shards.may_act(namespace).is_none());

    // and when a wakes, its writes decided before are refused (conditional on what it read),
    // it leads nothing on them, then the two share again; the pass from the old term never
    // acts again, even once a leads that shard in a new term.
    let before_waking = server.writes().len();
    a.hold.send_replace(false);
    wait_until(&[&a, &b], "they share 2/2 again", || {
        a.held().len() == 2 && b.held().len() == 2
    })
    .await;
    let refused_shard_writes_of_a = server.writes()[before_waking..]
        .iter()
        .filter(|write| write.by == "a" && !write.accepted)
        .filter(|write| shard_of_lease_name(&write.name).is_some())
        .count();
    assert!(
        refused_shard_writes_of_a >= 1,
        "a's stale renewals were refused: {:?}",
        &server.writes()[before_waking..]
    );
    assert!(pass().is_none(), "the old term's pass stays stopped");
}

#[tokio::test(start_paused = true)]
async fn replicas_configured_differently_share_by_the_maps_count_and_a_shutdown_releases() {
    // Given a replica that created the map with 4 shards, then one configured with 6
    let server = Server::default();
    let a = Replica::start(&server, "a", 4);
    wait_until(&[&a], "a holds every shard", || a.held().len() == 4).await;
    let b = Replica::start(&server, "b", 6);

    // When they have shared for a while
    wait_until(&[&a, &b], "each holds two of 4 shards", || {
        a.held().len() == 2 && b.held().len() == 2
    })
    .await;

    // then both share by the map's 4 and no Lease of 6 shards exists
    assert_eq!(b.shards.held().count, 4);
    assert_eq!(b.shards.status().configured, 6);
    assert!(
        server
            .lease(&ShardId { count: 6, shard: 0 }.lease_name())
            .is_none()
    );

    // and when b shuts down, it stops acting and releases its Leases, so a takes them at its
    // next look rather than a lease duration later.
    let released_at = tokio::time::Instant::now();
    b.shutdown.cancel();
    b.task.await.expect("b's loop ends");
    assert!(b.shards.held().shards.is_empty());
    assert_eq!(server.holder(&presence_lease_name("b")), None);
    wait_until(&[&a], "a holds every shard", || a.held().len() == 4).await;
    assert!(
        released_at.elapsed() < TIMING.duration,
        "took {:?}",
        released_at.elapsed()
    );
}

#[test]
fn only_shard_lease_names_parse_as_shards() {
    assert_eq!(
        shard_of_lease_name("baton-shard-3-of-6"),
        Some(ShardId { shard: 3, count: 6 })
    );
    for other in [
        SHARD_MAP,
        "baton-shard-6-of-6",
        "baton-shard-03-of-6",
        "baton-shard-x-of-6",
        "baton-replica-a",
        "baton-controller",
    ] {
        assert_eq!(shard_of_lease_name(other), None, "{other}");
    }
}

/// Sets the shard map's count annotation to `count`, as someone editing it by hand would.
fn edit_map(server: &Server, count: &str) {
    let mut stored = server.0.lock().unwrap();
    let mut map = stored.leases[SHARD_MAP].clone();
    map.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(SHARD_COUNT_ANNOTATION.to_owned(), count.to_owned());
    store(&mut stored, map);
}

#[tokio::test(start_paused = true)]
async fn a_map_edited_by_hand_is_shared_by_once_settled_and_one_naming_no_count_stops_all() {
    // Given two replicas sharing 4 shards 2/2, their rounds half a retry period apart (so one
    // reads a changed map while the other still acts on the one before)
    let server = Server::default();
    let a = Replica::start(&server, "a", 4);
    tokio::time::sleep(TIMING.retry_period / 2).await;
    let b = Replica::start(&server, "b", 4);
    wait_until(&[&a, &b], "each holds two shards", || {
        a.held().len() == 2 && b.held().len() == 2
    })
    .await;

    // When someone edits the map to 6 shards
    edit_map(&server, "6");

    // then they share by 6 (3 each) once it has settled, the Leases of 4 shards released, and
    // no namespace is acted on under both counts (the wait checks it at every look)
    wait_until(&[&a, &b], "each holds three of 6 shards", || {
        a.shards.held().count == 6
            && b.shards.held().count == 6
            && a.held().len() == 3
            && b.held().len() == 3
    })
    .await;
    for name in lease_names(4) {
        assert_eq!(server.holder(&name), None, "{name} released");
    }

    // and when the map is edited to name no count, neither acts on any shard (they could not
    // agree on one) and each says it shares by none.
    edit_map(&server, "many");
    wait_until(&[&a, &b], "neither holds a shard", || {
        a.held().is_empty() && b.held().is_empty()
    })
    .await;
    assert_eq!(a.shards.status().count, None);
    assert_eq!(b.shards.held(), HeldShards::default());
}
