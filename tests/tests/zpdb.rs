//! Zone-aware pod disruption budgets on the real control plane: the API server calls
//! baton-webhook's `/admission/pod-eviction` and `/admission/zpdb-validation` (configured by
//! `clientConfig.url`), drains are real Eviction API calls (policy/v1, as `kubectl
//! drain` makes them), the StatefulSet controller recreates evicted pods and the pod simulator holds
//! them not ready until the scenario lets them recover.

use std::time::{Duration, Instant};

use baton_core::pods::PodReadiness;
use baton_e2e::controller_support::{
    Controller, events_about, roll_out, wait_group_ready, wait_rollout_complete,
};
use baton_e2e::crds;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::rbac_support::{Binary, SERVICE_ACCOUNT_NAMESPACE, bind_deploy_roles};
use baton_e2e::timeline::{Zone, check_rollout_guarantees};
use baton_e2e::webhook_support::{TestTls, ValidatingWebhooks, WebhookReplica, eviction_webhook};
use baton_e2e::zpdb_support::{
    answer_of, budget, client_without_retries, evict, eviction_review, zpdb_resource,
};
use baton_e2e::{
    ControlPlane, PodEvent, PodSimulator, PodTransition, SimulatorOptions, TestNamespace, wait_for,
    wait_until,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
const GROUP: &str = "ingester";
const ZONES: [&str; 3] = ["a", "b", "c"];

/// `ingester-zone-<zone>`.
fn statefulset(zone: &str) -> String {
    format!("{GROUP}-zone-{zone}")
}

/// Pod `ordinal` of `zone`.
fn pod(zone: &str, ordinal: u32) -> String {
    format!("{}-{ordinal}", statefulset(zone))
}

/// A namespace with one StatefulSet per zone (`rollout-group: ingester` on the StatefulSets
/// and their pods, as budgets select both), all pods ready, and baton-webhook replicas, each
/// registered by its own configuration (so the API server asks every replica about every
/// eviction: all must allow it).
struct Zones {
    namespace: TestNamespace,
    simulator: PodSimulator,
    replicas: Vec<WebhookReplica>,
    tls: TestTls,
    /// The drain's client: kube's retries of 429 answers are off, so a refusal is seen.
    evictor: kube::Client,
    _configurations: Vec<ValidatingWebhooks>,
}

impl Zones {
    async fn new(prefix: &str, sizes: &[i32], replicas: usize) -> Self {
        let control_plane = ControlPlane::shared().await;
        let admin = control_plane.admin_client().await;
        crds::install(&admin, crds::ZONE_AWARE_POD_DISRUPTION_BUDGET).await;
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let client = namespace.client();
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let mut names = Vec::new();
        for (zone, size) in ZONES.iter().zip(sizes) {
            let mut object = StatefulSetFixture::new(&statefulset(zone))
                .group(GROUP)
                .replicas(*size)
                .build();
            let template = object
                .spec
                .as_mut()
                .unwrap()
                .template
                .metadata
                .as_mut()
                .unwrap();
            template
                .labels
                .get_or_insert_default()
                .insert("rollout-group".into(), GROUP.into());
            Api::<StatefulSet>::namespaced(client.clone(), namespace.name())
                .create(&PostParams::default(), &object)
                .await
                .unwrap();
            names.push(statefulset(zone));
        }
        wait_group_ready(&client, namespace.name(), &names).await;
        let tls = TestTls::generate().unwrap();
        let mut started = Vec::new();
        let mut configurations = Vec::new();
        for index in 0..replicas {
            let replica = WebhookReplica::start(control_plane, &tls, namespace.name())
                .await
                .unwrap();
            configurations
                .push(register(control_plane, namespace.name(), index, &tls, &replica).await);
            started.push(replica);
        }
        let zones = Self {
            namespace,
            simulator,
            replicas: started,
            tls,
            evictor: client_without_retries(control_plane).await,
            _configurations: configurations,
        };
        zones.wait_for_webhooks().await;
        zones
    }

    fn ns(&self) -> &str {
        self.namespace.name()
    }

    fn budgets(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.namespace.client(), self.ns(), &zpdb_resource())
    }

    /// Creates the budget `spec` selecting the group.
    async fn create_budget(&self, name: &str, mut spec: Value) {
        spec["selector"] = json!({"matchLabels": {"rollout-group": GROUP}});
        self.budgets()
            .create(&PostParams::default(), &budget(name, spec))
            .await
            .unwrap_or_else(|error| panic!("creating budget {name}: {error}"));
        // Every replica's cache has it once a dry-run review is judged by it.
        for replica in &self.replicas {
            wait_until(
                TIMEOUT,
                "the replica judges with the new budget",
                || async {
                    let (_, message) = self.review(replica, &pod("a", 0), true).await;
                    message.contains(name)
                },
            )
            .await;
        }
    }

    /// The API server picks configurations up asynchronously: probes with a budget the
    /// validation refuses until every replica has judged one.
    async fn wait_for_webhooks(&self) {
        wait_until(TIMEOUT, "every replica is called by the API server", || async {
            let bad = budget(
                "probe",
                json!({"selector": {"matchLabels": {"a": "b"}}, "podNamePartitionRegex": "no-group"}),
            );
            let _ = self
                .budgets()
                .create(&PostParams { dry_run: true, ..PostParams::default() }, &bad)
                .await;
            let mut all = true;
            for replica in &self.replicas {
                all &= metrics(replica).await.contains("webhook=\"zpdb-validation\"");
            }
            all
        })
        .await;
    }

    /// Evicts `pod` through the API server (policy/v1 Eviction): Ok, or the refusal's
    /// HTTP code and message.
    async fn evict(&self, pod: &str) -> Result<(), (u16, String)> {
        evict(&self.evictor, self.ns(), pod).await
    }

    /// Sends an eviction review of `pod` straight to `replica` (as the API server would):
    /// whether it was allowed, and its message.
    async fn review(&self, replica: &WebhookReplica, pod: &str, dry_run: bool) -> (bool, String) {
        let uid = format!("e2e-{}", rand_uid());
        let review = eviction_review(self.ns(), pod, &uid, dry_run);
        let answer: Value = self
            .tls
            .client()
            .unwrap()
            .post(replica.url("/admission/pod-eviction"))
            .json(&review)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["response"]["uid"], uid);
        answer_of(&answer)
    }

    /// Evicts `pod`, expecting it to be allowed, and keeps the pod that replaces it not ready.
    async fn evict_and_hold(&self, pod: &str) {
        self.evict(pod)
            .await
            .unwrap_or_else(|(code, message)| panic!("evicting {pod}: {code} {message}"));
        self.simulator.hold_not_ready(pod).await;
    }

    /// Expects the eviction of `pod` to be refused with 429 and a message holding `words`.
    async fn refused(&self, pod: &str, words: &[&str]) {
        match self.evict(pod).await {
            Ok(()) => panic!("the eviction of {pod} was allowed"),
            Err((code, message)) => {
                assert_eq!(code, 429, "{message}");
                for word in words {
                    assert!(message.contains(word), "{word:?} not in {message:?}");
                }
            }
        }
    }

    async fn release(&self, pods: &[String]) {
        for pod in pods {
            self.simulator.release(pod).await;
        }
        let api = self.namespace.api::<Pod>();
        for pod in pods {
            wait_until(TIMEOUT, &format!("{pod} is ready again"), || async {
                api.get(pod)
                    .await
                    .is_ok_and(|pod| PodReadiness::of(&pod).ready)
            })
            .await;
        }
    }
}

