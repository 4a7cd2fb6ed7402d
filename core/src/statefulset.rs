//! What baton reads of a StatefulSet, with Kubernetes' defaults for missing fields, and how a
//! StatefulSet names its pods: one conversion for the rollout planner, the scaling planner and
//! prepare-downscale, and one naming for every place that calls or names a pod.
//!
//! A StatefulSet with `replicas` pods has the ordinals `start..start + replicas`, where `start`
//! is `spec.ordinals.start` (0 unless set). Code that counts replicas works with *indexes*
//! (`0..replicas`); [`PodNames`] turns an index into the pod's name.

use k8s_openapi::api::apps::v1::StatefulSet;

/// The counts and revisions of a StatefulSet. Counts are never negative (the API forbids it);
/// missing fields take Kubernetes' defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatefulSetState {
    pub name: String,
    pub uid: String,
    /// spec.replicas; Kubernetes defaults a missing value to 1.
    pub replicas: i32,
    /// spec.ordinals.start: the ordinal of the first pod, 0 unless set.
    pub ordinals_start: i32,
    /// spec.minReadySeconds: how long a pod must have been Ready to count as available.
    pub min_ready_seconds: i32,
    pub status_replicas: i32,
    pub ready_replicas: i32,
    pub updated_replicas: i32,
    /// status.currentRevision; an empty value counts as missing.
    pub current_revision: Option<String>,
    /// status.updateRevision; missing on a StatefulSet the Kubernetes controller has not
    /// processed yet.
    pub update_revision: Option<String>,
    /// Set while the status describes an older spec than the StatefulSet has.
    pub status_lag: Option<StatusLag>,
}

/// A status that describes an older spec: `status.observedGeneration` behind
/// `metadata.generation`, the StatefulSet controller not yet done with the latest change. Its
/// revisions and counts are then those of the old spec (a template just changed still shows
/// the old `updateRevision`, so a zone looks complete that is not), as `kubectl rollout status`
/// knows: it waits for the generation to be observed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusLag {
    /// metadata.generation.
    pub generation: i64,
    /// status.observedGeneration; `None` when the status has none.
    pub observed_generation: Option<i64>,
}

impl StatusLag {
    /// The lag of a StatefulSet with `generation` whose status observed `observed_generation`
    /// and has `update_revision`. One that has no revision yet (brand new, never processed) is
    /// no lag: the planner waits for its revisions anyway (`NoUpdateRevision`).
    pub fn of(
        generation: Option<i64>,
        observed_generation: Option<i64>,
        update_revision: Option<&str>,
    ) -> Option<Self> {
        let generation = generation?;
        update_revision?;
        (observed_generation.unwrap_or(0) < generation).then_some(Self {
            generation,
            observed_generation,
        })
    }
}

impl StatefulSetState {
    pub fn of(statefulset: &StatefulSet) -> Self {
        let metadata = &statefulset.metadata;
        let spec = statefulset.spec.as_ref();
        let status = statefulset.status.as_ref();
        let count = |value: Option<i32>| value.unwrap_or(0).max(0);
        let revision = |value: Option<&String>| value.filter(|value| !value.is_empty()).cloned();
        Self {
            name: metadata.name.clone().unwrap_or_default(),
            uid: metadata.uid.clone().unwrap_or_default(),
            replicas: count(Some(spec.and_then(|spec| spec.replicas).unwrap_or(1))),
            ordinals_start: count(spec.and_then(|spec| spec.ordinals.as_ref()?.start)),
            min_ready_seconds: count(spec.and_then(|spec| spec.min_ready_seconds)),
            status_replicas: count(status.map(|status| status.replicas)),
            ready_replicas: count(status.and_then(|status| status.ready_replicas)),
            updated_replicas: count(status.and_then(|status| status.updated_replicas)),
            current_revision: revision(status.and_then(|status| status.current_revision.as_ref())),
            update_revision: revision(status.and_then(|status| status.update_revision.as_ref())),
            status_lag: StatusLag::of(
                metadata.generation,
                status.and_then(|status| status.observed_generation),
                status
                    .and_then(|status| status.update_revision.as_deref())
                    .filter(|revision| !revision.is_empty()),
            ),
        }
    }

    /// How this StatefulSet names its pods.
    pub fn pod_names(&self) -> PodNames<'_> {
        PodNames::new(&self.name, self.ordinals_start)
    }
}

/// How a StatefulSet names its pods: `<statefulset>-<ordinal>`, the ordinals starting at
/// `spec.ordinals.start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodNames<'a> {
    statefulset: &'a str,
    start: i32,
}

impl<'a> PodNames<'a> {
    pub fn new(statefulset: &'a str, ordinals_start: i32) -> Self {
        Self {
            statefulset,
            start: ordinals_start.max(0),
        }
    }

