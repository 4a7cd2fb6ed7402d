//! What a platform team applies: the manifests of `deploy/` pass the real API server's
//! validation, and both binaries work with exactly the permissions those manifests grant.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use baton_core::gates::HEALTH_CHECK_ANNOTATION;
use baton_e2e::controller_support::{
    Controller, event_reporters, roll_out, wait_group_ready, wait_rollout_complete,
};
use baton_e2e::fixtures::{StatefulSetFixture, rollout_group};
use baton_e2e::install_docs::{
    DocumentedInstall, EXAMPLE_NAMESPACE, SHIPPED_NAMESPACE, Step, assert_installed_as_set,
    deployment_images, documents_read, documents_with_an_install, shipped_namespace_left,
};
use baton_e2e::keys::{MIRROR_API_VERSION, MIRROR_KIND, MIRROR_NAME, NO_DOWNSCALE};
use baton_e2e::prometheus_support::create_health_check;
use baton_e2e::rbac_support::{
    Binary, SERVICE_ACCOUNT_NAMESPACE, bind_deploy_roles, bind_deploy_roles_apart, impersonating,
    the_controller_changes_only_ca_bundles,
};
use baton_e2e::scaling_support::{
    REPLICA_TEMPLATE_API_VERSION, REPLICA_TEMPLATE_KIND, ReplicaTemplates,
    install_replica_template_crd,
};
use baton_e2e::webhook_support::{TestTls, WebhookConfigurations, WebhookReplica};
use baton_e2e::{ControlPlane, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn kubectl(control_plane: &ControlPlane, args: &[&str]) -> (bool, String) {
    let output = Command::new(control_plane.kubectl())
        .args(args)
        .env("KUBECONFIG", control_plane.kubeconfig_path())
        .output()
        .expect("kubectl runs (tests/control-plane/install.sh installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test]
async fn the_manifests_pass_a_server_side_dry_run() {
    // Given the namespace the base installs into
    let control_plane = ControlPlane::shared().await;
    let client = control_plane.admin_client().await;
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {
        "name": SERVICE_ACCOUNT_NAMESPACE,
        "labels": {"kubernetes.io/metadata.name": SERVICE_ACCOUNT_NAMESPACE},
    }}))
    .unwrap();
    let _ = Api::<Namespace>::all(client)
        .create(&PostParams::default(), &namespace)
        .await;

    // When the whole of deploy/ is applied as a server-side dry run
    let (ok, output) = kubectl(
        control_plane,
        &[
            "apply",
            "--dry-run=server",
            "-k",
            deploy_dir().to_str().unwrap(),
        ],
    );

    // Then the API server accepts every object
    assert!(ok, "kubectl apply --dry-run=server failed:\n{output}");
    for object in [
        "namespace/baton-system",
        "serviceaccount/baton-controller",
        "serviceaccount/baton-webhook",
        "role.rbac.authorization.k8s.io/baton-controller",
        "role.rbac.authorization.k8s.io/baton-controller-groups",
        "role.rbac.authorization.k8s.io/baton-webhook-groups",
        "clusterrole.rbac.authorization.k8s.io/baton-controller-webhook-ca",
        "configmap/baton-config",
        "service/baton-webhook",
        "deployment.apps/baton-controller",
        "deployment.apps/baton-webhook",
        "poddisruptionbudget.policy/baton-webhook",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/baton-no-downscale",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/baton-prepare-downscale",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/baton-pod-eviction",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/baton-zpdb-validation",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/baton-state-guard",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/baton-record-guard",
        "priorityclass.scheduling.k8s.io/baton-critical",
        "validatingadmissionpolicy.admissionregistration.k8s.io/baton-controller-changes-only-ca-bundles",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/baton-controller-changes-only-ca-bundles",
        "customresourcedefinition.apiextensions.k8s.io/replicatemplates.rollout-operator.grafana.com",
        "customresourcedefinition.apiextensions.k8s.io/zoneawarepoddisruptionbudgets.rollout-operator.grafana.com",
        "customresourcedefinition.apiextensions.k8s.io/rollouthealthchecks.baton.dev",
        "customresourcedefinition.apiextensions.k8s.io/phasedrollouts.sts.plus",
    ] {
        assert!(output.contains(object), "{object} missing from:\n{output}");
    }
    // And what it renders
    let (ok, rendered) = kubectl(
        control_plane,
        &["kustomize", deploy_dir().to_str().unwrap()],
    );
    assert!(ok, "{rendered}");
    // and every image is referred to by the workspace's version, never `latest`
    let images: Vec<&str> = rendered
        .lines()
        .filter_map(|line| line.trim().strip_prefix("image: "))
        .collect();
    assert!(!images.is_empty());
    let versioned = format!("baton:{}", env!("CARGO_PKG_VERSION"));
    assert!(images.iter().all(|image| *image == versioned), "{images:?}");
    assert_eq!(
        rendered.matches("\nkind: ").count() + usize::from(rendered.starts_with("kind: ")),
        29
    );
}

