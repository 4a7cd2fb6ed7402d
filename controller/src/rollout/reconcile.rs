//! The rollout side of a group's reconcile: from the group's snapshot, plan, let the gates hold,
//! explain, act. Everything it decides comes from the pure planner and the pure gate decision;
//! this layer only calls the API (and Prometheus, and hooks) around them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_shared::kube_client::bounded;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::Api;

use super::execute::{self, ExecuteError, Outcome};
use super::pending::PendingDeletions;
use super::{Action, GroupSnapshot, Plan, WaitReason, replacement_note};
use crate::explain::{Explainer, Explanation, Severity};
use crate::gates::{self, store};
use crate::leader::MayAct;
use crate::metrics::{ControllerMetrics, PodCounts};
use crate::queue::Requeue;

/// The rollout side of every group's reconcile (scaling is its sibling: see
/// [`crate::group`]); shared by all groups.
pub struct Rollouts {
    pub namespace: String,
    pub client: kube::Client,
    pub metrics: ControllerMetrics,
    pub explainer: Explainer,
    pub request_timeout: Duration,
    pub pending: PendingDeletions,
    /// Consulted before every deletion that takes availability away (issue 13).
    pub budgets: crate::zpdb::ZoneBudgets,
}

impl std::fmt::Debug for Rollouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollouts")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Rollouts {
    /// One rollout pass over `group`, on the snapshot its reconcile read: plan, gate, explain,
    /// act. Returns when the group wants to come back.
    pub async fn reconcile(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        pods: &[Arc<Pod>],
        may_act: &MayAct,
    ) -> Result<Requeue, ExecuteError> {
        let mut snapshot = GroupSnapshot::from_kubernetes(
            group,
            members.iter().map(Arc::as_ref),
            pods.iter().map(Arc::as_ref),
        );
        self.pending.apply(&mut snapshot, Instant::now());
        // The planner's plan as the rollout gates allow it (issue 12; a group without gate
        // keys gets the plan unchanged).
        let now = jiff::Timestamp::now();
        let (plan, gate) = gates::health::evaluate(
            &self.client,
            self.request_timeout,
            &self.namespace,
            &snapshot,
            now,
        )
        .await;
        if let Some(call) = gate.hook.clone()
            && may_act()
        {
            // What the hook answered is stored whatever changed meanwhile: a record lost to a
            // resourceVersion race would call it again.
            // Called only if still due on a fresh read (the cache may lag a call just made).
            let timeout = self.request_timeout;
            let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
            let reading = format!("reading {} before its hook", call.zone);
            let fresh = bounded(timeout, reading, api.get(&call.zone)).await;
            if let Ok(Ok(fresh)) = fresh
                && gates::hooks::still_due(&fresh, &call, now)
            {
                let answer = gates::hooks::post(&call, group, &self.namespace, timeout).await;
                let recorded = gates::hooks::record(&snapshot, &call, answer, now);
                store::store_unconditionally(&api, &recorded, timeout).await?;
            }
        }
        self.record_progress(group, &plan, gate.wait().is_some());
        self.metrics.gates.record(group, gate.wait());
        self.explain(group, members, &plan).await;
        gates::report::explain(&self.explainer, group, members, &gate).await;
        if !gate.writes.is_empty() {
            // Stored before acting, by this term's leader only: a failover keeps the gate.
            if !may_act() {
                return Ok(Requeue::Never);
            }
            let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
            let read: Vec<&StatefulSet> = members.iter().map(Arc::as_ref).collect();
            let stored = store::store(&api, &read, &gate.writes, self.request_timeout).await?;
            if stored == store::Stored::Stale {
                // The stored objects' watch events bring the group back.
                return Ok(Requeue::Never);
            }
        }
        let held = self.act(group, members, &plan, may_act).await?;
        Ok(plan
            .recheck_after
            .map_or(Requeue::Never, Requeue::at)
            .sooner(held))
    }

    fn record_progress(&self, group: &str, plan: &Plan, gated: bool) {
        let counts = plan.progress.iter().map(|progress| {
            let counts = PodCounts {
                total: progress.total,
                updated: progress.updated,
                ready: progress.ready,
            };
            (progress.statefulset.as_str(), counts)
        });
        let waiting = (plan.waiting.is_some() || gated) && rollout_pending(plan);
        self.metrics.record_group(group, counts, waiting);
    }

    async fn explain(&self, group: &str, members: &[Arc<StatefulSet>], plan: &Plan) {
        for warning in &plan.warnings {
            if let Some(statefulset) = find(members, warning.statefulset()) {
                let explanation = Explanation {
                    severity: Severity::Warning,
                    reason: warning.kind().to_owned(),
                    action: "Validate".to_owned(),
                    note: warning.to_string(),
                };
                self.explainer
                    .tell(&statefulset.object_ref(&()), explanation)
                    .await;
            }
        }
        let Some(waiting) = &plan.waiting else {
            return;
        };
        let blocking = matches!(
            waiting,
            WaitReason::NonOnDeleteMember { .. } | WaitReason::NoUpdateRevision { .. }
        );
        if !blocking && !rollout_pending(plan) {
            return;
        }
        let subject = waiting
            .statefulset()
            .map(str::to_owned)
            .or_else(|| match waiting {
                WaitReason::MultipleNotReady { statefulsets }
                | WaitReason::Paused { statefulsets } => statefulsets.first().cloned(),
                _ => None,
            });
        let Some(statefulset) = subject.as_deref().and_then(|name| find(members, name)) else {
            return;
        };
        let explanation = Explanation {
            severity: if blocking {
                Severity::Warning
            } else {
                Severity::Normal
            },
            reason: waiting.kind().to_owned(),
            action: "Wait".to_owned(),
            note: format!("rollout group {group} waits: {waiting}"),
        };
        self.explainer
            .tell(&statefulset.object_ref(&()), explanation)
            .await;
    }

    async fn act(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        plan: &Plan,
        may_act: &MayAct,
    ) -> Result<Requeue, ExecuteError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let statefulsets: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
        // Set once a zone-aware budget holds a deletion: the pass deletes nothing more.
        let mut held = Requeue::Never;
        for action in &plan.actions {
            // The term may have ended while planning: check right before every call.
            if !may_act() {
                return Ok(held);
            }
            match action {
                Action::DeletePod {
                    statefulset,
                    pod,
                    uid,
                    unavailable,
                } => {
                    if held != Requeue::Never {
                        continue;
                    }
                    let deletion = crate::zpdb::Deletion {
                        statefulset,
                        pod,
                        free_replacement: unavailable.is_some(),
                    };
                    let permit = self.budgets.before_deletion(group, &deletion).await;
                    if let crate::zpdb::Permit::Wait(note) = permit {
                        held = Requeue::After(crate::zpdb::RECHECK_AFTER);
                        if let Some(owner) = find(members, statefulset) {
                            let explanation = Explanation {
                                severity: Severity::Normal,
                                reason: crate::zpdb::WAIT_REASON.to_owned(),
                                action: "Wait".to_owned(),
                                note,
                            };
                            self.explainer
                                .tell(&owner.object_ref(&()), explanation)
                                .await;
                        }
                        continue;
                    }
                    let outcome = execute::delete_pod(
                        &pods,
                        &self.pending,
                        group,
                        pod,
                        uid,
                        self.request_timeout,
                    )
                    .await?;
                    if outcome == Outcome::Done {
                        self.metrics
                            .pod_deletions
                            .with_label_values(&[group, statefulset.as_str()])
                            .inc();
                    }
                    if let Some(owner) = find(members, statefulset) {
                        let progress = plan.progress.iter().find(|p| &p.statefulset == statefulset);
                        let note = match (unavailable, progress) {
                            (Some(why), _) => replacement_note(pod, why),
                            (None, Some(progress)) => format!(
                                "deleted pod {pod} to roll it to the update revision ({} of {} pods updated)",
                                progress.updated, progress.total
                            ),
                            (None, None) => {
                                format!("deleted pod {pod} to roll it to the update revision")
                            }
                        };
                        let reason = match unavailable {
                            Some(_) => "UnavailablePodReplaced",
                            None => "RolloutPodDeleted",
                        };
                        let explanation = Explanation {
                            severity: Severity::Normal,
                            reason: reason.to_owned(),
                            action: "DeletePod".to_owned(),
                            note,
                        };
                        self.explainer
                            .tell(&owner.object_ref(&()), explanation)
                            .await;
                    }
                }
                Action::SetCurrentRevision {
                    statefulset,
                    revision,
                } => {
                    let Some(cached) = find(members, statefulset) else {
                        continue;
                    };
                    let outcome = execute::set_current_revision(
                        &statefulsets,
                        cached,
                        revision,
                        self.request_timeout,
                    )
                    .await?;
                    if outcome == Outcome::Done {
                        let explanation = Explanation {
                            severity: Severity::Normal,
                            reason: "RolloutComplete".to_owned(),
                            action: "UpdateStatus".to_owned(),
                            note: format!("every pod of {statefulset} runs revision {revision}"),
                        };
                        self.explainer
                            .tell(&cached.object_ref(&()), explanation)
                            .await;
                    }
                }
            }
        }
        Ok(held)
    }
}

/// Some StatefulSet of the group still has pods to update.
fn rollout_pending(plan: &Plan) -> bool {
    plan.progress
        .iter()
        .any(|progress| progress.updated < progress.total)
}

fn find<'a>(members: &'a [Arc<StatefulSet>], name: &str) -> Option<&'a StatefulSet> {
    members
        .iter()
        .map(Arc::as_ref)
        .find(|statefulset| statefulset.metadata.name.as_deref() == Some(name))
}
