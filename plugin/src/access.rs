//! The plugin's Kubernetes access, and nothing else: the user's kubeconfig (as kubectl plugins
//! read it: `--kubeconfig`, `KUBECONFIG`, `--context`, `-n`), reading a group's StatefulSets and
//! pods, and patching one StatefulSet's annotations. Every failure names the object and what is
//! wrong with it, so the user need not guess from an HTTP status.

use std::path::PathBuf;

use baton_core::annotations::ROLLOUT_GROUP_LABEL;
use baton_core::commands::Reader;
use baton_core::pods::CachedPod;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};

use crate::clusters::{self, Cluster};

/// What went wrong, worded for the person at the terminal. Every one exits with
/// [`crate::exit::ERROR`].
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("cannot load the kubeconfig{}: {why}", .path.as_ref().map(|path| format!(" {}", path.display())).unwrap_or_default())]
    Kubeconfig { path: Option<PathBuf>, why: String },
    #[error("cannot connect to the cluster: {0}")]
    Client(String),
    /// `clusters`: the member clusters searched (none: the one cluster of the context).
    #[error(
        "no rollout group {group} in namespace {namespace}{}: no StatefulSet there has the label {ROLLOUT_GROUP_LABEL}={group}",
        searched(.clusters)
    )]
    NoSuchGroup {
        group: String,
        namespace: String,
        clusters: Vec<String>,
    },
    #[error(
        "{name:?} is not a valid rollout group name: it is the value of the {ROLLOUT_GROUP_LABEL} label (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
    )]
    InvalidGroupName { name: String },
    #[error("no StatefulSet {name} in namespace {namespace}")]
    NoSuchStatefulSet { name: String, namespace: String },
    #[error(
        "StatefulSet {name} in namespace {namespace} is not in a rollout group: it has no {ROLLOUT_GROUP_LABEL} label"
    )]
    NotInGroup { name: String, namespace: String },
    #[error("no permission to {verb} {resource} in namespace {namespace}: {message}")]
    Forbidden {
        verb: &'static str,
        resource: &'static str,
        namespace: String,
        message: String,
    },
    #[error("{verb} {resource} in namespace {namespace} failed: {source}")]
    Api {
        verb: &'static str,
        resource: &'static str,
        namespace: String,
        source: kube::Error,
    },
    #[error(
        "member {member}: no context {context} in the kubeconfig{}; its contexts: {} (name the context with --cluster {member}=CONTEXT)",
        .path.as_ref().map(|path| format!(" {}", path.display())).unwrap_or_default(),
        if .known.is_empty() { "none".to_owned() } else { .known.join(", ") }
    )]
    UnknownContext {
        member: String,
        context: String,
        path: Option<PathBuf>,
        known: Vec<String>,
    },
    #[error("cannot reach member cluster {member} (context {context}, {server}): {error}")]
    Unreachable {
        member: String,
        context: String,
        server: String,
        error: String,
    },
    #[error("member cluster {member} (context {context}): {source}")]
    Cluster {
        member: String,
        context: String,
        source: Box<AccessError>,
    },
    #[error("{0}")]
    Clusters(String),
    /// Across members, a member could not be read before a write: nothing was written.
    #[error(
        "{0}; nothing written: a command that writes across member clusters reads every member first"
    )]
    NothingWritten(Box<AccessError>),
    /// A write that counts only on every member landed on some of them only.
    #[error("{0}")]
    Unfinished(String),
    /// `kubectl baton cluster add` failed.
    #[error("{0}")]
    ClusterAdd(Box<crate::cluster_add::ClusterError>),
    /// Several members failed: each is named.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<AccessError>),
}

impl From<crate::cluster_add::ClusterError> for AccessError {
    fn from(error: crate::cluster_add::ClusterError) -> Self {
        Self::ClusterAdd(Box::new(error))
    }
}

/// " in any of member clusters a, b" for a search across members, nothing for one cluster.
fn searched(clusters: &[String]) -> String {
    if clusters.is_empty() {
        String::new()
    } else {
        format!(
            " in any of the member clusters searched ({})",
            clusters.join(", ")
        )
    }
}

/// Where to connect, as the user said it on the command line (all optional).
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: Option<String>,
}

