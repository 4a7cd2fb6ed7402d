//! The rollout side of a group's reconcile: read what the pass decides on, decide it in one
//! call (`baton_core::pass::decide`), and run the effects in order. Every decision is the
//! core's; this layer reads the caches (and the health check, and the hook's answer), calls the
//! API (and Prometheus, and hooks), each write within the pass's leadership term ([`Runner`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::clusters::Outage;
use baton_core::pass::{self, CheckRead, Effect, Gates, HookRead, Pass, Read};
use baton_core::pods::CachedPod;
use baton_shared::kube_client::bounded;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;

use super::execute::{self, DeletionOutcome};
use super::rollback::Rollbacks;
use crate::error::Error;
use crate::explain::{Explainer, Explanation, Severity};
use crate::gates::{self, store};
use crate::metrics::{ControllerMetrics, PodCounts};
use crate::queue::Requeue;
use crate::rollout::pending::PendingDeletions;
use crate::runner::{MayAct, Runner};
use crate::status::StatusBoard;
use baton_core::rollout::{Action, GroupSnapshot};
use baton_core::status::model::ActionRecord;
/// The rollout side of every group's reconcile (scaling is its sibling: see
/// [`crate::group`]); shared by all groups.
pub struct Rollouts {
    pub namespace: String,
    /// Where the groups' objects are: each write goes to its object's cluster.
    pub clusters: crate::clusters::Clusters,
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
    /// One rollout pass over `group`, on the snapshot its reconcile read: read, decide, run
    /// the effects. Returns when the group wants to come back.
    pub async fn reconcile(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        pods: &[Arc<CachedPod>],
        outages: &[Outage],
        may_act: &MayAct,
    ) -> Result<Requeue, Error> {
        let mut snapshot = GroupSnapshot::from_kubernetes(
            group,
            members.iter().map(Arc::as_ref),
            pods.iter().map(Arc::as_ref),
        );
        baton_core::clusters::mark_outages(&mut snapshot, outages);
        self.pending.apply(&mut snapshot, Instant::now());
        let now = jiff::Timestamp::now();
        let gates = Gates::read(&snapshot);
        let check = match gates.check_to_read() {
            Some(name) => gates::health::read(&self.gate_calls, &snapshot, name).await,
            None => CheckRead::NotRead,
        };
        let hook = match gates.hook() {
            Some(url) => self.gate_calls.hook_read(group, url),
            None => HookRead::default(),
        };
        let rolling = self.completions.seen(group);
        let read = Read {
            snapshot: &snapshot,
            gates: &gates,
            check: &check,
            hook: &hook,
            rolling: &rolling,
            namespace: &self.namespace,
            now,
        };
        let pass = pass::decide(&read);
        self.completions.keep(group, pass.rolling.clone());
        if !pass.starts_with_rollback() {
            self.record_progress(group, &pass);
            self.metrics.gates.record(group, pass.gate_wait.as_ref());
        }
        let ran = match self.run(group, members, &snapshot, &pass, may_act).await {
            // Ended between two writes of one effect: as when it ends between two effects.
            Err(Error::TermLost) => Ran::Ended,
            ran => ran?,
        };
        let held = match ran {
            Ran::Ended => return Ok(Requeue::Never),
            Ran::Done => None,
            Ran::HeldByBudget(note) => Some(note),
        };
        // What the status page says the group waits for, and since when: the budget that held a
        // deletion, else the gate, else the planner.
        let waiting = match &held {
            Some(note) => Some((crate::zpdb_check::WAIT_REASON, note.clone())),
            None => pass.waiting(),
        };
        // The metric names the reason only while the group has pods to roll.
        let reason = waiting.as_ref().map(|(kind, _)| *kind);
        self.metrics
            .record_wait_reason(group, reason.filter(|_| pass.rollout_pending()));
        self.status.observe(group, waiting, now);
        let seen = match &held {
            Some(note) => Some(baton_core::status::WaitSeen {
                kind: crate::zpdb_check::WAIT_REASON,
                statefulset: None,
                message: note.clone(),
                halts: false,
            }),
            None => baton_core::status::WaitSeen::of_pass(&pass),
        };
        self.status.trace(&snapshot, seen, now);
        let recheck = pass.recheck_after().map_or(Requeue::Never, Requeue::at);
        Ok(match held {
            // The budget's record of claims is not watched: look again soon.
            Some(_) => recheck.sooner(Requeue::After(crate::zpdb_check::RECHECK_AFTER)),
            None => recheck,
        })
    }

    fn record_progress(&self, group: &str, pass: &Pass) {
        let counts = pass.plan.progress.iter().map(|progress| {
            let counts = PodCounts {
                total: progress.total,
                updated: progress.updated,
                ready: progress.ready,
            };
            (progress.statefulset.as_str(), counts)
        });
        self.metrics
            .record_group(group, counts, pass.waiting_to_roll());
    }

