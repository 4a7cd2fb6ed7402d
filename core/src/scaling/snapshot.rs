//! Builds a [`ScalingSnapshot`] from cached StatefulSets and the scales the executor read from
//! their references beforehand: the snapshot is whole when built, never patched after I/O.

use crate::annotations::InvalidAnnotation;
use crate::annotations::scaling::{
    MirrorReference, delayed_downscale, downscale_leader, force_replicas,
    min_time_between_zones_downscale, mirror_reference, upscale_only_when_leader_ready,
};
use crate::downscale_history::{Records, last_downscale};
use crate::statefulset::StatefulSetState;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

use super::plan::{Member, Mirror, ReferenceScale, ScalingSnapshot};

/// Each reference read for a group, and its scale or why it could not be read.
pub type ReferenceScales = Vec<(MirrorReference, Result<ReferenceScale, String>)>;

impl ScalingSnapshot {
    /// `records` and `now` say when each member was last downscaled (min-time).
    pub fn from_kubernetes<'a>(
        group: &str,
        statefulsets: impl IntoIterator<Item = &'a StatefulSet>,
        scales: &ReferenceScales,
        records: Records<'_>,
        now: Timestamp,
    ) -> Self {
        let mut members: Vec<Member> = statefulsets
            .into_iter()
            .map(|statefulset| Member::from_kubernetes(statefulset, scales, records, now))
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        Self {
            group: group.to_owned(),
            members,
        }
    }
}

impl Member {
    /// Reads a StatefulSet's replicas and scaling settings, with its reference's scale from
    /// `scales` and its last downscale from `records`.
    pub fn from_kubernetes(
        statefulset: &StatefulSet,
        scales: &ReferenceScales,
        records: Records<'_>,
        now: Timestamp,
    ) -> Self {
        let empty = Default::default();
        let annotations = statefulset.metadata.annotations.as_ref().unwrap_or(&empty);
        let labels = statefulset.metadata.labels.as_ref().unwrap_or(&empty);
        let mut warnings: Vec<InvalidAnnotation> = Vec::new();
        let only_when_ready = upscale_only_when_leader_ready(annotations);
        warnings.extend(only_when_ready.warning);
        let forced = force_replicas(annotations);
        warnings.extend(forced.warning);
        let mirror = mirror_reference(annotations).map(|parsed| {
            parsed.map(|parsed| {
                warnings.extend(parsed.warning);
                let scale = scales
                    .iter()
                    .find(|(read, _)| *read == parsed.value)
                    .map_or_else(
                        || Err("the reference was not read".to_owned()),
                        |(_, scale)| scale.clone(),
                    );
                Mirror {
                    reference: parsed.value,
                    scale,
                }
            })
        });
        let last_downscale =
            last_downscale(statefulset, records, now).map(|last| last.map(|last| last.at));
        let min_time = min_time_between_zones_downscale(labels, annotations).map(|parsed| {
            warnings.extend(parsed.warning);
            parsed.value
        });
        let state = StatefulSetState::of(statefulset);
        Self {
            name: state.name,
            replicas: state.replicas,
            ready_replicas: state.ready_replicas,
            leader: downscale_leader(annotations).map(str::to_owned),
            upscale_only_when_leader_ready: only_when_ready.value,
            force_replicas: forced.value,
            min_time_between_downscale: min_time,
            last_downscale,
            mirror,
            delayed_downscale: delayed_downscale(annotations),
            warnings,
        }
    }
}
