//! The one meaning of "this StatefulSet's pod" and of "an available pod" for both binaries: the
//! rollout planner counts its budget with them and prepare-downscale judges whether the other
//! zones are ready with them, so a zone the controller would wait for is never downscaled by the
//! webhook as "ready".
//!
//! Pure functions of the objects; nothing here calls the API.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Pod,
    PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::core::{Selector, SelectorExt};

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

/// Whether `statefulset` controls `pod`: same namespace, the pod names the StatefulSet (by uid)
/// as its controller, and the StatefulSet's selector matches the pod's labels.
///
/// **baton:** the Go operator found pods by a `name` label instead, which users had to add.
pub fn is_controlled_by(pod: &Pod, statefulset: &StatefulSet) -> bool {
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
    owned
        && statefulset
            .spec
            .as_ref()
            .is_some_and(|spec| selector_matches(&spec.selector, pod.metadata.labels.as_ref()))
}

/// The name of the StatefulSet a pod's controller owner reference names. Only to route a pod's
/// change to its StatefulSet before that is looked up; [`is_controlled_by`] decides ownership.
pub fn controlling_statefulset(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true) && owner.kind == "StatefulSet")
        .map(|owner| owner.name.as_str())
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
    let empty = selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty);
    if empty {
        return false;
    }
    match Selector::try_from(selector.clone()) {
        Ok(selector) => selector.matches(labels.unwrap_or(&BTreeMap::new())),
        Err(_) => false,
    }
}

/// Drops from a cached pod what neither binary reads, keeping what the functions above and the
/// planner read: identity (name, namespace, uid), labels (a StatefulSet's selector may read any
/// of them), the controller owner reference, the deletion mark, phase, IP, the Ready condition,
/// and whether each container is ready, with the reason one that is not waits or terminated
/// (for messages). The spec, the rest of the status, annotations, managed fields and the
/// metadata nothing reads (resourceVersion, generateName, selfLink, timestamps, finalizers) go:
/// pods are most of each binary's memory, and a namespace may hold thousands.
pub fn slim(pod: &mut Pod) {
    let metadata = std::mem::take(&mut pod.metadata);
    pod.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        labels: metadata.labels,
        deletion_timestamp: metadata.deletion_timestamp,
        owner_references: metadata.owner_references.map(|owners| {
            owners
                .into_iter()
                .filter(|owner| owner.controller == Some(true))
                .map(|owner| OwnerReference {
                    api_version: String::new(),
                    block_owner_deletion: None,
                    ..owner
                })
                .collect()
        }),
        ..ObjectMeta::default()
    };
    pod.spec = None;
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        pod_ip: status.pod_ip,
        conditions: status.conditions.map(|conditions| {
            conditions
                .into_iter()
                .filter(|condition| condition.type_ == "Ready")
                .map(|condition| PodCondition {
                    message: None,
                    reason: None,
                    last_probe_time: None,
                    ..condition
                })
                .collect()
        }),
        // An init container that is ready says nothing anyone reads.
        init_container_statuses: status.init_container_statuses.map(|containers| {
            slim_containers(
                containers
                    .into_iter()
                    .filter(|container| !container.ready)
                    .collect(),
            )
        }),
        container_statuses: status.container_statuses.map(slim_containers),
        ..PodStatus::default()
    });
}

/// Keeps a container's readiness and, while it is not ready, the reason it waits or terminated;
/// names, messages, images and timestamps go.
fn slim_containers(containers: Vec<ContainerStatus>) -> Vec<ContainerStatus> {
    containers
        .into_iter()
        .map(|container| ContainerStatus {
            ready: container.ready,
            state: container
                .state
                .filter(|_| !container.ready)
                .map(|state| ContainerState {
                    waiting: state.waiting.map(|waiting| ContainerStateWaiting {
                        reason: waiting.reason,
                        message: None,
                    }),
                    terminated: state.terminated.map(|terminated| ContainerStateTerminated {
                        reason: terminated.reason,
                        ..ContainerStateTerminated::default()
                    }),
                    running: None,
                }),
            ..ContainerStatus::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSetSpec;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelectorRequirement, ObjectMeta, OwnerReference, Time,
    };

    use super::*;

    const NAMESPACE: &str = "mimir";
    const READY_AT: i64 = 1_700_000_000;

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
        let matches = |pairs: &[(&str, &str)]| selector_matches(&by_app, Some(&labels(pairs)));
        assert!(matches(&[("app", "ingester"), ("zone", "a"), ("x", "y")]));
        assert!(!matches(&[("app", "ingester"), ("zone", "b")]));
        assert!(!matches(&[("app", "ingester")]));
        assert!(!selector_matches(&by_app, None));
    }

    #[test]
    fn selector_expressions_as_kubernetes_reads_them() {
        let zone_in = selector(&[], vec![requirement("zone", "In", &["a", "b"])]);
        assert!(selector_matches(&zone_in, Some(&labels(&[("zone", "b")]))));
        assert!(!selector_matches(&zone_in, Some(&labels(&[("zone", "c")]))));
        assert!(!selector_matches(&zone_in, None));

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
        assert!(selector_matches(&zone_not_in, None));

        let has_zone = selector(&[], vec![requirement("zone", "Exists", &[])]);
        assert!(selector_matches(&has_zone, Some(&labels(&[("zone", "")]))));
        assert!(!selector_matches(&has_zone, Some(&labels(&[("app", "x")]))));

        let no_canary = selector(&[], vec![requirement("canary", "DoesNotExist", &[])]);
        assert!(selector_matches(&no_canary, None));
        assert!(!selector_matches(
            &no_canary,
            Some(&labels(&[("canary", "1")]))
        ));

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
    fn a_pod_is_controlled_by_the_statefulset_it_names_and_whose_selector_matches_it() {
        let zone_a = statefulset("uid-a", selector(&[("zone", "a")], vec![]));
        let owned = pod("uid-a", &[("zone", "a")]);
        assert!(is_controlled_by(&owned, &zone_a));
        assert_eq!(controlling_statefulset(&owned), Some("ingester-zone-a"));

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
            assert!(!is_controlled_by(pod, &zone_a), "{why}");
        }
        assert_eq!(controlling_statefulset(&not_controller), None);
        assert_eq!(controlling_statefulset(&orphan), None);

        let mut no_uid = zone_a.clone();
        no_uid.metadata.uid = None;
        assert!(!is_controlled_by(&pod("", &[("zone", "a")]), &no_uid));
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
}
