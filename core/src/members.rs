//! Rollout groups whose members live in several clusters: how a member is named where people
//! read it, and how the objects of one cluster join a group's snapshot.
//!
//! A member is `cluster/statefulset` (its pods `cluster/pod`): a Kubernetes name cannot
//! contain `/`, so the name says unambiguously which cluster an object lives in, and every
//! decision that reads names (the zone order, the pending deletions, the status page, Events'
//! words) works unchanged on qualified names. Only the writes split the name again, to send
//! each to its own cluster under the name it has there ([`split`]).

use k8s_openapi::api::apps::v1::StatefulSet;

use crate::pods::CachedPod;

/// Between a member cluster's name and an object's name in it.
pub const SEPARATOR: char = '/';

/// `name` in `cluster`, as people read it: `cluster/name`.
pub fn qualified(cluster: &str, name: &str) -> String {
    format!("{cluster}{SEPARATOR}{name}")
}

/// The cluster a name lives in (none for an unqualified name: the controller's own cluster
/// when it has no member clusters) and the object's name there.
pub fn split(name: &str) -> (Option<&str>, &str) {
    match name.split_once(SEPARATOR) {
        Some((cluster, name)) => (Some(cluster), name),
        None => (None, name),
    }
}

/// `statefulset` of `cluster` as a member of a cross-cluster group: named `cluster/name`.
/// Its uid stays (uids are unique across clusters), so its pods still find it.
pub fn qualify_statefulset(cluster: &str, statefulset: &StatefulSet) -> StatefulSet {
    let mut qualified_statefulset = statefulset.clone();
    if let Some(name) = &statefulset.metadata.name {
        qualified_statefulset.metadata.name = Some(qualified(cluster, name));
    }
    qualified_statefulset
}

/// `pod` of `cluster`, named `cluster/pod`, its controller `cluster/owner`.
pub fn qualify_pod(cluster: &str, pod: &CachedPod) -> CachedPod {
    let mut qualified_pod = pod.clone();
    qualified_pod.name = qualified(cluster, &pod.name);
    if let Some(controller) = &mut qualified_pod.controller {
        controller.name = qualified(cluster, &controller.name);
    }
    qualified_pod
}

/// A member cluster's name, as configured: a DNS label (it becomes part of names people read
/// and of Event messages), so it can never contain the separator.
pub fn valid_cluster_name(name: &str) -> Result<(), String> {
    if crate::names::is_dns_label(name) {
        Ok(())
    } else {
        Err(format!(
            "member cluster name {name:?} is not a DNS label (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qualified_name_splits_back_into_its_cluster_and_name() {
        let name = qualified("cluster-b", "ingester-zone-b");
        assert_eq!(name, "cluster-b/ingester-zone-b");
        assert_eq!(split(&name), (Some("cluster-b"), "ingester-zone-b"));
        assert_eq!(split("ingester-zone-b"), (None, "ingester-zone-b"));
    }

    #[test]
    fn a_qualified_pod_keeps_its_uid_and_names_its_owner_in_its_cluster() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "ingester-0",
                "uid": "pod-uid",
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ingester",
                    "uid": "sts-uid", "controller": true,
                }],
            },
        }))
        .expect("a pod");
        let pod = CachedPod::of(&pod);
        let qualified_pod = qualify_pod("cluster-a", &pod);
        assert_eq!(qualified_pod.name, "cluster-a/ingester-0");
        assert_eq!(qualified_pod.uid, "pod-uid");
        let controller = qualified_pod.controller.expect("controller kept");
        assert_eq!(
            (controller.name.as_str(), controller.uid.as_str()),
            ("cluster-a/ingester", "sts-uid")
        );
    }

    #[test]
    fn a_cluster_name_must_be_a_dns_label() {
        assert!(valid_cluster_name("cluster-a").is_ok());
        for bad in ["", "Cluster", "a/b", "a.b", &"x".repeat(64)] {
            assert!(valid_cluster_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
