//! The thin I/O around the scaling planner: reads the references' scales (kind resolved through
//! API discovery, cached), carries out the plan's actions (the StatefulSet's `/scale`, the
//! reference's status, the pods' delayed-downscale endpoints) and explains every outcome.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_config::{Config, PodAddressing};
use baton_shared::annotations::scaling::{DelayedDownscale, MirrorReference};
use baton_shared::duration::prometheus as prometheus_duration;
use baton_shared::kube_client::bounded;
use baton_shared::pod_client::{
    PodCallError, PodClientError, PodEndpoint, PodHttpClient, PodMethod,
};
use baton_shared::statefulset::StatefulSetState;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::Scope;
use kube::{Resource, ResourceExt};
use prometheus::Registry;
use serde_json::json;

use super::delayed_downscale::{self, Decision, decide, parse_answer};
use super::plan::{
    Action, Finding, FindingKind, Member, ReferenceScale, ScalingPlan, ScalingSnapshot, plan,
    reasons,
};
use crate::explain::{Explainer, Explanation, Severity};
use crate::queue::Requeue;
use crate::rollout::reconcile::MayAct;

/// What a scaling pass did, for the group reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalingOutcome {
    /// A StatefulSet's replicas were changed: the rollout waits for the next pass.
    pub scaled: bool,
    pub requeue: Requeue,
}

/// Why a Kubernetes call of the executor failed.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    TimedOut(#[from] baton_shared::kube_client::TimedOut),
    #[error("{0}")]
    Unsupported(String),
}

/// Scales the StatefulSets of groups; shared by all groups.
pub struct Scaler {
    client: kube::Client,
    namespace: String,
    pods: PodHttpClient,
    addressing: PodAddressing,
    cluster_domain: String,
    max_concurrent_calls: usize,
    poll_interval: Duration,
    request_timeout: Duration,
    /// `(apiVersion, kind)` → resource, for kinds found with a scale subresource.
    discovered: Mutex<HashMap<(String, String), ApiResource>>,
}

impl std::fmt::Debug for Scaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scaler")
            .field("namespace", &self.namespace)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

impl Scaler {
    /// Builds the scaler; registers the pod HTTP client's histogram in `registry`.
    pub fn new(
        client: kube::Client,
        config: &Config,
        registry: &Registry,
    ) -> Result<Self, PodClientError> {
        Ok(Self {
            client,
            namespace: config.namespace.clone(),
            pods: PodHttpClient::new(&config.pods, registry)?,
            addressing: config.pods.address_by,
            cluster_domain: config.cluster_domain.clone(),
            max_concurrent_calls: config.pods.max_concurrent_calls.max(1),
            poll_interval: config.controller.scaling_poll_interval.get(),
            request_timeout: config.kubernetes.request_timeout.get(),
            discovered: Mutex::default(),
        })
    }

    /// One scaling pass over a group: snapshot, read references, plan, explain, act.
    pub async fn reconcile(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        pods: &[Arc<Pod>],
        explainer: &Explainer,
        may_act: &MayAct,
    ) -> ScalingOutcome {
        let mut snapshot = ScalingSnapshot::from_kubernetes(group, members.iter().map(Arc::as_ref));
        for member in &mut snapshot.members {
            if let Ok(Some(mirror)) = &mut member.mirror {
                mirror.scale = self
                    .read_reference(&mirror.reference)
                    .await
                    .map_err(|error| error.to_string());
            }
        }
        let now = Timestamp::now();
        let plan = plan(&snapshot, now);
        let pass = Pass {
            scaler: self,
            members,
            pods,
            explainer,
            snapshot: &snapshot,
        };
        let mut requeue = if plan.poll {
            Requeue::After(self.poll_interval)
        } else {
            Requeue::Never
        };
        if let Some(at) = plan.recheck_at {
            requeue = requeue.sooner(Requeue::at(at));
        }
        for finding in plan
            .findings
            .iter()
            .filter(|f| f.kind != FindingKind::Scale)
        {
            pass.tell(finding).await;
        }
        if !may_act() {
            return ScalingOutcome {
                scaled: false,
                requeue,
            };
        }
        let (scaled, hint) = pass.act(&plan, may_act).await;
        ScalingOutcome {
            scaled,
            requeue: requeue.sooner(hint),
        }
    }

