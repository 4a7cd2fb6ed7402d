//! Runs prepare-downscale's sequence (`baton_core::admission::prepare::flow`): every step the
//! core returns is a read, a write or pod calls done here, and its answer goes back to the core,
//! which decides the next; the decisions and their order are all the core's.
//!
//! Everything runs under the request's deadline; part of it is kept back for the undo so a
//! slow pod cannot leave other pods prepared and the claim held.
//!
//! With member clusters, the claim across them ([`Io::ClaimMembers`]) is driven here as
//! `baton_core::member_claims` decides it: every other member's ledger at once, each read,
//! judged and written conditioned on the version judged (the claim loop of
//! `baton_shared::ledger`), through that member's client, so that a member that takes
//! connections and never answers holds back no other's answer; a member without a client, or
//! whose call fails or passes the deadline, is unreachable, which never counts for the claim.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_config::Config;
use baton_core::admission::Verdict;
use baton_core::admission::prepare::flow::{
    Flow, Io, MemberSettings, Note, PrepareRequest, Release, ReleaseStep, Released, Reply,
    Settings, Step,
};
use baton_core::member_claims::{self, MemberClaim, Next, Reached};
use baton_core::namespaces::Scope;
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
    /// The namespaces served: a review in one of them is judged there (`settings.namespace`
    /// is the one served when it is one, and the review's for each flow when more are).
    scope: Scope,
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
    pub fn new(client: Client, pods: PodHttpClient, config: &Config, scope: Scope) -> Self {
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
                members: None,
            },
            request_timeout,
            undo_reserve: config.pods.request_timeout.get().min(request_timeout / 3),
            tracker_logged: Arc::default(),
            failures: None,
            members: None,
            scope,
        }
    }

    /// Claims downscales across `members` (`webhook.clusters`); `None`: this cluster alone.
    pub fn with_members(mut self, members: Option<Members>) -> Self {
        self.settings.members = members.as_ref().map(|members| MemberSettings {
            cluster: members.own().to_owned(),
            lifetime: self.request_timeout,
        });
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
        // A review in a namespace served is judged in that namespace, every read and write
        // there; one in another is refused by the flow as foreign (the one served is named
        // to whoever reads the log).
        let mut settings = self.settings.clone();
        if self.scope.names(&request.downscale.namespace) {
            settings.namespace.clone_from(&request.downscale.namespace);
        } else if self.scope.only().is_none() {
            settings.namespace = self.scope.describe();
        }
        let namespace = settings.namespace.clone();
        let namespace = namespace.as_str();
        let (mut flow, mut step) = Flow::start(settings, request);
        loop {
            self.log(&mut flow);
            let reply = match step {
                Step::Do(io) => self.perform(io, namespace, forward).await,
                Step::Undo { pods, release } => {
                    self.undo(&pods, release, namespace, undo).await;
                    Reply::Undone
                }
                Step::Answer(verdict) => return verdict,
            };
            step = flow.advance(reply, Timestamp::now());
        }
    }

    /// Does one read, write or pod call in `namespace` (the review's) by `deadline`, and
    /// gives its answer.
    async fn perform(&self, io: Io, namespace: &str, deadline: Deadline<'_>) -> Reply {
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
            Io::ClaimMembers {
                cluster,
                ledger,
                group,
                key,
                claim,
                downscale,
            } => {
                let claim = Across {
                    namespace,
                    own: &cluster,
                    ledger: &ledger,
                    group: &group,
                    key: &key,
                    claim: &claim,
                };
                Reply::Members(self.claim_members(claim, &downscale, deadline).await)
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

    /// Claims across the member clusters, the own one's ledger holding the claim already:
    /// every other member asked at once, each answer given to the core as it comes, until a
    /// majority accepted (`Ok`, with a warning naming each member that did not take it, or
    /// has not answered yet: its ask is dropped) or every member answered without one (a
    /// member silent at `deadline` is unreachable). Then the claim is withdrawn from the
    /// others that accepted it, all at once (the own ledger's is the flow's release), and the
    /// refusal's message given.
    async fn claim_members(
        &self,
        across: Across<'_>,
        downscale: &str,
        deadline: Deadline<'_>,
    ) -> Result<Vec<String>, String> {
        use futures::StreamExt;

        let Some(members) = &self.members else {
            return Err(format!(
                "{downscale} could not be claimed across member clusters: internal error: no member clusters"
            ));
        };
        let order = member_claims::order(across.own, members.names());
        let mut answers: Vec<Option<Reached>> = vec![None; order.len()];
        answers[0] = Some(Reached::Accepted);
        let across = &across;
        let mut asked: futures::stream::FuturesUnordered<_> = order
            .iter()
            .enumerate()
            .skip(1)
            .map(|(index, member)| async move {
                (
                    index,
                    self.claim_in(members, member, across, deadline).await,
                )
            })
            .collect();
        loop {
            match member_claims::next(&order, &answers, downscale) {
                Next::Wait => {
                    // Each ask ends by `deadline` (unreachable then): the stream cannot stall.
                    let Some((index, reached)) = asked.next().await else {
                        return Err(format!(
                            "{downscale} could not be claimed across member clusters: internal error: a member's answer is missing"
                        ));
                    };
                    if let Reached::Refused(why) | Reached::Unreachable(why) = &reached {
                        let member = &order[index];
                        tracing::info!(%member, %why, "member cluster did not take the downscale claim");
                    }
                    answers[index] = Some(reached);
                }
                Next::Approved { warnings } => {
                    for warning in &warnings {
                        tracing::warn!(%warning, "downscale approved without every member cluster");
                    }
                    return Ok(warnings);
                }
                Next::Refused { withdraw, message } => {
                    // The withdrawals get the time kept back for undoing.
                    let undo = Deadline {
                        at: deadline.at + self.undo_reserve,
                        failures: deadline.failures,
                    };
                    let others = withdraw.iter().filter(|member| *member != across.own);
                    futures::future::join_all(
                        others.map(|member| self.withdraw_in(members, member, across, undo)),
                    )
                    .await;
                    return Err(message);
                }
            }
        }
    }

    /// The claim in `member`'s ledger, judged by the core: accepted, refused, or the member
    /// unreachable.
    async fn claim_in(
        &self,
        members: &Members,
        member: &str,
        across: &Across<'_>,
        deadline: Deadline<'_>,
    ) -> Reached {
        let lifetime = self.request_timeout;
        let judge = |read: &baton_core::ledger::Ledger| {
            let now = Timestamp::now();
            match member_claims::judge(read, across.key, across.claim, now, lifetime) {
                member_claims::Judged::Accepts(accepted) => {
                    baton_core::ledger::Judged::Claim(accepted, Reached::Accepted)
                }
                refused => baton_core::ledger::Judged::Settled(Reached::of(&refused)),
            }
        };
        self.in_ledger_of(members, member, across, deadline, judge)
            .await
            .unwrap_or_else(Reached::Unreachable)
    }

    /// Withdraws the claim from `member`'s ledger, if it is still there as this request's.
    /// A failure leaves it: it holds the others back for its min-time, as a downscale would.
    async fn withdraw_in(
        &self,
        members: &Members,
        member: &str,
        across: &Across<'_>,
        deadline: Deadline<'_>,
    ) {
        let judge = |read: &baton_core::ledger::Ledger| match member_claims::withdrawn(
            read,
            across.key,
            &across.claim.request,
        ) {
            Some(without) => baton_core::ledger::Judged::Claim(without, ()),
            None => baton_core::ledger::Judged::Settled(()),
        };
        if let Err(error) = self
            .in_ledger_of(members, member, across, deadline, judge)
            .await
        {
            tracing::warn!(%member, %error, "withdrawing the downscale claim failed; it holds the others back for its min-time");
        }
    }

    /// `judge`d on `member`'s ledger of the group, through the member's client: read, judged,
    /// written conditioned on the version judged, again after a lost race; why not, when the
    /// member has no client, a call failed or passed `deadline`, or the ledger kept changing.
    async fn in_ledger_of<T>(
        &self,
        members: &Members,
        member: &str,
        across: &Across<'_>,
        deadline: Deadline<'_>,
        mut judge: impl FnMut(&baton_core::ledger::Ledger) -> baton_core::ledger::Judged<T>,
    ) -> Result<T, String> {
        let client = members.client(member)?;
        let config_maps: Api<ConfigMap> = Api::namespaced(client, across.namespace);
        let config_maps = &config_maps;
        ledger::claim(
            || async move {
                let read = deadline.run(ledger::read(config_maps, across.ledger)).await;
                read.map(|read| (read, true))
            },
            |read, _| judge(read),
            |written| async move {
                let write = ledger::write(config_maps, across.ledger, across.group, &written);
                deadline.run(write).await
            },
        )
        .await
        .map_err(|error| match error {
            ledger::ClaimError::Failed(error) => error,
            ledger::ClaimError::Contended => "its ledger kept changing".to_owned(),
        })
    }

    /// Undoes by `deadline`: the pods and the claim at the same time, so a hanging pod cannot
    /// keep the claim held. Failures are logged; the answer is the flow's already.
    async fn undo(
        &self,
        pods: &[PodEndpoint],
        release: Option<Release>,
        namespace: &str,
        deadline: Deadline<'_>,
    ) {
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
                self.release(release, namespace, deadline).await;
            }
        };
        tokio::join!(undo_pods, release_claim);
    }

    /// Drives a claim's release to its end.
    async fn release(&self, mut release: Release, namespace: &str, deadline: Deadline<'_>) {
        let mut step = release.start();
        let released = loop {
            match step {
                ReleaseStep::Do(io) => {
                    step = release.advance(self.perform(io, namespace, deadline).await);
                }
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

/// A claim across member clusters: the group's namespace, the own one's name, the group's
/// ledger, and the claim.
struct Across<'a> {
    namespace: &'a str,
    own: &'a str,
    ledger: &'a str,
    group: &'a str,
    key: &'a str,
    claim: &'a MemberClaim,
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
