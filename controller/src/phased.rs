//! `PhasedRollout`s (`sts.plus/v1alpha1`, the phased rollout operator's resource) served by the
//! leader. Each one's target joins a rollout group of its own, rolled by partition and gated by
//! a `RolloutHealthCheck` made from its check (`baton_core::phased`), and its status is written
//! back from that group. Everything else (the planner, the gate, the StatefulSet writes) is the
//! rollout every group gets, so a PhasedRollout keeps every guarantee of one.
//!
//! The PhasedRollouts are watched (a missing CRD means none, logged once); each change, and
//! every [`REFRESH`] for the statuses while there are any, brings every one up to date while
//! this replica leads.
//! Each round runs its writes through a [`Runner`] bound to the term it started in, as every
//! other pass does: a term that ends mid-round ends the round, with nothing written after it.
//! A finalizer hands the target back (group label and annotations removed) before a
//! PhasedRollout goes.
//!
//! With member clusters, a PhasedRollout (in the hub, as its health check) names its target
//! as baton names members, `cluster-b/web` ([`baton_core::phased::target_name_problem`] refuses
//! any other form, naming what is wrong): the target is read and written in its own cluster
//! ([`Clusters`]), and its status is read from that cluster's pods alone.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::annotations::{CHECK_STATE_ANNOTATION, ROLLOUT_GROUP_LABEL};
use baton_core::gates::checks::CheckState;
use baton_core::phased::{
    self, Credentials, FINALIZER, PhasedRollout, PhasedRolloutSpec, PhasedRolloutStatus,
};
use baton_core::rollout::StatefulSetSnapshot;
use baton_shared::index::{self, Index};
use baton_shared::kube_client::bounded;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::cache::Caches;
use crate::clusters::Clusters;
use crate::error::{Error, Failures};
use crate::explain::{Explainer, Explanation, Severity};
use crate::gates::health::{self, SECRET_OPT_IN_LABEL};
use crate::runner::Runner;
use crate::watch_source::WatchSource;

/// How often statuses are brought up to date when no PhasedRollout changed.
pub const REFRESH: Duration = Duration::from_secs(2);

/// What the PhasedRollouts of the namespace need from the controller.
#[derive(Clone)]
pub struct PhasedRollouts {
    /// The hub's client: the PhasedRollouts, their health checks and Secrets are there.
    pub client: kube::Client,
    /// Where each target lives: the hub, or the member cluster its name names.
    pub clusters: Clusters,
    /// The member clusters' names (`controller.clusters`), none without.
    pub members: Vec<String>,
    pub namespace: String,
    /// Where the namespace's PhasedRollouts are watched.
    pub source: WatchSource,
    pub request_timeout: Duration,
    pub caches: Caches,
    /// The right to act on the namespace: the leader's term, or its shard's with shards.
    pub may_start: crate::runner::MayStart,
    pub board: crate::status::StatusBoard,
    pub explainer: Explainer,
    /// Where a round's failures are counted (one place: where a PhasedRollout's serving ends).
    pub failures: Failures,
}

