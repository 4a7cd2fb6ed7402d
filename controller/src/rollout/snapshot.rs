//! What the planner sees of one rollout group: plain data, so that the planner can be unit
//! tested and simulated without a cluster. [`GroupSnapshot::from_kubernetes`] builds it from the
//! objects of the reflector caches, without any I/O.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use baton_shared::annotations::CONTROLLER_REVISION_HASH_LABEL;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// One rollout group: the StatefulSets sharing a `rollout-group` label value, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSnapshot {
    pub name: String,
    pub statefulsets: Vec<StatefulSetSnapshot>,
}

/// The parts of a StatefulSet (and of its pods) that decide what a rollout may do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatefulSetSnapshot {
    pub name: String,
    pub uid: String,
    /// spec.replicas (Kubernetes defaults a missing value to 1).
    pub spec_replicas: u32,
    /// spec.ordinals.start: the ordinal of the first pod (0 unless set).
    pub ordinals_start: u32,
    /// spec.minReadySeconds: how long a pod must have been Ready to count as available.
    pub min_ready_seconds: u32,
    pub status_replicas: u32,
    pub ready_replicas: u32,
    pub current_revision: Option<String>,
    /// Missing on a StatefulSet the Kubernetes controller has not processed yet.
    pub update_revision: Option<String>,
    pub update_strategy: UpdateStrategy,
    pub annotations: BTreeMap<String, String>,
    /// The pods this StatefulSet controls, in natural name order.
    pub pods: Vec<PodSnapshot>,
}

/// spec.updateStrategy.type. Only `OnDelete` leaves the pace of a rollout to baton.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateStrategy {
    OnDelete,
    RollingUpdate,
    /// A type this version of Kubernetes does not know; kept verbatim for the message.
    Other(String),
}

impl UpdateStrategy {
    /// Reads spec.updateStrategy.type; Kubernetes defaults a missing type to RollingUpdate.
    pub fn from_type(type_: Option<&str>) -> Self {
        match type_ {
            Some("OnDelete") => Self::OnDelete,
            None | Some("RollingUpdate") => Self::RollingUpdate,
            Some(other) => Self::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for UpdateStrategy {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OnDelete => formatter.write_str("OnDelete"),
            Self::RollingUpdate => formatter.write_str("RollingUpdate"),
            Self::Other(other) => formatter.write_str(other),
        }
    }
}

/// The parts of a pod that decide whether it is available and whether it needs an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSnapshot {
    pub name: String,
    pub uid: String,
    /// The `controller-revision-hash` label: the StatefulSet revision the pod was created from.
    pub revision: Option<String>,
    pub phase: PodPhase,
    /// The Ready condition is True and every container is ready.
    pub ready: bool,
    /// When the Ready condition last became True, if the pod is ready and Kubernetes said so.
    pub ready_since: Option<Timestamp>,
    /// metadata.deletionTimestamp is set: the pod is going away and must not be deleted again.
    pub terminating: bool,
}

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

impl GroupSnapshot {
    /// Builds the snapshot of a group from cached Kubernetes objects.
    ///
    /// `pods` may be every pod of the namespace: each StatefulSet keeps the pods its own
    /// `spec.selector` matches *and* that name it as their controller in an owner reference
    /// (**baton:** the Go operator used a `name` label instead, which users had to add).
    pub fn from_kubernetes<'a>(
        name: impl Into<String>,
        statefulsets: impl IntoIterator<Item = &'a StatefulSet>,
        pods: impl IntoIterator<Item = &'a Pod>,
    ) -> Self {
        let statefulsets: Vec<&StatefulSet> = statefulsets.into_iter().collect();
        let mut snapshots: Vec<StatefulSetSnapshot> = statefulsets
            .iter()
            .map(|statefulset| StatefulSetSnapshot::without_pods(statefulset))
            .collect();
        for pod in pods {
            let owner = statefulsets
                .iter()
                .position(|statefulset| controls(statefulset, pod));
            if let Some(index) = owner {
                snapshots[index]
                    .pods
                    .push(PodSnapshot::from_kubernetes(pod));
            }
        }
        for snapshot in &mut snapshots {
            snapshot.pods.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        }
        snapshots.sort_by(|a, b| a.name.cmp(&b.name));
        Self {
            name: name.into(),
            statefulsets: snapshots,
        }
    }
}

