//! Where the commands that act on one group (`plan`, `approve`, `rollback`, `pause`, `resume`)
//! read it and send their writes: the one cluster of the context, or, with `--cluster`, every
//! member cluster ([`Scope`]).
//!
//! Across members a group is read with the same reader as `status` and `wait`
//! ([`access::read_clusters`], then [`clusters::merge`]): every member at once, each object named
//! for its cluster (`cluster-b/querier`), so the planner and the gates decide on the same view
//! as the controller. Nothing is written on a partial view: a member that cannot be read refuses
//! the command, naming it ([`Scope::read_group_to_write`]). Each write goes to the member its
//! name qualifies, under the name its own cluster knows it by ([`clusters::route`], the core's
//! `split`). A change that counts only once every member carries it (an approval, a rollback
//! request) is written on each, and when one member refuses it the error says where it landed,
//! where not and why, and that the same command finishes it ([`all_written`]): the command
//! recomputes the same change from the same state, so running it again is harmless.

use baton_core::commands::{Reach, Reader};
use baton_core::pods::CachedPod;
use baton_core::rollout::GroupSnapshot;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use kube::ResourceExt;

use crate::access::{self, Access, AccessError, ClusterAccess, History, Target};
use crate::clusters::{self, Cluster};
use crate::render;

/// Said of a user when the API server did not name them (no SelfSubjectReview).
pub const UNNAMED: &str = "a user the API server did not name";

/// The clusters a command acts in.
pub enum Scope {
    /// The context's cluster (no `--cluster`): names are the StatefulSets' own.
    One(Access),
    /// The member clusters of `--cluster`: names are qualified (`cluster-b/querier`).
    Clusters(Vec<ClusterAccess>),
}

/// A group as read, its StatefulSets and pods named as the controller names them.
#[derive(Debug, Clone)]
pub struct GroupRead {
    pub group: String,
    pub statefulsets: Vec<StatefulSet>,
    pub pods: Vec<CachedPod>,
    /// Every ControllerRevision read ([`History::With`]; none otherwise). Not renamed: each
    /// finds its StatefulSet by uid, unique across clusters.
    pub revisions: Vec<ControllerRevision>,
    /// How the command line reached the group, for the commands messages print.
    pub reader: Reader,
}

impl GroupRead {
    /// The group's snapshot, as the controller takes it.
    pub fn snapshot(&self) -> GroupSnapshot {
        let mut snapshot =
            GroupSnapshot::from_kubernetes(&self.group, &self.statefulsets, &self.pods);
        snapshot.reach.reader = self.reader.clone();
        snapshot
    }

    /// Its members' names, in the order read.
    pub fn names(&self) -> Vec<String> {
        self.statefulsets
            .iter()
            .map(ResourceExt::name_any)
            .collect()
    }
}

impl Scope {
    /// The context's cluster without `members`, else each member through its own context.
    pub async fn connect(target: &Target, members: &[Cluster]) -> Result<Self, AccessError> {
        if members.is_empty() {
            Ok(Self::One(Access::connect(target).await?))
        } else {
            Ok(Self::Clusters(
                Access::connect_members(target, members).await?,
            ))
        }
    }

    /// The namespace (the members share one).
    pub fn namespace(&self) -> &str {
        match self {
            Self::One(access) => &access.namespace,
            Self::Clusters(members) => members
                .first()
                .map(|member| member.access.namespace.as_str())
                .unwrap_or_default(),
        }
    }

    /// Where it read, for messages: `context prod-eu`, `member clusters cluster-a (context
    /// prod-eu), cluster-b`, or, in a pod without a kubeconfig, its service account.
    pub fn read_where(&self) -> String {
        match self {
            Self::One(access) => match &access.context {
                Some(context) => format!("context {context}"),
                None => "the in-cluster service account".to_owned(),
            },
            Self::Clusters(members) => {
                let named: Vec<String> = members
                    .iter()
                    .map(|member| {
                        if member.member.context == member.member.name {
                            member.member.name.clone()
                        } else {
                            format!("{} (context {})", member.member.name, member.member.context)
                        }
                    })
                    .collect();
                format!("member clusters {}", named.join(", "))
            }
        }
    }

