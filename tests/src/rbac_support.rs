//! Binding the exact roles of `deploy/` to baton's service-account identities in a test
//! namespace, so a test can run a binary with nothing more than production gives it.

use std::path::PathBuf;

use anyhow::{Context, bail};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};

/// The namespace the control plane's token file puts baton's service accounts in.
pub const SERVICE_ACCOUNT_NAMESPACE: &str = "baton-system";

/// Which binary's RBAC file (`deploy/base/<binary>-rbac.yaml`).
#[derive(Debug, Clone, Copy)]
pub enum Binary {
    Controller,
    Webhook,
}

impl Binary {
    pub fn service_account(self) -> &'static str {
        match self {
            Self::Controller => "baton-controller",
            Self::Webhook => "baton-webhook",
        }
    }

    fn manifest(self) -> PathBuf {
        let file = match self {
            Self::Controller => "controller-rbac.yaml",
            Self::Webhook => "webhook-rbac.yaml",
        };
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/base")
            .join(file)
    }
}

/// Creates the Roles, RoleBindings, ClusterRoles and ClusterRoleBindings of `binary`'s RBAC
/// manifest for `namespace`, binding them to `system:serviceaccount:baton-system:<binary>`.
/// Cluster-scoped objects get the namespace as a suffix so tests do not collide.
pub async fn bind_deploy_roles(
    client: &kube::Client,
    namespace: &str,
    binary: Binary,
) -> anyhow::Result<()> {
    let path = binary.manifest();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut bound = 0;
    for mut value in serde_saphyr::from_multiple::<serde_json::Value>(&text)? {
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "ServiceAccount" => continue,
            "Role" => {
                value["metadata"]["namespace"] = namespace.into();
                let role: Role = serde_json::from_value(value)?;
                Api::<Role>::namespaced(client.clone(), namespace)
                    .create(&PostParams::default(), &role)
                    .await?;
            }
            "RoleBinding" => {
                value["metadata"]["namespace"] = namespace.into();
                set_subject_namespaces(&mut value);
                let binding: RoleBinding = serde_json::from_value(value)?;
                Api::<RoleBinding>::namespaced(client.clone(), namespace)
                    .create(&PostParams::default(), &binding)
                    .await?;
            }
            "ClusterRole" => {
                suffix(&mut value["metadata"]["name"], namespace);
                let role: ClusterRole = serde_json::from_value(value)?;
                Api::<ClusterRole>::all(client.clone())
                    .create(&PostParams::default(), &role)
                    .await?;
            }
            "ClusterRoleBinding" => {
                suffix(&mut value["metadata"]["name"], namespace);
                suffix(&mut value["roleRef"]["name"], namespace);
                set_subject_namespaces(&mut value);
                let binding: ClusterRoleBinding = serde_json::from_value(value)?;
                Api::<ClusterRoleBinding>::all(client.clone())
                    .create(&PostParams::default(), &binding)
                    .await?;
            }
            other => bail!("{} holds an unexpected {other}", path.display()),
        }
        bound += 1;
    }
    if bound == 0 {
        bail!("{} holds no roles", path.display());
    }
    Ok(())
}

fn suffix(name: &mut serde_json::Value, namespace: &str) {
    let base = name.as_str().unwrap_or_default().to_owned();
    *name = format!("{base}-{namespace}").into();
}

fn set_subject_namespaces(binding: &mut serde_json::Value) {
    if let Some(subjects) = binding["subjects"].as_array_mut() {
        for subject in subjects {
            if subject["kind"] == "ServiceAccount" {
                subject["namespace"] = SERVICE_ACCOUNT_NAMESPACE.into();
            }
        }
    }
}

/// Lets the controller of `namespace` (bound by [`bind_deploy_roles`]) update the webhook
/// configurations `names` too, as docs/operations.md says to do for the Go operator's during a
/// switch: their names join the `resourceNames` of the ClusterRole's update rules.
pub async fn allow_injection_into(
    client: &kube::Client,
    namespace: &str,
    names: &[&str],
) -> anyhow::Result<()> {
    let api = Api::<ClusterRole>::all(client.clone());
    let name = format!("baton-controller-webhook-ca-{namespace}");
    let mut role = api.get(&name).await?;
    for rule in role.rules.iter_mut().flatten() {
        if rule.verbs.iter().any(|verb| verb == "update") {
            rule.resource_names
                .get_or_insert_with(Vec::new)
                .extend(names.iter().map(|name| (*name).to_owned()));
        }
    }
    api.replace(&name, &PostParams::default(), &role).await?;
    Ok(())
}
