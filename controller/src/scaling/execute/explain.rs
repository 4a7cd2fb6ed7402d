//! How a scaling pass tells what it did and why it holds: every finding and outcome becomes an
//! Event on the StatefulSet concerned (through the explainer: off the critical path, repeats
//! filtered) — the wording in one place, so a person reads the same sentence for the same case.

use std::collections::BTreeMap;

use baton_core::duration::prometheus as prometheus_duration;
use jiff::Timestamp;
use kube::Resource;

use super::Pass;
use crate::explain::{Explanation, Severity};
use baton_core::scaling::plan::{Finding, FindingKind, reasons};

impl Pass<'_> {
    pub(super) async fn tell(&self, finding: &Finding) {
        let (severity, action) = match finding.kind {
            FindingKind::Scale => (Severity::Normal, "Scale"),
            FindingKind::Hold => (Severity::Normal, "Wait"),
            FindingKind::Problem => (Severity::Warning, "Validate"),
        };
        self.say(
            &finding.statefulset,
            severity,
            finding.reason,
            action,
            finding.note.clone(),
        )
        .await;
    }

    pub(super) async fn say(
        &self,
        statefulset: &str,
        severity: Severity,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let Some(object) = self.statefulset(statefulset) else {
            return;
        };
        let explanation = Explanation {
            severity,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note,
        };
        self.explainer
            .tell(&object.object_ref(&()), explanation)
            .await;
    }

    /// A `/scale` call that failed (denied by an admission webhook, or the API's error).
    pub(super) async fn tell_scale_failed(
        &self,
        statefulset: &str,
        from: i32,
        to: i32,
        error: &str,
    ) {
        self.failed(super::super::SCALE_WRITE);
        self.say(
            statefulset,
            Severity::Warning,
            reasons::DENIED,
            "Scale",
            format!("{statefulset} stays at {from}: scaling it to {to} failed: {error}"),
        )
        .await;
    }

    /// A delayed downscale that went (part of) the way down.
    pub(super) async fn tell_scaled_down(
        &self,
        name: &str,
        from: i32,
        to: i32,
        replicas: i32,
        delay: std::time::Duration,
    ) {
        let delay = prometheus_duration::format(delay);
        let partial = if replicas > to {
            format!(" (of the wanted {to}; the others prepared less than {delay} ago)")
        } else {
            String::new()
        };
        self.say(
            name,
            Severity::Normal,
            reasons::SCALE_DOWN,
            "Scale",
            format!("{name} scales down from {from} to {replicas}{partial}: its pods prepared for delayed downscale at least {delay} ago"),
        )
        .await;
    }

    /// A delayed downscale waiting for its pods' delay to pass.
    pub(super) async fn tell_delayed_waiting(
        &self,
        name: &str,
        from: i32,
        to: i32,
        delay: std::time::Duration,
        last_pod: &str,
        until: Timestamp,
    ) {
        let delay = prometheus_duration::format(delay);
        self.say(
            name,
            Severity::Normal,
            reasons::DELAYED_DOWNSCALE_WAITING,
            "Wait",
            format!("{name} stays at {from} (wanted {to}): delayed downscale of {delay}; {last_pod} may go at {until}"),
        )
        .await;
    }

    /// Pods that could not be prepared: the downscale holds.
    pub(super) async fn tell_prepare_failed(
        &self,
        name: &str,
        from: i32,
        to: i32,
        failures: &BTreeMap<String, String>,
    ) {
        let detail: Vec<String> = failures
            .iter()
            .map(|(pod, error)| format!("{pod}: {error}"))
            .collect();
        self.say(
            name,
            Severity::Warning,
            reasons::DELAYED_DOWNSCALE_FAILED,
            "Prepare",
            format!(
                "{name} stays at {from} (wanted {to}): pods could not be prepared for delayed downscale: {}",
                detail.join("; ")
            ),
        )
        .await;
    }
}
