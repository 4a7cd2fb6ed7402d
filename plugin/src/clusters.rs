//! Cross-cluster rollout groups, the pure parts: `--cluster NAME[=CONTEXT]` (a member cluster as
//! the controller names it, `controller.clusters[].name`, and the kubeconfig context that reaches
//! it), and how the objects read from each member make one group's view.
//!
//! Every StatefulSet and pod read from member `a` is named `a/<name>` (`a/<pod>`) with the core's
//! [`qualify_statefulset`] and [`qualify_pod`] (uids stay: they are unique across clusters, so
//! each pod still finds its own StatefulSet), then the merged objects go through the same code
//! as one cluster's: the members show as `cluster-a/ingester`, in the controller's order.
//!
//! While `wait` follows the members, each one's watches fill a [`ClusterCache`]. A member whose
//! watch failed is [`Reading::Unreadable`] until both its watches listed afresh: its last known
//! StatefulSets are then marked unreachable in the snapshot (the core's [`mark_outages`], as the
//! controller marks a member cluster that is out), so the planner holds the group with
//! `MemberUnreachable` naming it; a member that cannot be read never counts as ready.

use std::collections::BTreeMap;

use baton_core::clusters::{
    Outage, mark_outages, qualify_pod, qualify_statefulset, split, valid_cluster_name,
};
use baton_core::commands::Reader;
use baton_core::explained::Explained;
use baton_core::pods::CachedPod;
use baton_core::rollout::{GroupSnapshot, WaitReason};
use baton_core::status::{self, GroupStatus, RolloutPhase, Waiting};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;

/// `--cluster NAME[=CONTEXT]`: a member cluster and the kubeconfig context that reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// As the controller names it (`controller.clusters[].name`): what qualifies its objects.
    pub name: String,
    /// The kubeconfig context (NAME unless given).
    pub context: String,
}

/// Parses `NAME[=CONTEXT]` (clap's value parser for `--cluster`).
pub fn parse(text: &str) -> Result<Cluster, String> {
    let (name, context) = match text.split_once('=') {
        Some((name, context)) => (name, context),
        None => (text, text),
    };
    valid_cluster_name(name).map_err(|why| {
        format!("{why}: --cluster takes NAME[=CONTEXT], NAME as the controller names the cluster")
    })?;
    if context.is_empty() {
        return Err(format!(
            "member {name} names an empty context: write --cluster {name}=CONTEXT, or --cluster {name} for context {name}"
        ));
    }
    Ok(Cluster {
        name: name.to_owned(),
        context: context.to_owned(),
    })
}

/// Each member once: a cluster given twice is a mistake (its zones would be counted twice).
pub fn distinct(members: &[Cluster]) -> Result<(), String> {
    for (index, member) in members.iter().enumerate() {
        if members[..index]
            .iter()
            .any(|earlier| earlier.name == member.name)
        {
            return Err(format!(
                "member {} is given twice: each --cluster names one cluster",
                member.name
            ));
        }
    }
    Ok(())
}

/// Where a write to `name`, a StatefulSet as the group names it across `members`
/// (`cluster-b/querier`), goes: the member whose cluster it names, under the name its own
/// cluster knows it by (`querier`), split with the core's [`split`]. A plain name, or a cluster
/// that is not among `members`, is an error saying what to write instead.
pub fn route<'m, 'n>(
    members: &'m [Cluster],
    name: &'n str,
) -> Result<(&'m Cluster, &'n str), String> {
    let example = members.first().map_or("cluster-a", |member| &member.name);
    match split(name) {
        (None, _) => Err(format!(
            "with --cluster, name the StatefulSet with its member cluster, as status shows it: \
             CLUSTER/{name} (e.g. {example}/{name})"
        )),
        (Some(cluster), local) => members
            .iter()
            .find(|member| member.name == cluster)
            .map(|member| (member, local))
            .ok_or_else(|| {
                let given: Vec<&str> = members.iter().map(|member| member.name.as_str()).collect();
                format!(
                    "{name} is in member cluster {cluster}, which is not among the members given \
                     ({}): add --cluster {cluster}[=CONTEXT]",
                    given.join(", ")
                )
            }),
    }
}

