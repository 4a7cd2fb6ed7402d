//! What a Helm user installs: the chart in `charts/baton` renders deploy/'s objects (so the two
//! installs cannot drift apart), its values move what they name, and helm installs, upgrades
//! and uninstalls it against the real API server. No pod of baton's runs here (the control
//! plane has no nodes): what is checked is what the API server holds.

use std::path::PathBuf;

use baton_e2e::ControlPlane;
use baton_e2e::manifests::deploy_dir;
use baton_e2e::renders::{
    assert_namespaces, differences, documents, find, kinds_and_names, kustomized_deploy, run,
    webhook_configurations,
};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/baton")
}

/// `helm template` of the chart into baton's namespace `namespace`, with `values`
/// (`key=value`, as `--set` takes them), CRDs included: its success and output.
fn render(namespace: &str, values: &[&str]) -> (bool, String) {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        "baton",
        chart.to_str().unwrap(),
        "--namespace",
        namespace,
        "--include-crds",
    ];
    for value in values {
        args.extend(["--set", value]);
    }
    run("helm", &args, None)
}

/// What [`render`] renders: every object, as JSON values.
fn helm_template(namespace: &str, values: &[&str]) -> Vec<Value> {
    let (ok, rendered) = render(namespace, values);
    assert!(ok, "helm template failed:\n{rendered}");
    documents(&rendered)
}

#[test]
fn the_chart_passes_helm_lint() {
    // Given the chart as it ships, installed into a namespace of baton's own
    let chart = chart_dir();

    // When helm lints it, strictly
    let (ok, output) = run(
        "helm",
        &[
            "lint",
            "--strict",
            "--namespace",
            "baton-system",
            chart.to_str().unwrap(),
        ],
        None,
    );

    // Then nothing is wrong with it
    assert!(ok, "helm lint failed:\n{output}");
    assert!(output.contains("0 chart(s) failed"), "{output}");
}

#[test]
fn with_its_defaults_the_chart_renders_what_deploy_installs() {
    // Given what `kubectl apply -k deploy/` applies
    let mut deployed = kustomized_deploy();
    // but its Namespace, which a Helm release is installed into (`--create-namespace`) rather
    // than owns; Kubernetes sets the label the webhooks' selectors match on every namespace
    let namespace = deployed
        .iter()
        .position(|object| object["kind"] == "Namespace")
        .expect("deploy/ ships baton's Namespace");
    assert_eq!(
        deployed.remove(namespace)["metadata"]["name"],
        "baton-system"
    );

    // When the chart is rendered with its defaults into the same namespace, CRDs included
    let rendered = helm_template("baton-system", &[]);

    // Then it renders the same objects, field for field: names, labels, RBAC rules, webhook
    // rules and selectors, the admission policy, the containers' command, environment and
    // configuration, the CRDs
    assert_eq!(kinds_and_names(&rendered), kinds_and_names(&deployed));
    // and every object but the CRDs (crds/, which Helm does not template) says which release
    // it belongs to
    assert!(rendered.iter().all(|object| {
        object["kind"] == "CustomResourceDefinition"
            || object["metadata"]["labels"]["app.kubernetes.io/instance"] == "baton"
    }));
    let differing = differences(rendered, deployed);
    assert!(
        differing.is_empty(),
        "the chart and deploy/ differ:\n{}",
        differing.join("\n")
    );
}

#[test]
fn the_chart_ships_deploys_crds_unchanged() {
    // Given the CRDs of deploy/ and those of the chart (crds/, which Helm installs before the
    // templates and never upgrades or deletes)
    for crd in std::fs::read_dir(deploy_dir().join("crds")).unwrap() {
        let path = crd.unwrap().path();
        if path.file_name().unwrap() == "kustomization.yaml" {
            continue;
        }
        // Then each is the same file, comments and all
        let in_chart = chart_dir().join("crds").join(path.file_name().unwrap());
        assert_eq!(
            std::fs::read_to_string(&in_chart).ok(),
            Some(std::fs::read_to_string(&path).unwrap()),
            "{} is not {}",
            in_chart.display(),
            path.display()
        );
    }
}

