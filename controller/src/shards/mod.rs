//! Sharing the rollout groups among controller replicas (`controller.shards > 1`): the loop each
//! replica runs over the shard Leases, and the [`Shards`] handle that fences each namespace's
//! writes by the term of its shard, as [`crate::leader`] fences them by the leader's term.
//!
//! # Why a loop of its own, and what it reuses
//! One leader Lease lets one replica act on everything; with many namespaces the work is split
//! in a fixed number of shards, each led through its own Lease, so several replicas act at once
//! and each namespace still has at most one actor. Which Leases a replica competes for, keeps
//! and lets go is decided in `baton_core::shards` (rendezvous hashing over the replicas seen
//! alive, the shard map's count); whether it may take or renew one is the election's own rule
//! (`baton_core::lease::decide`), and the Lease objects are written with the election's
//! `baton_core::lease::record` through the same store ([`crate::leader::Leases`]), every write
//! conditional on the resourceVersion read. This module only does the calls and keeps the terms.
//!
//! # The Leases, all in baton's system namespace
//! - `baton-replica-<identity>`: this replica's presence, renewed every retry period; the others
//!   judge it alive while they see it change ([`baton_core::shards::alive`], on their own
//!   clock). Presence Leases nobody renewed for [`PRUNE_AFTER_DURATIONS`] lease durations are
//!   deleted (each restart has a new identity, so they would pile up).
//! - `baton-shard-map`: the cluster's shard count, in its annotation [`SHARD_COUNT_ANNOTATION`]
//!   (no holder: it is a record, not a lock), created by the first replica with its configured
//!   count. Every replica shares by the map's count, warning when its own differs; a changed
//!   map is shared by only once seen unchanged for a lease duration
//!   ([`baton_core::shards::shard_map_settled_at`]). A map that names no valid count stops all
//!   acting on shards (with a warning each round it changes): two replicas guessing different
//!   counts could act twice on one namespace.
//! - `baton-shard-<i>-of-<n>`: shard `i` of `n`, held by the replica acting on it.
//!
//! # Each round (every retry period)
//! One consistent list of the namespace's Leases (the map, every presence and shard Lease);
//! the presence renewed; the map created if missing; `plan` decides; releases are written after
//! the shard's term ended here; each competed or kept shard Lease is created, renewed or taken
//! over as `decide` says. A successful write starts or extends the shard's term until
//! [`baton_core::shards::acting_until`] (the renew deadline after the earlier of the write's
//! sending and the list's), so a replica stopped anywhere in the round (SIGSTOP, a long GC)
//! never acts past it; a 409 or 404 ends the term at once (someone else wrote the Lease), and
//! nothing else ever extends it.
//!
//! Times are tokio's clock (the same as the system's monotonic clock outside tests, where the
//! tests pause and advance it).

mod round;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::lease::decide::LeaseTiming;
use baton_core::shards::ShardId;
use prometheus::{IntCounter, IntGauge, Registry};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::leader::{KubeLeases, Leases, Term};
use crate::runner::{MayAct, MayStart};

/// Prefix of the presence Leases: `baton-replica-<identity>`.
pub const PRESENCE_PREFIX: &str = "baton-replica-";
/// The shard map's Lease.
pub const SHARD_MAP: &str = "baton-shard-map";
/// The annotation of the shard map holding the cluster's shard count.
pub const SHARD_COUNT_ANNOTATION: &str = "baton.dev/shards";
/// A presence Lease seen unchanged for this many lease durations is deleted.
pub const PRUNE_AFTER_DURATIONS: u32 = 20;

/// This replica's presence Lease.
pub fn presence_lease_name(identity: &str) -> String {
    format!("{PRESENCE_PREFIX}{identity}")
}

/// The shard a Lease named `baton-shard-<i>-of-<n>` is for (`i < n`), `None` for any other name.
pub fn shard_of_lease_name(name: &str) -> Option<ShardId> {
    let (shard, count) = name.strip_prefix("baton-shard-")?.split_once("-of-")?;
    let id = ShardId {
        shard: shard.parse().ok()?,
        count: count.parse().ok()?,
    };
    (id.shard < id.count && id.lease_name() == name).then_some(id)
}

