//! Binding the exact roles of `deploy/` to baton's service-account identities in a test
//! namespace, so a test can run a binary with nothing more than production gives it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::controller_support::Controller;
use crate::{ControlPlane, TestNamespace, wait_until};

/// The namespace the control plane's token file puts baton's service accounts in.
pub const SERVICE_ACCOUNT_NAMESPACE: &str = "baton-system";

/// Which binary's RBAC files: `deploy/base/<binary>-rbac.yaml` (its service account and what it
/// may do in baton's own namespace and cluster-wide) and `deploy/groups/<binary>-rbac.yaml`
/// (what it may do in the groups' namespace).
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

    fn manifest(self, part: &str) -> PathBuf {
        let file = match self {
            Self::Controller => "controller-rbac.yaml",
            Self::Webhook => "webhook-rbac.yaml",
        };
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy")
            .join(part)
            .join(file)
    }
}

/// Binds `binary`'s roles of deploy/ to `system:serviceaccount:baton-system:<binary>` with
/// baton's own objects and the groups in one `namespace` (baton's `system_namespace` left
/// empty). Cluster-scoped objects get the namespace as a suffix so tests do not collide.
pub async fn bind_deploy_roles(
    client: &kube::Client,
    namespace: &str,
    binary: Binary,
) -> anyhow::Result<()> {
    bind_deploy_roles_apart(client, namespace, namespace, binary).await
}

/// Binds `binary`'s roles of deploy/ as deploy/ lays them out: those of baton's own namespace
/// in `system`, those of the groups' namespace in `groups` (cluster-scoped objects suffixed
/// with `groups`).
pub async fn bind_deploy_roles_apart(
    client: &kube::Client,
    system: &str,
    groups: &str,
    binary: Binary,
) -> anyhow::Result<()> {
    let bound = create_roles(client, &binary.manifest("base"), system, groups).await?
        + create_roles(client, &binary.manifest("groups"), groups, groups).await?;
    if bound == 0 {
        bail!("deploy/ holds no roles for {}", binary.service_account());
    }
    Ok(())
}

/// Creates the roles and bindings of one RBAC manifest, the namespaced ones in `namespace`.
async fn create_roles(
    client: &kube::Client,
    path: &Path,
    namespace: &str,
    suffix_with: &str,
) -> anyhow::Result<usize> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
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
                suffix(&mut value["metadata"]["name"], suffix_with);
                let role: ClusterRole = serde_json::from_value(value)?;
                Api::<ClusterRole>::all(client.clone())
                    .create(&PostParams::default(), &role)
                    .await?;
            }
            "ClusterRoleBinding" => {
                suffix(&mut value["metadata"]["name"], suffix_with);
                suffix(&mut value["roleRef"]["name"], suffix_with);
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
    Ok(bound)
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

/// A client of the control plane acting as `user` (the admin impersonating them): what that
/// user may do is what RBAC grants them, nothing more.
pub async fn impersonating(
    control_plane: &ControlPlane,
    user: &str,
) -> anyhow::Result<kube::Client> {
    let mut kubeconfig = kube::config::Kubeconfig::read_from(control_plane.kubeconfig_path())?;
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.impersonate = Some(user.to_owned());
        }
    }
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

/// A change made to a webhook configuration's JSON.
type Change = fn(&mut serde_json::Value);

/// One webhook configuration of each kind, as an installer would create them, named `name`
/// and labelled for `namespace`'s CA injection.
fn webhook_configurations(
    name: &str,
    namespace: &str,
) -> (ValidatingWebhookConfiguration, MutatingWebhookConfiguration) {
    let object = json!({
        "metadata": {"name": name, "labels": {
            "grafana.com/inject-rollout-operator-ca": "true",
            "grafana.com/namespace": namespace,
        }},
        "webhooks": [{
            "name": "guarded.baton.example.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"service": {"name": "baton-webhook", "namespace": namespace, "path": "/admission/no-downscale"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["statefulsets"]}],
        }],
    });
    (
        serde_json::from_value(object.clone()).unwrap(),
        serde_json::from_value(object).unwrap(),
    )
}