impl PhasedRollouts {
    /// Watches the namespace's PhasedRollouts and serves them while this replica leads, until
    /// `shutdown`. Run it as a critical task.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let known = Arc::new(Mutex::new(BTreeMap::new()));
        let changed = Arc::new(Notify::new());
        let mut index = Known {
            rollouts: known.clone(),
            changed: changed.clone(),
            said_not_installed: false,
        };
        let slim = |rollout: &mut PhasedRollout| rollout.metadata.managed_fields = None;
        let events = self.source.phased_rollouts(&self.namespace).modify(slim);
        let watch = index::drive(events, &mut index);
        let serve = async {
            loop {
                // With none, nothing to refresh: a namespace without PhasedRollouts costs no
                // timer (a new one is a change).
                if known.lock().expect("phased lock").is_empty() {
                    changed.notified().await;
                } else {
                    tokio::select! {
                        () = changed.notified() => {}
                        () = tokio::time::sleep(REFRESH) => {}
                    }
                }
                let Some(runner) =
                    (self.may_start)().map(|may_act| Runner::new(may_act, self.request_timeout))
                else {
                    continue;
                };
                let rollouts: Vec<PhasedRollout> = known
                    .lock()
                    .expect("phased lock")
                    .values()
                    .cloned()
                    .collect();
                for rollout in rollouts {
                    // Boxed: serving one is ~13 KiB of API calls in flight, which the loop
                    // would otherwise hold for each namespace served, PhasedRollouts or not.
                    match Box::pin(self.serve(&runner, &rollout)).await {
                        Ok(()) => {}
                        Err(Error::TermLost) => break,
                        Err(error) => {
                            self.failures.count(&error);
                            tracing::warn!(phased_rollout = %rollout.name_any(), %error, "serving a PhasedRollout failed; retrying");
                        }
                    }
                }
            }
        };
        tokio::select! {
            () = watch => {}
            () = serve => {}
            () = shutdown.cancelled() => {}
        }
        Ok(())
    }

    /// Brings one PhasedRollout up to date: its finalizer, its check, its target, its status.
    async fn serve(&self, runner: &Runner, rollout: &PhasedRollout) -> Result<(), Error> {
        let name = rollout.name_any();
        let holds_finalizer = rollout.finalizers().iter().any(|held| held == FINALIZER);
        if rollout.metadata.deletion_timestamp.is_some() {
            if holds_finalizer {
                if let Ok(spec) = rollout.parsed_spec() {
                    self.hand_back(runner, &name, &spec.target_ref, false)
                        .await?;
                }
                self.set_finalizers(runner, rollout, false).await?;
            }
            return Ok(());
        }
        if !holds_finalizer {
            // The next change (this write) serves it.
            return self.set_finalizers(runner, rollout, true).await;
        }
        let spec = match rollout.parsed_spec() {
            Ok(spec) => spec,
            Err(why) => return self.invalid(runner, rollout, why).await,
        };
        let problems = phased::problems(&spec, &self.members);
        if !problems.is_empty() {
            return self.invalid(runner, rollout, problems.join("; ")).await;
        }
        self.roll(runner, rollout, &spec).await
    }

    /// Serves a valid PhasedRollout holding its finalizer: its target checked, its check made,
    /// its target in its group, its status written.
    async fn roll(
        &self,
        runner: &Runner,
        rollout: &PhasedRollout,
        spec: &PhasedRolloutSpec,
    ) -> Result<(), Error> {
        let name = rollout.name_any();
        let generation = rollout.metadata.generation.unwrap_or_default();
        let (statefulsets, local) = match self.target_api(&spec.target_ref) {
            Ok(found) => found,
            Err(why) => {
                let status = PhasedRolloutStatus::says("MemberUnreachable", why, generation);
                return self.set_status(runner, rollout, status).await;
            }
        };
        let Some(target) = self
            .read("reading the target", statefulsets.get_opt(local))
            .await?
        else {
            let message = format!("StatefulSet {} does not exist", spec.target_ref);
            return self
                .set_status(
                    runner,
                    rollout,
                    PhasedRolloutStatus::says("TargetNotFound", message, generation),
                )
                .await;
        };
        let group = phased::group_name(&name);
        let strategy = target
            .spec
            .as_ref()
            .and_then(|spec| spec.update_strategy.as_ref()?.type_.as_deref());
        if let Some(why) =
            phased::target_problem(&name, &spec.target_ref, target.labels(), strategy)
        {
            return self.invalid(runner, rollout, why).await;
        }
        if spec.standard_rolling_update {
            self.hand_back(runner, &name, &spec.target_ref, true)
                .await?;
            let message =
                "standardRollingUpdate: the StatefulSet controller rolls every pod (partition 0)";
            let mut status =
                PhasedRolloutStatus::says("StandardRollingUpdate", message, generation);
            status.partition = Some(0);
            return self.set_status(runner, rollout, status).await;
        }
        let credentials = match &spec.check.query.secret_ref {
            None => Credentials::None,
            Some(secret) => match self.credentials(secret).await? {
                Ok(credentials) => credentials,
                Err(why) => return self.invalid(runner, rollout, why).await,
            },
        };
        let check = phased::health_check_spec(spec, credentials).map_err(Error::PhasedRollout)?;
        if let Err(why) = self.ensure_check(runner, rollout, &group, check).await? {
            return self.invalid(runner, rollout, why).await;
        }
        if !phased::target_served(&name, target.labels(), target.annotations()) {
            tracing::info!(phased_rollout = %name, target = %spec.target_ref, "adding the target to its group");
            let patch = phased::target_patch(&name, true, false);
            write(
                runner,
                "adding the target to its group",
                statefulsets.patch(local, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await?;
        }
        let status = self
            .status_of(&target, spec, &group, generation)
            .keeping_last_check(rollout.status.as_ref());
        self.set_status(runner, rollout, status).await
    }

    /// The StatefulSets' API of the cluster `target` (as the PhasedRollout names it) lives in,
    /// and its name there; or why it cannot be reached now, for its status.
    fn target_api<'t>(&self, target: &'t str) -> Result<(Api<StatefulSet>, &'t str), String> {
        let (cluster, _) = baton_core::clusters::split(target);
        if let Some(cluster) = cluster
            && let Some(outage) = self
                .caches
                .outages()
                .into_iter()
                .find(|outage| outage.cluster == cluster)
        {
            return Err(format!(
                "{target} in cluster {cluster} cannot be read: {}",
                baton_core::explained::quoted(
                    &outage.error,
                    baton_core::clusters::MOST_OUTAGE_CHARS
                )
            ));
        }
        self.clusters
            .api(&self.namespace, target)
            .map_err(|error| error.to_string())
    }

    /// The status, from the target and its pods as cached and the leader's last wait. A
    /// member's pods are its own cluster's alone, named as the target is (`cluster/name`).
    fn status_of(
        &self,
        target: &StatefulSet,
        spec: &PhasedRolloutSpec,
        group: &str,
        generation: i64,
    ) -> PhasedRolloutStatus {
        let target = baton_core::clusters::requalify(&spec.target_ref, target.clone());
        let pods = self.caches.pods_of(&[Arc::new(target.clone())]);
        let snapshot =
            StatefulSetSnapshot::from_kubernetes(&target, pods.iter().map(AsRef::as_ref));
        let check: CheckState = target
            .annotations()
            .get(CHECK_STATE_ANNOTATION)
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or_default();
        let history = self.board.history(group);
        let waiting = history
            .as_ref()
            .and_then(|history| history.waiting.as_ref())
            .map(|wait| (wait.kind, wait.message.as_str()));
        phased::status(
            &snapshot,
            &check,
            spec.check.success_threshold,
            waiting,
            generation,
            jiff::Timestamp::now(),
        )
    }

    /// Which credentials the Secret gives, if its owner lets health checks use it.
    async fn credentials(&self, name: &str) -> Result<Result<Credentials, String>, Error> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        // Its labels first: the contents of a Secret its owner did not opt in are never read.
        let Some(labelled) = self
            .read(
                "reading the Secret's labels",
                secrets.get_metadata_opt(name),
            )
            .await?
        else {
            return Ok(Err(format!(
                "Secret {name} (spec.check.query.secretRef) does not exist"
            )));
        };
        let not_opted_in = || {
            format!(
                "Secret {name} (spec.check.query.secretRef) is not labelled {SECRET_OPT_IN_LABEL}=true: its owner has not let health checks use it"
            )
        };
        if labelled
            .labels()
            .get(SECRET_OPT_IN_LABEL)
            .map(String::as_str)
            != Some("true")
        {
            return Ok(Err(not_opted_in()));
        }
        let Some(secret) = self
            .read("reading the Secret", secrets.get_opt(name))
            .await?
        else {
            return Ok(Err(format!(
                "Secret {name} (spec.check.query.secretRef) does not exist"
            )));
        };
        // Labelled away between the two reads: as if never labelled.
        if secret.labels().get(SECRET_OPT_IN_LABEL).map(String::as_str) != Some("true") {
            return Ok(Err(not_opted_in()));
        }
        let keys = secret
            .data
            .iter()
            .flat_map(|data| data.keys())
            .chain(secret.string_data.iter().flat_map(|data| data.keys()))
            .map(String::as_str);
        Ok(Credentials::of_keys(keys).map_err(|why| format!("Secret {name}: {why}")))
    }

    /// Creates or updates the `RolloutHealthCheck` `name`, owned by `rollout` (so it goes with it).
    async fn ensure_check(
        &self,
        runner: &Runner,
        rollout: &PhasedRollout,
        name: &str,
        spec: serde_json::Value,
    ) -> Result<Result<(), String>, Error> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &health::api_resource(),
        );
        let existing = self
            .read("reading the health check", api.get_opt(name))
            .await?;
        let owner = rollout
            .controller_owner_ref(&())
            .ok_or_else(|| Error::PhasedRollout("the PhasedRollout has no uid yet".to_owned()))?;
        // Only a check this PhasedRollout made is its to change: one of that name made by
        // someone else is theirs (and not what this PhasedRollout's steps should be judged by).
        if let Some(existing) = &existing {
            let ours = existing
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|reference| reference.controller == Some(true) && reference.uid == owner.uid);
            if !ours {
                return Ok(Err(format!(
                    "{} {name} exists and is not this PhasedRollout's (no controller owner \
                     reference to it): baton neither uses nor changes it; delete or rename it",
                    health::KIND
                )));
            }
        }
        if existing
            .as_ref()
            .is_some_and(|check| check.data["spec"] == spec)
        {
            return Ok(Ok(()));
        }
        let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": format!("{}/{}", health::GROUP, health::VERSION),
            "kind": health::KIND,
            "metadata": {"name": name},
            "spec": spec,
        }))
        .map_err(|error| Error::PhasedRollout(error.to_string()))?;
        object.metadata.owner_references = Some(vec![owner]);
        match existing {
            None => {
                write(
                    runner,
                    "creating the health check",
                    api.create(&PostParams::default(), &object),
                )
                .await?;
            }
            Some(existing) => {
                tracing::info!(check = %name, was = %existing.data["spec"], now = %object.data["spec"], "updating the health check of a PhasedRollout");
                object.metadata.resource_version = existing.metadata.resource_version;
                write(
                    runner,
                    "updating the health check",
                    api.replace(name, &PostParams::default(), &object),
                )
                .await?;
            }
        }
        Ok(Ok(()))
    }

    /// Takes the target out of the PhasedRollout's group; with `standard`, partition 0 too.
    async fn hand_back(
        &self,
        runner: &Runner,
        name: &str,
        target: &str,
        standard: bool,
    ) -> Result<(), Error> {
        let (statefulsets, local): (Api<StatefulSet>, _) =
            self.clusters.api(&self.namespace, target)?;
        let Some(current) = self
            .read("reading the target", statefulsets.get_opt(local))
            .await?
        else {
            return Ok(());
        };
        let ours = current.labels().get(ROLLOUT_GROUP_LABEL) == Some(&phased::group_name(name));
        // Only a target this PhasedRollout serves: one it never served is someone else's
        // StatefulSet, whose partition and annotations it has no business changing.
        if !ours {
            return Ok(());
        }
        let patch = phased::target_patch(name, false, standard);
        write(
            runner,
            "handing the target back",
            statefulsets.patch(local, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?;
        Ok(())
    }

    async fn set_finalizers(
        &self,
        runner: &Runner,
        rollout: &PhasedRollout,
        hold: bool,
    ) -> Result<(), Error> {
        let mut finalizers: Vec<String> = rollout
            .finalizers()
            .iter()
            .filter(|held| *held != FINALIZER)
            .cloned()
            .collect();
        if hold {
            finalizers.push(FINALIZER.to_owned());
        }
        let patch = serde_json::json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": rollout.resource_version(),
        }});
        let api: Api<PhasedRollout> = Api::namespaced(self.client.clone(), &self.namespace);
        let (name, params, patch) = (
            rollout.name_any(),
            PatchParams::default(),
            Patch::Merge(&patch),
        );
        let finalizer = api.patch(&name, &params, &patch);
        match runner.step("writing the finalizer", finalizer).await? {
            Ok(Ok(_)) => Ok(()),
            // Changed meanwhile: the watch brings the new version.
            Ok(Err(kube::Error::Api(status))) if status.code == 409 || status.code == 404 => Ok(()),
            Ok(Err(error)) => Err(Error::PhasedRollout(format!(
                "writing the finalizer: {error}"
            ))),
            Err(timed_out) => Err(Error::PhasedRollout(timed_out.to_string())),
        }
    }

    /// Says on the status and in a Warning Event what is wrong, and serves nothing else.
    async fn invalid(
        &self,
        runner: &Runner,
        rollout: &PhasedRollout,
        why: String,
    ) -> Result<(), Error> {
        let generation = rollout.metadata.generation.unwrap_or_default();
        let status = PhasedRolloutStatus::says("Invalid", why.clone(), generation);
        let changed = self.status_differs(rollout, &status);
        self.set_status(runner, rollout, status).await?;
        if changed {
            let object = ObjectReference {
                api_version: Some(PhasedRollout::api_version(&()).into_owned()),
                kind: Some(PhasedRollout::kind(&()).into_owned()),
                name: Some(rollout.name_any()),
                namespace: Some(self.namespace.clone()),
                uid: rollout.uid(),
                ..ObjectReference::default()
            };
            let explanation = Explanation {
                severity: Severity::Warning,
                reason: "InvalidPhasedRollout".to_owned(),
                action: "Serve".to_owned(),
                note: why,
            };
            self.explainer.tell(&object, explanation).await;
        }
        Ok(())
    }

    fn status_differs(&self, rollout: &PhasedRollout, status: &PhasedRolloutStatus) -> bool {
        let current: Option<PhasedRolloutStatus> = rollout
            .status
            .clone()
            .and_then(|status| serde_json::from_value(status).ok());
        current.as_ref() != Some(status)
    }

    /// Writes `status` when it says something new.
    async fn set_status(
        &self,
        runner: &Runner,
        rollout: &PhasedRollout,
        status: PhasedRolloutStatus,
    ) -> Result<(), Error> {
        if !self.status_differs(rollout, &status) {
            return Ok(());
        }
        let api: Api<PhasedRollout> = Api::namespaced(self.client.clone(), &self.namespace);
        // Applied (server-side), not merged: a field the new status leaves out (the rolling pod
        // once none rolls) is removed, where a merge patch would keep the last one written.
        let patch = serde_json::json!({
            "apiVersion": format!("{}/{}", phased::GROUP, phased::VERSION),
            "kind": phased::KIND,
            "status": status,
        });
        let (name, params, patch) = (
            rollout.name_any(),
            PatchParams::apply("baton-controller").force(),
            Patch::Apply(&patch),
        );
        let status_write = api.patch_status(&name, &params, &patch);
        write(runner, "writing the status", status_write)
            .await
            .map(drop)
    }

    /// A read, bounded by the request timeout (it decides nothing on its own); a 404 is
    /// `Ok(None)` for `get_opt`-like calls.
    async fn read<T>(
        &self,
        step: &str,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Error> {
        called(
            step,
            bounded(self.request_timeout, step.to_owned(), call).await,
        )
    }
}

