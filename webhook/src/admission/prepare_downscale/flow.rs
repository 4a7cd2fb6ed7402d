//! Runs prepare-downscale's sequence (`baton_core::admission::prepare::flow`): every step the
//! core returns is a read, a write or pod calls done here, and its answer goes back to the core,
//! which decides the next; the decisions and their order are all the core's.
//!
//! Everything runs under the request's deadline; part of it is kept back for the undo so a
//! slow pod cannot leave other pods prepared and the claim held.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_config::Config;
use baton_core::admission::Verdict;
use baton_core::admission::prepare::flow::{
    Flow, Io, Note, PrepareRequest, Release, ReleaseStep, Released, Reply, Settings, Step,
};
use baton_core::pod_address::{PodEndpoint, PodMethod};
use baton_core::pods::CachedPod;
use baton_shared::downscale_history;
use baton_shared::ledger;
use baton_shared::pod_client::PodHttpClient;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use tokio::time::Instant;

use crate::error::{Error, Failures};
use crate::members::Members;

/// What prepare-downscale needs to act; cheap to clone.
#[derive(Clone)]
pub struct PrepareDownscale {
    client: Client,
    pods: PodHttpClient,
    settings: Settings,
    request_timeout: Duration,
    undo_reserve: Duration,
    /// The zone tracker's version whose malformed entries were last logged: each change is
    /// logged once, not at every admission.
    tracker_logged: Arc<Mutex<Option<String>>>,
    /// Where a failed step is counted ([`Deadline::run`]).
    failures: Option<Failures>,
    /// The member clusters (`webhook.clusters`); `None`: this cluster alone.
    members: Option<Members>,
}

impl std::fmt::Debug for PrepareDownscale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrepareDownscale")
            .field("settings", &self.settings)
            .field("request_timeout", &self.request_timeout)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

impl PrepareDownscale {
    pub fn new(client: Client, pods: PodHttpClient, config: &Config) -> Self {
        let request_timeout = config.webhook.request_timeout.get();
        Self {
            client,
            pods,
            settings: Settings {
                namespace: config.namespace.clone(),
                zone_tracker: config.downscale.zone_tracker_config_map.clone(),
                claim_grace: config.downscale.claim_grace.get(),
                addressing: config.pods.address_by.into(),
                cluster_domain: config.cluster_domain.clone(),
            },
            request_timeout,
            undo_reserve: config.pods.request_timeout.get().min(request_timeout / 3),
            tracker_logged: Arc::default(),
            failures: None,
            members: None,
        }
    }

    /// Claims downscales across `members` (`webhook.clusters`); `None`: this cluster alone.
    pub fn with_members(self, members: Option<Members>) -> Self {
        Self { members, ..self }
    }

    /// Counts each failed step in `failures` (`baton_webhook_failures_total`).
    pub fn counting_failures_in(self, failures: Failures) -> Self {
        Self {
            failures: Some(failures),
            ..self
        }
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
        let failures = self.failures.as_ref();
        let forward = Deadline {
            at: deadline - self.undo_reserve,
            failures,
        };
        let undo = Deadline {
            at: deadline,
            failures,
        };
        let (mut flow, mut step) = Flow::start(self.settings.clone(), request);
        loop {
            self.log(&mut flow);
            let reply = match step {
                Step::Do(io) => self.perform(io, forward).await,
                Step::Undo { pods, release } => {
                    self.undo(&pods, release, undo).await;
                    Reply::Undone
                }
                Step::Answer(verdict) => return verdict,
            };
            step = flow.advance(reply, Timestamp::now());
        }
    }

    /// Does one read, write or pod call by `deadline`, and gives its answer.
    async fn perform(&self, io: Io, deadline: Deadline<'_>) -> Reply {
        let namespace = &self.settings.namespace;
        let statefulsets: Api<StatefulSet> = Api::namespaced(self.client.clone(), namespace);
        let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        match io {
            Io::ReadStatefulSet { name } => {
                Reply::StatefulSet(deadline.run(statefulsets.get(&name)).await.map(Box::new))
            }
            Io::ListGroup { selector } => {
                let listed = deadline.run(statefulsets.list(&labelled(&selector))).await;
                Reply::Group(listed.map(|list| list.items))
            }
            Io::ReadRecords { ledger, tracker } => {
                let (ledger, tracker) = tokio::join!(
                    deadline.run(ledger::read(&config_maps, &ledger)),
                    deadline.run(downscale_history::read_tracker(&config_maps, &tracker)),
                );
                Reply::Records { ledger, tracker }
            }
            Io::ListPods { selector } => {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                let listed = deadline.run(pods.list(&labelled(&selector))).await;
                Reply::Pods(listed.map(|list| list.items.iter().map(CachedPod::of).collect()))
            }
            Io::WriteLedger {
                name,
                group,
                ledger,
            } => Reply::Written(
                deadline
                    .run(ledger::write(&config_maps, &name, &group, &ledger))
                    .await,
            ),
            Io::ReadLedger { name } => {
                Reply::Ledger(deadline.run(ledger::read(&config_maps, &name)).await)
            }
            Io::Prepare { pods } => {
                let called = self.pods.call_all(PodMethod::Post, &pods);
                Reply::Prepared(
                    deadline
                        .run(async { called.await.map_err(Error::PodCall) })
                        .await,
                )
            }
        }
    }

