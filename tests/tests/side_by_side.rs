//! Side by side with Grafana's rollout-operator v0.38.1, the real Go binary
//! (`baton_e2e::go_operator`): each operator alone in a namespace of its own on the shared
//! control plane, both namespaces given the same objects, and the same admission reviews sent
//! to both webhook servers. Every answer is compared field by field: the HTTP status, the
//! review's apiVersion, allowed, the status code and the message (with the namespace's name
//! written as `<ns>`). A case where baton answers differently on purpose says so and why, and
//! asserts both answers as they are, so a change on either side is seen; docs/compatibility.md
//! lists the same differences.
//!
//! Rollouts and downscales are compared the same way on what each operator did: which pods
//! went, in which order, and which pods were called (prepare-downscale, delayed downscale; the
//! Go operator reaches them by DNS name through `baton_e2e::go_operator::PodProxy`). Switching
//! from one operator to the other midway, in both directions, must keep every guarantee: the
//! zone rule of a rollout, the min time between zone downscales, a downscale's delay.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use baton_core::pods::PodReadiness;
use baton_e2e::controller_support::{
    Controller, create_ready_group, roll_out, wait_group_ready, wait_rollout_complete,
};
use baton_e2e::crds;
use baton_e2e::fixtures::{StatefulSetFixture, rollout_group};
use baton_e2e::go_operator::GoOperator;
use baton_e2e::http_support::{PodEndpoint, endpoints_on_pods};
use baton_e2e::keys::{
    DELAYED_DOWNSCALE, DELAYED_DOWNSCALE_URL, DOWNSCALE_LEADER, LAST_DOWNSCALE,
    MIN_TIME_BETWEEN_ZONES_DOWNSCALE, MIRROR_API_VERSION, MIRROR_KIND, MIRROR_NAME, NO_DOWNSCALE,
    PREPARE_DOWNSCALE, PREPARE_DOWNSCALE_PATH, PREPARE_DOWNSCALE_PORT,
};
use baton_e2e::reviews::{scale_review, update_review};
use baton_e2e::scaling_support::{
    REPLICA_TEMPLATE_API_VERSION, REPLICA_TEMPLATE_KIND, ReplicaTemplates,
    install_replica_template_crd,
};
use baton_e2e::timeline::{Zone, check_rollout_guarantees, most_unavailable, zone_windows};
use baton_e2e::webhook_support::{
    TestTls, WebhookConfigurations, WebhookReplica, free_port, scale, wait_for_webhooks,
};
use baton_e2e::zpdb_support::{budget, eviction_review, zpdb_resource};
use baton_e2e::{
    ControlPlane, PodEvent, PodSimulator, PodTransition, Scene, TestNamespace, wait_until,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// What one operator answered one review.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    /// The HTTP status.
    http: u16,
    /// The review's `apiVersion` (None when the body is not a review).
    api_version: Option<String>,
    allowed: Option<bool>,
    /// `response.status.code` (None when absent or 0: Go's omitempty).
    code: Option<i64>,
    /// `response.status.message`, else the body of a non-200 answer; the namespace's name
    /// replaced by `<ns>`.
    message: String,
    warnings: Vec<String>,
}

impl Answer {
    fn read(http: u16, body: &str, namespace: &str) -> Self {
        let normalise = |text: &str| text.replace(namespace, "<ns>").trim().to_owned();
        let review: Option<Value> = serde_json::from_str(body).ok();
        let response = review.as_ref().map(|review| &review["response"]);
        Self {
            http,
            api_version: review
                .as_ref()
                .and_then(|review| review["apiVersion"].as_str())
                .map(str::to_owned),
            allowed: response.and_then(|response| response["allowed"].as_bool()),
            code: response
                .and_then(|response| response["status"]["code"].as_i64())
                .filter(|code| *code != 0),
            message: match response {
                Some(response) => normalise(response["status"]["message"].as_str().unwrap_or("")),
                None => normalise(body),
            },
            warnings: response
                .and_then(|response| response["warnings"].as_array())
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(normalise)
                .collect(),
        }
    }
}

/// One operator's side: its namespace and where its webhooks answer.
struct Side {
    namespace: TestNamespace,
    base_url: String,
}

impl Side {
    fn ns(&self) -> &str {
        self.namespace.name()
    }
}

/// Both operators, each alone in its namespace, with one HTTPS client trusting the test CA
/// both serve.
struct SideBySide {
    go: Side,
    baton: Side,
    client: reqwest::Client,
    _go_operator: GoOperator,
    _baton_webhook: WebhookReplica,
}

impl SideBySide {
    async fn start(prefix: &str) -> Self {
        let control_plane = ControlPlane::shared().await;
        crds::install(
            &control_plane.admin_client().await,
            crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
        )
        .await;
        // (the Go operator watches ReplicaTemplates: it fails to start without their CRD)
        install_replica_template_crd(control_plane).await.unwrap();
        let tls = TestTls::generate().unwrap();
        let go_namespace = TestNamespace::create(control_plane, &format!("{prefix}-go")).await;
        let baton_namespace =
            TestNamespace::create(control_plane, &format!("{prefix}-baton")).await;
        let go_operator = GoOperator::start(control_plane, &tls, go_namespace.name(), &[])
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
        let baton_webhook = WebhookReplica::start(control_plane, &tls, baton_namespace.name())
            .await
            .unwrap();
        Self {
            go: Side {
                base_url: go_operator.url(""),
                namespace: go_namespace,
            },
            baton: Side {
                base_url: baton_webhook.url(""),
                namespace: baton_namespace,
            },
            client: tls.client().unwrap(),
            _go_operator: go_operator,
            _baton_webhook: baton_webhook,
        }
    }

    fn sides(&self) -> [&Side; 2] {
        [&self.go, &self.baton]
    }

    /// Posts `body` (made for a side's namespace) to `path` of that side.
    async fn post(&self, side: &Side, path: &str, content_type: &str, body: Vec<u8>) -> Answer {
        let response = self
            .client
            .post(format!("{}{path}", side.base_url))
            .header("content-type", content_type)
            .body(body)
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap_or_else(|error| panic!("posting to {}{path}: {error}", side.base_url));
        let http = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        Answer::read(http, &body, side.ns())
    }

    /// Both sides' answers to the review `review(namespace)` at `path`.
    async fn ask(&self, path: &str, review: impl Fn(&str) -> Value) -> (Answer, Answer) {
        let [go, baton] = self.sides();
        (
            self.post(
                go,
                path,
                "application/json",
                serde_json::to_vec(&review(go.ns())).unwrap(),
            )
            .await,
            self.post(
                baton,
                path,
                "application/json",
                serde_json::to_vec(&review(baton.ns())).unwrap(),
            )
            .await,
        )
    }

    /// Creates the same StatefulSet in both namespaces.
    async fn create_statefulset(&self, fixture: &StatefulSetFixture) {
        for side in self.sides() {
            fixture.create(&side.namespace.client(), side.ns()).await;
        }
    }

    /// What the API server does once an eviction of `pod` is allowed, in both namespaces: the
    /// pod deleted; then waits until the StatefulSet controller has made it anew and it is
    /// ready.
    async fn evicted(&self, pod: &str) {
        for side in self.sides() {
            let pods = Api::<Pod>::namespaced(side.namespace.client(), side.ns());
            let old = pods.get(pod).await.unwrap().metadata.uid;
            pods.delete(pod, &DeleteParams::default()).await.unwrap();
            wait_until(TIMEOUT, &format!("{pod} is made anew, ready"), || async {
                pods.get(pod)
                    .await
                    .is_ok_and(|new| new.metadata.uid != old && PodReadiness::of(&new).ready)
            })
            .await;
        }
    }

    /// A StatefulSet as stored in `namespace`, as a review's copy carries it.
    async fn stored(&self, namespace: &str, name: &str) -> Value {
        let [go, baton] = self.sides();
        let side = if namespace == go.ns() { go } else { baton };
        let stored = Api::<StatefulSet>::namespaced(side.namespace.client(), namespace)
            .get(name)
            .await
            .unwrap_or_else(|error| panic!("reading {name} in {namespace}: {error}"));
        serde_json::to_value(stored).unwrap()
    }
}

/// What a case expects of the two answers.
enum Expect {
    /// Both answer alike: the same HTTP status, apiVersion, allowed, code and warnings, and
    /// both messages carry every one of these words (the gist: the wording is each one's own).
    Same(&'static [&'static str]),
    /// baton answers otherwise on purpose: both answers as they are (allowed and code), and
    /// why.
    Differs {
        go: (Option<bool>, Option<i64>),
        baton: (Option<bool>, Option<i64>),
        why: &'static str,
    },
}

/// The cases of one test, judged one by one; every difference is kept, and all are reported
/// at the end, with the table of what each operator answered.
#[derive(Default)]
struct Verdicts {
    table: Vec<String>,
    differences: Vec<String>,
}

