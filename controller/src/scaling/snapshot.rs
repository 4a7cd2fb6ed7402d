//! Builds a [`ScalingSnapshot`] from cached StatefulSets, without I/O. The references' scales
//! are read afterwards by the executor and filled into [`Mirror::scale`].

use baton_shared::annotations::scaling::{
    delayed_downscale, downscale_leader, force_replicas, min_time_between_zones_downscale,
    mirror_reference, upscale_only_when_leader_ready,
};
use baton_shared::annotations::{InvalidAnnotation, LAST_DOWNSCALE_ANNOTATION};
use baton_shared::statefulset::StatefulSetState;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

use super::plan::{Member, Mirror, ScalingSnapshot};

/// What [`Mirror::scale`] holds until the executor read the reference.
pub const NOT_READ: &str = "not read yet";

impl ScalingSnapshot {
    pub fn from_kubernetes<'a>(
        group: &str,
        statefulsets: impl IntoIterator<Item = &'a StatefulSet>,
    ) -> Self {
        let mut members: Vec<Member> = statefulsets
            .into_iter()
            .map(Member::from_kubernetes)
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        Self {
            group: group.to_owned(),
            members,
        }
    }
}

impl Member {
    /// Reads a StatefulSet's replicas and scaling settings.
    pub fn from_kubernetes(statefulset: &StatefulSet) -> Self {
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
                Mirror {
                    reference: parsed.value,
                    scale: Err(NOT_READ.to_owned()),
                }
            })
        });
        let last_downscale = match annotations.get(LAST_DOWNSCALE_ANNOTATION) {
            None => Ok(None),
            Some(text) => text
                .parse::<Timestamp>()
                .map(Some)
                .map_err(|_| text.clone()),
        };
        let state = StatefulSetState::of(statefulset);
        Self {
            name: state.name,
            replicas: state.replicas,
            ready_replicas: state.ready_replicas,
            leader: downscale_leader(annotations).map(str::to_owned),
            upscale_only_when_leader_ready: only_when_ready.value,
            force_replicas: forced.value,
            min_time_between_downscale: min_time_between_zones_downscale(labels),
            last_downscale,
            mirror,
            delayed_downscale: delayed_downscale(annotations),
            warnings,
        }
    }
}