/// Someone who may do anything with the workloads, configuration and Secrets of `namespace`
/// (and nothing elsewhere): the namespace user docs/security.md defends baton against.
async fn namespace_user(control_plane: &ControlPlane, namespace: &str) -> kube::Client {
    let admin = control_plane.admin_client().await;
    let user = format!("user-of-{namespace}");
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "namespace-user"},
        "rules": [
            {"apiGroups": ["", "apps", "baton.dev", "sts.plus"], "verbs": ["*"], "resources": [
                "pods", "configmaps", "secrets", "serviceaccounts", "serviceaccounts/token",
                "statefulsets", "deployments", "rollouthealthchecks", "phasedrollouts",
            ]},
        ],
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "namespace-user"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "namespace-user"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin, namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    impersonating(control_plane, &user).await.unwrap()
}

#[tokio::test]
async fn deploy_installs_baton_apart_from_the_groups_it_coordinates() {
    // Given a namespace of groups (a workload's, which exists before baton)
    let control_plane = ControlPlane::shared().await;
    let client = control_plane.admin_client().await;
    let groups = format!("baton-groups-{}", std::process::id());
    let namespaces = Api::<Namespace>::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": groups}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    // README's install, laid out as a reader lays it out (in a folder standing for the
    // checkout, under target/); no node pulls the image here
    let image = format!("registry.test/baton@sha256:{}", "1".repeat(64));
    let install = DocumentedInstall::lay_out(
        "README.md",
        &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&groups),
        &groups,
        &image,
        &[],
    );

    // When its `kubectl apply` is run as written, on top of deploy/ as it ships
    install.apply(control_plane);

    // Then the API server holds baton as the overlay set it: both Deployments on the image it
    // names, baton's own objects in baton-system, the groups' namespace wherever baton names it
    for overlay in install.applied_kustomizations() {
        let (ok, live) =
            install.kubectl(Some(control_plane), &["get", "-k", overlay, "-o", "json"]);
        assert!(ok, "kubectl get -k {overlay}:\n{live}");
        let live: serde_json::Value = serde_json::from_str(&live).unwrap();
        let live = live["items"].as_array().expect("a List").clone();
        assert_installed_as_set(&live, &groups, &image);
    }

    // And baton's Deployments, service accounts, configuration and roles for its own objects
    // are in baton-system, told to coordinate the groups' namespace
    let system = "baton-system";
    let deployments = Api::<Deployment>::namespaced(client.clone(), system);
    let mut names: Vec<_> = deployments
        .list(&ListParams::default())
        .await
        .unwrap()
        .iter()
        .map(|d| d.name_any())
        .collect();
    names.sort();
    assert_eq!(names, ["baton-controller", "baton-webhook"]);
    let config = Api::<ConfigMap>::namespaced(client.clone(), system)
        .get("baton-config")
        .await
        .unwrap();
    assert_eq!(config.data.unwrap()["groups-namespace"], groups);
    // and the groups' namespace holds only what baton may do there: no service account, no
    // configuration, no Deployment of baton's
    let in_groups = |kind: &str| {
        let (ok, listed) = kubectl(
            control_plane,
            &[
                "get",
                kind,
                "-n",
                &groups,
                "-o",
                "name",
                "-l",
                "app.kubernetes.io/part-of=baton",
            ],
        );
        assert!(ok, "{listed}");
        let mut listed: Vec<String> = listed.lines().map(str::to_owned).collect();
        listed.sort();
        listed
    };
    assert_eq!(
        in_groups("roles,rolebindings"),
        [
            "role.rbac.authorization.k8s.io/baton-controller-groups",
            "role.rbac.authorization.k8s.io/baton-webhook-groups",
            "rolebinding.rbac.authorization.k8s.io/baton-controller-groups",
            "rolebinding.rbac.authorization.k8s.io/baton-webhook-groups",
        ]
    );
    assert!(in_groups("serviceaccounts,configmaps,secrets,deployments,services").is_empty());
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get("baton-no-downscale")
        .await
        .unwrap();
    assert_eq!(configuration.labels()["grafana.com/namespace"], groups);

    // And a user of the groups' namespace, who may do anything with its pods, workloads,
    // ConfigMaps, Secrets and service accounts, cannot take baton's identity: a pod runs as a
    // service account of its own namespace (the kubelet asks for its token there), and baton's
    // are not there, nor may the user ask for one in baton's namespace
    let user = namespace_user(control_plane, &groups).await;
    let token_request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    for binary in [Binary::Controller, Binary::Webhook] {
        let in_own = Api::<ServiceAccount>::namespaced(user.clone(), &groups)
            .create_token_request(
                binary.service_account(),
                &PostParams::default(),
                &token_request,
            )
            .await;
        assert!(
            matches!(&in_own, Err(kube::Error::Api(status)) if status.code == 404),
            "a token for {} in the groups' namespace: {in_own:?}",
            binary.service_account()
        );
        let in_batons = Api::<ServiceAccount>::namespaced(user.clone(), system)
            .create_token_request(
                binary.service_account(),
                &PostParams::default(),
                &token_request,
            )
            .await;
        assert!(
            matches!(&in_batons, Err(kube::Error::Api(status)) if status.code == 403),
            "a token for {} in baton's namespace: {in_batons:?}",
            binary.service_account()
        );
    }
    // nor read or change baton's configuration, nor read its certificate Secret
    let forbidden = |result: Result<(), kube::Error>| matches!(result, Err(kube::Error::Api(status)) if status.code == 403);
    let user_configs = Api::<ConfigMap>::namespaced(user.clone(), system);
    assert!(forbidden(
        user_configs.get("baton-config").await.map(|_| ())
    ));
    let patch = json!({"data": {"groups-namespace": "kube-system"}});
    assert!(forbidden(
        user_configs
            .patch(
                "baton-config",
                &PatchParams::default(),
                &Patch::Merge(&patch)
            )
            .await
            .map(|_| ())
    ));
    let user_secrets = Api::<Secret>::namespaced(user.clone(), system);
    assert!(forbidden(
        user_secrets.get("baton-webhook-tls").await.map(|_| ())
    ));
    assert!(forbidden(
        user_secrets.list(&ListParams::default()).await.map(|_| ())
    ));
    // while the same user does what the namespace's role grants (so the refusals above are the
    // layout's, not a user who may do nothing)
    let own_config: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "users-own"}})).unwrap();
    Api::<ConfigMap>::namespaced(user.clone(), &groups)
        .create(&PostParams::default(), &own_config)
        .await
        .expect("the namespace user writes ConfigMaps of the groups' namespace");
    let own_account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "users-own"}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &groups)
        .create(&PostParams::default(), &own_account)
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(user.clone(), &groups)
        .create_token_request("users-own", &PostParams::default(), &token_request)
        .await
        .expect("the namespace user has tokens of the groups' namespace's service accounts");

    // And while no webhook replica answers (none runs here), a Deployment of the groups'
    // namespace cannot be scaled down, but baton's own can: a fix for baton rolls out
    let app: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "app"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "app"}},
            "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {"containers": [{"name": "app", "image": "app:1"}]},
            },
        },
    }))
    .unwrap();
    let groups_deployments = Api::<Deployment>::namespaced(client.clone(), &groups);
    groups_deployments
        .create(&PostParams::default(), &app)
        .await
        .unwrap();
    // (a downscale through /scale: what the no-downscale webhook is always asked about)
    let scale_down = |deployments: Api<Deployment>, name: &'static str| async move {
        deployments
            .patch_scale(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 0}})),
            )
            .await
            .map(|_| ())
            .map_err(|error| error.to_string())
    };
    wait_until(
        TIMEOUT,
        "the unanswered no-downscale webhook refuses a downscale",
        || async {
            scale_down(groups_deployments.clone(), "app")
                .await
                .is_err_and(|error| error.contains("no-downscale"))
        },
    )
    .await;
    scale_down(deployments.clone(), "baton-webhook")
        .await
        .expect("baton's own Deployment is not judged by its own webhooks");

    // Clean-up: the groups' namespace, baton's objects and the cluster-scoped ones (the CRDs
    // stay: other scenarios use them)
    for object in [
        "validatingwebhookconfiguration/baton-no-downscale",
        "mutatingwebhookconfiguration/baton-prepare-downscale",
        "validatingwebhookconfiguration/baton-pod-eviction",
        "validatingwebhookconfiguration/baton-zpdb-validation",
        "validatingwebhookconfiguration/baton-state-guard",
        "validatingwebhookconfiguration/baton-record-guard",
        "priorityclass/baton-critical",
        "clusterrolebinding/baton-controller-webhook-ca",
        "clusterrole/baton-controller-webhook-ca",
    ] {
        kubectl(control_plane, &["delete", "--wait=false", object]);
    }
    for object in ["deployment/baton-controller", "deployment/baton-webhook"] {
        kubectl(
            control_plane,
            &["delete", "--wait=false", "-n", system, object],
        );
    }
    namespaces
        .delete(&groups, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn the_controller_rolls_out_with_only_the_permissions_of_its_role() {
    // Given a namespace where the controller's service account has exactly deploy/'s roles
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "rbac-controller").await;
    bind_deploy_roles(&namespace.client(), namespace.name(), Binary::Controller)
        .await
        .unwrap();
    let _simulator = PodSimulator::for_namespace(&namespace).await;
    let kubeconfig = control_plane
        .service_account_kubeconfig(
            SERVICE_ACCOUNT_NAMESPACE,
            Binary::Controller.service_account(),
        )
        .unwrap();
    install_replica_template_crd(control_plane).await.unwrap();
    let controller = Controller::start_as(
        kubeconfig,
        namespace.name(),
        &[("BATON_CONTROLLER__SCALING_POLL_INTERVAL", "300ms")],
    )
    .await;
    let mut names = Vec::new();
    for fixture in rollout_group("rbac", &["a", "b"], 2) {
        names.push(
            fixture
                .create(&namespace.client(), namespace.name())
                .await
                .metadata
                .name
                .unwrap(),
        );
    }
    wait_group_ready(&namespace.client(), namespace.name(), &names).await;

    // When a new version is rolled out
    roll_out(&namespace.client(), namespace.name(), &names, "v2").await;

    // Then the rollout completes (watches, pod deletions, status updates, the lease), baton
    // explains itself (Events) and issues the webhook's certificate Secret, all without a
    // permission error
    wait_rollout_complete(&namespace.client(), namespace.name(), &names).await;
    assert!(
        !event_reporters(&namespace.client(), namespace.name(), "RolloutPodDeleted")
            .await
            .is_empty()
    );
    wait_until(TIMEOUT, "the certificate Secret is issued", || async {
        namespace
            .api::<Secret>()
            .get("baton-webhook-tls")
            .await
            .is_ok_and(|secret| {
                secret.data.is_some_and(|data| {
                    ["tls.crt", "tls.key", "ca.crt"]
                        .iter()
                        .all(|key| data.contains_key(*key))
                })
            })
    })
    .await;

    // And it mirrors replicas from a ReplicaTemplate (discovery, the reference's scale and
    // status, the StatefulSet's scale)
    let templates = ReplicaTemplates::new(namespace.client(), namespace.name());
    templates.create("rbac-reference", 2).await;
    StatefulSetFixture::new("rbac-mirror")
        .group("rbac-mirror")
        .replicas(1)
        .annotation(MIRROR_NAME, "rbac-reference")
        .annotation(MIRROR_KIND, REPLICA_TEMPLATE_KIND)
        .annotation(MIRROR_API_VERSION, REPLICA_TEMPLATE_API_VERSION)
        .create(&namespace.client(), namespace.name())
        .await;
    wait_until(
        TIMEOUT,
        "the mirror follows its ReplicaTemplate and writes status back",
        || async {
            let replicas = namespace
                .api::<StatefulSet>()
                .get("rbac-mirror")
                .await
                .ok()
                .and_then(|sts| sts.spec?.replicas);
            replicas == Some(2) && templates.status_replicas("rbac-reference").await == Some(2)
        },
    )
    .await;

    // And it makes a Job check's Job for the step (the check read, the Job read, created)
    create_health_check(
        &namespace.client(),
        namespace.name(),
        "smoke",
        json!({"job": {"template": {"spec": {"template": {"spec": {
            "containers": [{"name": "smoke", "image": "smoke:1"}]}}}}}, "interval": "1s"}),
    )
    .await;
    let checked = StatefulSetFixture::new("rbac-job-zone-a")
        .group("rbac-job")
        .replicas(1)
        .annotation(HEALTH_CHECK_ANNOTATION, "smoke")
        .create(&namespace.client(), namespace.name())
        .await
        .metadata
        .name
        .unwrap();
    wait_group_ready(
        &namespace.client(),
        namespace.name(),
        std::slice::from_ref(&checked),
    )
    .await;
    roll_out(&namespace.client(), namespace.name(), &[checked], "v2").await;
    wait_until(TIMEOUT, "the check's Job is made", || async {
        namespace
            .api::<Job>()
            .list(&ListParams::default().labels("baton.dev/health-check=smoke"))
            .await
            .is_ok_and(|jobs| !jobs.items.is_empty())
    })
    .await;
    let output = controller.process.output();
    assert!(
        !output.contains("forbidden"),
        "a call was refused:\n{output}"
    );
}