impl StatefulSetSnapshot {
    /// Builds the snapshot of one StatefulSet; `pods` may be every pod of the namespace (see
    /// [`GroupSnapshot::from_kubernetes`] for how its own are found).
    pub fn from_kubernetes<'a>(
        statefulset: &StatefulSet,
        pods: impl IntoIterator<Item = &'a Pod>,
    ) -> Self {
        let mut snapshot = Self::without_pods(statefulset);
        snapshot.pods = pods
            .into_iter()
            .filter(|pod| controls(statefulset, pod))
            .map(PodSnapshot::from_kubernetes)
            .collect();
        snapshot.pods.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        snapshot
    }

    fn without_pods(statefulset: &StatefulSet) -> Self {
        let metadata = &statefulset.metadata;
        let spec = statefulset.spec.as_ref();
        let status = statefulset.status.as_ref();
        let count = |value: Option<i32>| value.map_or(0, |value| value.max(0).unsigned_abs());
        let revision = |value: Option<&String>| value.filter(|value| !value.is_empty()).cloned();
        Self {
            name: metadata.name.clone().unwrap_or_default(),
            uid: metadata.uid.clone().unwrap_or_default(),
            spec_replicas: count(Some(spec.and_then(|spec| spec.replicas).unwrap_or(1))),
            ordinals_start: count(spec.and_then(|spec| spec.ordinals.as_ref()?.start)),
            min_ready_seconds: count(spec.and_then(|spec| spec.min_ready_seconds)),
            status_replicas: count(status.map(|status| status.replicas)),
            ready_replicas: count(status.and_then(|status| status.ready_replicas)),
            current_revision: revision(status.and_then(|status| status.current_revision.as_ref())),
            update_revision: revision(status.and_then(|status| status.update_revision.as_ref())),
            update_strategy: UpdateStrategy::from_type(
                spec.and_then(|spec| spec.update_strategy.as_ref()?.type_.as_deref()),
            ),
            annotations: metadata.annotations.clone().unwrap_or_default(),
            pods: Vec::new(),
        }
    }
}

impl PodSnapshot {
    /// Reads the parts of a pod the planner needs.
    pub fn from_kubernetes(pod: &Pod) -> Self {
        let metadata = &pod.metadata;
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
            name: metadata.name.clone().unwrap_or_default(),
            uid: metadata.uid.clone().unwrap_or_default(),
            revision: metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(CONTROLLER_REVISION_HASH_LABEL))
                .cloned(),
            phase: PodPhase::from_phase(status.and_then(|status| status.phase.as_deref())),
            ready,
            ready_since: ready_condition
                .filter(|_| ready)
                .and_then(|condition| condition.last_transition_time.as_ref())
                .map(|time| time.0),
            terminating: metadata.deletion_timestamp.is_some(),
        }
    }
}

/// Whether `statefulset` controls `pod`: same namespace, the pod names the StatefulSet (by uid)
/// as its controller, and the StatefulSet's selector matches the pod's labels.
fn controls(statefulset: &StatefulSet, pod: &Pod) -> bool {
    let Some(uid) = statefulset
        .metadata
        .uid
        .as_deref()
        .filter(|uid| !uid.is_empty())
    else {
        return false;
    };
    if pod.metadata.namespace != statefulset.metadata.namespace {
        return false;
    }
    let owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.uid == uid);
    let Some(spec) = statefulset.spec.as_ref() else {
        return false;
    };
    owned && selector_matches(&spec.selector, pod.metadata.labels.as_ref())
}

/// Whether a label selector (matchLabels AND matchExpressions) matches a set of labels.
///
/// An empty selector matches nothing: the API forbids it on StatefulSets, and a rollout that
/// took every pod of the namespace for its own would delete pods it has no business with.
/// An unknown operator also matches nothing, for the same reason.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let match_labels = selector.match_labels.as_ref().filter(|map| !map.is_empty());
    let match_expressions = selector
        .match_expressions
        .as_ref()
        .filter(|expressions| !expressions.is_empty());
    if match_labels.is_none() && match_expressions.is_none() {
        return false;
    }
    let label = |key: &str| labels.and_then(|labels| labels.get(key));
    let labels_match = match_labels
        .into_iter()
        .flatten()
        .all(|(key, value)| label(key) == Some(value));
    labels_match
        && match_expressions
            .into_iter()
            .flatten()
            .all(|requirement| requirement_matches(requirement, label(&requirement.key)))
}

