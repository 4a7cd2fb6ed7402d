//! The controller's metrics: the Go operator's names (dashboards and alerts use them) plus
//! baton's own, all on a registry passed in.
//!
//! Per-StatefulSet series exist only while the StatefulSet is a member of its group: one that
//! leaves the group (label changed, deleted) has its series removed, so a dashboard never shows
//! a zone frozen at its last value and the registry does not grow with every name ever seen.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Every metric the rollout controller updates.
#[derive(Debug, Clone)]
pub struct ControllerMetrics {
    pub reconciles: IntCounterVec,
    pub reconciles_failed: IntCounterVec,
    /// `{rollout_group, error}`: what failed in a group's reconcile, by
    /// [`Error::metric_label`](crate::error::Error::metric_label), the rollout's and the
    /// scaling's alike.
    pub reconcile_errors: IntCounterVec,
    /// `baton_controller_failures_total{error}`: every loop's failures, this one's and the
    /// certificate round's, the election's and the member clusters' (each is given a clone).
    pub failures: crate::error::Failures,
    pub reconcile_duration: HistogramVec,
    /// `baton_group_queue_wait_seconds`: how long each change waited for its group's reconcile
    /// to start (behind the groups before it, or the group's own run). Not per group: it tells
    /// whether `controller.concurrent_groups` keeps up, the same for every group.
    pub group_queue_wait: Histogram,
    pub last_successful_reconcile: GaugeVec,
    pub pods_total: IntGaugeVec,
    pub pods_updated: IntGaugeVec,
    pub pods_ready: IntGaugeVec,
    pub group_waiting: IntGaugeVec,
    /// `{rollout_group, reason}`: 1 for the reason the group waits now, as the status page
    /// says it (a zone-aware budget's, else the kind of a gate's
    /// [`GateWait`](baton_core::gates::GateWait), else of the planner's
    /// [`WaitReason`](baton_core::rollout::WaitReason)); one
    /// series per waiting group at most, none for a group that does not wait.
    pub waiting_reason: IntGaugeVec,
    pub pod_deletions: IntCounterVec,
    /// What rollout gates hold groups for.
    pub gates: crate::gates::metrics::GateMetrics,
    /// The StatefulSets each group's per-StatefulSet series were last recorded for.
    members: Arc<Mutex<HashMap<String, BTreeSet<String>>>>,
    /// The reason each waiting group's `waiting_reason` series was last recorded for.
    reasons: Arc<Mutex<HashMap<String, &'static str>>>,
    /// Whether several namespaces are served: each group's series then carry its `namespace`
    /// before its `rollout_group` (one namespace keeps the Go operator's label sets).
    pub namespaced: bool,
}

/// The label values of a series of the group keyed `group`, followed by `rest`:
/// `[namespace, group, ...]` where several namespaces are served (the key is
/// `namespace/group`), `[group, ...]` where one is.
pub fn series<'a>(namespaced: bool, group: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut values = Vec::with_capacity(rest.len() + 2);
    match baton_core::namespaces::split(group) {
        (Some(namespace), name) if namespaced => values.extend([namespace, name]),
        _ if namespaced => values.extend(["", group]),
        _ => values.push(group),
    }
    values.extend_from_slice(rest);
    values
}

