//! What the in-process tests share: a webhook state whose API server cannot be reached (the
//! paths under test never need it, and those that try must degrade as documented), and review
//! builders.

#![allow(dead_code)]

use actix_web::web;
use baton_config::Config;
use baton_shared::pod_client::PodHttpClient;
use baton_webhook::admission::prepare_downscale::flow::PrepareDownscale;
use baton_webhook::metrics::WebhookMetrics;
use baton_webhook::parents::ParentCache;
use baton_webhook::server::WebhookState;
use baton_webhook::statefulsets::StatefulSetCache;
use prometheus::Registry;
use serde_json::{Value, json};

/// A client for an API server that refuses connections at once.
pub fn unreachable_client() -> kube::Client {
    baton_shared::crypto::install_default_provider();
    // Port 1 on loopback: nothing listens, connections are refused immediately.
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a valid URL"));
    kube::Client::try_from(config).expect("a client")
}

/// The handlers' state, with `config`, and the registry its metrics are in.
pub fn state(config: &Config) -> (web::Data<WebhookState>, Registry) {
    let registry = Registry::new();
    let client = unreachable_client();
    let metrics = WebhookMetrics::register(&registry).expect("metrics register");
    let pods = PodHttpClient::new(&config.pods, &registry).expect("pod client");
    // The caches are never filled: every /scale lookup goes to the (unreachable) API.
    let (parents, _never_filled) = ParentCache::new(
        client.clone(),
        Some(&config.namespace),
        StatefulSetCache::unfilled(),
        Some(metrics.parent_lookups.clone()),
    );
    let scope = config.scope().expect("a scope");
    let prepare = PrepareDownscale::new(client, pods, config, scope);
    (
        web::Data::new(WebhookState::new(
            parents,
            prepare,
            metrics,
            &config.webhook,
        )),
        registry,
    )
}

pub fn workload(kind: &str, replicas: Value, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": "ingester-zone-a", "namespace": "mimir", "labels": labels},
        "spec": {"replicas": replicas, "serviceName": "ingester"}
    })
}

pub fn scale(replicas: i32) -> Value {
    json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
           "metadata": {"name": "ingester-zone-a", "namespace": "mimir"}, "spec": {"replicas": replicas}})
}

/// An UPDATE review of `resource` (`sub_resource` for `/scale`).
pub fn review(
    api_version: &str,
    resource: &str,
    sub_resource: Option<&str>,
    old: Value,
    new: Value,
    dry_run: bool,
) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": "3b4c1f3e-7f0e-4c55-9d5c-1a2b3c4d5e6f",
            "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
            "resource": {"group": "apps", "version": "v1", "resource": resource},
            "subResource": sub_resource,
            "requestKind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
            "name": "ingester-zone-a",
            "namespace": "mimir",
            "operation": "UPDATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": new,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

/// A StatefulSet downscale 5 → 3 of an object labelled no-downscale.
pub fn labelled_downscale(api_version: &str) -> Value {
    let labels = json!({"grafana.com/no-downscale": "true"});
    review(
        api_version,
        "statefulsets",
        None,
        workload("StatefulSet", json!(5), labels.clone()),
        workload("StatefulSet", json!(3), labels),
        false,
    )
}

pub const DENIED: &str = "downscale of statefulsets/ingester-zone-a in mimir from 5 to 3 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'";