fn rand_uid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn metrics(replica: &WebhookReplica) -> String {
    let Ok(response) = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{}/metrics", replica.ops_port))
        .send()
        .await
    else {
        return String::new();
    };
    response.text().await.unwrap_or_default()
}

/// One replica's webhook configuration (both ZPDB webhooks) for one namespace; deleted when
/// dropped.
async fn register(
    control_plane: &ControlPlane,
    namespace: &str,
    index: usize,
    tls: &TestTls,
    replica: &WebhookReplica,
) -> ValidatingWebhooks {
    let selector = json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
    let eviction = eviction_webhook(
        &format!("pod-eviction-{index}.baton.test"),
        tls,
        replica,
        namespace,
    );
    let validation = json!({
        "name": format!("zpdb-validation-{index}.baton.test"),
        "clientConfig": {"url": replica.url("/admission/zpdb-validation"), "caBundle": tls.ca_bundle()},
        "rules": [{"apiGroups": ["rollout-operator.grafana.com"], "apiVersions": ["v1"],
                   "operations": ["CREATE", "UPDATE"],
                   "resources": ["zoneawarepoddisruptionbudgets"], "scope": "Namespaced"}],
        "namespaceSelector": selector,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
    });
    let name = format!("baton-e2e-zpdb-{namespace}-{index}");
    ValidatingWebhooks::register(control_plane, &name, json!([eviction, validation])).await
}

