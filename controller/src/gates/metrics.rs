//! The gates' metrics: what each group's gate holds it for, and whether it is halted.

use prometheus::{IntGaugeVec, Opts, Registry};

use baton_core::gates::GateWait;

/// Every [`GateWait::kind`], so that a group's series for the other kinds read 0.
const KINDS: [&str; 8] = [
    "Halted",
    "InvalidGate",
    "ZoneUnfinished",
    "Soak",
    "HealthCheck",
    "Ramp",
    "Hook",
    "RefusedHook",
];

#[derive(Debug, Clone)]
pub struct GateMetrics {
    /// 1 for the reason the group's gate holds deletions now, 0 for the others.
    pub holding: IntGaugeVec,
    /// 1 while the group is halted (a person must resume it).
    pub halted: IntGaugeVec,
}

impl GateMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let metrics = Self {
            holding: IntGaugeVec::new(
                Opts::new(
                    "baton_rollout_gate_holding",
                    "1 when the group's rollout gate holds pod deletions for this reason \
                     (Soak, ZoneUnfinished, HealthCheck, Ramp, Hook, Halted, InvalidGate), else 0.",
                ),
                &["rollout_group", "reason"],
            )?,
            halted: IntGaugeVec::new(
                Opts::new(
                    "baton_rollout_group_halted",
                    "1 while the rollout group is halted (baton.dev/halted), else 0.",
                ),
                &["rollout_group"],
            )?,
        };
        registry.register(Box::new(metrics.holding.clone()))?;
        registry.register(Box::new(metrics.halted.clone()))?;
        Ok(metrics)
    }

    /// Records what the gate of `group` holds for now (None: nothing).
    pub fn record(&self, group: &str, wait: Option<&GateWait>) {
        for kind in KINDS {
            let holding = wait.is_some_and(|wait| wait.kind() == kind);
            self.holding
                .with_label_values(&[group, kind])
                .set(i64::from(holding));
        }
        let halted = matches!(wait, Some(GateWait::Halted { .. }));
        self.halted
            .with_label_values(&[group])
            .set(i64::from(halted));
    }

    /// Drops a group's series (it has no members left).
    pub fn forget(&self, group: &str) {
        for kind in KINDS {
            let _ = self.holding.remove_label_values(&[group, kind]);
        }
        let _ = self.halted.remove_label_values(&[group]);
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
