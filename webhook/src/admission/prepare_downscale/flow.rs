//! The steps of prepare-downscale that talk to the API server and to pods:
//! read the StatefulSet and its group → judge min-time on the group's ledger and the Go
//! operator's zone tracker → check the other zones are ready → claim the downscale in the
//! ledger (conditional write; on 409 re-read and judge again) → POST to the pods going away.
//! A failure after the claim DELETEs to every pod and releases the claim.
//!
//! The StatefulSet being admitted is never written from here: the API server is still admitting
//! an update of it, which any write would fail with a conflict (an HPA's GET-then-PUT would be
//! refused on every try). The claim is the record; the controller copies it into the
//! `last-downscale` annotation and the zone tracker once it sees the update land, and voids it
//! (pods told to cancel) when the update never lands.
//!
//! Everything runs under the request's deadline; part of it is kept back for the undo so a
//! slow pod cannot leave other pods prepared and the claim held.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_config::Config;
use baton_core::annotations::ROLLOUT_GROUP_LABEL;
use baton_core::downscale_history::Records;
use baton_core::pod_address::PodAddressing;
use baton_core::pod_address::{PodEndpoint, PodMethod};
use baton_core::pods::{CachedPod, is_controlled_by};
use baton_core::statefulset::StatefulSetState;
use baton_shared::downscale_history;
use baton_shared::pod_client::PodHttpClient;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::core::Selector;
use kube::{Api, Client};
use tokio::time::Instant;

use super::{
    MemberReadiness, PrepareRequest, Target, allowed, check_statefulset, endpoints, failed,
    foreign_namespace, judge_min_time, judge_readiness, ledger_contended, not_as_stored,
    pods_failed,
};
use crate::admission::object::Downscale;
use baton_core::admission::Verdict;
use baton_core::ledger::{Entry, Judged, Ledger, ledger_name};
use baton_shared::ledger::{self, ClaimError, Written};