/// The clock of the shard loop and of its [`MayAct`]s.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// One term of one shard of this replica: numbered across shards (1, 2, … per process), so a
/// pass started in one term never acts in a later one of the same shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardTerm {
    pub term: Term,
    pub since: Instant,
    /// When acting in it stops unless a renewal moves it.
    pub until: Instant,
}

/// Where this replica's sharing stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardsStatus {
    /// `controller.shards` here.
    pub configured: u32,
    /// The count shared by (the shard map's), `None` until the map was read (or while it names
    /// no valid count).
    pub count: Option<u32>,
    /// Whether the map's count has settled, so shards may be led.
    pub settled: bool,
    /// The other replicas seen alive at the last round.
    pub others: BTreeSet<String>,
    /// The shards led now, with their terms (their `until` may be past: see [`Shards::held`]).
    pub terms: BTreeMap<ShardId, ShardTerm>,
    /// The loop ended (shutdown): nothing is led.
    pub ended: bool,
}

impl ShardsStatus {
    /// The shards of the current count led at `now`.
    pub fn held_at(&self, now: Instant) -> HeldShards {
        let Some(count) = self.count.filter(|_| !self.ended) else {
            return HeldShards::default();
        };
        HeldShards {
            count,
            shards: self
                .terms
                .iter()
                .filter(|(id, term)| id.count == count && now < term.until)
                .map(|(id, _)| id.shard)
                .collect(),
        }
    }

    /// What is left at `now` of `term` of `shard`: `None` outside it.
    fn time_left_in(&self, shard: ShardId, term: Term, now: Instant) -> Option<Duration> {
        if self.ended {
            return None;
        }
        match self.terms.get(&shard) {
            Some(current) if current.term == term && now < current.until => {
                Some(current.until - now)
            }
            _ => None,
        }
    }
}

/// The shards this replica leads, of which count: a namespace is its to act on when its shard
/// is one of them ([`HeldShards::serves`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeldShards {
    /// The count shared by; 0 while none.
    pub count: u32,
    pub shards: BTreeSet<u32>,
}

impl HeldShards {
    /// Whether `namespace`'s shard is held.
    pub fn serves(&self, namespace: &str) -> bool {
        self.count > 0
            && self
                .shards
                .contains(&ShardId::of(namespace, self.count).shard)
    }
}

/// A cheap, clonable view of this replica's shards: which it leads, and the right to act on a
/// namespace while its shard's term lasts.
#[derive(Debug, Clone)]
pub struct Shards {
    status: watch::Receiver<ShardsStatus>,
    held: watch::Receiver<HeldShards>,
}

impl Shards {
    /// The right to act on `namespace` now: `None` unless its shard (of the count shared by)
    /// is led in a term lasting now; else a [`MayAct`] answering only while that same term
    /// lasts, checked on each call by the clock (so it turns `None` on time even if the loop
    /// is stuck), and at once if the loop is gone.
    pub fn may_act(&self, namespace: &str) -> Option<MayAct> {
        if self.status.has_changed().is_err() {
            return None;
        }
        let (shard, term) = {
            let status = self.status.borrow();
            let shard = ShardId::of(namespace, status.count?);
            let term = status.terms.get(&shard)?.term;
            status.time_left_in(shard, term, now())?;
            (shard, term)
        };
        let status = self.status.clone();
        Some(Arc::new(move || {
            if status.has_changed().is_err() {
                return None;
            }
            status.borrow().time_left_in(shard, term, now())
        }))
    }

    /// [`crate::runner::may_start`] for one namespace: a reconcile of it may start once the
    /// caches are `synced` and while its shard is led, and acts only within that shard's term.
    pub fn may_start(
        &self,
        namespace: impl Into<String>,
        synced: watch::Receiver<bool>,
    ) -> MayStart {
        let namespace = namespace.into();
        let shards = self.clone();
        Arc::new(move || {
            if !*synced.borrow() {
                return None;
            }
            shards.may_act(&namespace)
        })
    }

    /// The shards led now (by the clock, not only by the last round).
    pub fn held(&self) -> HeldShards {
        if self.status.has_changed().is_err() {
            return HeldShards::default();
        }
        self.status.borrow().held_at(now())
    }