fn requirement_matches(requirement: &LabelSelectorRequirement, value: Option<&String>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|value| values.contains(value)),
        "NotIn" => value.is_none_or(|value| !values.contains(value)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

/// The ordinal of a StatefulSet's pod, from its name `<statefulset>-<ordinal>`.
pub fn pod_ordinal(statefulset: &str, pod: &str) -> Option<u32> {
    let digits = pod.strip_prefix(statefulset)?.strip_prefix('-')?;
    if digits.is_empty() {
        return None;
    }
    digits.bytes().try_fold(0u32, |value, byte| {
        let digit = byte.checked_sub(b'0').filter(|digit| *digit < 10)?;
        value.checked_mul(10)?.checked_add(u32::from(digit))
    })
}

/// Compares names the way people read them: runs of digits by value, so `x-2` sorts before
/// `x-10` (plain string order would put `x-10` first and roll pods out of ordinal order).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (number_a, rest_a) = split_digits(a);
                let (number_b, rest_b) = split_digits(b);
                let order = compare_numbers(number_a, number_b);
                if order != Ordering::Equal {
                    return order;
                }
                (a, b) = (rest_a, rest_b);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (&a[1..], &b[1..]);
            }
        }
    }
}

fn split_digits(bytes: &[u8]) -> (&[u8], &[u8]) {
    let length = bytes
        .iter()
        .take_while(|byte| byte.is_ascii_digit())
        .count();
    bytes.split_at(length)
}