impl Verdicts {
    fn judge(&mut self, case: &str, go: &Answer, baton: &Answer, expect: &Expect) {
        let (go, baton) = (
            go.as_the_api_server_reads_it(),
            baton.as_the_api_server_reads_it(),
        );
        let verdict = match expect {
            Expect::Same(gist) => {
                let mut problems = Vec::new();
                if (go.http, &go.api_version, go.allowed, go.code, &go.warnings)
                    != (
                        baton.http,
                        &baton.api_version,
                        baton.allowed,
                        baton.code,
                        &baton.warnings,
                    )
                {
                    problems.push("the answers differ".to_owned());
                }
                for word in *gist {
                    for (who, answer) in [("Go", &go), ("baton", &baton)] {
                        if !answer.message.contains(word) {
                            problems.push(format!("{who}'s message lacks {word:?}"));
                        }
                    }
                }
                if problems.is_empty() {
                    "same"
                } else {
                    self.differences.push(format!(
                        "{case}: {}\n  Go:    {go:?}\n  baton: {baton:?}",
                        problems.join(", ")
                    ));
                    "DIFFERENT"
                }
            }
            Expect::Differs {
                go: expected_go,
                baton: expected_baton,
                why,
            } => {
                if (go.allowed, go.code) != *expected_go
                    || (baton.allowed, baton.code) != *expected_baton
                {
                    self.differences.push(format!(
                        "{case}: expected Go {expected_go:?} and baton {expected_baton:?} ({why})\n  Go:    {go:?}\n  baton: {baton:?}"
                    ));
                    "CHANGED"
                } else {
                    "differs on purpose"
                }
            }
        };
        self.table.push(format!(
            "| {case} | {verdict} | {} | {} |",
            summary(&go),
            summary(&baton)
        ));
    }

    /// Prints the table and fails with every difference found.
    fn report(self, what: &str, cases: usize) {
        report(what, "cases", &self.table, &self.differences, cases);
    }
}

/// Prints a side-by-side table (one row per `what`) and fails with every difference found,
/// and unless exactly `expected` rows were judged (the lower bound of what a test promises).
fn report(what: &str, rows: &str, table: &[String], differences: &[String], expected: usize) {
    println!("| {what} | verdict | Go operator v0.38.1 | baton |");
    println!("|---|---|---|---|");
    for line in table {
        println!("{line}");
    }
    assert!(
        differences.is_empty(),
        "{} of {} {rows} differ:\n{}",
        differences.len(),
        table.len(),
        differences.join("\n")
    );
    assert_eq!(table.len(), expected, "{rows} judged");
}

impl Answer {
    /// A denial without a code is a 403 to the API server (what its client sees): the Go
    /// operator leaves it out where baton says it.
    fn as_the_api_server_reads_it(&self) -> Self {
        let mut answer = self.clone();
        if answer.allowed == Some(false) && answer.code.is_none() {
            answer.code = Some(403);
        }
        answer
    }
}

fn summary(answer: &Answer) -> String {
    let text = match answer.allowed {
        Some(true) if answer.warnings.is_empty() => "allowed".to_owned(),
        Some(true) => format!("allowed, warning {:?}", answer.warnings),
        Some(false) => format!(
            "denied{} {:?}",
            answer
                .code
                .map(|code| format!(" ({code})"))
                .unwrap_or_default(),
            answer.message
        ),
        None => format!("HTTP {} {:?}", answer.http, answer.message),
    };
    text.replace('|', "\\|")
}

const NO_DOWNSCALE_PATH: &str = "/admission/no-downscale";

/// A review, made for one side's namespace.
type ReviewFor<'a> = Box<dyn Fn(&str) -> Value + 'a>;

#[tokio::test]
async fn both_operators_answer_the_same_no_downscale_reviews_alike() {
    // Given both operators, each with a StatefulSet labelled no-downscale and one that is not
    let both = SideBySide::start("sbs-nodown").await;
    both.create_statefulset(
        &StatefulSetFixture::new("ingester-zone-a")
            .replicas(3)
            .label(NO_DOWNSCALE, "true"),
    )
    .await;
    both.create_statefulset(&StatefulSetFixture::new("ingester-zone-b").replicas(3))
        .await;
    both.create_statefulset(
        &StatefulSetFixture::new("ingester-zone-c")
            .replicas(3)
            .label(NO_DOWNSCALE, "false"),
    )
    .await;
    let mut stored = std::collections::BTreeMap::new();
    for side in both.sides() {
        for name in ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"] {
            stored.insert(
                (side.ns().to_owned(), name),
                both.stored(side.ns(), name).await,
            );
        }
    }
    let of = |namespace: &str, name: &'static str| stored[&(namespace.to_owned(), name)].clone();

    // When the same reviews go to both, then both answer alike
    let v1 = "admission.k8s.io/v1";
    let mut verdicts = Verdicts::default();
    let cases: Vec<(&str, ReviewFor, Expect)> = vec![
        (
            "a labelled StatefulSet's downscale",
            Box::new(|ns| update_review(v1, &of(ns, "ingester-zone-a"), Some(2), false)),
            Expect::Same(&[
                "statefulsets/ingester-zone-a",
                "from 3 to 2",
                "grafana.com/no-downscale",
            ]),
        ),
        (
            "the same, as a dry run",
            Box::new(|ns| update_review(v1, &of(ns, "ingester-zone-a"), Some(2), true)),
            Expect::Same(&[
                "statefulsets/ingester-zone-a",
                "from 3 to 2",
                "grafana.com/no-downscale",
            ]),
        ),
        (
            "the same, in an admission.k8s.io/v1beta1 review",
            Box::new(|ns| {
                update_review(
                    "admission.k8s.io/v1beta1",
                    &of(ns, "ingester-zone-a"),
                    Some(2),
                    false,
                )
            }),
            Expect::Same(&[
                "statefulsets/ingester-zone-a",
                "from 3 to 2",
                "grafana.com/no-downscale",
            ]),
        ),
        (
            "a labelled StatefulSet's upscale",
            Box::new(|ns| update_review(v1, &of(ns, "ingester-zone-a"), Some(4), false)),
            Expect::Same(&[]),
        ),
        (
            "a labelled StatefulSet's unchanged replicas",
            Box::new(|ns| update_review(v1, &of(ns, "ingester-zone-a"), Some(3), false)),
            Expect::Same(&[]),
        ),
        (
            "a labelled StatefulSet's downscale to 0",
            Box::new(|ns| update_review(v1, &of(ns, "ingester-zone-a"), Some(0), false)),
            Expect::Same(&[
                "statefulsets/ingester-zone-a",
                "from 3 to 0",
                "grafana.com/no-downscale",
            ]),
        ),
        (
            "a labelled StatefulSet's replicas removed (to null)",
            Box::new(|ns| update_review(v1, &of(ns, "ingester-zone-a"), None, false)),
            Expect::Same(&[]),
        ),
        (
            "an unlabelled StatefulSet's downscale",
            Box::new(|ns| update_review(v1, &of(ns, "ingester-zone-b"), Some(2), false)),
            Expect::Same(&[]),
        ),
        (
            "a StatefulSet labelled no-downscale=false, downscaled",
            Box::new(|ns| update_review(v1, &of(ns, "ingester-zone-c"), Some(2), false)),
            Expect::Same(&[]),
        ),
        (
            "a labelled StatefulSet's /scale downscale (its parent looked up)",
            Box::new(|ns| scale_review(ns, "ingester-zone-a", 3, 2)),
            Expect::Same(&[
                "statefulsets/ingester-zone-a",
                "from 3 to 2",
                "grafana.com/no-downscale",
            ]),
        ),
        (
            "an unlabelled StatefulSet's /scale downscale",
            Box::new(|ns| scale_review(ns, "ingester-zone-b", 3, 2)),
            Expect::Same(&[]),
        ),
        (
            "a /scale downscale of a StatefulSet that does not exist",
            Box::new(|ns| scale_review(ns, "ingester-zone-x", 3, 2)),
            Expect::Differs {
                go: (Some(true), None),
                baton: (Some(false), Some(403)),
                why: "a change that cannot be judged (here: its parent cannot be read) is refused by default \
 (webhook.allow_on_error: false, as failurePolicy: Fail asks); the Go operator allows it with a warning",
            },
        ),
    ];
    for (case, review, expect) in &cases {
        let (go, baton) = both.ask(NO_DOWNSCALE_PATH, review).await;
        verdicts.judge(case, &go, &baton, expect);
    }

    // And bad input is answered alike too
    let bad_bodies: Vec<(&str, &str, Vec<u8>, Expect)> = vec![
        (
            "a body that is not JSON",
            "application/json",
            b"{not json".to_vec(),
            Expect::Same(&[]),
        ),
        (
            "JSON that is not an AdmissionReview",
            "application/json",
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod"})).unwrap(),
            Expect::Same(&[]),
        ),
        (
            "an AdmissionReview sent as text/plain",
            "text/plain",
            serde_json::to_vec(&update_review(
                v1,
                &of(both.baton.ns(), "ingester-zone-a"),
                Some(2),
                false,
            ))
            .unwrap(),
            Expect::Same(&[]),
        ),
    ];
    for (case, content_type, body, expect) in bad_bodies {
        let go = both
            .post(&both.go, NO_DOWNSCALE_PATH, content_type, body.clone())
            .await;
        let baton = both
            .post(&both.baton, NO_DOWNSCALE_PATH, content_type, body)
            .await;
        verdicts.judge(case, &go, &baton, &expect);
    }
    verdicts.report("no-downscale review", cases.len() + 3);
}

const EVICTION_PATH: &str = "/admission/pod-eviction";
const VALIDATION_PATH: &str = "/admission/zpdb-validation";

/// A CREATE review of a ZoneAwarePodDisruptionBudget with `spec`, as the API server sends it to
/// `/admission/zpdb-validation`.
fn budget_review(namespace: &str, spec: Value) -> Value {
    let mut object = serde_json::to_value(budget("ingester", spec)).unwrap();
    object["metadata"]["namespace"] = json!(namespace);
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "side-by-side",
            "kind": {"group": "rollout-operator.grafana.com", "version": "v1",
                     "kind": "ZoneAwarePodDisruptionBudget"},
            "resource": {"group": "rollout-operator.grafana.com", "version": "v1",
                         "resource": "zoneawarepoddisruptionbudgets"},
            "name": "ingester",
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": object,
            "dryRun": false,
        }
    })
}

