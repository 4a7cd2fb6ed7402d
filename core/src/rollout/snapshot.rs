//! What the planner sees of one rollout group: plain data, so that the planner can be unit
//! tested and simulated without a cluster. [`GroupSnapshot::from_kubernetes`] builds it from the
//! objects of the reflector caches, without any I/O.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use crate::annotations::CONTROLLER_REVISION_HASH_LABEL;
use crate::commands::Reach;
use crate::pods::{CachedPod, PodReadiness, is_controlled_by};
pub use crate::pods::{PodPhase, selector_matches};
use crate::statefulset::StatefulSetState;
pub use crate::statefulset::StatusLag;
pub use crate::statefulset::pod_ordinal;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

/// One rollout group: the StatefulSets sharing a `rollout-group` label value, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSnapshot {
    pub name: String,
    pub statefulsets: Vec<StatefulSetSnapshot>,
    /// How the commands its messages print reach it (its namespace, its member clusters).
    pub reach: Reach,
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
    /// Set while the status (revisions, counts) describes an older spec: the planner waits
    /// for the StatefulSet controller to catch up before judging the group.
    pub status_lag: Option<StatusLag>,
    pub update_strategy: UpdateStrategy,
    /// spec.updateStrategy.rollingUpdate.partition (0 when unset): with `RollingUpdate`, the
    /// StatefulSet controller replaces only the pods whose index is at least this.
    pub partition: u32,
    /// spec.podManagementPolicy is `OrderedReady` (the default): the StatefulSet controller
    /// replaces no pod while one is not Running and Ready.
    pub ordered_ready: bool,
    pub annotations: BTreeMap<String, String>,
    /// The pods this StatefulSet controls, in natural name order.
    pub pods: Vec<PodSnapshot>,
    /// Set while the member's cluster cannot be read: everything above is then the last known
    /// state, which no decision trusts (a member in another cluster, seen through its watch).
    pub unreachable: Option<Unreachable>,
}

/// Why a member cannot be read now: its cluster's API cannot be reached, or its watch has not
/// listed it again since it came back (a watch that resumed may have missed events). Such a
/// member is never ready and never rolls, so it holds its whole group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// The cluster it lives in, as people name it.
    pub cluster: String,
    /// What failed, for the person reading the wait.
    pub error: String,
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
    /// Why a container of the pod is not ready, as the kubelet reports it: the waiting reason
    /// (`CrashLoopBackOff`, `ImagePullBackOff`, `ErrImagePull`, …) or terminated reason
    /// (`Error`, `OOMKilled`, …) of the first container that is not ready, init containers
    /// first. Only for messages: whether the pod is available never depends on it.
    pub container_state: Option<String>,
    /// metadata.creationTimestamp: a rollback takes the newest pods back first.
    pub created_at: Option<Timestamp>,
}

impl GroupSnapshot {
    /// What the group rolls to: each member's update revision (empty without one), in member
    /// order, joined by `separator`.
    pub fn update_revisions(&self, separator: &str) -> String {
        let revisions: Vec<&str> = self
            .statefulsets
            .iter()
            .map(|member| member.update_revision.as_deref().unwrap_or_default())
            .collect();
        revisions.join(separator)
    }

    /// Builds the snapshot of a group from cached Kubernetes objects.
    ///
    /// `pods` may be every pod of the namespace: each StatefulSet keeps the pods its own
    /// `spec.selector` matches *and* that name it as their controller in an owner reference
    /// (**baton:** the Go operator used a `name` label instead, which users had to add).
    pub fn from_kubernetes<'a>(
        name: impl Into<String>,
        statefulsets: impl IntoIterator<Item = &'a StatefulSet>,
        pods: impl IntoIterator<Item = &'a CachedPod>,
    ) -> Self {
        let statefulsets: Vec<&StatefulSet> = statefulsets.into_iter().collect();
        let mut snapshots: Vec<StatefulSetSnapshot> = statefulsets
            .iter()
            .map(|statefulset| StatefulSetSnapshot::without_pods(statefulset))
            .collect();
        for pod in pods {
            let owner = statefulsets
                .iter()
                .position(|statefulset| is_controlled_by(pod, statefulset));
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
        // A group lives in one namespace (across clusters too): its first member's.
        let namespace = statefulsets
            .iter()
            .find_map(|statefulset| statefulset.metadata.namespace.as_deref())
            .unwrap_or_default();
        let reach = Reach::of(
            namespace,
            snapshots.iter().map(|member| member.name.as_str()),
        );
        Self {
            name: name.into(),
            statefulsets: snapshots,
            reach,
        }
    }
}

