//! `/admission/pod-eviction` at run time: the watch caches the decision reads (pods,
//! StatefulSets and budgets of the watched namespace, slimmed to what the decision needs) and
//! the claim of an allowed eviction in the budget's record (see `admission::zpdb_reviews`).
//!
//! The pods are watched from the first budget on: until a namespace has one, every eviction is
//! allowed without looking at its pod, and a webhook in a namespace of thousands of pods that
//! uses no budget holds none of them.
//!
//! No API read per request: a pod the cache has not seen yet is read once (counted in
//! `baton_webhook_zpdb_api_reads_total`), and a budget's record is read only when this
//! replica does not know it yet or lost a write to another replica (409). Within a replica,
//! evictions under one budget are judged one at a time, so they do not conflict with each
//! other; across replicas the resourceVersion-conditioned write decides.
//!
//! Serving more than one namespace, no pod is cached: a cluster's pods would make the
//! webhook's memory, and every listing's time, grow with the cluster. The budgets of every
//! namespace are watched (they are few) and the StatefulSets are shared with the parents;
//! an eviction reads, in its own namespace and bounded, the pod and, when a budget selects it,
//! the pods of the StatefulSets that budget selects: what the decision counts, no more. So an
//! answer costs a few reads whatever the cluster's size, and an eviction no budget selects
//! costs one. Nothing is read or written outside the request's namespace, whatever a budget or
//! a StatefulSet of that namespace says.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use baton_core::namespaces::Scope;
use baton_core::pods::{CachedPod, PodsByStatefulSet};
use baton_core::zpdb::decide::selecting_budget;
use baton_core::zpdb::{
    AllowReason, EvictionSnapshot, EvictionVerdict, Observed, RecentlyAllowed, decide,
};
use baton_shared::kube_client::bounded;
use baton_shared::pod_cache::{self, PodCache};
use baton_shared::zpdb_cache::{BudgetEvents, Budgets};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::runtime::watcher;
use kube::{Api, Client};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::admission::review::AdmissionRequest;
use crate::admission::zpdb_reviews::{self as admission, Eviction};
use crate::member_pods::{ClientOf, MemberPods};
use crate::statefulsets::{CachedStatefulSet, StatefulSetCache};
use baton_core::admission::{Reason, Verdict};
use baton_core::clusters::{qualified, qualify_pod, qualify_statefulset, split};
use baton_core::ledger::{Judged, Ledger};
use baton_core::zpdb::members::{
    Progress, Standing, refuse_while_away, short_of_majority, withdrawn,
};
use baton_core::zpdb::record::{
    RECORD_EXPIRY, RECORD_LABEL, recently_allowed, record_name, with_eviction,
};
use baton_shared::ledger::{self, CLAIM_ATTEMPTS, ClaimError, Written};

/// Evictions judged, by reason and status (the Go operator's name and labels).
pub const EVICTION_REQUESTS_METRIC: &str = "rollout_operator_zpdb_eviction_requests_total";
/// Evictions being judged right now.
pub const INFLIGHT_METRIC: &str = "rollout_operator_zpdb_inflight_eviction_requests";
/// Budget versions parsed, by result (`valid`, `invalid`).
pub const CONFIGURATIONS_METRIC: &str = "rollout_operator_zpdb_configurations_observed_total";
/// API reads made to judge an eviction (a pod not cached yet, a record not known or stale).
pub const API_READS_METRIC: &str = "baton_webhook_zpdb_api_reads_total";
/// API writes made to judge an eviction: the claims of allowed evictions in budgets' records.
pub const API_WRITES_METRIC: &str = "baton_webhook_zpdb_api_writes_total";

/// The most one read of what an eviction counts may take when more than one namespace is
/// served (the pod, the pods of its budget's StatefulSets): the claim in the budget's record
/// must still fit within the request's deadline.
const LIVE_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long an eviction waits for the pods to be listed when the first budget of the namespace
/// just started their watch (a listing takes well under a second; the API server's call to the
/// webhook times out after 10 s).
const POD_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Debug, Clone)]
pub struct ZpdbMetrics {
    pub eviction_requests: IntCounterVec,
    pub inflight: IntGauge,
    pub configurations: IntCounterVec,
    /// `{what}`: `pod` or `record`.
    pub api_reads: IntCounterVec,
    /// `{what}`: `record`.
    pub api_writes: IntCounterVec,
}

impl ZpdbMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let eviction_requests = IntCounterVec::new(
            Opts::new(
                EVICTION_REQUESTS_METRIC,
                "Number of zpdb eviction requests.",
            ),
            &["reason", "status"],
        )?;
        let inflight = IntGauge::new(
            INFLIGHT_METRIC,
            "Number of zpdb eviction requests which are currently in-flight.",
        )?;
        let configurations = IntCounterVec::new(
            Opts::new(
                CONFIGURATIONS_METRIC,
                "Number of zpdb configurations observed by the configuration controller.",
            ),
            &["result"],
        )?;
        let api_reads = IntCounterVec::new(
            Opts::new(
                API_READS_METRIC,
                "API reads made to judge evictions, by what was read (pod, record; pods: a StatefulSet's pods, when more than one namespace is served).",
            ),
            &["what"],
        )?;
        registry.register(Box::new(eviction_requests.clone()))?;
        registry.register(Box::new(inflight.clone()))?;
        registry.register(Box::new(configurations.clone()))?;
        let api_writes = IntCounterVec::new(
            Opts::new(
                API_WRITES_METRIC,
                "API writes made to judge evictions, by what was written (record).",
            ),
            &["what"],
        )?;
        registry.register(Box::new(api_reads.clone()))?;
        registry.register(Box::new(api_writes.clone()))?;
        Ok(Self {
            eviction_requests,
            inflight,
            configurations,
            api_reads,
            api_writes,
        })
    }

    fn api_read(&self, what: &str) -> IntCounter {
        self.api_reads.with_label_values(&[what])
    }
}