/// The namespace the members share: `-n`, else the one every member's context names (a context
/// without one names `default`). Contexts that disagree are an error naming each.
pub fn shared_namespace(
    explicit: Option<&str>,
    contexts: &[(&str, Option<&str>)],
) -> Result<String, String> {
    if let Some(namespace) = explicit {
        return Ok(namespace.to_owned());
    }
    let of = |namespace: Option<&str>| namespace.unwrap_or("default").to_owned();
    let first = contexts.first().map_or_else(|| of(None), |(_, ns)| of(*ns));
    if contexts
        .iter()
        .all(|(_, namespace)| of(*namespace) == first)
    {
        return Ok(first);
    }
    let each: Vec<String> = contexts
        .iter()
        .map(|(member, namespace)| format!("{member}: {}", of(*namespace)))
        .collect();
    Err(format!(
        "the members' contexts name different namespaces ({}), and a group's members share one: say which with -n",
        each.join(", ")
    ))
}

/// Every member's objects as one cluster's: named `member/name`, in member order.
pub fn merge<'a>(
    reads: impl IntoIterator<
        Item = (
            &'a str,
            impl IntoIterator<Item = &'a StatefulSet>,
            impl IntoIterator<Item = &'a CachedPod>,
        ),
    >,
) -> (Vec<StatefulSet>, Vec<CachedPod>) {
    let mut statefulsets = Vec::new();
    let mut pods = Vec::new();
    for (member, its_statefulsets, its_pods) in reads {
        statefulsets.extend(
            its_statefulsets
                .into_iter()
                .map(|statefulset| qualify_statefulset(member, statefulset)),
        );
        pods.extend(its_pods.into_iter().map(|pod| qualify_pod(member, pod)));
    }
    (statefulsets, pods)
}

/// Which of a member's two watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    StatefulSets,
    Pods,
}

/// Where one watch of a member stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WatchState {
    /// Started, its first list not in yet: the member is known as it was read before.
    Listing,
    /// Listed, and following since.
    Listed,
    /// Failed (the error); only a fresh list makes it [`WatchState::Listed`] again.
    Failed(String),
}

/// Whether a member can be read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// Both watches listed, and follow it.
    Read,
    /// A watch is still on its first list (and none failed): the member is as first read.
    Listing,
    /// A watch failed and has not listed since: the member's objects are only as they were.
    Unreadable(String),
}

/// What `wait` knows of one member: its group's StatefulSets and its namespace's pods (by
/// name, unqualified), and whether its watches can be trusted.
#[derive(Debug, Clone)]
pub struct ClusterCache {
    pub name: String,
    statefulsets: BTreeMap<String, StatefulSet>,
    pods: BTreeMap<String, CachedPod>,
    statefulsets_watch: WatchState,
    pods_watch: WatchState,
}

impl ClusterCache {
    /// Cluster `name` as first read (before its watches list).
    pub fn new(
        name: &str,
        statefulsets: impl IntoIterator<Item = StatefulSet>,
        pods: impl IntoIterator<Item = CachedPod>,
    ) -> Self {
        let mut cache = Self {
            name: name.to_owned(),
            statefulsets: BTreeMap::new(),
            pods: BTreeMap::new(),
            statefulsets_watch: WatchState::Listing,
            pods_watch: WatchState::Listing,
        };
        cache.replace_statefulsets(statefulsets);
        cache.replace_pods(pods);
        cache
    }

    fn replace_statefulsets(&mut self, statefulsets: impl IntoIterator<Item = StatefulSet>) {
        self.statefulsets = statefulsets
            .into_iter()
            .map(|statefulset| (statefulset.name_any(), statefulset))
            .collect();
    }

