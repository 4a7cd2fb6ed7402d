//! baton-controller as a library: everything the controller does that is not a decision. It
//! reads snapshots from its watch caches, keeps what lasts between passes (the work queue, the
//! Lease term, the deletions the cache has not shown yet, the status board), and carries out
//! what `baton_core` decides (the planner, the gates, scaling, the zone-aware budgets, the
//! Lease, the certificates): deletions, partitions, gate state, `/scale`, calls to pods and
//! hooks, Events and metrics. The decisions are the core's; the one pure function here,
//! `baton_core::zpdb::judge`, applies the core's budget decision to what the caches hold. The
//! binary in `main.rs` only calls [`app::run`].
//!
//! # Module map
//!
//! | module | owns |
//! |---|---|
//! | [`app`] | wiring: the caches, the election, the queue, the Event publisher, the ops server; every task critical |
//! | [`leader`] | the Lease: terms, fencing, campaigning again after a lost term (decided by `baton_core::lease`) |
//! | [`shards`] | with `controller.shards > 1`: this replica's share of the shard Leases, each namespace's writes fenced by its shard's term (decided by `baton_core::shards` and the election's rule) |
//! | [`watch_source`] | where a namespace's caches get their watch events: watches of its own, or one cluster-wide watch per kind shared by every namespace served |
//! | [`cache`] | watch-fed caches of group StatefulSets and of pods (as `baton_core::pods::CachedPod`, `baton_shared::pod_cache`); routes each change to its group |
//! | [`group`] | the reconcile of one group: one snapshot, scaling and the rollout run beside each other over it |
//! | [`queue`] | the per-group work queue: coalescing, one run per group at a time, one timer per group, backoff |
//! | [`rollout`] | the rollout pass over a group (read, decide in one call of `baton_core::pass`, run the effects), the executor of its actions, the deletions the cache has not shown yet |
//! | [`gates`] | the gates' I/O: health check runs and hook calls within the operator's bounds, the Prometheus client, storing the gate's state (the decision is `baton_core::gates`) |
//! | [`scaling`] | leader/follower zones, replica mirroring, delayed downscale carried out (planned by `baton_core::scaling`) |
//! | [`certificates`] | the webhook's certificate and CA bundle injection (decided by `baton_core::certificates`) |
//! | [`explain`] | Events and log lines saying what baton does and why it waits, off the critical path |
//! | [`metrics`] | the Go operator's metric names and baton's own |
//! | [`error`] | the controller's one error type ([`error::Error`], each variant named after the failing step, with its `metric_label()`) and `baton_controller_failures_total`, counted by it |
//! | [`status`] | the status page and its JSON, served from the caches with `baton_core::status` (each group's view), and the leader's history of each group (its board) |
//! | [`phased`] | PhasedRollouts (`sts.plus`) served as groups of their own, rolled by partition through a check; their status |
//! | [`zpdb_check`] | a rollout deletion checked against the zone-aware disruption budgets: their cache (`baton_shared::zpdb_cache`, the webhook's too), each step's decision in the core (`baton_core::zpdb::rollout_deletion`, pure), the claim in the budget's record |
//!
//! # From a watch event to an action
//!
//! A watch event updates a [`cache`] and names the group it concerns → the [`queue`] runs that
//! group's reconcile (never two at once for a group) → [`group`] takes one snapshot of the group
//! from the caches and runs two siblings over it, neither waiting on the other's I/O:
//! [`scaling`] (replicas) and the rollout ([`rollout::reconcile`]: plan, let the [`gates`] hold
//! or halt, tell why through [`explain`], carry out the deletions) — only while this replica leads
//! in the term the pass started in ([`leader`]), and only with caches synced. What is still
//! pending (a deletion the cache has not shown yet, a soak, a minReadySeconds) comes back
//! through the queue's timer for the group.

pub mod app;
pub mod cache;
pub mod certificates;
pub mod clusters;
pub mod error;
pub mod explain;
pub mod gates;
pub mod group;
pub mod leader;
pub mod metrics;
pub mod phased;
pub mod queue;
pub mod rollout;
pub mod runner;
pub mod scaling;
pub mod shards;
pub mod status;
pub mod tenants;
pub mod watch_source;
pub mod zpdb_check;