/// The caches, the parsed budgets and the known records. Cheap to share behind an `Arc`.
pub struct Evictions {
    /// The namespaces served; an eviction in another is not judged.
    scope: Scope,
    /// The one namespace served (`Scope::only`), whose pods are watched; `None`: more are
    /// served, and what an eviction counts is read for it.
    namespace: Option<String>,
    client: Client,
    /// Filled from the first budget on (`pods_wanted`); never, when more than one namespace
    /// is served.
    pods: PodCache,
    pods_wanted: tokio::sync::watch::Receiver<bool>,
    /// `pods` by StatefulSet, as of a number of changes of both.
    pod_index: RwLock<Arc<PodIndex>>,
    /// Shared with the `/scale` parents: one watch of the namespace's StatefulSets (every
    /// namespace's when more are served).
    statefulsets: StatefulSetCache,
    /// Parsed once per version, as the controller's are; every namespace's, keyed
    /// `namespace/name`, when more than one is served.
    budgets: Budgets,
    /// Budget key ([`Evictions::budget_key`]) → its record as this replica last read or wrote
    /// it.
    records: Mutex<HashMap<String, Ledger>>,
    /// Budget key → the lock that makes this replica judge its evictions one at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    metrics: ZpdbMetrics,
    /// The member clusters budgets span (`webhook.clusters`); none: this cluster alone.
    members: Option<EvictionMembers>,
}

/// The member clusters as the eviction decision reads them.
pub struct EvictionMembers {
    /// This webhook's own cluster.
    own: String,
    /// Every member's name, its own among them.
    names: Vec<String>,
    client_of: ClientOf,
    /// The other members' pods and StatefulSets.
    pods: MemberPods,
}

/// The most one call to a member's record may take: a member that does not answer must leave
/// the others, and the withdrawal of a claim short of a majority, time within the request's
/// deadline (`webhook.request_timeout`, the API server's 10 s at most).
const MEMBER_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl std::fmt::Debug for Evictions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evictions")
            .field("scope", &self.scope.describe())
            .field("pods", &self.pods.len())
            .field("statefulsets", &self.statefulsets.len())
            .field("budgets", &self.budgets.listed().map(|listed| listed.len()))
            .finish()
    }
}

impl Evictions {
    /// The caches of the namespaces of `scope` and the future that fills those of budgets and
    /// pods (run it as a critical task; `statefulsets` is filled by its own watch, of every
    /// namespace when `scope` serves more than one).
    pub fn new(
        client: Client,
        scope: &Scope,
        statefulsets: StatefulSetCache,
        metrics: ZpdbMetrics,
    ) -> (Self, futures::future::BoxFuture<'static, ()>) {
        use futures::FutureExt;
        let (wanted, pods_wanted) = tokio::sync::watch::channel(false);
        let Some(namespace) = scope.only() else {
            let events = BudgetsSeen {
                wanted: None,
                configurations: metrics.configurations.clone(),
            };
            let (budgets, fill_budgets) = Budgets::watch_all(client.clone(), events);
            let evictions = Self {
                scope: scope.clone(),
                namespace: None,
                client,
                // Never read: what an eviction counts is read for it.
                pods: PodCache::of_pods([]),
                pods_wanted,
                pod_index: RwLock::default(),
                statefulsets,
                budgets,
                records: Mutex::default(),
                locks: Mutex::default(),
                metrics,
                members: None,
            };
            return (evictions, fill_budgets.boxed());
        };
        let events = BudgetsSeen {
            wanted: Some(wanted),
            configurations: metrics.configurations.clone(),
        };
        let (budgets, fill_budgets) = Budgets::watch(client.clone(), namespace, events);
        let (pods, pod_watch) = pod_cache::watch(
            client.clone(),
            namespace,
            watcher::Config::default(),
            |_| {},
        );
        let fill_pods = {
            let mut wanted = pods_wanted.clone();
            async move {
                if wanted.wait_for(|wanted| *wanted).await.is_ok() {
                    pod_watch.await;
                }
            }
        };
        let evictions = Self {
            scope: scope.clone(),
            namespace: Some(namespace.to_owned()),
            client,
            pods,
            pods_wanted,
            pod_index: RwLock::default(),
            statefulsets,
            budgets,
            records: Mutex::default(),
            locks: Mutex::default(),
            metrics,
            members: None,
        };
        let fill = async move {
            futures::join!(fill_pods, fill_budgets);
        };
        (evictions, fill.boxed())
    }

    /// These caches judging budgets over the pods of every member cluster of `names` (`own`
    /// among them: this webhook's cluster), each reached with `client_of`; and the future that
    /// fills the other members' caches from the first budget on (run it as a critical task).
    /// Member clusters are served with one namespace ([`Scope::only`]); the caller checks.
    pub fn with_members(
        mut self,
        own: &str,
        names: &[String],
        client_of: ClientOf,
    ) -> (Self, futures::future::BoxFuture<'static, ()>) {
        let others: Vec<String> = names.iter().filter(|name| *name != own).cloned().collect();
        let namespace = self
            .namespace
            .clone()
            .expect("member clusters are served with one namespace: checked at start");
        let (pods, fill) = MemberPods::start(
            client_of.clone(),
            &others,
            &namespace,
            self.pods_wanted.clone(),
        );
        self.members = Some(EvictionMembers {
            own: own.to_owned(),
            names: names.to_vec(),
            client_of,
            pods,
        });
        (self, fill)
    }