#[test]
fn the_chart_installs_deploys_dashboard_and_alerts_when_asked() {
    // Given the chart's copies of deploy/monitoring's dashboard and alerting rules
    for file in ["dashboard.json", "alerts.yaml"] {
        // Then each is deploy/'s file, unchanged
        assert_eq!(
            std::fs::read_to_string(chart_dir().join("files").join(file)).ok(),
            Some(std::fs::read_to_string(deploy_dir().join("monitoring").join(file)).unwrap()),
            "charts/baton/files/{file} is not deploy/monitoring/{file}"
        );
    }
    // And by default the chart renders neither
    let default = helm_template("baton-system", &[]);
    assert!(
        default
            .iter()
            .all(|object| object["kind"] != "PrometheusRule"
                && object["metadata"]["name"] != "baton-grafana-dashboard")
    );

    // When both are asked for, the rules for a Prometheus selecting `release: prometheus` and
    // the dashboard for a sidecar watching the `monitoring` namespace
    let rendered = helm_template(
        "baton-system",
        &[
            "grafanaDashboards.enabled=true",
            "grafanaDashboards.namespace=monitoring",
            "prometheusRule.enabled=true",
            "prometheusRule.labels.release=prometheus",
        ],
    );

    // Then the dashboard is deploy/'s, where and as Grafana's sidecar loads it
    let dashboard = find(&rendered, "ConfigMap", "baton-grafana-dashboard");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy_dir().join("monitoring/dashboard.json")).unwrap(),
    )
    .unwrap();
    let in_config_map: Value =
        serde_json::from_str(dashboard["data"]["baton.json"].as_str().unwrap()).unwrap();
    assert_eq!(in_config_map, shipped);
    // And the PrometheusRule holds deploy/'s rule groups, labelled for the Prometheus
    let rule = find(&rendered, "PrometheusRule", "baton");
    assert_eq!(rule["metadata"]["namespace"], "baton-system");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let alerts =
        documents(&std::fs::read_to_string(deploy_dir().join("monitoring/alerts.yaml")).unwrap());
    assert!(
        alerts[0]["groups"]
            .as_array()
            .is_some_and(|groups| !groups.is_empty())
    );
    assert_eq!(rule["spec"]["groups"], alerts[0]["groups"]);
}

#[test]
fn the_groups_namespace_value_moves_every_place_that_names_it() {
    // Given a release in baton's namespace `baton-ops` for the groups of `ingesters`
    let rendered = helm_template("baton-ops", &["groupsNamespace=ingesters"]);

    // Then the configuration, the groups' roles and every webhook configuration's label and
    // namespace selector name `ingesters`, and baton's own objects are in the release namespace
    assert_namespaces(&rendered, "baton-ops", "ingesters");
}

#[test]
fn the_chart_refuses_the_groups_namespace_as_batons_own() {
    // Given baton's namespace chosen as the groups' too
    let values = ["groupsNamespace=ingesters"];

    // When the chart is rendered
    let (ok, output) = render("ingesters", &values);

    // Then helm refuses, saying why
    assert!(!ok, "{output}");
    assert!(
        output.contains("groupsNamespace \"ingesters\" is the release namespace"),
        "{output}"
    );
}

