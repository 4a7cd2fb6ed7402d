//! Named builders for the objects tests create.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// The image every fixture pod runs; the tag is the "version" tests roll out.
pub const IMAGE: &str = "baton.test/app";

/// A StatefulSet as the Go operator's users write them: one per zone, labelled with its group,
/// `OnDelete`, `Parallel` pod management (as Mimir ingesters use).
#[derive(Debug, Clone)]
pub struct StatefulSetFixture {
    name: String,
    replicas: i32,
    version: String,
    labels: BTreeMap<String, String>,
    /// Labels of its pods besides the selector's.
    pod_labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    strategy: &'static str,
    /// spec.updateStrategy.rollingUpdate.partition, when set.
    partition: Option<i32>,
    pod_management: &'static str,
    /// spec.minReadySeconds, when set.
    min_ready_seconds: Option<i32>,
}

impl StatefulSetFixture {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            replicas: 3,
            version: "v1".to_owned(),
            labels: BTreeMap::new(),
            pod_labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            strategy: "OnDelete",
            partition: None,
            pod_management: "Parallel",
            min_ready_seconds: None,
        }
    }

    /// Member of rollout group `group` (`rollout-group` label).
    pub fn group(self, group: &str) -> Self {
        self.label("rollout-group", group)
    }

    /// A label on its pods as well as its own (a budget's selector reads both).
    pub fn pod_label(mut self, key: &str, value: &str) -> Self {
        self.pod_labels.insert(key.to_owned(), value.to_owned());
        self.label(key, value)
    }

    pub fn replicas(mut self, replicas: i32) -> Self {
        self.replicas = replicas;
        self
    }

    /// The image tag of its pod template.
    pub fn version(mut self, version: &str) -> Self {
        self.version = version.to_owned();
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn rolling_update(mut self) -> Self {
        self.strategy = "RollingUpdate";
        self
    }

    /// `RollingUpdate` with this partition, rolled by baton through it
    /// (`baton.dev/update-by: partition`).
    pub fn by_partition(mut self, partition: i32) -> Self {
        self.strategy = "RollingUpdate";
        self.partition = Some(partition);
        self.annotation("baton.dev/update-by", "partition")
    }

    pub fn ordered_ready(mut self) -> Self {
        self.pod_management = "OrderedReady";
        self
    }

    /// spec.minReadySeconds: a pod counts as available only once Ready this long.
    pub fn min_ready_seconds(mut self, seconds: i32) -> Self {
        self.min_ready_seconds = Some(seconds);
        self
    }

    pub fn build(&self) -> StatefulSet {
        let mut statefulset: StatefulSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": self.name,
                "labels": self.labels,
                "annotations": self.annotations,
            },
            "spec": {
                "replicas": self.replicas,
                "serviceName": self.name,
                "podManagementPolicy": self.pod_management,
                "updateStrategy": match self.partition {
                    Some(partition) => json!({"type": self.strategy, "rollingUpdate": {"partition": partition}}),
                    None => json!({"type": self.strategy}),
                },
                "selector": {"matchLabels": {"app.kubernetes.io/instance": self.name}},
                "template": {
                    "metadata": {"labels": self.template_labels()},
                    "spec": {
                        "containers": [{"name": "app", "image": format!("{IMAGE}:{}", self.version)}],
                        "terminationGracePeriodSeconds": 0,
                    },
                },
            },
        }))
        .expect("a valid StatefulSet");
        if let Some(spec) = statefulset.spec.as_mut() {
            spec.min_ready_seconds = self.min_ready_seconds;
        }
        statefulset
    }

    /// Its manifest at `version`, as a GitOps tool holds it in Git: the fixture with another
    /// image tag.
    pub fn manifest(&self, version: &str) -> StatefulSet {
        self.clone().version(version).build()
    }

    fn template_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.pod_labels.clone();
        labels.insert("app.kubernetes.io/instance".into(), self.name.clone());
        labels.insert("name".into(), self.name.clone());
        labels
    }

    /// Creates it in `namespace`.
    pub async fn create(&self, client: &kube::Client, namespace: &str) -> StatefulSet {
        Api::<StatefulSet>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &self.build())
            .await
            .unwrap_or_else(|error| panic!("creating StatefulSet {}: {error}", self.name))
    }
}

/// The field manager the GitOps scenarios apply as, Argo CD's.
pub const GITOPS_MANAGER: &str = "argocd-controller";

/// Applies `manifest` with server-side apply as a GitOps tool does: its own field manager and
/// `force` (`kubectl apply --server-side --force-conflicts`, Argo CD's `ServerSideApply=true`),
/// so it takes over any field it names that someone else set since.
pub async fn gitops_apply(
    client: &kube::Client,
    namespace: &str,
    manifest: &StatefulSet,
) -> Result<StatefulSet, kube::Error> {
    let mut manifest = manifest.clone();
    manifest.metadata.managed_fields = None;
    manifest.metadata.resource_version = None;
    let name = manifest.metadata.name.clone().unwrap_or_default();
    Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .patch(
            &name,
            &PatchParams::apply(GITOPS_MANAGER).force(),
            &Patch::Apply(&manifest),
        )
        .await
}

/// One StatefulSet per zone (`<group>-zone-a`, `-zone-b`, …), all in `group`.
pub fn rollout_group(group: &str, zones: &[&str], replicas: i32) -> Vec<StatefulSetFixture> {
    zones
        .iter()
        .map(|zone| {
            StatefulSetFixture::new(&format!("{group}-zone-{zone}"))
                .group(group)
                .replicas(replicas)
        })
        .collect()
}

/// Changes the pod template's image tag: a new update revision, as a deploy would.
pub async fn set_version(client: &kube::Client, namespace: &str, statefulset: &str, version: &str) {
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": format!("{IMAGE}:{version}")}
    ]}}}});
    Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .patch(
            statefulset,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
        .unwrap_or_else(|error| panic!("changing the template of {statefulset}: {error}"));
}