    /// Undoes by `deadline`: the pods and the claim at the same time, so a hanging pod cannot
    /// keep the claim held. Failures are logged; the answer is the flow's already.
    async fn undo(&self, pods: &[PodEndpoint], release: Option<Release>, deadline: Deadline<'_>) {
        let undo_pods = async {
            if pods.is_empty() {
                return;
            }
            let deleted = self.pods.call_each(PodMethod::Delete, pods);
            let failures = match deadline
                .run(async { Ok::<_, kube::Error>(deleted.await) })
                .await
            {
                Ok(failures) => failures.iter().map(ToString::to_string).collect(),
                Err(error) => vec![error],
            };
            for failure in failures {
                tracing::warn!(error = %failure, "undoing a pod's preparation failed");
            }
        };
        let release_claim = async {
            if let Some(release) = release {
                self.release(release, deadline).await;
            }
        };
        tokio::join!(undo_pods, release_claim);
    }

    /// Drives a claim's release to its end.
    async fn release(&self, mut release: Release, deadline: Deadline<'_>) {
        let mut step = release.start();
        let released = loop {
            match step {
                ReleaseStep::Do(io) => step = release.advance(self.perform(io, deadline).await),
                ReleaseStep::Done(released) => break released,
            }
        };
        let ledger = release.ledger();
        match released {
            Released::Restored => tracing::info!(%ledger, "downscale claim released"),
            Released::NotOurs => {}
            Released::Failed(error) => {
                tracing::error!(%ledger, %error, "releasing the downscale claim failed; the group waits its min-time");
            }
            Released::KeptChanging => {
                tracing::error!(%ledger, "releasing the downscale claim failed: the ledger kept changing; the group waits its min-time");
            }
        }
    }

    /// Logs what the flow noted since the last step.
    fn log(&self, flow: &mut Flow) {
        for note in flow.take_notes() {
            match note {
                Note::ForeignNamespace { served, review } => tracing::warn!(
                    %served,
                    review_namespace = %review,
                    "a prepare-downscale review for a namespace this replica does not serve: the webhook configuration's namespaceSelector must select only the served one"
                ),
                Note::NotAsStored {
                    stored_replicas,
                    stored,
                    review,
                } => tracing::warn!(
                    stored_replicas,
                    stored_uid = ?stored.uid,
                    stored_resource_version = ?stored.resource_version,
                    review_uid = ?review.uid,
                    review_resource_version = ?review.resource_version,
                    "a prepare-downscale review does not describe the StatefulSet as stored; nothing prepared"
                ),
                Note::StepFailed { what, error } => tracing::warn!(%error, "{what} failed"),
                Note::MalformedTracker { version, entries } => {
                    if self.first_look_at(version.as_deref()) {
                        let tracker = &self.settings.zone_tracker;
                        for entry in entries {
                            tracing::warn!(%tracker, key = %entry.key, value = %entry.value, "{entry}; counted as a downscale now");
                        }
                    }
                }
                Note::LedgerChanged => tracing::debug!("ledger changed meanwhile; judging again"),
                Note::Claimed { ledger } => tracing::info!(%ledger, "downscale claimed"),
                Note::PreparedAlready => tracing::info!(
                    "the same downscale was prepared moments ago (the API server admits it again); its pods are not told twice"
                ),
                Note::PodFailed { error } => {
                    tracing::warn!(%error, "a pod failed to prepare for shutdown; undoing");
                }
                Note::Prepared => tracing::info!("downscale prepared"),
            }
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
}

fn labelled(selector: &str) -> ListParams {
    ListParams::default().labels(selector)
}

/// The point in time by which a group of steps must be done, and where a failed step is
/// counted.
#[derive(Debug, Clone, Copy)]
struct Deadline<'a> {
    at: Instant,
    failures: Option<&'a Failures>,
}

impl Deadline<'_> {
    /// `step`, or an error once the deadline passed; an error is given as its text (the
    /// flow names it in the denial). The one place a failed step of the flow is counted.
    async fn run<T, E: Into<Error>>(
        self,
        step: impl Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        let error = match tokio::time::timeout_at(self.at, step).await {
            Ok(Ok(done)) => return Ok(done),
            Ok(Err(error)) => error.into(),
            Err(_) => Error::DeadlinePassed,
        };
        if let Some(failures) = self.failures {
            failures.count(&error);
        }
        Err(error.to_string())
    }
}