#[test]
fn values_named_like_the_go_charts_reach_the_objects() {
    // Given values a rollout-operator chart user would set
    let rendered = helm_template(
        "baton-system",
        &[
            "image.registry=registry.example.com",
            "image.repository=platform/baton",
            "image.tag=0.1.1",
            "image.pullPolicy=Always",
            "nodeSelector.pool=system",
            "tolerations[0].key=dedicated",
            "tolerations[0].operator=Exists",
            "extraArgs[0]=--config=/etc/baton/config.yaml",
            "extraEnv[0].name=BATON_LOG__LEVEL",
            "extraEnv[0].value=debug",
            "controller.resources.limits.memory=512Mi",
            "webhook.replicas=5",
            "webhooks.failurePolicy=Ignore",
            "webhooks.timeoutSeconds=5",
            "webhook.clientCAConfigMap=api-server-client-ca",
            "serviceMonitor.enabled=true",
            "serviceMonitor.interval=30s",
            "serviceMonitor.labels.release=prometheus",
        ],
    );

    // Then both Deployments run that image, where and as they say
    for binary in ["baton-controller", "baton-webhook"] {
        let pod = &find(&rendered, "Deployment", binary)["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(
            container["image"],
            "registry.example.com/platform/baton:0.1.1"
        );
        assert_eq!(container["imagePullPolicy"], "Always");
        assert_eq!(
            container["args"],
            json!(["--config=/etc/baton/config.yaml"])
        );
        assert!(
            container["env"]
                .as_array()
                .unwrap()
                .contains(&json!({"name": "BATON_LOG__LEVEL", "value": "debug"})),
            "{binary}: {}",
            container["env"]
        );
        assert_eq!(pod["nodeSelector"], json!({"pool": "system"}));
        assert_eq!(
            pod["tolerations"],
            json!([{"key": "dedicated", "operator": "Exists"}])
        );
    }
    let controller = &find(&rendered, "Deployment", "baton-controller")["spec"];
    assert_eq!(
        controller["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "512Mi"
    );
    let webhook = &find(&rendered, "Deployment", "baton-webhook")["spec"];
    assert_eq!(webhook["replicas"], 5);
    // and the webhooks fail as told, after the time told, but for the guards of baton's own
    // state and records: those fail closed whatever the value, or a webhook that does not
    // answer (one held by slow clients) would let anyone write what baton remembers
    let guards = ["baton-state-guard", "baton-record-guard"];
    let configurations = webhook_configurations(&rendered);
    for guard in guards {
        assert!(
            configurations
                .iter()
                .any(|configuration| configuration["metadata"]["name"] == guard),
            "{guard} is rendered"
        );
    }
    for configuration in configurations {
        let name = configuration["metadata"]["name"].as_str().unwrap();
        let expected = if guards.contains(&name) {
            "Fail"
        } else {
            "Ignore"
        };
        for webhook in configuration["webhooks"].as_array().unwrap() {
            assert_eq!(webhook["failurePolicy"], expected, "{name}");
            assert_eq!(webhook["timeoutSeconds"], 5, "{name}");
        }
    }
    // and the webhook requires the API server's client certificate, of the CA mounted from the
    // ConfigMap named
    let config: Value = serde_saphyr::from_str(
        find(&rendered, "ConfigMap", "baton-config")["data"]["config.yaml"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        config["webhook"]["client_ca_file"],
        "/var/run/baton/client-ca/ca.crt"
    );
    assert_eq!(config["webhook"]["cert_file"], "/var/run/baton/tls/tls.crt");
    let pod = &webhook["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|volume| volume["configMap"]["name"] == "api-server-client-ca")
    );
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|mount| mount["mountPath"] == "/var/run/baton/client-ca")
    );
    // and a ServiceMonitor scrapes the ops port of both binaries' pods
    let monitor = find(&rendered, "ServiceMonitor", "baton");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        monitor["spec"]["endpoints"],
        json!([{"port": "ops", "path": "/metrics", "interval": "30s"}])
    );
    let service = find(&rendered, "Service", "baton-metrics");
    assert_eq!(
        service["spec"]["selector"],
        json!({"app.kubernetes.io/part-of": "baton"})
    );
    for (label, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][label], value, "{label}");
    }
}

#[test]
fn with_member_clusters_the_chart_lets_the_controller_get_and_watch_their_secrets_as_the_docs_hub_overlay_does()
 {
    use baton_e2e::cluster_setup::{docs_block, read_docs};

    // Given the docs' members in the values: the hub without a Secret, two members with one
    let values = [
        "config.controller.clusters[0].name=cluster-a",
        "config.controller.clusters[1].name=cluster-b",
        "config.controller.clusters[1].kubeconfig_secret=member-cluster-b",
        "config.controller.clusters[2].name=cluster-c",
        "config.controller.clusters[2].kubeconfig_secret=member-cluster-c",
    ];
    let rendered = helm_template("baton-system", &values);

    // Then the configuration file lists them, and baton-controller gets their Secrets by name,
    // as docs/multi-cluster.md's my-hub-overlay/member-secrets.yaml lets it
    let config = find(&rendered, "ConfigMap", "baton-config")["data"]["config.yaml"]
        .as_str()
        .expect("the configuration file")
        .to_owned();
    assert_eq!(
        baton_e2e::cluster_setup::clusters_of(&config).expect("controller.clusters"),
        [
            ("cluster-a".to_owned(), String::new()),
            ("cluster-b".to_owned(), "member-cluster-b".to_owned()),
            ("cluster-c".to_owned(), "member-cluster-c".to_owned()),
        ]
    );
    let page = read_docs();
    let docs: Vec<Value> = serde_saphyr::from_multiple(
        &docs_block(&page, "my-hub-overlay/member-secrets.yaml").expect("the docs' Role"),
    )
    .expect("YAML documents");
    for kind in ["Role", "RoleBinding"] {
        let chart = find(&rendered, kind, "baton-controller-members");
        let documented = find(&docs, kind, "baton-controller-members");
        assert_eq!(
            chart["metadata"]["namespace"],
            documented["metadata"]["namespace"]
        );
        for field in ["rules", "roleRef", "subjects"] {
            assert_eq!(chart[field], documented[field], "{kind} {field}");
        }
    }

    // And without members there is no such Role
    let names = kinds_and_names(&helm_template("baton-system", &[]));
    assert!(
        !names
            .iter()
            .any(|name| name.contains("baton-controller-members")),
        "{names:#?}"
    );
}

