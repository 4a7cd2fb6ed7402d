//! Sharing a whole cluster's rollout groups among controller replicas: a fixed number of shard
//! Leases, each namespace's shard a stable hash of its name, and each replica's share decided
//! from the replicas it sees alive, so that every replica, deciding alone, wants the same
//! assignment once their views agree.
//!
//! Two actors on one group never happen because of the Leases, not because of this module: a
//! replica acts on a shard only while it leads that shard's Lease ([`crate::lease::decide`],
//! each action fenced by that term as the single leader's are). What is decided here is which
//! Leases a replica competes for, keeps and lets go:
//! - [`shard_of`]: the shard of a namespace, FNV-1a of its name modulo the count: the same in
//!   every replica and every version;
//! - [`assignment`]: rendezvous hashing with bounded load: each shard to the replica ranking
//!   it highest among those with room, so loads differ by at most one and a replica joining or
//!   leaving moves few shards;
//! - [`alive`]: a replica is alive while its own presence Lease keeps changing, judged on the
//!   observer's clock as the election judges a leader;
//! - [`count_to_share_by`]: one count for the cluster, the shard map's, whatever each replica
//!   was configured with; [`shard_map_settled_at`] and [`acting_until`]: a change of the map
//!   never lets a namespace be acted on under two counts (it belongs to a shard of each);
//! - [`plan`]: from the shard Leases as read, what to compete for, keep and release.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher;
use std::time::Instant;

use crate::lease::decide::{LeaseTiming, Observation};

/// The shard of `namespace` among `count` (at least 1).
pub fn shard_of(namespace: &str, count: u32) -> u32 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(namespace.as_bytes());
    // (the remainder of a division by a u32 fits a u32)
    (hasher.finish() % u64::from(count.max(1))) as u32
}

/// How much `replica` wants `shard`: rendezvous hashing's weight. FNV-1a's last bytes mix
/// poorly into its high bits, so its value goes through a finalizer (splitmix64's) before
/// replicas are ranked by it.
fn weight(shard: u32, replica: &str) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(&shard.to_be_bytes());
    hasher.write(replica.as_bytes());
    let mut mixed = hasher.finish();
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    mixed ^ (mixed >> 31)
}

/// Which replica each of `count` shards belongs to (`None` with no replica): in shard order,
/// each to the replica that weighs it highest among those with room. Room is the even share:
/// `count / replicas` each, and one more for as many replicas as there are shards left over
/// (the first to reach it), so loads differ by at most one.
pub fn assignment(count: u32, replicas: &BTreeSet<String>) -> Vec<Option<String>> {
    let Ok(replica_count) = u32::try_from(replicas.len()) else {
        return vec![None; count as usize];
    };
    if replica_count == 0 {
        return vec![None; count as usize];
    }
    let floor = count / replica_count;
    let mut larger_left = count % replica_count;
    let mut loads: BTreeMap<&str, u32> = replicas.iter().map(|r| (r.as_str(), 0)).collect();
    (0..count)
        .map(|shard| {
            let room = if larger_left > 0 { floor + 1 } else { floor };
            let owner = replicas
                .iter()
                .filter(|replica| loads[replica.as_str()] < room)
                .max_by_key(|replica| (weight(shard, replica), std::cmp::Reverse(*replica)))?;
            let load = loads.get_mut(owner.as_str())?;
            *load += 1;
            if *load == floor + 1 {
                larger_left -= 1;
            }
            Some(owner.clone())
        })
        .collect()
}

/// Whether the replica whose presence Lease was observed so is alive at `now`: its Lease is
/// held and has changed within its duration, by the observer's own clock (wall-clock times
/// written in it are never compared, as in the election).
pub fn alive(observation: &Observation, now: Instant, timing: &LeaseTiming) -> bool {
    match observation {
        Observation::Present { record, since } => {
            record.holder.is_some() && now < *since + record.duration.unwrap_or(timing.duration)
        }
        Observation::Unknown | Observation::Absent { .. } => false,
    }
}

