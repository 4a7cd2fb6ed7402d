//! Web health checks on the real control plane, each a scenario: given a rollout group whose
//! RolloutHealthCheck asks a real HTTP endpoint (`spec.web`: a JSONPath into its JSON answer
//! and a condition on it) whose answer the test changes, when the template changes, then baton
//! holds each step until the endpoint answers well, halts or rolls the group back when it
//! answers badly, and treats hostile values (a metadata-service URL, a path that matches
//! nothing, a 10 MiB answer, a Secret header over plain http or from a Secret that did not opt
//! in) as no answer: inconclusive, saying why, never a pass (and once the Secret opts in, its
//! value reaches the endpoint).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use baton_core::gates::HEALTH_CHECK_ANNOTATION;
use baton_e2e::controller_support::events_about;
use baton_e2e::http_support::PodEndpoint;
use baton_e2e::plugin_support::Run;
use baton_e2e::prometheus_support::create_health_check;
use baton_e2e::{Scene, wait_until};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const CHECK: &str = "app-errors";

/// The test app: a real HTTP server on loopback whose answer to GET the test sets, and a
/// scene whose operator lets web checks call it (loopback is refused unless listed).
struct WebChecked {
    app: PodEndpoint,
    scene: Scene,
    names: Vec<String>,
}

impl WebChecked {
    /// A group of `zones` × 2 pods, zone a naming the check [`CHECK`], the app answering
    /// `answer` until told otherwise.
    async fn start(prefix: &str, zones: &[&str], answer: &str) -> Self {
        let app = PodEndpoint::start(Ipv4Addr::LOCALHOST, 0)
            .await
            .expect("the test app on loopback");
        app.answer_with("GET", 200, answer);
        let allowed = format!("[\"http://{}\"]", app.address);
        let scene =
            Scene::start_with(prefix, &[("BATON_GATES__WEB_CHECK_ADDRESSES", &allowed)]).await;
        let names = scene
            .create_group(zones, 2, |zone, fixture| match zone {
                "a" => fixture.annotation(HEALTH_CHECK_ANNOTATION, CHECK),
                _ => fixture,
            })
            .await;
        Self { app, scene, names }
    }

    /// The app's URL for the zone rolling (`{{zone}}` is replaced by baton).
    fn url(&self) -> String {
        format!("http://{}/zones/{{{{zone}}}}/stats", self.app.address)
    }

    /// A check that the app's `$.errorRate` stays below 0.1, run every second, one failure
    /// doing `on_failure`.
    fn error_rate_check(&self, on_failure: &str) -> serde_json::Value {
        json!({
            "web": {"timeout": "2s"},
            "queries": [{
                "name": "error-rate",
                "web": {
                    "url": self.url(),
                    "headers": {"Accept": {"value": "application/json"}},
                    "jsonPath": "$.errorRate",
                    "threshold": {"operator": "<", "value": 0.1},
                },
            }],
            "interval": "1s",
            "failureThreshold": 1,
            "onFailure": on_failure,
        })
    }

    async fn create_check(&self, spec: serde_json::Value) {
        let client = self.scene.namespace.client();
        create_health_check(&client, self.scene.namespace.name(), CHECK, spec).await;
    }

    /// Replaces the check's queries with `queries`.
    async fn set_queries(&self, queries: serde_json::Value) {
        self.patch_spec(json!({"queries": queries})).await;
    }

