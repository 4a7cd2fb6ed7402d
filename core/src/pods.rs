//! The one meaning of "this StatefulSet's pod" and of "an available pod" for both binaries: the
//! rollout planner counts its budget with them and prepare-downscale judges whether the other
//! zones are ready with them, so a zone the controller would wait for is never downscaled by the
//! webhook as "ready".
//!
//! Pure functions of the objects; nothing here calls the API.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_core::Selector;

use crate::labels::{Interned, LabelSet, Labels, Requirements, intern};

/// status.phase of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    /// Reads status.phase; anything missing or unknown is `Unknown`.
    pub fn from_phase(phase: Option<&str>) -> Self {
        match phase {
            Some("Pending") => Self::Pending,
            Some("Running") => Self::Running,
            Some("Succeeded") => Self::Succeeded,
            Some("Failed") => Self::Failed,
            _ => Self::Unknown,
        }
    }
}

/// What decides whether a pod is available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodReadiness {
    pub phase: PodPhase,
    /// The Ready condition is True and every container is ready.
    pub ready: bool,
    /// When the Ready condition last became True, if the pod is ready and Kubernetes said so.
    pub ready_since: Option<Timestamp>,
    /// metadata.deletionTimestamp is set: the pod is going away.
    pub terminating: bool,
}

/// Whether a pod can be counted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// Ready, but not yet for minReadySeconds: available from then on.
    From(Timestamp),
    Unavailable(NotAvailable),
}

/// Why a pod is not available, in the order the rule checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAvailable {
    Terminating,
    /// Not Running.
    Phase(PodPhase),
    /// Running but not Ready (the condition or a container).
    NotReady,
}

impl PodReadiness {
    /// Reads a pod's phase, readiness and termination.
    pub fn of(pod: &Pod) -> Self {
        let status = pod.status.as_ref();
        let ready_condition = status
            .and_then(|status| status.conditions.as_ref())
            .and_then(|conditions| {
                conditions
                    .iter()
                    .find(|condition| condition.type_ == "Ready")
            });
        let condition_ready = ready_condition.is_some_and(|condition| condition.status == "True");
        let containers_ready = status
            .and_then(|status| status.container_statuses.as_ref())
            .is_none_or(|containers| containers.iter().all(|container| container.ready));
        let ready = condition_ready && containers_ready;
        Self {
            phase: PodPhase::from_phase(status.and_then(|status| status.phase.as_deref())),
            ready,
            ready_since: ready_condition
                .filter(|_| ready)
                .and_then(|condition| condition.last_transition_time.as_ref())
                .map(|time| time.0),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    /// The StatefulSet controller's rule: Running, Ready (condition and every container), not
    /// terminating, and Ready for at least `min_ready_seconds` (a pod whose Ready time is not
    /// known counts as Ready long enough).
    pub fn availability(&self, min_ready_seconds: u32, now: Timestamp) -> Availability {
        if self.terminating {
            return Availability::Unavailable(NotAvailable::Terminating);
        }
        if self.phase != PodPhase::Running {
            return Availability::Unavailable(NotAvailable::Phase(self.phase));
        }
        if !self.ready {
            return Availability::Unavailable(NotAvailable::NotReady);
        }
        let Some(since) = self.ready_since.filter(|_| min_ready_seconds > 0) else {
            return Availability::Available;
        };
        match since.checked_add(SignedDuration::from_secs(i64::from(min_ready_seconds))) {
            Ok(from) if from > now => Availability::From(from),
            _ => Availability::Available,
        }
    }

    pub fn is_available(&self, min_ready_seconds: u32, now: Timestamp) -> bool {
        self.availability(min_ready_seconds, now) == Availability::Available
    }
}

/// Whether `statefulset` controls `pod`: same cluster and namespace, the pod names the
/// StatefulSet (by uid) as its controller, and the StatefulSet's selector matches the pod's
/// labels.
///
/// The cluster is the one its name says (`cluster/name` across member clusters,
/// [`crate::clusters::split`]): a uid is unique in its own cluster, and whoever may create a pod
/// in one member can write any uid in its owner reference, another cluster's StatefulSet's too.
///
/// **baton:** the Go operator found pods by a `name` label instead, which users had to add.
pub fn is_controlled_by(pod: &CachedPod, statefulset: &StatefulSet) -> bool {
    Controls::of(statefulset).pod(pod)
}

/// [`is_controlled_by`] for one StatefulSet and many pods: its selector parsed once, not once
/// per pod (a parse per owned pod cost most of an eviction decision).
pub struct Controls<'z> {
    /// The member cluster it lives in, by its name; none with a single cluster.
    cluster: Option<&'z str>,
    namespace: Option<&'z str>,
    uid: Option<&'z str>,
    /// None: empty or invalid, which matches nothing (see [`selector_matches`]).
    selector: Option<Requirements>,
}

impl<'z> Controls<'z> {
    pub fn of(statefulset: &'z StatefulSet) -> Self {
        let selector = statefulset
            .spec
            .as_ref()
            .map(|spec| &spec.selector)
            .filter(|selector| !selector_is_empty(selector))
            .and_then(|selector| Selector::try_from(selector.clone()).ok())
            .map(Requirements::from);
        Self {
            cluster: statefulset
                .metadata
                .name
                .as_deref()
                .and_then(|name| crate::clusters::split(name).0),
            namespace: statefulset.metadata.namespace.as_deref(),
            uid: statefulset
                .metadata
                .uid
                .as_deref()
                .filter(|uid| !uid.is_empty()),
            selector,
        }
    }