#[test]
fn with_the_webhooks_member_clusters_the_chart_lets_baton_webhook_get_and_watch_their_secrets_alone()
 {
    // Given the webhook's members in the values (docs/multi-cluster.md, "Downscales across
    // clusters"): its own cluster without a Secret, two members with one
    let values = [
        "config.webhook.clusters[0].name=cluster-a",
        "config.webhook.clusters[0].kubeconfig_secret=member-cluster-a",
        "config.webhook.clusters[1].name=cluster-b",
        "config.webhook.clusters[2].name=cluster-c",
        "config.webhook.clusters[2].kubeconfig_secret=member-cluster-c",
    ];
    let rendered = helm_template("baton-system", &values);

    // Then baton-webhook, and nobody else, gets, lists and watches those two Secrets by name
    let role = find(&rendered, "Role", "baton-webhook-members");
    assert_eq!(role["metadata"]["namespace"], "baton-system");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["secrets"],
                "resourceNames": ["member-cluster-a", "member-cluster-c"],
                "verbs": ["get", "list", "watch"]}])
    );
    let binding = find(&rendered, "RoleBinding", "baton-webhook-members");
    assert_eq!(binding["roleRef"]["name"], "baton-webhook-members");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "baton-webhook", "namespace": "baton-system"}])
    );
    // and the controller, without members of its own, gets none
    let names = kinds_and_names(&rendered);
    assert!(
        !names
            .iter()
            .any(|name| name.contains("baton-controller-members")),
        "{names:#?}"
    );

    // And without the webhook's members there is no such Role
    let names = kinds_and_names(&helm_template("baton-system", &[]));
    assert!(
        !names
            .iter()
            .any(|name| name.contains("baton-webhook-members")),
        "{names:#?}"
    );
}

#[test]
fn without_webhooks_the_chart_registers_none() {
    // Given the webhooks turned off, as the Go chart's webhooks.enabled does
    let rendered = helm_template("baton-system", &["webhooks.enabled=false"]);

    // Then no webhook configuration is registered and nothing of the webhook's runs, while the
    // controller is installed as ever
    let names = kinds_and_names(&rendered);
    assert!(
        names
            .iter()
            .all(|name| !name.contains("WebhookConfiguration/") && !name.contains("baton-webhook")),
        "{names:#?}"
    );
    assert!(names.contains(&"Deployment/baton-controller".to_owned()));
    assert!(names.contains(&"Role/baton-controller-groups".to_owned()));
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
}

async fn webhook_configurations_judge(client: &kube::Client, groups: &str) {
    let mut labelled = Vec::new();
    for configuration in Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
    {
        if configuration.name_any().starts_with("baton-") {
            labelled.push(configuration.labels()["grafana.com/namespace"].clone());
            let selector = configuration.webhooks.unwrap()[0]
                .namespace_selector
                .clone()
                .unwrap()
                .match_labels
                .unwrap();
            assert_eq!(selector["kubernetes.io/metadata.name"], groups);
        }
    }
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get("baton-prepare-downscale")
        .await
        .unwrap();
    labelled.push(mutating.labels()["grafana.com/namespace"].clone());
    assert_eq!(labelled, vec![groups.to_owned(); 6]);
}