    /// The held shards as each round leaves them, to re-filter what this replica serves when
    /// shards move (a term running out between rounds shows at the next round; [`Self::may_act`]
    /// answers on time regardless).
    pub fn held_changes(&self) -> watch::Receiver<HeldShards> {
        self.held.clone()
    }

    /// The status as the last round left it.
    pub fn status(&self) -> ShardsStatus {
        self.status.borrow().clone()
    }
}

/// Prometheus metrics of the shard loop.
#[derive(Debug, Clone)]
pub struct ShardMetrics {
    held: IntGauge,
    count: IntGauge,
    replicas: IntGauge,
    call_errors: IntCounter,
    failures: Option<crate::error::Failures>,
}

impl ShardMetrics {
    /// Registers `baton_controller_shards_held`, `baton_controller_shards`,
    /// `baton_controller_shard_replicas` and `baton_controller_shard_lease_call_errors_total`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let held = IntGauge::new(
            "baton_controller_shards_held",
            "Shards this replica leads and may act on now.",
        )?;
        let count = IntGauge::new(
            "baton_controller_shards",
            "The shard count the replicas share the namespaces by (the shard map's); 0 until read.",
        )?;
        let replicas = IntGauge::new(
            "baton_controller_shard_replicas",
            "Replicas this one sees alive by their presence Leases, itself included.",
        )?;
        let call_errors = IntCounter::new(
            "baton_controller_shard_lease_call_errors_total",
            "Shard, shard map and presence Lease calls that failed or timed out (409 conflicts excluded).",
        )?;
        for gauge in [&held, &count, &replicas] {
            registry.register(Box::new(gauge.clone()))?;
        }
        registry.register(Box::new(call_errors.clone()))?;
        Ok(Self {
            held,
            count,
            replicas,
            call_errors,
            failures: None,
        })
    }

    /// Counts each failed Lease call in `failures` too (`baton_controller_failures_total`).
    pub fn counting_failures_in(self, failures: crate::error::Failures) -> Self {
        Self {
            failures: Some(failures),
            ..self
        }
    }
}

/// One replica's share of the shards. Create it, take a [`Shards`] handle, then spawn
/// [`run`](Self::run).
pub struct ShardLoop<L: Leases = KubeLeases> {
    leases: L,
    identity: String,
    configured: u32,
    timing: LeaseTiming,
    request_timeout: Duration,
    status: watch::Sender<ShardsStatus>,
    held: watch::Sender<HeldShards>,
    metrics: Option<ShardMetrics>,
}

impl ShardLoop<KubeLeases> {
    /// The loop for `config.controller.shards` shards, in the system namespace, with the
    /// election's timings and identity; `None` when the count is 1 (the single leader).
    pub fn from_config(
        client: kube::Client,
        config: &baton_config::Config,
        identity: &str,
    ) -> Option<Self> {
        (config.controller.shards > 1).then(|| {
            Self::with_leases(
                KubeLeases::new(client, config.system_namespace()),
                config.controller.shards,
                config.controller.lease.timing(),
                identity,
                config.kubernetes.request_timeout.get(),
            )
        })
    }
}

impl<L: Leases> ShardLoop<L> {
    /// A replica sharing `configured` shards (until the map says otherwise) through `leases`.
    pub fn with_leases(
        leases: L,
        configured: u32,
        timing: LeaseTiming,
        identity: impl Into<String>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            leases,
            identity: identity.into(),
            configured,
            timing,
            request_timeout,
            status: watch::Sender::new(ShardsStatus {
                configured,
                ..ShardsStatus::default()
            }),
            held: watch::Sender::new(HeldShards::default()),
            metrics: None,
        }
    }

    /// Reports the loop in these metrics.
    pub fn with_metrics(self, metrics: ShardMetrics) -> Self {
        Self {
            metrics: Some(metrics),
            ..self
        }
    }

    /// A handle on this replica's shards; clone it freely.
    pub fn shards(&self) -> Shards {
        Shards {
            status: self.status.subscribe(),
            held: self.held.subscribe(),
        }
    }

    /// Shares the shards until `shutdown`, then stops acting and releases what it holds.
    pub async fn run(self, shutdown: CancellationToken) {
        round::run(self, shutdown).await;
    }
}