    fn replace_pods(&mut self, pods: impl IntoIterator<Item = CachedPod>) {
        self.pods = pods
            .into_iter()
            .map(|pod| (pod.name.clone(), pod))
            .collect();
    }

    fn watch(&mut self, watch: Watch) -> &mut WatchState {
        match watch {
            Watch::StatefulSets => &mut self.statefulsets_watch,
            Watch::Pods => &mut self.pods_watch,
        }
    }

    /// The StatefulSets watch listed these: all there are now.
    pub fn listed_statefulsets(&mut self, statefulsets: impl IntoIterator<Item = StatefulSet>) {
        self.replace_statefulsets(statefulsets);
        self.statefulsets_watch = WatchState::Listed;
    }

    /// The pods watch listed these: all there are now.
    pub fn listed_pods(&mut self, pods: impl IntoIterator<Item = CachedPod>) {
        self.replace_pods(pods);
        self.pods_watch = WatchState::Listed;
    }

    pub fn applied_statefulset(&mut self, statefulset: StatefulSet) {
        self.statefulsets
            .insert(statefulset.name_any(), statefulset);
    }

    pub fn deleted_statefulset(&mut self, statefulset: &StatefulSet) {
        self.statefulsets.remove(&statefulset.name_any());
    }

    pub fn applied_pod(&mut self, pod: CachedPod) {
        self.pods.insert(pod.name.clone(), pod);
    }

    pub fn deleted_pod(&mut self, pod: &CachedPod) {
        self.pods.remove(&pod.name);
    }

    /// `watch` failed with `error`: the member cannot be read until it lists again.
    pub fn failed(&mut self, watch: Watch, error: String) {
        *self.watch(watch) = WatchState::Failed(error);
    }

    /// Whether the member can be read now (a failure first: it outweighs a watch listing).
    pub fn reading(&self) -> Reading {
        match (&self.statefulsets_watch, &self.pods_watch) {
            (WatchState::Failed(error), _) | (_, WatchState::Failed(error)) => {
                Reading::Unreadable(error.clone())
            }
            (WatchState::Listed, WatchState::Listed) => Reading::Read,
            _ => Reading::Listing,
        }
    }

    pub fn statefulsets(&self) -> impl Iterator<Item = &StatefulSet> {
        self.statefulsets.values()
    }

    pub fn pods(&self) -> impl Iterator<Item = &CachedPod> {
        self.pods.values()
    }
}

/// The snapshot of `group` across `members`: their objects merged ([`merge`]), and each member
/// that cannot be read an outage (the core's [`mark_outages`], as the controller marks its
/// own): its StatefulSets are unreachable, so the planner holds the group, naming them. Every
/// member here was listed once (`wait` reads each before it follows it).
pub fn snapshot(group: &str, members: &[&ClusterCache], reader: &Reader) -> GroupSnapshot {
    let (statefulsets, pods) = merge(
        members
            .iter()
            .map(|member| (member.name.as_str(), member.statefulsets(), member.pods())),
    );
    let mut snapshot = GroupSnapshot::from_kubernetes(group, &statefulsets, &pods);
    snapshot.reach.reader = reader.clone();
    let outages: Vec<Outage> = unreadable(members)
        .into_iter()
        .map(|(cluster, error)| Outage {
            cluster,
            error,
            listed: true,
        })
        .collect();
    mark_outages(&mut snapshot, &outages);
    snapshot
}

