//! What the other ways of installing baton (the Helm chart, the jsonnet library) render,
//! compared with what `kubectl kustomize deploy/` renders, so that none of them drifts from
//! deploy/: tools run from the test control plane's folder, YAML parsed into JSON values, and
//! objects made comparable.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};

use crate::ControlPlane;
use crate::control_plane::tool;
use crate::manifests::deploy_dir;

/// Runs `program` (found by [`tool`]) with `args`, against `control_plane` when given; its
/// success and output.
pub fn run(program: &str, args: &[&str], control_plane: Option<&ControlPlane>) -> (bool, String) {
    let mut command = Command::new(tool(program));
    command.args(args);
    if let Some(control_plane) = control_plane {
        command.env("KUBECONFIG", control_plane.kubeconfig_path());
    }
    let output = command.output().unwrap_or_else(|error| {
        panic!("{program} runs (tests/control-plane/install.sh builds it): {error}")
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// Every object of a multi-document YAML stream, as JSON values.
pub fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|error| panic!("parsing {error}:\n{yaml}"))
        .into_iter()
        .filter(|document| !document.is_null())
        .collect()
}

/// What `kubectl apply -k deploy/` applies.
pub fn kustomized_deploy() -> Vec<Value> {
    let (ok, kustomized) = run(
        "kubectl",
        &["kustomize", deploy_dir().to_str().unwrap()],
        None,
    );
    assert!(ok, "kubectl kustomize failed:\n{kustomized}");
    documents(&kustomized)
}

/// What `kubectl apply -k deploy/member-cluster` applies in a member cluster.
pub fn kustomized_member_cluster() -> Vec<Value> {
    let members = deploy_dir().join("member-cluster");
    let (ok, kustomized) = run("kubectl", &["kustomize", members.to_str().unwrap()], None);
    assert!(
        ok,
        "kubectl kustomize deploy/member-cluster failed:\n{kustomized}"
    );
    documents(&kustomized)
}

/// The object of `kind` named `name` among `objects`.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// The validating and mutating webhook configurations among `objects`.
pub fn webhook_configurations(objects: &[Value]) -> Vec<&Value> {
    objects
        .iter()
        .filter(|object| {
            object["kind"]
                .as_str()
                .is_some_and(|kind| kind.ends_with("WebhookConfiguration"))
        })
        .collect()
}

/// `kind/name` of every object, sorted.
pub fn kinds_and_names(objects: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = objects
        .iter()
        .map(|object| {
            format!(
                "{}/{}",
                object["kind"].as_str().unwrap(),
                object["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    names.sort();
    names
}

/// `value` with every run of whitespace in its strings made one space. kustomize re-emits a
/// folded scalar whose lines are indented further (deploy/'s CEL expressions) with an extra
/// blank line, so the expressions it applies differ from deploy/'s files, and from the other
/// renderings, in whitespace alone.
fn whitespace_folded(value: &mut Value) {
    match value {
        Value::String(text) => *text = text.split_whitespace().collect::<Vec<_>>().join(" "),
        Value::Array(items) => items.iter_mut().for_each(whitespace_folded),
        Value::Object(fields) => fields.values_mut().for_each(whitespace_folded),
        _ => {}
    }
}

/// An object as every install must have it: keyed by kind, namespace and name, without what
/// only Helm adds (its release labels, the configuration checksum that rolls the pods), with
/// the configuration file parsed (comments are deploy/'s alone) and whitespace folded.
fn comparable(objects: Vec<Value>) -> BTreeMap<String, Value> {
    const HELMS_LABELS: [&str; 3] = [
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "helm.sh/chart",
    ];
    objects
        .into_iter()
        .map(|mut object| {
            if let Some(labels) = object
                .pointer_mut("/metadata/labels")
                .and_then(Value::as_object_mut)
            {
                for label in HELMS_LABELS {
                    labels.remove(label);
                }
            }
            if let Some(template) = object
                .pointer_mut("/spec/template/metadata")
                .and_then(Value::as_object_mut)
            {
                if let Some(annotations) = template
                    .get_mut("annotations")
                    .and_then(Value::as_object_mut)
                {
                    annotations.remove("checksum/config");
                }
                if template.get("annotations") == Some(&json!({})) {
                    template.remove("annotations");
                }
            }
            if let Some(file) = object.pointer_mut("/data/config.yaml") {
                *file = serde_saphyr::from_str::<Value>(file.as_str().unwrap()).unwrap();
            }
            whitespace_folded(&mut object);
            let key = format!(
                "{} {}/{}",
                object["kind"].as_str().unwrap(),
                object["metadata"]["namespace"].as_str().unwrap_or(""),
                object["metadata"]["name"].as_str().unwrap()
            );
            (key, object)
        })
        .collect()
}

/// Where `rendered` differs from `deployed`, field for field (names, labels, RBAC rules,
/// webhook rules and selectors, the admission policy, the containers, the configuration, the
/// CRDs), one line per object of either that the other lacks or has otherwise; none when the
/// two are the same objects.
pub fn differences(rendered: Vec<Value>, deployed: Vec<Value>) -> Vec<String> {
    let (rendered, deployed) = (comparable(rendered), comparable(deployed));
    let mut differing: Vec<String> = deployed
        .iter()
        .filter(|(key, object)| rendered.get(*key) != Some(*object))
        .map(|(key, object)| {
            format!(
                "{key}\n  deploy/:  {object}\n  rendered: {}",
                rendered.get(key).unwrap_or(&Value::Null)
            )
        })
        .collect();
    differing.extend(
        rendered
            .keys()
            .filter(|key| !deployed.contains_key(*key))
            .map(|key| format!("{key}: rendered, not in deploy/")),
    );
    differing
}

/// Asserts that `rendered` puts baton's own objects in `system` and names `groups` in every
/// place that names the groups' namespace: the configuration, the groups' roles, and each
/// webhook configuration's label and namespace selector (whose Service stays in `system`).
pub fn assert_namespaces(rendered: &[Value], system: &str, groups: &str) {
    assert_eq!(
        find(rendered, "ConfigMap", "baton-config")["data"]["groups-namespace"],
        groups
    );
    for role in ["baton-controller-groups", "baton-webhook-groups"] {
        for kind in ["Role", "RoleBinding"] {
            assert_eq!(find(rendered, kind, role)["metadata"]["namespace"], groups);
        }
        assert_eq!(
            find(rendered, "RoleBinding", role)["subjects"][0]["namespace"],
            system
        );
    }
    let configurations = webhook_configurations(rendered);
    assert_eq!(configurations.len(), 6);
    for configuration in configurations {
        let name = &configuration["metadata"]["name"];
        assert_eq!(
            configuration["metadata"]["labels"]["grafana.com/namespace"], groups,
            "{name}"
        );
        let webhook = &configuration["webhooks"][0];
        assert_eq!(
            webhook["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], groups,
            "{name}"
        );
        assert_eq!(
            webhook["clientConfig"]["service"]["namespace"], system,
            "{name}"
        );
    }
    for (kind, name) in [
        ("Deployment", "baton-controller"),
        ("Deployment", "baton-webhook"),
        ("ConfigMap", "baton-config"),
        ("ServiceAccount", "baton-controller"),
        ("Role", "baton-controller"),
    ] {
        assert_eq!(find(rendered, kind, name)["metadata"]["namespace"], system);
    }
    assert_eq!(
        find(
            rendered,
            "ClusterRoleBinding",
            "baton-controller-webhook-ca"
        )["subjects"][0]["namespace"],
        system
    );
}