    /// `/admission/zpdb-validation`: the budget a review writes, validated against the
    /// namespaces whose budgets are judged.
    pub fn validate(&self, request: &AdmissionRequest<'_>) -> Verdict {
        if let Some(namespace) = &self.namespace {
            return admission::validate(request, namespace);
        }
        let namespace = admission::namespace_of(request);
        if self.scope.names(&namespace) {
            admission::validate(request, &namespace)
        } else {
            Verdict::refuse(
                Reason::InvalidBudget,
                format!(
                    "ZoneAwarePodDisruptionBudget {} is in namespace {namespace}, but baton-webhook judges evictions in {} only (its `namespaces` setting): it would never be consulted",
                    request.name,
                    self.scope.describe()
                ),
            )
        }
    }

    /// Where what is kept per budget (its record, its lock) is kept: the budget's name when
    /// one namespace is served, else `namespace/name` (the budgets' key).
    fn budget_key(&self, namespace: &str, budget: &str) -> String {
        match &self.namespace {
            Some(_) => budget.to_owned(),
            None => baton_shared::zpdb_cache::key(namespace, budget),
        }
    }

    /// The listed budgets of `namespace`, `None` before the first listing.
    fn budgets_of(&self, namespace: &str) -> Option<Vec<Arc<Observed>>> {
        match &self.namespace {
            Some(_) => self.budgets.listed(),
            None => self.budgets.listed_in(namespace),
        }
    }

    /// Resolves once the StatefulSet cache holds its first full listing, and the pod cache too
    /// if the pods are watched by then. Not the budgets': without the CRD they are never
    /// listed, and the other webhooks must still serve; evictions are refused for now until
    /// they are (see `synced`).
    pub async fn wait_synced(&self) {
        self.statefulsets.wait_synced().await;
        if *self.pods_wanted.borrow() {
            let _ = self.pods.wait_until_ready().await;
        }
    }

    /// Whether every cache the decision needs holds its first full listing. The pods are
    /// needed once a budget exists; the first budget starts their watch, so an eviction right
    /// after it waits up to [`POD_LIST_WAIT`] for their listing rather than being refused.
    async fn synced(&self, budgets: &[Arc<Observed>]) -> bool {
        if !self.statefulsets.is_synced() {
            return false;
        }
        budgets.is_empty()
            || self.pods.is_ready()
            || tokio::time::timeout(POD_LIST_WAIT, self.pods.wait_until_ready())
                .await
                .is_ok_and(|ready| ready.is_ok())
    }

    /// Judges one eviction: the decision on the caches, then, when a budget allowed it, the
    /// claim in the budget's record. Counted in the eviction metrics.
    pub async fn judge(&self, request: &Eviction) -> Verdict {
        self.metrics.inflight.inc();
        let (verdict, reason) = self.judge_uncounted(request).await;
        self.metrics.inflight.dec();
        let status = if verdict.is_allowed() {
            "allowed"
        } else {
            "denied"
        };
        self.metrics
            .eviction_requests
            .with_label_values(&[reason, status])
            .inc();
        verdict
    }

    async fn judge_uncounted(&self, request: &Eviction) -> (Verdict, &'static str) {
        if !self.scope.names(&request.namespace) {
            return (
                Verdict::allow_with_message(format!(
                    "baton-webhook does not watch namespace {}; no ZoneAwarePodDisruptionBudget applies",
                    request.namespace
                )),
                "namespace_not_watched",
            );
        }
        let budgets = self.budgets_of(&request.namespace);
        let synced = match &budgets {
            Some(budgets) => self.synced(budgets).await,
            None => false,
        };
        let budgets = budgets.unwrap_or_default();
        if !synced {
            return (
                Verdict::refuse_for_now(
                    Reason::ReadFailed,
                    format!(
                        "pod {} cannot be evicted yet: this baton-webhook replica has not listed the pods, StatefulSets and ZoneAwarePodDisruptionBudgets of namespace {} yet (is the CRD zoneawarepoddisruptionbudgets.rollout-operator.grafana.com installed?); retry",
                        request.pod, request.namespace
                    ),
                ),
                "not_synced",
            );
        }
        // Every namespace's budgets, when more than one namespace is served.
        self.forget_deleted_budgets(self.budgets.count());
        if budgets.is_empty() {
            // No pod is read: with no budget, whatever its state, it may go.
            return (
                Verdict::allow_with_message(format!(
                    "no ZoneAwarePodDisruptionBudget in namespace {} selects pod {}",
                    request.namespace, request.pod
                )),
                AllowReason::NoBudget.label(),
            );
        }
        let pod = match self.pod(request).await {
            Ok(Some(pod)) => pod,
            Ok(None) => {
                return (
                    Verdict::allow_with_message(format!("pod {} does not exist", request.pod)),
                    "pod_not_found",
                );
            }
            Err(error) => {
                return (
                    Verdict::refuse_for_now(
                        Reason::ReadFailed,
                        format!("pod {} cannot be evicted now: {error}", request.pod),
                    ),
                    "api_error",
                );
            }
        };
        let budget_refs: Vec<&Observed> = budgets.iter().map(Arc::as_ref).collect();
        if let Some(members) = &self.members {
            return self
                .judge_across(request, &pod, &budget_refs, members)
                .await;
        }
        let index = match self.pods_counted(request, &pod, &budget_refs).await {
            Ok(index) => index,
            Err(error) => {
                return (
                    Verdict::refuse_for_now(
                        Reason::ReadFailed,
                        format!("pod {} cannot be evicted now: {error}", request.pod),
                    ),
                    "api_error",
                );
            }
        };
        let verdict = decide_on(&index, &pod, &budget_refs, &RecentlyAllowed::default());
        let Some(budget) = verdict.judging_budget() else {
            // Allowed before any budget counted, or denied even without the record (which
            // only adds unavailable pods): final.
            return (admission::answer(&verdict), verdict.reason_label());
        };
        self.claim(request, &pod, budget, &budget_refs, &index)
            .await
    }