#[tokio::test]
async fn the_webhook_judges_with_only_the_permissions_of_its_role() {
    // Given a namespace where the webhook's service account has exactly deploy/'s roles, and a
    // webhook replica running as that account
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "rbac-webhook").await;
    bind_deploy_roles(&namespace.client(), namespace.name(), Binary::Webhook)
        .await
        .unwrap();
    let kubeconfig = control_plane
        .service_account_kubeconfig(SERVICE_ACCOUNT_NAMESPACE, Binary::Webhook.service_account())
        .unwrap();
    let tls = TestTls::generate().unwrap();
    let replica = WebhookReplica::start_as(kubeconfig, &tls, namespace.name(), &[])
        .await
        .unwrap();
    let _configurations =
        WebhookConfigurations::register(control_plane, namespace.name(), &tls, &replica)
            .await
            .unwrap();
    StatefulSetFixture::new("guarded")
        .replicas(2)
        .label(NO_DOWNSCALE, "true")
        .create(&namespace.client(), namespace.name())
        .await;
    let statefulsets = namespace.api::<StatefulSet>();

    // When it is scaled down through /scale (the parent's labels come from the webhook's watch)
    // Then the downscale is denied with the no-downscale message
    wait_until(TIMEOUT, "the downscale through /scale is denied", || {
        let statefulsets = statefulsets.clone();
        async move {
            statefulsets
                .patch_scale(
                    "guarded",
                    &PatchParams::default().dry_run(),
                    &Patch::Merge(json!({"spec": {"replicas": 1}})),
                )
                .await
                .is_err_and(|error| error.to_string().contains(NO_DOWNSCALE))
        }
    })
    .await;
    let output = replica.process.output();
    assert!(
        !output.contains("forbidden"),
        "a call was refused:\n{output}"
    );
}

