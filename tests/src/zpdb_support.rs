//! Zone-aware disruption budgets in tests and benches: the resource (a dynamic one: the
//! tests create budgets as users write them), a budget selecting a rollout group, and the
//! eviction review the API server sends baton-webhook (policy/v1beta1, as Kubernetes 1.20).

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// `zoneawarepoddisruptionbudgets.rollout-operator.grafana.com/v1`.
pub fn zpdb_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "rollout-operator.grafana.com",
            "v1",
            "ZoneAwarePodDisruptionBudget",
        ),
        "zoneawarepoddisruptionbudgets",
    )
}

/// A budget named `name` with `spec`.
pub fn budget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "rollout-operator.grafana.com/v1",
        "kind": "ZoneAwarePodDisruptionBudget",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a valid ZoneAwarePodDisruptionBudget")
}

/// The AdmissionReview of the eviction of `pod`, as Kubernetes 1.20 sends it to
/// `/admission/pod-eviction`.
pub fn eviction_review(namespace: &str, pod: &str, uid: &str, dry_run: bool) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "policy", "version": "v1beta1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "name": pod,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:drain"},
            "object": {"apiVersion": "policy/v1beta1", "kind": "Eviction",
                       "metadata": {"name": pod, "namespace": namespace}},
            "dryRun": dry_run,
        }
    })
}

/// What baton-webhook answered a review: allowed, and the message.
pub fn answer_of(review: &Value) -> (bool, String) {
    let response = &review["response"];
    (
        response["allowed"] == true,
        response["status"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    )
}
