//! Zone-aware pod disruption budgets as the rollout controller consults them before it deletes
//! a pod: a drain and a rollout at the same time must never together exceed a budget.
//!
//! - **The decision** is the webhook's own, [`decide_rollout_deletion`]: the other zones must
//!   be available as for an eviction, and within the pod's zone the rollout's max-unavailable
//!   applies instead of the budget's, so a budget of `maxUnavailable: 0` (which refuses every
//!   eviction) never blocks a rollout, as it does the Go operator's. `judge` is that
//!   decision on the caches, in the core (`baton_core::zpdb::rollout_deletion`), and so is
//!   what each step of a consult comes to (the first look, each read of the record, a claim
//!   that could not be made); this module reads the caches and the record and writes the claim.
//! - **Race-free with the webhook.** An allowed deletion is claimed in the budget's record
//!   (`baton-zpdb-<budget>`, [`baton_core::zpdb::record`]) by the same resourceVersion-checked
//!   write the webhook replicas claim evictions with, after judging on a fresh read of it (its
//!   recent claims count as unavailable pods). Controller and webhook therefore serialise on
//!   one object: of a drain's eviction and a rollout's deletion judged at the same instant,
//!   one write wins and the other is judged again against it. The controller reads the record
//!   fresh each time (it deletes rarely; the webhook keeps a copy because it answers drains).
//! - **Free replacements** (a pod that is already unavailable, deleted so the StatefulSet
//!   recreates it) are never consulted: deleting them takes no availability away, and holding
//!   them would keep a broken zone broken while a drain waits on it.
//! - **The cache** of the namespace's budgets is the webhook's too, `baton_shared::zpdb_cache`:
//!   parsed once per version, a missing CRD meaning no budgets. Until the first listing (or the
//!   API's answer that the CRD is not installed) rollout deletions wait: a controller just
//!   started must not delete past a budget it has not read yet.
//!
//! Which StatefulSets count: those of the controller's cache, i.e. every StatefulSet with a
//! `rollout-group` label. A budget selects a rollout group's zones in practice; a StatefulSet
//! it selects without that label is not seen here (its pods' unavailability does not hold a
//! rollout, though the webhook still guards evictions of it).
//!
//! Which group a budget's change concerns: every group with a StatefulSet the budget (before
//! or after the change) selects. A budget's pods are those groups' pods, whose changes the pod
//! watch already routes to them; the record is not watched, so a rollout held by a claim comes
//! back after [`RECHECK_AFTER`].

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use baton_core::clusters::qualified;
use baton_core::ledger::Judged;
use baton_core::ledger::Ledger;
pub use baton_core::zpdb::Deletion;
use baton_core::zpdb::Observed;
use baton_core::zpdb::View;
use baton_core::zpdb::members::{Progress, Standing, short_of_majority, withdrawn};
use baton_core::zpdb::record::{RECORD_LABEL, record_name};
pub use baton_core::zpdb::rollout_deletion::Permit;
use baton_core::zpdb::rollout_deletion::{
    ClaimFailure, Claimant, claim_request, could_not_claim, first_look, on_record,
};
use baton_shared::kube_client::bounded;
use baton_shared::ledger::{self, ClaimError};
use baton_shared::pod_client::error_chain;
use baton_shared::zpdb_cache::{BudgetEvents, Budgets, Known};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use tokio::sync::mpsc::UnboundedSender;

use crate::cache::Caches;
use crate::clusters::Clusters;
use crate::runner::{Runner, TermLost};
use baton_core::statefulset::group_of;

/// A rollout held by a budget comes back after this long even if nothing it watches changes
/// (the record's claims expire, and pods of StatefulSets outside the groups are not watched).
pub const RECHECK_AFTER: Duration = Duration::from_secs(2);
/// The Event reason of a rollout deletion a budget holds.
pub const WAIT_REASON: &str = "ZoneAwareBudgetWaits";

/// The budgets' cache and the consult the rollout calls before each deletion.
#[derive(Clone)]
pub struct ZoneBudgets {
    namespace: String,
    client: kube::Client,
    caches: Caches,
    budgets: Budgets,
    /// With member clusters, whose records a deletion is claimed in (a majority of them).
    members: Option<Members>,
}