#[tokio::test]
async fn a_drain_takes_one_zone_up_to_max_unavailable_and_the_next_zone_only_once_it_is_ready() {
    // Given three zones of 3 ready pods and a budget allowing 2 unavailable pods per zone
    let zones = Zones::new("zpdb-drain", &[3, 3, 3], 1).await;
    zones
        .create_budget("ingester", json!({"maxUnavailable": 2}))
        .await;

    // When a drain evicts zone a's pods (which stay not ready once replaced)
    zones.evict_and_hold(&pod("a", 0)).await;
    zones.evict_and_hold(&pod("a", 1)).await;

    // Then a third pod of zone a is refused: the zone is at its max
    zones
        .refused(
            &pod("a", 2),
            &["allows 2 unavailable pods in StatefulSet ingester-zone-a"],
        )
        .await;
    // And every pod of another zone is refused while zone a is not ready, naming it
    for other in [pod("b", 0), pod("c", 2)] {
        zones
            .refused(
                &other,
                &["StatefulSet ingester-zone-a has 2 unavailable pods"],
            )
            .await;
    }

    // When zone a recovers
    let recovered = [pod("a", 0), pod("a", 1)];
    zones.release(&recovered).await;

    // Then the drain can go on in zone b
    let next = pod("b", 0);
    wait_until(TIMEOUT, "the eviction in zone b is allowed", || async {
        zones.evict(&next).await.is_ok()
    })
    .await;
    // And, by the pods' own timeline, zone b lost a pod only after zone a's were ready again
    // (the simulator's watch sees the eviction's deletion shortly after the eviction returns)
    let gone = |entry: &&PodTransition| {
        entry.pod == next && [PodEvent::Terminating, PodEvent::Deleted].contains(&entry.event)
    };
    wait_until(TIMEOUT, "the simulator sees zone b's pod go", || async {
        zones.simulator.timeline().iter().any(|entry| gone(&entry))
    })
    .await;
    let timeline = zones.simulator.timeline();
    let b_gone = timeline.iter().find(gone).expect("zone b's pod went").at;
    for pod in &recovered {
        let ready_again = timeline
            .iter()
            .filter(|entry| entry.pod == *pod && entry.event == PodEvent::Ready)
            .map(|entry| entry.at)
            .max()
            .unwrap();
        assert!(
            ready_again < b_gone,
            "{pod} was not ready again before {next} went"
        );
    }
}

#[tokio::test]
async fn partition_mode_lets_a_partition_go_in_one_zone_only() {
    // Given three zones of 2 pods, partitioned by ordinal
    let zones = Zones::new("zpdb-partition", &[2, 2, 2], 1).await;
    zones
        .create_budget(
            "ingester-partitions",
            json!({"podNamePartitionRegex": "ingester-zone-[a-z]-([0-9]+)"}),
        )
        .await;

    // When partition 0 goes in zone a
    zones.evict_and_hold(&pod("a", 0)).await;

    // Then partition 0 is refused in the other zones, naming the partition
    zones
        .refused(&pod("b", 0), &["partition 0", "ingester-zone-a"])
        .await;
    // But partition 1 may go in another zone
    zones.evict_and_hold(&pod("b", 1)).await;
    // And then not in a third one
    zones.refused(&pod("c", 1), &["partition 1"]).await;
    zones.refused(&pod("c", 0), &["partition 0"]).await;

    // When they recover, partition 0 may go in zone c
    zones.release(&[pod("a", 0), pod("b", 1)]).await;
    wait_until(TIMEOUT, "partition 0 may go in zone c", || async {
        zones.evict(&pod("c", 0)).await.is_ok()
    })
    .await;
}

