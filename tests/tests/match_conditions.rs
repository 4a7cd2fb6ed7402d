//! deploy/'s webhook `matchConditions` on the real control plane: with them the API server
//! calls baton only for writes baton could refuse or act on, so the writes of a rollout of an
//! unrelated Deployment and of a node drain mostly never wait on it; without them (as
//! configured before, or by a hand-written configuration) every matching write is sent.
//! Calls are counted on the webhook's side (`baton_admission_decisions_total`, by webhook);
//! what each scenario cost is printed, and docs/benchmarks.md records the figures.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_e2e::controller_support::wait_group_ready;
use baton_e2e::crds;
use baton_e2e::fixtures::rollout_group;
use baton_e2e::keys::NO_DOWNSCALE;
use baton_e2e::webhook_support::{
    MatchConditions, SHIPPED_CONFIGURATIONS, ShippedConfigurations, TestTls, WebhookReplica,
    replicas_patch, wait_for_shipped_webhooks,
};
use baton_e2e::{ControlPlane, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
const DEPLOYMENT: &str = "frontend";
const ZONES: [&str; 3] = ["a", "b", "c"];

/// Calls per webhook (`baton_admission_decisions_total` summed over results; the record guard
/// shares the state guard's path, so it counts as `state-guard`).
type Calls = BTreeMap<String, u64>;

/// A namespace whose pods all run on one node of its own, deploy/'s six webhook configurations
/// registered for it (with or without their matchConditions) calling one replica, a rollout
/// group of three zones labelled no-downscale and a Deployment of three pods, all ready.
struct Cluster {
    namespace: TestNamespace,
    node: String,
    replica: WebhookReplica,
    statefulsets: Vec<String>,
    _simulator: PodSimulator,
    _configurations: ShippedConfigurations,
}

impl Cluster {
    async fn new(prefix: &str, match_conditions: MatchConditions) -> Self {
        let control_plane = ControlPlane::shared().await;
        let admin = control_plane.admin_client().await;
        crds::install(&admin, crds::ZONE_AWARE_POD_DISRUPTION_BUDGET).await;
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let (client, ns) = (namespace.client(), namespace.name().to_owned());
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let node = format!("node-{ns}");
        Api::<Node>::all(admin)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": node}})).unwrap(),
            )
            .await
            .expect("creating the node");
        let tls = TestTls::generate().expect("a test CA");
        let replica = WebhookReplica::start(control_plane, &tls, &ns)
            .await
            .expect("baton-webhook starts");
        // The two probed last: once the API server calls them, it has the others too.
        let mut names: Vec<&str> = SHIPPED_CONFIGURATIONS
            .iter()
            .copied()
            .filter(|name| !["baton-no-downscale", "baton-prepare-downscale"].contains(name))
            .collect();
        names.extend(["baton-no-downscale", "baton-prepare-downscale"]);
        let configurations = ShippedConfigurations::register(
            control_plane,
            &ns,
            &tls,
            &replica,
            &names,
            match_conditions,
        )
        .await
        .expect("registering deploy/'s webhook configurations");

        let mut statefulsets = Vec::new();
        for fixture in rollout_group("ingester", &ZONES, 1) {
            let mut object = fixture.label(NO_DOWNSCALE, "true").build();
            if let Some(spec) = object
                .spec
                .as_mut()
                .and_then(|spec| spec.template.spec.as_mut())
            {
                spec.node_name = Some(node.clone());
            }
            Api::<StatefulSet>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &object)
                .await
                .expect("creating a zone");
            statefulsets.push(object.metadata.name.unwrap_or_default());
        }
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": DEPLOYMENT},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": DEPLOYMENT}},
                "template": {
                    "metadata": {"labels": {"app": DEPLOYMENT}},
                    "spec": {
                        "nodeName": node,
                        "containers": [{"name": "app", "image": "registry.example/frontend:v1"}],
                        "terminationGracePeriodSeconds": 0,
                    },
                },
            },
        }))
        .unwrap();
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &deployment)
            .await
            .expect("creating the Deployment");
        let cluster = Self {
            namespace,
            node,
            replica,
            statefulsets,
            _simulator: simulator,
            _configurations: configurations,
        };
        wait_for_shipped_webhooks(&cluster.namespace).await;
        cluster.wait_settled().await;
        cluster
    }

    /// Every zone and the Deployment ready, with nothing left to roll.
    async fn wait_settled(&self) {
        wait_group_ready(
            &self.namespace.client(),
            self.namespace.name(),
            &self.statefulsets,
        )
        .await;
        let deployments = self.namespace.api::<Deployment>();
        wait_until(
            TIMEOUT,
            "the Deployment is rolled out and available",
            || async {
                deployments.get(DEPLOYMENT).await.is_ok_and(|deployment| {
                    let generation = deployment.metadata.generation;
                    let status = deployment.status.unwrap_or_default();
                    status.observed_generation == generation
                        && status.replicas == Some(3)
                        && status.updated_replicas == Some(3)
                        && status.available_replicas == Some(3)
                })
            },
        )
        .await;
    }

    async fn calls(&self) -> Calls {
        let text = reqwest::get(format!(
            "http://127.0.0.1:{}/metrics",
            self.replica.ops_port
        ))
        .await
        .expect("the webhook's metrics answer")
        .text()
        .await
        .expect("metrics text");
        let mut calls = Calls::new();
        for line in text
            .lines()
            .filter(|line| line.starts_with("baton_admission_decisions_total{"))
        {
            let webhook = line
                .split("webhook=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .expect("a webhook label");
            let value: u64 = line
                .rsplit(' ')
                .next()
                .and_then(|value| value.parse().ok())
                .expect("a count");
            *calls.entry(webhook.to_owned()).or_default() += value;
        }
        calls
    }

    /// What `scenario` cost in calls, per webhook (every webhook named, 0 if uncalled).
    async fn count<F: std::future::Future<Output = ()>>(&self, scenario: F) -> Calls {
        let before = self.calls().await;
        scenario.await;
        let after = self.calls().await;
        [
            "no-downscale",
            "prepare-downscale",
            "pod-eviction",
            "zpdb-validation",
            "state-guard",
        ]
        .into_iter()
        .map(|webhook| {
            let count = |calls: &Calls| calls.get(webhook).copied().unwrap_or(0);
            (webhook.to_owned(), count(&after) - count(&before))
        })
        .collect()
    }

    /// `kubectl drain` of the node, then every pod back and ready.
    async fn drain(&self) {
        let control_plane = ControlPlane::shared().await;
        let output = tokio::process::Command::new(control_plane.kubectl())
            .args(["drain", &self.node, "--ignore-daemonsets", "--timeout=120s"])
            .env("KUBECONFIG", control_plane.kubeconfig_path())
            .output()
            .await
            .expect("kubectl runs");
        assert!(
            output.status.success(),
            "kubectl drain failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        self.wait_settled().await;
    }

    /// A new image for the Deployment, rolled out to the end.
    async fn roll_out_the_deployment(&self) {
        self.namespace
            .api::<Deployment>()
            .patch(
                DEPLOYMENT,
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "app", "image": "registry.example/frontend:v2"}
                ]}}}})),
            )
            .await
            .expect("changing the Deployment's image");
        self.wait_settled().await;
    }

    async fn delete_node(&self) {
        let admin = ControlPlane::shared().await.admin_client().await;
        let _ = Api::<Node>::all(admin)
            .delete(&self.node, &DeleteParams::default())
            .await;
    }
}

