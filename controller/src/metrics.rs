//! The controller's metrics: the Go operator's names (dashboards and alerts use them) plus
//! baton's own, all on a registry passed in.

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Every metric the rollout controller updates.
#[derive(Debug, Clone)]
pub struct ControllerMetrics {
    pub reconciles: IntCounterVec,
    pub reconciles_failed: IntCounterVec,
    pub reconcile_duration: HistogramVec,
    pub last_successful_reconcile: GaugeVec,
    pub pods_total: IntGaugeVec,
    pub pods_updated: IntGaugeVec,
    pub pods_ready: IntGaugeVec,
    pub group_waiting: IntGaugeVec,
    pub pod_deletions: IntCounterVec,
}

impl ControllerMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let group = &["rollout_group"];
        let statefulset = &["rollout_group", "statefulset"];
        let metrics = Self {
            reconciles: IntCounterVec::new(
                Opts::new(
                    "rollout_operator_group_reconciles_total",
                    "Total number of reconciles started for a specific rollout group.",
                ),
                group,
            )?,
            reconciles_failed: IntCounterVec::new(
                Opts::new(
                    "rollout_operator_group_reconciles_failed_total",
                    "Total number of reconciles failed for a specific rollout group.",
                ),
                group,
            )?,
            reconcile_duration: HistogramVec::new(
                HistogramOpts::new(
                    "rollout_operator_group_reconcile_duration_seconds",
                    "Total time spent running a reconcile for a specific rollout group.",
                )
                .buckets(vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ]),
                group,
            )?,
            last_successful_reconcile: GaugeVec::new(
                Opts::new(
                    "rollout_operator_last_successful_group_reconcile_timestamp_seconds",
                    "Timestamp of the last successful reconcile for a specific rollout group.",
                ),
                group,
            )?,
            pods_total: IntGaugeVec::new(
                Opts::new(
                    "baton_rollout_pods",
                    "Pods a StatefulSet of a rollout group should have (spec.replicas).",
                ),
                statefulset,
            )?,
            pods_updated: IntGaugeVec::new(
                Opts::new(
                    "baton_rollout_pods_updated",
                    "Pods of a StatefulSet at its update revision.",
                ),
                statefulset,
            )?,
            pods_ready: IntGaugeVec::new(
                Opts::new(
                    "baton_rollout_pods_ready",
                    "Pods of a StatefulSet that are available.",
                ),
                statefulset,
            )?,
            group_waiting: IntGaugeVec::new(
                Opts::new(
                    "baton_rollout_group_waiting",
                    "1 while a rollout group cannot make progress (the Event on its StatefulSets says why).",
                ),
                group,
            )?,
            pod_deletions: IntCounterVec::new(
                Opts::new(
                    "baton_rollout_pod_deletions_total",
                    "Pods deleted by baton to roll them to the update revision.",
                ),
                statefulset,
            )?,
        };
        registry.register(Box::new(metrics.reconciles.clone()))?;
        registry.register(Box::new(metrics.reconciles_failed.clone()))?;
        registry.register(Box::new(metrics.reconcile_duration.clone()))?;
        registry.register(Box::new(metrics.last_successful_reconcile.clone()))?;
        registry.register(Box::new(metrics.pods_total.clone()))?;
        registry.register(Box::new(metrics.pods_updated.clone()))?;
        registry.register(Box::new(metrics.pods_ready.clone()))?;
        registry.register(Box::new(metrics.group_waiting.clone()))?;
        registry.register(Box::new(metrics.pod_deletions.clone()))?;
        Ok(metrics)
    }
}