#[tokio::test]
async fn the_cross_zone_eviction_delay_holds_a_freshly_ready_zone() {
    // Given partitioned zones and a budget holding a partition for 10 s after it is ready
    let zones = Zones::new("zpdb-delay", &[2, 2, 2], 1).await;
    zones
        .create_budget(
            "ingester-delay",
            json!({"podNamePartitionRegex": "ingester-zone-[a-z]-([0-9]+)", "crossZoneEvictionDelay": "10s"}),
        )
        .await;
    // Every pod has been ready for more than the delay before the drain starts
    wait_until(TIMEOUT, "the first eviction is allowed", || async {
        zones.review(&zones.replicas[0], &pod("a", 0), true).await.0
    })
    .await;

    // When partition 0 goes in zone a and comes back ready
    zones.evict_and_hold(&pod("a", 0)).await;
    zones.release(&[pod("a", 0)]).await;
    // (ready by now: no later than this, whatever the watch's lag)
    let ready = Instant::now();

    // Then partition 0 may not go in zone b yet: the replacement is ready too recently
    zones
        .refused(&pod("b", 0), &["ingester-zone-a-0 ready too recently"])
        .await;
    // and still not more than 2 s after: the delay is a guarantee, so what the test checks is
    // its lower bound (a delay of 1 s, or none after the first answer, would allow it here)
    let (late, message) = wait_for(TIMEOUT, "a refusal more than 2 s after", || async {
        let asked = ready.elapsed();
        let (allowed, message) = zones.review(&zones.replicas[0], &pod("b", 0), true).await;
        assert!(
            !allowed,
            "partition 0 may go in zone b {asked:?} after zone a's came back ready, \
             with a 10 s delay: {message}"
        );
        (asked > Duration::from_secs(2)).then_some((asked, message))
    })
    .await;
    assert!(
        message.contains("ingester-zone-a-0 ready too recently"),
        "refused {late:?} after: {message}"
    );

    // And once the delay has passed it may
    wait_until(
        Duration::from_secs(30),
        "partition 0 may go in zone b",
        || async { zones.evict(&pod("b", 0)).await.is_ok() },
    )
    .await;
}

#[tokio::test]
async fn bad_budgets_are_refused_by_the_crd_schema_and_by_the_validation_webhook() {
    let zones = Zones::new("zpdb-validation", &[1, 1, 1], 1).await;
    let create = |spec: Value| {
        let budgets = zones.budgets();
        async move {
            budgets
                .create(&PostParams::default(), &budget("bad", spec))
                .await
                .map(|_| ())
                .map_err(|error| error.to_string())
        }
    };
    let selector = json!({"matchLabels": {"rollout-group": GROUP}});

    // The schema refuses types, ranges, required and exclusive fields
    let schema_cases = [
        (
            json!({"maxUnavailable": 1}),
            "spec.selector: Required value",
        ),
        (
            json!({"selector": selector, "maxUnavailable": -1}),
            "spec.maxUnavailable",
        ),
        (
            json!({"selector": selector, "maxUnavailable": "one"}),
            "spec.maxUnavailable",
        ),
        (
            json!({"selector": selector, "maxUnavailablePercentage": 101}),
            "spec.maxUnavailablePercentage",
        ),
        (
            json!({"selector": selector, "maxUnavailable": 1, "maxUnavailablePercentage": 5}),
            "spec",
        ),
        (
            json!({"selector": selector, "podNamePartitionRegex": "x-([0-9]+)", "podNameRegexGroup": 0}),
            "spec.podNameRegexGroup",
        ),
        (
            json!({"selector": selector, "podNamePartitionRegex": "x-([0-9]+)", "crossZoneEvictionDelay": "5 minutes"}),
            "spec.crossZoneEvictionDelay",
        ),
        (
            json!({"selector": selector, "crossZoneEvictionDelay": "5m"}),
            "spec",
        ),
    ];
    for (spec, words) in schema_cases {
        let error = create(spec.clone()).await.expect_err(&spec.to_string());
        assert!(error.contains(words), "{spec}: {error}");
        assert!(
            !error.contains("baton.test"),
            "{spec}: the schema refuses it before the webhook: {error}"
        );
    }

    // The webhook refuses what a schema cannot judge, naming the field
    let webhook_cases = [
        (
            json!({"selector": selector, "podNamePartitionRegex": "x-([0-9]+"}),
            "spec.podNamePartitionRegex: \"x-([0-9]+\" is not a valid regular expression",
        ),
        (
            json!({"selector": selector, "podNamePartitionRegex": "x-[0-9]+"}),
            "spec.podNamePartitionRegex: \"x-[0-9]+\" has no capture group",
        ),
        (
            json!({"selector": selector, "podNamePartitionRegex": "x-([0-9]+)", "podNameRegexGroup": 2}),
            "spec.podNameRegexGroup: is 2, out of range",
        ),
        (
            json!({"selector": {"matchLabels": {}}}),
            "spec.selector: must have matchLabels or matchExpressions",
        ),
    ];
    for (spec, words) in webhook_cases {
        let error = create(spec.clone()).await.expect_err(&spec.to_string());
        assert!(
            error.contains("zpdb-validation-0.baton.test") && error.contains(words),
            "{spec}: {error}"
        );
    }

    // And a good budget is accepted, then an update making it bad is refused
    create(json!({"selector": selector, "maxUnavailable": 1}))
        .await
        .unwrap();
    let mut bad = zones.budgets().get("bad").await.unwrap();
    bad.data["spec"]["podNamePartitionRegex"] = json!("(a)(b)");
    let error = zones
        .budgets()
        .replace("bad", &PostParams::default(), &bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("spec.podNameRegexGroup: must be set"),
        "{error}"
    );
}