#[tokio::test]
async fn both_operators_judge_the_same_budgets_alike() {
    // Given both operators
    let both = SideBySide::start("sbs-zpdbval").await;
    let selector = json!({"matchLabels": {"rollout-group": "ingester"}});
    let with_selector = |mut spec: Value| {
        spec["selector"] = selector.clone();
        spec
    };
    // When the same budgets are submitted to both, then both judge them alike
    let cases: Vec<(&str, Value, Expect)> = vec![
        (
            "maxUnavailable 1",
            with_selector(json!({"maxUnavailable": 1})),
            Expect::Same(&[]),
        ),
        (
            "maxUnavailable 0",
            with_selector(json!({"maxUnavailable": 0})),
            Expect::Same(&[]),
        ),
        (
            "maxUnavailable -1",
            with_selector(json!({"maxUnavailable": -1})),
            Expect::Same(&["-1"]),
        ),
        (
            "maxUnavailablePercentage 50",
            with_selector(json!({"maxUnavailablePercentage": 50})),
            Expect::Same(&[]),
        ),
        (
            "maxUnavailablePercentage 101",
            with_selector(json!({"maxUnavailablePercentage": 101})),
            Expect::Same(&["101"]),
        ),
        (
            "both maxUnavailable and maxUnavailablePercentage",
            with_selector(json!({"maxUnavailable": 1, "maxUnavailablePercentage": 50})),
            Expect::Same(&["maxUnavailable", "maxUnavailablePercentage"]),
        ),
        (
            "no selector",
            json!({"maxUnavailable": 1}),
            Expect::Same(&["selector"]),
        ),
        (
            "a partition regex",
            with_selector(json!({"maxUnavailable": 1,
                "podNamePartitionRegex": "[a-z\\-]+-zone-[a-z]-([0-9]+)"})),
            Expect::Same(&[]),
        ),
        (
            "a partition regex that does not compile",
            with_selector(json!({"maxUnavailable": 1, "podNamePartitionRegex": "(["})),
            Expect::Same(&["egex"]),
        ),
        (
            "a partition regex without the group it names",
            with_selector(json!({"maxUnavailable": 1,
                "podNamePartitionRegex": "[a-z\\-]+-zone-[a-z]-[0-9]+", "podNameRegexGroup": 1})),
            Expect::Same(&["egex"]),
        ),
        (
            "crossZoneEvictionDelay 10s",
            with_selector(json!({"maxUnavailable": 1, "crossZoneEvictionDelay": "10s"})),
            Expect::Same(&["crossZoneEvictionDelay", "podNamePartitionRegex"]),
        ),
        (
            "crossZoneEvictionDelay that is not a duration",
            with_selector(json!({"maxUnavailable": 1, "crossZoneEvictionDelay": "soon"})),
            Expect::Same(&["crossZoneEvictionDelay", "soon"]),
        ),
        (
            "an unknown field",
            with_selector(json!({"maxUnavailable": 1, "maxSurge": 3})),
            Expect::Same(&[]),
        ),
    ];
    let mut verdicts = Verdicts::default();
    for (case, spec, expect) in &cases {
        let (go, baton) = both
            .ask(VALIDATION_PATH, |ns| budget_review(ns, spec.clone()))
            .await;
        verdicts.judge(case, &go, &baton, expect);
    }
    verdicts.report("budget", cases.len());
}

#[tokio::test]
async fn both_operators_judge_the_same_evictions_alike() {
    // Given both operators, each with a three-zone group of two ready pods per zone and a
    // budget of one unavailable pod selecting it
    let both = SideBySide::start("sbs-evict").await;
    let mut simulators = Vec::new();
    for side in both.sides() {
        simulators.push(PodSimulator::for_namespace(&side.namespace).await);
    }
    for zone in ["a", "b", "c"] {
        both.create_statefulset(
            &StatefulSetFixture::new(&format!("ingester-zone-{zone}"))
                .group("ingester")
                .pod_label("rollout-group", "ingester")
                .replicas(2),
        )
        .await;
    }
    both.create_statefulset(&StatefulSetFixture::new("lonely").replicas(1))
        .await;
    for side in both.sides() {
        wait_group_ready(
            &side.namespace.client(),
            side.ns(),
            &[
                "ingester-zone-a",
                "ingester-zone-b",
                "ingester-zone-c",
                "lonely",
            ],
        )
        .await;
        Api::<DynamicObject>::namespaced_with(side.namespace.client(), side.ns(), &zpdb_resource())
            .create(
                &PostParams::default(),
                &budget(
                    "ingester",
                    json!({"maxUnavailable": 1,
                           "selector": {"matchLabels": {"rollout-group": "ingester"}}}),
                ),
            )
            .await
            .unwrap();
    }
    let [go_simulator, baton_simulator] = [&simulators[0], &simulators[1]];
    let evict = |pod: &'static str| move |ns: &str| eviction_review(ns, pod, "side-by-side", false);
    let dry_run =
        |pod: &'static str| move |ns: &str| eviction_review(ns, pod, "side-by-side-dry", true);
    let mut verdicts = Verdicts::default();

    // When a pod of zone b is not ready (and both have read the budget: both refuse zone a's)
    go_simulator.hold_not_ready("ingester-zone-b-1").await;
    baton_simulator.hold_not_ready("ingester-zone-b-1").await;
    wait_until(
        TIMEOUT,
        "both operators refuse an eviction in zone a",
        || async {
            let (go, baton) = both.ask(EVICTION_PATH, evict("ingester-zone-a-0")).await;
            go.allowed == Some(false) && baton.allowed == Some(false)
        },
    )
    .await;
    // Then both judge these evictions alike
    let while_b_is_down: Vec<(&str, &'static str, Expect)> = vec![
        (
            "a pod of another zone than the not-ready one",
            "ingester-zone-a-0",
            Expect::Same(&["ingester-zone-b"]),
        ),
        (
            "the other pod of the not-ready pod's zone (its max reached)",
            "ingester-zone-b-0",
            Expect::Same(&["ingester-zone-b"]),
        ),
        ("a pod outside every budget", "lonely-0", Expect::Same(&[])),
        (
            "a pod that does not exist",
            "ingester-zone-a-9",
            Expect::Differs {
                go: (Some(false), Some(400)),
                baton: (Some(true), None),
                why: "nothing to protect: the API server then answers the eviction 404 Not Found, as without a webhook",
            },
        ),
    ];
    for (case, pod, expect) in &while_b_is_down {
        let (go, baton) = both.ask(EVICTION_PATH, evict(pod)).await;
        verdicts.judge(case, &go, &baton, expect);
    }
    let (go, baton) = both
        .ask(EVICTION_PATH, |ns| {
            let mut review = eviction_review(ns, "ingester-zone-a-0", "side-by-side", false);
            review["request"]["operation"] = json!("UPDATE");
            review
        })
        .await;
    verdicts.judge(
        "an UPDATE instead of a CREATE",
        &go,
        &baton,
        &Expect::Differs {
            go: (Some(false), Some(400)),
            baton: (Some(true), None),
            why: "not an eviction: baton judges only what its webhook configuration registers (CREATE of \
                  pods/eviction) and lets anything else through, where the Go operator refuses it",
        },
    );
    // And the not-ready pod itself may go (it disrupts nothing more); the API server then
    // deletes it, and the StatefulSet controller makes it anew, ready
    let (go, baton) = both.ask(EVICTION_PATH, evict("ingester-zone-b-1")).await;
    verdicts.judge("the not-ready pod itself", &go, &baton, &Expect::Same(&[]));
    go_simulator.release("ingester-zone-b-1").await;
    baton_simulator.release("ingester-zone-b-1").await;
    both.evicted("ingester-zone-b-1").await;

    // When every zone is ready again, then zone a's pod may go in both (baton's watch caches
    // have it once its dry runs are allowed; a dry run has side effects in the Go operator, so
    // it is not asked one)
    wait_until(TIMEOUT, "baton allows a dry run in zone a", || async {
        let body = serde_json::to_vec(&dry_run("ingester-zone-a-0")(both.baton.ns())).unwrap();
        both.post(&both.baton, EVICTION_PATH, "application/json", body)
            .await
            .allowed
            == Some(true)
    })
    .await;
    let (go, baton) = both.ask(EVICTION_PATH, evict("ingester-zone-a-0")).await;
    verdicts.judge(
        "a pod of zone a, every zone ready",
        &go,
        &baton,
        &Expect::Same(&[]),
    );
    // And right after, before the API server has deleted it, a pod of zone c is refused by both
    let (go, baton) = both.ask(EVICTION_PATH, evict("ingester-zone-c-0")).await;
    verdicts.judge(
        "a pod of zone c right after zone a's was allowed",
        &go,
        &baton,
        &Expect::Same(&["ingester-zone-a"]),
    );
    both.evicted("ingester-zone-a-0").await;

    // When a dry run of zone a's eviction is allowed by both, every zone ready
    wait_until(
        TIMEOUT,
        "baton allows a dry run in zone a again",
        || async {
            let body = serde_json::to_vec(&dry_run("ingester-zone-a-1")(both.baton.ns())).unwrap();
            both.post(&both.baton, EVICTION_PATH, "application/json", body)
                .await
                .allowed
                == Some(true)
        },
    )
    .await;
    let (go, baton) = both.ask(EVICTION_PATH, dry_run("ingester-zone-a-1")).await;
    verdicts.judge("a dry run of zone a's pod", &go, &baton, &Expect::Same(&[]));
    // Then a pod of zone c: the Go operator remembers the dry run as an eviction
    let (go, baton) = both.ask(EVICTION_PATH, evict("ingester-zone-c-0")).await;
    verdicts.judge(
        "a pod of zone c right after a dry run of zone a's",
        &go,
        &baton,
        &Expect::Differs {
            go: (Some(false), Some(429)),
            baton: (Some(true), None),
            why: "the Go operator counts an allowed dry run as an eviction (its in-memory cache of \
                  evicted pods keeps it up to 2 minutes); baton's dry runs have no side effect",
        },
    );
    verdicts.report("eviction", while_b_is_down.len() + 6);
}

