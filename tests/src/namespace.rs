//! A fresh namespace per test, deleted when the test ends.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};

use crate::control_plane::ControlPlane;
use crate::control_plane::supervisor::clean_up_from_drop;

/// A namespace owned by one test.
pub struct TestNamespace {
    name: String,
    client: kube::Client,
    kubeconfig: std::path::PathBuf,
}

impl TestNamespace {
    /// Creates `<prefix>-<random>`, labelled `kubernetes.io/metadata.name` (webhook
    /// namespaceSelectors rely on it; Kubernetes sets it too).
    pub async fn create(control_plane: &ControlPlane, prefix: &str) -> Self {
        Self::create_named(control_plane, &format!("{prefix}-{}", random_suffix())).await
    }

    /// Creates the namespace `name` as [`TestNamespace::create`] does: for the same namespace
    /// in several control planes (`crate::cluster_support`).
    pub async fn create_named(control_plane: &ControlPlane, name: &str) -> Self {
        let client = control_plane.admin_client().await;
        let name = name.to_owned();
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/metadata.name": name, "baton.test/e2e": "true"},
            }
        }))
        .expect("a valid namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|error| panic!("creating namespace {name}: {error}"));
        Self {
            name,
            client,
            kubeconfig: control_plane.kubeconfig_path().to_path_buf(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// An admin client (its default namespace is not this one: use `Api::namespaced`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// `Api<K>` in this namespace.
    pub fn api<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        kube::Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        clean_up_from_drop(self.kubeconfig.clone(), |client| async move {
            let _ = Api::<Namespace>::all(client)
                .delete(&name, &DeleteParams::background())
                .await;
        });
    }
}

/// Six random hex digits, for names no other test or run uses.
pub fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("{:06x}", hasher.finish() & 0xff_ffff)
}