/// What prepare-downscale needs to act; cheap to clone.
#[derive(Clone)]
pub struct PrepareDownscale {
    client: Client,
    pods: PodHttpClient,
    addressing: PodAddressing,
    cluster_domain: String,
    request_timeout: Duration,
    undo_reserve: Duration,
    zone_tracker: String,
    claim_grace: Duration,
    /// The namespace this replica serves.
    namespace: String,
    /// The zone tracker's version whose malformed entries were last logged: each change is
    /// logged once, not at every admission.
    tracker_logged: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for PrepareDownscale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrepareDownscale")
            .field("addressing", &self.addressing)
            .field("cluster_domain", &self.cluster_domain)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl PrepareDownscale {
    pub fn new(client: Client, pods: PodHttpClient, config: &Config) -> Self {
        let request_timeout = config.webhook.request_timeout.get();
        Self {
            client,
            pods,
            addressing: config.pods.address_by.into(),
            cluster_domain: config.cluster_domain.clone(),
            request_timeout,
            undo_reserve: config.pods.request_timeout.get().min(request_timeout / 3),
            zone_tracker: config.downscale.zone_tracker_config_map.clone(),
            claim_grace: config.downscale.claim_grace.get(),
            namespace: config.namespace.clone(),
            tracker_logged: Arc::default(),
        }
    }

    /// Whether the malformed entries of the tracker at `version` are still to be logged (and
    /// from now on, not again).
    fn first_look_at(&self, version: Option<&str>) -> bool {
        let mut logged = self
            .tracker_logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if logged.as_deref() == version {
            return false;
        }
        *logged = version.map(str::to_owned);
        true
    }

    /// Runs the whole flow for one request and returns the answer.
    #[tracing::instrument(skip_all, fields(
        uid = %request.uid,
        statefulset = %request.downscale.name,
        from = request.downscale.from,
        to = request.downscale.to,
    ))]
    pub async fn run(&self, request: PrepareRequest) -> Verdict {
        let deadline = Instant::now() + self.request_timeout;
        let forward = Deadline(deadline - self.undo_reserve);
        let undo = Deadline(deadline);
        let downscale = &request.downscale;

        if downscale.namespace != self.namespace {
            // The namespace served goes to the log, for whoever fixes the configuration; the
            // answer does not tell a sender which namespace to forge reviews for.
            tracing::warn!(
                served = %self.namespace,
                review_namespace = %downscale.namespace,
                "a prepare-downscale review for a namespace this replica does not serve: the webhook configuration's namespaceSelector must select only the served one"
            );
            return foreign_namespace(downscale);
        }
        // Judged on the StatefulSet as stored, whatever the review says of it; it cannot be
        // judged without it (failurePolicy Fail: refused, never let through unprepared).
        let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &downscale.namespace);
        let statefulset = match forward.run(api.get(&downscale.name)).await {
            Ok(statefulset) => statefulset,
            Err(error) => {
                return failed(
                    downscale,
                    &format!(
                        "reading statefulsets/{} in namespace {}",
                        downscale.name, downscale.namespace
                    ),
                    &error,
                );
            }
        };
        let stored = StatefulSetState::of(&statefulset).replicas;
        if stored != downscale.from || !request.stored_as.matches(&statefulset.metadata) {
            // What differs goes to the log (operators read it), not into the answer.
            tracing::warn!(
                stored_replicas = stored,
                stored_uid = ?statefulset.metadata.uid,
                stored_resource_version = ?statefulset.metadata.resource_version,
                review_uid = ?request.stored_as.uid,
                review_resource_version = ?request.stored_as.resource_version,
                "a prepare-downscale review does not describe the StatefulSet as stored; nothing prepared"
            );
            return not_as_stored(downscale);
        }
        let target = match check_statefulset(downscale, &statefulset) {
            Ok(target) => target,
            Err(verdict) => return verdict,
        };

        let claim = match &target.group {
            None => None,
            Some(group) => match self
                .claim(&request.uid, downscale, &statefulset, group, &forward)
                .await
            {
                Ok(claim) => Some(claim),
                Err(verdict) => return verdict,
            },
        };

        if claim.as_ref().is_some_and(|claim| claim.prepared) {
            tracing::info!(name = %downscale.name, "the same downscale was prepared moments ago (the API server admits it again); its pods are not told twice");
            return allowed(downscale);
        }
        let outcome = self
            .prepare(downscale, &statefulset, &target, &forward)
            .await;
        let (verdict, prepared) = match outcome {
            Ok(()) => return allowed(downscale),
            Err(failure) => failure,
        };
        // Undo, within what is left of the whole deadline: the pods and the claim at the same
        // time, so a hanging pod cannot keep the claim held.
        let undo_pods = async {
            if prepared.is_empty() {
                return;
            }
            let failures = match undo
                .run(async {
                    Ok::<_, kube::Error>(self.pods.call_each(PodMethod::Delete, &prepared).await)
                })
                .await
            {
                Ok(failures) => failures
                    .into_iter()
                    .map(|error| error.to_string())
                    .collect(),
                Err(error) => vec![error.to_string()],
            };
            for failure in failures {
                tracing::warn!(name = %downscale.name, error = %failure, "undoing a pod's preparation failed");
            }
        };
        let release_claim = async {
            if let Some(claim) = &claim
                && let Err(error) = self
                    .release(&request.uid, claim, &downscale.name, &undo)
                    .await
            {
                tracing::error!(name = %downscale.name, ledger = %claim.name, %error, "releasing the downscale claim failed; the group waits its min-time");
            }
        };
        tokio::join!(undo_pods, release_claim);
        verdict
    }

    /// Judges min-time and readiness, then records the downscale in the group's ledger with a
    /// conditional write, judging again whenever another replica wrote first.
    async fn claim(
        &self,
        uid: &str,
        downscale: &Downscale,
        statefulset: &StatefulSet,
        group: &str,
        deadline: &Deadline,
    ) -> Result<Claim, Verdict> {
        let deny_on = |what: &str, error: &dyn std::fmt::Display| {
            tracing::warn!(name = %downscale.name, %group, %error, "{what} failed");
            failed(downscale, what, error)
        };
        let statefulsets: Api<StatefulSet> =
            Api::namespaced(self.client.clone(), &downscale.namespace);
        let members = deadline
            .run(
                statefulsets
                    .list(&ListParams::default().labels(&format!("{ROLLOUT_GROUP_LABEL}={group}"))),
            )
            .await
            .map_err(|error| deny_on("finding other statefulsets", &error))?
            .items;

        let ledgers: Api<ConfigMap> = Api::namespaced(self.client.clone(), &downscale.namespace);
        let name = ledger_name(group);
        let (current, tracker) = tokio::join!(
            deadline.run(ledger::read(&ledgers, &name)),
            deadline.run(downscale_history::read_tracker(
                &ledgers,
                &self.zone_tracker
            )),
        );
        let current =
            current.map_err(|error| deny_on("reading the group's downscale ledger", &error))?;
        let tracker = tracker.map_err(|error| {
            deny_on(
                &format!("reading the zone tracker {}", self.zone_tracker),
                &error,
            )
        })?;
        let names = members
            .iter()
            .filter_map(|member| member.metadata.name.as_deref());
        let malformed = tracker.malformed(names);
        if !malformed.is_empty() && self.first_look_at(tracker.resource_version.as_deref()) {
            for malformed in malformed {
                tracing::warn!(tracker = %self.zone_tracker, key = %malformed.key, value = %malformed.value, "{malformed}; counted as a downscale now");
            }
        }
        let judge = |ledger: &Ledger| {
            let records = Records {
                ledger,
                tracker: &tracker,
                claim_grace: self.claim_grace,
            };
            judge_min_time(downscale, &members, records, Timestamp::now())
        };
        judge(&current)?;

        let mut readiness = Vec::new();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &downscale.namespace);
        for member in members
            .iter()
            .filter(|member| member.metadata.name.as_deref() != Some(&downscale.name))
        {
            let owned = deadline
                .run(list_pods(&pods, member))
                .await
                .map_err(|error| {
                    deny_on(
                        "checking whether StatefulSets have non-updated replicas",
                        &error,
                    )
                })?;
            readiness.push(MemberReadiness::of(member, &owned, Timestamp::now()));
        }
        judge_readiness(downscale, &readiness)?;

        let generation = statefulset.metadata.generation.unwrap_or_default();
        let (ledgers, name) = (&ledgers, &name);
        // The ledger just judged first, then fresh reads after another replica wrote.
        let mut first = Some(current);
        let read = move || {
            let judged = first.take();
            async move {
                match judged {
                    Some(current) => Ok((current, true)),
                    None => deadline
                        .run(ledger::read(ledgers, name))
                        .await
                        .map(|current| (current, true))
                        .map_err(|error| deny_on("reading the group's downscale ledger", &error)),
                }
            }
        };
        let claim = |current: &Ledger, _fresh| {
            if let Err(denied) = judge(current) {
                return Judged::Settled(Err(denied));
            }
            let now = Timestamp::now();
            let previous = current.entry(&downscale.name).ok().flatten();
            // What a void of this claim puts back: the last downscale before it.
            let replaced = previous.as_ref().and_then(|entry| {
                entry.history(statefulset.metadata.generation, now, self.claim_grace)
            });
            let prepared = previous.as_ref().is_some_and(|entry| {
                entry.prepared_the_same(
                    (downscale.from, downscale.to),
                    statefulset.metadata.generation,
                    now,
                    self.claim_grace,
                )
            });
            let entry = Entry::claim(
                now,
                uid,
                (downscale.from, downscale.to),
                generation,
                replaced,
            );
            let claimed = current.with_entry(&downscale.name, Some(&entry));
            Judged::Claim(
                claimed,
                Ok(Claim {
                    name: name.clone(),
                    namespace: downscale.namespace.clone(),
                    group: group.to_owned(),
                    previous,
                    prepared,
                }),
            )
        };
        let store = move |claimed: Ledger| async move {
            let written = deadline
                .run(ledger::write(ledgers, name, group, &claimed))
                .await
                .map_err(|error| {
                    deny_on("recording the downscale in the group's ledger", &error)
                })?;
            if written == Written::Conflict {
                tracing::debug!(name = %downscale.name, %group, "ledger changed meanwhile; judging again");
            }
            Ok(written)
        };
        match ledger::claim(read, claim, store).await {
            Ok(Ok(claim)) => {
                tracing::info!(name = %downscale.name, %group, ledger = %name, "downscale claimed");
                Ok(claim)
            }
            Ok(Err(denied)) | Err(ClaimError::Failed(denied)) => Err(denied),
            Err(ClaimError::Contended) => Err(ledger_contended(downscale, name)),
        }
    }

    /// Tells the pods going away. On failure, returns the denial and the pods that may have been
    /// told (to undo).
    async fn prepare(
        &self,
        downscale: &Downscale,
        statefulset: &StatefulSet,
        target: &Target,
        deadline: &Deadline,
    ) -> Result<(), (Verdict, Vec<PodEndpoint>)> {
        // The pods that exist: only they are told (see `endpoints`).
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &downscale.namespace);
        let existing: BTreeMap<String, Option<String>> =
            match deadline.run(list_pods(&pods, statefulset)).await {
                Ok(owned) => owned.into_iter().map(|pod| (pod.name, pod.ip)).collect(),
                Err(error) => {
                    return Err((failed(downscale, "listing its pods", &error), Vec::new()));
                }
            };
        let endpoints = endpoints(
            downscale,
            target,
            self.addressing,
            &self.cluster_domain,
            &existing,
        )
        .map_err(|verdict| (verdict, Vec::new()))?;

        if let Err(error) = deadline
            .run(async {
                self.pods
                    .call_all(PodMethod::Post, &endpoints)
                    .await
                    .map_err(FlowError::Pod)
            })
            .await
        {
            tracing::warn!(name = %downscale.name, %error, "a pod failed to prepare for shutdown; undoing");
            return Err((pods_failed(downscale, &error), endpoints));
        }

        tracing::info!(name = %downscale.name, namespace = %downscale.namespace, from = downscale.from, to = downscale.to, "downscale prepared");
        Ok(())
    }

    /// Puts back the entry the claim replaced, if the claim is still ours.
    async fn release(
        &self,
        uid: &str,
        claim: &Claim,
        statefulset: &str,
        deadline: &Deadline,
    ) -> Result<(), FlowError> {
        let ledgers: Api<ConfigMap> = Api::namespaced(self.client.clone(), &claim.namespace);
        let ledgers = &ledgers;
        let read = move || async move {
            let current: Ledger = deadline.run(ledger::read(ledgers, &claim.name)).await?;
            Ok::<_, FlowError>((current, true))
        };
        // Only while the claim is still ours: a later one is someone else's to follow up.
        let restore = |current: &Ledger, _fresh| match current.entry(statefulset) {
            Ok(Some(entry)) if entry.request == uid => Judged::Claim(
                current.with_entry(statefulset, claim.previous.as_ref()),
                true,
            ),
            _ => Judged::Settled(false),
        };
        let store = move |restored: Ledger| async move {
            deadline
                .run(ledger::write(ledgers, &claim.name, &claim.group, &restored))
                .await
        };
        match ledger::claim(read, restore, store).await {
            Ok(released) => {
                if released {
                    tracing::info!(name = %statefulset, ledger = %claim.name, "downscale claim released");
                }
                Ok(())
            }
            Err(ClaimError::Failed(error)) => Err(error),
            Err(ClaimError::Contended) => Err(FlowError::KeptChanging),
        }
    }
}

