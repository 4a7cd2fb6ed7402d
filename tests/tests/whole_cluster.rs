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