/// The label names of a group's series: `rest` after the group's (see [`series`]).
pub(crate) fn label_names(namespaced: bool, rest: &[&'static str]) -> Vec<&'static str> {
    let mut names = if namespaced {
        vec!["namespace", "rollout_group"]
    } else {
        vec!["rollout_group"]
    };
    names.extend_from_slice(rest);
    names
}

/// Every `error` label `baton_reconcile_errors_total` may carry: those of the controller's
/// [`Error`](crate::error::Error), the rollout's and the scaling's among them.
pub const RECONCILE_ERRORS: [&str; crate::error::METRIC_LABELS.len()] = crate::error::METRIC_LABELS;

/// One StatefulSet's pod counts, as the planner reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCounts {
    pub total: u32,
    pub updated: u32,
    pub ready: u32,
}

impl ControllerMetrics {
    /// The metrics of a controller serving one namespace (the Go operator's label sets).
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        Self::register_serving(registry, false)
    }

    /// The metrics, each group's series labelled with its namespace if `namespaced`.
    pub fn register_serving(registry: &Registry, namespaced: bool) -> prometheus::Result<Self> {
        let group = &label_names(namespaced, &[]);
        let statefulset = &label_names(namespaced, &["statefulset"]);
        Ok(Self {
            reconciles: counters(
                registry,
                "rollout_operator_group_reconciles_total",
                "Total number of reconciles started for a specific rollout group.",
                group,
            )?,
            reconciles_failed: counters(
                registry,
                "rollout_operator_group_reconciles_failed_total",
                "Total number of reconciles failed for a specific rollout group.",
                group,
            )?,
            reconcile_errors: counters(
                registry,
                "baton_reconcile_errors_total",
                "Failures in a rollout group's reconcile, by what failed.",
                &label_names(namespaced, &["error"]),
            )?,
            failures: crate::error::register_failures(registry)?,
            reconcile_duration: registered(
                registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "rollout_operator_group_reconcile_duration_seconds",
                        "Total time spent running a reconcile for a specific rollout group.",
                    )
                    .buckets(vec![
                        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    ]),
                    group,
                )?,
            )?,
            group_queue_wait: registered(
                registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "baton_group_queue_wait_seconds",
                        "Time from a change to a rollout group to the start of the reconcile that serves it.",
                    )
                    .buckets(vec![
                        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    ]),
                )?,
            )?,
            last_successful_reconcile: registered(
                registry,
                GaugeVec::new(
                    Opts::new(
                        "rollout_operator_last_successful_group_reconcile_timestamp_seconds",
                        "Timestamp of the last successful reconcile for a specific rollout group.",
                    ),
                    group,
                )?,
            )?,
            pods_total: gauges(
                registry,
                "baton_rollout_pods",
                "Pods a StatefulSet of a rollout group should have (spec.replicas).",
                statefulset,
            )?,
            pods_updated: gauges(
                registry,
                "baton_rollout_pods_updated",
                "Pods of a StatefulSet at its update revision.",
                statefulset,
            )?,
            pods_ready: gauges(
                registry,
                "baton_rollout_pods_ready",
                "Pods of a StatefulSet that are available.",
                statefulset,
            )?,
            group_waiting: gauges(
                registry,
                "baton_rollout_group_waiting",
                "1 while a rollout group cannot make progress (the Event on its StatefulSets says why).",
                group,
            )?,
            waiting_reason: gauges(
                registry,
                "baton_rollout_group_waiting_reason",
                "1 for the reason a rollout group cannot make progress now (NotReady, MaxUnavailable, Paused, ...); no series while it can.",
                &label_names(namespaced, &["reason"]),
            )?,
            pod_deletions: counters(
                registry,
                "baton_rollout_pod_deletions_total",
                "Pods deleted by baton to roll them to the update revision.",
                statefulset,
            )?,
            gates: crate::gates::metrics::GateMetrics::register_serving(registry, namespaced)?,
            members: Arc::default(),
            reasons: Arc::default(),
            namespaced,
        })
    }
}

/// `collector`, registered in `registry`.
fn registered<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> prometheus::Result<C> {
    registry.register(Box::new(collector.clone()))?;
    Ok(collector)
}

/// A registered counter `name` by `labels`.
fn counters(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    registered(registry, IntCounterVec::new(Opts::new(name, help), labels)?)
}