/// The member clusters whose budgets' records a deletion is claimed in, as the webhooks claim
/// evictions: in a majority of them (`baton_core::zpdb::members`).
#[derive(Clone)]
struct Members {
    clusters: Clusters,
    /// Every member's name.
    names: Vec<String>,
}

impl std::fmt::Debug for ZoneBudgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneBudgets")
            .field("namespace", &self.namespace)
            .field("known", &self.budgets.known())
            .finish_non_exhaustive()
    }
}

impl ZoneBudgets {
    /// The budgets of `namespace`, watched from `source`, and the future that reads them (run
    /// it as a task), sending on `touched` the groups each change concerns.
    pub fn start(
        client: kube::Client,
        source: &crate::watch_source::WatchSource,
        namespace: &str,
        caches: Caches,
        touched: UnboundedSender<String>,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let routes = RouteToGroups {
            caches: caches.clone(),
            touched,
        };
        let (watched, watch) = Budgets::watch_events(source.budgets(namespace), routes);
        let budgets = Self {
            namespace: namespace.to_owned(),
            client,
            caches,
            budgets: watched,
            members: None,
        };
        (budgets, watch)
    }

    /// These budgets with member clusters `names`, reached through `clusters`: a deletion a
    /// budget allows is claimed in the budget's records of a majority of them, as the members'
    /// webhooks claim evictions, so that a drain in one cluster and a rollout's deletion in
    /// another never take two zones.
    pub fn with_members(mut self, clusters: Clusters, names: &[String]) -> Self {
        self.members = Some(Members {
            clusters,
            names: names.to_vec(),
        });
        self
    }

    /// Budgets that stay as `known`, with no watch: for tests of the reconcile that are not
    /// about budgets (`Known::NotInstalled`: every deletion goes unconsulted).
    pub fn fixed(client: kube::Client, namespace: &str, caches: Caches, known: Known) -> Self {
        Self {
            namespace: namespace.to_owned(),
            client,
            caches,
            budgets: Budgets::fixed(known),
            members: None,
        }
    }

    /// What the cache knows now.
    pub fn known(&self) -> Known {
        self.budgets.known()
    }

    /// Consults the budgets on `deletion` by `group`'s rollout: what it comes to at each step
    /// is the core's ([`first_look`], then [`on_record`] on each read of the budget's record);
    /// this reads the record and writes the claim. Never fails: what went wrong is the reason
    /// to wait ([`could_not_claim`]), but a term that ends: each read of the record is bounded
    /// by the request timeout, each claim (a write of the pass's term) by what is left of the
    /// term, asked afresh at each attempt ([`Runner`]).
    pub async fn before_deletion(
        &self,
        group: &str,
        deletion: &Deletion<'_>,
        runner: &Runner,
    ) -> Result<Permit, TermLost> {
        let budget = match self.with_view(|view| first_look(view, deletion)) {
            Ok(settled) => return Ok(settled),
            Err(budget) => budget,
        };
        let Some(members) = &self.members else {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
            return Ok(
                match self.claim_in(&api, group, deletion, &budget, runner).await {
                    Ok(permit) => permit,
                    Err(Stopped::TermLost) => return Err(TermLost),
                    Err(Stopped::Failed(failure)) => could_not_claim(deletion, &budget, &failure),
                },
            );
        };
        let mut progress = Progress::new(members.names.iter().map(String::as_str));
        loop {
            let cluster = match progress.standing() {
                Standing::Reached => return Ok(Permit::Go),
                Standing::Short {
                    withdraw,
                    not_taken,
                } => {
                    self.withdraw(members, group, deletion, &budget, &withdraw, runner)
                        .await?;
                    let why = short_of_majority(
                        deletion.pod,
                        &budget,
                        members.names.len(),
                        &withdraw,
                        &not_taken,
                    );
                    return Ok(Permit::Wait(format!("the rollout waits: {why}")));
                }
                Standing::Next(cluster) => cluster,
            };
            let api = match members.record_api(&cluster, &self.namespace) {
                Ok(api) => api,
                Err(error) => {
                    progress.missed(error);
                    continue;
                }
            };
            match self.claim_in(&api, group, deletion, &budget, runner).await {
                Ok(Permit::Go) => progress.took(),
                Ok(wait) => {
                    let claimed = progress.claimed().to_vec();
                    self.withdraw(members, group, deletion, &budget, &claimed, runner)
                        .await?;
                    return Ok(wait);
                }
                Err(Stopped::TermLost) => return Err(TermLost),
                Err(Stopped::Failed(ClaimFailure::Call { step, error })) => {
                    progress.missed(format!("{step} the record failed: {error}"));
                }
                Err(Stopped::Failed(ClaimFailure::Contended)) => {
                    progress.missed("the record kept changing".to_owned());
                }
            }
        }
    }