    /// Decides against the budget's record and, if allowed, writes the eviction into it.
    async fn claim(
        &self,
        request: &Eviction,
        pod: &CachedPod,
        budget: &str,
        budgets: &[&Observed],
        index: &PodIndex,
    ) -> (Verdict, &'static str) {
        let key = self.budget_key(&request.namespace, budget);
        let lock = self.lock(&key);
        let _judging = lock.lock().await;
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &request.namespace);
        let name = record_name(budget);
        let mut known = self
            .records
            .lock()
            .expect("records lock")
            .get(&key)
            .cloned();
        let key = &key;
        let (api, name) = (&api, &name);
        // The copy this replica knows first, then fresh reads.
        let read = move || {
            let kept = known.take();
            async move {
                match kept {
                    Some(record) => Ok((record, false)),
                    None => {
                        self.metrics.api_read("record").inc();
                        ledger::read(api, name).await.map(|record| (record, true))
                    }
                }
            }
        };
        let judge = |record: &Ledger, fresh: bool| {
            self.remember(key, record);
            let verdict = decide_on(index, pod, budgets, &recently_allowed(record));
            // The copy this replica knows may be stale: good enough to allow (the write is
            // conditioned on it), not to deny (every denial here rests on the record's entries,
            // as the decision without them allowed): a denial is confirmed on a fresh read.
            if !verdict.is_allowed() && !fresh {
                return Judged::ReadAgain;
            }
            let answer = (admission::answer(&verdict), verdict.reason_label());
            if !verdict.is_allowed() || request.dry_run {
                return Judged::Settled(answer);
            }
            let claimed = with_eviction(
                record,
                &request.pod,
                Some(pod.uid.as_str()).filter(|uid| !uid.is_empty()),
                &request.uid,
                Timestamp::now(),
            );
            Judged::Claim(claimed, answer)
        };
        // Another replica writing first makes `claim` read the record again and judge again.
        let store = move |claimed: Ledger| async move {
            self.metrics.api_writes.with_label_values(&["record"]).inc();
            let written =
                ledger::write_labelled(api, name, (RECORD_LABEL, budget), &claimed).await?;
            if let Written::Done(stored) = &written {
                self.remember(key, stored);
            }
            Ok(written)
        };
        match ledger::claim(read, judge, store).await {
            Ok(answer) => answer,
            Err(ClaimError::Failed(error)) => self.record_failed(request, key, name, &error),
            Err(ClaimError::Contended) => (
                Verdict::refuse_for_now(
                    Reason::LedgerContended,
                    format!(
                        "pod {} cannot be evicted now: record {name} changed under {CLAIM_ATTEMPTS} attempts to claim the eviction; retry",
                        request.pod
                    ),
                ),
                "record_contended",
            ),
        }
    }

    /// [`Self::judge_uncounted`] over every member's pods: the decision on the caches with the
    /// members away counted as unavailable, then the claim in a majority of the members'
    /// records (`baton_core::zpdb::members`).
    async fn judge_across(
        &self,
        request: &Eviction,
        pod: &CachedPod,
        budgets: &[&Observed],
        members: &EvictionMembers,
    ) -> (Verdict, &'static str) {
        let pod = qualify_pod(&members.own, pod);
        let verdict = self.decide_across(&pod, budgets, &RecentlyAllowed::default(), members);
        let Some(budget) = verdict.judging_budget() else {
            return (admission::answer(&verdict), verdict.reason_label());
        };
        let lock = self.lock(budget);
        let _judging = lock.lock().await;
        let mut progress = Progress::new(members.names.iter().map(String::as_str));
        let mut allowed = None;
        loop {
            let cluster = match progress.standing() {
                Standing::Reached => {
                    return allowed
                        .unwrap_or_else(|| (admission::answer(&verdict), verdict.reason_label()));
                }
                Standing::Short {
                    withdraw,
                    not_taken,
                } => {
                    self.withdraw(request, &pod, budget, &withdraw, members)
                        .await;
                    let message = short_of_majority(
                        &pod.name,
                        budget,
                        members.names.len(),
                        &withdraw,
                        &not_taken,
                    );
                    return (
                        Verdict::refuse_for_now(Reason::ReadFailed, message),
                        "member_records_short",
                    );
                }
                Standing::Next(cluster) => cluster,
            };
            let claimed = match self.member_client(members, &cluster) {
                Ok(client) => {
                    self.claim_in(request, &pod, budget, budgets, members, &cluster, client)
                        .await
                }
                Err(why) => Err(why),
            };
            match claimed {
                Ok(Claimed::Took(answer)) => {
                    allowed = Some(answer);
                    progress.took();
                }
                Ok(Claimed::DryRun(answer)) => return answer,
                Ok(Claimed::Refused(answer)) => {
                    self.withdraw(request, &pod, budget, progress.claimed(), members)
                        .await;
                    return answer;
                }
                Err(why) => progress.missed(why),
            }
        }
    }

    /// The claim of `pod`'s eviction in `cluster`'s record of `budget`, judged on it: the
    /// claim in [`Self::claim`], with this cluster's qualified names and each call bounded.
    #[allow(clippy::too_many_arguments)]
    async fn claim_in(
        &self,
        request: &Eviction,
        pod: &CachedPod,
        budget: &str,
        budgets: &[&Observed],
        members: &EvictionMembers,
        cluster: &str,
        client: Client,
    ) -> Result<Claimed, String> {
        let api: Api<ConfigMap> = Api::namespaced(client, &request.namespace);
        let name = record_name(budget);
        let key = qualified(cluster, budget);
        let mut known = self
            .records
            .lock()
            .expect("records lock")
            .get(&key)
            .cloned();
        let (api, name, key) = (&api, &name, &key);
        let read = move || {
            let kept = known.take();
            async move {
                match kept {
                    Some(record) => Ok((record, false)),
                    None => self.read_member_record(api, name).await,
                }
            }
        };
        let judge = |record: &Ledger, fresh: bool| {
            self.remember(key, record);
            let verdict = self.decide_across(pod, budgets, &recently_allowed(record), members);
            if !verdict.is_allowed() && !fresh {
                return Judged::ReadAgain;
            }
            let answer = (admission::answer(&verdict), verdict.reason_label());
            if !verdict.is_allowed() {
                return Judged::Settled(Claimed::Refused(answer));
            }
            if request.dry_run {
                return Judged::Settled(Claimed::DryRun(answer));
            }
            let claimed = with_eviction(
                record,
                &pod.name,
                Some(pod.uid.as_str()).filter(|uid| !uid.is_empty()),
                &request.uid,
                Timestamp::now(),
            );
            Judged::Claim(claimed, Claimed::Took(answer))
        };
        let store = move |claimed: Ledger| async move {
            self.write_member_record(api, name, budget, key, &claimed)
                .await
        };
        match ledger::claim(read, judge, store).await {
            Ok(claimed) => Ok(claimed),
            Err(ClaimError::Failed(why)) => {
                self.records.lock().expect("records lock").remove(key);
                Err(why)
            }
            Err(ClaimError::Contended) => Err(format!(
                "ConfigMap {name} changed under {CLAIM_ATTEMPTS} attempts to claim the eviction"
            )),
        }
    }

    /// Takes the claim of `request` out of the records of `clusters` (a claim short of a
    /// majority, or refused by a later record), each on a fresh read, conditioned. What cannot
    /// be taken out holds the budget until it expires, as an eviction the API server refused
    /// after the webhook allowed it does.
    async fn withdraw(
        &self,
        request: &Eviction,
        pod: &CachedPod,
        budget: &str,
        clusters: &[String],
        members: &EvictionMembers,
    ) {
        let name = record_name(budget);
        for cluster in clusters {
            let Ok(client) = self.member_client(members, cluster) else {
                tracing::warn!(%cluster, record = %name, pod = %pod.name, "cannot withdraw an eviction's claim short of a majority: the member is not connected; it expires by itself");
                continue;
            };
            let api: Api<ConfigMap> = Api::namespaced(client, &request.namespace);
            let key = qualified(cluster, budget);
            let (api, name_ref, key_ref) = (&api, &name, &key);
            let read = move || self.read_member_record(api, name_ref);
            let judge =
                |record: &Ledger, _fresh: bool| match withdrawn(record, &pod.name, &request.uid) {
                    Some(without) => Judged::Claim(without, ()),
                    None => Judged::Settled(()),
                };
            let store = move |without: Ledger| async move {
                self.write_member_record(api, name_ref, budget, key_ref, &without)
                    .await
            };
            match ledger::claim(read, judge, store).await {
                Ok(()) => {}
                Err(ClaimError::Failed(error)) => {
                    tracing::warn!(%cluster, record = %name, pod = %pod.name, %error, "cannot withdraw an eviction's claim; it expires by itself");
                }
                Err(ClaimError::Contended) => {
                    tracing::warn!(%cluster, record = %name, pod = %pod.name, "cannot withdraw an eviction's claim: the record kept changing; it expires by itself");
                }
            }
        }
    }

    /// The client of member `cluster` (this webhook's own for its own cluster), or why it has
    /// none now.
    fn member_client(&self, members: &EvictionMembers, cluster: &str) -> Result<Client, String> {
        if cluster == members.own {
            Ok(self.client.clone())
        } else {
            (members.client_of)(cluster).map_err(|why| format!("not connected: {why}"))
        }
    }

    /// A fresh read of a member's record `name`, bounded.
    async fn read_member_record(
        &self,
        api: &Api<ConfigMap>,
        name: &str,
    ) -> Result<(Ledger, bool), String> {
        self.metrics.api_read("record").inc();
        match tokio::time::timeout(MEMBER_CALL_TIMEOUT, ledger::read(api, name)).await {
            Ok(Ok(record)) => Ok((record, true)),
            Ok(Err(error)) => Err(format!("reading ConfigMap {name}: {error}")),
            Err(_) => Err(format!(
                "reading ConfigMap {name}: no answer within {MEMBER_CALL_TIMEOUT:?}"
            )),
        }
    }

    /// A write of a member's record `name` of `budget` conditioned on the version `record` was
    /// read at, bounded; what is stored is kept as `key` (`cluster/budget`).
    async fn write_member_record(
        &self,
        api: &Api<ConfigMap>,
        name: &str,
        budget: &str,
        key: &str,
        record: &Ledger,
    ) -> Result<Written, String> {
        self.metrics.api_writes.with_label_values(&["record"]).inc();
        let write = ledger::write_labelled(api, name, (RECORD_LABEL, budget), record);
        match tokio::time::timeout(MEMBER_CALL_TIMEOUT, write).await {
            Ok(Ok(written)) => {
                if let Written::Done(stored) = &written {
                    self.remember(key, stored);
                }
                Ok(written)
            }
            Ok(Err(error)) => Err(format!(
                "writing ConfigMap {name}: {}",
                baton_shared::pod_client::error_chain(&error)
            )),
            Err(_) => Err(format!(
                "writing ConfigMap {name}: no answer within {MEMBER_CALL_TIMEOUT:?}"
            )),
        }
    }

    /// The decision over every member's pods: this cluster's and each readable member's
    /// StatefulSets and pods named `cluster/name`, the members away counted as unavailable.
    fn decide_across(
        &self,
        pod: &CachedPod,
        budgets: &[&Observed],
        record: &RecentlyAllowed,
        members: &EvictionMembers,
    ) -> EvictionVerdict {
        let now = members.pods.now();
        let own_statefulsets = self.statefulsets.state();
        let mut statefulsets: Vec<StatefulSet> = own_statefulsets
            .iter()
            .map(|statefulset| qualify_statefulset(&members.own, &statefulset.0))
            .collect();
        let mut pods: Vec<Arc<CachedPod>> = Vec::new();
        let owned = |statefulsets: &[StatefulSet], pod: &CachedPod| {
            pod.controller.as_ref().is_some_and(|controller| {
                statefulsets
                    .iter()
                    .any(|statefulset| statefulset.metadata.uid.as_deref() == Some(&controller.uid))
            })
        };
        let own_pods = self.pods.state();
        pods.extend(
            own_pods
                .iter()
                .filter(|member_pod| owned(&statefulsets, member_pod))
                .map(|member_pod| Arc::new(qualify_pod(&members.own, member_pod))),
        );
        for (cluster, (member_statefulsets, member_pods)) in &now.readable {
            let qualified_statefulsets: Vec<StatefulSet> = member_statefulsets
                .iter()
                .map(|statefulset| qualify_statefulset(cluster, statefulset))
                .collect();
            pods.extend(
                member_pods
                    .iter()
                    .filter(|member_pod| owned(&qualified_statefulsets, member_pod))
                    .map(|member_pod| Arc::new(qualify_pod(cluster, member_pod))),
            );
            statefulsets.extend(qualified_statefulsets);
        }
        let refs: Vec<&StatefulSet> = statefulsets.iter().collect();
        let by_statefulset = PodsByStatefulSet::of(refs.iter().copied(), &pods);
        let verdict = decide(&EvictionSnapshot {
            pod,
            budgets,
            statefulsets: &refs,
            pods: &by_statefulset,
            now: Timestamp::now(),
            recently_allowed: record,
            record_expiry: RECORD_EXPIRY,
        });
        tracing::debug!(
            pod = %pod.name,
            readable = ?now.readable.keys().collect::<Vec<_>>(),
            away = ?now.away,
            statefulsets = refs.len(),
            pods = pods.len(),
            verdict = verdict.message(),
            "judged over the members"
        );
        refuse_while_away(verdict, &pod.name, &now.away)
    }

    fn record_failed(
        &self,
        request: &Eviction,
        budget: &str,
        name: &str,
        error: &ledger::ReadError,
    ) -> (Verdict, &'static str) {
        self.records.lock().expect("records lock").remove(budget);
        (
            Verdict::refuse_for_now(
                Reason::ReadFailed,
                format!(
                    "pod {} cannot be evicted now: the eviction could not be recorded in ConfigMap {name}: {error}",
                    request.pod,
                ),
            ),
            "api_error",
        )
    }

    fn remember(&self, budget: &str, record: &Ledger) {
        self.records
            .lock()
            .expect("records lock")
            .insert(budget.to_owned(), record.clone());
    }

    fn lock(&self, budget: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .expect("locks lock")
            .entry(budget.to_owned())
            .or_default()
            .clone()
    }

    /// What the decision counts: with one namespace served, the index of the watched pods
    /// (not a copy of the cache); with more, the StatefulSets of the request's namespace and
    /// the pods of those the budget selecting `pod` selects, read now (each read bounded), in
    /// the request's namespace only.
    async fn pods_counted(
        &self,
        request: &Eviction,
        pod: &CachedPod,
        budgets: &[&Observed],
    ) -> Result<Arc<PodIndex>, String> {
        if self.namespace.is_some() {
            return Ok(self.pod_index());
        }
        let statefulsets = self.statefulsets.in_namespace(&request.namespace);
        let zones: Vec<&Arc<CachedStatefulSet>> = match selecting_budget(pod, budgets) {
            Ok(Some(budget)) => statefulsets
                .iter()
                .filter(|statefulset| budget.selects(&statefulset.0.metadata.labels))
                .collect(),
            // No budget, several, or an invalid one: the decision counts no pod.
            _ => Vec::new(),
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &request.namespace);
        let reads = zones.iter().map(|zone| {
            let api = &api;
            async move {
                let name = zone.0.metadata.name.as_deref().unwrap_or_default();
                let selector = zone
                    .0
                    .spec
                    .as_ref()
                    .map(|spec| spec.selector.clone())
                    .unwrap_or_default();
                let selector = kube::core::Selector::try_from(selector).map_err(|error| {
                    format!("StatefulSet {name} has a selector that cannot be read: {error}")
                })?;
                self.metrics.api_read("pods").inc();
                let what = format!("listing the pods of StatefulSet {name}");
                let params = kube::api::ListParams::default().labels(&selector.to_string());
                match bounded(LIVE_READ_TIMEOUT, what.clone(), api.list(&params)).await {
                    Ok(Ok(list)) => Ok(list
                        .items
                        .iter()
                        .map(|pod| Arc::new(CachedPod::of(pod)))
                        .collect::<Vec<_>>()),
                    Ok(Err(error)) => Err(format!(
                        "{what} failed: {}",
                        baton_shared::pod_client::error_chain(&error)
                    )),
                    Err(timed_out) => Err(timed_out.to_string()),
                }
            }
        });
        let pods: Vec<Arc<CachedPod>> = futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
            .collect();
        Ok(Arc::new(PodIndex {
            changes: None,
            pods: PodsByStatefulSet::of(statefulsets.iter().map(|s| &s.0), &pods),
            statefulsets,
        }))
    }

    /// The pod index as of the latest changes the pod and StatefulSet watches applied: rebuilt
    /// (one pass over the cache) by the first decision after a change, shared by the others.
    fn pod_index(&self) -> Arc<PodIndex> {
        let changes = (self.pods.changes(), self.statefulsets.changes());
        {
            let index = self.pod_index.read().expect("pod index lock");
            if index.changes == Some(changes) {
                return index.clone();
            }
        }
        let statefulsets = self.statefulsets.state();
        let fresh = Arc::new(PodIndex {
            changes: Some(changes),
            pods: PodsByStatefulSet::of(statefulsets.iter().map(|s| &s.0), &self.pods.state()),
            statefulsets,
        });
        let mut index = self.pod_index.write().expect("pod index lock");
        if index.changes.is_none_or(|built| built < changes) {
            *index = fresh.clone();
        }
        fresh
    }

    /// The pod from the cache, or from the API (bounded) when the cache has not seen it yet
    /// or more than one namespace is served.
    async fn pod(&self, request: &Eviction) -> Result<Option<Arc<CachedPod>>, String> {
        if let Some(pod) = self
            .pods
            .get(&request.pod)
            .filter(|_| self.namespace.is_some())
        {
            return Ok(Some(pod));
        }
        self.metrics.api_read("pod").inc();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &request.namespace);
        let what = format!("reading pod {}", request.pod);
        match bounded(LIVE_READ_TIMEOUT, what, api.get_opt(&request.pod)).await {
            Ok(Ok(pod)) => Ok(pod.map(|pod| Arc::new(CachedPod::of(&pod)))),
            Ok(Err(error)) => Err(format!(
                "reading it failed: {}",
                baton_shared::pod_client::error_chain(&error)
            )),
            Err(timed_out) => Err(timed_out.to_string()),
        }
    }

    /// Budget names are anyone's to create and delete: what is kept per budget name (its
    /// record as last read, its lock) goes with the budget, so those maps stay as large as the
    /// budgets that exist. A lock still held by a decision in flight is kept until next time.
    fn forget_deleted_budgets(&self, budgets: usize) {
        let bound = 2 * budgets + 16;
        let over = |len: usize| len > bound;
        let mut records = self.records.lock().expect("records lock");
        let mut locks = self.locks.lock().expect("locks lock");
        if !over(records.len()) && !over(locks.len()) {
            return;
        }
        // Kept as the budget's key ([`Self::budget_key`]), or as `cluster/budget` with members.
        records
            .retain(|name, _| self.budgets.contains(name) || self.budgets.contains(split(name).1));
        locks.retain(|name, lock| self.budgets.contains(name) || Arc::strong_count(lock) > 1);
    }
}

