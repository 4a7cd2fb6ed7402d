//! One baton-webhook serving a whole cluster on the real control plane: `namespaces: ["*"]`
//! narrowed by a `namespace_selector`, and webhook configurations whose namespaceSelector is
//! that same selector (as deploy/cluster-wide installs them). Each review is judged in its own
//! namespace; a namespace the selector leaves out is never judged.

use std::time::Duration;

use baton_e2e::controller_support::wait_group_ready;
use baton_e2e::crds;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::keys::{
    MIN_TIME_BETWEEN_ZONES_DOWNSCALE, PREPARE_DOWNSCALE, PREPARE_DOWNSCALE_PATH,
    PREPARE_DOWNSCALE_PORT,
};
use baton_e2e::namespace::random_suffix;
use baton_e2e::renders::{
    differences, documents, find, kinds_and_names, kustomized_deploy, run, webhook_configurations,
};
use baton_e2e::webhook_support::{
    TestTls, WebhookConfigurations, WebhookReplica, free_port, scale, wait_for_webhooks,
};
use baton_e2e::zpdb_support::{
    budget, client_without_retries, evict, evict_dry_run, zpdb_resource,
};
use baton_e2e::{ControlPlane, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
const GROUP: &str = "ingester";
const ZONES: [&str; 3] = ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"];
/// The label the scenario's selector asks of a namespace (its value is the run's own, so that
/// namespaces of other tests sharing the control plane are never served).
const SERVED: &str = "baton.test/served";

/// A namespace of the scenario: zones a, b and c of group "ingester" (2 ready pods each, the
/// pods labelled with the group as a budget selects them), opted in to prepare-downscale with
/// endpoints nobody listens on (so a downscale that is judged is refused: its pods cannot
/// prepare), and a budget allowing one unavailable pod.
struct Served {
    namespace: TestNamespace,
    simulator: PodSimulator,
}

impl Served {
    async fn create(control_plane: &ControlPlane, prefix: &str, label: Option<&str>) -> Self {
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let (client, ns) = (namespace.client(), namespace.name());
        if let Some(value) = label {
            Api::<Namespace>::all(client.clone())
                .patch(
                    ns,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {SERVED: value}}})),
                )
                .await
                .unwrap();
        }
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let port = free_port().unwrap().to_string();
        for zone in ZONES {
            StatefulSetFixture::new(zone)
                .group(GROUP)
                .pod_label("rollout-group", GROUP)
                .replicas(2)
                .label(PREPARE_DOWNSCALE, "true")
                .label(MIN_TIME_BETWEEN_ZONES_DOWNSCALE, "1h")
                .annotation(PREPARE_DOWNSCALE_PATH, "ingester/prepare-shutdown")
                .annotation(PREPARE_DOWNSCALE_PORT, &port)
                .create(&client, ns)
                .await;
        }
        wait_group_ready(&client, ns, &ZONES).await;
        Api::<DynamicObject>::namespaced_with(client, ns, &zpdb_resource())
            .create(
                &PostParams::default(),
                &budget(
                    GROUP,
                    json!({"maxUnavailable": 1, "selector": {"matchLabels": {"rollout-group": GROUP}}}),
                ),
            )
            .await
            .unwrap();
        Self {
            namespace,
            simulator,
        }
    }

    fn ns(&self) -> &str {
        self.namespace.name()
    }

    fn statefulsets(&self) -> Api<StatefulSet> {
        self.namespace.api()
    }
}