/// The Go operator's side of a rollout scenario: its namespace, the pod simulator under it and
/// the operator controlling it.
struct GoScene {
    namespace: TestNamespace,
    simulator: PodSimulator,
    operator: GoOperator,
}

impl GoScene {
    async fn start(prefix: &str) -> Self {
        let control_plane = ControlPlane::shared().await;
        install_replica_template_crd(control_plane).await.unwrap();
        crds::install(
            &control_plane.admin_client().await,
            crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
        )
        .await;
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let tls = TestTls::generate().unwrap();
        let operator = GoOperator::start(control_plane, &tls, namespace.name(), &[])
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
        Self {
            namespace,
            simulator,
            operator,
        }
    }
}

/// What one operator's rollout looked like on the timeline, from the template change on.
#[derive(Debug, PartialEq, Eq)]
struct Rolled {
    /// The zones in the order their first pod left.
    zone_order: Vec<String>,
    /// Per zone, its pods in the order they left (each once).
    pods_left: BTreeMap<String, Vec<String>>,
    /// Per zone, the most of its pods unavailable at once.
    most_unavailable: BTreeMap<String, u32>,
}

/// Reads `timeline` since `from` for `zones`, after checking the zone-by-zone guarantees held.
fn rolled(who: &str, timeline: &[PodTransition], zones: &[Zone], from: Instant) -> Rolled {
    check_rollout_guarantees(timeline, zones, from)
        .unwrap_or_else(|broken| panic!("{who} broke the zone rule: {broken}"));
    let windows = zone_windows(timeline, zones, from);
    let mut zone_order: Vec<(Instant, String)> = windows
        .iter()
        .map(|(zone, window)| {
            (
                window
                    .started
                    .unwrap_or_else(|| panic!("{who}: {zone} never started")),
                zone.clone(),
            )
        })
        .collect();
    zone_order.sort();
    Rolled {
        zone_order: zone_order.into_iter().map(|(_, zone)| zone).collect(),
        pods_left: pods_left(timeline, from),
        most_unavailable: zones
            .iter()
            .map(|zone| {
                (
                    zone.statefulset.clone(),
                    most_unavailable(timeline, zone, from),
                )
            })
            .collect(),
    }
}

/// The time from each pod turning Ready to the next pod of the group leaving, over the
/// rollout: how fast an operator reacts (mean, and the longest).
fn reaction(timeline: &[PodTransition], from: Instant) -> (Duration, Duration) {
    let mut last_ready: Option<Instant> = None;
    let mut gaps = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for transition in timeline.iter().filter(|transition| transition.at >= from) {
        match transition.event {
            PodEvent::Ready => last_ready = Some(transition.at),
            PodEvent::Terminating | PodEvent::Deleted if seen.insert(transition.uid.clone()) => {
                if let Some(ready) = last_ready.take() {
                    gaps.push(transition.at - ready);
                }
            }
            _ => {}
        }
    }
    let total: Duration = gaps.iter().sum();
    (
        total / gaps.len().max(1) as u32,
        gaps.into_iter().max().unwrap_or_default(),
    )
}

/// Given the same group in both namespaces (3 zones of `replicas` pods, `max_unavailable`),
/// when the template of every zone changes at once in both, then both roll zone by zone with
/// the same zone order, the same pods in each zone, and as many of a zone's pods unavailable
/// at once.
async fn both_roll_alike(prefix: &str, replicas: i32, max_unavailable: &str, batch: usize) {
    let (go_prefix, baton_prefix) = (format!("{prefix}-go"), format!("{prefix}-baton"));
    let (go, baton) = tokio::join!(GoScene::start(&go_prefix), Scene::start(&baton_prefix));
    let go_client = go.namespace.client();
    let fixtures: Vec<_> = rollout_group("ingester", &["a", "b", "c"], replicas)
        .into_iter()
        .map(|fixture| fixture.annotation("rollout-max-unavailable", max_unavailable))
        .collect();
    let names = baton.create(&fixtures).await;
    for fixture in &fixtures {
        fixture.create(&go_client, go.namespace.name()).await;
    }
    wait_group_ready(&go_client, go.namespace.name(), &names).await;

    let from = Instant::now();
    tokio::join!(
        roll_out(&go_client, go.namespace.name(), &names, "v2"),
        baton.roll_out(&names, "v2")
    );
    tokio::join!(
        wait_rollout_complete(&go_client, go.namespace.name(), &names),
        baton.wait_complete(&names)
    );
    let done = Instant::now();

    let zones: Vec<Zone> = names
        .iter()
        .map(|name| Zone::new(name, replicas as u32, batch as u32))
        .collect();
    let go_timeline = go.simulator.timeline();
    let baton_timeline = baton.timeline();
    let go_rolled = rolled("the Go operator", &go_timeline, &zones, from);
    let baton_rolled = rolled("baton", &baton_timeline, &zones, from);
    // (what the scenario promises of each: zones a, b, c in turn, `batch` pods down at most,
    // and at least: the allowance was used)
    assert_eq!(baton_rolled.zone_order, names, "baton's zone order");
    for name in &names {
        assert_eq!(
            baton_rolled.most_unavailable[name], batch as u32,
            "the most pods of {name} baton had unavailable at once"
        );
    }
    assert_eq!(
        go_rolled, baton_rolled,
        "the Go operator (left) and baton (right) rolled otherwise"
    );
    let (go_mean, go_longest) = reaction(&go_timeline, from);
    let (baton_mean, baton_longest) = reaction(&baton_timeline, from);
    println!(
        "{prefix}: 3 zones x {replicas} pods, max-unavailable {max_unavailable}: both complete in {:.1?}; \
         pod Ready to the next deletion: Go operator mean {go_mean:.2?} (longest {go_longest:.2?}), \
         baton mean {baton_mean:.2?} (longest {baton_longest:.2?})",
        done - from
    );
}

#[tokio::test]
async fn both_operators_roll_a_group_with_max_unavailable_1_alike() {
    both_roll_alike("sbs-mu1", 2, "1", 1).await;
}

#[tokio::test]
async fn both_operators_roll_a_group_with_max_unavailable_2_alike() {
    both_roll_alike("sbs-mu2", 4, "2", 2).await;
}

#[tokio::test]
async fn both_operators_roll_a_group_with_max_unavailable_25_percent_alike() {
    // (25 % of 8 pods: 2 at a time)
    both_roll_alike("sbs-mu25", 8, "25%", 2).await;
}

#[tokio::test]
async fn both_operators_hold_zone_a_while_a_pod_of_zone_b_is_not_ready() {
    // Given the same group in both namespaces, a pod of zone b not ready
    let (go, baton) = tokio::join!(
        GoScene::start("sbs-held-go"),
        Scene::start("sbs-held-baton")
    );
    let go_client = go.namespace.client();
    let fixtures = rollout_group("ingester", &["a", "b", "c"], 2);
    let names = baton.create(&fixtures).await;
    for fixture in &fixtures {
        fixture.create(&go_client, go.namespace.name()).await;
    }
    wait_group_ready(&go_client, go.namespace.name(), &names).await;
    go.simulator.hold_not_ready("ingester-zone-b-1").await;
    baton.simulator.hold_not_ready("ingester-zone-b-1").await;

    // When the template of every zone changes, and both have looked at the group since
    let from = Instant::now();
    tokio::join!(
        roll_out(&go_client, go.namespace.name(), &names, "v2"),
        baton.roll_out(&names, "v2")
    );
    wait_until(
        TIMEOUT,
        "the Go operator saw zone b's pods to update and its max-unavailable reached",
        || async {
            go.operator.process.output().contains(
                "StatefulSet has some pods to be updated but maxUnavailable pods has been reached\" statefulset=ingester-zone-b",
            )
        },
    )
    .await;
    wait_until(TIMEOUT, "baton says the group waits", || async {
        baton
            .controller
            .metric("baton_rollout_group_waiting{rollout_group=\"ingester\"}")
            .await
            == Some(1.0)
    })
    .await;

    // Then neither deletes a pod of zone a or c. The Go operator deletes nothing; baton replaces
    // zone b's not-ready pod of the old revision at once (it costs no availability: it is down
    // already, and its replacement is too), where the Go operator waits for it
    wait_until(TIMEOUT, "baton replaces zone b's not-ready pod", || async {
        pods_left(&baton.timeline(), from).contains_key("ingester-zone-b")
    })
    .await;
    assert_eq!(
        pods_left(&go.simulator.timeline(), from),
        BTreeMap::new(),
        "the Go operator deleted pods while zone b was not ready"
    );
    assert_eq!(
        pods_left(&baton.timeline(), from),
        BTreeMap::from([(
            "ingester-zone-b".to_owned(),
            vec!["ingester-zone-b-1".to_owned()]
        )]),
        "baton deleted other pods than zone b's not-ready one while it was not ready"
    );

    // And once zone b's pod is ready again, both roll the group in the same zone order, keeping
    // the zone rule, and replace the same pods in all
    let released = Instant::now();
    go.simulator.release("ingester-zone-b-1").await;
    baton.simulator.release("ingester-zone-b-1").await;
    tokio::join!(
        wait_rollout_complete(&go_client, go.namespace.name(), &names),
        baton.wait_complete(&names)
    );
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    let go_timeline = go.simulator.timeline();
    let baton_timeline = baton.timeline();
    let go_rolled = rolled("the Go operator", &go_timeline, &zones, released);
    let baton_rolled = rolled("baton", &baton_timeline, &zones, released);
    println!(
        "after zone b's pod was ready again: the Go operator rolled {:?}, baton {:?}",
        go_rolled.pods_left, baton_rolled.pods_left
    );
    assert_eq!(
        go_rolled.zone_order, baton_rolled.zone_order,
        "the zone order of the Go operator (left) and baton (right)"
    );
    let replaced =
        |timeline: &[PodTransition]| -> BTreeMap<String, std::collections::BTreeSet<String>> {
            pods_left(timeline, from)
                .into_iter()
                .map(|(zone, pods)| (zone, pods.into_iter().collect()))
                .collect()
        };
    assert_eq!(
        replaced(&go_timeline),
        replaced(&baton_timeline),
        "the pods the Go operator (left) and baton (right) replaced"
    );
    assert_eq!(
        replaced(&baton_timeline)
            .values()
            .map(|pods| pods.len())
            .sum::<usize>(),
        6,
        "every pod replaced once"
    );
}

