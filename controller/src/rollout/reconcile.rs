//! The rollout side of a group's reconcile: from the group's snapshot, plan, let the gates hold,
//! explain, act. Everything it decides comes from the pure planner and the pure gate decision;
//! this layer only calls the API (and Prometheus, and hooks) around them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::explained::Explained;
use baton_core::pods::CachedPod;
use baton_shared::kube_client::bounded;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::Api;

use super::execute::{self, DeletionOutcome, ExecuteError};
use super::rollback::{Advanced, Rollbacks};
use crate::explain::{Explainer, Explanation, Severity};
use crate::gates::{self, store};
use crate::leader::MayAct;
use crate::metrics::{ControllerMetrics, PodCounts};
use crate::queue::Requeue;
use crate::rollout::pending::PendingDeletions;
use crate::status::StatusBoard;
use baton_core::rollout::{Action, GroupSnapshot, Plan, Told, WaitReason};
use baton_core::status::model::ActionRecord;

/// The rollout side of every group's reconcile (scaling is its sibling: see
/// [`crate::group`]); shared by all groups.
pub struct Rollouts {
    pub namespace: String,
    pub client: kube::Client,
    pub metrics: ControllerMetrics,
    pub explainer: Explainer,
    pub request_timeout: Duration,
    pub pending: PendingDeletions,
    /// Consulted before every deletion that takes availability away: a drain and a rollout
    /// together must never exceed a zone-aware budget.
    pub budgets: crate::zpdb_check::ZoneBudgets,
    /// The leader's history for the status page: why each group waits since when, what it did.
    pub status: StatusBoard,
    /// Health check runs and hook calls, within the operator's bounds.
    pub gate_calls: gates::calls::GateCalls,
    /// The zones seen rolling, to tell when each completes.
    pub completions: super::completion::Completions,
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
        pods: &[Arc<CachedPod>],
        may_act: &MayAct,
    ) -> Result<Requeue, ExecuteError> {
        let mut snapshot = GroupSnapshot::from_kubernetes(
            group,
            members.iter().map(Arc::as_ref),
            pods.iter().map(Arc::as_ref),
        );
        self.pending.apply(&mut snapshot, Instant::now());
        // A rollback asked for starts, and templates go back, before anything is planned: each
        // is a write whose watch event brings the group back.
        if may_act().is_some() {
            let rollbacks = Rollbacks {
                client: &self.client,
                namespace: &self.namespace,
                timeout: self.request_timeout,
                explainer: &self.explainer,
            };
            if rollbacks.advance(group, &snapshot, members).await? == Advanced::Wrote {
                return Ok(Requeue::Never);
            }
        }
        // The planner's plan as the rollout gates allow it (a group without gate
        // keys gets the plan unchanged).
        let now = jiff::Timestamp::now();
        let (plan, gate) = gates::health::evaluate(&self.gate_calls, &snapshot, now).await;
        if let Some(call) = gate.hook.clone()
            && may_act().is_some()
        {
            let calls = &self.gate_calls;
            let timeout = self.request_timeout;
            let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
            let key = gates::calls::GateCalls::hook_key(&call);
            if let Some(ended) = calls.hook_calls.take_ended(group, &key) {
                // What the hook answered is stored whatever changed meanwhile: a record lost to
                // a resourceVersion race would call it again.
                let recorded =
                    baton_core::gates::hooks::record(&snapshot, &call, ended.answer, ended.at);
                store::store_unconditionally(&api, &recorded, timeout).await?;
            } else if !calls.hook_calls.running(group, &key) {
                // Called only if still due on a fresh read (the cache may lag a call just
                // made), beside the reconciles: its answer queues the group again.
                let reading = format!("reading {} before its hook", call.zone);
                let fresh = bounded(timeout, reading, api.get(&call.zone)).await;
                if let Ok(Ok(fresh)) = fresh
                    && baton_core::gates::hooks::still_due(&fresh, &call, now)
                {
                    calls.start_hook(group, call);
                }
            }
        }
        self.record_progress(group, &plan, gate.wait().is_some());
        for (statefulset, revision) in self.completions.completed(&snapshot, &plan) {
            let note = format!("every pod of {statefulset} runs revision {revision}");
            let said = Said::new("RolloutComplete", "UpdateStatus", note);
            self.explain_deletion(group, members, &statefulset, None, said)
                .await;
        }
        self.metrics.gates.record(group, gate.wait());
        self.explain(group, members, &plan).await;
        gates::explain::explain(&self.explainer, group, members, &gate).await;
        if !gate.writes.is_empty() {
            // Stored before acting, by this term's leader only: a failover keeps the gate.
            if may_act().is_none() {
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
        if may_act().is_some() {
            self.metrics.gates.count_notices(group, &gate.notices);
        }
        let held = self.act(group, members, &plan, may_act).await?;
        // What the status page says the group waits for, and since when: the budget that held a
        // deletion, else the gate, else the planner.
        let waiting = match &held {
            Some(note) => Some((crate::zpdb_check::WAIT_REASON, note.clone())),
            None => gate
                .wait()
                .map(Explained::kind_and_message)
                .or_else(|| plan.waiting.as_ref().map(Explained::kind_and_message)),
        };
        // The metric names the reason only while the group has pods to roll.
        let reason = waiting.as_ref().map(|(kind, _)| *kind);
        self.metrics
            .record_wait_reason(group, reason.filter(|_| rollout_pending(&plan)));
        self.status.observe(group, waiting, now);
        let recheck = plan.recheck_after.map_or(Requeue::Never, Requeue::at);
        Ok(match held {
            // The budget's record of claims is not watched: look again soon.
            Some(_) => recheck.sooner(Requeue::After(crate::zpdb_check::RECHECK_AFTER)),
            None => recheck,
        })
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
                self.explainer
                    .tell(
                        &statefulset.object_ref(&()),
                        Explanation::of_warning(warning),
                    )
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

    /// Carries out the plan's actions in order, while this term lasts. Returns the zone-aware
    /// budget's reason when one held a deletion (the pass then deletes nothing more).
    async fn act(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        plan: &Plan,
        may_act: &MayAct,
    ) -> Result<Option<String>, ExecuteError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let statefulsets: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
        for action in &plan.actions {
            // The term may have ended while planning: check right before every call.
            if may_act().is_none() {
                return Ok(None);
            }
            match action {
                Action::DeletePod {
                    statefulset,
                    pod,
                    uid,
                    unavailable,
                } => {
                    let deletion = crate::zpdb_check::Deletion {
                        statefulset,
                        pod,
                        free_replacement: unavailable.is_some(),
                    };
                    if let Some(note) = self.budget_holds(group, members, &deletion).await {
                        return Ok(Some(note));
                    }
                    // Within the term the pass started in: a deposed leader stops deleting
                    // when its term ends, not a request timeout later.
                    let Some(left) = may_act() else {
                        return Ok(None);
                    };
                    let outcome = execute::delete_pod(
                        &pods,
                        &self.pending,
                        group,
                        pod,
                        uid,
                        self.request_timeout.min(left),
                    )
                    .await?;
                    if outcome != DeletionOutcome::Done {
                        continue;
                    }
                    self.metrics
                        .pod_deletions
                        .with_label_values(&[group, statefulset.as_str()])
                        .inc();
                    let Some(told) = action.told(&plan.progress) else {
                        continue;
                    };
                    let said = Said::from(told);
                    self.explain_deletion(group, members, statefulset, Some(pod), said)
                        .await;
                }
                Action::SetPartition {
                    statefulset,
                    partition,
                    releases,
                } => {
                    let Some(cached) = find(members, statefulset) else {
                        continue;
                    };
                    // The StatefulSet controller takes the released pods down: each is a
                    // rollout deletion for the zone-aware budgets, as if baton deleted it.
                    for release in releases {
                        let free_replacement = plan.actions.iter().any(|action| {
                            matches!(action, Action::DeletePod { pod, unavailable: Some(_), .. } if *pod == release.pod)
                        });
                        let deletion = crate::zpdb_check::Deletion {
                            statefulset,
                            pod: &release.pod,
                            free_replacement,
                        };
                        if let Some(note) = self.budget_holds(group, members, &deletion).await {
                            return Ok(Some(note));
                        }
                    }
                    let Some(left) = may_act() else {
                        return Ok(None);
                    };
                    let outcome = execute::set_partition(
                        &statefulsets,
                        cached,
                        *partition,
                        self.request_timeout.min(left),
                    )
                    .await?;
                    if outcome != DeletionOutcome::Done {
                        // Written meanwhile: the next pass plans on the new version.
                        return Ok(None);
                    }
                    let Some(told) = action.told(&plan.progress) else {
                        continue;
                    };
                    let said = Said::from(told);
                    self.explain_deletion(group, members, statefulset, None, said)
                        .await;
                }
                Action::SetCurrentRevision {
                    statefulset,
                    revision,
                } => {
                    let Some(cached) = find(members, statefulset) else {
                        continue;
                    };
                    // Its watch event brings the pass that tells the zone complete
                    // (`completion`), as when the StatefulSet controller sets it.
                    execute::set_current_revision(
                        &statefulsets,
                        cached,
                        revision,
                        self.request_timeout,
                    )
                    .await?;
                }
            }
        }
        Ok(None)
    }

    /// Consults the zone-aware budgets before `deletion` (by baton, or by the StatefulSet
    /// controller past a lowered partition); when one holds it, says so and returns why.
    async fn budget_holds(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        deletion: &crate::zpdb_check::Deletion<'_>,
    ) -> Option<String> {
        let permit = self.budgets.before_deletion(group, deletion).await;
        let crate::zpdb_check::Permit::Wait(note) = permit else {
            return None;
        };
        let said = Said::new(crate::zpdb_check::WAIT_REASON, "Wait", note.clone());
        self.explain_deletion(group, members, deletion.statefulset, None, said)
            .await;
        Some(note)
    }

    /// Tells what the pass did or why it stopped: an Event on the StatefulSet, and for an action
    /// taken, a line in the status page's history.
    async fn explain_deletion(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        statefulset: &str,
        pod: Option<&str>,
        said: Said,
    ) {
        if said.action != "Wait" {
            self.status.record_action(
                group,
                ActionRecord {
                    at: jiff::Timestamp::now(),
                    action: said.action.to_owned(),
                    statefulset: statefulset.to_owned(),
                    pod: pod.map(str::to_owned),
                    note: said.note.clone(),
                },
            );
        }
        if let Some(owner) = find(members, statefulset) {
            let explanation = Explanation {
                severity: Severity::Normal,
                reason: said.reason.to_owned(),
                action: said.action.to_owned(),
                note: said.note,
            };
            self.explainer
                .tell(&owner.object_ref(&()), explanation)
                .await;
        }
    }
}

/// What a pass says about one of its steps: the Event's reason and action, and the sentence.
struct Said {
    reason: &'static str,
    action: &'static str,
    note: String,
}

impl From<Told> for Said {
    fn from(told: Told) -> Self {
        Self::new(told.reason, told.action, told.note)
    }
}

impl Said {
    fn new(reason: &'static str, action: &'static str, note: String) -> Self {
        Self {
            reason,
            action,
            note,
        }
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