    /// The claim of `deletion` in `budget`'s record through `api`: what [`on_record`] makes of
    /// each read of it, the claim written conditioned on the version read. Each read is
    /// bounded by the request timeout, each write (a write of the pass's term) by what is left
    /// of the term.
    async fn claim_in(
        &self,
        api: &Api<ConfigMap>,
        group: &str,
        deletion: &Deletion<'_>,
        budget: &str,
        runner: &Runner,
    ) -> Result<Permit, Stopped> {
        let name = record_name(budget);
        let name = &name;
        let failed = |step, error| Stopped::Failed(ClaimFailure::Call { step, error });
        let read = move || async move {
            let reading = format!("reading ConfigMap {name}");
            match bounded(runner.bound(false)?, reading, ledger::read(api, name)).await {
                Ok(Ok(record)) => Ok((record, true)),
                Ok(Err(error)) => Err(failed("reading", error_chain(&error))),
                Err(timed_out) => Err(failed("reading", timed_out.to_string())),
            }
        };
        let uid = self.pod_uid(deletion.pod);
        let claimant = Claimant {
            group,
            pod_uid: uid.as_deref(),
        };
        let judge = |record: &Ledger, _fresh| {
            self.with_view(|view| on_record(view, deletion, record, claimant))
        };
        // A webhook replica (or another claim) writing first makes `claim` judge again.
        let store = move |claimed: Ledger| async move {
            let writing = format!("writing ConfigMap {name}");
            let write = ledger::write_labelled(api, name, (RECORD_LABEL, budget), &claimed);
            match runner.step(writing, write).await? {
                Ok(Ok(written)) => Ok(written),
                Ok(Err(error)) => Err(failed("writing", error_chain(&error))),
                Err(timed_out) => Err(failed("writing", timed_out.to_string())),
            }
        };
        match ledger::claim(read, judge, store).await {
            Ok(permit) => Ok(permit),
            Err(ClaimError::Failed(stopped)) => Err(stopped),
            Err(ClaimError::Contended) => Err(Stopped::Failed(ClaimFailure::Contended)),
        }
    }

