//! Tells people about a gate decision: its warnings and why it holds the group, as Events on
//! the StatefulSet concerned (the explainer skips repeats).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Resource;

use crate::explain::{Explainer, Explanation, Severity};
use baton_core::explained::Explained;
use baton_core::gates::{GateDecision, GateWait};

/// Publishes the decision's warnings, notices and wait. Halted and an invalid gate are Warnings (a
/// person must act); a soak or an unfinished zone are Normal.
pub async fn explain(
    explainer: &Explainer,
    group: &str,
    members: &[Arc<StatefulSet>],
    decision: &GateDecision,
) {
    let find = |name: &str| {
        members
            .iter()
            .find(|member| member.metadata.name.as_deref() == Some(name))
    };
    for warning in &decision.warnings {
        let Some(member) = warning.statefulset().and_then(find) else {
            continue;
        };
        explainer
            .tell(&member.object_ref(&()), Explanation::of_warning(warning))
            .await;
    }
    for notice in &decision.notices {
        let Some(member) = find(notice.statefulset()) else {
            continue;
        };
        let explanation = Explanation {
            severity: if notice.is_warning() {
                Severity::Warning
            } else {
                Severity::Normal
            },
            reason: notice.kind().to_owned(),
            action: "Gate".to_owned(),
            note: format!("rollout group {group}: {notice}"),
        };
        explainer.tell(&member.object_ref(&()), explanation).await;
    }
    let Some(wait) = decision.wait() else {
        return;
    };
    let Some(member) = find(wait.statefulset()) else {
        return;
    };
    let severity = match wait {
        GateWait::Halted { .. }
        | GateWait::InvalidGate { .. }
        | GateWait::RefusedHook { .. }
        | GateWait::TemplateReverted { .. } => Severity::Warning,
        GateWait::Soak { .. }
        | GateWait::ZoneUnfinished { .. }
        | GateWait::HealthCheck { .. }
        | GateWait::Ramp { .. }
        | GateWait::Batch { .. }
        | GateWait::AwaitingApproval { .. }
        | GateWait::RollingBack { .. }
        | GateWait::Hook { .. } => Severity::Normal,
    };
    let explanation = Explanation {
        severity,
        reason: wait.kind().to_owned(),
        action: "Gate".to_owned(),
        note: format!("rollout group {group} waits: {wait}"),
    };
    explainer.tell(&member.object_ref(&()), explanation).await;
}