/// Compares two runs of digits by value, without parsing (so any length works); with equal
/// values the one with fewer leading zeros comes first, to keep the order total.
fn compare_numbers(a: &[u8], b: &[u8]) -> Ordering {
    fn significant(digits: &[u8]) -> &[u8] {
        let zeros = digits.iter().take_while(|&&digit| digit == b'0').count();
        &digits[zeros..]
    }
    let (value_a, value_b) = (significant(a), significant(b));
    value_a
        .len()
        .cmp(&value_b.len())
        .then_with(|| value_a.cmp(value_b))
        .then_with(|| a.len().cmp(&b.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        StatefulSetOrdinals, StatefulSetSpec, StatefulSetStatus, StatefulSetUpdateStrategy,
    };
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    const NAMESPACE: &str = "mimir";

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: Some(values.iter().map(|value| value.to_string()).collect()),
        }
    }

    fn selector(
        match_labels: &[(&str, &str)],
        match_expressions: Vec<LabelSelectorRequirement>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(match_labels)),
            match_expressions: Some(match_expressions),
        }
    }

    fn statefulset(name: &str, uid: &str, pod_selector: LabelSelector) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(NAMESPACE.to_owned()),
                uid: Some(uid.to_owned()),
                annotations: Some(labels(&[("rollout-max-unavailable", "2")])),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(3),
                min_ready_seconds: Some(10),
                selector: pod_selector,
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some("OnDelete".to_owned()),
                    rolling_update: None,
                }),
                ..StatefulSetSpec::default()
            }),
            status: Some(StatefulSetStatus {
                replicas: 3,
                ready_replicas: Some(2),
                current_revision: Some("rev-old".to_owned()),
                update_revision: Some("rev-new".to_owned()),
                ..StatefulSetStatus::default()
            }),
        }
    }

    /// A ready, running pod of `owner_uid` (by controller owner reference) with `pod_labels`.
    fn pod(name: &str, owner_uid: &str, pod_labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(NAMESPACE.to_owned()),
                uid: Some(format!("uid-{name}")),
                labels: Some(labels(pod_labels)),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".to_owned(),
                    kind: "StatefulSet".to_owned(),
                    name: "whoever".to_owned(),
                    uid: owner_uid.to_owned(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".to_owned()),
                conditions: Some(vec![ready_condition("True", 1_700_000_000)]),
                container_statuses: Some(vec![container(true)]),
                ..PodStatus::default()
            }),
        }
    }

    fn ready_condition(status: &str, since_second: i64) -> PodCondition {
        PodCondition {
            type_: "Ready".to_owned(),
            status: status.to_owned(),
            last_transition_time: Some(Time(
                Timestamp::from_second(since_second).expect("valid time"),
            )),
            ..PodCondition::default()
        }
    }

    fn container(ready: bool) -> ContainerStatus {
        ContainerStatus {
            name: "main".to_owned(),
            ready,
            ..ContainerStatus::default()
        }
    }

    fn with_status(mut pod: Pod, change: impl FnOnce(&mut PodStatus)) -> Pod {
        change(pod.status.get_or_insert_with(PodStatus::default));
        pod
    }

    fn pod_names(snapshot: &StatefulSetSnapshot) -> Vec<&str> {
        snapshot.pods.iter().map(|pod| pod.name.as_str()).collect()
    }

    #[test]
    fn selector_match_labels_must_all_match() {
        let by_app = selector(&[("app", "ingester"), ("zone", "a")], vec![]);
        assert!(selector_matches(
            &by_app,
            Some(&labels(&[("app", "ingester"), ("zone", "a"), ("x", "y")]))
        ));
        assert!(!selector_matches(
            &by_app,
            Some(&labels(&[("app", "ingester"), ("zone", "b")]))
        ));
        assert!(!selector_matches(
            &by_app,
            Some(&labels(&[("app", "ingester")]))
        ));
        assert!(!selector_matches(&by_app, None));
    }

    #[test]
    fn selector_in_and_not_in() {
        let zone_in = selector(&[], vec![requirement("zone", "In", &["a", "b"])]);
        assert!(selector_matches(&zone_in, Some(&labels(&[("zone", "b")]))));
        assert!(!selector_matches(&zone_in, Some(&labels(&[("zone", "c")]))));
        assert!(!selector_matches(&zone_in, Some(&labels(&[]))));

        let zone_not_in = selector(&[], vec![requirement("zone", "NotIn", &["a", "b"])]);
        assert!(selector_matches(
            &zone_not_in,
            Some(&labels(&[("zone", "c")]))
        ));
        assert!(!selector_matches(
            &zone_not_in,
            Some(&labels(&[("zone", "a")]))
        ));
        // Like Kubernetes: a missing label is "not in" any set.
        assert!(selector_matches(&zone_not_in, Some(&labels(&[]))));
        assert!(selector_matches(&zone_not_in, None));
    }

    #[test]
    fn selector_exists_and_does_not_exist() {
        let has_zone = selector(&[], vec![requirement("zone", "Exists", &[])]);
        assert!(selector_matches(&has_zone, Some(&labels(&[("zone", "")]))));
        assert!(!selector_matches(&has_zone, Some(&labels(&[("app", "x")]))));

        let no_canary = selector(&[], vec![requirement("canary", "DoesNotExist", &[])]);
        assert!(selector_matches(&no_canary, Some(&labels(&[("app", "x")]))));
        assert!(selector_matches(&no_canary, None));
        assert!(!selector_matches(
            &no_canary,
            Some(&labels(&[("canary", "true")]))
        ));
    }

    #[test]
    fn selector_labels_and_expressions_are_and_ed() {
        let both = selector(
            &[("app", "ingester")],
            vec![
                requirement("zone", "In", &["a"]),
                requirement("canary", "DoesNotExist", &[]),
            ],
        );
        assert!(selector_matches(
            &both,
            Some(&labels(&[("app", "ingester"), ("zone", "a")]))
        ));
        assert!(!selector_matches(
            &both,
            Some(&labels(&[
                ("app", "ingester"),
                ("zone", "a"),
                ("canary", "1")
            ]))
        ));
        assert!(!selector_matches(
            &both,
            Some(&labels(&[("app", "other"), ("zone", "a")]))
        ));
    }

    #[test]
    fn empty_selector_and_unknown_operator_match_nothing() {
        let labels = labels(&[("app", "ingester")]);
        assert!(!selector_matches(&LabelSelector::default(), Some(&labels)));
        assert!(!selector_matches(&selector(&[], vec![]), Some(&labels)));
        let greater_than = selector(&[], vec![requirement("app", "Gt", &["1"])]);
        assert!(!selector_matches(&greater_than, Some(&labels)));
    }

    #[test]
    fn conversion_reads_spec_status_and_annotations() {
        let zone_a = statefulset(
            "ingester-zone-a",
            "uid-a",
            selector(&[("app", "a")], vec![]),
        );
        let snapshot = StatefulSetSnapshot::from_kubernetes(&zone_a, []);
        assert_eq!(
            snapshot,
            StatefulSetSnapshot {
                name: "ingester-zone-a".to_owned(),
                uid: "uid-a".to_owned(),
                spec_replicas: 3,
                ordinals_start: 0,
                min_ready_seconds: 10,
                status_replicas: 3,
                ready_replicas: 2,
                current_revision: Some("rev-old".to_owned()),
                update_revision: Some("rev-new".to_owned()),
                update_strategy: UpdateStrategy::OnDelete,
                annotations: labels(&[("rollout-max-unavailable", "2")]),
                pods: vec![],
            }
        );
    }

    #[test]
    fn conversion_applies_kubernetes_defaults_for_missing_fields() {
        let mut bare = statefulset("bare", "uid-bare", selector(&[("app", "a")], vec![]));
        bare.status = None;
        if let Some(spec) = bare.spec.as_mut() {
            spec.replicas = None;
            spec.update_strategy = None;
            spec.min_ready_seconds = None;
            spec.ordinals = Some(StatefulSetOrdinals { start: Some(1) });
        }
        let snapshot = StatefulSetSnapshot::from_kubernetes(&bare, []);
        assert_eq!(snapshot.spec_replicas, 1);
        assert_eq!(snapshot.update_strategy, UpdateStrategy::RollingUpdate);
        assert_eq!(snapshot.min_ready_seconds, 0);
        assert_eq!(snapshot.ordinals_start, 1);
        assert_eq!((snapshot.status_replicas, snapshot.ready_replicas), (0, 0));
        assert_eq!(snapshot.update_revision, None);
        assert_eq!(snapshot.current_revision, None);
    }

    #[test]
    fn conversion_treats_empty_revisions_as_missing() {
        let mut fresh = statefulset("fresh", "uid-f", selector(&[("app", "f")], vec![]));
        if let Some(status) = fresh.status.as_mut() {
            status.update_revision = Some(String::new());
            status.current_revision = Some(String::new());
        }
        let snapshot = StatefulSetSnapshot::from_kubernetes(&fresh, []);
        assert_eq!(snapshot.update_revision, None);
        assert_eq!(snapshot.current_revision, None);
    }

    #[test]
    fn update_strategy_types() {
        assert_eq!(
            UpdateStrategy::from_type(Some("OnDelete")),
            UpdateStrategy::OnDelete
        );
        assert_eq!(
            UpdateStrategy::from_type(Some("RollingUpdate")),
            UpdateStrategy::RollingUpdate
        );
        assert_eq!(
            UpdateStrategy::from_type(None),
            UpdateStrategy::RollingUpdate
        );
        let other = UpdateStrategy::from_type(Some("Canary"));
        assert_eq!(other, UpdateStrategy::Other("Canary".to_owned()));
        assert_eq!(other.to_string(), "Canary");
    }

    #[test]
    fn conversion_reads_pod_revision_phase_readiness_and_termination() {
        let ready = pod(
            "ingester-zone-a-0",
            "uid-a",
            &[("app", "a"), (CONTROLLER_REVISION_HASH_LABEL, "rev-new")],
        );
        let snapshot = PodSnapshot::from_kubernetes(&ready);
        assert_eq!(
            snapshot,
            PodSnapshot {
                name: "ingester-zone-a-0".to_owned(),
                uid: "uid-ingester-zone-a-0".to_owned(),
                revision: Some("rev-new".to_owned()),
                phase: PodPhase::Running,
                ready: true,
                ready_since: Some(Timestamp::from_second(1_700_000_000).expect("valid time")),
                terminating: false,
            }
        );

        let mut terminating = ready.clone();
        terminating.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(PodSnapshot::from_kubernetes(&terminating).terminating);
    }

    #[test]
    fn pod_is_ready_only_with_ready_condition_and_all_containers_ready() {
        let base = pod("p-0", "uid", &[]);
        let container_not_ready = with_status(base.clone(), |status| {
            status.container_statuses = Some(vec![container(true), container(false)]);
        });
        let condition_false = with_status(base.clone(), |status| {
            status.conditions = Some(vec![ready_condition("False", 1_700_000_000)]);
        });
        let no_condition = with_status(base.clone(), |status| status.conditions = None);
        let pending = with_status(base.clone(), |status| {
            status.phase = Some("Pending".to_owned())
        });
        assert!(PodSnapshot::from_kubernetes(&base).ready);
        for not_ready in [&container_not_ready, &condition_false, &no_condition] {
            let snapshot = PodSnapshot::from_kubernetes(not_ready);
            assert!(!snapshot.ready, "{not_ready:?}");
            assert_eq!(snapshot.ready_since, None);
        }
        assert_eq!(
            PodSnapshot::from_kubernetes(&pending).phase,
            PodPhase::Pending
        );
        let no_status = Pod {
            status: None,
            ..base
        };
        let snapshot = PodSnapshot::from_kubernetes(&no_status);
        assert_eq!((snapshot.phase, snapshot.ready), (PodPhase::Unknown, false));
    }

    #[test]
    fn group_finds_pods_by_selector_and_controller_owner_reference() {
        let zone_a = statefulset(
            "ingester-zone-a",
            "uid-a",
            selector(
                &[("app", "ingester")],
                vec![requirement("zone", "In", &["a"])],
            ),
        );
        let zone_b = statefulset(
            "ingester-zone-b",
            "uid-b",
            selector(
                &[("app", "ingester")],
                vec![requirement("zone", "In", &["b"])],
            ),
        );
        let a_labels = [("app", "ingester"), ("zone", "a")];
        let mut not_controller = pod("ingester-zone-a-7", "uid-a", &a_labels);
        if let Some(owner) = not_controller
            .metadata
            .owner_references
            .as_mut()
            .and_then(|owners| owners.first_mut())
        {
            owner.controller = Some(false);
        }
        let mut other_namespace = pod("ingester-zone-a-8", "uid-a", &a_labels);
        other_namespace.metadata.namespace = Some("elsewhere".to_owned());
        let mut orphan = pod("ingester-zone-a-9", "uid-a", &a_labels);
        orphan.metadata.owner_references = None;
        let pods = [
            pod("ingester-zone-a-10", "uid-a", &a_labels),
            pod(
                "ingester-zone-b-0",
                "uid-b",
                &[("app", "ingester"), ("zone", "b")],
            ),
            pod("ingester-zone-a-2", "uid-a", &a_labels),
            // Owned by zone-a but no longer matched by its selector (relabelled by hand).
            pod(
                "ingester-zone-a-3",
                "uid-a",
                &[("app", "ingester"), ("zone", "x")],
            ),
            // Matched by zone-a's selector but owned by another StatefulSet.
            pod("impostor-0", "uid-other", &a_labels),
            not_controller,
            other_namespace,
            orphan,
        ];

        let group = GroupSnapshot::from_kubernetes("ingester", [&zone_b, &zone_a], &pods);

        assert_eq!(group.name, "ingester");
        let names: Vec<&str> = group.statefulsets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ingester-zone-a", "ingester-zone-b"]);
        assert_eq!(
            pod_names(&group.statefulsets[0]),
            ["ingester-zone-a-2", "ingester-zone-a-10"]
        );
        assert_eq!(pod_names(&group.statefulsets[1]), ["ingester-zone-b-0"]);
        assert_eq!(
            StatefulSetSnapshot::from_kubernetes(&zone_a, &pods),
            group.statefulsets[0]
        );
    }

    #[test]
    fn statefulset_without_uid_owns_no_pods() {
        let mut no_uid = statefulset("x", "", selector(&[("app", "x")], vec![]));
        no_uid.metadata.uid = None;
        let orphan_claim = pod("x-0", "", &[("app", "x")]);
        assert!(
            StatefulSetSnapshot::from_kubernetes(&no_uid, [&orphan_claim])
                .pods
                .is_empty()
        );
    }

    #[test]
    fn pod_ordinals_come_from_the_name_suffix() {
        assert_eq!(pod_ordinal("ingester-zone-a", "ingester-zone-a-0"), Some(0));
        assert_eq!(
            pod_ordinal("ingester-zone-a", "ingester-zone-a-12"),
            Some(12)
        );
        assert_eq!(pod_ordinal("ingester-zone-a", "ingester-zone-ab-1"), None);
        assert_eq!(pod_ordinal("ingester-zone-a", "ingester-zone-a-"), None);
        assert_eq!(pod_ordinal("ingester-zone-a", "ingester-zone-a-+1"), None);
        assert_eq!(pod_ordinal("ingester-zone-a", "ingester-zone-a"), None);
        assert_eq!(pod_ordinal("ingester-zone-a", "ingester-zone-a-1x"), None);
        assert_eq!(
            pod_ordinal("ingester-zone-a", "ingester-zone-a-4294967295"),
            Some(u32::MAX)
        );
        assert_eq!(
            pod_ordinal("ingester-zone-a", "ingester-zone-a-4294967296"),
            None
        );
    }

    #[test]
    fn natural_order_sorts_numbers_by_value() {
        let mut names = vec!["x-10", "x-2", "x-1", "x-0", "x-100", "x-9", "w-50", "x-02"];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            ["w-50", "x-0", "x-1", "x-2", "x-02", "x-9", "x-10", "x-100"]
        );
        assert_eq!(natural_cmp("a", "a"), Ordering::Equal);
        assert_eq!(natural_cmp("a", "a-1"), Ordering::Less);
        assert_eq!(
            natural_cmp("x-99999999999999999999999", "x-100000000000000000000000"),
            Ordering::Less
        );
    }
}