    pub fn pod(&self, pod: &CachedPod) -> bool {
        let (Some(uid), Some(selector)) = (self.uid, &self.selector) else {
            return false;
        };
        // The uid first: it tells the StatefulSets apart.
        pod.controller
            .as_ref()
            .is_some_and(|controller| controller.uid.as_str() == uid)
            && self.namespace.unwrap_or_default() == pod.namespace.as_str()
            && crate::clusters::split(&pod.name).0 == self.cluster
            && selector.matches(&pod.labels)
    }
}

/// The pods of a namespace by the StatefulSet that controls them ([`is_controlled_by`], judged
/// once per pod when built). The eviction decision counts the pods of a budget's zones from it,
/// so a decision neither scans the namespace's other pods nor judges ownership again.
#[derive(Debug, Default)]
pub struct PodsByStatefulSet {
    /// StatefulSet uid → its pods, in ordinal order (shorter names first, then by name: the
    /// pods of one StatefulSet differ only in their ordinal).
    by_uid: HashMap<String, Vec<Arc<CachedPod>>>,
}

impl PodsByStatefulSet {
    pub fn of<'a>(
        statefulsets: impl IntoIterator<Item = &'a StatefulSet>,
        pods: impl IntoIterator<Item = &'a Arc<CachedPod>>,
    ) -> Self {
        let controls: HashMap<&str, Controls<'_>> = statefulsets
            .into_iter()
            .map(Controls::of)
            .filter_map(|controls| Some((controls.uid?, controls)))
            .collect();
        let mut by_uid: HashMap<String, Vec<Arc<CachedPod>>> = HashMap::new();
        for pod in pods {
            let Some(controller) = pod.controller.as_ref() else {
                continue;
            };
            if controls
                .get(controller.uid.as_str())
                .is_some_and(|controls| controls.pod(pod))
            {
                by_uid
                    .entry(controller.uid.to_string())
                    .or_default()
                    .push(pod.clone());
            }
        }
        for pods in by_uid.values_mut() {
            pods.sort_by(|a, b| (a.name.len(), &a.name).cmp(&(b.name.len(), &b.name)));
        }
        Self { by_uid }
    }