/// Per zone, its pods in the order they left (terminating, or deleted) since `from`, each once.
fn pods_left(timeline: &[PodTransition], from: Instant) -> BTreeMap<String, Vec<String>> {
    let mut left: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for transition in timeline.iter().filter(|transition| transition.at >= from) {
        let leaving = matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted);
        if let Some(zone) = &transition.statefulset
            && leaving
            && seen.insert(transition.uid.clone())
        {
            left.entry(zone.clone())
                .or_default()
                .push(transition.pod.clone());
        }
    }
    left
}

/// Waits until zone a's rollout is complete and a pod of zone b has left: a rollout midway.
async fn wait_midway(simulator: &PodSimulator, from: Instant) {
    wait_until(
        Duration::from_secs(120),
        "the rollout reached zone b",
        || async { pods_left(&simulator.timeline(), from).contains_key("ingester-zone-b") },
    )
    .await;
}

/// Then, across both operators: the rollout completed, the zone rule held throughout, and
/// every pod was replaced once (none at the new revision deleted again).
async fn check_finished_once(scene: &Scene, names: &[String], from: Instant) {
    scene.wait_complete(names).await;
    let timeline = scene.timeline();
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    check_rollout_guarantees(&timeline, &zones, from)
        .unwrap_or_else(|broken| panic!("the zone rule broke across the switch: {broken}"));
    let left = pods_left(&timeline, from);
    for name in names {
        assert_eq!(
            left.get(name).map(Vec::len),
            Some(2),
            "each of {name}'s two pods replaced once: {left:?}"
        );
    }
}

#[tokio::test]
async fn switching_from_the_go_operator_to_baton_mid_rollout_finishes_it_keeping_the_zone_rule() {
    // Given a group rolled out by the Go operator, midway (zone a done, zone b started)
    let control_plane = ControlPlane::shared().await;
    let go = GoScene::start("sbs-switch-in").await;
    let client = go.namespace.client();
    let names = create_ready_group(&client, go.namespace.name(), &["a", "b", "c"], 2).await;
    let from = Instant::now();
    roll_out(&client, go.namespace.name(), &names, "v2").await;
    wait_midway(&go.simulator, from).await;

    // When the Go operator stops and baton starts, with nothing else changed
    let GoScene {
        namespace,
        simulator,
        operator,
    } = go;
    operator.stop(TIMEOUT).await.unwrap();
    let controller = Controller::start(control_plane, namespace.name(), &[]).await;
    let scene = Scene {
        control_plane,
        namespace,
        simulator,
        controller,
    };

    // Then baton finishes the rollout: the zone rule held across the switch, each pod once
    check_finished_once(&scene, &names, from).await;
}

#[tokio::test]
async fn switching_back_from_baton_to_the_go_operator_mid_rollout_finishes_it_keeping_the_zone_rule()
 {
    // Given a group rolled out by baton, midway (zone a done, zone b started)
    let control_plane = ControlPlane::shared().await;
    install_replica_template_crd(control_plane).await.unwrap();
    crds::install(
        &control_plane.admin_client().await,
        crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
    )
    .await;
    let scene = Scene::start("sbs-switch-back").await;
    let fixtures = rollout_group("ingester", &["a", "b", "c"], 2);
    let names = scene.create(&fixtures).await;
    let from = Instant::now();
    scene.roll_out(&names, "v2").await;
    wait_midway(&scene.simulator, from).await;

    // When baton stops and the Go operator starts, with nothing else changed
    let Scene {
        control_plane,
        namespace,
        simulator,
        mut controller,
    } = scene;
    controller.process.signal("TERM").unwrap();
    tokio::time::timeout(TIMEOUT, controller.process.wait())
        .await
        .expect("baton-controller exits after SIGTERM")
        .unwrap();
    let tls = TestTls::generate().unwrap();
    let operator = GoOperator::start(control_plane, &tls, namespace.name(), &[])
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));

    // Then the Go operator finishes the rollout: the zone rule held across the switch, each
    // pod once
    let client = namespace.client();
    wait_rollout_complete(&client, namespace.name(), &names).await;
    let timeline = simulator.timeline();
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    check_rollout_guarantees(&timeline, &zones, from)
        .unwrap_or_else(|broken| panic!("the zone rule broke across the switch: {broken}"));
    let left = pods_left(&timeline, from);
    for name in &names {
        assert_eq!(
            left.get(name).map(Vec::len),
            Some(2),
            "each of {name}'s two pods replaced once: {left:?}"
        );
    }
    drop(operator);
}

/// `spec.replicas` of StatefulSet `name` in `namespace`.
async fn spec_replicas(client: &kube::Client, namespace: &str, name: &str) -> i32 {
    Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .unwrap_or_else(|error| panic!("reading {name}: {error}"))
        .spec
        .and_then(|spec| spec.replicas)
        .unwrap_or(1)
}

#[tokio::test]
async fn both_operators_mirror_a_reference_resource_and_follow_a_leader_zone_alike() {
    // Given in both namespaces a ReplicaTemplate of 2, zone a mirroring it and zone b following
    // zone a
    let (go, baton) = tokio::join!(
        GoScene::start("sbs-mirror-go"),
        Scene::start_with(
            "sbs-mirror-baton",
            &[("BATON_CONTROLLER__SCALING_POLL_INTERVAL", "1s")]
        )
    );
    let sides = [
        (
            "the Go operator",
            go.namespace.client(),
            go.namespace.name(),
        ),
        ("baton", baton.client(), baton.name()),
    ];
    for (_, client, namespace) in &sides {
        ReplicaTemplates::new(client.clone(), namespace)
            .create("ingester", 2)
            .await;
        StatefulSetFixture::new("ingester-zone-a")
            .group("ingester")
            .replicas(2)
            .annotation(MIRROR_NAME, "ingester")
            .annotation(MIRROR_KIND, REPLICA_TEMPLATE_KIND)
            .annotation(MIRROR_API_VERSION, REPLICA_TEMPLATE_API_VERSION)
            .create(client, namespace)
            .await;
        StatefulSetFixture::new("ingester-zone-b")
            .group("ingester")
            .replicas(2)
            .annotation(DOWNSCALE_LEADER, "ingester-zone-a")
            .create(client, namespace)
            .await;
    }

    // When an autoscaler scales the template to 4, then to 1, then both scale zone a to what
    // it wants, write it back to the template's status, and zone b follows zone a
    for wanted in [4, 1] {
        for (who, client, namespace) in &sides {
            let templates = ReplicaTemplates::new(client.clone(), namespace);
            templates.scale("ingester", wanted).await;
            for zone in ["ingester-zone-a", "ingester-zone-b"] {
                wait_until(
                    Duration::from_secs(90),
                    &format!("{who}: {zone} has {wanted} replicas"),
                    || async { spec_replicas(client, namespace, zone).await == wanted },
                )
                .await;
            }
            wait_until(
                TIMEOUT,
                &format!("{who}: the template's status says {wanted}"),
                || async { templates.status_replicas("ingester").await == Some(wanted) },
            )
            .await;
        }
    }
}

// Downscales: prepare-downscale through the API server, delayed downscale from a reference
// resource, and switching operators in the middle of both.

/// Who guards and carries out downscales in a [`DownscaleScene`].
enum Operator {
    Go(GoOperator),
    Baton {
        controller: Controller,
        webhook: Box<WebhookReplica>,
    },
}

/// A namespace where one operator guards and carries out downscales: its pods simulated, an
/// endpoint on every pod named in [`DOWNSCALE_PODS`] (on the pod's IP, where baton calls it and
/// where the Go operator's calls by DNS name arrive through its pod proxy), and that operator's
/// webhooks registered for the namespace by the API server.
struct DownscaleScene {
    namespace: TestNamespace,
    simulator: PodSimulator,
    tls: TestTls,
    port: u16,
    endpoints: BTreeMap<String, PodEndpoint>,
    operator: Operator,
    _configurations: WebhookConfigurations,
}