#[tokio::test]
async fn actions_outside_the_roles_are_refused() {
    // Given the controller's and the webhook's service accounts with deploy/'s roles
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "rbac-refused").await;
    bind_deploy_roles(&namespace.client(), namespace.name(), Binary::Controller)
        .await
        .unwrap();
    bind_deploy_roles(&namespace.client(), namespace.name(), Binary::Webhook)
        .await
        .unwrap();
    StatefulSetFixture::new("precious")
        .replicas(1)
        .create(&namespace.client(), namespace.name())
        .await;
    let as_account = |binary: Binary| async move {
        let path = control_plane
            .service_account_kubeconfig(SERVICE_ACCOUNT_NAMESPACE, binary.service_account())
            .unwrap();
        baton_e2e::control_plane::supervisor::client_from(path)
            .await
            .unwrap()
    };
    let controller = as_account(Binary::Controller).await;
    let webhook = as_account(Binary::Webhook).await;
    let forbidden = |result: Result<(), kube::Error>| matches!(result, Err(kube::Error::Api(status)) if status.code == 403);

    // Then neither may delete a StatefulSet, read other Secrets, or the webhook delete pods
    let delete_statefulset = |client: kube::Client| {
        let namespace = namespace.name().to_owned();
        async move {
            Api::<StatefulSet>::namespaced(client, &namespace)
                .delete("precious", &DeleteParams::default())
                .await
                .map(|_| ())
        }
    };
    assert!(
        forbidden(delete_statefulset(controller.clone()).await),
        "the controller deleted a StatefulSet"
    );
    assert!(
        forbidden(delete_statefulset(webhook.clone()).await),
        "the webhook deleted a StatefulSet"
    );
    let list_secrets = Api::<Secret>::namespaced(controller.clone(), namespace.name())
        .list(&ListParams::default())
        .await
        .map(|_| ());
    assert!(
        forbidden(list_secrets),
        "the controller listed every Secret"
    );
    let webhook_client = webhook.clone();
    let delete_pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(webhook, namespace.name())
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .map(|_| ());
    assert!(forbidden(delete_pods), "the webhook deleted pods");
    // nor either patch a pod (the Go operator dropped that verb in v0.40; baton never had it)
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "bystander"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
    }))
    .unwrap();
    namespace
        .api::<k8s_openapi::api::core::v1::Pod>()
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    for (who, client) in [("controller", &controller), ("webhook", &webhook_client)] {
        let patched = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), namespace.name())
            .patch(
                "bystander",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"grafana.com/ready-time": "2099-01-01T00:00:00Z"}}})),
            )
            .await
            .map(|_| ());
        assert!(forbidden(patched), "the {who} patched a pod");
    }
    // nor the controller rewrite another product's webhook configuration (only baton's own,
    // by name)
    let others: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": format!("someone-elses-{}", namespace.name())},
        "webhooks": [],
    }))
    .unwrap();
    let admin_configurations =
        Api::<ValidatingWebhookConfiguration>::all(control_plane.admin_client().await);
    let created = admin_configurations
        .create(&PostParams::default(), &others)
        .await
        .unwrap();
    let rewrite = Api::<ValidatingWebhookConfiguration>::all(controller.clone())
        .replace(&created.name_any(), &PostParams::default(), &created)
        .await
        .map(|_| ());
    let _ = admin_configurations
        .delete(&created.name_any(), &DeleteParams::default())
        .await;
    assert!(
        forbidden(rewrite),
        "the controller rewrote another product's webhook configuration"
    );
    // While what the roles grant works
    assert!(
        Api::<StatefulSet>::namespaced(controller, namespace.name())
            .get("precious")
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn baton_runs_apart_from_the_groups_it_coordinates_with_its_lease_and_secret_in_its_own_namespace()
 {
    // Given a namespace of groups and one of baton's own, deploy/'s controller roles bound as
    // deploy/ lays them out: its Lease and Secret rules in its own, the rest in the groups'
    let control_plane = ControlPlane::shared().await;
    let groups = TestNamespace::create(control_plane, "apart-groups").await;
    let system = TestNamespace::create(control_plane, "apart-baton").await;
    bind_deploy_roles_apart(
        &groups.client(),
        system.name(),
        groups.name(),
        Binary::Controller,
    )
    .await
    .unwrap();
    let _simulator = PodSimulator::for_namespace(&groups).await;
    let kubeconfig = control_plane
        .service_account_kubeconfig(
            SERVICE_ACCOUNT_NAMESPACE,
            Binary::Controller.service_account(),
        )
        .unwrap();

    // When the controller coordinates the groups' namespace from its own
    let controller = Controller::start_as(
        kubeconfig,
        groups.name(),
        &[("BATON_SYSTEM_NAMESPACE", system.name())],
    )
    .await;

    // Then a group there rolls out
    let mut names = Vec::new();
    for fixture in rollout_group("apart", &["a", "b"], 2) {
        let created = fixture.create(&groups.client(), groups.name()).await;
        names.push(created.metadata.name.unwrap());
    }
    wait_group_ready(&groups.client(), groups.name(), &names).await;
    roll_out(&groups.client(), groups.name(), &names, "v2").await;
    wait_rollout_complete(&groups.client(), groups.name(), &names).await;
    // and baton's Lease and certificate Secret (with its CA key) are in its own namespace only,
    // out of reach of whoever creates pods beside the groups
    let leases =
        |namespace: &TestNamespace| namespace.api::<k8s_openapi::api::coordination::v1::Lease>();
    assert!(
        leases(&system)
            .get_opt("baton-controller")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        leases(&groups)
            .get_opt("baton-controller")
            .await
            .unwrap()
            .is_none()
    );
    let secrets = system.api::<Secret>();
    wait_until(
        TIMEOUT,
        "the certificate Secret in baton's namespace",
        || async {
            secrets
                .get_opt("baton-webhook-tls")
                .await
                .ok()
                .flatten()
                .and_then(|secret| secret.data)
                .is_some_and(|data| data.contains_key("ca.key"))
        },
    )
    .await;
    assert!(
        groups
            .api::<Secret>()
            .get_opt("baton-webhook-tls")
            .await
            .unwrap()
            .is_none()
    );
    // and nothing it needed was refused: the roles of each namespace are enough
    let output = controller.process.output();
    assert!(
        !output.contains("forbidden"),
        "a call was refused:\n{output}"
    );
}

#[tokio::test]
async fn the_controller_may_change_only_the_ca_bundle_of_a_webhook_configuration() {
    the_controller_changes_only_ca_bundles(ControlPlane::shared().await).await;
}

/// The groups' namespace and image the documented installs are laid out with here: neither
/// deploy/'s nor the documentation's, so that a place either leaves shows.
const DOCUMENTED_NAMESPACE: &str = "e2e-documented";

fn documented_image() -> String {
    format!("registry.test/baton@sha256:{}", "2".repeat(64))
}

#[test]
fn every_documented_install_builds_the_image_then_applies_it_server_side_with_its_namespace_everywhere()
 {
    // Given every install the documentation gives (README.md and docs/: the snippets marked
    // `<!-- install -->`), of which there is one, README's
    let documents = documents_with_an_install();
    assert_eq!(documents, ["README.md"], "one install path, written once");
    for document in documents {
        // When it is laid out as written, for a namespace and an image of its reader's
        let folder = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "documented-{}-{}",
            document.replace('/', "-"),
            std::process::id()
        ));
        let image = documented_image();
        let install =
            DocumentedInstall::lay_out(&document, &folder, DOCUMENTED_NAMESPACE, &image, &[]);

        // Then it builds the image before it applies anything, and applies server-side
        let first_apply = install
            .steps
            .iter()
            .position(Step::is_apply)
            .unwrap_or_else(|| panic!("{document}'s install applies nothing"));
        assert!(
            install.steps[..first_apply].contains(&Step::BuildImage),
            "{document}: the image is built before it is applied: {:?}",
            install.steps
        );
        for step in install.steps.iter().filter(|step| step.is_apply()) {
            let Step::Kubectl(args) = step else {
                unreachable!()
            };
            assert!(
                args.iter().any(|arg| arg == "--server-side"),
                "{document}: `kubectl {}` applies server-side",
                args.join(" ")
            );
        }
        // and what each apply would apply (the installed kubectl's kustomize, from the
        // checkout's root) runs the image it set, with baton's objects in baton-system and the
        // namespace it named in every place that names the groups', none left at deploy/'s
        let overlays = install.applied_kustomizations();
        assert!(!overlays.is_empty(), "{document} applies a kustomization");
        for overlay in overlays {
            let rendered = install.render(overlay);
            assert_eq!(
                shipped_namespace_left(&rendered),
                Vec::<String>::new(),
                "{document}: `{overlay}` leaves the groups' namespace at deploy/'s"
            );
            assert_installed_as_set(&rendered, DOCUMENTED_NAMESPACE, &image);
        }
    }
}