#[tokio::test]
async fn helm_installs_upgrades_and_uninstalls_baton() {
    // Given two namespaces of groups (workloads', which exist before baton) and a namespace
    // for baton that does not exist yet
    let control_plane = ControlPlane::shared().await;
    let client = control_plane.admin_client().await;
    let id = std::process::id();
    let (system, groups, other_groups) = (
        format!("helm-baton-{id}"),
        format!("helm-groups-{id}"),
        format!("helm-other-groups-{id}"),
    );
    create_namespace(&client, &groups).await;
    create_namespace(&client, &other_groups).await;
    let chart = chart_dir();
    let helm = |args: &[&str]| run("helm", args, Some(control_plane));

    // When baton is installed with helm into its namespace, for the first groups
    let (ok, output) = helm(&[
        "install",
        "baton",
        chart.to_str().unwrap(),
        "--namespace",
        &system,
        "--create-namespace",
        "--set",
        &format!("groupsNamespace={groups}"),
    ]);
    assert!(ok, "helm install failed:\n{output}");

    // Then baton's objects are in its namespace, its roles in the groups', and every webhook
    // configuration is labelled for, and judges, the groups' namespace
    let deployments = Api::<Deployment>::namespaced(client.clone(), &system);
    let replicas = |deployment: Deployment| deployment.spec.unwrap().replicas.unwrap();
    assert_eq!(
        replicas(deployments.get("baton-controller").await.unwrap()),
        2
    );
    assert_eq!(replicas(deployments.get("baton-webhook").await.unwrap()), 3);
    let configs = Api::<ConfigMap>::namespaced(client.clone(), &system);
    let groups_namespace = |config: ConfigMap| config.data.unwrap()["groups-namespace"].clone();
    assert_eq!(
        groups_namespace(configs.get("baton-config").await.unwrap()),
        groups
    );
    let roles_in = |namespace: &str| Api::<Role>::namespaced(client.clone(), namespace);
    for role in ["baton-controller-groups", "baton-webhook-groups"] {
        roles_in(&groups).get(role).await.unwrap();
    }
    webhook_configurations_judge(&client, &groups).await;
    let binding = Api::<ClusterRoleBinding>::all(client.clone())
        .get("baton-controller-webhook-ca")
        .await
        .unwrap();
    assert_eq!(
        binding.subjects.unwrap()[0].namespace.as_deref(),
        Some(system.as_str())
    );
    // and the CRDs are installed, the Helm way (crds/, before the templates)
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    const CRDS: [&str; 4] = [
        "replicatemplates.rollout-operator.grafana.com",
        "zoneawarepoddisruptionbudgets.rollout-operator.grafana.com",
        "rollouthealthchecks.baton.dev",
        "phasedrollouts.sts.plus",
    ];
    for crd in CRDS {
        crds.get(crd).await.unwrap();
    }

    // When the release is upgraded to coordinate the other groups, with a third controller
    let (ok, output) = helm(&[
        "upgrade",
        "baton",
        chart.to_str().unwrap(),
        "--namespace",
        &system,
        "--reuse-values",
        "--set",
        &format!("groupsNamespace={other_groups}"),
        "--set",
        "controller.replicas=3",
    ]);
    assert!(ok, "helm upgrade failed:\n{output}");

    // Then baton is told the other groups' namespace, its webhooks judge that one, its roles
    // moved there (none is left in the first), and the controller has three replicas
    assert_eq!(
        groups_namespace(configs.get("baton-config").await.unwrap()),
        other_groups
    );
    webhook_configurations_judge(&client, &other_groups).await;
    for role in ["baton-controller-groups", "baton-webhook-groups"] {
        roles_in(&other_groups).get(role).await.unwrap();
        assert!(roles_in(&groups).get_opt(role).await.unwrap().is_none());
    }
    assert_eq!(
        replicas(deployments.get("baton-controller").await.unwrap()),
        3
    );

    // When the release is uninstalled
    let (ok, output) = helm(&["uninstall", "baton", "--namespace", &system]);
    assert!(ok, "helm uninstall failed:\n{output}");

    // Then nothing it installed is left, in either namespace or cluster-wide
    let (ok, left) = run(
        "kubectl",
        &[
            "get",
            "deployments,configmaps,serviceaccounts,services,poddisruptionbudgets,roles,\
             rolebindings,clusterroles,clusterrolebindings,priorityclasses,\
             validatingwebhookconfigurations,mutatingwebhookconfigurations,\
             validatingadmissionpolicies,validatingadmissionpolicybindings",
            "--all-namespaces",
            "-l",
            "app.kubernetes.io/part-of=baton",
            "-o",
            "name",
        ],
        Some(control_plane),
    );
    assert!(ok, "{left}");
    assert_eq!(left.trim(), "", "left after uninstall");
    // but the CRDs, which Helm never deletes: the resources of every other installation, and
    // the users' budgets, would go with them
    for crd in CRDS {
        crds.get(crd).await.unwrap();
    }
}