/// A write of the round: only while its term lasts, bounded by what is left of it.
async fn write<T>(
    runner: &Runner,
    step: &str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, Error> {
    called(step, runner.step(step.to_owned(), call).await?)
}

fn called<T>(
    step: &str,
    answer: Result<Result<T, kube::Error>, baton_shared::kube_client::TimedOut>,
) -> Result<T, Error> {
    match answer {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Error::PhasedRollout(format!("{step}: {error}"))),
        Err(timed_out) => Err(Error::PhasedRollout(timed_out.to_string())),
    }
}

/// The namespace's PhasedRollouts as last watched; a change wakes the server.
struct Known {
    rollouts: Arc<Mutex<BTreeMap<String, PhasedRollout>>>,
    changed: Arc<Notify>,
    said_not_installed: bool,
}

impl Index<PhasedRollout> for Known {
    type Kept = PhasedRollout;
    fn keep(&self, rollout: PhasedRollout) -> PhasedRollout {
        rollout
    }

    fn reset(&mut self, rollouts: Vec<PhasedRollout>) {
        self.said_not_installed = false;
        *self.rollouts.lock().expect("phased lock") = rollouts
            .into_iter()
            .map(|rollout| (rollout.name_any(), rollout))
            .collect();
        self.changed.notify_one();
    }

    fn apply(&mut self, rollout: PhasedRollout) {
        self.rollouts
            .lock()
            .expect("phased lock")
            .insert(rollout.name_any(), rollout);
        self.changed.notify_one();
    }

    fn delete(&mut self, rollout: PhasedRollout) {
        self.rollouts
            .lock()
            .expect("phased lock")
            .remove(&rollout.name_any());
    }

    fn failed(&mut self, error: &watcher::Error) {
        if index::crd_missing(error) {
            if !self.said_not_installed {
                tracing::info!(
                    "the PhasedRollout CRD is not installed: no PhasedRollouts (watching for it)"
                );
                self.said_not_installed = true;
            }
            self.rollouts.lock().expect("phased lock").clear();
            return;
        }
        tracing::warn!(%error, "PhasedRollout watch error; retrying");
    }
}

#[cfg(test)]
mod tests;