/// A claim held in a group's ledger, and what it replaced.
#[derive(Debug, Clone)]
struct Claim {
    name: String,
    namespace: String,
    group: String,
    previous: Option<Entry>,
    /// It replaced a claim of the same downscale whose pods were told to prepare moments ago.
    prepared: bool,
}

/// The point in time by which a group of steps must be done.
#[derive(Debug, Clone, Copy)]
struct Deadline(Instant);

#[derive(Debug, thiserror::Error)]
enum FlowError {
    #[error("{}", baton_shared::pod_client::error_chain(.0))]
    Api(#[from] kube::Error),
    #[error("{0}")]
    Record(#[from] ledger::ReadError),
    #[error("{0}")]
    Pod(baton_shared::pod_client::PodCallError),
    #[error("the request deadline passed")]
    TimedOut,
    #[error("the ledger kept changing")]
    KeptChanging,
}

impl Deadline {
    async fn run<T, E: Into<FlowError>>(
        &self,
        step: impl Future<Output = Result<T, E>>,
    ) -> Result<T, FlowError> {
        match tokio::time::timeout_at(self.0, step).await {
            Ok(result) => result.map_err(Into::into),
            Err(_) => Err(FlowError::TimedOut),
        }
    }
}

/// Pods of `statefulset`: matching its selector and controlled by it (baton does not rely on the
/// `name` label the Go operator needed).
async fn list_pods(
    pods: &Api<Pod>,
    statefulset: &StatefulSet,
) -> Result<Vec<CachedPod>, kube::Error> {
    let selector = statefulset
        .spec
        .as_ref()
        .and_then(|spec| Selector::try_from(spec.selector.clone()).ok())
        .map(|selector| selector.to_string())
        .unwrap_or_default();
    let listed = pods.list(&ListParams::default().labels(&selector)).await?;
    Ok(listed
        .items
        .iter()
        .map(CachedPod::of)
        .filter(|pod| is_controlled_by(pod, statefulset))
        .collect())
}