    /// The resource of a reference's kind, through discovery; only kinds with a scale
    /// subresource in a namespace qualify. Found kinds are cached (a missing kind is looked up
    /// again next time: its CRD may be installed meanwhile).
    async fn resolve(&self, reference: &MirrorReference) -> Result<ApiResource, CallError> {
        let key = (reference.api_version.clone(), reference.kind.clone());
        if let Some(found) = self.lock_discovered().get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = reference
            .api_version
            .split_once('/')
            .unwrap_or(("", reference.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &reference.kind);
        let (resource, capabilities) = bounded(
            self.request_timeout,
            format!("discovering {} {}", reference.api_version, reference.kind),
            kube::discovery::pinned_kind(&self.client, &gvk),
        )
        .await??;
        if capabilities.scope != Scope::Namespaced {
            return Err(CallError::Unsupported(format!(
                "{} is not a namespaced kind",
                reference.kind
            )));
        }
        if !capabilities
            .subresources
            .iter()
            .any(|(subresource, _)| subresource.plural == "scale")
        {
            return Err(CallError::Unsupported(format!(
                "{} ({}) has no scale subresource",
                reference.kind, resource.plural
            )));
        }
        self.lock_discovered().insert(key, resource.clone());
        Ok(resource)
    }

    fn lock_discovered(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ApiResource>> {
        self.discovered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn reference_api(
        &self,
        reference: &MirrorReference,
    ) -> Result<Api<DynamicObject>, CallError> {
        let resource = self.resolve(reference).await?;
        Ok(Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &resource,
        ))
    }

    async fn read_reference(
        &self,
        reference: &MirrorReference,
    ) -> Result<ReferenceScale, CallError> {
        let api = self.reference_api(reference).await?;
        let scale = bounded(
            self.request_timeout,
            format!("reading the scale of {} {}", reference.kind, reference.name),
            api.get_scale(&reference.name),
        )
        .await??;
        Ok(ReferenceScale {
            spec_replicas: scale.spec.and_then(|spec| spec.replicas).unwrap_or(0),
            status_replicas: scale.status.map(|status| status.replicas),
        })
    }
}

/// Everything one pass over one group needs.
struct Pass<'a> {
    scaler: &'a Scaler,
    members: &'a [Arc<StatefulSet>],
    pods: &'a [Arc<Pod>],
    explainer: &'a Explainer,
    snapshot: &'a ScalingSnapshot,
}

impl Pass<'_> {
    fn statefulset(&self, name: &str) -> Option<&StatefulSet> {
        self.members
            .iter()
            .map(Arc::as_ref)
            .find(|statefulset| statefulset.metadata.name.as_deref() == Some(name))
    }

    fn member(&self, name: &str) -> Option<&Member> {
        self.snapshot
            .members
            .iter()
            .find(|member| member.name == name)
    }

    async fn tell(&self, finding: &Finding) {
        let (severity, action) = match finding.kind {
            FindingKind::Scale => (Severity::Normal, "Scale"),
            FindingKind::Hold => (Severity::Normal, "Wait"),
            FindingKind::Problem => (Severity::Warning, "Validate"),
        };
        self.say(
            &finding.statefulset,
            severity,
            finding.reason,
            action,
            finding.note.clone(),
        )
        .await;
    }

    async fn say(
        &self,
        statefulset: &str,
        severity: Severity,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let Some(object) = self.statefulset(statefulset) else {
            return;
        };
        let explanation = Explanation {
            severity,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note,
        };
        self.explainer
            .tell(&object.object_ref(&()), explanation)
            .await;
    }

