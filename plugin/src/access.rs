//! The plugin's Kubernetes access, and nothing else: the user's kubeconfig (as kubectl plugins
//! read it: `--kubeconfig`, `KUBECONFIG`, `--context`, `-n`), reading a group's StatefulSets and
//! pods, and patching one StatefulSet's annotations. Every failure names the object and what is
//! wrong with it, so the user need not guess from an HTTP status.

use std::path::PathBuf;

use baton_core::annotations::ROLLOUT_GROUP_LABEL;
use baton_core::pods::CachedPod;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};

/// What went wrong, worded for the person at the terminal. Every one exits with
/// [`crate::exit::ERROR`].
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("cannot load the kubeconfig{}: {why}", .path.as_ref().map(|path| format!(" {}", path.display())).unwrap_or_default())]
    Kubeconfig { path: Option<PathBuf>, why: String },
    #[error("cannot connect to the cluster: {0}")]
    Client(String),
    #[error(
        "no rollout group {group} in namespace {namespace}: no StatefulSet there has the label {ROLLOUT_GROUP_LABEL}={group}"
    )]
    NoSuchGroup { group: String, namespace: String },
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
}

/// Where to connect, as the user said it on the command line (all optional).
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: Option<String>,
}

/// A client and the namespace the commands act in.
#[derive(Clone)]
pub struct Access {
    pub client: Client,
    pub namespace: String,
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
        let client =
            Client::try_from(config).map_err(|error| AccessError::Client(error.to_string()))?;
        Ok(Self { client, namespace })
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

    /// The members of rollout group `group`; an error when it has none.
    pub async fn group_members(&self, group: &str) -> Result<Vec<StatefulSet>, AccessError> {
        let selector = group_selector(group)?;
        let listed = self
            .statefulsets()
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| self.failed("list", "statefulsets", error))?;
        if listed.items.is_empty() {
            return Err(AccessError::NoSuchGroup {
                group: group.to_owned(),
                namespace: self.namespace.clone(),
            });
        }
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
