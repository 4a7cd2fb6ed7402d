//! What a Tanka/jsonnet user installs: the library `operations/baton/baton.libsonnet` renders
//! deploy/'s objects (so the two installs cannot drift apart), its knobs move what they name,
//! and what it renders applies against the real API server; the mixin
//! `operations/baton-mixin/mixin.libsonnet` ships deploy/monitoring's alerts and dashboard.
//! Rendered by go-jsonnet (the implementation Tanka embeds), which
//! tests/control-plane/install.sh builds.

use std::path::PathBuf;

use baton_e2e::ControlPlane;
use baton_e2e::manifests::deploy_dir;
use baton_e2e::renders::{
    assert_namespaces, differences, find, kinds_and_names, kustomized_deploy, run,
    webhook_configurations,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

fn operations_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../operations")
}

/// `jsonnet` evaluating `code` with `operations/` on the library path: its success and output.
fn evaluate(code: &str) -> (bool, String) {
    let operations = operations_dir();
    run(
        "jsonnet",
        &["--jpath", operations.to_str().unwrap(), "--exec", code],
        None,
    )
}

/// The library's objects with `config` (jsonnet fields: `namespace: 'x', ...`) added to its
/// `_config` and `images` to its `_images`: their success and output.
fn render(config: &str, images: &str) -> (bool, String) {
    evaluate(&format!(
        "std.objectValues(((import 'baton/baton.libsonnet') + \
         {{ _config+:: {{ {config} }}, _images+:: {{ {images} }} }}).baton)"
    ))
}

/// What [`render`] renders: every object, as JSON values.
fn library(config: &str, images: &str) -> Vec<Value> {
    let (ok, rendered) = render(config, images);
    assert!(ok, "jsonnet failed:\n{rendered}");
    serde_json::from_str(&rendered).unwrap_or_else(|error| panic!("{error}:\n{rendered}"))
}

/// Every string anywhere in `value`.
fn strings(value: &Value) -> Vec<&str> {
    match value {
        Value::String(text) => vec![text],
        Value::Array(items) => items.iter().flat_map(strings).collect(),
        Value::Object(fields) => fields.values().flat_map(strings).collect(),
        _ => vec![],
    }
}

#[test]
fn with_its_defaults_the_library_renders_what_deploy_installs() {
    // Given what `kubectl apply -k deploy/` applies
    let deployed = kustomized_deploy();

    // When the library is rendered with its defaults
    let rendered = library("", "");

    // Then it renders the same objects, field for field: names, namespaces, labels, RBAC
    // rules, webhook rules and selectors, the admission policy, the containers' command,
    // environment and configuration, the Namespace, the CRDs
    assert_eq!(kinds_and_names(&rendered), kinds_and_names(&deployed));
    let differing = differences(rendered, deployed);
    assert!(
        differing.is_empty(),
        "the jsonnet library and deploy/ differ:\n{}",
        differing.join("\n")
    );
}

