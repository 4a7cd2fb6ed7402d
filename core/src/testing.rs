//! Builders of snapshots for tests, one set for every crate (`testing` feature): a zone starts
//! settled (every pod Running, Ready for an hour, at `rev-1`) and each call changes one thing,
//! so a scenario reads as what is different about it.

pub mod objects;

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use crate::annotations::{
    MAX_UNAVAILABLE_ANNOTATION, PARTITION_ANNOTATION, ROLLOUT_PAUSED_ANNOTATION,
    UPDATE_BY_ANNOTATION,
};
use crate::rollout::snapshot::{
    GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy,
};

pub const OLD: &str = "rev-1";
pub const NEW: &str = "rev-2";

pub fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).expect("valid time")
}

/// A StatefulSet under construction: starts settled (every pod Running, Ready, at `rev-1`,
/// currentRevision == updateRevision == `rev-1`); its status follows its pods, like the
/// Kubernetes controller's, unless set by hand.
pub struct Zone {
    statefulset: StatefulSetSnapshot,
    status: Option<(u32, u32)>,
}

pub fn zone(name: &str, replicas: u32) -> Zone {
    let pods = (0..replicas)
        .map(|ordinal| PodSnapshot {
            name: format!("{name}-{ordinal}"),
            uid: format!("uid-{name}-{ordinal}"),
            revision: Some(OLD.to_owned()),
            phase: PodPhase::Running,
            ready: true,
            ready_since: Some(now() - SignedDuration::from_hours(1)),
            terminating: false,
            container_state: None,
            created_at: None,
        })
        .collect();
    Zone {
        statefulset: StatefulSetSnapshot {
            unreachable: None,
            name: name.to_owned(),
            uid: format!("uid-{name}"),
            spec_replicas: replicas,
            ordinals_start: 0,
            min_ready_seconds: 0,
            status_replicas: 0,
            ready_replicas: 0,
            current_revision: Some(OLD.to_owned()),
            update_revision: Some(OLD.to_owned()),
            status_lag: None,
            update_strategy: UpdateStrategy::OnDelete,
            partition: 0,
            ordered_ready: true,
            annotations: BTreeMap::new(),
            pods,
        },
        status: None,
    }
}

/// Member `name` as the gate keys and state read it: one replica, Ready, no pods listed, with
/// `annotations`; nothing else about it matters to them.
pub fn member_with(name: &str, annotations: &[(&str, &str)]) -> StatefulSetSnapshot {
    let mut member = zone(name, 1).statefulset;
    member.status_replicas = 1;
    member.ready_replicas = 1;
    member.current_revision = None;
    member.update_revision = None;
    member.pods = Vec::new();
    member.annotations = annotations
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    member
}

impl Zone {
    fn pod(&mut self, ordinal: u32) -> &mut PodSnapshot {
        let name = format!("{}-{ordinal}", self.statefulset.name);
        self.statefulset
            .pods
            .iter_mut()
            .find(|pod| pod.name == name)
            .unwrap_or_else(|| panic!("no pod {name}"))
    }

    pub fn each_pod(mut self, ordinals: &[u32], change: impl Fn(&mut PodSnapshot)) -> Self {
        for &ordinal in ordinals {
            change(self.pod(ordinal));
        }
        self
    }

    /// The pod template changed: updateRevision is `rev-2`, every pod still runs `rev-1`.
    pub fn template_changed(self) -> Self {
        self.template_changed_to(NEW)
    }

    /// The pod template changed to `revision`; every pod still runs the current one.
    pub fn template_changed_to(mut self, revision: &str) -> Self {
        self.statefulset.update_revision = Some(revision.to_owned());
        self
    }

    /// The spec changed (generation 2) but the status still describes generation 1: the
    /// StatefulSet controller has not caught up, so updateRevision is what it was.
    pub fn status_behind_spec(mut self) -> Self {
        self.statefulset.status_lag = Some(crate::rollout::StatusLag {
            generation: 2,
            observed_generation: Some(1),
        });
        self
    }

    /// Settled at `revision`: every pod runs it, and it is current and the update revision.
    pub fn at_revision(mut self, revision: &str) -> Self {
        self.statefulset.current_revision = Some(revision.to_owned());
        self.statefulset.update_revision = Some(revision.to_owned());
        for pod in &mut self.statefulset.pods {
            pod.revision = Some(revision.to_owned());
        }
        self
    }

    /// The first `count` pods (by ordinal) run the update revision.
    pub fn updated_first(self, count: u32) -> Self {
        let ordinals: Vec<u32> = (0..count).collect();
        self.updated(&ordinals)
    }

    /// These pods already run the update revision.
    pub fn updated(self, ordinals: &[u32]) -> Self {
        let revision = self.statefulset.update_revision.clone();
        self.each_pod(ordinals, |pod| pod.revision = revision.clone())
    }

    /// Every pod runs the update revision.
    pub fn all_updated(self) -> Self {
        let ordinals: Vec<u32> = (0..self.statefulset.spec_replicas).collect();
        self.updated(&ordinals)
    }

    pub fn revision_label(self, ordinal: u32, revision: Option<&str>) -> Self {
        self.each_pod(&[ordinal], |pod| pod.revision = revision.map(str::to_owned))
    }

    pub fn current_revision(mut self, revision: &str) -> Self {
        self.statefulset.current_revision = Some(revision.to_owned());
        self
    }