    /// Carries out the plan; returns whether replicas changed and a requeue hint.
    async fn act(&self, plan: &ScalingPlan, may_act: &MayAct) -> (bool, Requeue) {
        let mut scaled = false;
        let mut requeue = Requeue::Never;
        for action in &plan.actions {
            // The lease may have been lost meanwhile: check right before every call.
            if !may_act() {
                break;
            }
            match action {
                Action::SetReplicas {
                    statefulset,
                    from,
                    to,
                } => {
                    let finding = plan
                        .findings
                        .iter()
                        .find(|f| f.kind == FindingKind::Scale && &f.statefulset == statefulset);
                    match self.set_replicas(statefulset, *to).await {
                        SetOutcome::Done => {
                            scaled = true;
                            if let Some(finding) = finding {
                                self.tell(finding).await;
                            }
                        }
                        SetOutcome::Stale => {
                            requeue = requeue.sooner(Requeue::After(Duration::from_millis(200)));
                            break;
                        }
                        SetOutcome::Failed(error) => {
                            self.say(
                                statefulset,
                                Severity::Warning,
                                reasons::DENIED,
                                "Scale",
                                format!("{statefulset} stays at {from}: scaling it to {to} failed: {error}"),
                            )
                            .await;
                            requeue = requeue.sooner(Requeue::After(self.scaler.poll_interval));
                            break;
                        }
                    }
                }
                Action::WriteBack {
                    statefulset,
                    replicas,
                } => self.write_back(statefulset, *replicas).await,
                Action::CancelDelayedDownscale { statefulset, keep } => {
                    self.cancel_delayed_downscale(statefulset, *keep).await;
                }
                Action::DelayedDownscale {
                    statefulset,
                    from,
                    to,
                } => {
                    let (done, hint) = self.delayed_downscale(statefulset, *from, *to).await;
                    scaled |= done;
                    requeue = requeue.sooner(hint);
                }
            }
        }
        (scaled, requeue)
    }

    async fn set_replicas(&self, name: &str, replicas: i32) -> SetOutcome {
        let Some(cached) = self.statefulset(name) else {
            return SetOutcome::Stale;
        };
        let api: Api<StatefulSet> =
            Api::namespaced(self.scaler.client.clone(), &self.scaler.namespace);
        // Conditioned on the cached version: a decision is never applied to a newer object.
        let patch = json!({
            "metadata": {"resourceVersion": cached.resource_version()},
            "spec": {"replicas": replicas},
        });
        let result = bounded(
            self.scaler.request_timeout,
            format!("scaling {name}"),
            api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
        match result {
            Ok(Ok(_)) => SetOutcome::Done,
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                tracing::debug!(statefulset = name, "scale conflict: the cache is behind");
                SetOutcome::Stale
            }
            Ok(Err(kube::Error::Api(status))) => SetOutcome::Failed(status.message),
            Ok(Err(error)) => SetOutcome::Failed(error.to_string()),
            Err(timed_out) => SetOutcome::Failed(timed_out.to_string()),
        }
    }