#[test]
fn an_overlay_that_names_the_groups_namespace_without_the_component_leaves_every_place_at_deploys()
{
    // Given README's overlay with its component left out: the groups' namespace is written,
    // and no place reads it (as an overlay patching one place of several would leave the rest)
    let folder = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("documented-drift-{}", std::process::id()));
    let install = DocumentedInstall::lay_out(
        "README.md",
        &folder,
        DOCUMENTED_NAMESPACE,
        &documented_image(),
        &[],
    );
    let overlay = install.applied_kustomizations()[0];
    let kustomization = folder.join(overlay).join("kustomization.yaml");
    let written = std::fs::read_to_string(&kustomization).unwrap();
    let without_component: String = written
        .lines()
        .filter(|line| !line.contains("components:") && !line.contains("deploy/groups-namespace"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(
        without_component, written,
        "README's overlay lists the component"
    );
    std::fs::write(&kustomization, without_component).unwrap();

    // When it is rendered
    let rendered = install.render(overlay);

    // Then the check of the documented installs finds every place deploy/ names the groups'
    // namespace still at deploy/'s: the configuration, both binaries' Roles and RoleBindings,
    // and each webhook configuration's label and namespace selector
    let mut expected = vec![
        "ConfigMap/baton-config /data/groups-namespace".to_owned(),
        "Role/baton-controller-groups /metadata/namespace".to_owned(),
        "Role/baton-webhook-groups /metadata/namespace".to_owned(),
        "RoleBinding/baton-controller-groups /metadata/namespace".to_owned(),
        "RoleBinding/baton-webhook-groups /metadata/namespace".to_owned(),
    ];
    for configuration in [
        "MutatingWebhookConfiguration/baton-prepare-downscale",
        "ValidatingWebhookConfiguration/baton-no-downscale",
        "ValidatingWebhookConfiguration/baton-pod-eviction",
        "ValidatingWebhookConfiguration/baton-record-guard",
        "ValidatingWebhookConfiguration/baton-state-guard",
        "ValidatingWebhookConfiguration/baton-zpdb-validation",
    ] {
        expected.push(format!(
            "{configuration} /metadata/labels/grafana.com~1namespace"
        ));
        expected.push(format!(
            "{configuration} /webhooks/0/namespaceSelector/matchLabels/kubernetes.io~1metadata.name"
        ));
    }
    expected.sort();
    let mut left = shipped_namespace_left(&rendered);
    left.sort();
    assert_eq!(left, expected);
    // while the image, set in the same overlay, is the one it names
    for (container, image) in deployment_images(&rendered) {
        assert_eq!(image, documented_image(), "{container}");
    }
}

#[test]
fn the_docs_apply_kustomizations_server_side_and_never_deploy_as_it_ships() {
    // Given every line of README.md, docs/ and deploy/'s kustomizations that applies a
    // kustomization with kubectl
    let root = deploy_dir().join("..");
    let mut texts: Vec<PathBuf> = documents_read()
        .iter()
        .map(|document| root.join(document))
        .collect();
    texts.push(deploy_dir().join("kustomization.yaml"));
    let mut applies = Vec::new();
    for text in &texts {
        let content = std::fs::read_to_string(text).unwrap();
        for (number, line) in content.lines().enumerate() {
            let words: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || c == '`')
                .filter(|word| !word.is_empty())
                .collect();
            let apply = words.iter().position(|word| *word == "apply");
            let kustomization = words
                .iter()
                .position(|word| *word == "-k" || *word == "--kustomize");
            if words.contains(&"kubectl")
                && let (Some(apply), Some(kustomization)) = (apply, kustomization)
                && apply < kustomization
            {
                let at = format!("{}:{}", text.display(), number + 1);
                applies.push((at, words[apply..].join(" ")));
            }
        }
    }
    assert!(
        applies.iter().any(|(at, _)| at.contains("README.md")),
        "README applies its overlay: {applies:?}"
    );

    // Then each is server-side, and none applies deploy/ itself, whose image no node pulls and
    // whose groups' namespace is `default` (the documented overlay names both)
    for (at, apply) in &applies {
        assert!(apply.contains("--server-side"), "{at}: `{apply}`");
        let folder = apply
            .split(' ')
            .skip_while(|word| *word != "-k" && *word != "--kustomize")
            .nth(1)
            .unwrap_or_default();
        assert!(
            !["deploy", "deploy/", "./deploy", "./deploy/"].contains(&folder),
            "{at}: `{apply}` applies deploy/ as it ships"
        );
    }
    // (the example namespace is what the laid-out installs replace)
    assert_ne!(EXAMPLE_NAMESPACE, SHIPPED_NAMESPACE);
}
