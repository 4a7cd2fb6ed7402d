//! The reconcile of one rollout group. It reads one snapshot of the group from the caches (its
//! StatefulSets and the namespace's pods) and runs the group's two features over it as siblings
//! that never wait on each other:
//! - [`scaling`](crate::scaling): replicas (leader zones, mirroring a reference, delayed
//!   downscale), with its own I/O (the references' scales, the pods' prepare endpoints and,
//!   across member clusters, each cluster's downscale records);
//! - [`rollout`](crate::rollout): the planner, the gates composed after it, the deletions, with
//!   its own I/O (health checks, hooks, pod deletions).
//!
//! An unreachable reference therefore holds scaling only, and a slow health check holds the
//! rollout only. The group comes back at the sooner of the two features' requeues.
//!
//! # Why siblings are safe
//! Scaling changes only `spec.replicas` (through `/scale`, judged by the admission webhooks); it
//! is one more actor changing replicas, as a person or an autoscaler may at any moment. The
//! rollout never relied on replicas standing still: it deletes only from a snapshot in which
//! every other zone is fully ready, within the zone's max-unavailable, and every later pass
//! plans on what the caches show then (new pods count as unavailable until ready, pods beyond
//! `spec.replicas` get no free replacement). A replica change's watch event brings the group
//! back at once.
//!
//! Only the leader acts, and only within the term the pass started in ([`Runner`](crate::runner::Runner)); a standby's
//! pass returns at once.

use std::time::Instant;

use crate::cache::Caches;
use crate::explain::Explainer;
use crate::metrics::ControllerMetrics;
use crate::queue::Requeue;
use crate::rollout::reconcile::Rollouts;
use crate::runner::MayStart;
use crate::scaling::Scaler;

/// Reconciles rollout groups: one per controller, shared by every group.
pub struct GroupReconciler {
    pub caches: Caches,
    pub metrics: ControllerMetrics,
    pub explainer: Explainer,
    pub may_start: MayStart,
    pub rollouts: Rollouts,
    pub scaler: Scaler,
}

impl std::fmt::Debug for GroupReconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupReconciler")
            .field("caches", &self.caches)
            .finish_non_exhaustive()
    }
}

impl GroupReconciler {
    /// One pass over `group`. Every log line of the pass, both features', carries the group
    /// through this span.
    #[tracing::instrument(skip_all, fields(rollout_group = group))]
    pub async fn reconcile(&self, group: &str) -> Requeue {
        let Some(may_act) = (self.may_start)() else {
            return Requeue::Never;
        };
        let members = self.caches.group_members(group);
        if members.is_empty() {
            self.metrics.forget_group(group);
            self.rollouts.status.forget(group);
            self.rollouts.completions.forget(group);
            self.rollouts.gate_calls.runs.forget(group);
            self.rollouts.gate_calls.hook_calls.forget(group);
            return Requeue::Never;
        }
        let pods = self.caches.pods_of(&members);
        let outages = self.caches.outages();
        let (ledger, tracker) = self.caches.downscale_records(group);
        let started = Instant::now();
        let labels = self.metrics.series(group, &[]);
        self.metrics.reconciles.with_label_values(&labels).inc();
        // Across member clusters, scaling reads each member's records in its own cluster and
        // waits while one is out (`outages`); `ledger` and `tracker` are the hub's, read only
        // without members.
        let scaling = self.scaler.reconcile(
            group,
            &members,
            &pods,
            (&ledger, &tracker),
            &outages,
            &self.explainer,
            &may_act,
        );
        let ((scaling, scaling_failures), rollout) = tokio::join!(
            scaling,
            self.rollouts
                .reconcile(group, &members, &pods, &outages, &may_act),
        );
        self.metrics
            .reconcile_duration
            .with_label_values(&labels)
            .observe(started.elapsed().as_secs_f64());
        // The one place a group's failures are counted, the scaling's (told already) and the
        // rollout's alike.
        let count = |error: &crate::error::Error| {
            self.metrics
                .reconcile_errors
                .with_label_values(&self.metrics.series(group, &[error.metric_label()]))
                .inc();
            self.metrics.failures.count(error);
        };
        for failure in &scaling_failures {
            count(failure);
        }
        match rollout {
            Ok(rollout) => {
                let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
                self.metrics
                    .last_successful_reconcile
                    .with_label_values(&labels)
                    .set(now);
                rollout.sooner(scaling)
            }
            Err(error) => {
                self.metrics
                    .reconciles_failed
                    .with_label_values(&labels)
                    .inc();
                count(&error);
                tracing::warn!(error = %error, kind = error.metric_label(), "reconcile failed");
                Requeue::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests;