    /// The pods `statefulset` controls.
    pub fn of_statefulset(&self, statefulset: &StatefulSet) -> &[Arc<CachedPod>] {
        statefulset
            .metadata
            .uid
            .as_ref()
            .and_then(|uid| self.by_uid.get(uid))
            .map_or(&[], Vec::as_slice)
    }
}

/// The name of the StatefulSet a pod's controller owner reference names. Only to route a pod's
/// change to its StatefulSet before that is looked up; [`is_controlled_by`] decides ownership.
pub fn controlling_statefulset(pod: &CachedPod) -> Option<&str> {
    pod.controller
        .as_ref()
        .filter(|controller| controller.statefulset)
        .map(|controller| controller.name.as_str())
}

/// Whether a label selector (matchLabels AND matchExpressions) matches a set of labels.
///
/// An empty selector matches nothing: the API forbids it on StatefulSets, and a rollout that
/// took every pod of the namespace for its own would delete pods it has no business with.
/// An unknown operator also matches nothing, for the same reason.
pub fn selector_matches(selector: &LabelSelector, labels: &impl LabelSet) -> bool {
    if selector_is_empty(selector) {
        return false;
    }
    match Selector::try_from(selector.clone()) {
        Ok(selector) => Requirements::from(selector).matches(labels),
        Err(_) => false,
    }
}

/// Whether a label selector has no requirement at all (matchLabels and matchExpressions both
/// absent or empty).
pub fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// A pod as both binaries keep it: what the functions above, the planner, scaling, the
/// eviction decision and the status page read, and nothing else. Pods are most of each binary's
/// memory (a namespace may hold thousands): k8s-openapi's `Pod` is 2,176 bytes before any of its
/// strings, its spec inline even when dropped, where this is about a tenth of that.
///
/// Built once per watch event by [`CachedPod::of`], so readiness is read once per change, not
/// once per decision that counts the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPod {
    pub name: String,
    /// Interned: every pod of a namespace shares it.
    pub namespace: Interned,
    pub uid: String,
    /// Every label (interned, most being the same in every pod of a StatefulSet): a
    /// StatefulSet's or a budget's selector may read any of them.
    pub labels: Labels,
    /// The owner reference marked as the controller.
    pub controller: Option<PodController>,
    pub readiness: PodReadiness,
    /// status.podIP, when assigned.
    pub ip: Option<String>,
    /// Why the first container that is not ready is not (init containers first): its waiting or
    /// terminated reason, for the messages that say why a pod is unavailable.
    pub container_state: Option<Interned>,
    /// metadata.creationTimestamp, in seconds since the epoch (its precision): which pods are the
    /// newest. Eight bytes (a zero is no time), as the cache holds every pod of the namespace.
    pub created_at: Option<std::num::NonZeroI64>,
}

/// The controller owner reference of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodController {
    /// Interned, as the owner's name and uid: the same in each of its pods.
    pub name: Interned,
    pub uid: Interned,
    /// The owner is of kind StatefulSet.
    pub statefulset: bool,
}

impl CachedPod {
    /// Reads what baton keeps of a pod.
    pub fn of(pod: &Pod) -> Self {
        let metadata = &pod.metadata;
        let status = pod.status.as_ref();
        Self {
            name: metadata.name.clone().unwrap_or_default(),
            namespace: intern(metadata.namespace.as_deref().unwrap_or_default()),
            uid: metadata.uid.clone().unwrap_or_default(),
            labels: metadata.labels.iter().flatten().collect(),
            controller: metadata
                .owner_references
                .iter()
                .flatten()
                .find(|owner| owner.controller == Some(true))
                .map(|owner| PodController {
                    name: intern(&owner.name),
                    uid: intern(&owner.uid),
                    statefulset: owner.kind == "StatefulSet",
                }),
            readiness: PodReadiness::of(pod),
            ip: status.and_then(|status| status.pod_ip.clone()),
            container_state: status.and_then(container_state).map(intern),
            created_at: metadata
                .creation_timestamp
                .as_ref()
                .and_then(|time| std::num::NonZeroI64::new(time.0.as_second())),
        }
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }
}