/// The view of `group` across `members` at `now`: the core's view of [`snapshot`], never
/// complete (nor rolled back) while a member cannot be read. The planner holds such a group
/// (`MemberUnreachable`), but a zone's phase is judged from its pods as last seen, so a member
/// lost once every zone was done would otherwise show a complete group: its zones, and the
/// group, are `waiting` instead, for that member.
pub fn view(
    group: &str,
    members: &[&ClusterCache],
    reader: &Reader,
    now: jiff::Timestamp,
) -> GroupStatus {
    let snapshot = snapshot(group, members, reader);
    // The core never calls a member that cannot be read complete, nor its group.
    let mut view = status::compute(&snapshot, None, now);
    let Some((cluster, error)) = unreadable(members).into_iter().next() else {
        return view;
    };
    // A member cluster without any of the group's StatefulSets as last seen still cannot
    // say it has none now.
    if matches!(
        view.phase,
        RolloutPhase::Complete | RolloutPhase::RolledBack
    ) {
        let (kind, message) = match snapshot
            .statefulsets
            .iter()
            .find(|statefulset| statefulset.unreachable.is_some())
        {
            Some(statefulset) => WaitReason::MemberUnreachable {
                statefulset: statefulset.name.clone(),
                cluster: cluster.clone(),
                error: error.clone(),
            }
            .kind_and_message(),
            None => (
                "MemberUnreachable",
                format!(
                    "member cluster {cluster} cannot be read ({error}); whether it holds members \
                     of the group is not known until it is read again"
                ),
            ),
        };
        view.phase = RolloutPhase::Waiting;
        view.waiting = Some(Waiting {
            kind: kind.to_owned(),
            message,
            since: None,
        });
    }
    view
}

/// The members that cannot be read now, with why: while any is, `wait` draws no conclusion
/// (even a member none of whose StatefulSets is known may have gained one).
pub fn unreadable(members: &[&ClusterCache]) -> Vec<(String, String)> {
    members
        .iter()
        .filter_map(|member| match member.reading() {
            Reading::Unreadable(error) => Some((member.name.clone(), error)),
            Reading::Read | Reading::Listing => None,
        })
        .collect()
}