    /// Takes this deletion's claim out of the records of `clusters` (a claim that fell short
    /// of a majority, or that a later record refused), each on a fresh read, conditioned. What
    /// cannot be taken out holds the budget until it expires, as a deletion that never came.
    async fn withdraw(
        &self,
        members: &Members,
        group: &str,
        deletion: &Deletion<'_>,
        budget: &str,
        clusters: &[String],
        runner: &Runner,
    ) -> Result<(), TermLost> {
        let name = record_name(budget);
        let request = claim_request(group);
        for cluster in clusters {
            let Ok(api) = members.record_api(cluster, &self.namespace) else {
                continue;
            };
            let (api, name_ref, request) = (&api, &name, &request);
            let read = move || async move {
                let reading = format!("reading ConfigMap {name_ref}");
                match bounded(runner.bound(false)?, reading, ledger::read(api, name_ref)).await {
                    Ok(Ok(record)) => Ok((record, true)),
                    Ok(Err(error)) => Err(Stopped::Failed(ClaimFailure::Call {
                        step: "reading",
                        error: error_chain(&error),
                    })),
                    Err(timed_out) => Err(Stopped::Failed(ClaimFailure::Call {
                        step: "reading",
                        error: timed_out.to_string(),
                    })),
                }
            };
            let judge = |record: &Ledger, _fresh| match withdrawn(record, deletion.pod, request) {
                Some(without) => Judged::Claim(without, ()),
                None => Judged::Settled(()),
            };
            let store = move |without: Ledger| async move {
                let writing = format!("writing ConfigMap {name_ref}");
                let write = ledger::write_labelled(api, name_ref, (RECORD_LABEL, budget), &without);
                match runner.step(writing, write).await? {
                    Ok(Ok(written)) => Ok(written),
                    Ok(Err(error)) => Err(Stopped::Failed(ClaimFailure::Call {
                        step: "writing",
                        error: error_chain(&error),
                    })),
                    Err(timed_out) => Err(Stopped::Failed(ClaimFailure::Call {
                        step: "writing",
                        error: timed_out.to_string(),
                    })),
                }
            };
            match ledger::claim(read, judge, store).await {
                Ok(()) => {}
                Err(ClaimError::Failed(Stopped::TermLost)) => return Err(TermLost),
                Err(_) => {
                    tracing::warn!(%cluster, record = %name, pod = %deletion.pod, "cannot withdraw a rollout deletion's claim; it expires by itself");
                }
            }
        }
        Ok(())
    }

    /// The caches as they are now, for the core to judge on.
    fn with_view<T>(&self, judge: impl FnOnce(&View<'_>) -> T) -> T {
        let known = self.known();
        let statefulsets = self.caches.statefulsets();
        let pods = self.caches.pods();
        let statefulsets: Vec<&StatefulSet> = statefulsets.iter().map(Arc::as_ref).collect();
        let view = View {
            namespace: &self.namespace,
            known: &known,
            statefulsets: &statefulsets,
            pods: &pods,
            now: Timestamp::now(),
        };
        judge(&view)
    }

    fn pod_uid(&self, pod: &str) -> Option<String> {
        self.caches
            .pod(pod)
            .map(|pod| pod.uid.clone())
            .filter(|uid| !uid.is_empty())
    }
}

impl Members {
    /// The ConfigMaps of `cluster`'s groups' namespace, or why it cannot be reached now.
    fn record_api(&self, cluster: &str, namespace: &str) -> Result<Api<ConfigMap>, String> {
        let member = qualified(cluster, "record");
        self.clusters
            .client_for(&member)
            .map(|(client, _)| Api::namespaced(client, namespace))
            .map_err(|error| error.to_string())
    }
}

/// Why a consult's claim stopped before it was settled.
enum Stopped {
    Failed(ClaimFailure),
    /// The pass's term ended: nothing more is claimed in it.
    TermLost,
}

impl From<TermLost> for Stopped {
    fn from(TermLost: TermLost) -> Self {
        Self::TermLost
    }
}

/// Sends on `touched` the groups a budget's change concerns.
struct RouteToGroups {
    caches: Caches,
    touched: UnboundedSender<String>,
}

impl BudgetEvents for RouteToGroups {
    fn parsed(&mut self, budget: &Observed) {
        if let Err(invalid) = budget {
            tracing::warn!(budget = %invalid.name, problem = %invalid, "invalid ZoneAwarePodDisruptionBudget; rollout deletions of the pods it selects wait");
        }
    }

    fn changed(&mut self, budgets: &[Arc<Observed>]) {
        for group in groups_selected(&self.caches, budgets) {
            let _ = self.touched.send(group);
        }
    }
}

/// The groups with a StatefulSet one of `budgets` selects.
fn groups_selected(caches: &Caches, budgets: &[Arc<Observed>]) -> BTreeSet<String> {
    if budgets.is_empty() {
        return BTreeSet::new();
    }
    caches
        .statefulsets()
        .iter()
        .filter(|statefulset| {
            let labels = &statefulset.metadata.labels;
            budgets.iter().any(|budget| match budget.as_ref() {
                Ok(budget) => budget.selects(labels),
                Err(invalid) => invalid.selects(labels),
            })
        })
        .filter_map(|statefulset| group_of(statefulset).map(str::to_owned))
        .collect()
}