/// The scenarios' calls of one configuration.
struct Cost {
    drain: Calls,
    rollout: Calls,
}

async fn cost(prefix: &str, match_conditions: MatchConditions) -> (Cluster, Cost) {
    let cluster = Cluster::new(prefix, match_conditions).await;
    let drain = cluster.count(cluster.drain()).await;
    let rollout = cluster.count(cluster.roll_out_the_deployment()).await;
    (cluster, Cost { drain, rollout })
}

#[tokio::test]
async fn the_shipped_match_conditions_spare_baton_the_writes_it_would_allow_anyway() {
    // Given two namespaces alike (a rollout group of three zones labelled no-downscale, a
    // Deployment of three pods, all on one node), one registered with deploy/'s webhook
    // configurations as shipped, the other with their matchConditions stripped

    // When each node is drained and the Deployment then rolled out to a new image
    let ((shipped, with), (stripped, without)) = tokio::join!(
        cost("mc-shipped", MatchConditions::AsShipped),
        cost("mc-stripped", MatchConditions::Stripped),
    );
    eprintln!(
        "calls per webhook     drain (stripped -> shipped)   Deployment rollout (stripped -> shipped)"
    );
    for (webhook, calls) in &with.drain {
        eprintln!(
            "{webhook:<20}  {:>5} -> {:<5}                 {:>5} -> {}",
            without.drain[webhook], calls, without.rollout[webhook], with.rollout[webhook]
        );
    }

    // Then the rollout's writes (the Deployment's revision, its ReplicaSets scaled up and down)
    // call no-downscale only without the conditions
    assert!(without.rollout["no-downscale"] > 0, "{:?}", without.rollout);
    assert_eq!(with.rollout["no-downscale"], 0, "{:?}", with.rollout);
    // And the StatefulSet controller's status writes during the drain call the state guard only
    // without them
    assert!(without.drain["state-guard"] > 0, "{:?}", without.drain);
    assert_eq!(with.drain["state-guard"], 0, "{:?}", with.drain);
    // And every eviction is judged either way (an Eviction carries no labels to skip by): the
    // 6 pods' at least, more when kubectl drain retried one the budget held
    assert!(with.drain["pod-eviction"] >= 6, "{:?}", with.drain);
    assert!(without.drain["pod-eviction"] >= 6, "{:?}", without.drain);
    // And nothing else of either scenario is sent to prepare-downscale
    for cost in [&with, &without] {
        assert_eq!(cost.drain["prepare-downscale"], 0);
        assert_eq!(cost.rollout["prepare-downscale"], 0);
    }

    // And what baton refuses still reaches it: a labelled zone losing a replica through its
    // spec, as through its /scale (the probes)
    let zones = shipped.namespace.api::<StatefulSet>();
    let (params, patch) = replicas_patch(0, false);
    let refused = zones
        .patch("ingester-zone-a", &params, &patch)
        .await
        .expect_err("a downscale of a no-downscale zone is refused");
    assert!(
        refused
            .to_string()
            .contains("no-downscale.baton.grafana.com"),
        "{refused}"
    );
    // And a dry run of it too (no-downscale judges dry runs like real requests)
    let (params, patch) = replicas_patch(0, true);
    assert!(
        zones
            .patch("ingester-zone-a", &params, &patch)
            .await
            .is_err()
    );

    shipped.delete_node().await;
    stripped.delete_node().await;
}
