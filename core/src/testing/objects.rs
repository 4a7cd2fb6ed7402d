//! Kubernetes objects of a rollout group for tests of what reads them (the budgets' decision,
//! the snapshot from objects): the `ingester` group in namespace [`NAMESPACE`], one StatefulSet
//! per zone labelled and selecting `zone=<name>`, pods owned by their StatefulSet.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};

/// The namespace of every object built here.
pub const NAMESPACE: &str = "mimir";

/// A label (or annotation) map of `pairs`.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

/// A selector of exactly `pairs`.
pub fn match_labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: None,
    }
}

/// A selector of `pairs` and `expressions`, both present (as an API server returns one).
pub fn selector(
    pairs: &[(&str, &str)],
    expressions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement>,
) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: Some(expressions),
    }
}

/// StatefulSet `name` of the `ingester` rollout group with `replicas`, uid `uid-<name>`.
pub fn zone_statefulset(name: &str, replicas: i32) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            uid: Some(format!("uid-{name}")),
            labels: Some(labels(&[("rollout-group", "ingester"), ("zone", name)])),
            ..ObjectMeta::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            selector: match_labels(&[("zone", name)]),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// Pod `<statefulset>-<ordinal>`, owned by [`zone_statefulset`]`(statefulset)`: Running and
/// Ready since `ready_since` unless told otherwise.
pub fn zone_pod(statefulset: &str, ordinal: u32, ready_since: Timestamp) -> ZonePod {
    ZonePod {
        statefulset: statefulset.to_owned(),
        ordinal,
        phase: "Running",
        ready: true,
        transition: ready_since,
        terminating_since: None,
        uid: true,
    }
}

/// A pod being built (see [`zone_pod`]).
#[derive(Debug, Clone)]
pub struct ZonePod {
    statefulset: String,
    ordinal: u32,
    phase: &'static str,
    ready: bool,
    transition: Timestamp,
    terminating_since: Option<Timestamp>,
    uid: bool,
}

impl ZonePod {
    /// Not Ready since `since`.
    pub fn not_ready(mut self, since: Timestamp) -> Self {
        self.ready = false;
        self.transition = since;
        self
    }

    /// Pending (and so not Ready) since `since`.
    pub fn pending(self, since: Timestamp) -> Self {
        let mut pod = self.not_ready(since);
        pod.phase = "Pending";
        pod
    }

    /// Deleted at `at`, still there.
    pub fn terminating(mut self, at: Timestamp) -> Self {
        self.terminating_since = Some(at);
        self
    }

    /// Without a uid, as a pod the decision never met.
    pub fn without_uid(mut self) -> Self {
        self.uid = false;
        self
    }

    pub fn build(self) -> Pod {
        let statefulset = &self.statefulset;
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("{statefulset}-{}", self.ordinal)),
                namespace: Some(NAMESPACE.to_owned()),
                uid: self
                    .uid
                    .then(|| format!("uid-{statefulset}-{}", self.ordinal)),
                labels: Some(labels(&[
                    ("rollout-group", "ingester"),
                    ("zone", statefulset),
                ])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "StatefulSet".into(),
                    name: statefulset.to_owned(),
                    uid: format!("uid-{statefulset}"),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                deletion_timestamp: self.terminating_since.map(Time),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(self.phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if self.ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(self.transition)),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }
}

impl From<ZonePod> for Pod {
    fn from(pod: ZonePod) -> Self {
        pod.build()
    }
}