impl StatefulSetSnapshot {
    /// Builds the snapshot of one StatefulSet; `pods` may be every pod of the namespace (see
    /// [`GroupSnapshot::from_kubernetes`] for how its own are found).
    pub fn from_kubernetes<'a>(
        statefulset: &StatefulSet,
        pods: impl IntoIterator<Item = &'a CachedPod>,
    ) -> Self {
        let mut snapshot = Self::without_pods(statefulset);
        snapshot.pods = pods
            .into_iter()
            .filter(|pod| is_controlled_by(pod, statefulset))
            .map(PodSnapshot::from_kubernetes)
            .collect();
        snapshot.pods.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        snapshot
    }

    pub(crate) fn without_pods(statefulset: &StatefulSet) -> Self {
        let state = StatefulSetState::of(statefulset);
        let spec = statefulset.spec.as_ref();
        Self {
            unreachable: None,
            name: state.name,
            uid: state.uid,
            spec_replicas: state.replicas.unsigned_abs(),
            ordinals_start: state.ordinals_start.unsigned_abs(),
            min_ready_seconds: state.min_ready_seconds.unsigned_abs(),
            status_replicas: state.status_replicas.unsigned_abs(),
            ready_replicas: state.ready_replicas.unsigned_abs(),
            current_revision: state.current_revision,
            update_revision: state.update_revision,
            status_lag: state.status_lag,
            update_strategy: UpdateStrategy::from_type(
                spec.and_then(|spec| spec.update_strategy.as_ref()?.type_.as_deref()),
            ),
            partition: spec
                .and_then(|spec| {
                    spec.update_strategy
                        .as_ref()?
                        .rolling_update
                        .as_ref()?
                        .partition
                })
                .unwrap_or(0)
                .max(0)
                .unsigned_abs(),
            ordered_ready: spec
                .and_then(|spec| spec.pod_management_policy.as_deref())
                .is_none_or(|policy| policy == "OrderedReady"),
            annotations: statefulset.metadata.annotations.clone().unwrap_or_default(),
            pods: Vec::new(),
        }
    }
}

impl PodSnapshot {
    /// Reads the parts of a pod the planner needs.
    pub fn from_kubernetes(pod: &CachedPod) -> Self {
        let readiness = pod.readiness;
        Self {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            revision: pod.label(CONTROLLER_REVISION_HASH_LABEL).map(str::to_owned),
            phase: readiness.phase,
            ready: readiness.ready,
            ready_since: readiness.ready_since,
            terminating: readiness.terminating,
            container_state: pod.container_state.as_ref().map(|state| state.to_string()),
            created_at: pod
                .created_at
                .and_then(|seconds| Timestamp::from_second(seconds.get()).ok()),
        }
    }

