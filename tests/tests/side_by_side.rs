//! Side by side with Grafana's rollout-operator v0.38.1, the real Go binary
//! (`baton_e2e::go_operator`): each operator alone in a namespace of its own on the shared
//! control plane, both namespaces given the same objects, and the same admission reviews sent
//! to both webhook servers. Every answer is compared field by field: the HTTP status, the
//! review's apiVersion, allowed, the status code and the message (with the namespace's name
//! written as `<ns>`). A case where baton answers differently on purpose says so and why, and
//! asserts both answers as they are, so a change on either side is seen; docs/compatibility.md
//! lists the same differences.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use baton_core::pods::PodReadiness;
use baton_e2e::controller_support::{
    Controller, create_ready_group, roll_out, wait_group_ready, wait_rollout_complete,
};
use baton_e2e::crds;
use baton_e2e::fixtures::{StatefulSetFixture, rollout_group};
use baton_e2e::go_operator::GoOperator;
use baton_e2e::keys::{
    DOWNSCALE_LEADER, MIRROR_API_VERSION, MIRROR_KIND, MIRROR_NAME, NO_DOWNSCALE,
};
use baton_e2e::scaling_support::{
    REPLICA_TEMPLATE_API_VERSION, REPLICA_TEMPLATE_KIND, ReplicaTemplates,
    install_replica_template_crd,
};
use baton_e2e::timeline::{Zone, check_rollout_guarantees, most_unavailable, zone_windows};
use baton_e2e::webhook_support::{TestTls, WebhookReplica};
use baton_e2e::zpdb_support::{budget, eviction_review, zpdb_resource};
use baton_e2e::{
    ControlPlane, PodEvent, PodSimulator, PodTransition, Scene, TestNamespace, wait_until,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
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
        println!("| {what} | verdict | Go operator v0.38.1 | baton |");
        println!("|---|---|---|---|");
        for line in &self.table {
            println!("{line}");
        }
        assert!(
            self.differences.is_empty(),
            "{} of {} cases differ:\n{}",
            self.differences.len(),
            self.table.len(),
            self.differences.join("\n")
        );
        // (every case was judged: the lower bound of what the test promises)
        assert_eq!(self.table.len(), cases, "cases judged");
    }
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

/// An UPDATE review of StatefulSet `stored` whose replicas go to `to` (None: the field
/// removed), as the API server sends it.
fn update_review(api_version: &str, stored: &Value, to: Option<i64>, dry_run: bool) -> Value {
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
fn scale_review(namespace: &str, name: &str, from: i64, to: i64) -> Value {
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