    /// Runs the pass's effects in order. Every effect that writes or claims runs within the
    /// term the pass started in and is bounded by what is left of it ([`Runner`]): a deposed
    /// leader stops when its term ends, not a request timeout later.
    async fn run(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        snapshot: &GroupSnapshot,
        pass: &Pass,
        may_act: &MayAct,
    ) -> Result<Ran, Error> {
        let runner = Runner::new(may_act.clone(), self.request_timeout);
        for effect in &pass.effects {
            let Ok(timeout) = runner.bound(effect.needs_term()) else {
                return Ok(Ran::Ended);
            };
            let step = Step {
                group,
                members,
                runner: &runner,
                timeout,
            };
            if let Some(ended) = self.run_effect(&step, snapshot, effect).await? {
                return Ok(ended);
            }
        }
        Ok(Ran::Done)
    }

    /// Runs one effect; `Some(how)` when the pass ends with it.
    async fn run_effect(
        &self,
        step: &Step<'_>,
        snapshot: &GroupSnapshot,
        effect: &Effect,
    ) -> Result<Option<Ran>, Error> {
        let Step {
            group,
            members,
            runner,
            timeout,
        } = *step;
        match effect {
            // A rollback's step is the whole pass.
            Effect::StartRollback { .. } | Effect::RestoreTemplates(_) => {
                self.roll_back(step, snapshot, effect).await?;
                return Ok(Some(Ran::Ended));
            }
            Effect::RecordHookAnswer { key, writes } => {
                if self.gate_calls.hook_calls.take_ended(group, key).is_some() {
                    store::store_unconditionally(self.at(), writes, runner).await?;
                }
            }
            Effect::CallHook(call) => self.call_hook_if_due(group, call, timeout).await?,
            Effect::StartCheck(start) => {
                gates::health::start(&self.gate_calls, runner, group, start.as_ref().clone());
            }
            Effect::Tell {
                statefulset,
                explanation,
                history,
            } => {
                let explanation = explanation.clone();
                self.tell(group, members, statefulset, None, explanation, *history)
                    .await;
            }
            Effect::Store(writes) => {
                let read: Vec<&StatefulSet> = members.iter().map(Arc::as_ref).collect();
                if store::store(self.at(), &read, writes, runner).await? == store::Stored::Stale {
                    // The stored objects' watch events bring the group back.
                    return Ok(Some(Ran::Ended));
                }
            }
            Effect::Noticed(notices) => self.metrics.gates.count_notices(group, notices),
            Effect::ConsultBudget {
                statefulset,
                pod,
                free_replacement,
            } => {
                let deletion = crate::zpdb_check::Deletion {
                    statefulset,
                    pod,
                    free_replacement: *free_replacement,
                };
                if let Some(note) = self.budget_holds(group, members, &deletion, runner).await? {
                    return Ok(Some(Ran::HeldByBudget(note)));
                }
            }
            Effect::Act { action, told } => {
                let done = self.act(group, members, action, timeout).await?;
                match (done, told) {
                    (Acted::Done, Some(told)) => {
                        let explanation = told.explanation();
                        let (statefulset, pod) = (action.statefulset(), action.pod());
                        self.tell(group, members, statefulset, pod, explanation, true)
                            .await;
                    }
                    (Acted::Done | Acted::Skipped, _) => {}
                    // Written meanwhile: the next pass plans on the new version.
                    (Acted::Stale, _) => return Ok(Some(Ran::Done)),
                }
            }
        }
        Ok(None)
    }