/// The pods the downscale scenarios call: a group of three zones opted in to prepare-downscale,
/// and one StatefulSet with a delayed downscale.
const DOWNSCALE_PODS: &[&str] = &[
    "ingester-zone-a-0",
    "ingester-zone-a-1",
    "ingester-zone-a-2",
    "ingester-zone-b-0",
    "ingester-zone-b-1",
    "ingester-zone-b-2",
    "ingester-zone-c-0",
    "ingester-zone-c-1",
    "ingester-zone-c-2",
    "delayed-zone-a-0",
    "delayed-zone-a-1",
    "delayed-zone-a-2",
];

/// baton as the downscale scenarios run it: pods called by IP, scaling looked at every 300 ms.
const BATON_SCALING: &[(&str, &str)] = &[
    ("BATON_PODS__ADDRESS_BY", "ip"),
    ("BATON_CONTROLLER__SCALING_POLL_INTERVAL", "300ms"),
];

impl DownscaleScene {
    /// A namespace `<prefix>-…` with its pods' endpoints, run by the Go operator (with
    /// `go_flags`) or by baton.
    async fn start(prefix: &str, go: Option<&[&str]>) -> Self {
        let control_plane = ControlPlane::shared().await;
        // (the Go operator does not start without both CRDs)
        install_replica_template_crd(control_plane).await.unwrap();
        crds::install(
            &control_plane.admin_client().await,
            crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
        )
        .await;
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let tls = TestTls::generate().unwrap();
        let port = free_port().unwrap();
        let endpoints = endpoints_on_pods(&simulator, DOWNSCALE_PODS, port).await;
        let (operator, base) = match go {
            Some(flags) => Self::go(&namespace, &simulator, &tls, flags).await,
            None => Self::baton(&namespace, &tls).await,
        };
        let configurations =
            WebhookConfigurations::register_at(control_plane, namespace.name(), &tls, &base)
                .await
                .unwrap();
        Self {
            namespace,
            simulator,
            tls,
            port,
            endpoints,
            operator,
            _configurations: configurations,
        }
    }

    /// The Go operator for `namespace`, calling its pods; and where its webhooks answer.
    async fn go(
        namespace: &TestNamespace,
        simulator: &PodSimulator,
        tls: &TestTls,
        flags: &[&str],
    ) -> (Operator, String) {
        let operator = GoOperator::start_calling_pods(
            ControlPlane::shared().await,
            tls,
            namespace.name(),
            flags,
            simulator.pod_addresses(),
        )
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
        let base = operator.url("");
        (Operator::Go(operator), base)
    }

    /// baton's controller and webhook for `namespace`; and where its webhooks answer.
    async fn baton(namespace: &TestNamespace, tls: &TestTls) -> (Operator, String) {
        let control_plane = ControlPlane::shared().await;
        let controller = Controller::start(control_plane, namespace.name(), BATON_SCALING).await;
        let webhook = WebhookReplica::start(control_plane, tls, namespace.name())
            .await
            .unwrap();
        let base = webhook.url("");
        let webhook = Box::new(webhook);
        (
            Operator::Baton {
                controller,
                webhook,
            },
            base,
        )
    }

    fn who(&self) -> &'static str {
        match self.operator {
            Operator::Go(_) => "the Go operator",
            Operator::Baton { .. } => "baton",
        }
    }

    /// The operator stopped as Kubernetes stops a pod (SIGTERM), the other one started in its
    /// place (the Go operator with `go_flags`), the same webhook configurations calling it: what
    /// a switch of Deployments behind the same Service does.
    async fn switch(self, go_flags: &[&str]) -> Self {
        let Self {
            namespace,
            simulator,
            tls,
            port,
            endpoints,
            operator,
            _configurations: configurations,
        } = self;
        let next = match operator {
            Operator::Go(operator) => {
                operator.stop(TIMEOUT).await.unwrap();
                None
            }
            Operator::Baton {
                mut controller,
                webhook,
            } => {
                controller.process.signal("TERM").unwrap();
                tokio::time::timeout(TIMEOUT, controller.process.wait())
                    .await
                    .expect("baton-controller exits after SIGTERM")
                    .unwrap();
                drop(webhook);
                Some(go_flags)
            }
        };
        let (operator, base) = match next {
            Some(flags) => Self::go(&namespace, &simulator, &tls, flags).await,
            None => Self::baton(&namespace, &tls).await,
        };
        configurations
            .repoint(ControlPlane::shared().await, &base)
            .await
            .unwrap();
        let scene = Self {
            namespace,
            simulator,
            tls,
            port,
            endpoints,
            operator,
            _configurations: configurations,
        };
        // (the probe of create_prepared_group, opted in without a port: a judgement, not a
        // failed call to the operator gone)
        wait_until(
            TIMEOUT,
            &format!("{} judges downscales", scene.who()),
            || async {
                scene
                    .scale("probe-prepare", 0)
                    .await
                    .is_err_and(|denial| denial.contains(PREPARE_DOWNSCALE_PORT))
            },
        )
        .await;
        scene
    }

    fn statefulsets(&self) -> Api<StatefulSet> {
        self.namespace.api()
    }

    /// Creates zones a, b and c of group `ingester` (3 replicas each), opted in to
    /// prepare-downscale on this scene's port, waiting `min_time` between zone downscales, and
    /// waits until they are ready and the webhooks are called.
    async fn create_prepared_group(&self, min_time: &str) {
        let client = self.namespace.client();
        for zone in ["a", "b", "c"] {
            StatefulSetFixture::new(&format!("ingester-zone-{zone}"))
                .group("ingester")
                .replicas(3)
                .label(MIN_TIME_BETWEEN_ZONES_DOWNSCALE, min_time)
                .label(PREPARE_DOWNSCALE, "true")
                .annotation(PREPARE_DOWNSCALE_PATH, "ingester/prepare-shutdown")
                .annotation(PREPARE_DOWNSCALE_PORT, &self.port.to_string())
                .create(&client, self.namespace.name())
                .await;
        }
        wait_for_webhooks(&self.namespace).await;
        self.wait_ready(&["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"])
            .await;
    }

    /// Creates `delayed-zone-a` mirroring ReplicaTemplate `delayed` (3 replicas), its downscales
    /// delayed by `delay` and prepared on this scene's port; waits until it is ready.
    async fn create_delayed(&self, delay: &str) {
        let client = self.namespace.client();
        ReplicaTemplates::new(client.clone(), self.namespace.name())
            .create("delayed", 3)
            .await;
        StatefulSetFixture::new("delayed-zone-a")
            .group("delayed")
            .replicas(3)
            .annotation(MIRROR_NAME, "delayed")
            .annotation(MIRROR_KIND, REPLICA_TEMPLATE_KIND)
            .annotation(MIRROR_API_VERSION, REPLICA_TEMPLATE_API_VERSION)
            .annotation(DELAYED_DOWNSCALE, delay)
            .annotation(
                DELAYED_DOWNSCALE_URL,
                &format!("http://pod:{}/prepare-delayed-downscale", self.port),
            )
            .create(&client, self.namespace.name())
            .await;
        self.wait_ready(&["delayed-zone-a"]).await;
    }

    async fn wait_ready(&self, names: &[&str]) {
        wait_group_ready(&self.namespace.client(), self.namespace.name(), names).await;
    }

    async fn scale(&self, name: &str, replicas: i32) -> Result<(), String> {
        scale(&self.statefulsets(), name, replicas, false).await
    }

    async fn replicas(&self, name: &str) -> i32 {
        spec_replicas(&self.namespace.client(), self.namespace.name(), name).await
    }

    async fn wait_replicas(&self, name: &str, replicas: i32) {
        let who = self.who();
        wait_until(
            Duration::from_secs(90),
            &format!("{who}: {name} has {replicas} replicas"),
            || async {
                if self.replicas(name).await == replicas {
                    return true;
                }
                self.nudge(name).await;
                false
            },
        )
        .await;
    }

    /// Touches StatefulSet `name` (an annotation of the test's own): the Go operator looks at
    /// its groups again only when something in the namespace changed (or every 5 minutes, its
    /// informers' resync), where baton polls; so scenarios waiting on its next look make one
    /// happen. baton reads nothing of it.
    async fn nudge(&self, name: &str) {
        let patch = json!({"metadata": {"annotations": {
            "e2e.baton.test/nudged": jiff::Timestamp::now().to_string(),
        }}});
        self.statefulsets()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|error| panic!("touching {name}: {error}"));
    }

    fn templates(&self) -> ReplicaTemplates {
        ReplicaTemplates::new(self.namespace.client(), self.namespace.name())
    }

    /// Every call the pods received so far, `<pod> <METHOD> <path>`, sorted; then forgotten.
    fn take_calls(&self) -> Vec<String> {
        let mut calls: Vec<String> = self
            .endpoints
            .iter()
            .flat_map(|(pod, endpoint)| {
                endpoint
                    .calls()
                    .into_iter()
                    .map(move |call| format!("{pod} {call}"))
            })
            .collect();
        for endpoint in self.endpoints.values() {
            endpoint.clear();
        }
        calls.sort();
        calls
    }

    /// Which pods received which methods so far, each once (the operators call again on every
    /// pass, each at its own pace), e.g. `delayed-zone-a-1 POST /prepare-delayed-downscale`.
    fn calls_made(&self) -> Vec<String> {
        let mut calls = self.take_calls();
        calls.dedup();
        calls
    }

    /// `grafana.com/last-downscale` of `name`, once it is written.
    async fn wait_last_downscale(&self, name: &str) -> jiff::Timestamp {
        let who = self.who();
        let api = self.statefulsets();
        let read = || async {
            api.get(name)
                .await
                .ok()?
                .metadata
                .annotations?
                .get(LAST_DOWNSCALE)?
                .parse::<jiff::Timestamp>()
                .ok()
        };
        wait_until(
            TIMEOUT,
            &format!("{who}: {name} carries last-downscale"),
            || async { read().await.is_some() },
        )
        .await;
        read().await.expect("waited for")
    }
}

