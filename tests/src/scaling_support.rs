//! What the scaling end-to-end tests need: the ReplicaTemplate CRD (applied from
//! `deploy/crds/replica-template.yaml`, as users apply it) and reference resources with a scale
//! subresource.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;

use crate::control_plane::ControlPlane;
use crate::wait::wait_until;

/// `apiVersion` of ReplicaTemplates.
pub const REPLICA_TEMPLATE_API_VERSION: &str = "rollout-operator.grafana.com/v1";
/// Kind of ReplicaTemplates.
pub const REPLICA_TEMPLATE_KIND: &str = "ReplicaTemplate";

/// Applies `deploy/crds/replica-template.yaml` with kubectl and waits until the API server
/// serves ReplicaTemplates. Once per test process: the tests of a binary run concurrently on
/// one control plane, and concurrent `kubectl apply` of one new object race each other
/// (both see it missing, the second create fails with AlreadyExists).
pub async fn install_replica_template_crd(control_plane: &ControlPlane) -> anyhow::Result<()> {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_try_init(|| apply_replica_template_crd(control_plane))
        .await
        .map(|_| ())
}

/// Applies the CRD in `control_plane` and waits until it serves ReplicaTemplates, each time
/// it is called: for a control plane of its own (one member of a trio) that a single scenario
/// uses, where [`install_replica_template_crd`]'s once per process would be the wrong plane's.
pub async fn apply_replica_template_crd(control_plane: &ControlPlane) -> anyhow::Result<()> {
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds/replica-template.yaml");
    // Server-side apply: idempotent even against another process applying the same manifest.
    let output = tokio::process::Command::new(control_plane.kubectl())
        .arg("--kubeconfig")
        .arg(control_plane.kubeconfig_path())
        .args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(&manifest)
        .output()
        .await
        .context("running kubectl apply")?;
    anyhow::ensure!(
        output.status.success(),
        "kubectl apply -f {} failed: {}",
        manifest.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let client = control_plane.admin_client().await;
    let gvk = GroupVersionKind::gvk("rollout-operator.grafana.com", "v1", REPLICA_TEMPLATE_KIND);
    // Discovery, not a list of ReplicaTemplates: see [`ReferenceControllers`] for why no
    // custom resource is ever read or written here.
    wait_until(
        Duration::from_secs(30),
        "discovery serves ReplicaTemplates with a scale subresource",
        || async {
            kube::discovery::pinned_kind(&client, &gvk)
                .await
                .is_ok_and(|(_, capabilities)| {
                    capabilities
                        .subresources
                        .iter()
                        .any(|(subresource, _)| subresource.plural == "scale")
                })
        },
    )
    .await;
    Ok(())
}

/// ReplicaTemplates (the CRD of `deploy/crds/replica-template.yaml`) used as reference
/// resources: a custom kind with scale and status subresources that no controller manages, so
/// `status.replicas` is only what baton writes back.
#[derive(Clone)]
pub struct ReplicaTemplates {
    api: Api<DynamicObject>,
}

impl ReplicaTemplates {
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        let kind =
            GroupVersionKind::gvk("rollout-operator.grafana.com", "v1", REPLICA_TEMPLATE_KIND);
        let resource = ApiResource::from_gvk_with_plural(&kind, "replicatemplates");
        Self {
            api: Api::namespaced_with(client, namespace, &resource),
        }
    }

    /// Creates `name` with `spec.replicas`.
    pub async fn create(&self, name: &str, replicas: i32) {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": REPLICA_TEMPLATE_API_VERSION,
            "kind": REPLICA_TEMPLATE_KIND,
            "metadata": {"name": name},
            "spec": {"replicas": replicas},
        }))
        .expect("a valid ReplicaTemplate");
        self.api
            .create(&Default::default(), &object)
            .await
            .unwrap_or_else(|error| panic!("creating ReplicaTemplate {name}: {error}"));
    }

    /// Sets `spec.replicas` through the scale subresource, as an HPA would.
    pub async fn scale(&self, name: &str, replicas: i32) {
        self.api
            .patch_scale(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap_or_else(|error| panic!("scaling ReplicaTemplate {name}: {error}"));
    }

    /// `status.replicas` as the scale subresource reports it.
    pub async fn status_replicas(&self, name: &str) -> Option<i32> {
        let scale = self.api.get_scale(name).await.ok()?;
        scale.status.map(|status| status.replicas)
    }
}