/// A registered gauge `name` by `labels`.
fn gauges(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntGaugeVec> {
    registered(registry, IntGaugeVec::new(Opts::new(name, help), labels)?)
}

impl ControllerMetrics {
    /// Every collector of the set (the gates' included), for reading their names and labels
    /// (the monitoring test checks the dashboard against them). The pattern names every field:
    /// a new metric does not compile until it is listed here.
    pub fn collectors(&self) -> Vec<&dyn prometheus::core::Collector> {
        let Self {
            reconciles,
            reconciles_failed,
            reconcile_errors,
            failures,
            reconcile_duration,
            group_queue_wait,
            last_successful_reconcile,
            pods_total,
            pods_updated,
            pods_ready,
            group_waiting,
            waiting_reason,
            pod_deletions,
            gates:
                crate::gates::metrics::GateMetrics {
                    holding,
                    halted,
                    notices,
                    namespaced: _,
                },
            members: _,
            reasons: _,
            namespaced: _,
        } = self;
        vec![
            reconciles,
            reconciles_failed,
            reconcile_errors,
            failures.counter(),
            reconcile_duration,
            group_queue_wait,
            last_successful_reconcile,
            pods_total,
            pods_updated,
            pods_ready,
            group_waiting,
            waiting_reason,
            pod_deletions,
            holding,
            halted,
            notices,
        ]
    }

    /// Sets the pod gauges of `group`'s members and whether it waits, and removes the series of
    /// StatefulSets recorded for the group before that are no longer among `members`.
    pub fn record_group<'a>(
        &self,
        group: &str,
        members: impl IntoIterator<Item = (&'a str, PodCounts)>,
        waiting: bool,
    ) {
        let mut now = BTreeSet::new();
        for (statefulset, counts) in members {
            let labels = self.series(group, &[statefulset]);
            self.pods_total
                .with_label_values(&labels)
                .set(counts.total.into());
            self.pods_updated
                .with_label_values(&labels)
                .set(counts.updated.into());
            self.pods_ready
                .with_label_values(&labels)
                .set(counts.ready.into());
            now.insert(statefulset.to_owned());
        }
        self.group_waiting
            .with_label_values(&self.series(group, &[]))
            .set(i64::from(waiting));
        let before = self
            .lock_members()
            .insert(group.to_owned(), now.clone())
            .unwrap_or_default();
        for gone in before.difference(&now) {
            self.remove_statefulset(group, gone);
        }
    }

    /// Records why `group` waits now (the kind of a [`WaitReason`](baton_core::rollout::WaitReason);
    /// `None`: it does not), removing the series of the reason it waited for before.
    pub fn record_wait_reason(&self, group: &str, reason: Option<&'static str>) {
        let before = {
            let mut reasons = self
                .reasons
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match reason {
                Some(reason) => reasons.insert(group.to_owned(), reason),
                None => reasons.remove(group),
            }
        };
        if let Some(before) = before.filter(|before| Some(*before) != reason) {
            let _ = self
                .waiting_reason
                .remove_label_values(&self.series(group, &[before]));
        }
        if let Some(reason) = reason {
            self.waiting_reason
                .with_label_values(&self.series(group, &[reason]))
                .set(1);
        }
    }

    /// `group` has no member left: every series of it and of its StatefulSets goes.
    pub fn forget_group(&self, group: &str) {
        let before = self.lock_members().remove(group).unwrap_or_default();
        for gone in &before {
            self.remove_statefulset(group, gone);
        }
        self.record_wait_reason(group, None);
        let labels = self.series(group, &[]);
        let _ = self.group_waiting.remove_label_values(&labels);
        let _ = self.reconciles.remove_label_values(&labels);
        let _ = self.reconciles_failed.remove_label_values(&labels);
        for error in RECONCILE_ERRORS {
            let _ = self
                .reconcile_errors
                .remove_label_values(&self.series(group, &[error]));
        }
        let _ = self.reconcile_duration.remove_label_values(&labels);
        let _ = self.last_successful_reconcile.remove_label_values(&labels);
        self.gates.forget(group);
    }

    /// The label values of `group`'s series followed by `rest` ([`series`]).
    pub fn series<'a>(&self, group: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        series(self.namespaced, group, rest)
    }

    fn remove_statefulset(&self, group: &str, statefulset: &str) {
        let labels = self.series(group, &[statefulset]);
        // A series that was never created is not an error worth reporting.
        let _ = self.pods_total.remove_label_values(&labels);
        let _ = self.pods_updated.remove_label_values(&labels);
        let _ = self.pods_ready.remove_label_values(&labels);
        let _ = self.pod_deletions.remove_label_values(&labels);
    }

    fn lock_members(&self) -> std::sync::MutexGuard<'_, HashMap<String, BTreeSet<String>>> {
        self.members
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scaling_error_label_is_a_reconcile_error_label() {
        use crate::error::Error;
        let scaling = [
            Error::ScaleWrite {
                statefulset: "a".to_owned(),
                why: "denied".to_owned(),
            },
            Error::DownscaleFollowUp {
                source: Box::new(Error::Changed("the ledger".to_owned())),
            },
        ];
        for error in scaling {
            let error = error.metric_label();
            assert!(RECONCILE_ERRORS.contains(&error), "{error}");
        }
    }

    fn series(registry: &Registry) -> Vec<String> {
        let mut series = Vec::new();
        for family in registry.gather() {
            for metric in family.get_metric() {
                let labels: Vec<_> = metric
                    .get_label()
                    .iter()
                    .map(|label| format!("{}={}", label.name(), label.value()))
                    .collect();
                series.push(format!("{}{{{}}}", family.name(), labels.join(",")));
            }
        }
        series
    }

    const COUNTS: PodCounts = PodCounts {
        total: 3,
        updated: 1,
        ready: 3,
    };

    #[test]
    fn a_statefulset_that_left_its_group_loses_its_series() {
        let registry = Registry::new();
        let metrics = ControllerMetrics::register(&registry).unwrap();
        metrics.record_group("ingester", [("zone-a", COUNTS), ("zone-b", COUNTS)], false);
        metrics
            .pod_deletions
            .with_label_values(&["ingester", "zone-b"])
            .inc();
        assert!(
            series(&registry)
                .iter()
                .any(|s| s.contains("statefulset=zone-b"))
        );

        metrics.record_group("ingester", [("zone-a", COUNTS)], true);

        let now = series(&registry);
        assert!(
            !now.iter().any(|s| s.contains("statefulset=zone-b")),
            "zone-b left the group but still has series: {now:?}"
        );
        assert_eq!(
            now.iter()
                .filter(|s| s.contains("statefulset=zone-a"))
                .count(),
            3,
            "zone-a keeps its three gauges: {now:?}"
        );
    }

    #[test]
    fn a_group_has_one_waiting_reason_series_while_it_waits() {
        let registry = Registry::new();
        let metrics = ControllerMetrics::register(&registry).unwrap();
        let reasons = |registry: &Registry| -> Vec<String> {
            series(registry)
                .into_iter()
                .filter(|s| s.starts_with("baton_rollout_group_waiting_reason"))
                .collect()
        };

        metrics.record_wait_reason("ingester", Some("NotReady"));
        metrics.record_wait_reason("ingester", Some("MaxUnavailable"));
        metrics.record_wait_reason("other", Some("Paused"));
        assert_eq!(
            reasons(&registry),
            [
                "baton_rollout_group_waiting_reason{reason=MaxUnavailable,rollout_group=ingester}",
                "baton_rollout_group_waiting_reason{reason=Paused,rollout_group=other}",
            ]
        );

        metrics.record_wait_reason("ingester", None);
        metrics.forget_group("other");
        assert_eq!(reasons(&registry), Vec::<String>::new());
    }

    #[test]
    fn a_group_without_members_loses_every_series() {
        let registry = Registry::new();
        let metrics = ControllerMetrics::register(&registry).unwrap();
        for group in ["ingester", "other"] {
            metrics.reconciles.with_label_values(&[group]).inc();
            metrics.reconciles_failed.with_label_values(&[group]).inc();
            metrics
                .reconcile_duration
                .with_label_values(&[group])
                .observe(0.1);
            metrics
                .last_successful_reconcile
                .with_label_values(&[group])
                .set(1.0);
        }
        metrics.record_group("ingester", [("zone-a", COUNTS)], true);
        metrics.record_group("other", [("other-a", COUNTS)], false);

        metrics.forget_group("ingester");

        let now = series(&registry);
        assert!(
            !now.iter().any(|s| s.contains("rollout_group=ingester")),
            "{now:?}"
        );
        assert!(
            now.iter().any(|s| s.contains("rollout_group=other")),
            "{now:?}"
        );
    }

    #[test]
    fn where_several_namespaces_are_served_each_series_names_the_groups_namespace() {
        let registry = Registry::new();
        let metrics = ControllerMetrics::register_serving(&registry, true).unwrap();
        metrics.record_group("tenant-a/ingester", [("zone-a", COUNTS)], true);
        metrics.record_group("tenant-b/ingester", [("zone-a", COUNTS)], false);
        metrics.record_wait_reason("tenant-a/ingester", Some("Paused"));
        metrics.gates.record("tenant-b/ingester", None);
        let now = series(&registry);
        for expected in [
            "baton_rollout_group_waiting{namespace=tenant-a,rollout_group=ingester}",
            "baton_rollout_group_waiting{namespace=tenant-b,rollout_group=ingester}",
            "baton_rollout_pods{namespace=tenant-a,rollout_group=ingester,statefulset=zone-a}",
            "baton_rollout_group_waiting_reason{namespace=tenant-a,reason=Paused,rollout_group=ingester}",
            "baton_rollout_group_halted{namespace=tenant-b,rollout_group=ingester}",
        ] {
            assert!(
                now.iter().any(|s| s.starts_with(expected)),
                "{expected}: {now:?}"
            );
        }
        // Two namespaces' groups of one name are two groups: forgetting one leaves the other.
        metrics.forget_group("tenant-a/ingester");
        let now = series(&registry);
        assert!(
            !now.iter().any(|s| s.contains("namespace=tenant-a")),
            "{now:?}"
        );
        assert!(
            now.iter().any(|s| s.contains("namespace=tenant-b")),
            "{now:?}"
        );
        // And one namespace served keeps the Go operator's label set.
        assert_eq!(
            super::series(false, "ingester", &["zone-a"]),
            ["ingester", "zone-a"]
        );
        assert_eq!(
            super::series(true, "tenant-a/ingester", &["zone-a"]),
            ["tenant-a", "ingester", "zone-a"]
        );
    }
}
