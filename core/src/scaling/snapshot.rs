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

use super::plan::{Member, Mirror, ReferenceScale, ScalingSnapshot, Unread};

/// Each reference read for a group, and its scale or why it could not be read.
pub type ReferenceScales = Vec<(MirrorReference, Result<ReferenceScale, String>)>;

/// The reference `statefulset` mirrors, named as a member names things: in a group across
/// clusters (members named `cluster/statefulset`) the reference is an object of the member's
/// own cluster, so it is named `cluster/reference`, and only the call that reads or writes it
/// splits the name again (as every other write's).
pub fn member_reference(
    statefulset: &StatefulSet,
) -> Result<Option<crate::annotations::rollout::Parsed<MirrorReference>>, InvalidAnnotation> {
    let empty = Default::default();
    let annotations = statefulset.metadata.annotations.as_ref().unwrap_or(&empty);
    let name = statefulset.metadata.name.as_deref().unwrap_or_default();
    mirror_reference(annotations).map(|parsed| {
        parsed.map(|mut parsed| {
            parsed.value.name = in_cluster_of(name, &parsed.value.name);
            parsed
        })
    })
}

/// `name`, written on the member `member`, as the group names it: an unqualified name on a
/// member of a cluster names an object of that cluster (its leader, its reference); a
/// qualified one (`cluster-a/ingester-zone-a`) names the object of that cluster.
pub fn in_cluster_of(member: &str, name: &str) -> String {
    match crate::clusters::split(member) {
        (Some(cluster), _) if crate::clusters::split(name).0.is_none() => {
            crate::clusters::qualified(cluster, name)
        }
        _ => name.to_owned(),
    }
}

impl ScalingSnapshot {
    /// `records` and `now` say when each member was last downscaled (min-time); `unread`, the
    /// member clusters whose part of the group could not be read.
    pub fn from_kubernetes<'a>(
        group: &str,
        statefulsets: impl IntoIterator<Item = &'a StatefulSet>,
        scales: &ReferenceScales,
        records: Records<'_>,
        unread: &[Unread],
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
            unread: unread.to_vec(),
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
        let mirror = member_reference(statefulset).map(|parsed| {
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
        let leader = downscale_leader(annotations).map(|leader| in_cluster_of(&state.name, leader));
        Self {
            name: state.name,
            replicas: state.replicas,
            ready_replicas: state.ready_replicas,
            leader,
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

#[cfg(test)]
mod tests {
    use super::in_cluster_of;

    #[test]
    fn a_name_written_on_a_member_names_an_object_of_its_cluster_unless_qualified() {
        assert_eq!(
            in_cluster_of("cluster-b/zone-b", "zone-a"),
            "cluster-b/zone-a"
        );
        assert_eq!(
            in_cluster_of("cluster-b/zone-b", "cluster-a/zone-a"),
            "cluster-a/zone-a"
        );
        // In one cluster, names stay as written.
        assert_eq!(in_cluster_of("zone-b", "zone-a"), "zone-a");
        assert_eq!(
            in_cluster_of("zone-b", "cluster-a/zone-a"),
            "cluster-a/zone-a"
        );
    }
}
