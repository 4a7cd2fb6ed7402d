//! The AdmissionReviews the API server sends the no-downscale webhook, as the side-by-side
//! tests and the benchmarks send them to baton and to the Go operator (the eviction's is
//! `zpdb_support::eviction_review`).

use serde_json::{Value, json};

/// An UPDATE review of StatefulSet `stored` (as the API returns it) whose replicas go to `to`
/// (None: the field removed), in review version `api_version`.
pub fn update_review(api_version: &str, stored: &Value, to: Option<i64>, dry_run: bool) -> Value {
    let mut object = stored.clone();
    match to {
        Some(replicas) => object["spec"]["replicas"] = json!(replicas),
        None => {
            object["spec"]
                .as_object_mut()
                .expect("a StatefulSet has a spec")
                .remove("replicas");
        }
    }
    json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": "side-by-side",
            "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
            "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "name": stored["metadata"]["name"],
            "namespace": stored["metadata"]["namespace"],
            "operation": "UPDATE",
            "userInfo": {"username": "e2e"},
            "object": object,
            "oldObject": stored,
            "dryRun": dry_run,
        }
    })
}

/// A review of a /scale update of StatefulSet `name` in `namespace` from `from` to `to`.
pub fn scale_review(namespace: &str, name: &str, from: i64, to: i64) -> Value {
    let scale = |replicas: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"replicas": replicas}})
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "side-by-side",
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "subResource": "scale",
            "name": name,
            "namespace": namespace,
            "operation": "UPDATE",
            "userInfo": {"username": "e2e"},
            "object": scale(to),
            "oldObject": scale(from),
            "dryRun": false,
        }
    })
}