#[tokio::test]
async fn one_webhook_for_every_namespace_judges_each_labelled_namespace_in_its_own_and_never_the_others()
 {
    // Given baton-webhook serving every namespace labelled baton.test/served=<this run>,
    // registered with that same namespaceSelector
    let control_plane = ControlPlane::shared().await;
    let admin = control_plane.admin_client().await;
    crds::install(&admin, crds::ZONE_AWARE_POD_DISRUPTION_BUDGET).await;
    let run = random_suffix();
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!("namespaces: ['*']\nnamespace_selector:\n  match_labels:\n    {SERVED}: '{run}'\n"),
    )
    .unwrap();
    // And three namespaces: two labelled, one not, each with a group whose pods cannot
    // prepare for shutdown
    let labelled = [
        Served::create(control_plane, "wc-one", Some(&run)).await,
        Served::create(control_plane, "wc-two", Some(&run)).await,
    ];
    let unlabelled = Served::create(control_plane, "wc-other", None).await;
    let tls = TestTls::generate().unwrap();
    let config_path = config.path().to_str().unwrap();
    let replica = WebhookReplica::start_with(
        control_plane,
        &tls,
        labelled[0].ns(),
        &[("BATON_CONFIG", config_path)],
    )
    .await
    .unwrap();
    let _configurations = WebhookConfigurations::register_selecting(
        control_plane,
        &format!("baton-e2e-whole-cluster-{run}"),
        json!({"matchLabels": {SERVED: run}}),
        &tls,
        &replica,
    )
    .await
    .unwrap();
    for served in &labelled {
        wait_for_webhooks(&served.namespace).await;
    }
    let evictor = client_without_retries(control_plane).await;

    for served in &labelled {
        let ns = served.ns();
        // When zone a is scaled down in a labelled namespace
        let denied = scale(&served.statefulsets(), "ingester-zone-a", 1, false)
            .await
            .expect_err("the downscale is judged, and its pods cannot prepare");
        // Then it is refused there, as with one namespace served: its pods cannot prepare
        assert!(
            denied.starts_with(&format!(
                "admission webhook \"prepare-downscale.baton.test\" denied the request: downscale of statefulsets/ingester-zone-a in {ns} from 2 to 1 replicas is not allowed because one or more pods failed to prepare for shutdown"
            )),
            "{denied}"
        );

        // When a pod of zone a is evicted while zone b has an unavailable pod (the webhook
        // reads the budget's pods of that namespace for the eviction)
        served.simulator.hold_not_ready("ingester-zone-b-0").await;
        let refused = wait_for_refusal(&evictor, ns, "ingester-zone-a-0").await;
        // Then the budget of that namespace refuses it, naming zone b
        assert_eq!(refused.0, 429, "{}", refused.1);
        for words in ["ZoneAwarePodDisruptionBudget ingester", "ingester-zone-b"] {
            assert!(
                refused.1.contains(words),
                "{words:?} not in {:?}",
                refused.1
            );
        }
    }

    // When the same downscale and eviction are asked in the unlabelled namespace
    let ns = unlabelled.ns();
    // Then neither is judged: the downscale goes through though its pods cannot prepare, and
    // the eviction though zone b has an unavailable pod
    scale(&unlabelled.statefulsets(), "ingester-zone-a", 1, false)
        .await
        .unwrap_or_else(|denied| panic!("the downscale in {ns} was judged: {denied}"));
    unlabelled
        .simulator
        .hold_not_ready("ingester-zone-b-0")
        .await;
    evict(&evictor, ns, "ingester-zone-a-0")
        .await
        .unwrap_or_else(|(code, message)| {
            panic!("the eviction in {ns} was judged: {code} {message}")
        });
    // And the labelled namespaces are unchanged by it all
    for served in &labelled {
        let zone_a = served.statefulsets().get("ingester-zone-a").await.unwrap();
        assert_eq!(zone_a.spec.unwrap().replicas, Some(2), "{}", served.ns());
    }
}

/// The refusal of `pod`'s eviction in `namespace`: the webhook learns of the budget by a
/// watch, so the eviction is asked as a dry run (which evicts nothing) until it is refused,
/// then for real.
async fn wait_for_refusal(evictor: &kube::Client, namespace: &str, pod: &str) -> (u16, String) {
    wait_until(
        TIMEOUT,
        "the eviction is judged with the budget",
        || async { evict_dry_run(evictor, namespace, pod).await.is_err() },
    )
    .await;
    evict(evictor, namespace, pod)
        .await
        .expect_err("the eviction is refused")
}

// The install: deploy/cluster-wide, rendered as an overlay uses it, against deploy/ and the
// configuration it gives the binaries.

/// What an overlay of deploy/ with the component deploy/cluster-wide applies (written in the
/// checkout's target/, as kustomize reads directories by relative path only).
fn kustomized_cluster_wide() -> Vec<serde_json::Value> {
    let root = baton_e2e::manifests::deploy_dir().join("..");
    let target = root.join("target");
    std::fs::create_dir_all(&target).unwrap();
    let overlay = tempfile::Builder::new()
        .prefix("cluster-wide-overlay")
        .tempdir_in(&target)
        .unwrap();
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        "resources:\n  - ../../deploy\ncomponents:\n  - ../../deploy/cluster-wide\n",
    )
    .unwrap();
    let (ok, rendered) = run(
        "kubectl",
        &["kustomize", overlay.path().to_str().unwrap()],
        None,
    );
    assert!(
        ok,
        "kubectl kustomize of deploy/ with deploy/cluster-wide failed:\n{rendered}"
    );
    documents(&rendered)
}