#[test]
fn the_namespace_knobs_move_every_place_that_names_a_namespace() {
    // Given baton in `baton-ops` for the groups of `ingesters`
    let rendered = library("namespace: 'ingesters', baton_namespace: 'baton-ops'", "");

    // Then no object names deploy/'s namespaces anywhere
    for object in &rendered {
        let named = strings(object);
        assert!(
            !named.contains(&"default") && !named.contains(&"baton-system"),
            "{object}"
        );
    }
    // and the configuration, the groups' roles and every webhook configuration's label and
    // namespace selector name `ingesters`, and baton's own objects are in baton-ops
    assert_namespaces(&rendered, "baton-ops", "ingesters");
    // and so is its Namespace
    assert_eq!(
        find(&rendered, "Namespace", "baton-ops")["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "baton-ops"
    );
}

#[test]
fn the_library_refuses_the_groups_namespace_as_batons_own() {
    // Given baton's namespace chosen as the groups' too
    let config = "namespace: 'ingesters', baton_namespace: 'ingesters'";

    // When the library is rendered
    let (ok, output) = render(config, "");

    // Then jsonnet refuses, saying why
    assert!(!ok, "{output}");
    assert!(
        output.contains("baton_namespace ingesters is the groups' namespace too"),
        "{output}"
    );
}

#[test]
fn knobs_named_like_the_go_librarys_reach_the_objects() {
    // Given knobs a rollout-operator jsonnet user would set, and baton's own
    let rendered = library(
        "ignore_rollout_operator_no_downscale_webhook_failures: true, \
         ignore_rollout_operator_zpdb_eviction_webhook_failures: true, \
         baton_namespace_enabled: false, \
         baton_webhook_replicas: 5, \
         baton_controller_resources: { limits: { memory: '512Mi' } }",
        "baton: 'registry.example.com/platform/baton:0.1.1'",
    );

    // Then both Deployments run that image
    for binary in ["baton-controller", "baton-webhook"] {
        let container =
            &find(&rendered, "Deployment", binary)["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            container["image"],
            "registry.example.com/platform/baton:0.1.1"
        );
    }
    // with the resources and replicas told, the others deploy/'s
    let controller = &find(&rendered, "Deployment", "baton-controller")["spec"];
    assert_eq!(
        controller["template"]["spec"]["containers"][0]["resources"],
        json!({"limits": {"memory": "512Mi"}})
    );
    assert_eq!(controller["replicas"], 2);
    let webhook = &find(&rendered, "Deployment", "baton-webhook")["spec"];
    assert_eq!(webhook["replicas"], 5);
    assert_eq!(
        webhook["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "128Mi"
    );
    // and the webhooks whose failures are to be ignored are, the others still fail closed
    for configuration in webhook_configurations(&rendered) {
        let name = configuration["metadata"]["name"].as_str().unwrap();
        let ignored = ["baton-no-downscale", "baton-pod-eviction"].contains(&name);
        assert_eq!(
            configuration["webhooks"][0]["failurePolicy"],
            if ignored { "Ignore" } else { "Fail" },
            "{name}"
        );
    }
    // and no Namespace is shipped
    assert!(rendered.iter().all(|object| object["kind"] != "Namespace"));
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
}

#[tokio::test]
async fn what_the_library_renders_passes_a_server_side_dry_run() {
    // Given baton's namespace and the groups' (a dry run creates neither)
    let control_plane = ControlPlane::shared().await;
    let client = control_plane.admin_client().await;
    let id = std::process::id();
    let (system, groups) = (
        format!("jsonnet-baton-{id}"),
        format!("jsonnet-groups-{id}"),
    );
    create_namespace(&client, &system).await;
    create_namespace(&client, &groups).await;

    // When the library's objects for them are applied as a server-side dry run
    let rendered = library(
        &format!("namespace: '{groups}', baton_namespace: '{system}'"),
        "",
    );
    let objects = rendered.len();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": rendered});
    let file = std::env::temp_dir().join(format!("baton-jsonnet-{id}.json"));
    std::fs::write(&file, list.to_string()).unwrap();
    let (ok, output) = run(
        "kubectl",
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            file.to_str().unwrap(),
        ],
        Some(control_plane),
    );
    std::fs::remove_file(&file).unwrap();

    // Then the API server accepts every object
    assert!(ok, "kubectl apply --dry-run=server failed:\n{output}");
    for object in [
        format!("namespace/{system}"),
        "deployment.apps/baton-controller".to_owned(),
        "deployment.apps/baton-webhook".to_owned(),
        "role.rbac.authorization.k8s.io/baton-controller-groups".to_owned(),
        "validatingwebhookconfiguration.admissionregistration.k8s.io/baton-no-downscale".to_owned(),
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/baton-prepare-downscale"
            .to_owned(),
        "validatingadmissionpolicy.admissionregistration.k8s.io/baton-controller-changes-only-ca-bundles"
            .to_owned(),
        "customresourcedefinition.apiextensions.k8s.io/zoneawarepoddisruptionbudgets.rollout-operator.grafana.com"
            .to_owned(),
    ] {
        assert!(output.contains(&object), "{object} not applied:\n{output}");
    }
    // and nothing else: one line per object
    assert_eq!(output.lines().count(), objects, "{output}");
}

#[test]
fn the_mixin_ships_deploys_alerts_and_dashboard() {
    // Given deploy/monitoring's alerting rules and dashboard
    let monitoring = deploy_dir().join("monitoring");
    let alerts: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(monitoring.join("alerts.yaml")).unwrap())
            .unwrap();
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring.join("dashboard.json")).unwrap())
            .unwrap();

    // When the mixin's alerts and dashboards are rendered
    let (ok, output) = evaluate(
        "local mixin = import 'baton-mixin/mixin.libsonnet'; \
         { alerts: mixin.prometheusAlerts, dashboards: mixin.grafanaDashboards }",
    );
    assert!(ok, "jsonnet failed:\n{output}");
    let mixin: Value = serde_json::from_str(&output).unwrap();

    // Then its alerts are deploy/'s rule groups, every rule as written
    assert_eq!(mixin["alerts"], json!({"groups": alerts["groups"]}));
    assert!(!alerts["groups"].as_array().unwrap().is_empty());
    // and its one dashboard is deploy/'s
    assert_eq!(mixin["dashboards"], json!({"baton.json": dashboard}));
}
