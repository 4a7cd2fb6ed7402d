use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::*;
use crate::lease::decide::LeaseRecord;

fn replicas(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

fn loads(owners: &[Option<String>]) -> BTreeMap<String, u32> {
    let mut loads = BTreeMap::new();
    for owner in owners.iter().flatten() {
        *loads.entry(owner.clone()).or_insert(0) += 1;
    }
    loads
}

#[test]
fn a_namespaces_shard_is_fixed_forever_and_spreads_namespaces_evenly() {
    // Pinned: every replica of every version must compute these (FNV-1a 64 of the name).
    assert_eq!(shard_of("mimir", 16), shard_of("mimir", 16));
    let pinned: Vec<u32> = ["mimir", "loki", "kafka", "default"]
        .iter()
        .map(|namespace| shard_of(namespace, 32))
        .collect();
    assert_eq!(pinned, PINNED_SHARDS_OF_32);
    assert_eq!(shard_of("anything", 1), 0);
    assert_eq!(shard_of("anything", 0), 0, "a count of 0 is read as 1");
    // 500 namespaces named as a platform names them, over 16 shards: none empty, none above
    // twice the mean
    let mut counts = [0u32; 16];
    for index in 0..500 {
        counts[shard_of(&format!("tenant-{index}"), 16) as usize] += 1;
    }
    let mean = 500 / 16;
    assert!(
        counts.iter().all(|count| *count > 0 && *count <= 2 * mean),
        "{counts:?}"
    );
}

/// `shard_of` of mimir, loki, kafka and default among 32: FNV-1a 64 of the name modulo 32
/// (checked against an implementation of the published algorithm outside Rust).
const PINNED_SHARDS_OF_32: [u32; 4] = [17, 4, 1, 30];

#[test]
fn every_shard_has_one_owner_and_loads_differ_by_at_most_one() {
    for replica_count in 1..=7usize {
        let names: Vec<String> = (0..replica_count)
            .map(|index| format!("baton-controller-{index}"))
            .collect();
        let set: BTreeSet<String> = names.iter().cloned().collect();
        for count in [1u32, 2, 3, 8, 16, 31, 64] {
            let owners = assignment(count, &set);
            assert_eq!(owners.len(), count as usize);
            assert!(
                owners.iter().all(Option::is_some),
                "{count} shards, {replica_count} replicas"
            );
            let loads = loads(&owners);
            let most = loads.values().max().copied().unwrap_or(0);
            let fewest = if loads.len() < replica_count {
                0
            } else {
                loads.values().min().copied().unwrap_or(0)
            };
            assert!(
                most - fewest <= 1,
                "{count} shards over {replica_count} replicas: {loads:?}"
            );
            assert_eq!(loads.values().sum::<u32>(), count);
        }
    }
    assert_eq!(assignment(4, &BTreeSet::new()), vec![None; 4]);
}

#[test]
fn a_replica_joining_or_leaving_moves_few_shards() {
    let three = replicas(&["a-7f9c", "b-2d41", "c-99e0"]);
    let mut four = three.clone();
    four.insert("d-51aa".to_owned());
    let before = assignment(64, &three);
    let after = assignment(64, &four);
    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    // the newcomer's share (16) must move to it; a little more moves between the others as
    // rooms shrink from 22 to 16, never a reshuffle of everything
    assert!((16..=32).contains(&moved), "{moved} of 64 moved");
    let leaving = after.iter().zip(&before).filter(|(a, b)| a != b).count();
    assert_eq!(moved, leaving);
}

fn lease(shard: u32, count: u32, holder: Option<&str>, alive: bool) -> ShardLease {
    ShardLease {
        shard,
        count,
        holder: holder.map(str::to_owned),
        alive,
    }
}

#[test]
fn a_replica_competes_for_its_share_keeps_what_it_holds_of_it_and_releases_the_rest() {
    let others = replicas(&["b"]);
    let owners = assignment(4, &replicas(&["a", "b"]));
    let mine: Vec<u32> = (0..4)
        .filter(|s| owners[*s as usize].as_deref() == Some("a"))
        .collect();
    let theirs: Vec<u32> = (0..4).filter(|s| !mine.contains(s)).collect();
    assert_eq!(mine.len(), 2);
    // holding one of its own, one of b's, and one of another count (from before the map
    // changed); someone else's Lease of another count is not its concern
    let leases = vec![
        lease(mine[0], 4, Some("a"), true),
        lease(theirs[0], 4, Some("a"), true),
        lease(mine[1], 4, None, false),
        lease(theirs[1], 4, Some("b"), true),
        lease(5, 8, Some("a"), true),
        lease(6, 8, Some("c"), true),
    ];
    assert_eq!(
        plan("a", 4, &others, &leases),
        ShardPlan {
            compete: vec![mine[1]],
            keep: vec![mine[0]],
            release: vec![
                ShardId { count: 8, shard: 5 },
                ShardId {
                    count: 4,
                    shard: theirs[0]
                }
            ],
        }
    );
    // alone, it wants all four
    let alone = plan("a", 4, &BTreeSet::new(), &leases);
    assert_eq!(alone.compete.len() + alone.keep.len(), 4);
    assert_eq!(alone.release, vec![ShardId { count: 8, shard: 5 }]);
    assert_eq!(
        ShardId::of("mimir", 32),
        ShardId {
            count: 32,
            shard: 17
        }
    );
    assert_eq!(
        ShardId {
            count: 32,
            shard: 17
        }
        .lease_name(),
        "baton-shard-17-of-32"
    );
}

#[test]
fn a_shard_map_settles_a_lease_duration_after_its_version_was_first_seen_and_terms_count_from_its_read()
 {
    let timing = LeaseTiming {
        duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    let since = Instant::now();
    let map = Observation::Present {
        record: LeaseRecord {
            resource_version: "3".to_owned(),
            holder: None,
            duration: None,
        },
        since,
    };
    assert_eq!(
        shard_map_settled_at(&map, &timing),
        Some(since + Duration::from_secs(15))
    );
    assert_eq!(shard_map_settled_at(&Observation::Unknown, &timing), None);
    let read = since + Duration::from_secs(20);
    // a renewal sent after the map was read counts from the read...
    assert_eq!(
        acting_until(read + Duration::from_secs(30), read, &timing),
        read + Duration::from_secs(10)
    );
    // ...and one sent before it from its sending
    assert_eq!(
        acting_until(read - Duration::from_secs(1), read, &timing),
        read + Duration::from_secs(9)
    );
}

#[test]
fn every_replica_shares_by_the_shard_maps_count_and_one_configured_otherwise_is_told() {
    assert_eq!(
        count_to_share_by(8, None),
        (8, None),
        "the first creates the map"
    );
    assert_eq!(count_to_share_by(0, None), (1, None));
    assert_eq!(count_to_share_by(8, Some(8)), (8, None));
    let (count, warning) = count_to_share_by(16, Some(8));
    assert_eq!(count, 8);
    let warning = warning.expect("a difference is told");
    assert!(
        warning.contains("controller.shards is 16 here")
            && warning.contains("shard map says 8")
            && warning.contains("sharing by 8"),
        "{warning}"
    );
}

#[test]
fn a_replica_is_alive_while_its_presence_lease_changes_within_its_duration() {
    let timing = LeaseTiming {
        duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    let since = Instant::now();
    let present = |holder: Option<&str>, duration: Option<u64>| Observation::Present {
        record: LeaseRecord {
            resource_version: "7".to_owned(),
            holder: holder.map(str::to_owned),
            duration: duration.map(Duration::from_secs),
        },
        since,
    };
    let at = |seconds: u64| since + Duration::from_secs(seconds);
    assert!(alive(&present(Some("b"), None), at(14), &timing));
    assert!(!alive(&present(Some("b"), None), at(15), &timing));
    assert!(
        alive(&present(Some("b"), Some(30)), at(29), &timing),
        "its own duration counts"
    );
    assert!(
        !alive(&present(None, None), at(0), &timing),
        "released: gone"
    );
    assert!(!alive(&Observation::Unknown, at(0), &timing));
    assert!(!alive(
        &Observation::Absent {
            since,
            last_holder: Some("b".to_owned())
        },
        at(0),
        &timing
    ));
}