/// What one operator did at one step of a downscale scenario.
#[derive(Debug)]
struct Step {
    /// Allowed, or the denial's message.
    answer: Result<(), String>,
    /// The pods' calls it made, as [`DownscaleScene::take_calls`] lists them.
    calls: Vec<String>,
}

/// Steps judged side by side: the same answer (a denial's message carrying every word of
/// `gist`) and the same calls to the same pods in the same numbers.
#[derive(Default)]
struct DownscaleVerdicts {
    table: Vec<String>,
    differences: Vec<String>,
}

impl DownscaleVerdicts {
    fn judge(&mut self, step: &str, go: &Step, baton: &Step, gist: &[&str]) {
        self.judge_calls(step, go, baton, gist, None);
    }

    /// As [`DownscaleVerdicts::judge`], where the Go operator calls the same pods as baton but
    /// more often, for the reason `why`: the pods called and the methods must match, and baton
    /// must call each once.
    fn judge_go_calls_again(&mut self, step: &str, go: &Step, baton: &Step, why: &str) {
        self.judge_calls(step, go, baton, &[], Some(why));
    }

    fn judge_calls(
        &mut self,
        step: &str,
        go: &Step,
        baton: &Step,
        gist: &[&str],
        go_calls_again: Option<&str>,
    ) {
        let mut problems = Vec::new();
        if go.answer.is_ok() != baton.answer.is_ok() {
            problems.push("one allows, the other denies".to_owned());
        }
        for (who, taken) in [("Go", go), ("baton", baton)] {
            if let Err(message) = &taken.answer {
                for word in gist {
                    if !message.contains(word) {
                        problems.push(format!("{who}'s denial lacks {word:?}"));
                    }
                }
            }
        }
        let once = |calls: &[String]| {
            let mut once = calls.to_vec();
            once.dedup();
            once
        };
        let same_calls = match go_calls_again {
            None => go.calls == baton.calls,
            Some(_) => once(&go.calls) == baton.calls && once(&baton.calls) == baton.calls,
        };
        if !same_calls {
            problems.push("the pods' calls differ".to_owned());
        }
        let verdict = match (problems.is_empty(), go_calls_again) {
            (false, _) => "DIFFERENT".to_owned(),
            (true, None) => "same".to_owned(),
            (true, Some(why)) => format!("the same pods called; {why}"),
        };
        if !problems.is_empty() {
            self.differences.push(format!(
                "{step}: {}\n  Go:    {go:?}\n  baton: {baton:?}",
                problems.join(", ")
            ));
        }
        let brief = |taken: &Step| {
            format!(
                "{}; calls: {}",
                match &taken.answer {
                    Ok(()) => "allowed".to_owned(),
                    Err(message) => format!("denied: {message}"),
                },
                taken.calls.join(", ")
            )
        };
        self.table.push(format!(
            "| {step} | {verdict} | {} | {} |",
            brief(go),
            brief(baton)
        ));
    }

    fn report(self, steps: usize) {
        report("step", "steps", &self.table, &self.differences, steps);
    }
}

/// The prepare-downscale steps of one operator: each step's answer and the pods' calls.
async fn prepare_downscale_steps(scene: &DownscaleScene) -> Vec<Step> {
    let mut steps = Vec::new();
    let step = |answer: Result<(), String>| Step {
        answer,
        calls: scene.take_calls(),
    };
    // 1. A StatefulSet opted in without the port annotation
    steps.push(step(scene.scale("probe-prepare", 0).await));
    // 2. Zone a down while a pod of zone c is not ready
    scene.simulator.hold_not_ready("ingester-zone-c-0").await;
    wait_until(TIMEOUT, "zone c counts a pod not ready", || async {
        scene
            .statefulsets()
            .get("ingester-zone-c")
            .await
            .ok()
            .and_then(|statefulset| statefulset.status?.ready_replicas)
            .unwrap_or(0)
            < 3
    })
    .await;
    steps.push(step(scene.scale("ingester-zone-a", 2).await));
    scene.simulator.release("ingester-zone-c-0").await;
    scene.wait_ready(&["ingester-zone-c"]).await;
    // 3. Zone a down while the pod going away fails to prepare
    scene.endpoints["ingester-zone-a-2"].answer("POST", 500);
    steps.push(step(scene.scale("ingester-zone-a", 2).await));
    scene.endpoints["ingester-zone-a-2"].answer("POST", 200);
    // 4. Zone a down, every pod ready and preparing
    let allowed = scene.scale("ingester-zone-a", 2).await;
    scene.wait_last_downscale("ingester-zone-a").await;
    steps.push(step(allowed));
    // 5. Zone b down while zone a was downscaled less than the min time ago
    steps.push(step(scene.scale("ingester-zone-b", 2).await));
    // 6. Zone a further down: its own last downscale does not hold it
    steps.push(step(scene.scale("ingester-zone-a", 1).await));
    steps
}

#[tokio::test]
async fn both_operators_prepare_a_downscale_alike() {
    // Given in both namespaces a group of 3 zones x 3 pods opted in to prepare-downscale with
    // 1h between zone downscales, an endpoint on every pod, and the operator's webhooks
    // registered with the API server
    let (go, baton) = tokio::join!(
        DownscaleScene::start("sbs-prepare-go", Some(&[])),
        DownscaleScene::start("sbs-prepare-baton", None),
    );
    tokio::join!(
        go.create_prepared_group("1h"),
        baton.create_prepared_group("1h")
    );
    go.take_calls();
    baton.take_calls();

    // When the same downscales are asked of both through the API server
    let (go_steps, baton_steps) = tokio::join!(
        prepare_downscale_steps(&go),
        prepare_downscale_steps(&baton)
    );

    // Then both answer each alike and call the same pods alike
    let mut verdicts = DownscaleVerdicts::default();
    let gists: [(&str, &[&str]); 6] = [
        (
            "opted in without the port annotation",
            &["grafana.com/prepare-downscale-http-port"],
        ),
        ("a pod of another zone not ready", &["ingester-zone-c"]),
        ("the pod going away fails to prepare", &["prepare"]),
        ("every pod ready and preparing", &[]),
        (
            "another zone downscaled within the min time",
            &["ingester-zone-a"],
        ),
        ("the same zone further down", &[]),
    ];
    // (an allowed downscale: the Go operator writes last-downscale to the StatefulSet it is
    // admitting, which moves its resourceVersion, and the API server runs the /scale patch again:
    // the admission, and the pods' calls, twice; baton writes nothing from inside it)
    let again = "Go calls again: its write inside the admission makes the API server re-run the patch (rollout-operator#303)";
    for (index, ((step, gist), (go_step, baton_step))) in gists
        .iter()
        .zip(go_steps.iter().zip(&baton_steps))
        .enumerate()
    {
        if [3, 5].contains(&index) {
            verdicts.judge_go_calls_again(step, go_step, baton_step, again);
        } else {
            verdicts.judge(step, go_step, baton_step, gist);
        }
    }
    verdicts.report(gists.len());
    // (and what the steps promise, on either side)
    for (who, steps) in [("Go", &go_steps), ("baton", &baton_steps)] {
        let allowed: Vec<bool> = steps.iter().map(|step| step.answer.is_ok()).collect();
        assert_eq!(
            allowed,
            [false, false, false, true, false, true],
            "{who}: {steps:?}"
        );
        assert_eq!(
            steps[2].calls,
            [
                "ingester-zone-a-2 DELETE /ingester/prepare-shutdown",
                "ingester-zone-a-2 POST /ingester/prepare-shutdown"
            ],
            "{who}: the failed preparation is undone"
        );
    }
    assert_eq!(
        baton_steps[3].calls,
        ["ingester-zone-a-2 POST /ingester/prepare-shutdown"]
    );
    for scene in [&go, &baton] {
        assert_eq!(scene.replicas("ingester-zone-a").await, 1);
        assert_eq!(scene.replicas("ingester-zone-b").await, 3);
    }
}

/// The calls of one whole pass of `scene`'s operator and any after it, once it acts on what
/// it was last told: what it called (as [`DownscaleScene::calls_made`]) from when `called`
/// (calls a pod received: `(pod, method)`) have all arrived twice over, the first round
/// forgotten (it may carry calls of passes that began before).
async fn calls_of_a_pass(scene: &DownscaleScene, called: &[(&str, &str)]) -> Step {
    let arrived = || {
        called
            .iter()
            .all(|(pod, method)| scene.endpoints[*pod].count(method) > 0)
    };
    for round in ["", " again"] {
        wait_until(
            TIMEOUT,
            &format!("{}: {called:?}{round}", scene.who()),
            || async {
                if arrived() {
                    return true;
                }
                scene.nudge("delayed-zone-a").await;
                false
            },
        )
        .await;
        if round.is_empty() {
            scene.take_calls();
        }
    }
    Step {
        answer: Ok(()),
        calls: scene.calls_made(),
    }
}

/// [`calls_of_a_pass`] of both at once.
async fn both_passes(
    go: &DownscaleScene,
    baton: &DownscaleScene,
    called: &[(&str, &str)],
) -> (Step, Step) {
    tokio::join!(calls_of_a_pass(go, called), calls_of_a_pass(baton, called))
}

