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
use crate::rollout::{GroupSnapshot, StatefulSetSnapshot, Unreachable};

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
/// Its uid stays, so its pods still find it: those of its own cluster alone (a uid is unique in
/// its cluster only, and any pod may name any uid, [`crate::pods::is_controlled_by`]).
pub fn qualify_statefulset(cluster: &str, statefulset: &StatefulSet) -> StatefulSet {
    let mut qualified_statefulset = statefulset.clone();
    if let Some(name) = &statefulset.metadata.name {
        qualified_statefulset.metadata.name = Some(qualified(cluster, name));
    }
    qualified_statefulset
}

/// `statefulset` named `name`: a member's copy under the name its own cluster knows it by,
/// for a write whose body names it.
pub fn named(statefulset: &StatefulSet, name: &str) -> StatefulSet {
    let mut renamed = statefulset.clone();
    renamed.metadata.name = Some(name.to_owned());
    renamed
}

/// `fresh`, just read from the cluster `qualified_name` (`cluster/name`, or a plain name)
/// names, under that qualified name again, as the caches show it.
pub fn requalify(qualified_name: &str, fresh: StatefulSet) -> StatefulSet {
    match split(qualified_name).0 {
        Some(cluster) => qualify_statefulset(cluster, &fresh),
        None => fresh,
    }
}

/// `pod` of `cluster`, named `cluster/pod`, its controller `cluster/owner`.
pub fn qualify_pod(cluster: &str, pod: &CachedPod) -> CachedPod {
    let mut qualified_pod = pod.clone();
    qualified_pod.name = qualified(cluster, &pod.name);
    if let Some(controller) = &mut qualified_pod.controller {
        controller.name = crate::labels::intern(&qualified(cluster, &controller.name));
    }
    qualified_pod
}

/// A member cluster that cannot be trusted now: its API cannot be reached, its kubeconfig
/// cannot be used, or its watches have not listed again since they failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    pub cluster: String,
    /// What failed, for the person reading the wait.
    pub error: String,
    /// Whether the cluster was ever listed: what it last showed is then known.
    pub listed: bool,
}

/// The name a cluster that was never listed is held by in a group: any of its StatefulSets
/// may be a member.
pub fn unlisted_member(cluster: &str) -> String {
    qualified(cluster, "*")
}

/// The most of a member's error shown in a reason, in characters: enough for every refused
/// field of a kubeconfig and the chain of a connection's error, and the whole wait still fits
/// an Event's note (1000).
pub const MOST_OUTAGE_CHARS: usize = 800;

/// Marks `snapshot`'s members in a cluster that is out as unreachable, so the planner holds
/// the group naming them. A cluster that was never listed may hold members of any group
/// unseen, so every group gets a member standing for it ([`unlisted_member`]); a cluster
/// listed before, in which the group had no member, does not hold it.
///
/// The outage's error becomes the reason here, and only here: it is quoted
/// ([`crate::explained::quoted`], at most [`MOST_OUTAGE_CHARS`]), since whatever answers at the
/// member's address (or wrote its kubeconfig) writes part of it, and the reason lands on the
/// status page and in Events.
pub fn mark_outages(snapshot: &mut GroupSnapshot, outages: &[Outage]) {
    for outage in outages {
        let unreachable = Unreachable {
            cluster: outage.cluster.clone(),
            error: crate::explained::quoted(&outage.error, MOST_OUTAGE_CHARS),
        };
        let mut found = false;
        for member in &mut snapshot.statefulsets {
            if split(&member.name).0 == Some(outage.cluster.as_str()) {
                member.unreachable = Some(unreachable.clone());
                found = true;
            }
        }
        if !found && !outage.listed {
            let mut standing_in = StatefulSet::default();
            standing_in.metadata.name = Some(unlisted_member(&outage.cluster));
            let mut member = StatefulSetSnapshot::without_pods(&standing_in);
            member.unreachable = Some(unreachable);
            snapshot.statefulsets.push(member);
        }
    }
    snapshot.statefulsets.sort_by(|a, b| a.name.cmp(&b.name));
}