/// The configuration the binaries read from `objects`' baton-config: its config.yaml, with
/// `namespace` from groups-namespace (as the Deployments set BATON_NAMESPACE).
fn config_of(objects: &[serde_json::Value]) -> baton_config::Config {
    let config_map = find(objects, "ConfigMap", "baton-config");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        config_map["data"]["config.yaml"].as_str().unwrap(),
    )
    .unwrap();
    let namespace = config_map["data"]["groups-namespace"].as_str().unwrap();
    let figment = baton_config::Config::figment(
        Some(file.path()),
        figment::providers::Env::prefixed("BATON_WHOLE_CLUSTER_TEST_NOTHING_"),
    )
    .merge(("namespace", namespace));
    baton_config::Config::from_figment(figment).expect("the configuration is valid")
}

/// Each rule's (API group, resource, verb) triples, resource names aside (none here).
fn grants(role: &serde_json::Value) -> std::collections::BTreeSet<(String, String, String)> {
    let strings = |value: &serde_json::Value| -> Vec<String> {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|item| item.as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut grants = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        assert!(rule.get("resourceNames").is_none(), "{rule}");
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    grants.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    grants
}

#[test]
fn the_cluster_wide_install_selects_in_its_webhooks_the_namespaces_its_configuration_serves() {
    // Given deploy/ with the component deploy/cluster-wide, as an overlay renders it
    let objects = kustomized_cluster_wide();
    // When the configuration it gives the binaries is read
    let config = config_of(&objects);
    let scope = config.scope().unwrap();

    // Then it serves every namespace labelled baton.grafana.com/served=true, cluster-wide
    assert_eq!(scope.only(), None);
    assert_eq!(
        scope.describe(),
        "every namespace labelled baton.grafana.com/served=true"
    );
    // And each of the six webhook configurations selects exactly those namespaces
    let selector = serde_json::to_value(scope.webhook_selector()).unwrap();
    let configurations = webhook_configurations(&objects);
    assert_eq!(configurations.len(), 6);
    for configuration in &configurations {
        let name = &configuration["metadata"]["name"];
        for webhook in configuration["webhooks"].as_array().unwrap() {
            assert_eq!(webhook["namespaceSelector"], selector, "{name}");
        }
        // And is found by the controller's CA injection, which selects by `namespace`
        let labels = &configuration["metadata"]["labels"];
        assert_eq!(
            labels["grafana.com/inject-rollout-operator-ca"], "true",
            "{name}"
        );
        assert_eq!(
            labels["grafana.com/namespace"],
            config.namespace.as_str(),
            "{name}"
        );
    }
    // And baton's own namespace is not one of them (its webhooks never judge baton's objects)
    assert_eq!(config.namespace, "baton-system");
    let system = find(&objects, "Namespace", "baton-system");
    assert!(
        system["metadata"]["labels"]
            .get("baton.grafana.com/served")
            .is_none()
    );
}

#[test]
fn the_cluster_wide_install_is_deploy_with_cluster_roles_for_the_groups_roles_and_nothing_else() {
    // Given deploy/ as it ships, and with the component deploy/cluster-wide
    let deploy = kustomized_deploy();
    let cluster_wide = kustomized_cluster_wide();

    // Then the groups' Roles and RoleBindings are gone, ClusterRoles and their bindings in
    // their place, and every other object is there
    let groups = [
        "Role/baton-controller-groups",
        "RoleBinding/baton-controller-groups",
        "Role/baton-webhook-groups",
        "RoleBinding/baton-webhook-groups",
    ];
    let cluster = [
        "ClusterRole/baton-controller-cluster",
        "ClusterRoleBinding/baton-controller-cluster",
        "ClusterRole/baton-webhook-cluster",
        "ClusterRoleBinding/baton-webhook-cluster",
    ];
    let mut expected: Vec<String> = kinds_and_names(&deploy)
        .into_iter()
        .filter(|name| !groups.contains(&name.as_str()))
        .chain(cluster.iter().map(|name| (*name).to_owned()))
        .collect();
    expected.sort();
    assert_eq!(kinds_and_names(&cluster_wide), expected);
    // And every object but the configuration, the webhook configurations and the RBAC above is
    // deploy/'s as it is (the admission policy and the guards' rules among them)
    for object in &cluster_wide {
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let changed = kind.ends_with("WebhookConfiguration")
            || cluster.contains(&format!("{kind}/{name}").as_str())
            || name == "baton-config";
        if !changed {
            assert_eq!(object, find(&deploy, kind, name), "{kind}/{name}");
        }
    }
    // And the webhook configurations differ from deploy/'s in their namespaceSelector and
    // grafana.com/namespace label alone
    for configuration in webhook_configurations(&cluster_wide) {
        let name = configuration["metadata"]["name"].as_str().unwrap();
        let kind = configuration["kind"].as_str().unwrap();
        let mut shipped = find(&deploy, kind, name).clone();
        shipped["metadata"]["labels"]["grafana.com/namespace"] = json!("baton-system");
        for webhook in shipped["webhooks"].as_array_mut().unwrap() {
            webhook["namespaceSelector"] =
                json!({"matchLabels": {"baton.grafana.com/served": "true"}});
        }
        assert_eq!(configuration, &shipped, "{name}");
    }
    // And the configuration is deploy/'s with the served namespaces appended
    let shipped = find(&deploy, "ConfigMap", "baton-config")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    let served = find(&cluster_wide, "ConfigMap", "baton-config")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    let appended = served
        .strip_prefix(shipped)
        .unwrap_or_else(|| panic!("deploy/'s configuration is not kept:\n{served}"));
    assert!(appended.starts_with("namespaces:"), "{appended}");

    // And the controller's ClusterRole grants what its Role in deploy/groups grants, and
    // watching Namespaces
    let role = grants(find(&deploy, "Role", "baton-controller-groups"));
    let cluster_role = grants(find(
        &cluster_wide,
        "ClusterRole",
        "baton-controller-cluster",
    ));
    let namespaces: std::collections::BTreeSet<_> = ["get", "list", "watch"]
        .iter()
        .map(|verb| (String::new(), "namespaces".to_owned(), (*verb).to_owned()))
        .collect();
    assert_eq!(
        cluster_role,
        role.union(&namespaces).cloned().collect(),
        "baton-controller-cluster"
    );
    // And the webhook's grants no more than its Role does (it caches no pods, no Deployments
    // and no ReplicaSets when it serves more than one namespace), and still reads each
    let role = grants(find(&deploy, "Role", "baton-webhook-groups"));
    let cluster_role = grants(find(&cluster_wide, "ClusterRole", "baton-webhook-cluster"));
    assert!(
        cluster_role.is_subset(&role),
        "{:?}",
        cluster_role.difference(&role).collect::<Vec<_>>()
    );
    for (group, resource) in [
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("", "pods"),
    ] {
        assert!(
            cluster_role.contains(&(group.to_owned(), resource.to_owned(), "get".to_owned())),
            "{resource}"
        );
    }
    // And each is bound to its service account in baton-system
    for (binding, account) in [
        ("baton-controller-cluster", "baton-controller"),
        ("baton-webhook-cluster", "baton-webhook"),
    ] {
        let bound = find(&cluster_wide, "ClusterRoleBinding", binding);
        assert_eq!(
            bound["subjects"],
            json!([{"kind": "ServiceAccount", "name": account, "namespace": "baton-system"}])
        );
    }
}

// The Helm chart's `clusterWide` value: the same install as deploy/cluster-wide.

#[test]
fn the_charts_cluster_wide_value_renders_what_deploy_cluster_wide_installs() {
    // Given what deploy/ with deploy/cluster-wide applies, but its Namespace (a Helm release is
    // installed into one)
    let mut deployed = kustomized_cluster_wide();
    deployed.retain(|object| object["kind"] != "Namespace");

    // When the chart is rendered into baton-system with clusterWide.enabled, CRDs included
    let chart = baton_e2e::manifests::deploy_dir().join("../charts/baton");
    let (ok, rendered) = run(
        "helm",
        &[
            "template",
            "baton",
            chart.to_str().unwrap(),
            "--namespace",
            "baton-system",
            "--include-crds",
            "--set",
            "clusterWide.enabled=true",
        ],
        None,
    );
    assert!(ok, "helm template failed:\n{rendered}");
    let rendered = documents(&rendered);

    // Then it renders the same objects, field for field (the configuration parsed): the
    // ClusterRoles, the configuration serving the labelled namespaces, the webhooks selecting
    // them
    assert_eq!(kinds_and_names(&rendered), kinds_and_names(&deployed));
    let differing = differences(rendered.clone(), deployed);
    assert!(
        differing.is_empty(),
        "the chart and deploy/cluster-wide differ:\n{}",
        differing.join("\n")
    );
    // And its configuration's scope is what its webhooks select
    let config = config_of(&rendered);
    let selector = serde_json::to_value(config.scope().unwrap().webhook_selector()).unwrap();
    for configuration in webhook_configurations(&rendered) {
        assert_eq!(configuration["webhooks"][0]["namespaceSelector"], selector);
    }
}