#[tokio::test]
async fn both_operators_delay_a_downscale_until_its_pods_are_ready_to_go_alike() {
    // Given in both namespaces a StatefulSet of 3 mirroring a template, its downscales delayed
    // by 1h, and an endpoint on every pod that says it has only just prepared
    let (go, baton) = tokio::join!(
        DownscaleScene::start("sbs-delayed-go", Some(&[])),
        DownscaleScene::start("sbs-delayed-baton", None),
    );
    tokio::join!(go.create_delayed("1h"), baton.create_delayed("1h"));
    let mut verdicts = DownscaleVerdicts::default();
    let now = jiff::Timestamp::now().as_second();
    let (pod_0, pod_1, pod_2) = ("delayed-zone-a-0", "delayed-zone-a-1", "delayed-zone-a-2");

    // When the template wants 1
    // Then both ask pods 1 and 2 to prepare, tell pod 0 to cancel, and keep 3 replicas
    for scene in [&go, &baton] {
        scene.templates().scale("delayed", 1).await;
    }
    let preparing = [(pod_1, "POST"), (pod_2, "POST")];
    let (go_step, baton_step) = both_passes(&go, &baton, &preparing).await;
    verdicts.judge(
        "the template wants 1, the pods just prepared",
        &go_step,
        &baton_step,
        &[],
    );
    for call in [
        format!("{pod_0} DELETE /prepare-delayed-downscale"),
        format!("{pod_1} POST /prepare-delayed-downscale"),
        format!("{pod_2} POST /prepare-delayed-downscale"),
    ] {
        assert!(go_step.calls.contains(&call), "{call}: {go_step:?}");
    }
    for scene in [&go, &baton] {
        assert_eq!(scene.replicas("delayed-zone-a").await, 3, "{}", scene.who());
    }

    // When only pod 2 prepared more than the delay ago
    // Then both scale down to 2 only, and go on preparing pod 1
    for scene in [&go, &baton] {
        scene.endpoints[pod_2].prepared_at(now - 2 * 3600);
    }
    for scene in [&go, &baton] {
        scene.wait_replicas("delayed-zone-a", 2).await;
    }
    let (go_step, baton_step) = both_passes(&go, &baton, &[(pod_1, "POST")]).await;
    verdicts.judge(
        "pod 2 prepared more than the delay ago",
        &go_step,
        &baton_step,
        &[],
    );

    // When the template is scaled back to 2
    // Then both tell pod 1 to cancel, and neither goes below 2
    for scene in [&go, &baton] {
        scene.templates().scale("delayed", 2).await;
    }
    let (go_step, baton_step) = both_passes(&go, &baton, &[(pod_1, "DELETE")]).await;
    verdicts.judge("the template back at 2", &go_step, &baton_step, &[]);
    verdicts.report(3);
    assert!(
        go_step.calls.iter().all(|call| call.contains(" DELETE ")),
        "only cancelling: {go_step:?}"
    );
    for scene in [&go, &baton] {
        assert_eq!(scene.replicas("delayed-zone-a").await, 2, "{}", scene.who());
    }
}

impl DownscaleScene {
    /// Asks to scale `name` to `replicas` until it is allowed (within a minute of
    /// `not_before`). Every answer that came back before `not_before` must be a denial naming
    /// `gist`; returns how many were denied.
    async fn denied_until(
        &self,
        name: &str,
        replicas: i32,
        not_before: jiff::Timestamp,
        gist: &str,
    ) -> usize {
        let who = self.who();
        let deadline = not_before + jiff::SignedDuration::from_secs(60);
        let mut denied = 0;
        loop {
            let answer = self.scale(name, replicas).await;
            let answered = jiff::Timestamp::now();
            match answer {
                Ok(()) => {
                    assert!(
                        answered >= not_before,
                        "{who} allowed {name} down at {answered}, before {not_before}"
                    );
                    return denied;
                }
                Err(message) => {
                    assert!(message.contains(gist), "{who}: {message}");
                    denied += 1;
                }
            }
            assert!(
                answered < deadline,
                "{who} still denies {name} at {answered}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Reads `name`'s replicas until they are `at_last`: every read that came back before
    /// `not_before` must say `until`; returns how many did.
    async fn held_until(
        &self,
        name: &str,
        until: i32,
        not_before: jiff::Timestamp,
        at_last: i32,
    ) -> usize {
        let who = self.who();
        let deadline = not_before + jiff::SignedDuration::from_secs(90);
        let mut held = 0;
        loop {
            let replicas = self.replicas(name).await;
            let read = jiff::Timestamp::now();
            if read < not_before {
                assert_eq!(
                    replicas, until,
                    "{who}: {name} at {read}, before {not_before}"
                );
                held += 1;
            } else if replicas == at_last {
                return held;
            }
            self.nudge(name).await;
            assert!(
                read < deadline,
                "{who}: {name} still has {replicas} replicas at {read}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The Go operator's zone tracker entry for `name` (`-use-zone-tracker`), once written.
    async fn wait_zone_tracker(&self, name: &str) -> jiff::Timestamp {
        let who = self.who();
        let config_maps = self.namespace.api::<ConfigMap>();
        let read = || async {
            let tracker = config_maps
                .get("rollout-operator-zone-tracker")
                .await
                .ok()?;
            let entry: Value = serde_json::from_str(tracker.data?.get(name)?).ok()?;
            entry["lastDownscaled"]
                .as_str()?
                .parse::<jiff::Timestamp>()
                .ok()
        };
        wait_until(
            TIMEOUT,
            &format!("{who}: the zone tracker has {name}"),
            || async { read().await.is_some() },
        )
        .await;
        read().await.expect("waited for")
    }

    /// Starts a delayed downscale of `delayed-zone-a` to 1, its pods answering that they
    /// prepared now; waits until the operator asked both pods going away. Returns when they
    /// prepared.
    async fn start_delayed_downscale(&self) -> jiff::Timestamp {
        let prepared = jiff::Timestamp::now().as_second();
        for pod in ["delayed-zone-a-1", "delayed-zone-a-2"] {
            self.endpoints[pod].prepared_at(prepared);
        }
        self.templates().scale("delayed", 1).await;
        calls_of_a_pass(
            self,
            &[("delayed-zone-a-1", "POST"), ("delayed-zone-a-2", "POST")],
        )
        .await;
        jiff::Timestamp::from_second(prepared).unwrap()
    }

    /// Then, after a switch: zone b is denied until `min_time` after zone a's recorded
    /// downscale and allowed after, and `delayed-zone-a` stays at 3 until `delay` after its
    /// pods prepared, then goes to 1; each was seen held at least once.
    async fn check_downscales_held(
        &self,
        zone_a_downscaled: jiff::Timestamp,
        min_time: jiff::SignedDuration,
        prepared: jiff::Timestamp,
        delay: jiff::SignedDuration,
    ) {
        let (denied, held) = tokio::join!(
            self.denied_until(
                "ingester-zone-b",
                2,
                zone_a_downscaled + min_time,
                "ingester-zone-a"
            ),
            self.held_until("delayed-zone-a", 3, prepared + delay, 1),
        );
        let who = self.who();
        assert!(
            denied > 0,
            "{who} was asked for zone b only after the min time"
        );
        assert!(held > 0, "{who}'s delay was read only after it ended");
    }
}

#[tokio::test]
async fn switching_from_the_go_operator_to_baton_mid_downscale_keeps_its_min_time_and_delay() {
    // Given a group opted in to prepare-downscale with 30s between zone downscales, and a
    // StatefulSet whose downscales are delayed 30s, run by the Go operator (last-downscale kept
    // in annotations)
    let (min_time, delay) = (
        jiff::SignedDuration::from_secs(30),
        jiff::SignedDuration::from_secs(30),
    );
    let go = DownscaleScene::start("sbs-switch-scale-in", Some(&[])).await;
    tokio::join!(go.create_prepared_group("30s"), go.create_delayed("30s"));
    // When the Go operator downscales zone a and has started the delayed downscale to 1
    go.scale("ingester-zone-a", 2).await.unwrap();
    let zone_a_downscaled = go.wait_last_downscale("ingester-zone-a").await;
    let prepared = go.start_delayed_downscale().await;
    // And it is stopped, and baton started in its place
    let baton = go.switch(&[]).await;

    // Then baton denies zone b until 30s after zone a's downscale, and keeps the delayed
    // StatefulSet until 30s after its pods prepared: no downscale earlier than the Go operator
    // would have allowed
    baton
        .check_downscales_held(zone_a_downscaled, min_time, prepared, delay)
        .await;
}

#[tokio::test]
async fn switching_back_from_baton_to_the_go_operator_mid_downscale_keeps_its_min_time_and_delay() {
    // Given the same, run by baton
    let (min_time, delay) = (
        jiff::SignedDuration::from_secs(30),
        jiff::SignedDuration::from_secs(30),
    );
    let baton = DownscaleScene::start("sbs-switch-scale-back", None).await;
    tokio::join!(
        baton.create_prepared_group("30s"),
        baton.create_delayed("30s")
    );
    // When baton downscales zone a (and records it in the Go operator's zone tracker) and has
    // started the delayed downscale to 1
    baton.scale("ingester-zone-a", 2).await.unwrap();
    let zone_a_downscaled = baton.wait_zone_tracker("ingester-zone-a").await;
    let prepared = baton.start_delayed_downscale().await;
    // And it is stopped, and the Go operator started in its place, reading the zone tracker
    let go = baton.switch(&["-use-zone-tracker"]).await;

    // Then the Go operator carries on from what baton left: zone b denied until 30s after zone
    // a's downscale, the delayed StatefulSet kept until 30s after its pods prepared
    go.check_downscales_held(zone_a_downscaled, min_time, prepared, delay)
        .await;
}