    /// How the command line reached the cluster(s), for the commands messages print.
    pub fn reader(&self) -> Reader {
        match self {
            Self::One(access) => access.reader.clone(),
            Self::Clusters(members) => members
                .first()
                .map(|member| member.access.reader.clone())
                .unwrap_or_default(),
        }
    }

    /// How the commands messages print reach the group: its namespace, the command line's
    /// kubeconfig and context, and across members every member given (`--cluster`).
    pub fn reach(&self) -> Reach {
        let clusters = match self {
            Self::One(_) => Vec::new(),
            Self::Clusters(members) => members
                .iter()
                .map(|member| member.member.name.clone())
                .collect(),
        };
        Reach {
            namespace: self.namespace().to_owned(),
            clusters,
            reader: self.reader(),
        }
    }

    /// Group `group` as read (an error when no cluster holds any of it): across members, every
    /// member read at once and merged, each failure named for its member.
    pub async fn read_group(
        &self,
        group: &str,
        history: History,
    ) -> Result<GroupRead, AccessError> {
        match self {
            Self::One(access) => {
                let statefulsets = access.group_members(group).await?;
                let pods = access.pods().await?;
                let revisions = match history {
                    History::With => access.controller_revisions().await?,
                    History::Without => Vec::new(),
                };
                Ok(GroupRead {
                    group: group.to_owned(),
                    statefulsets,
                    pods,
                    revisions,
                    reader: access.reader.clone(),
                })
            }
            Self::Clusters(members) => {
                let reads = access::read_clusters(members, Some(group), history).await?;
                let (statefulsets, pods) = clusters::merge(
                    reads
                        .iter()
                        .map(|read| (read.member.as_str(), &read.statefulsets, &read.pods)),
                );
                Ok(GroupRead {
                    group: group.to_owned(),
                    statefulsets,
                    pods,
                    revisions: reads.into_iter().flat_map(|read| read.revisions).collect(),
                    reader: self.reader(),
                })
            }
        }
    }

    /// [`Scope::read_group`] for a command about to write: across members, a member that
    /// cannot be read refuses it, saying nothing was written (a decision on the others alone
    /// could be one the controller never makes).
    pub async fn read_group_to_write(
        &self,
        group: &str,
        history: History,
    ) -> Result<GroupRead, AccessError> {
        self.read_group(group, history)
            .await
            .map_err(|error| match self {
                Self::One(_) => error,
                Self::Clusters(_) => AccessError::NothingWritten(Box::new(error)),
            })
    }