#[tokio::test]
async fn two_replicas_allow_exactly_one_of_two_simultaneous_evictions_in_two_zones_100_times() {
    // Given two replicas and a budget allowing one unavailable pod
    let zones = Zones::new("zpdb-race", &[3, 3, 3], 2).await;
    zones.create_budget("ingester", json!({})).await;
    let records = zones.namespace.api::<ConfigMap>();

    for round in 0..100u32 {
        // When evictions of pods in zones a and b reach the two replicas at the same instant
        let ordinal = round % 3;
        let (a, b) = (pod("a", ordinal), pod("b", ordinal));
        let ((a_allowed, a_message), (b_allowed, b_message)) = futures::join!(
            zones.review(&zones.replicas[0], &a, false),
            zones.review(&zones.replicas[1], &b, false),
        );

        // Then exactly one is allowed
        assert!(
            a_allowed != b_allowed,
            "round {round}: {a} allowed {a_allowed} ({a_message}), {b} allowed {b_allowed} ({b_message})"
        );
        // The evictions are not carried out: forget them, as their expiry would
        let mut record = records.get("baton-zpdb-ingester").await.unwrap();
        record.data = None;
        records
            .replace("baton-zpdb-ingester", &PostParams::default(), &record)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn twenty_concurrent_evictions_in_one_zone_with_max_unavailable_2_evict_exactly_2() {
    // Given a zone of 20 ready pods, two replicas, and a budget allowing 2 unavailable pods
    let mut zones = Zones::new("zpdb-burst", &[20, 1, 1], 2).await;
    zones
        .create_budget("ingester", json!({"maxUnavailable": 2}))
        .await;
    // A kubelet that takes an hour to start a pod: the evicted ones stay unavailable
    zones.simulator = PodSimulator::start(
        zones.namespace.client(),
        zones.ns(),
        SimulatorOptions {
            ready_after: Duration::from_secs(3600),
        },
    )
    .await;

    // When a drain evicts all 20 at once through the API server
    let results =
        futures::future::join_all((0..20).map(|ordinal| zones.evict_owned(pod("a", ordinal))))
            .await;

    // Then exactly 2 are evicted and the others refused with 429
    let allowed = results.iter().filter(|result| result.is_ok()).count();
    assert_eq!(allowed, 2, "{results:#?}");
    for refused in results.iter().filter_map(|result| result.as_ref().err()) {
        assert_eq!(refused.0, 429, "{refused:?}");
    }
}

impl Zones {
    async fn evict_owned(&self, pod: String) -> Result<(), (u16, String)> {
        self.evict(&pod).await
    }
}

// ---------------------------------------------------------------------------------------------
// The rollout controller consults the same budgets before it deletes: a controller
// runs beside the webhook replicas, and the pods' timeline is replayed.

/// [`Zones`] with the budget `ingester` of `spec` and baton-controller running.
struct Controlled {
    zones: Zones,
    _controller: Controller,
    /// The group's StatefulSets.
    names: Vec<String>,
    client: kube::Client,
}

/// What baton-controller runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunAs {
    Admin,
    /// Its service account with exactly deploy/'s roles (least privilege).
    DeployRoles,
}

impl Controlled {
    async fn new(prefix: &str, sizes: &[i32], replicas: usize, spec: Value, run_as: RunAs) -> Self {
        let zones = Zones::new(prefix, sizes, replicas).await;
        zones.create_budget("ingester", spec).await;
        let control_plane = ControlPlane::shared().await;
        let controller = match run_as {
            RunAs::Admin => Controller::start(control_plane, zones.ns(), &[]).await,
            RunAs::DeployRoles => {
                bind_deploy_roles(&zones.namespace.client(), zones.ns(), Binary::Controller)
                    .await
                    .unwrap();
                let kubeconfig = control_plane
                    .service_account_kubeconfig(
                        SERVICE_ACCOUNT_NAMESPACE,
                        Binary::Controller.service_account(),
                    )
                    .unwrap();
                Controller::start_as(kubeconfig, zones.ns(), &[]).await
            }
        };
        Self {
            client: zones.namespace.client(),
            names: ZONES.iter().map(|zone| statefulset(zone)).collect(),
            zones,
            _controller: controller,
        }
    }
}

/// What a drain of one pod went through.
#[derive(Debug)]
struct Drained {
    pod: String,
    /// 429 answers before the eviction went through (or the pod was replaced meanwhile).
    refusals: u32,
    /// Whether this drain's own eviction took the pod (not the rollout replacing it first).
    evicted: bool,
}

impl Zones {
    /// Evicts `pod` as `kubectl drain` does: POST the eviction, and on 429 try again (here
    /// every 100 ms) until it is allowed, or the pod of that uid is gone (the rollout replaced
    /// it meanwhile: nothing left to drain).
    async fn drain(&self, pod: String) -> Drained {
        let pods = self.namespace.api::<Pod>();
        let uid = pods.get(&pod).await.unwrap().metadata.uid;
        let mut refusals = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            match self.evict(&pod).await {
                Ok(()) => {
                    return Drained {
                        pod,
                        refusals,
                        evicted: true,
                    };
                }
                Err((429, _)) => refusals += 1,
                Err((404, _)) => {}
                Err((code, message)) => panic!("draining {pod}: {code} {message}"),
            }
            let current = pods.get_opt(&pod).await.unwrap();
            if current.is_none_or(|current| current.metadata.uid != uid) {
                return Drained {
                    pod,
                    refusals,
                    evicted: false,
                };
            }
            assert!(
                std::time::Instant::now() < deadline,
                "draining {pod}: still refused after 120 s ({refusals} refusals)"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test]
async fn a_rollout_and_a_drain_at_the_same_time_never_exceed_the_budget() {
    // Given three zones of 3 ready pods, a budget of maxUnavailable 1, two webhook replicas
    // and the controller (the rollout's own max-unavailable is 1 too)
    // (`_controller` bound: the controller runs until the scenario ends)
    let Controlled {
        zones,
        _controller,
        names,
        client,
    } = Controlled::new(
        "zpdb-rollout-drain",
        &[3, 3, 3],
        2,
        json!({"maxUnavailable": 1}),
        RunAs::Admin,
    )
    .await;

    // When a rollout starts and, at the same moment, a drain evicts two pods of every zone
    let from = Instant::now();
    let drained = [
        pod("b", 0),
        pod("c", 1),
        pod("a", 2),
        pod("c", 0),
        pod("a", 1),
        pod("b", 2),
    ];
    let drain = futures::future::join_all(drained.iter().map(|pod| zones.drain(pod.clone())));
    let ((), drains) = futures::join!(roll_out(&client, zones.ns(), &names, "v2"), drain);

    // Then the rollout completes and the drain ends, the drain having been refused for a while
    wait_rollout_complete(&client, zones.ns(), &names).await;
    let refusals: u32 = drains.iter().map(|drained| drained.refusals).sum();
    let summary: Vec<String> = drains
        .iter()
        .map(|drained| {
            format!(
                "{}: {} refusals, {}",
                drained.pod,
                drained.refusals,
                if drained.evicted {
                    "evicted"
                } else {
                    "replaced by the rollout"
                }
            )
        })
        .collect();
    assert!(refusals > 0, "the drain was never refused: {summary:#?}");
    assert!(
        drains.iter().any(|drained| drained.evicted),
        "the rollout replaced every drained pod before the drain could: {summary:#?}"
    );
    // And the pods' timeline never shows two zones unavailable at once, nor a zone with more
    // unavailable pods than the budget, nor a pod leaving while another zone was unavailable
    let budget: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
    check_rollout_guarantees(&zones.simulator.timeline(), &budget, from)
        .unwrap_or_else(|violation| panic!("{violation}\ndrains: {summary:#?}"));
}

#[tokio::test]
async fn a_budget_of_max_unavailable_0_refuses_evictions_but_not_the_rollout() {
    // Given a group whose budget allows no eviction at all, and the controller with only the
    // permissions of deploy/'s roles
    // (`_controller` bound: the controller runs until the scenario ends)
    let Controlled {
        zones,
        _controller,
        names,
        client,
    } = Controlled::new(
        "zpdb-rollout-zero",
        &[2, 2, 2],
        1,
        json!({"maxUnavailable": 0}),
        RunAs::DeployRoles,
    )
    .await;
    // A drain is refused
    zones
        .refused(&pod("a", 0), &["allows 0 unavailable pods"])
        .await;

    // When a new version is rolled out
    let from = Instant::now();
    roll_out(&client, zones.ns(), &names, "v2").await;

    // Then the rollout completes: the budget does not hold back the rollout's own deletions,
    // one pod at a time, one zone at a time
    wait_rollout_complete(&client, zones.ns(), &names).await;
    let guarantees: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    check_rollout_guarantees(&zones.simulator.timeline(), &guarantees, from).unwrap();
    // And the rollout claimed its deletions in the budget's record, deploy/'s roles enough for
    // it (the budgets' watch, the record's writes)
    let record = zones
        .namespace
        .api::<ConfigMap>()
        .get("baton-zpdb-ingester")
        .await
        .unwrap();
    assert!(
        record
            .data
            .unwrap_or_default()
            .values()
            .any(|entry| entry.contains("baton-controller rollout of group ingester")),
        "no claim by the rollout in the record"
    );
    let output = _controller.process.output();
    assert!(
        !output.contains("forbidden"),
        "a call was refused:\n{output}"
    );
}

#[tokio::test]
async fn an_eviction_claimed_in_the_budgets_record_holds_the_rollout_until_it_is_gone() {
    // Given a group with a budget and the controller, and in the budget's record an eviction
    // of zone b's pod a webhook replica just allowed (the API server has not carried it out)
    // (`_controller` bound: the controller runs until the scenario ends)
    let Controlled {
        zones,
        _controller,
        names,
        client,
    } = Controlled::new("zpdb-rollout-claim", &[2, 2, 2], 1, json!({}), RunAs::Admin).await;
    let claimed = pod("b", 0);
    let uid = zones
        .namespace
        .api::<Pod>()
        .get(&claimed)
        .await
        .unwrap()
        .metadata
        .uid;
    let entry =
        json!({"allowedAt": jiff::Timestamp::now().to_string(), "uid": uid, "request": "e2e"});
    // (labelled as baton's webhook writes it: an unlabelled one is no record of baton's)
    let record: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "baton-zpdb-ingester", "labels": {
            "app.kubernetes.io/managed-by": "baton",
            "rollout-operator.grafana.com/zpdb": "ingester",
        }},
        "data": {claimed.clone(): entry.to_string()},
    }))
    .unwrap();
    let records = zones.namespace.api::<ConfigMap>();
    records
        .create(&PostParams::default(), &record)
        .await
        .unwrap();

    // When a new version is rolled out
    let from = Instant::now();
    roll_out(&client, zones.ns(), &names, "v2").await;

    // Then the controller waits, naming the budget and the claimed pod, and deletes nothing
    wait_until(
        TIMEOUT,
        "the controller says the budget holds it",
        || async {
            for zone in ZONES {
                let events = events_about(&client, zones.ns(), &statefulset(zone)).await;
                if events.iter().any(|(reason, note)| {
                    reason == "ZoneAwareBudgetWaits"
                        && note.contains("ZoneAwarePodDisruptionBudget ingester")
                        && note.contains(&format!("{claimed} eviction allowed at"))
                }) {
                    return true;
                }
            }
            false
        },
    )
    .await;
    let left = zones
        .simulator
        .timeline()
        .into_iter()
        .filter(|entry| entry.at >= from)
        .find(|entry| [PodEvent::Terminating, PodEvent::Deleted].contains(&entry.event));
    assert!(left.is_none(), "a pod went while the claim held: {left:?}");

    // When the claim is gone (as its expiry would drop it)
    let mut record = records.get("baton-zpdb-ingester").await.unwrap();
    record.data = None;
    records
        .replace("baton-zpdb-ingester", &PostParams::default(), &record)
        .await
        .unwrap();

    // Then the rollout completes
    wait_rollout_complete(&client, zones.ns(), &names).await;
}