    /// What decides whether the pod is available ([`PodReadiness::availability`]).
    pub fn readiness(&self) -> PodReadiness {
        PodReadiness {
            phase: self.phase,
            ready: self.ready,
            ready_since: self.ready_since,
            // Only the zone-aware budgets read it; the planner counts from the condition.
            terminating: self.terminating,
        }
    }
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
    use crate::testing::objects::{NAMESPACE, labels, selector};
    use k8s_openapi::api::apps::v1::{
        StatefulSetOrdinals, StatefulSetSpec, StatefulSetStatus, StatefulSetUpdateStrategy,
    };
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Pod,
        PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference, Time,
    };

    /// The planner's view of a pod as the API returns it.
    fn snap(pod: &Pod) -> PodSnapshot {
        PodSnapshot::from_kubernetes(&CachedPod::of(pod))
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: Some(values.iter().map(|value| value.to_string()).collect()),
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
                unreachable: None,
                name: "ingester-zone-a".to_owned(),
                uid: "uid-a".to_owned(),
                spec_replicas: 3,
                ordinals_start: 0,
                min_ready_seconds: 10,
                status_replicas: 3,
                ready_replicas: 2,
                current_revision: Some("rev-old".to_owned()),
                update_revision: Some("rev-new".to_owned()),
                status_lag: None,
                update_strategy: UpdateStrategy::OnDelete,
                partition: 0,
                ordered_ready: true,
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
        let snapshot = snap(&ready);
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
                container_state: None,
                created_at: None,
            }
        );

        let mut terminating = ready.clone();
        terminating.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(snap(&terminating).terminating);
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
        assert!(snap(&base).ready);
        for not_ready in [&container_not_ready, &condition_false, &no_condition] {
            let snapshot = snap(not_ready);
            assert!(!snapshot.ready, "{not_ready:?}");
            assert_eq!(snapshot.ready_since, None);
        }
        assert_eq!(snap(&pending).phase, PodPhase::Pending);
        let no_status = Pod {
            status: None,
            ..base
        };
        let snapshot = snap(&no_status);
        assert_eq!((snapshot.phase, snapshot.ready), (PodPhase::Unknown, false));
    }

    #[test]
    fn a_native_sidecar_counts_through_the_ready_condition() {
        // A sidecar (an init container with restartPolicy Always) is reported among the init
        // containers, not the containers; the kubelet holds the Ready condition False until it
        // is ready too, and that condition is what decides (the real kubelet's judgement:
        // tests/tests/real_pods.rs `a_pod_whose_native_sidecar_is_not_ready_yet_is_not_counted_available`).
        let sidecar = |ready: bool| ContainerStatus {
            name: "sidecar".to_owned(),
            ..container(ready)
        };
        let base = pod("p-0", "uid", &[]);
        let warming_up = with_status(base.clone(), |status| {
            status.container_statuses = Some(vec![container(true)]);
            status.init_container_statuses = Some(vec![sidecar(false)]);
            status.conditions = Some(vec![ready_condition("False", 1_700_000_000)]);
        });
        let warmed_up = with_status(base, |status| {
            status.container_statuses = Some(vec![container(true)]);
            status.init_container_statuses = Some(vec![sidecar(true)]);
        });
        assert!(!snap(&warming_up).ready);
        assert!(snap(&warmed_up).ready);
    }

    #[test]
    fn container_state_names_why_the_first_unready_container_is_not_running() {
        let waiting = |name: &str, ready: bool, reason: &str| ContainerStatus {
            name: name.to_owned(),
            ready,
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.to_owned()),
                    message: Some("back-off 5m0s restarting failed container".to_owned()),
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        };
        let terminated = |name: &str, reason: &str| ContainerStatus {
            name: name.to_owned(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    reason: Some(reason.to_owned()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        };
        let state_of = |change: &dyn Fn(&mut PodStatus)| {
            snap(&with_status(pod("p-0", "uid", &[]), change)).container_state
        };
        assert_eq!(state_of(&|_| {}), None, "every container ready");
        assert_eq!(
            state_of(&|status| {
                status.container_statuses = Some(vec![
                    waiting("sidecar", true, "Ignored"),
                    waiting("app", false, "CrashLoopBackOff"),
                ])
            }),
            Some("CrashLoopBackOff".to_owned())
        );
        assert_eq!(
            state_of(&|status| {
                status.phase = Some("Pending".to_owned());
                status.init_container_statuses =
                    Some(vec![waiting("init", false, "ImagePullBackOff")]);
                status.container_statuses = Some(vec![waiting("app", false, "PodInitializing")]);
            }),
            Some("ImagePullBackOff".to_owned())
        );
        assert_eq!(
            state_of(
                &|status| status.container_statuses = Some(vec![terminated("app", "OOMKilled")])
            ),
            Some("OOMKilled".to_owned())
        );
        assert_eq!(
            state_of(&|status| status.container_statuses = Some(vec![waiting("app", false, "")])),
            None,
            "an empty reason says nothing"
        );
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

        let pods: Vec<CachedPod> = pods.iter().map(CachedPod::of).collect();
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
            StatefulSetSnapshot::from_kubernetes(&no_uid, [&CachedPod::of(&orphan_claim)])
                .pods
                .is_empty()
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