/// A member cluster of a cross-cluster group (`--cluster`), and the access to it.
#[derive(Clone)]
pub struct ClusterAccess {
    pub member: Cluster,
    /// Its API server, for messages.
    pub server: String,
    pub access: Access,
}

/// What one member cluster holds of a group (or of every group).
#[derive(Debug, Clone)]
pub struct ClusterRead {
    pub member: String,
    pub statefulsets: Vec<StatefulSet>,
    pub pods: Vec<CachedPod>,
    /// Its ControllerRevisions, when asked for ([`History::With`]; none otherwise).
    pub revisions: Vec<ControllerRevision>,
}

/// Whether a read takes the namespace's ControllerRevisions too (the StatefulSets' template
/// history, which `rollback` decides from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    Without,
    With,
}

impl ClusterAccess {
    /// `error`, named for this member: a request that got no answer from the API server is
    /// "cannot reach member cluster …", with the cause.
    pub fn named(&self, error: AccessError) -> AccessError {
        match error {
            AccessError::Api { source, .. } if !matches!(source, kube::Error::Api(_)) => {
                AccessError::Unreachable {
                    member: self.member.name.clone(),
                    context: self.member.context.clone(),
                    server: self.server.clone(),
                    error: clusters::error_chain(&source),
                }
            }
            error => AccessError::Cluster {
                member: self.member.name.clone(),
                context: self.member.context.clone(),
                source: Box::new(error),
            },
        }
    }

    /// Group `group`'s StatefulSets here (every grouped one for `None`) and the namespace's
    /// pods (and ControllerRevisions, with [`History::With`]), each failure named for this
    /// member.
    pub async fn read(
        &self,
        group: Option<&str>,
        history: History,
    ) -> Result<ClusterRead, AccessError> {
        let statefulsets = async {
            match group {
                Some(group) => self.access.group_statefulsets(group).await,
                None => self.access.grouped_statefulsets().await,
            }
        };
        let revisions = async {
            match history {
                History::With => self.access.controller_revisions().await,
                History::Without => Ok(Vec::new()),
            }
        };
        let (statefulsets, pods, revisions) =
            futures::future::join3(statefulsets, self.access.pods(), revisions).await;
        Ok(ClusterRead {
            member: self.member.name.clone(),
            statefulsets: statefulsets.map_err(|error| self.named(error))?,
            pods: pods.map_err(|error| self.named(error))?,
            revisions: revisions.map_err(|error| self.named(error))?,
        })
    }
}

/// No StatefulSet of `group` in any of `members`: the error naming the clusters searched.
pub fn no_group_in(members: &[ClusterAccess], group: &str) -> AccessError {
    AccessError::NoSuchGroup {
        group: group.to_owned(),
        namespace: members
            .first()
            .map(|member| member.access.namespace.clone())
            .unwrap_or_default(),
        clusters: members
            .iter()
            .map(|member| member.member.name.clone())
            .collect(),
    }
}

/// Reads every member at once ([`ClusterAccess::read`]); every member that failed is named. With
/// `group`, an error when no member holds any of its StatefulSets, naming those searched.
pub async fn read_clusters(
    members: &[ClusterAccess],
    group: Option<&str>,
    history: History,
) -> Result<Vec<ClusterRead>, AccessError> {
    if let Some(group) = group {
        group_selector(group)?;
    }
    let results =
        futures::future::join_all(members.iter().map(|member| member.read(group, history))).await;
    let reads = all_or_every_error(results)?;
    if let Some(group) = group
        && reads.iter().all(|read| read.statefulsets.is_empty())
    {
        return Err(no_group_in(members, group));
    }
    Ok(reads)
}

/// Every value, else every error (one alone as itself).
fn all_or_every_error<T>(results: Vec<Result<T, AccessError>>) -> Result<Vec<T>, AccessError> {
    let mut values = Vec::new();
    let mut errors = Vec::new();
    for result in results {
        match result {
            Ok(value) => values.push(value),
            Err(error) => errors.push(error),
        }
    }
    match errors.len() {
        0 => Ok(values),
        1 => Err(errors.remove(0)),
        _ => Err(AccessError::Several(errors)),
    }
}