    /// Merges `spec` into the check's spec.
    async fn patch_spec(&self, spec: serde_json::Value) {
        let checks: Api<DynamicObject> = Api::namespaced_with(
            self.scene.namespace.client(),
            self.scene.namespace.name(),
            &baton_core::gates::health_check::api_resource(),
        );
        let patch = json!({"spec": spec});
        checks
            .patch(CHECK, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patching the check");
    }

    /// Waits until the stored outcome contains every one of `expected`.
    async fn wait_outcome(&self, expected: &[&str]) {
        self.scene
            .wait_check_outcome(&self.names[0], expected)
            .await;
    }

    async fn halted(&self) -> Vec<String> {
        self.scene.halted(&self.names).await
    }

    async fn updated(&self) -> BTreeMap<String, usize> {
        self.scene.updated(&self.names).await
    }

    async fn kubectl_baton(&self, args: &[&str]) -> Run {
        self.scene.kubectl_baton(args).await
    }

    async fn leader_status(&self) -> String {
        self.scene.leader_status().await
    }
}

#[tokio::test]
async fn a_web_check_holds_every_step_while_its_path_matches_nothing_and_lets_the_rollout_complete_once_the_app_answers_well()
 {
    // Given a group whose check reads $.errorRate from the test app, which answers without it
    // (two passes a step, so a wait after a pass says what the pass saw)
    let checked = WebChecked::start("web-held", &["a", "b"], r#"{"rate": 0.01}"#).await;
    let mut spec = checked.error_rate_check("Halt");
    spec["successThreshold"] = json!(2);
    checked.create_check(spec).await;
    let zone_a = checked.names[0].clone();

    // When the template changes
    let from = checked.scene.roll_out(&checked.names, "v2").await;

    // Then the check is inconclusive, naming the path, and the app was asked for the zone
    // rolling
    checked
        .wait_outcome(&[
            "inconclusive",
            "query error-rate (GET http://",
            "jsonPath $.errorRate matches nothing in the answer",
        ])
        .await;
    assert!(
        checked
            .app
            .calls()
            .contains(&format!("GET /zones/{zone_a}/stats")),
        "{:?}",
        checked.app.calls()
    );
    // and the leader's status page says what the group waits for, with that outcome
    wait_until(
        TIMEOUT,
        "the status page shows the check's wait",
        || async {
            let status = checked.leader_status().await;
            status.contains(&format!("waits for health check {CHECK}"))
                && status.contains("matches nothing in the answer")
        },
    )
    .await;
    // and no step was taken, nothing halted: an inconclusive run never passes nor fails
    let updated = checked.updated().await;
    assert!(updated.values().all(|count| *count == 0), "{updated:?}");
    assert_eq!(checked.halted().await, Vec::<String>::new());

    // When the app answers with an error rate below the threshold
    checked
        .app
        .answer_with("GET", 200, r#"{"errorRate": 0.01, "zone": "any"}"#);

    // Then a step waiting for its second pass says what the first saw
    wait_until(TIMEOUT, "a wait names the value a pass saw", || async {
        let mut notes = Vec::new();
        for name in &checked.names {
            let client = checked.scene.client();
            notes.extend(events_about(&client, checked.scene.name(), name).await);
        }
        notes.iter().any(|(reason, note)| {
            reason == "HealthCheck" && note.contains("last run passed (error-rate: 0.01)")
        })
    })
    .await;
    // and the rollout completes (every step after two passes), keeping the availability
    // guarantees, nothing halted
    checked.scene.wait_complete(&checked.names).await;
    checked.scene.check_guarantees(&checked.names, 2, 1, from);
    assert_eq!(checked.halted().await, Vec::<String>::new());
}

#[tokio::test]
async fn a_web_check_whose_app_answers_badly_halts_the_group_naming_the_value_seen() {
    // Given a group whose check reads the app's error rate, one failure halting it
    let checked = WebChecked::start("web-halt", &["a", "b"], r#"{"errorRate": 0.01}"#).await;
    checked.create_check(checked.error_rate_check("Halt")).await;

    // When the template changes, and the app's error rate rises once a pod was updated
    checked.scene.roll_out(&checked.names, "v2").await;
    wait_until(TIMEOUT, "a pod was updated", || async {
        checked.updated().await.values().sum::<usize>() >= 1
    })
    .await;
    checked.app.answer_with("GET", 200, r#"{"errorRate": 0.5}"#);

    // Then the group is halted, the halt naming the call, the value seen and the threshold,
    // and the Event and `kubectl baton wait` report it with that value
    let failed = format!("health check {CHECK} failed");
    let says = [
        failed.as_str(),
        "query `GET http://",
        "/stats → $.errorRate` returned 0.5 (must be < 0.1)",
    ];
    checked
        .scene
        .wait_halted_saying(&checked.names, &says, "returned 0.5 (must be < 0.1)")
        .await;
    // and `kubectl baton status` and the leader's status page show the check's last result,
    // the value seen
    checked.kubectl_baton(&["status"]).await.says(&[
        &format!("ingester: health check {CHECK}: query `GET http://"),
        "returned 0.5 (must be < 0.1) at ",
        " in a row passed, ",
    ]);
    let document: serde_json::Value =
        serde_json::from_str(&checked.leader_status().await).expect("the status document");
    let check = &document["groups"][0]["check"];
    assert_eq!(check["name"], CHECK, "{document}");
    let seen = check["lastResult"].as_str().unwrap_or_default();
    assert!(seen.contains("returned 0.5 (must be < 0.1)"), "{document}");
    let (_, page) = checked
        .scene
        .controller
        .ops_get("/ui/status")
        .await
        .expect("the leader's page");
    assert!(
        page.contains(&format!("Health check {CHECK}: query `GET http://"))
            && page.contains("returned 0.5 (must be &lt; 0.1)"),
        "{page}"
    );
    // and the rollout stopped: no zone is complete
    let complete = checked
        .updated()
        .await
        .values()
        .filter(|n| **n == 2)
        .count();
    assert!(
        complete < checked.names.len(),
        "{:?}",
        checked.updated().await
    );
}

#[tokio::test]
async fn a_web_check_whose_app_answers_badly_with_on_failure_rollback_rolls_the_group_back() {
    // Given a group of 2 zones whose check rolls it back at the first failure
    let checked = WebChecked::start("web-rollback", &["a", "b"], r#"{"errorRate": 0}"#).await;
    checked
        .create_check(checked.error_rate_check("Rollback"))
        .await;
    let mut before = BTreeMap::new();
    for name in &checked.names {
        let (_, update) = checked.scene.revisions(name).await;
        before.insert(name.clone(), update);
    }
    let zone_b = checked.names[1].clone();

    // When the template changes, and the app's error rate rises once zone b has a new pod
    checked.scene.roll_out(&checked.names, "v2").await;
    wait_until(TIMEOUT, "zone b has a new pod", || async {
        checked.scene.updated_pods(&zone_b).await >= 1
    })
    .await;
    checked.app.answer_with("GET", 200, r#"{"errorRate": 0.7}"#);

    // Then the group rolls back: `wait` exits with its rolled-back code, naming the check,
    // and every pod runs the revision from before
    checked
        .kubectl_baton(&["wait", "ingester", "--timeout", "3m"])
        .await
        .exited(7)
        .complains(&[
            "rollout group ingester is rolled back from",
            &format!("health check {CHECK} failed"),
        ]);
    for name in &checked.names {
        let (current, update) = checked.scene.revisions(name).await;
        assert_eq!(update, before[name], "{name}");
        assert_eq!(current, before[name], "{name}");
    }
    checked
        .scene
        .wait_event(
            &zone_b,
            "RollbackStarted",
            &[&format!(
                "asked: health check {CHECK} failed 1 times in a row"
            )],
        )
        .await;
}

#[tokio::test]
async fn hostile_web_checks_pass_nothing_and_say_why_a_metadata_url_a_path_matching_nothing_a_10_mib_answer_and_secret_headers_over_http_or_unlabelled()
 {
    // Given a group whose check asks the cloud's metadata service
    let checked = WebChecked::start("web-hostile", &["a", "b"], r#"{"errorRate": 0}"#).await;
    let mut spec = checked.error_rate_check("Halt");
    spec["queries"][0]["web"]["url"] = json!("http://169.254.169.254/latest/meta-data/");
    checked.create_check(spec).await;
    let zone_a = checked.names[0].clone();

    // When the template changes
    checked.scene.roll_out(&checked.names, "v2").await;

    // Then the call is refused before it is made, a Warning naming the field and why
    checked
        .scene
        .wait_event(
            &zone_a,
            "UnusableHealthCheck",
            &[
                "spec.queries[0].web.url: http://169.254.169.254/latest/meta-data/ is not under \
                 any of gates.web_check_addresses",
            ],
        )
        .await;
    checked
        .wait_outcome(&["inconclusive", "169.254.169.254"])
        .await;

    // When it asks the app for a path its answer does not have
    let query = |path: &str| {
        json!([{"name": "error-rate", "web": {
            "url": checked.url(), "jsonPath": path,
            "threshold": {"operator": "<", "value": 0.1}}}])
    };
    checked.set_queries(query("$.nowhere[0].rate")).await;
    // Then the run is inconclusive, naming the path
    checked
        .wait_outcome(&["jsonPath $.nowhere[0].rate matches nothing in the answer"])
        .await;

    // When the app answers 10 MiB (a valid JSON document, with a passing value)
    let padding = " ".repeat(10 * 1024 * 1024);
    checked
        .app
        .answer_with("GET", 200, &format!(r#"{{"errorRate": 0{padding}}}"#));
    checked.set_queries(query("$.errorRate")).await;
    // Then the answer is refused past the operator's bound (4 MiB): inconclusive, never a pass
    checked
        .wait_outcome(&["the answer is larger than 4194304 bytes"])
        .await;

    // When a header's value is a Secret's, to be sent over plain http
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-token"},
        "stringData": {"header": "Bearer t0ken"},
    }))
    .expect("a Secret");
    Api::<Secret>::namespaced(checked.scene.namespace.client(), checked.scene.name())
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the Secret");
    checked
        .set_queries(json!([{"name": "error-rate", "web": {
            "url": checked.url(), "status": "2xx",
            "headers": {"Authorization": {"secretKeyRef": {"name": "app-token", "key": "header"}}},
        }}]))
        .await;
    // Then it is refused, saying how to send it anyway
    checked
        .scene
        .wait_event(
            &zone_a,
            "UnusableHealthCheck",
            &["set spec.web.allowInsecureCredentials: true to send them anyway"],
        )
        .await;
    // When the check says so, but the Secret's owner did not opt it in
    checked
        .patch_spec(json!({"web": {"allowInsecureCredentials": true}}))
        .await;
    // Then it is refused, naming the label the Secret lacks
    checked
        .scene
        .wait_event(
            &zone_a,
            "UnusableHealthCheck",
            &["Secret app-token is not labelled baton.dev/health-check-secret=true"],
        )
        .await;

    // And through all of it no step was taken and nothing halted
    let updated = checked.updated().await;
    assert!(updated.values().all(|count| *count == 0), "{updated:?}");
    assert_eq!(checked.halted().await, Vec::<String>::new());
    let leader = checked.leader_status().await;
    assert!(
        leader.contains(&format!("waits for health check {CHECK}")),
        "{leader}"
    );
    assert!(
        checked.app.header_values("Authorization").is_empty(),
        "no Secret was sent while refused"
    );

    // When the Secret's owner opts it in (the app's address is listed, the check allows http),
    // the app answering small again
    checked.app.answer_with("GET", 200, r#"{"errorRate": 0}"#);
    let opt_in = json!({"metadata": {"labels": {"baton.dev/health-check-secret": "true"}}});
    Api::<Secret>::namespaced(checked.scene.namespace.client(), checked.scene.name())
        .patch("app-token", &PatchParams::default(), &Patch::Merge(&opt_in))
        .await
        .expect("labelling the Secret");
    // Then the endpoint receives the Secret's value as the header, and the check passes on
    wait_until(TIMEOUT, "the app received the Secret's header", || async {
        checked
            .app
            .header_values("Authorization")
            .contains(&"Bearer t0ken".to_owned())
    })
    .await;
    checked
        .wait_outcome(&["passed (error-rate: HTTP 200)"])
        .await;
}