    pub fn no_update_revision(mut self) -> Self {
        self.statefulset.update_revision = None;
        self.statefulset.current_revision = None;
        self
    }

    pub fn not_ready(self, ordinals: &[u32]) -> Self {
        self.each_pod(ordinals, |pod| {
            pod.ready = false;
            pod.ready_since = None;
        })
    }

    /// Running, not ready, a container waiting in CrashLoopBackOff.
    pub fn crash_looping(self, ordinals: &[u32]) -> Self {
        self.not_ready(ordinals).each_pod(ordinals, |pod| {
            pod.container_state = Some("CrashLoopBackOff".to_owned());
        })
    }

    /// Pending, its image cannot be pulled.
    pub fn image_pull_failing(self, ordinals: &[u32]) -> Self {
        self.not_ready(ordinals)
            .phase(ordinals, PodPhase::Pending)
            .each_pod(ordinals, |pod| {
                pod.container_state = Some("ImagePullBackOff".to_owned());
            })
    }

    pub fn phase(self, ordinals: &[u32], phase: PodPhase) -> Self {
        self.each_pod(ordinals, |pod| pod.phase = phase)
    }

    /// Deleted but still there (and, as often, still reported Ready).
    pub fn terminating(self, ordinals: &[u32]) -> Self {
        self.each_pod(ordinals, |pod| pod.terminating = true)
    }

    pub fn missing(mut self, ordinals: &[u32]) -> Self {
        let names: Vec<String> = ordinals
            .iter()
            .map(|ordinal| format!("{}-{ordinal}", self.statefulset.name))
            .collect();
        self.statefulset
            .pods
            .retain(|pod| !names.contains(&pod.name));
        self
    }

    pub fn spec_replicas(mut self, replicas: u32) -> Self {
        self.statefulset.spec_replicas = replicas;
        self
    }

    pub fn ready_for(self, ordinal: u32, seconds: i64) -> Self {
        self.each_pod(&[ordinal], |pod| {
            pod.ready_since = Some(now() - SignedDuration::from_secs(seconds));
        })
    }

    pub fn min_ready_seconds(mut self, seconds: u32) -> Self {
        self.statefulset.min_ready_seconds = seconds;
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.statefulset
            .annotations
            .insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn max_unavailable(self, value: &str) -> Self {
        self.annotation(MAX_UNAVAILABLE_ANNOTATION, value)
    }

    pub fn paused(self) -> Self {
        self.annotation(ROLLOUT_PAUSED_ANNOTATION, "true")
    }

    pub fn strategy(mut self, strategy: UpdateStrategy) -> Self {
        self.statefulset.update_strategy = strategy;
        self
    }

    /// A `RollingUpdate` StatefulSet rolled by partition (`baton.dev/update-by: partition`),
    /// its partition at `partition`.
    pub fn by_partition(mut self, partition: u32) -> Self {
        self.statefulset.update_strategy = UpdateStrategy::RollingUpdate;
        self.statefulset.partition = partition;
        self.annotation(UPDATE_BY_ANNOTATION, "partition")
    }

    /// The partition baton recorded as set (`baton.dev/partition`).
    pub fn partition_set(self, partition: u32) -> Self {
        self.annotation(PARTITION_ANNOTATION, &partition.to_string())
    }

    /// spec.podManagementPolicy: `Parallel` instead of `OrderedReady`.
    pub fn parallel(mut self) -> Self {
        self.statefulset.ordered_ready = false;
        self
    }

    /// status.replicas and status.readyReplicas as reported, whatever the pods say.
    pub fn status(mut self, replicas: u32, ready_replicas: u32) -> Self {
        self.status = Some((replicas, ready_replicas));
        self
    }

    pub fn build(self) -> StatefulSetSnapshot {
        let mut statefulset = self.statefulset;
        let pods = &statefulset.pods;
        let (replicas, ready) = self.status.unwrap_or_else(|| {
            // Like the StatefulSet controller: terminating pods still count while Ready.
            let ready = pods
                .iter()
                .filter(|pod| pod.phase == PodPhase::Running && pod.ready)
                .count();
            (count(pods.len()), count(ready))
        });
        statefulset.status_replicas = replicas;
        statefulset.ready_replicas = ready;
        statefulset
    }
}

fn count(value: usize) -> u32 {
    u32::try_from(value).expect("small test counts")
}

impl From<Zone> for StatefulSetSnapshot {
    fn from(zone: Zone) -> Self {
        zone.build()
    }
}

/// Group `ingester` of these zones (built [`Zone`]s or snapshots), by name.
pub fn group<Z: Into<StatefulSetSnapshot>>(zones: impl IntoIterator<Item = Z>) -> GroupSnapshot {
    let mut statefulsets: Vec<StatefulSetSnapshot> = zones.into_iter().map(Into::into).collect();
    statefulsets.sort_by(|a, b| a.name.cmp(&b.name));
    // No namespace: the commands its messages print name none, which keeps tests short.
    let reach =
        crate::commands::Reach::of("", statefulsets.iter().map(|member| member.name.as_str()));
    GroupSnapshot {
        name: "ingester".to_owned(),
        statefulsets,
        reach,
    }
}

/// `statefulset` with annotation `key: value`.
pub fn annotated(
    mut statefulset: StatefulSetSnapshot,
    key: &str,
    value: &str,
) -> StatefulSetSnapshot {
    statefulset
        .annotations
        .insert(key.to_owned(), value.to_owned());
    statefulset
}