/// A client and the namespace the commands act in.
#[derive(Clone)]
pub struct Access {
    pub client: Client,
    pub namespace: String,
    /// The kubeconfig context read, for messages (none in a pod: its service account).
    pub context: Option<String>,
    /// How the command line reached the cluster(s), for the commands messages print.
    pub reader: Reader,
}

/// How `target` and `members` reach the cluster, as the commands printed must say it: the
/// kubeconfig and context only when named on the command line (else pasted commands find the
/// same defaults), and each member's context when it is not named after the member.
pub fn reader(target: &Target, members: &[Cluster]) -> Reader {
    Reader {
        kubeconfig: target
            .kubeconfig
            .as_ref()
            .map(|path| path.display().to_string()),
        context: target.context.clone(),
        member_contexts: members
            .iter()
            .filter(|member| member.context != member.name)
            .map(|member| (member.name.clone(), member.context.clone()))
            .collect(),
    }
}

impl Access {
    /// Loads the kubeconfig as kubectl would: `--kubeconfig`, else `KUBECONFIG`, else
    /// `~/.kube/config` (and in a pod, its service account); `--context` picks the context; the
    /// namespace is `-n`, else the context's, else `default`.
    pub async fn connect(target: &Target) -> Result<Self, AccessError> {
        let options = KubeConfigOptions {
            context: target.context.clone(),
            ..KubeConfigOptions::default()
        };
        let kubeconfig_error = |why: String| AccessError::Kubeconfig {
            path: target.kubeconfig.clone(),
            why,
        };
        let config = match (&target.kubeconfig, &target.context) {
            (Some(path), _) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .map_err(|error| kubeconfig_error(error.to_string()))?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|error| kubeconfig_error(error.to_string()))?
            }
            (None, Some(_)) => Config::from_kubeconfig(&options)
                .await
                .map_err(|error| kubeconfig_error(error.to_string()))?,
            (None, None) => Config::infer()
                .await
                .map_err(|error| kubeconfig_error(error.to_string()))?,
        };
        let namespace = target
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        // The context read: the one named, else the kubeconfig's current one (none in a pod).
        let context = match (&target.context, &target.kubeconfig) {
            (Some(context), _) => Some(context.clone()),
            (None, Some(path)) => Kubeconfig::read_from(path)
                .ok()
                .and_then(|kubeconfig| kubeconfig.current_context),
            (None, None) => Kubeconfig::read()
                .ok()
                .and_then(|kubeconfig| kubeconfig.current_context),
        };
        let client =
            Client::try_from(config).map_err(|error| AccessError::Client(error.to_string()))?;
        Ok(Self {
            client,
            namespace,
            context,
            reader: reader(target, &[]),
        })
    }

    /// The member clusters `members`, each through its own context of the kubeconfig (as
    /// [`Access::connect`] finds it), all in one namespace: `-n`, else the one their contexts
    /// name ([`clusters::shared_namespace`]). A context the kubeconfig lacks is named with the
    /// member and the contexts there are. Nothing is requested yet.
    pub async fn connect_members(
        target: &Target,
        members: &[Cluster],
    ) -> Result<Vec<ClusterAccess>, AccessError> {
        let kubeconfig_error = |why: String| AccessError::Kubeconfig {
            path: target.kubeconfig.clone(),
            why,
        };
        let kubeconfig = match &target.kubeconfig {
            Some(path) => Kubeconfig::read_from(path),
            None => Kubeconfig::read(),
        }
        .map_err(|error| kubeconfig_error(clusters::error_chain(&error)))?;
        let mut contexts = Vec::new();
        let mut unknown = Vec::new();
        for member in members {
            match kubeconfig
                .contexts
                .iter()
                .find(|named| named.name == member.context)
            {
                Some(named) => contexts.push((
                    member.name.as_str(),
                    named
                        .context
                        .as_ref()
                        .and_then(|context| context.namespace.as_deref()),
                )),
                None => unknown.push(AccessError::UnknownContext {
                    member: member.name.clone(),
                    context: member.context.clone(),
                    path: target.kubeconfig.clone(),
                    known: kubeconfig
                        .contexts
                        .iter()
                        .map(|named| named.name.clone())
                        .collect(),
                }),
            }
        }
        all_or_every_error(unknown.into_iter().map(Err::<(), _>).collect())?;
        let namespace = clusters::shared_namespace(target.namespace.as_deref(), &contexts)
            .map_err(AccessError::Clusters)?;
        let connected = futures::future::join_all(members.iter().map(|member| {
            let kubeconfig = kubeconfig.clone();
            let namespace = namespace.clone();
            async move {
                let named = |error: String| AccessError::Cluster {
                    member: member.name.clone(),
                    context: member.context.clone(),
                    source: Box::new(kubeconfig_error(error)),
                };
                let options = KubeConfigOptions {
                    context: Some(member.context.clone()),
                    ..KubeConfigOptions::default()
                };
                let config = Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|error| named(clusters::error_chain(&error)))?;
                let server = config.cluster_url.to_string();
                let client = Client::try_from(config).map_err(|error| AccessError::Cluster {
                    member: member.name.clone(),
                    context: member.context.clone(),
                    source: Box::new(AccessError::Client(clusters::error_chain(&error))),
                })?;
                Ok(ClusterAccess {
                    member: member.clone(),
                    server,
                    access: Access {
                        client,
                        namespace,
                        context: Some(member.context.clone()),
                        reader: reader(target, members),
                    },
                })
            }
        }))
        .await;
        all_or_every_error(connected)
    }

    fn statefulsets(&self) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Every StatefulSet of the namespace that is in a rollout group.
    pub async fn grouped_statefulsets(&self) -> Result<Vec<StatefulSet>, AccessError> {
        let listed = self
            .statefulsets()
            .list(&ListParams::default().labels(ROLLOUT_GROUP_LABEL))
            .await
            .map_err(|error| self.failed("list", "statefulsets", error))?;
        Ok(listed.items)
    }

    /// Every StatefulSet in a rollout group (of group `only`), of every namespace, by namespace.
    pub async fn grouped_statefulsets_everywhere(
        &self,
        only: Option<&str>,
    ) -> Result<std::collections::BTreeMap<String, Vec<StatefulSet>>, AccessError> {
        let selector = match only {
            Some(group) => group_selector(group)?,
            None => ROLLOUT_GROUP_LABEL.to_owned(),
        };
        let listed = Api::<StatefulSet>::all(self.client.clone())
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| self.failed("list", "statefulsets", error))?;
        let mut by_namespace: std::collections::BTreeMap<String, Vec<StatefulSet>> =
            std::collections::BTreeMap::new();
        for statefulset in listed.items {
            let namespace = statefulset.metadata.namespace.clone().unwrap_or_default();
            by_namespace.entry(namespace).or_default().push(statefulset);
        }
        Ok(by_namespace)
    }

    /// The StatefulSets' pods of `namespace` (the label their controller sets on each): what a
    /// group's status reads, and no other pod of a namespace that may hold thousands.
    pub async fn statefulset_pods_in(
        &self,
        namespace: &str,
    ) -> Result<Vec<CachedPod>, AccessError> {
        let listed = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default().labels("statefulset.kubernetes.io/pod-name"))
            .await
            .map_err(|error| self.failed("list", "pods", error))?;
        Ok(listed.items.iter().map(CachedPod::of).collect())
    }

    /// The members of rollout group `group`; an error when it has none.
    pub async fn group_members(&self, group: &str) -> Result<Vec<StatefulSet>, AccessError> {
        let members = self.group_statefulsets(group).await?;
        if members.is_empty() {
            return Err(AccessError::NoSuchGroup {
                group: group.to_owned(),
                namespace: self.namespace.clone(),
                clusters: Vec::new(),
            });
        }
        Ok(members)
    }

    /// The StatefulSets of rollout group `group` here (none is no error: across clusters, a
    /// member cluster may hold none of a group's).
    pub async fn group_statefulsets(&self, group: &str) -> Result<Vec<StatefulSet>, AccessError> {
        let selector = group_selector(group)?;
        let listed = self
            .statefulsets()
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| self.failed("list", "statefulsets", error))?;
        Ok(listed.items)
    }

    /// Every pod of the namespace (each StatefulSet keeps its own, see
    /// `GroupSnapshot::from_kubernetes`).
    pub async fn pods(&self) -> Result<Vec<CachedPod>, AccessError> {
        let listed = Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .map_err(|error| self.failed("list", "pods", error))?;
        Ok(listed.items.iter().map(CachedPod::of).collect())
    }

    /// Every ControllerRevision of the namespace (a StatefulSet's template history).
    pub async fn controller_revisions(&self) -> Result<Vec<ControllerRevision>, AccessError> {
        let listed = Api::<ControllerRevision>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .map_err(|error| self.failed("list", "controllerrevisions", error))?;
        Ok(listed.items)
    }

    /// StatefulSet `name`, which must be in a rollout group; returns it and its group.
    pub async fn grouped_statefulset(
        &self,
        name: &str,
    ) -> Result<(StatefulSet, String), AccessError> {
        let statefulset = self
            .statefulsets()
            .get_opt(name)
            .await
            .map_err(|error| self.failed("get", "statefulsets", error))?
            .ok_or_else(|| AccessError::NoSuchStatefulSet {
                name: name.to_owned(),
                namespace: self.namespace.clone(),
            })?;
        let group = statefulset
            .labels()
            .get(ROLLOUT_GROUP_LABEL)
            .cloned()
            .ok_or_else(|| AccessError::NotInGroup {
                name: name.to_owned(),
                namespace: self.namespace.clone(),
            })?;
        Ok((statefulset, group))
    }

    /// Sets (`Some`) or removes (`None`) annotations of StatefulSet `name` in one merge patch.
    pub async fn patch_annotations(
        &self,
        name: &str,
        changes: &[(&str, Option<&str>)],
    ) -> Result<(), AccessError> {
        let annotations: serde_json::Map<String, serde_json::Value> = changes
            .iter()
            .map(|(key, value)| ((*key).to_owned(), serde_json::json!(value)))
            .collect();
        let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
        self.statefulsets()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|error| self.failed("patch", "statefulsets", error))?;
        Ok(())
    }

    /// Who the API server takes the caller for, from a SelfSubjectReview: what the API server
    /// itself authenticated, not a local variable anyone sets. `None` when it cannot say (a
    /// server before Kubernetes 1.28, or the review refused); the caller then says so.
    pub async fn identity(&self) -> Option<String> {
        use k8s_openapi::api::authentication::v1::SelfSubjectReview;
        let review = Api::<SelfSubjectReview>::all(self.client.clone())
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .ok()?;
        review
            .status
            .and_then(|status| status.user_info)
            .and_then(|user| user.username)
            .filter(|name| !name.is_empty())
    }

    /// Names a failed call: a 403 becomes "no permission to …".
    pub fn failed(
        &self,
        verb: &'static str,
        resource: &'static str,
        error: kube::Error,
    ) -> AccessError {
        match error {
            kube::Error::Api(status) if status.is_forbidden() => AccessError::Forbidden {
                verb,
                resource,
                namespace: self.namespace.clone(),
                message: status.message,
            },
            source => AccessError::Api {
                verb,
                resource,
                namespace: self.namespace.clone(),
                source,
            },
        }
    }
}

/// The label selector of group `group`, once the name is known to be a label value (a name
/// such as `a,b` would otherwise select something else entirely).
pub fn group_selector(group: &str) -> Result<String, AccessError> {
    let valid = !group.is_empty()
        && group.len() <= 63
        && group
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
        && group.starts_with(|c: char| c.is_ascii_alphanumeric())
        && group.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(format!("{ROLLOUT_GROUP_LABEL}={group}"))
    } else {
        Err(AccessError::InvalidGroupName {
            name: group.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_name_must_be_a_label_value() {
        assert_eq!(
            group_selector("ingester").unwrap(),
            "rollout-group=ingester"
        );
        assert_eq!(group_selector("a.b_c-1").unwrap(), "rollout-group=a.b_c-1");
        for bad in ["", "a,b", "a=b", "-a", "a-", "x y", &"a".repeat(64)] {
            let error = group_selector(bad).unwrap_err().to_string();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
            assert!(error.contains("rollout-group label"), "{error}");
        }
    }
}
