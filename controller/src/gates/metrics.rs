//! The gates' metrics: what each group's gate holds it for, and whether it is halted.

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

use baton_core::explained::Explained;
use baton_core::gates::{GateNotice, GateWait};

/// Every [`GateWait`]'s kind ([`Explained::kind`]), so that a group's series for the other kinds read 0.
const KINDS: [&str; 12] = [
    "Halted",
    "InvalidGate",
    "ZoneUnfinished",
    "Soak",
    "HealthCheck",
    "Ramp",
    "Batch",
    "AwaitingApproval",
    "RollingBack",
    "TemplateReverted",
    "Hook",
    "RefusedHook",
];

#[derive(Debug, Clone)]
pub struct GateMetrics {
    /// 1 for the reason the group's gate holds deletions now, 0 for the others.
    pub holding: IntGaugeVec,
    /// 1 while the group is halted (a person must resume it).
    pub halted: IntGaugeVec,
    /// Failures of checks whose onFailure is Warn, and steps a bypass let go.
    pub notices: IntCounterVec,
    /// Whether each series carries its group's namespace ([`crate::metrics::series`]).
    pub namespaced: bool,
}

impl GateMetrics {
    /// The gates' metrics of a controller serving one namespace.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        Self::register_serving(registry, false)
    }

    /// The gates' metrics, each series labelled with its group's namespace if `namespaced`.
    pub fn register_serving(registry: &Registry, namespaced: bool) -> prometheus::Result<Self> {
        let names = |rest: &[&'static str]| crate::metrics::label_names(namespaced, rest);
        let metrics = Self {
            holding: IntGaugeVec::new(
                Opts::new(
                    "baton_rollout_gate_holding",
                    "1 when the group's rollout gate holds pod deletions for this reason \
                     (Soak, ZoneUnfinished, HealthCheck, Ramp, Batch, AwaitingApproval, RollingBack, \
                     TemplateReverted, Hook, Halted, InvalidGate), else 0.",
                ),
                &names(&["reason"]),
            )?,
            halted: IntGaugeVec::new(
                Opts::new(
                    "baton_rollout_group_halted",
                    "1 while the rollout group is halted (baton.dev/halted, or a template re-applied \
                     after a rollback), else 0.",
                ),
                &names(&[]),
            )?,
            notices: IntCounterVec::new(
                Opts::new(
                    "baton_rollout_gate_notices_total",
                    "What a gate let go without holding: HealthCheckWarning (a failed run of a \
                     check whose onFailure is Warn), GateBypassed (a step that went without its \
                     soak or check under baton.dev/bypass-gates-until).",
                ),
                &names(&["reason"]),
            )?,
            namespaced,
        };
        registry.register(Box::new(metrics.holding.clone()))?;
        registry.register(Box::new(metrics.halted.clone()))?;
        registry.register(Box::new(metrics.notices.clone()))?;
        Ok(metrics)
    }

    /// Counts what the gate of `group` let go this pass (the leader's passes only: a pass
    /// that is not acted on is not counted).
    pub fn count_notices(&self, group: &str, notices: &[GateNotice]) {
        for notice in notices {
            self.notices
                .with_label_values(&self.series(group, &[notice.kind()]))
                .inc();
        }
    }

    /// Records what the gate of `group` holds for now (None: nothing).
    pub fn record(&self, group: &str, wait: Option<&GateWait>) {
        for kind in KINDS {
            let holding = wait.is_some_and(|wait| wait.kind() == kind);
            self.holding
                .with_label_values(&self.series(group, &[kind]))
                .set(i64::from(holding));
        }
        let halted = matches!(
            wait,
            Some(GateWait::Halted { .. } | GateWait::TemplateReverted { .. })
        );
        self.halted
            .with_label_values(&self.series(group, &[]))
            .set(i64::from(halted));
    }

    fn series<'a>(&self, group: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        crate::metrics::series(self.namespaced, group, rest)
    }

    /// Drops a group's series (it has no members left).
    pub fn forget(&self, group: &str) {
        for kind in KINDS {
            let _ = self
                .holding
                .remove_label_values(&self.series(group, &[kind]));
        }
        let _ = self.halted.remove_label_values(&self.series(group, &[]));
        for kind in ["GateBypassed", "HealthCheckWarning"] {
            let _ = self
                .notices
                .remove_label_values(&self.series(group, &[kind]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_held_reason_reads_one_and_the_others_zero() {
        let registry = Registry::new();
        let metrics = GateMetrics::register(&registry).expect("registers");
        let wait = GateWait::Halted {
            statefulset: "zone-b".to_owned(),
            why: "errors".to_owned(),
            reach: Default::default(),
        };
        metrics.record("ingester", Some(&wait));
        assert_eq!(metrics.halted.with_label_values(&["ingester"]).get(), 1);
        for kind in KINDS {
            let value = metrics.holding.with_label_values(&["ingester", kind]).get();
            assert_eq!(value, i64::from(kind == "Halted"), "{kind}");
        }
        metrics.record("ingester", None);
        assert_eq!(metrics.halted.with_label_values(&["ingester"]).get(), 0);
        metrics.forget("ingester");
        assert!(
            registry
                .gather()
                .iter()
                .all(|family| family.get_metric().is_empty())
        );
    }
}