/// The scenario of deploy/'s admission policy, on any control plane: baton's controller may
/// change nothing in a webhook configuration but its CA bundle, and its own injection still
/// works. Run on the newest release (tests/tests/deploy.rs) and the oldest one supported
/// (tests/tests/oldest_kubernetes.rs), whose CEL differs.
pub async fn the_controller_changes_only_ca_bundles(control_plane: &ControlPlane) {
    // Given deploy/'s admission policy, baton's webhook configurations (one of each kind) and
    // the controller's service account with deploy/'s roles, allowed by RBAC to update them
    let policy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/admission-policy.yaml");
    let applied = std::process::Command::new(control_plane.kubectl())
        .args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(&policy)
        .env("KUBECONFIG", control_plane.kubeconfig_path())
        .output()
        .expect("kubectl runs");
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let namespace = TestNamespace::create(control_plane, "ca-bundle-only").await;
    bind_deploy_roles(&namespace.client(), namespace.name(), Binary::Controller)
        .await
        .unwrap();
    let name = format!("baton-guarded-{}", namespace.name());
    allow_injection_into(&namespace.client(), namespace.name(), &[&name])
        .await
        .unwrap();
    let admin = control_plane.admin_client().await;
    let (validating, mutating) = webhook_configurations(&name, namespace.name());
    let admin_validating = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    let admin_mutating = Api::<MutatingWebhookConfiguration>::all(admin.clone());
    admin_validating
        .create(&PostParams::default(), &validating)
        .await
        .unwrap();
    admin_mutating
        .create(&PostParams::default(), &mutating)
        .await
        .unwrap();
    let kubeconfig = control_plane
        .service_account_kubeconfig(
            SERVICE_ACCOUNT_NAMESPACE,
            Binary::Controller.service_account(),
        )
        .unwrap();
    let controller = crate::control_plane::supervisor::client_from(kubeconfig)
        .await
        .unwrap();
    let as_controller = Api::<ValidatingWebhookConfiguration>::all(controller.clone());
    // The controller's write: the configuration as read now, changed by `change` (a dry run
    // when `dry_run`: judged by the same admission, stored nowhere).
    let write_as_controller = |change: Change, dry_run: bool| {
        let (admin_validating, as_controller, name) = (
            admin_validating.clone(),
            as_controller.clone(),
            name.clone(),
        );
        async move {
            let current = admin_validating.get(&name).await.unwrap();
            let mut value = serde_json::to_value(&current).unwrap();
            change(&mut value);
            let changed: ValidatingWebhookConfiguration = serde_json::from_value(value).unwrap();
            let params = PostParams {
                dry_run,
                ..PostParams::default()
            };
            as_controller
                .replace(&name, &params, &changed)
                .await
                .map(|_| ())
        }
    };
    let write = |change: Change| write_as_controller(change, false);
    let refused_by_the_policy = |result: &Result<(), kube::Error>| {
        matches!(result, Err(kube::Error::Api(status))
            if status.code == 403 && status.message.contains("may change only the caBundle"))
    };

    // When the controller's identity widens a rule to every resource
    // Then the API server refuses it (once it has loaded the policy: a dry run until then, so
    // that a write let through before would not leave the rule wide, every later attempt then
    // changing nothing and rightly allowed)
    wait_until(
        Duration::from_secs(90),
        "the policy refuses a wider rule",
        || async {
            let widen: Change =
                |value| value["webhooks"][0]["rules"][0]["resources"] = json!(["*"]);
            refused_by_the_policy(&write_as_controller(widen, true).await)
        },
    )
    .await;
    assert!(
        refused_by_the_policy(
            &write(|value| value["webhooks"][0]["rules"][0]["resources"] = json!(["*"])).await
        ),
        "the policy refuses the wider rule itself, not only its dry run"
    );
    // and every other change an attacker holding its token would make
    let attacks: [(&str, Change); 8] = [
        ("another backend Service", |value| {
            value["webhooks"][0]["clientConfig"]["service"]["name"] = json!("attacker")
        }),
        ("a URL backend", |value| {
            value["webhooks"][0]["clientConfig"] = json!({"url": "https://attacker.example.com/"})
        }),
        ("every namespace", |value| {
            value["webhooks"][0]["namespaceSelector"] = json!({})
        }),
        ("an object selector", |value| {
            value["webhooks"][0]["objectSelector"] = json!({"matchLabels": {"only": "mine"}})
        }),
        ("failing open", |value| {
            value["webhooks"][0]["failurePolicy"] = json!("Ignore")
        }),
        ("a condition that skips every request", |value| {
            value["webhooks"][0]["matchConditions"] =
                json!([{"name": "never", "expression": "false"}])
        }),
        ("a webhook of their own", |value| {
            let mut extra = value["webhooks"][0].clone();
            extra["name"] = json!("attacker.example.com");
            value["webhooks"].as_array_mut().unwrap().push(extra);
        }),
        ("losing the injection label", |value| {
            value["metadata"]["labels"] = json!({})
        }),
    ];
    for (attack, change) in attacks {
        let result = write(change).await;
        assert!(refused_by_the_policy(&result), "{attack}: {result:?}");
    }
    // and the mutating configuration's reinvocation too
    let current = admin_mutating.get(&name).await.unwrap();
    let mut reinvoked = current.clone();
    reinvoked.webhooks.as_mut().unwrap()[0].reinvocation_policy = Some("IfNeeded".into());
    let result = Api::<MutatingWebhookConfiguration>::all(controller.clone())
        .replace(&name, &PostParams::default(), &reinvoked)
        .await
        .map(|_| ());
    assert!(refused_by_the_policy(&result), "reinvocation: {result:?}");

    // While the controller's own injection (the CA bundle alone) goes through
    let _controller = Controller::start_as(kubeconfig, namespace.name(), &[]).await;
    wait_until(
        Duration::from_secs(90),
        "the CA is injected into both",
        || async {
            let validating = admin_validating.get(&name).await.unwrap();
            let mutating = admin_mutating.get(&name).await.unwrap();
            validating.webhooks.unwrap()[0]
                .client_config
                .ca_bundle
                .is_some()
                && mutating.webhooks.unwrap()[0]
                    .client_config
                    .ca_bundle
                    .is_some()
        },
    )
    .await;
    // and an administrator changes what they like
    let mut widened = admin_validating.get(&name).await.unwrap();
    widened.webhooks.as_mut().unwrap()[0]
        .rules
        .as_mut()
        .unwrap()[0]
        .resources = Some(vec!["statefulsets".into(), "deployments".into()]);
    admin_validating
        .replace(&name, &PostParams::default(), &widened)
        .await
        .expect("the policy binds baton's controller only");
    let _ = admin_validating
        .delete(&name, &DeleteParams::default())
        .await;
    let _ = admin_mutating.delete(&name, &DeleteParams::default()).await;
}

/// The identity a hub's controller reaches a member cluster with: deploy/member-cluster's
/// ServiceAccount `baton-system/baton-member` (system/member-account.yaml), whose token
/// `kubectl baton cluster add` writes into the hub's Secret, which deploy/member-cluster's RoleBinding
/// binds and its state guard lets set baton's memory.
pub const MEMBER_IDENTITY: (&str, &str) = (SERVICE_ACCOUNT_NAMESPACE, "baton-member");

/// The API server's name for [`MEMBER_IDENTITY`].
pub fn member_user() -> String {
    format!(
        "system:serviceaccount:{}:{}",
        MEMBER_IDENTITY.0, MEMBER_IDENTITY.1
    )
}