    /// A rollback's step: starting it (or refusing the request), or writing templates back.
    async fn roll_back(
        &self,
        step: &Step<'_>,
        snapshot: &GroupSnapshot,
        effect: &Effect,
    ) -> Result<(), Error> {
        let rollbacks = self.rollbacks(step.runner);
        match effect {
            Effect::StartRollback {
                carrier,
                why,
                refused,
            } => {
                let (group, members) = (step.group, step.members);
                let refused = refused.as_deref();
                let started = rollbacks
                    .start(group, snapshot, members, carrier, why, refused)
                    .await?;
                if let Some(first) = started {
                    self.status
                        .rollback_started(group, &first, why, jiff::Timestamp::now());
                }
            }
            Effect::RestoreTemplates(records) => {
                for (name, record) in records {
                    rollbacks.restore(step.members, name, record).await?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Starts `call` beside the reconciles (its answer queues the group again), only if it is
    /// still due on a fresh read: the cache may lag a call just made.
    async fn call_hook_if_due(
        &self,
        group: &str,
        call: &baton_core::gates::hooks::HookCall,
        timeout: Duration,
    ) -> Result<(), Error> {
        let reading = format!("reading {} before its hook", call.statefulset);
        let (statefulsets, local) = self
            .clusters
            .api::<StatefulSet>(&self.namespace, &call.statefulset)?;
        let fresh = bounded(timeout, reading, statefulsets.get(local))
            .await
            .map(|read| {
                read.map(|fresh| baton_core::clusters::requalify(&call.statefulset, fresh))
            });
        if let Ok(Ok(fresh)) = fresh
            && baton_core::gates::hooks::still_due(&fresh, call, jiff::Timestamp::now())
        {
            self.gate_calls.start_hook(group, call.clone());
        }
        Ok(())
    }

    fn at(&self) -> store::At<'_> {
        store::At {
            clusters: &self.clusters,
            namespace: &self.namespace,
        }
    }

    fn rollbacks<'a>(&'a self, runner: &'a Runner) -> Rollbacks<'a> {
        Rollbacks {
            clusters: &self.clusters,
            namespace: &self.namespace,
            runner,
            explainer: &self.explainer,
        }
    }

    /// Carries out one action of the plan.
    async fn act(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        action: &Action,
        timeout: Duration,
    ) -> Result<Acted, Error> {
        match action {
            Action::DeletePod {
                statefulset,
                pod,
                uid,
                ..
            } => {
                let (pods, local) = self.clusters.api::<Pod>(&self.namespace, pod)?;
                let outcome =
                    execute::delete_pod(&pods, &self.pending, group, local, uid, timeout).await?;
                if outcome != DeletionOutcome::Done {
                    return Ok(Acted::Skipped);
                }
                self.status
                    .deleted(group, statefulset, pod, uid, jiff::Timestamp::now());
                self.metrics
                    .pod_deletions
                    .with_label_values(&self.metrics.series(group, &[statefulset.as_str()]))
                    .inc();
                Ok(Acted::Done)
            }
            Action::SetPartition {
                statefulset,
                partition,
                ..
            } => {
                let Some(cached) = find(members, statefulset) else {
                    return Ok(Acted::Skipped);
                };
                let (statefulsets, local) = self
                    .clusters
                    .api::<StatefulSet>(&self.namespace, statefulset)?;
                let cached = baton_core::clusters::named(cached, local);
                let outcome =
                    execute::set_partition(&statefulsets, &cached, *partition, timeout).await?;
                Ok(match outcome {
                    DeletionOutcome::Done => Acted::Done,
                    _ => Acted::Stale,
                })
            }
            Action::SetCurrentRevision {
                statefulset,
                revision,
            } => {
                let Some(cached) = find(members, statefulset) else {
                    return Ok(Acted::Skipped);
                };
                let (statefulsets, local) = self
                    .clusters
                    .api::<StatefulSet>(&self.namespace, statefulset)?;
                let cached = baton_core::clusters::named(cached, local);
                // Its watch event brings the pass that tells the zone complete (the core's
                // `rollout::completion`), as when the StatefulSet controller sets it.
                execute::set_current_revision(&statefulsets, &cached, revision, timeout).await?;
                Ok(Acted::Done)
            }
        }
    }

    /// Consults the zone-aware budgets before `deletion` (by baton, or by the StatefulSet
    /// controller past a lowered partition); when one holds it, says so and returns why.
    async fn budget_holds(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        deletion: &crate::zpdb_check::Deletion<'_>,
        runner: &Runner,
    ) -> Result<Option<String>, Error> {
        let permit = self
            .budgets
            .before_deletion(group, deletion, runner)
            .await?;
        let crate::zpdb_check::Permit::Wait(note) = permit else {
            return Ok(None);
        };
        let explanation = Explanation {
            severity: Severity::Normal,
            reason: crate::zpdb_check::WAIT_REASON.to_owned(),
            action: "Wait".to_owned(),
            note: note.clone(),
        };
        self.tell(
            group,
            members,
            deletion.statefulset,
            None,
            explanation,
            false,
        )
        .await;
        Ok(Some(note))
    }

    /// Tells `explanation` as an Event on `statefulset`, and with `history`, adds it to the
    /// status page's history of what the group did.
    async fn tell(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        statefulset: &str,
        pod: Option<&str>,
        explanation: Explanation,
        history: bool,
    ) {
        if history {
            self.status.record_action(
                group,
                ActionRecord {
                    at: jiff::Timestamp::now(),
                    action: explanation.action.clone(),
                    statefulset: statefulset.to_owned(),
                    pod: pod.map(str::to_owned),
                    note: explanation.note.clone(),
                },
            );
        }
        if let Some(owner) = find(members, statefulset) {
            self.explainer
                .tell(&owner.object_ref(&()), explanation)
                .await;
        }
    }
}

/// What one effect of a pass runs with.
#[derive(Clone, Copy)]
struct Step<'a> {
    group: &'a str,
    members: &'a [Arc<StatefulSet>],
    runner: &'a Runner,
    /// The bound of this effect's call: what is left of the term for one that acts, else the
    /// request timeout.
    timeout: Duration,
}

/// How running a pass's effects ended.
enum Ran {
    /// Every effect ran.
    Done,
    /// The pass ended early: a rollback step or a stale write, whose watch event brings the
    /// next pass, or the term ended.
    Ended,
    /// A zone-aware budget held a deletion (why): nothing after it ran.
    HeldByBudget(String),
}

/// What came of one action.
enum Acted {
    Done,
    /// Not needed any more (the pod is gone, the StatefulSet left the cache).
    Skipped,
    /// The object changed meanwhile: nothing more this pass.
    Stale,
}

fn find<'a>(members: &'a [Arc<StatefulSet>], name: &str) -> Option<&'a StatefulSet> {
    members
        .iter()
        .map(Arc::as_ref)
        .find(|statefulset| statefulset.metadata.name.as_deref() == Some(name))
}