    /// The name of the pod at `index` (0 is the first pod, whatever its ordinal).
    pub fn at(&self, index: i32) -> String {
        format!(
            "{}-{}",
            self.statefulset,
            i64::from(self.start) + i64::from(index)
        )
    }
}

/// The rollout group a StatefulSet belongs to (its `rollout-group` label).
pub fn group_of(statefulset: &StatefulSet) -> Option<&str> {
    statefulset
        .metadata
        .labels
        .as_ref()?
        .get(crate::annotations::ROLLOUT_GROUP_LABEL)
        .map(String::as_str)
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{StatefulSetOrdinals, StatefulSetSpec, StatefulSetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn statefulset(spec: StatefulSetSpec, status: Option<StatefulSetStatus>) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some("ingester-zone-a".to_owned()),
                uid: Some("uid-a".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
            status,
        }
    }

    #[test]
    fn reads_counts_and_revisions() {
        let state = StatefulSetState::of(&statefulset(
            StatefulSetSpec {
                replicas: Some(5),
                ordinals: Some(StatefulSetOrdinals { start: Some(3) }),
                min_ready_seconds: Some(10),
                ..StatefulSetSpec::default()
            },
            Some(StatefulSetStatus {
                replicas: 5,
                ready_replicas: Some(4),
                updated_replicas: Some(2),
                current_revision: Some("rev-old".to_owned()),
                update_revision: Some("rev-new".to_owned()),
                ..StatefulSetStatus::default()
            }),
        ));
        assert_eq!(
            state,
            StatefulSetState {
                name: "ingester-zone-a".to_owned(),
                uid: "uid-a".to_owned(),
                replicas: 5,
                ordinals_start: 3,
                min_ready_seconds: 10,
                status_replicas: 5,
                ready_replicas: 4,
                updated_replicas: 2,
                current_revision: Some("rev-old".to_owned()),
                update_revision: Some("rev-new".to_owned()),
                status_lag: None,
            }
        );
    }

    #[test]
    fn a_status_behind_its_spec_is_a_lag_and_a_brand_new_statefulset_is_not() {
        // Observed the latest generation: no lag
        assert_eq!(StatusLag::of(Some(3), Some(3), Some("r1")), None);
        // A template change the StatefulSet controller has not observed yet
        assert_eq!(
            StatusLag::of(Some(4), Some(3), Some("r1")),
            Some(StatusLag {
                generation: 4,
                observed_generation: Some(3)
            })
        );
        // A status with revisions but no observedGeneration describes no known spec
        assert_eq!(
            StatusLag::of(Some(1), None, Some("r1")),
            Some(StatusLag {
                generation: 1,
                observed_generation: None
            })
        );
        // Never processed: no revision yet, which the planner waits for on its own
        assert_eq!(StatusLag::of(Some(1), None, None), None);
        // No generation (an object built by hand): nothing to compare
        assert_eq!(StatusLag::of(None, Some(2), Some("r1")), None);
    }

    #[test]
    fn applies_kubernetes_defaults_for_missing_fields() {
        let state = StatefulSetState::of(&statefulset(StatefulSetSpec::default(), None));
        assert_eq!(state.replicas, 1, "spec.replicas defaults to 1");
        assert_eq!(
            (state.ordinals_start, state.min_ready_seconds),
            (0, 0),
            "ordinals start at 0"
        );
        assert_eq!(
            (
                state.status_replicas,
                state.ready_replicas,
                state.updated_replicas
            ),
            (0, 0, 0)
        );
        assert_eq!(
            (state.current_revision, state.update_revision),
            (None, None)
        );

        let scaled_to_zero = StatefulSetState::of(&statefulset(
            StatefulSetSpec {
                replicas: Some(0),
                ordinals: Some(StatefulSetOrdinals { start: None }),
                ..StatefulSetSpec::default()
            },
            Some(StatefulSetStatus {
                current_revision: Some(String::new()),
                update_revision: Some(String::new()),
                ..StatefulSetStatus::default()
            }),
        ));
        assert_eq!(scaled_to_zero.replicas, 0);
        assert_eq!(scaled_to_zero.ordinals_start, 0);
        assert_eq!(scaled_to_zero.update_revision, None, "empty is missing");
        assert_eq!(scaled_to_zero.current_revision, None, "empty is missing");
    }

    #[test]
    fn pods_are_named_from_the_ordinals_start() {
        let from_zero = PodNames::new("ingester-zone-a", 0);
        assert_eq!(from_zero.at(0), "ingester-zone-a-0");

        let from_three = PodNames::new("ingester-zone-a", 3);
        assert_eq!(from_three.at(0), "ingester-zone-a-3");
        assert_eq!(from_three.at(4), "ingester-zone-a-7");
        assert_eq!(PodNames::new("x", i32::MAX).at(1), "x-2147483648");
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
}