impl From<&Pod> for CachedPod {
    fn from(pod: &Pod) -> Self {
        Self::of(pod)
    }
}

/// The reason the first container that is not ready gives for it (init containers first).
fn container_state(status: &PodStatus) -> Option<&str> {
    let init = status.init_container_statuses.iter().flatten();
    let main = status.container_statuses.iter().flatten();
    init.chain(main)
        .filter(|container| !container.ready)
        .find_map(|container| {
            let state = container.state.as_ref()?;
            let waiting = state
                .waiting
                .as_ref()
                .and_then(|waiting| waiting.reason.as_ref());
            let terminated = || state.terminated.as_ref()?.reason.as_ref();
            waiting
                .or_else(terminated)
                .filter(|reason| !reason.is_empty())
        })
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSetSpec;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelectorRequirement, ObjectMeta, OwnerReference, Time,
    };

    use super::*;
    use crate::testing::objects::{NAMESPACE, labels, selector};

    const READY_AT: i64 = 1_700_000_000;

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: Some(values.iter().map(|value| value.to_string()).collect()),
        }
    }

    fn statefulset(uid: &str, selector: LabelSelector) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some("ingester-zone-a".to_owned()),
                namespace: Some(NAMESPACE.to_owned()),
                uid: Some(uid.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                selector,
                ..StatefulSetSpec::default()
            }),
            status: None,
        }
    }

    /// A Running pod, Ready since [`READY_AT`] with one ready container, controlled by the
    /// StatefulSet named `ingester-zone-a` with `owner_uid`.
    fn pod(owner_uid: &str, pod_labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("ingester-zone-a-3".to_owned()),
                namespace: Some(NAMESPACE.to_owned()),
                labels: Some(labels(pod_labels)),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".to_owned(),
                    kind: "StatefulSet".to_owned(),
                    name: "ingester-zone-a".to_owned(),
                    uid: owner_uid.to_owned(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".to_owned()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".to_owned(),
                    status: "True".to_owned(),
                    last_transition_time: Some(Time(at(READY_AT))),
                    ..PodCondition::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "main".to_owned(),
                    ready: true,
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("a valid time")
    }

    fn with_status(mut pod: Pod, change: impl FnOnce(&mut PodStatus)) -> Pod {
        change(pod.status.get_or_insert_with(PodStatus::default));
        pod
    }

    #[test]
    fn selector_match_labels_must_all_match() {
        let by_app = selector(&[("app", "ingester"), ("zone", "a")], vec![]);
        let matches = |pairs: &[(&str, &str)]| selector_matches(&by_app, &labels(pairs));
        assert!(matches(&[("app", "ingester"), ("zone", "a"), ("x", "y")]));
        assert!(!matches(&[("app", "ingester"), ("zone", "b")]));
        assert!(!matches(&[("app", "ingester")]));
        assert!(!selector_matches(&by_app, &Labels::default()));
    }

    #[test]
    fn selector_expressions_as_kubernetes_reads_them() {
        let zone_in = selector(&[], vec![requirement("zone", "In", &["a", "b"])]);
        assert!(selector_matches(&zone_in, &(labels(&[("zone", "b")]))));
        assert!(!selector_matches(&zone_in, &(labels(&[("zone", "c")]))));
        assert!(!selector_matches(&zone_in, &Labels::default()));

        let zone_not_in = selector(&[], vec![requirement("zone", "NotIn", &["a", "b"])]);
        assert!(selector_matches(&zone_not_in, &(labels(&[("zone", "c")]))));
        assert!(!selector_matches(&zone_not_in, &(labels(&[("zone", "a")]))));
        // Like Kubernetes: a missing label is "not in" any set.
        assert!(selector_matches(&zone_not_in, &Labels::default()));

        let has_zone = selector(&[], vec![requirement("zone", "Exists", &[])]);
        assert!(selector_matches(&has_zone, &(labels(&[("zone", "")]))));
        assert!(!selector_matches(&has_zone, &(labels(&[("app", "x")]))));

        let no_canary = selector(&[], vec![requirement("canary", "DoesNotExist", &[])]);
        assert!(selector_matches(&no_canary, &Labels::default()));
        assert!(!selector_matches(&no_canary, &(labels(&[("canary", "1")]))));

        let both = selector(
            &[("app", "ingester")],
            vec![
                requirement("zone", "In", &["a"]),
                requirement("canary", "DoesNotExist", &[]),
            ],
        );
        assert!(selector_matches(
            &both,
            &(labels(&[("app", "ingester"), ("zone", "a")]))
        ));
        assert!(!selector_matches(
            &both,
            &(labels(&[("app", "ingester"), ("zone", "a"), ("canary", "1")]))
        ));
        assert!(!selector_matches(
            &both,
            &(labels(&[("app", "other"), ("zone", "a")]))
        ));
    }

    #[test]
    fn empty_selector_and_unknown_operator_match_nothing() {
        let labels = labels(&[("app", "ingester")]);
        assert!(!selector_matches(&LabelSelector::default(), &labels));
        assert!(!selector_matches(&selector(&[], vec![]), &labels));
        let greater_than = selector(&[], vec![requirement("app", "Gt", &["1"])]);
        assert!(!selector_matches(&greater_than, &labels));
    }

    #[test]
    fn a_pod_is_controlled_by_the_statefulset_it_names_and_whose_selector_matches_it() {
        let zone_a = statefulset("uid-a", selector(&[("zone", "a")], vec![]));
        let owned = pod("uid-a", &[("zone", "a")]);
        let cached = |pod: &Pod| CachedPod::of(pod);
        assert!(is_controlled_by(&cached(&owned), &zone_a));
        assert_eq!(
            controlling_statefulset(&cached(&owned)),
            Some("ingester-zone-a")
        );

        let relabelled = pod("uid-a", &[("zone", "x")]);
        let other_owner = pod("uid-other", &[("zone", "a")]);
        let mut not_controller = owned.clone();
        if let Some(owner) = not_controller
            .metadata
            .owner_references
            .as_mut()
            .and_then(|owners| owners.first_mut())
        {
            owner.controller = Some(false);
        }
        let mut elsewhere = owned.clone();
        elsewhere.metadata.namespace = Some("elsewhere".to_owned());
        let mut orphan = owned.clone();
        orphan.metadata.owner_references = None;
        for (why, pod) in [
            ("relabelled by hand", &relabelled),
            ("owned by another StatefulSet", &other_owner),
            ("owner is not the controller", &not_controller),
            ("another namespace", &elsewhere),
            ("no owner", &orphan),
        ] {
            assert!(!is_controlled_by(&cached(pod), &zone_a), "{why}");
        }
        assert_eq!(controlling_statefulset(&cached(&not_controller)), None);
        assert_eq!(controlling_statefulset(&cached(&orphan)), None);

        let mut no_uid = zone_a.clone();
        no_uid.metadata.uid = None;
        assert!(!is_controlled_by(
            &cached(&pod("", &[("zone", "a")])),
            &no_uid
        ));
    }

    #[test]
    fn a_pod_belongs_to_a_statefulset_of_its_own_cluster_only_whatever_uid_it_names() {
        use crate::clusters::{qualify_pod, qualify_statefulset};
        // cluster-a's StatefulSet, and a pod in cluster-b naming its uid and matching its
        // selector (whoever may create pods in cluster-b can write any owner reference).
        let zone_a = qualify_statefulset(
            "cluster-a",
            &statefulset("uid-a", selector(&[("zone", "a")], vec![])),
        );
        let owned = CachedPod::of(&pod("uid-a", &[("zone", "a")]));
        let own = qualify_pod("cluster-a", &owned);
        let forged = qualify_pod("cluster-b", &owned);
        assert!(is_controlled_by(&own, &zone_a));
        assert!(!is_controlled_by(&forged, &zone_a), "another cluster's pod");
        // Nor a pod of the hub's own cluster, unqualified, for a member's StatefulSet, nor a
        // member's pod for an unqualified StatefulSet.
        assert!(!is_controlled_by(&owned, &zone_a));
        let unqualified = statefulset("uid-a", selector(&[("zone", "a")], vec![]));
        assert!(is_controlled_by(&owned, &unqualified));
        assert!(!is_controlled_by(&own, &unqualified));
        // The index counts the own pod alone.
        let pods = [Arc::new(own.clone()), Arc::new(forged)];
        let by_statefulset = PodsByStatefulSet::of([&zone_a], &pods);
        let counted: Vec<&str> = by_statefulset
            .of_statefulset(&zone_a)
            .iter()
            .map(|pod| pod.name.as_str())
            .collect();
        assert_eq!(counted, [own.name.as_str()]);
    }

    /// As the Go operator since v0.40: when a pod turned Ready is its Ready condition's
    /// `lastTransitionTime` alone. The `grafana.com/ready-time` annotation older Go operators
    /// wrote (and anyone who may edit the pod can write) changes nothing.
    #[test]
    fn ready_since_is_the_ready_conditions_time_alone() {
        let mut annotated = pod("uid-a", &[]);
        annotated.metadata.annotations = Some(BTreeMap::from([(
            "grafana.com/ready-time".to_owned(),
            at(READY_AT + 60).to_string(),
        )]));
        assert_eq!(PodReadiness::of(&annotated).ready_since, Some(at(READY_AT)));
        let not_ready = with_status(annotated, |status| status.conditions = None);
        assert_eq!(PodReadiness::of(&not_ready).ready_since, None);
    }

    #[test]
    fn readiness_needs_the_ready_condition_and_every_container() {
        let base = pod("uid-a", &[]);
        assert_eq!(
            PodReadiness::of(&base),
            PodReadiness {
                phase: PodPhase::Running,
                ready: true,
                ready_since: Some(at(READY_AT)),
                terminating: false,
            }
        );
        let container_not_ready = with_status(base.clone(), |status| {
            if let Some(containers) = status.container_statuses.as_mut() {
                containers.push(ContainerStatus {
                    name: "sidecar".to_owned(),
                    ready: false,
                    ..ContainerStatus::default()
                });
            }
        });
        let condition_false = with_status(base.clone(), |status| {
            if let Some(conditions) = status.conditions.as_mut() {
                conditions[0].status = "False".to_owned();
            }
        });
        let no_condition = with_status(base.clone(), |status| status.conditions = None);
        for not_ready in [&container_not_ready, &condition_false, &no_condition] {
            let readiness = PodReadiness::of(not_ready);
            assert!(!readiness.ready, "{not_ready:?}");
            assert_eq!(readiness.ready_since, None);
        }
        let no_status = Pod {
            status: None,
            ..base.clone()
        };
        let readiness = PodReadiness::of(&no_status);
        assert_eq!(
            (readiness.phase, readiness.ready),
            (PodPhase::Unknown, false)
        );
        let mut terminating = base;
        terminating.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(PodReadiness::of(&terminating).terminating);
    }

    #[test]
    fn available_means_running_ready_not_terminating_and_ready_for_min_ready_seconds() {
        let ready = PodReadiness::of(&pod("uid-a", &[]));
        let now = at(READY_AT + 10);
        assert_eq!(ready.availability(0, now), Availability::Available);
        assert_eq!(ready.availability(10, now), Availability::Available);
        assert_eq!(
            ready.availability(30, now),
            Availability::From(at(READY_AT + 30))
        );
        assert!(!ready.is_available(30, now));
        let unknown_since = PodReadiness {
            ready_since: None,
            ..ready
        };
        assert!(unknown_since.is_available(30, now));
        for (unavailable, why) in [
            (
                PodReadiness {
                    terminating: true,
                    ..ready
                },
                NotAvailable::Terminating,
            ),
            (
                PodReadiness {
                    ready: false,
                    ..ready
                },
                NotAvailable::NotReady,
            ),
            (
                PodReadiness {
                    phase: PodPhase::Pending,
                    ready: false,
                    ..ready
                },
                NotAvailable::Phase(PodPhase::Pending),
            ),
        ] {
            assert_eq!(
                unavailable.availability(0, now),
                Availability::Unavailable(why),
                "{unavailable:?}"
            );
        }
    }

    /// A pod as the API returns it, with what no binary reads: annotations, a spec, other
    /// conditions, container details, a second owner that is not its controller.
    fn full_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "ingester-zone-a-0",
                "namespace": NAMESPACE,
                "uid": "uid-0",
                "labels": {"controller-revision-hash": "ingester-zone-a-abc", "zone": "a"},
                "annotations": {"big": "x".repeat(4096)},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "cm"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ingester-zone-a", "uid": "uid-a", "controller": true},
                ],
            },
            "spec": {"containers": [{"name": "app", "image": "app:v1"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                ],
                "initContainerStatuses": [{"name": "init", "ready": true, "image": "i", "imageID": "", "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:00Z"}}}],
                "containerStatuses": [
                    {"name": "app", "ready": false, "image": "app:v1", "imageID": "sha", "restartCount": 7,
                        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}}},
                    {"name": "sidecar", "ready": false, "image": "s", "imageID": "", "restartCount": 0,
                        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:00Z"}}},
                ],
            },
        }))
        .expect("a valid pod")
    }

    #[test]
    fn a_cached_pod_keeps_identity_labels_its_controller_readiness_and_address() {
        let pod = full_pod();
        let cached = CachedPod::of(&pod);
        assert_eq!(
            (
                cached.name.as_str(),
                cached.namespace.as_str(),
                cached.uid.as_str()
            ),
            ("ingester-zone-a-0", NAMESPACE, "uid-0")
        );
        assert_eq!(cached.label("zone"), Some("a"));
        assert_eq!(
            cached.controller,
            Some(PodController {
                name: intern("ingester-zone-a"),
                uid: intern("uid-a"),
                statefulset: true,
            })
        );
        assert_eq!(cached.readiness, PodReadiness::of(&pod));
        assert_eq!(cached.ip.as_deref(), Some("10.0.0.7"));
        let zone_a = statefulset("uid-a", selector(&[("zone", "a")], vec![]));
        assert!(is_controlled_by(&cached, &zone_a));
    }

    #[test]
    fn a_cached_pod_says_why_its_first_unready_container_is_not_ready() {
        let mut pod = full_pod();
        // The init container is done; the app container's reason comes first.
        assert_eq!(
            CachedPod::of(&pod)
                .container_state
                .as_ref()
                .map(|state| state.as_str()),
            Some("CrashLoopBackOff")
        );
        if let Some(containers) = pod
            .status
            .as_mut()
            .and_then(|status| status.container_statuses.as_mut())
        {
            containers.remove(0);
        }
        assert_eq!(
            CachedPod::of(&pod)
                .container_state
                .as_ref()
                .map(|state| state.as_str()),
            Some("OOMKilled")
        );
        let ready = super::tests::pod("uid-a", &[]);
        assert_eq!(CachedPod::of(&ready).container_state, None);
    }

    #[test]
    fn a_cached_pod_is_a_fraction_of_the_pod_it_comes_from() {
        let inline = std::mem::size_of::<CachedPod>();
        assert!(
            inline * 8 < std::mem::size_of::<Pod>(),
            "CachedPod {inline} bytes, Pod {}",
            std::mem::size_of::<Pod>()
        );
    }
}