/// How many of `members` clusters make a majority: the records a claim across clusters must be
/// in (a downscale's in the ledgers, an eviction's in the budgets' records), so that any two
/// claims share a cluster whose record takes only one of them.
pub fn majority(members: usize) -> usize {
    members / 2 + 1
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

/// A member's kubeconfig Secret, read again (when it starts, when its watch says it changed):
/// what it holds for the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretRead<'a> {
    /// The kubeconfig under the configured key, as text.
    Kubeconfig(&'a str),
    /// The Secret says the member cannot be reached with it: gone, without the key, not a
    /// kubeconfig, refused by the allow-list, or no client can be built from it.
    Unusable,
    /// The Secret could not be read (the hub's API server did not answer, or refused): that
    /// says nothing about what it holds.
    Unread,
}

/// What becomes of a member's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconnect {
    /// As it is: connected with the same kubeconfig, or out as it was.
    Keep,
    /// A client from the kubeconfig read, in place of any before: the member is out until its
    /// watches have listed through it.
    Connect,
    /// No client: the member is out, with the Secret's problem, until the Secret is fixed.
    Disconnect,
}

/// What a member's connection, made from the kubeconfig `in_use` (none: not connected), becomes
/// once its Secret is read as `read`.
///
/// - A kubeconfig that differs from the one in use (a token rotated by `kubectl baton cluster
///   add` run again) replaces it at once: the old token may be revoked, or about to expire.
/// - A Secret changed to something unusable disconnects the member rather than keeping the
///   old connection: whoever changed it meant the old credentials to go (revoked after a leak,
///   a cluster no longer meant), and a member read with credentials nobody vouches for any
///   more is not one to act on. Out is the planner's safe side (its groups are held, nothing
///   deleted), and it is told: the group's wait names the Secret's problem, and
///   `baton_member_cluster_out` is 1.
/// - A read that failed keeps what is: a hub API server that does not answer says nothing of
///   the member, and the member's own watches say whether its credentials still work.
pub fn reconnect(in_use: Option<&str>, read: SecretRead<'_>) -> Reconnect {
    match (in_use, read) {
        (Some(in_use), SecretRead::Kubeconfig(read)) if in_use == read => Reconnect::Keep,
        (_, SecretRead::Kubeconfig(_)) => Reconnect::Connect,
        (_, SecretRead::Unusable) => Reconnect::Disconnect,
        (_, SecretRead::Unread) => Reconnect::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explained::Explained;

    #[test]
    fn a_changed_kubeconfig_reconnects_an_unusable_one_disconnects_and_an_unread_one_keeps() {
        let (old, new) = ("token: old", "token: new");
        // Read again unchanged (a relist, a label added): nothing happens.
        assert_eq!(
            reconnect(Some(old), SecretRead::Kubeconfig(old)),
            Reconnect::Keep
        );
        // Rotated: the new one, at once.
        assert_eq!(
            reconnect(Some(old), SecretRead::Kubeconfig(new)),
            Reconnect::Connect
        );
        // Not connected yet: the first usable one connects.
        assert_eq!(
            reconnect(None, SecretRead::Kubeconfig(new)),
            Reconnect::Connect
        );
        // Changed to something unusable: the old connection goes too.
        assert_eq!(
            reconnect(Some(old), SecretRead::Unusable),
            Reconnect::Disconnect
        );
        assert_eq!(reconnect(None, SecretRead::Unusable), Reconnect::Disconnect);
        // Not read at all: nothing is known of the Secret, so nothing changes.
        assert_eq!(reconnect(Some(old), SecretRead::Unread), Reconnect::Keep);
        assert_eq!(reconnect(None, SecretRead::Unread), Reconnect::Keep);
    }

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

    fn group(names: &[&str]) -> GroupSnapshot {
        let statefulsets: Vec<StatefulSet> = names
            .iter()
            .map(|name| {
                let mut statefulset = StatefulSet::default();
                statefulset.metadata.name = Some((*name).to_owned());
                statefulset
            })
            .collect();
        GroupSnapshot::from_kubernetes("ingester", statefulsets.iter(), [])
    }

    fn outage(cluster: &str, listed: bool) -> Outage {
        Outage {
            cluster: cluster.to_owned(),
            error: "connection refused".to_owned(),
            listed,
        }
    }

    #[test]
    fn only_the_members_in_a_cluster_that_is_out_are_unreachable() {
        let mut snapshot = group(&["a/ingester", "b/ingester", "c/ingester"]);
        mark_outages(&mut snapshot, &[outage("b", true)]);
        let unreachable: Vec<(&str, bool)> = snapshot
            .statefulsets
            .iter()
            .map(|member| (member.name.as_str(), member.unreachable.is_some()))
            .collect();
        assert_eq!(
            unreachable,
            [
                ("a/ingester", false),
                ("b/ingester", true),
                ("c/ingester", false)
            ]
        );
        let marked = snapshot.statefulsets[1]
            .unreachable
            .as_ref()
            .expect("marked");
        assert_eq!(
            (marked.cluster.as_str(), marked.error.as_str()),
            ("b", "connection refused")
        );
    }

    #[test]
    fn a_cluster_never_listed_holds_every_group_by_a_member_standing_for_it() {
        let mut snapshot = group(&["a/ingester", "c/ingester"]);
        mark_outages(&mut snapshot, &[outage("b", false)]);
        let names: Vec<&str> = snapshot
            .statefulsets
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(names, ["a/ingester", "b/*", "c/ingester"], "in zone order");
        assert!(snapshot.statefulsets[1].unreachable.is_some());
        let plan = crate::rollout::plan(&snapshot, jiff::Timestamp::UNIX_EPOCH);
        assert!(plan.actions.is_empty());
        assert_eq!(
            plan.waiting.map(|wait| wait.kind()),
            Some("MemberUnreachable")
        );

        // Listed before, with no member of this group: the group is not held by it.
        let mut snapshot = group(&["a/ingester", "c/ingester"]);
        mark_outages(&mut snapshot, &[outage("b", true)]);
        assert_eq!(snapshot.statefulsets.len(), 2);
    }

    #[test]
    fn a_members_error_becomes_a_reason_bounded_and_with_its_control_characters_escaped() {
        // Whatever answers at the member's address writes part of the error: a forged line,
        // a terminal escape, megabytes.
        let forged = format!(
            "HTTP 500: ok\nRolloutComplete: done\u{1b}[2J{}",
            "x".repeat(100_000)
        );
        let mut snapshot = group(&["b/ingester"]);
        mark_outages(
            &mut snapshot,
            &[Outage {
                error: forged,
                ..outage("b", true)
            }],
        );
        let error = &snapshot.statefulsets[0]
            .unreachable
            .as_ref()
            .expect("marked")
            .error;
        assert!(
            error.starts_with("HTTP 500: ok\\nRolloutComplete: done\\u{1b}[2Jxxx"),
            "{error}"
        );
        assert!(!error.chars().any(char::is_control), "{error}");
        assert_eq!(
            error.chars().count(),
            MOST_OUTAGE_CHARS + 1,
            "bounded, an ellipsis after"
        );
        assert!(error.ends_with('…'));
        let plan = crate::rollout::plan(&snapshot, jiff::Timestamp::UNIX_EPOCH);
        let message = plan.waiting.expect("held").to_string();
        assert!(message.contains(error.as_str()), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn a_cluster_name_must_be_a_dns_label() {
        assert!(valid_cluster_name("cluster-a").is_ok());
        for bad in ["", "Cluster", "a/b", "a.b", &"x".repeat(64)] {
            assert!(valid_cluster_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