/// `error` and its sources, as one line (a connection error's cause is several levels down:
/// "client error (Connect): tcp connect error: Connection refused").
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    const NOW: i64 = 1_800_000_000;

    /// StatefulSet `name` of group `ingester` in `cluster` (its uid names both, as uids are
    /// unique across clusters), `updated` of its `replicas` pods at the update revision `new`.
    fn statefulset(cluster: &str, name: &str, replicas: i32, updated: i32) -> StatefulSet {
        let current = if updated == replicas { "new" } else { "old" };
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": "mimir", "uid": format!("uid-{cluster}-{name}"),
                "labels": {"rollout-group": "ingester", "zone": name},
                "generation": 2,
            },
            "spec": {
                "replicas": replicas, "selector": {"matchLabels": {"zone": name}},
                "updateStrategy": {"type": "OnDelete"}, "serviceName": name,
                "template": {},
            },
            "status": {
                "observedGeneration": 2, "replicas": replicas, "readyReplicas": replicas,
                "availableReplicas": replicas, "updatedReplicas": updated,
                "currentRevision": current, "updateRevision": "new",
            },
        }))
        .expect("a StatefulSet")
    }

    /// Pod `ordinal` of StatefulSet `name` in `cluster`, ready, at `revision`.
    fn pod(cluster: &str, name: &str, ordinal: u32, revision: &str) -> CachedPod {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("{name}-{ordinal}"), "namespace": "mimir",
                "uid": format!("uid-{cluster}-{name}-{ordinal}"),
                "labels": {"zone": name, "controller-revision-hash": revision},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                    "uid": format!("uid-{cluster}-{name}"), "controller": true,
                }],
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0,
                                       "image": "i", "imageID": "", "state": {"running": {}}}],
            },
        }))
        .expect("a pod");
        CachedPod::of(&pod)
    }

    /// Cluster `cluster` with StatefulSet `ingester` of 2 pods, `updated` of them updated, its
    /// watches listed.
    fn member(cluster: &str, updated: u32) -> ClusterCache {
        let pods: Vec<CachedPod> = (0..2)
            .map(|ordinal| {
                let revision = if ordinal < updated { "new" } else { "old" };
                pod(cluster, "ingester", ordinal, revision)
            })
            .collect();
        let updated = i32::try_from(updated).expect("small");
        let mut cache = ClusterCache::new(cluster, [], []);
        cache.listed_statefulsets([statefulset(cluster, "ingester", 2, updated)]);
        cache.listed_pods(pods);
        cache
    }

    fn view_of(members: &[&ClusterCache]) -> GroupStatus {
        view(
            "ingester",
            members,
            &Reader::default(),
            jiff::Timestamp::from_second(NOW).expect("a time"),
        )
    }

    #[test]
    fn a_member_is_name_then_context_which_defaults_to_the_name() {
        assert_eq!(
            parse("cluster-a").unwrap(),
            Cluster {
                name: "cluster-a".to_owned(),
                context: "cluster-a".to_owned()
            }
        );
        assert_eq!(
            parse("cluster-a=kind-a@prod").unwrap(),
            Cluster {
                name: "cluster-a".to_owned(),
                context: "kind-a@prod".to_owned()
            }
        );
        for bad in ["Cluster", "a/b", "", "=ctx"] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains("not a DNS label"), "{bad:?}: {error}");
            assert!(error.contains("NAME[=CONTEXT]"), "{error}");
        }
        let error = parse("a=").unwrap_err();
        assert!(error.contains("--cluster a=CONTEXT"), "{error}");
    }

    #[test]
    fn a_member_given_twice_is_named() {
        let members = [
            parse("a").unwrap(),
            parse("b").unwrap(),
            parse("a=x").unwrap(),
        ];
        assert_eq!(
            distinct(&members).unwrap_err(),
            "member a is given twice: each --cluster names one cluster"
        );
        assert!(distinct(&members[..2]).is_ok());
    }

    #[test]
    fn each_write_goes_to_the_member_its_name_qualifies_under_its_own_name() {
        let members = [
            parse("cluster-a").unwrap(),
            parse("cluster-b=prod-us").unwrap(),
            parse("cluster-c").unwrap(),
        ];
        let (member, local) = route(&members, "cluster-b/querier").unwrap();
        assert_eq!(
            (member.name.as_str(), member.context.as_str(), local),
            ("cluster-b", "prod-us", "querier")
        );
        let (member, local) = route(&members, "cluster-c/querier-zone-c").unwrap();
        assert_eq!(
            (member.name.as_str(), local),
            ("cluster-c", "querier-zone-c")
        );
        // A plain name says which cluster to name; a cluster not given says to add it
        let error = route(&members, "querier").unwrap_err();
        assert!(
            error.contains("CLUSTER/querier (e.g. cluster-a/querier)"),
            "{error}"
        );
        let error = route(&members, "cluster-d/querier").unwrap_err();
        assert_eq!(
            error,
            "cluster-d/querier is in member cluster cluster-d, which is not among the members \
             given (cluster-a, cluster-b, cluster-c): add --cluster cluster-d[=CONTEXT]"
        );
    }

    #[test]
    fn members_share_the_namespace_their_contexts_or_n_name() {
        assert_eq!(
            shared_namespace(None, &[("a", Some("mimir")), ("b", Some("mimir"))]).unwrap(),
            "mimir"
        );
        assert_eq!(
            shared_namespace(None, &[("a", None), ("b", Some("default"))]).unwrap(),
            "default"
        );
        let error = shared_namespace(None, &[("a", Some("mimir")), ("b", None)]).unwrap_err();
        assert!(
            error.contains("(a: mimir, b: default)") && error.contains("-n"),
            "{error}"
        );
        assert_eq!(
            shared_namespace(Some("x"), &[("a", Some("mimir")), ("b", None)]).unwrap(),
            "x"
        );
    }

    #[test]
    fn members_with_the_same_names_are_told_apart_and_each_pod_stays_with_its_statefulset() {
        // Given StatefulSet ingester in two clusters, all updated in a, none in b
        let a = member("cluster-a", 2);
        let b = member("cluster-b", 0);
        // When their objects are merged
        let (statefulsets, pods) = merge(
            [&a, &b].map(|member| (member.name.as_str(), member.statefulsets(), member.pods())),
        );
        // Then each is named for its cluster, as the controller names it
        let names: Vec<String> = statefulsets.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["cluster-a/ingester", "cluster-b/ingester"]);
        let pod_names: Vec<&str> = pods.iter().map(|pod| pod.name.as_str()).collect();
        assert_eq!(
            pod_names,
            [
                "cluster-a/ingester-0",
                "cluster-a/ingester-1",
                "cluster-b/ingester-0",
                "cluster-b/ingester-1"
            ]
        );
        // And the view has a zone per member, each counting its own cluster's pods
        let view = view_of(&[&a, &b]);
        let zones: Vec<(&str, u32, u32)> = view
            .zones
            .iter()
            .map(|zone| (zone.statefulset.as_str(), zone.updated, zone.total))
            .collect();
        assert_eq!(
            zones,
            [("cluster-a/ingester", 2, 2), ("cluster-b/ingester", 0, 2)]
        );
        assert_eq!(view.zones[0].phase, RolloutPhase::Complete);
        assert_ne!(view.phase, RolloutPhase::Complete);
        // and the next pod deleted is cluster b's, named for its cluster
        let snapshot = snapshot("ingester", &[&a, &b], &Reader::default());
        let plan = baton_core::rollout::plan(&snapshot, jiff::Timestamp::from_second(NOW).unwrap());
        let deleted: Vec<&str> = plan.deletions().filter_map(|action| action.pod()).collect();
        assert_eq!(deleted, ["cluster-b/ingester-0"], "{plan:?}");
    }

    #[test]
    fn every_member_complete_is_a_complete_group() {
        let view = view_of(&[&member("cluster-a", 2), &member("cluster-b", 2)]);
        assert_eq!(view.phase, RolloutPhase::Complete, "{view:?}");
    }

    #[test]
    fn a_member_that_cannot_be_read_is_never_ready_and_is_named() {
        // Given two members, both complete as last seen, b's watch failing since
        let a = member("cluster-a", 2);
        let mut b = member("cluster-b", 2);
        b.failed(Watch::Pods, "connection refused".to_owned());
        assert_eq!(
            b.reading(),
            Reading::Unreadable("connection refused".to_owned())
        );
        // Then the group is not complete: it waits for b, naming its cluster and the error
        let snapshot = snapshot("ingester", &[&a, &b], &Reader::default());
        assert_eq!(snapshot.statefulsets[0].unreachable, None);
        let plan = baton_core::rollout::plan(&snapshot, jiff::Timestamp::from_second(NOW).unwrap());
        assert!(
            matches!(
                &plan.waiting,
                Some(WaitReason::MemberUnreachable { statefulset, cluster, error })
                    if statefulset == "cluster-b/ingester" && cluster == "cluster-b"
                        && error == "connection refused"
            ),
            "{plan:?}"
        );
        let held = view_of(&[&a, &b]);
        assert_eq!(held.phase, RolloutPhase::Waiting, "{held:?}");
        let zones: Vec<(&str, RolloutPhase)> = held
            .zones
            .iter()
            .map(|zone| (zone.statefulset.as_str(), zone.phase))
            .collect();
        assert_eq!(
            zones,
            [
                ("cluster-a/ingester", RolloutPhase::Complete),
                ("cluster-b/ingester", RolloutPhase::Waiting)
            ]
        );
        let waiting = held.waiting.expect("waits");
        assert_eq!(waiting.kind, "MemberUnreachable");
        assert!(
            waiting
                .message
                .contains("cluster cluster-b is unreachable (connection refused)"),
            "{}",
            waiting.message
        );
        assert_eq!(
            unreadable(&[&a, &b]),
            [("cluster-b".to_owned(), "connection refused".to_owned())]
        );
        // When its StatefulSets watch fails too, then its pods are listed afresh, but not yet
        // its StatefulSets, it still cannot be read
        b.failed(Watch::StatefulSets, "connection refused".to_owned());
        b.listed_pods(member("cluster-b", 2).pods().cloned());
        assert_eq!(
            unreadable(&[&a, &b]),
            [("cluster-b".to_owned(), "connection refused".to_owned())]
        );
        assert_ne!(view_of(&[&a, &b]).phase, RolloutPhase::Complete);
        b.listed_statefulsets(member("cluster-b", 2).statefulsets().cloned());
        // Then once both are, the group is complete again
        assert_eq!(b.reading(), Reading::Read);
        assert_eq!(view_of(&[&a, &b]).phase, RolloutPhase::Complete);
    }

    #[test]
    fn a_member_that_cannot_be_read_holds_the_group_even_when_none_of_its_members_is_known() {
        // Given a complete member, and a member cluster with none of the group's StatefulSets
        // as last read, its watch failing since
        let a = member("cluster-a", 2);
        let mut c = ClusterCache::new("cluster-c", [], []);
        c.listed_pods([]);
        c.failed(Watch::StatefulSets, "503 Service Unavailable".to_owned());
        // Then the group is not complete: c may hold a member by now
        let held = view_of(&[&a, &c]);
        assert_eq!(held.phase, RolloutPhase::Waiting, "{held:?}");
        let waiting = held.waiting.expect("waits");
        assert_eq!(waiting.kind, "MemberUnreachable");
        assert!(
            waiting
                .message
                .starts_with("member cluster cluster-c cannot be read (503 Service Unavailable)"),
            "{}",
            waiting.message
        );
        // and once it lists, still with none, the group is complete
        c.listed_statefulsets([]);
        assert_eq!(view_of(&[&a, &c]).phase, RolloutPhase::Complete);
    }

    #[test]
    fn a_failed_watch_outweighs_the_other_still_listing() {
        let mut cache = ClusterCache::new("a", [], []);
        assert_eq!(cache.reading(), Reading::Listing);
        cache.listed_pods([]);
        assert_eq!(cache.reading(), Reading::Listing);
        cache.failed(Watch::StatefulSets, "forbidden".to_owned());
        assert_eq!(cache.reading(), Reading::Unreadable("forbidden".to_owned()));
        // A change seen on the other watch does not make it readable
        cache.applied_pod(pod("a", "ingester", 0, "new"));
        assert_eq!(cache.reading(), Reading::Unreadable("forbidden".to_owned()));
    }

    #[test]
    fn changes_apply_by_name_and_a_list_replaces_everything() {
        let mut cache = member("a", 0);
        cache.applied_pod(pod("a", "ingester", 0, "new"));
        cache.deleted_pod(&pod("a", "ingester", 1, "old"));
        let pods: Vec<(&str, Option<&str>)> = cache
            .pods()
            .map(|pod| {
                (
                    pod.name.as_str(),
                    pod.labels.get("controller-revision-hash"),
                )
            })
            .collect();
        assert_eq!(pods, [("ingester-0", Some("new"))]);
        cache.applied_statefulset(statefulset("a", "ingester-b", 1, 0));
        assert_eq!(cache.statefulsets().count(), 2);
        cache.deleted_statefulset(&statefulset("a", "ingester", 2, 0));
        let names: Vec<String> = cache.statefulsets().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["ingester-b"]);
        cache.listed_statefulsets([]);
        assert_eq!(cache.statefulsets().count(), 0);
    }

    #[test]
    fn an_error_says_its_causes_once() {
        let inner =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Outer(#[source] std::io::Error);
        assert_eq!(
            error_chain(&Outer(inner)),
            "client error (Connect): connection refused"
        );
        #[derive(Debug, thiserror::Error)]
        #[error("watch failed: {0}")]
        struct Says(#[source] std::io::Error);
        let inner = std::io::Error::other("gone");
        assert_eq!(error_chain(&Says(inner)), "watch failed: gone");
    }
}