    /// Where `name` lives: its cluster's access, its name there, and its member (across
    /// members).
    fn locate<'a>(
        &'a self,
        name: &'a str,
    ) -> Result<(&'a Access, &'a str, Option<&'a ClusterAccess>), AccessError> {
        match self {
            Self::One(access) => Ok((access, name, None)),
            Self::Clusters(accesses) => {
                let given: Vec<Cluster> = accesses
                    .iter()
                    .map(|member| member.member.clone())
                    .collect();
                let (member, local) =
                    clusters::route(&given, name).map_err(AccessError::Clusters)?;
                let access = accesses
                    .iter()
                    .find(|access| access.member == *member)
                    .expect("routed to a member given");
                Ok((&access.access, local, Some(access)))
            }
        }
    }

    /// StatefulSet `name` (as the group names it), which must be in a rollout group, read from
    /// its own cluster: it and its group.
    pub async fn grouped_statefulset(
        &self,
        name: &str,
    ) -> Result<(StatefulSet, String), AccessError> {
        let (access, local, member) = self.locate(name)?;
        access
            .grouped_statefulset(local)
            .await
            .map_err(|error| named(member, error))
    }

    /// Sets (`Some`) or removes (`None`) annotations of StatefulSet `name` (as the group names
    /// it) in one merge patch, in its own cluster under its own name there.
    pub async fn patch_annotations(
        &self,
        name: &str,
        changes: &[(&str, Option<&str>)],
    ) -> Result<(), AccessError> {
        let (access, local, member) = self.locate(name)?;
        access
            .patch_annotations(local, changes)
            .await
            .map_err(|error| named(member, error))
    }

    /// The same `changes` on each of `names`, all at once: how each went.
    pub async fn patch_each(
        &self,
        names: &[String],
        changes: &[(&str, Option<&str>)],
    ) -> Vec<(String, Result<(), AccessError>)> {
        let writes = names
            .iter()
            .map(|name| async move { (name.clone(), self.patch_annotations(name, changes).await) });
        futures::future::join_all(writes).await
    }

    /// Who the API servers take the caller for ([`Access::identity`]): across members each
    /// member's, said once when they agree.
    pub async fn identity(&self) -> String {
        match self {
            Self::One(access) => access
                .identity()
                .await
                .unwrap_or_else(|| UNNAMED.to_owned()),
            Self::Clusters(members) => {
                let answers = futures::future::join_all(
                    members.iter().map(|member| member.access.identity()),
                )
                .await;
                who(members
                    .iter()
                    .map(|member| member.member.name.as_str())
                    .zip(answers))
            }
        }
    }
}

/// `error`, named for `member` when there is one.
fn named(member: Option<&ClusterAccess>, error: AccessError) -> AccessError {
    match member {
        Some(member) => member.named(error),
        None => error,
    }
}