/// A shard Lease: shard `shard` of `count` (both in its name, `baton-shard-<shard>-of-<count>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId {
    pub count: u32,
    pub shard: u32,
}

impl ShardId {
    /// The shard of `namespace` among `count`.
    pub fn of(namespace: &str, count: u32) -> Self {
        Self {
            count: count.max(1),
            shard: shard_of(namespace, count),
        }
    }

    /// Its Lease's name.
    pub fn lease_name(&self) -> String {
        format!("baton-shard-{}-of-{}", self.shard, self.count)
    }
}

/// A shard Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLease {
    pub shard: u32,
    /// The shard count it belongs to.
    pub count: u32,
    pub holder: Option<String>,
    /// Held and changing, by this replica's observation ([`alive`]).
    pub alive: bool,
}

/// What a replica does with the shard Leases: compete for `compete` (taken when free, by the
/// election's rule), renew `keep`, and hand `release` back (acting on it stops before the
/// release is written).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardPlan {
    pub compete: Vec<u32>,
    pub keep: Vec<u32>,
    pub release: Vec<ShardId>,
}

/// The shard count to share by: the shard map's (one record for the cluster, created with the
/// first replica's `configured` count), so that replicas configured differently (two versions
/// mid-upgrade) still share by one count; with the reason to warn when they differ.
pub fn count_to_share_by(configured: u32, shard_map: Option<u32>) -> (u32, Option<String>) {
    match shard_map {
        Some(recorded) if recorded != configured => (
            recorded,
            Some(format!(
                "controller.shards is {configured} here but the cluster's shard map says \
                 {recorded}: sharing by {recorded}, as every replica does (to change it, edit \
                 the shard map: every replica then waits a lease duration before sharing by \
                 the new count)"
            )),
        ),
        Some(recorded) => (recorded, None),
        None => (configured.max(1), None),
    }
}

/// From when a replica may share by the shard map it observed so: once it has seen that
/// version of the map unchanged for a lease duration. A replica that read the previous count
/// acts on it only until its renew deadline after that read ([`acting_until`]), which is
/// shorter, so no namespace is ever acted on under two counts. `None`: not read yet.
pub fn shard_map_settled_at(map: &Observation, timing: &LeaseTiming) -> Option<Instant> {
    match map {
        Observation::Present { since, .. } => Some(*since + timing.duration),
        Observation::Unknown | Observation::Absent { .. } => None,
    }
}

/// Until when a replica may act on a shard after a renewal of its Lease sent at `sent`, decided
/// on the shard map read at `map_read`: the election's term, counted from the earlier of the
/// two, so that a replica stopped between reading the map and renewing (SIGSTOP, a long GC)
/// cannot act on a count the map no longer says.
pub fn acting_until(sent: Instant, map_read: Instant, timing: &LeaseTiming) -> Instant {
    timing.leading_until(sent.min(map_read))
}

/// What `me`, sharing by `count` shards and seeing `others` alive, does with `leases` (every
/// shard Lease read, of any count). Leases of another count it holds (its own from before the
/// shard map changed) are released; others' Leases of another count are not its concern.
pub fn plan(me: &str, count: u32, others: &BTreeSet<String>, leases: &[ShardLease]) -> ShardPlan {
    let mut plan = ShardPlan::default();
    let mut held = BTreeSet::new();
    for lease in leases {
        if lease.holder.as_deref() != Some(me) {
            continue;
        }
        if lease.count == count {
            held.insert(lease.shard);
        } else {
            plan.release.push(ShardId {
                count: lease.count,
                shard: lease.shard,
            });
        }
    }
    let mut replicas = others.clone();
    replicas.insert(me.to_owned());
    let owners = assignment(count, &replicas);
    for (shard, owner) in (0..count).zip(&owners) {
        let mine = owner.as_deref() == Some(me);
        match (mine, held.contains(&shard)) {
            (true, true) => plan.keep.push(shard),
            (true, false) => plan.compete.push(shard),
            (false, true) => plan.release.push(ShardId { count, shard }),
            (false, false) => {}
        }
    }
    plan
}

#[cfg(test)]
mod tests;