    async fn write_back(&self, name: &str, replicas: i32) {
        let Some(Ok(Some(mirror))) = self.member(name).map(|member| &member.mirror) else {
            return;
        };
        let reference = &mirror.reference;
        let result = async {
            let api = self.scaler.reference_api(reference).await?;
            bounded(
                self.scaler.request_timeout,
                format!(
                    "writing back the status of {} {}",
                    reference.kind, reference.name
                ),
                api.patch_status(
                    &reference.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"replicas": replicas}})),
                ),
            )
            .await??;
            Ok::<_, CallError>(())
        }
        .await;
        match result {
            Ok(()) => tracing::info!(
                statefulset = name,
                reference = %reference.name,
                kind = %reference.kind,
                replicas,
                "wrote status.replicas back to the reference"
            ),
            Err(error) => {
                self.say(
                    name,
                    Severity::Warning,
                    reasons::REFERENCE_UNAVAILABLE,
                    "WriteBack",
                    format!(
                        "could not write status.replicas={replicas} back to {} {}: {error}",
                        reference.kind, reference.name
                    ),
                )
                .await;
            }
        }
    }

    fn delayed_settings(&self, name: &str) -> Option<&DelayedDownscale> {
        self.member(name)?.delayed_downscale.as_ref().ok()?.as_ref()
    }

    /// The delayed-downscale endpoint of each pod at an index in `indexes`.
    fn endpoints(
        &self,
        statefulset: &StatefulSet,
        settings: &DelayedDownscale,
        indexes: std::ops::Range<i32>,
    ) -> Vec<(i32, Result<PodEndpoint, String>)> {
        delayed_downscale::endpoints(
            statefulset,
            self.pods,
            settings,
            indexes,
            self.scaler.addressing,
            &self.scaler.cluster_domain,
            &self.scaler.namespace,
        )
    }

    /// DELETE to pods `[0, keep)`: they stay, so any preparation is cancelled. Failures are
    /// only logged (the next pass repeats it); 409 means nothing to cancel.
    async fn cancel_delayed_downscale(&self, name: &str, keep: i32) {
        let (Some(statefulset), Some(settings)) =
            (self.statefulset(name), self.delayed_settings(name))
        else {
            return;
        };
        let endpoints: Vec<PodEndpoint> = self
            .endpoints(statefulset, settings, 0..keep)
            .into_iter()
            .filter_map(|(_, endpoint)| endpoint.ok())
            .collect();
        let failures: Vec<PodCallError> = self
            .scaler
            .pods
            .call_each(PodMethod::Delete, &endpoints)
            .await
            .into_iter()
            .filter(|error| !is_conflict(error))
            .collect();
        for failure in &failures {
            tracing::debug!(statefulset = name, error = %failure, "cancelling a delayed-downscale preparation failed; retried next pass");
        }
    }

    /// DELETE to `[0, to)`, POST to `[to, from)`, then scale as far down as the answers allow.
    async fn delayed_downscale(&self, name: &str, from: i32, to: i32) -> (bool, Requeue) {
        let (Some(statefulset), Some(settings)) =
            (self.statefulset(name), self.delayed_settings(name))
        else {
            return (false, Requeue::Never);
        };
        self.cancel_delayed_downscale(name, to).await;
        let going = self.endpoints(statefulset, settings, to..from);
        let calls: Vec<_> = going
            .into_iter()
            .map(|(ordinal, endpoint)| async move {
                let answer = match endpoint {
                    Ok(endpoint) => self
                        .scaler
                        .pods
                        .call(PodMethod::Post, &endpoint)
                        .await
                        .map_err(|error| error.to_string())
                        .and_then(|body| parse_answer(&body)),
                    Err(error) => Err(error),
                };
                (ordinal, answer)
            })
            .collect();
        let answers: BTreeMap<i32, Result<Timestamp, String>> = futures::stream::iter(calls)
            .buffer_unordered(self.scaler.max_concurrent_calls)
            .collect()
            .await;
        let now = Timestamp::now();
        let delay_text = prometheus_duration::format(settings.delay);
        let state = StatefulSetState::of(statefulset);
        let names = state.pod_names();
        match decide(names, from, to, settings.delay, &answers, now) {
            Decision::ScaleTo { replicas } => match self.set_replicas(name, replicas).await {
                SetOutcome::Done => {
                    let partial = if replicas > to {
                        format!(
                            " (of the wanted {to}; the others prepared less than {delay_text} ago)"
                        )
                    } else {
                        String::new()
                    };
                    self.say(
                            name,
                            Severity::Normal,
                            reasons::SCALE_DOWN,
                            "Scale",
                            format!("{name} scales down from {from} to {replicas}{partial}: its pods prepared for delayed downscale at least {delay_text} ago"),
                        )
                        .await;
                    self.write_back(name, replicas).await;
                    (true, Requeue::Never)
                }
                SetOutcome::Stale => (false, Requeue::After(Duration::from_millis(200))),
                SetOutcome::Failed(error) => {
                    self.say(
                        name,
                        Severity::Warning,
                        reasons::DENIED,
                        "Scale",
                        format!("{name} stays at {from}: scaling it to {replicas} failed: {error}"),
                    )
                    .await;
                    (false, Requeue::After(self.scaler.poll_interval))
                }
            },
            Decision::Wait { until } => {
                self.say(
                    name,
                    Severity::Normal,
                    reasons::DELAYED_DOWNSCALE_WAITING,
                    "Wait",
                    format!("{name} stays at {from} (wanted {to}): delayed downscale of {delay_text}; {} may go at {until}", names.at(from - 1)),
                )
                .await;
                (false, Requeue::at(until))
            }
            Decision::Blocked { failures } => {
                let detail: Vec<String> = failures
                    .iter()
                    .map(|(pod, error)| format!("{pod}: {error}"))
                    .collect();
                self.say(
                    name,
                    Severity::Warning,
                    reasons::DELAYED_DOWNSCALE_FAILED,
                    "Prepare",
                    format!(
                        "{name} stays at {from} (wanted {to}): pods could not be prepared for delayed downscale: {}",
                        detail.join("; ")
                    ),
                )
                .await;
                (false, Requeue::After(self.scaler.poll_interval))
            }
        }
    }
}

enum SetOutcome {
    Done,
    /// The cached StatefulSet is outdated (or gone): the next pass decides again.
    Stale,
    /// Denied (e.g. by an admission webhook) or failed: why.
    Failed(String),
}

/// A pod answering 409 to DELETE has nothing to cancel: success.
fn is_conflict(error: &PodCallError) -> bool {
    matches!(
        error,
        PodCallError::Status {
            method: PodMethod::Delete,
            status: 409,
            ..
        }
    )
}
