//! Zone-aware disruption budgets in tests and benches: the resource (a dynamic one: the
//! tests create budgets as users write them), a budget selecting a rollout group, and the
//! eviction review the API server sends baton-webhook (a policy/v1 Eviction in an
//! `admission.k8s.io/v1` review, as current Kubernetes sends it with deploy/'s configuration).

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

/// Creates budget `group` in `namespace`: one pod of rollout group `group` unavailable at most.
pub async fn create_group_budget(client: &kube::Client, namespace: &str, group: &str) {
    let budgets =
        kube::Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &zpdb_resource());
    budgets
        .create(
            &kube::api::PostParams::default(),
            &budget(
                group,
                json!({"maxUnavailable": 1, "selector": {"matchLabels": {"rollout-group": group}}}),
            ),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the budget {group}: {error}"));
}

/// The AdmissionReview of the eviction of `pod`, as the API server sends it to
/// `/admission/pod-eviction` for `kubectl drain` (policy/v1) under deploy/'s webhook
/// configuration (review version v1 first).
pub fn eviction_review(namespace: &str, pod: &str, uid: &str, dry_run: bool) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "name": pod,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:drain"},
            "object": {"apiVersion": "policy/v1", "kind": "Eviction",
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

/// Evicts `pod` through the API server (a policy/v1 Eviction, as `kubectl drain` does): Ok, or
/// the refusal's status code and message.
pub async fn evict(client: &kube::Client, namespace: &str, pod: &str) -> Result<(), (u16, String)> {
    request_eviction(client, namespace, pod, false).await
}

/// As [`evict`], as a dry run: judged by the API server and the webhooks (baton's eviction
/// webhook has no side effects on dry runs), and nothing is evicted.
pub async fn evict_dry_run(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
) -> Result<(), (u16, String)> {
    request_eviction(client, namespace, pod, true).await
}

async fn request_eviction(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    dry_run: bool,
) -> Result<(), (u16, String)> {
    let mut body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    });
    if dry_run {
        body["deleteOptions"] = json!({"dryRun": ["All"]});
    }
    // The API server's admission request is a dry run when the create is (`?dryRun=All`); the
    // Eviction's own deleteOptions make only the deletion one.
    let query = if dry_run { "?dryRun=All" } else { "" };
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{pod}/eviction{query}"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&body).expect("JSON"))
    .expect("a request");
    match client.request::<Value>(request).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err((status.code, status.message)),
        Err(error) => panic!("evicting {pod}: {error}"),
    }
}

/// A drain's client: the administrator's, without kube's retries of 429 answers (its default
/// client retries them, with backoff, up to 15 times: a refused eviction would look like a
/// hang).
pub async fn client_without_retries(control_plane: &crate::ControlPlane) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(control_plane.kubeconfig_path())
        .expect("the control plane's kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a client configuration");
    config.default_retry = false;
    kube::Client::try_from(config).expect("a client")
}