/// Who each member's API server took the caller for, as one name when they agree, else each
/// with its member: `alice in cluster-a, bob in cluster-b`.
pub fn who<'a>(answers: impl IntoIterator<Item = (&'a str, Option<String>)>) -> String {
    let answers: Vec<(&str, String)> = answers
        .into_iter()
        .map(|(member, user)| (member, user.unwrap_or_else(|| UNNAMED.to_owned())))
        .collect();
    match answers.first() {
        None => UNNAMED.to_owned(),
        Some((_, first)) if answers.iter().all(|(_, user)| user == first) => first.clone(),
        Some(_) => answers
            .iter()
            .map(|(member, user)| format!("{user} in {member}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The outcome of writing `what` (`the approval`, `the rollback request`) on several
/// StatefulSets, when it counts only once every one carries it: Ok when every write landed,
/// else an error naming where it landed, where it did not and why, that `what` does not take
/// effect (`effect`: `the approval does not count`) until it is on every member, and that the
/// same command finishes it.
pub fn all_written(
    what: &str,
    effect: &str,
    outcomes: Vec<(String, Result<(), AccessError>)>,
) -> Result<(), AccessError> {
    let mut written = Vec::new();
    let mut failed = Vec::new();
    for (name, outcome) in outcomes {
        match outcome {
            Ok(()) => written.push(render::statefulset(&name)),
            Err(error) => failed.push(format!("{} ({error})", render::statefulset(&name))),
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    let failed = failed.join("; ");
    Err(AccessError::Unfinished(if written.is_empty() {
        format!(
            "{what} was written on no member: not on {failed}; nothing changed: run the same \
             command again once that is fixed"
        )
    } else {
        format!(
            "{what} was written on {} but not on {failed}: {effect} until it is on every member; \
             run the same command again to finish it (it writes the same again where it is \
             already)",
            written.join(", ")
        )
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::fake_api::{FakeCluster, NAMESPACE, member, unreachable};
    use crate::{approval, exit, pause};

    /// StatefulSet `querier` of group `querier` in `cluster`, 2 ready pods at revision `old`,
    /// its template changed to `new`, asking for approval of each zone's first step.
    fn querier(cluster: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {
                "name": "querier", "namespace": NAMESPACE, "uid": format!("uid-{cluster}"),
                "labels": {"rollout-group": "querier"},
                "annotations": {"baton.dev/approval": "zone"},
                "generation": 2,
            },
            "spec": {
                "replicas": 2, "selector": {"matchLabels": {"app": "querier"}},
                "updateStrategy": {"type": "OnDelete"}, "serviceName": "querier",
                "template": {},
            },
            "status": {
                "observedGeneration": 2, "replicas": 2, "readyReplicas": 2,
                "availableReplicas": 2, "updatedReplicas": 0,
                "currentRevision": "old", "updateRevision": "new",
            },
        })
    }

    fn pods(cluster: &str) -> Vec<Value> {
        (0..2)
            .map(|ordinal| {
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {
                        "name": format!("querier-{ordinal}"), "namespace": NAMESPACE,
                        "uid": format!("uid-{cluster}-{ordinal}"),
                        "labels": {"app": "querier", "controller-revision-hash": "old"},
                        "ownerReferences": [{
                            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "querier",
                            "uid": format!("uid-{cluster}"), "controller": true,
                        }],
                    },
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True",
                                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                    },
                })
            })
            .collect()
    }

    async fn cluster(name: &str) -> FakeCluster {
        FakeCluster::start(vec![querier(name)], pods(name)).await
    }

    const STEP: &str = "cluster-a/querier/new/0";

    #[tokio::test]
    async fn a_member_that_cannot_be_read_refuses_a_write_naming_it_and_nothing_is_written() {
        // Given cluster-a and cluster-b served, cluster-c unreachable
        let (a, b) = (cluster("cluster-a").await, cluster("cluster-b").await);
        let scope = Scope::Clusters(vec![
            member("cluster-a", &a.url),
            member("cluster-b", &b.url),
            member("cluster-c", &unreachable().await),
        ]);
        // When the awaited step is approved across the three
        let error = approval::run(&scope, "querier", None)
            .await
            .unwrap_err()
            .to_string();
        // Then it is refused, naming cluster-c, and no member was written
        assert!(
            error.starts_with("cannot reach member cluster cluster-c (context cluster-c"),
            "{error}"
        );
        assert!(error.ends_with("nothing written: a command that writes across member clusters reads every member first"), "{error}");
        assert_eq!(a.patches(), []);
        assert_eq!(b.patches(), []);
        // as for a rollback and a resume
        let error = crate::rollback::run(&scope, "querier", "bad")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cluster-c") && error.contains("nothing written"),
            "{error}"
        );
        let error = pause::run(&scope, "cluster-a/querier", pause::Command::Resume)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cluster-c") && error.contains("nothing written"),
            "{error}"
        );
        assert_eq!(a.patches(), []);
        // but a pause needs only its own member: it pauses cluster-b's, in cluster-b
        let paused = pause::run(&scope, "cluster-b/querier", pause::Command::Pause)
            .await
            .unwrap();
        assert_eq!(
            paused[0],
            "statefulset/querier in cluster cluster-b: grafana.com/rollout-paused set to \"true\""
        );
        // saying what it does not hold, with the command that holds the group across members
        assert!(
            paused[1].starts_with("a pause holds only cluster-b/querier's own pods")
                && paused[1].ends_with(
                    "kubectl baton pause querier -n mimir --cluster cluster-a --cluster cluster-b \
                     --cluster cluster-c"
                ),
            "{paused:?}"
        );
        assert_eq!(
            b.patches(),
            [(
                "querier".to_owned(),
                json!({"metadata": {"annotations": {"grafana.com/rollout-paused": "true"}}})
            )]
        );
        assert_eq!(a.patches(), []);
    }

    #[tokio::test]
    async fn an_approval_refused_by_one_member_says_so_and_the_same_command_finishes_it() {
        // Given a group across cluster-a and cluster-b awaiting approval of cluster-a's first
        // step, cluster-b refusing patches
        let (a, b) = (cluster("cluster-a").await, cluster("cluster-b").await);
        let scope = Scope::Clusters(vec![
            member("cluster-a", &a.url),
            member("cluster-b", &b.url),
        ]);
        b.refuse_patches(true);
        // When it is approved
        let error = approval::run(&scope, "querier", Some(STEP))
            .await
            .unwrap_err()
            .to_string();
        // Then the step, named with the qualified zone, is written in cluster-a on its own
        // StatefulSet (by who the API server says), and the error says cluster-b lacks it
        let approved = json!({"metadata": {"annotations": {
            "baton.dev/approved": STEP, "baton.dev/approved-by": "alice",
        }}});
        assert_eq!(a.patches(), [("querier".to_owned(), approved.clone())]);
        assert!(
            error.starts_with(
                "the approval was written on statefulset/querier in cluster cluster-a but not on \
                 statefulset/querier in cluster cluster-b (member cluster cluster-b (context \
                 cluster-b): no permission to patch statefulsets in namespace mimir"
            ),
            "{error}"
        );
        assert!(
            error.contains("the approval does not count until it is on every member; run the same command again to finish it"),
            "{error}"
        );
        // When cluster-b takes patches again and the same command runs again
        b.refuse_patches(false);
        let code = approval::run(&scope, "querier", Some(STEP)).await.unwrap();
        // Then it names the same step and writes it on both: the approval is complete
        assert_eq!(code, exit::SUCCESS);
        assert_eq!(
            a.patches(),
            [
                ("querier".to_owned(), approved.clone()),
                ("querier".to_owned(), approved.clone())
            ]
        );
        assert_eq!(b.patches(), [("querier".to_owned(), approved)]);
        for cluster in [&a, &b] {
            assert_eq!(cluster.annotations("querier")["baton.dev/approved"], STEP);
        }
        // and the group awaits it no more: a third run finds nothing to approve
        let code = approval::run(&scope, "querier", None).await.unwrap();
        assert_eq!(code, exit::ERROR);
        assert_eq!(b.patches().len(), 1, "nothing written");
    }

    #[test]
    fn one_name_when_the_members_agree_on_who_you_are_else_each() {
        let alice = || Some("alice".to_owned());
        assert_eq!(
            who([("cluster-a", alice()), ("cluster-b", alice())]),
            "alice"
        );
        assert_eq!(who([("cluster-a", None)]), UNNAMED);
        assert_eq!(
            who([("cluster-a", alice()), ("cluster-b", None)]),
            format!("alice in cluster-a, {UNNAMED} in cluster-b")
        );
    }

    #[test]
    fn a_write_that_failed_on_one_member_says_what_is_left_and_how_to_finish_it() {
        let refused = || {
            Err(AccessError::Forbidden {
                verb: "patch",
                resource: "statefulsets",
                namespace: "mimir".to_owned(),
                message: "denied".to_owned(),
            })
        };
        assert!(
            all_written(
                "the approval",
                "it does not count",
                vec![("cluster-a/querier".to_owned(), Ok(()))]
            )
            .is_ok()
        );
        let error = all_written(
            "the approval",
            "the approval does not count",
            vec![
                ("cluster-a/querier".to_owned(), Ok(())),
                ("cluster-b/querier".to_owned(), Ok(())),
                ("cluster-c/querier".to_owned(), refused()),
            ],
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            error,
            "the approval was written on statefulset/querier in cluster cluster-a, \
             statefulset/querier in cluster cluster-b but not on statefulset/querier in cluster \
             cluster-c (no permission to patch statefulsets in namespace mimir: denied): the \
             approval does not count until it is on every member; run the same command again \
             to finish it (it writes the same again where it is already)"
        );
        let error = all_written(
            "the rollback request",
            "nothing rolls back",
            vec![("querier".to_owned(), refused())],
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with(
                "the rollback request was written on no member: not on statefulset/querier (no \
                 permission"
            ),
            "{error}"
        );
    }
}