/// The decision on `index`'s StatefulSets and pods.
fn decide_on(
    index: &PodIndex,
    pod: &CachedPod,
    budgets: &[&Observed],
    record: &RecentlyAllowed,
) -> EvictionVerdict {
    let statefulsets: Vec<&StatefulSet> = index.statefulsets.iter().map(|s| &s.0).collect();
    decide(&EvictionSnapshot {
        pod,
        budgets,
        statefulsets: &statefulsets,
        pods: &index.pods,
        now: Timestamp::now(),
        recently_allowed: record,
        record_expiry: RECORD_EXPIRY,
    })
}

/// What one member's record made of a claim.
enum Claimed {
    /// It took the claim: this is the answer if a majority does.
    Took((Verdict, &'static str)),
    /// A dry run, judged on the first record and written nowhere.
    DryRun((Verdict, &'static str)),
    /// Judged with its entries, the eviction is refused: the answer.
    Refused((Verdict, &'static str)),
}

/// What the webhook does when budgets change: counts each version parsed, and starts watching
/// pods when the first budget appears (when one namespace is served: `wanted`).
struct BudgetsSeen {
    wanted: Option<tokio::sync::watch::Sender<bool>>,
    configurations: IntCounterVec,
}

impl BudgetEvents for BudgetsSeen {
    fn parsed(&mut self, budget: &Observed) {
        let result = if budget.is_ok() { "valid" } else { "invalid" };
        self.configurations.with_label_values(&[result]).inc();
        if let Err(invalid) = budget {
            tracing::warn!(budget = %invalid.name, problem = %invalid, "invalid ZoneAwarePodDisruptionBudget; evictions of the pods it selects are refused");
        }
    }

    fn changed(&mut self, budgets: &[Arc<Observed>]) {
        let Some(wanted) = &self.wanted else {
            return;
        };
        if !budgets.is_empty() && !*wanted.borrow() {
            tracing::info!("a ZoneAwarePodDisruptionBudget exists: watching pods");
            wanted.send_replace(true);
        }
    }
}

/// The StatefulSets and the pods by StatefulSet, as of the watches' change counts. Decisions
/// read the pods of a budget's StatefulSets from it: they neither scan the namespace's other
/// pods, nor judge ownership again, nor copy the cache (`Store::state` clones an `Arc` per
/// object, and request threads contend on those counters).
#[derive(Debug, Default)]
struct PodIndex {
    /// (pod changes, StatefulSet changes) this index reflects (None: not built yet).
    changes: Option<(u64, u64)>,
    statefulsets: Vec<Arc<CachedStatefulSet>>,
    pods: PodsByStatefulSet,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Budgets come and go by name; what is kept per name goes with them.
    #[tokio::test]
    async fn what_is_kept_per_budget_name_goes_with_the_budget() {
        baton_shared::crypto::install_default_provider();
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        let metrics = ZpdbMetrics::register(&Registry::new()).expect("metrics");
        let scope = Scope::single("mimir");
        let (evictions, _never_filled) =
            Evictions::new(client, &scope, StatefulSetCache::unfilled(), metrics);
        // Given records and locks of 100 budgets created and deleted since
        for index in 0..100 {
            let name = format!("gone-{index}");
            evictions.remember(&name, &Ledger::default());
            drop(evictions.lock(&name));
        }
        let held = evictions.lock("gone-0");
        // When what is kept is weighed against the budgets (none exists any more)
        evictions.forget_deleted_budgets(0);
        // Then only the lock a decision still holds is kept
        assert!(evictions.records.lock().unwrap().is_empty());
        let locks = evictions.locks.lock().unwrap();
        assert_eq!(locks.keys().collect::<Vec<_>>(), ["gone-0"]);
        drop(held);
    }

    /// Serving a list of namespaces, an eviction elsewhere is not judged, and one in a served
    /// namespace is judged there (here: refused until that namespace's budgets are listed).
    #[tokio::test]
    async fn serving_many_namespaces_each_eviction_is_judged_in_its_own_or_not_at_all() {
        baton_shared::crypto::install_default_provider();
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        let metrics = ZpdbMetrics::register(&Registry::new()).expect("metrics");
        let names = baton_core::namespaces::Names::Listed(["a".to_owned(), "b".to_owned()].into());
        let scope = Scope::new(names, Default::default()).expect("a scope");
        let (evictions, _never_filled) =
            Evictions::new(client, &scope, StatefulSetCache::unfilled(), metrics);
        let eviction = |namespace: &str| Eviction {
            uid: "u".to_owned(),
            namespace: namespace.to_owned(),
            pod: "ingester-zone-a-0".to_owned(),
            dry_run: false,
        };
        // Given no pod is cached, whichever namespace
        assert!(evictions.pods.is_empty() && evictions.namespace.is_none());
        // When a pod of a namespace not served is evicted, Then it is allowed unjudged
        let (verdict, reason) = evictions.judge_uncounted(&eviction("c")).await;
        assert!(verdict.is_allowed());
        assert_eq!(reason, "namespace_not_watched");
        let message = verdict.message().unwrap_or_default();
        assert!(message.contains("does not watch namespace c"), "{message}");
        // When one of a served namespace is, Then it waits for that namespace's budgets
        for namespace in ["a", "b"] {
            let (verdict, reason) = evictions.judge_uncounted(&eviction(namespace)).await;
            assert!(!verdict.is_allowed());
            assert_eq!(reason, "not_synced");
            let message = verdict.message().unwrap_or_default();
            assert!(
                message.contains(&format!("namespace {namespace} yet")),
                "{message}"
            );
        }
    }

    /// Serving many namespaces, what is kept per budget is keyed `namespace/name`: a budget
    /// of the same name deleted in another namespace takes only its own along.
    #[tokio::test]
    async fn serving_many_namespaces_what_is_kept_per_budget_goes_with_that_namespaces_budget() {
        baton_shared::crypto::install_default_provider();
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        let metrics = ZpdbMetrics::register(&Registry::new()).expect("metrics");
        let scope =
            Scope::new(baton_core::namespaces::Names::All, Default::default()).expect("a scope");
        let (mut evictions, _never_filled) =
            Evictions::new(client, &scope, StatefulSetCache::unfilled(), metrics);
        // Given budget "ingester" of namespace a, listed, and 40 gone from namespace b (one of
        // them also named "ingester")
        let kept: Arc<Observed> = Arc::new(Err(baton_core::zpdb::InvalidBudget {
            name: "ingester".to_owned(),
            selector: None,
            errors: Vec::new(),
        }));
        let listed = [(evictions.budget_key("a", "ingester"), kept)].into();
        evictions.budgets = Budgets::fixed(baton_shared::zpdb_cache::Known::Listed(listed));
        evictions.remember(&evictions.budget_key("a", "ingester"), &Ledger::default());
        evictions.remember(&evictions.budget_key("b", "ingester"), &Ledger::default());
        for index in 0..40 {
            let key = evictions.budget_key("b", &format!("gone-{index}"));
            evictions.remember(&key, &Ledger::default());
        }
        // When what is kept is weighed against the budgets
        evictions.forget_deleted_budgets(evictions.budgets.count());
        // Then namespace a's is kept, and none of namespace b's
        let records = evictions.records.lock().unwrap();
        assert_eq!(records.keys().collect::<Vec<_>>(), ["a/ingester"]);
    }
}
