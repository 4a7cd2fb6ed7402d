//! Leader election on a `coordination.k8s.io/v1` Lease, with fencing: at every moment at most one
//! baton-controller replica answers [`Leadership::is_leader`] with `true`, and work started in
//! one [`Term`] never goes on in a later one ([`Leadership::is_leader_in`]).
//!
//! # Why our own module
//! - `kube-leader-election` 0.44 depends on kube 4 (we use kube 5: its client cannot be passed
//!   in) and writes the Lease with merge patches carrying no resourceVersion, so two candidates
//!   that both read an expired Lease can both "win".
//! - `kube-lease-manager` 0.13 does build with kube 5, but its renewals and releases are
//!   strategic-merge patches without a resourceVersion (a deposed leader's late renewal lands on
//!   the new holder's Lease), and it decides expiry from `renewTime` against the local wall
//!   clock, so clock skew between nodes can make two leaders.
//!
//! Here every write is a replace conditional on the resourceVersion last seen (or a create), a
//! 409 means "re-read and decide again", and every call has a deadline
//! (`kubernetes.request_timeout`, shorter when the renew deadline is nearer).
//!
//! # The rules (as client-go's, with the clock argument made explicit)
//! - A standby takes over an unreleased Lease only after seeing the same resourceVersion for a
//!   whole `leaseDurationSeconds` on its own monotonic clock; a released one (no holder) at once.
//! - A missing Lease is created at once (the create is atomic: the loser gets AlreadyExists), so
//!   a fresh install leads without waiting; only a Lease seen held by another replica and then
//!   gone waits a lease duration, as that holder may still be acting.
//! - The leader's right to act ends `renew_deadline` after it *sent* its last successful write.
//!   That write was applied after it was sent, so any standby saw its version even later and
//!   waits a full duration from there; `renew_deadline < duration` makes the leader stop first.
//! - Losing the Lease ends the *term*, not the elector: every action stops at once (the same
//!   fencing as above), the caches and watches stay, and the elector campaigns again. When the
//!   API server comes back after an outage, the replica still named in the Lease renews it at its
//!   first successful read (a write conditional on the version it holds, so nobody can have led
//!   meanwhile) and starts a new term; otherwise the usual takeover rules apply. Only a bug (a
//!   panicked task) ends the process.
//! - On shutdown the leader stops acting first, then releases the Lease (a conditional write
//!   clearing the holder) so a standby takes over at its next look.
//!
//! The decisions are pure (`baton_core::lease`: `decide`, `observe`) and unit-tested; [`LeaderElector::run`]
//! is the thin loop doing the calls.

mod leadership;
mod lease_loop;
mod store;

use std::time::Duration;

use baton_config::LeaseConfig;
use baton_core::lease::decide::LeaseTiming;
use prometheus::{IntCounter, IntGauge, Registry};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use leadership::{
    EndReason, Leadership, LeadershipPhase, PAST_TERMS_KEPT, PastTerm, Span, Status, Term,
};
pub use store::{KubeLeaseStore, KubeLeases, LeaseStore, Leases};

/// A unique identity for this process: the pod name (`HOSTNAME`) and a random suffix, so a
/// restarted container never mistakes its predecessor's Lease for its own.
pub fn unique_identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "baton-controller".to_owned());
    // RandomState is seeded from the OS's randomness; pid and time make it unique per process
    // even if that seed repeated.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("{host}-{:08x}", hasher.finish() & 0xffff_ffff)
}

/// Prometheus metrics of the election.
#[derive(Debug, Clone)]
pub struct LeaderMetrics {
    leader: IntGauge,
    terms: IntCounter,
    call_errors: IntCounter,
    /// The controller's failures counter, given by [`LeaderMetrics::counting_failures_in`].
    failures: Option<crate::error::Failures>,
}

impl LeaderMetrics {
    /// Registers `baton_leader` (1 while leading), `baton_leader_terms_total` and
    /// `baton_lease_call_errors_total`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let leader = IntGauge::new(
            "baton_leader",
            "1 while this replica holds the rollout Lease and may act, else 0.",
        )?;
        let terms = IntCounter::new(
            "baton_leader_terms_total",
            "Terms of leadership this replica started (one more each time it wins the Lease).",
        )?;
        let call_errors = IntCounter::new(
            "baton_lease_call_errors_total",
            "Lease reads and writes that failed or timed out (409 conflicts excluded).",
        )?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(terms.clone()))?;
        registry.register(Box::new(call_errors.clone()))?;
        Ok(Self {
            leader,
            terms,
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

/// One candidate for the Lease. Create it, take a [`Leadership`] handle, then spawn
/// [`run`](Self::run).
pub struct LeaderElector<S: LeaseStore = KubeLeaseStore> {
    store: S,
    identity: String,
    timing: LeaseTiming,
    request_timeout: Duration,
    status: watch::Sender<Status>,
    metrics: Option<LeaderMetrics>,
}

impl LeaderElector<KubeLeaseStore> {
    /// A candidate for the Lease `config.name` in `namespace`; `request_timeout` bounds each call.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        config: &LeaseConfig,
        identity: impl Into<String>,
        request_timeout: Duration,
    ) -> Self {
        Self::with_store(
            KubeLeaseStore::new(client, namespace, &config.name),
            config.timing(),
            identity,
            request_timeout,
        )
    }
}

impl<S: LeaseStore> LeaderElector<S> {
    /// A candidate using any [`LeaseStore`] (tests wrap the Kubernetes one to inject delays).
    pub fn with_store(
        store: S,
        timing: LeaseTiming,
        identity: impl Into<String>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            store,
            identity: identity.into(),
            timing,
            request_timeout,
            status: watch::Sender::new(Status::standby()),
            metrics: None,
        }
    }

    /// Reports the election in these metrics.
    pub fn with_metrics(mut self, metrics: LeaderMetrics) -> Self {
        metrics.leader.set(0);
        self.metrics = Some(metrics);
        self
    }

    /// The identity written as `holderIdentity`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A handle on this candidate's leadership; clone it freely.
    pub fn leadership(&self) -> Leadership {
        Leadership::new(self.status.subscribe())
    }

    /// Campaigns, leads, and campaigns again after a lost term, until `shutdown` (returns
    /// after releasing a held Lease). Returns at no other time.
    pub async fn run(self, shutdown: CancellationToken) {
        lease_loop::run(self, shutdown).await
    }
}
