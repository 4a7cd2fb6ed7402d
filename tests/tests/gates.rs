//! Rollout gates on the real control plane, each a scenario: given a rollout group
//! with gate annotations, when its template changes, then baton holds zones as the gates say.

use std::time::{Duration, Instant};

use baton_controller::gates::health;
use baton_core::gates::{
    CHECK_STATE_ANNOTATION, HALTED_ANNOTATION, HEALTH_CHECK_ANNOTATION, HOOK_ANNOTATION,
    HOOK_STATE_ANNOTATION, RAMP_ANNOTATION, SOAK_ANNOTATION, STATE_ANNOTATION, ZoneState,
};
use baton_e2e::controller_support::{Controller, roll_out, rollout_state, wait_group_ready};
use baton_e2e::fixtures::{StatefulSetFixture, rollout_group};
use baton_e2e::prometheus_support::{Metrics, Prometheus, create_health_check};
use baton_e2e::rbac_support::{Binary, SERVICE_ACCOUNT_NAMESPACE, bind_deploy_roles};
use baton_e2e::timeline::{
    WATCH_SKEW, Zone, ZoneWindow, check_rollout_guarantees, deletion_batches,
};
use baton_e2e::webhook_support::{StateGuardConfiguration, TestTls, WebhookReplica};
use baton_e2e::{ControlPlane, PodSimulator, Scene, TestNamespace};
use baton_e2e::{PodEvent, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const ZONES: [&str; 3] = ["a", "b", "c"];
const REPLICAS: u32 = 2;

/// Checks that each zone started at least `soak` after the one before it completed.
fn assert_soaked(windows: &[(String, ZoneWindow)], soak: Duration) {
    for pair in windows.windows(2) {
        let [(before, previous), (next, window)] = pair else {
            unreachable!("pairs");
        };
        let completed = previous.completed.expect("every zone completed");
        let started = window.started.expect("every zone started");
        assert!(
            started + WATCH_SKEW >= completed + soak,
            "{next} started {:?} after {before} completed; the soak is {soak:?}",
            started.saturating_duration_since(completed)
        );
    }
}

#[tokio::test]
async fn with_a_5s_soak_each_zone_starts_5s_after_the_previous_one_completed() {
    // Given a ready group of 3 zones with a 5 s soak on zone a
    let scene = Scene::start("soak").await;
    let names = scene
        .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
            "a" => fixture.annotation(SOAK_ANNOTATION, "5s"),
            _ => fixture,
        })
        .await;

    // When the template of every zone changes
    let from = scene.roll_out(&names, "v2").await;

    // Then zone b waits for the soak, and baton says so
    scene
        .wait_event(
            "ingester-zone-b",
            "Soak",
            &["soaking after ingester-zone-a: ingester-zone-b starts in"],
        )
        .await;

    // And every zone completes, each starting at least 5 s after the previous completed,
    // with docs/compatibility.md's guarantees held throughout
    scene.wait_complete(&names).await;
    let windows = scene.windows(&names, REPLICAS, from);
    let order: Vec<&str> = windows.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        order,
        ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"]
    );
    assert_soaked(&windows, Duration::from_secs(5));

    // And once complete, the gate state is gone from every StatefulSet
    for name in &names {
        wait_until(TIMEOUT, &format!("{name} loses its gate state"), || async {
            !scene.annotations(name).await.contains_key(STATE_ANNOTATION)
        })
        .await;
    }
    let metrics = scene.controller.metrics().await;
    assert!(
        metrics
            .contains("baton_rollout_gate_holding{reason=\"Soak\",rollout_group=\"ingester\"} 0")
            || metrics.contains(
                "baton_rollout_gate_holding{rollout_group=\"ingester\",reason=\"Soak\"} 0"
            ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_halted_group_deletes_nothing_until_a_person_resumes_it() {
    // Given a ready group with a soak, halted on zone b before the rollout
    let scene = Scene::start("halt").await;
    let names = scene
        .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
            "a" => fixture.annotation(SOAK_ANNOTATION, "1s"),
            "b" => fixture.annotation(HALTED_ANNOTATION, "error rate 0.3 in ingester-zone-b"),
            _ => fixture,
        })
        .await;

    // When the template changes
    scene.roll_out(&names, "v2").await;

    // Then baton warns that the group is halted, naming the zone, why, and how to resume in
    // its namespace
    let namespace = scene.namespace.name();
    scene
        .wait_event(
            "ingester-zone-b",
            "Halted",
            &[format!(
                "halted at ingester-zone-b: error rate 0.3 in ingester-zone-b; resume with \
                 kubectl baton resume ingester-zone-b -n {namespace} (or kubectl -n {namespace} \
                 annotate statefulset ingester-zone-b baton.dev/halted-)"
            )
            .as_str()],
        )
        .await;
    wait_until(TIMEOUT, "the halt shows in the metrics", || async {
        scene
            .controller
            .metrics()
            .await
            .contains("baton_rollout_group_halted{rollout_group=\"ingester\"} 1")
    })
    .await;
    // and no pod was deleted in any zone
    for name in &names {
        assert_eq!(scene.updated_pods(name).await, 0, "{name}");
    }
    assert!(
        scene
            .simulator
            .timeline()
            .iter()
            .all(|transition| !matches!(
                transition.event,
                PodEvent::Terminating | PodEvent::Deleted
            )),
        "a halted group deleted a pod"
    );

    // When a person resumes it, as documented
    scene
        .annotate("ingester-zone-b", HALTED_ANNOTATION, None)
        .await;

    // Then the rollout completes
    scene.wait_complete(&names).await;
}

#[tokio::test]
async fn a_new_leader_honours_the_rest_of_a_soak() {
    // Given a ready group with a 15 s soak
    let soak = Duration::from_secs(15);
    let mut scene = Scene::start("soak-failover").await;
    let names = scene
        .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
            "a" => fixture.annotation(SOAK_ANNOTATION, "15s"),
            _ => fixture,
        })
        .await;

    // When the template changes, and zone a completed and the soak before zone b is 5 s old
    let from = scene.roll_out(&names, "v2").await;
    wait_until(TIMEOUT, "the soak before zone b is 5 s old", || async {
        let annotations = scene.annotations("ingester-zone-b").await;
        let started = annotations
            .get(STATE_ANNOTATION)
            .and_then(|value| ZoneState::from_annotation(value).ok())
            .and_then(|state| state.soak_started_at);
        started.is_some_and(|started| {
            jiff::Timestamp::now().duration_since(started) >= jiff::SignedDuration::from_secs(5)
        })
    })
    .await;
    // the leader dies and another takes over
    scene
        .controller
        .process
        .signal("KILL")
        .expect("kill the leader");
    scene.controller = Controller::start(scene.control_plane, scene.namespace.name(), &[]).await;
    wait_until(TIMEOUT, "the new controller leads", || {
        scene.controller.is_leader()
    })
    .await;
    let leads = Instant::now();

    // Then zone b starts once the soak is over, counted from when it began: not earlier
    // (skipped) and not a whole soak after the new leader took over (restarted). How long the
    // new leader took to start and lead does not matter: a restarted soak would start zone b
    // at least a soak after it led, an honoured one at most what was left of it.
    scene.wait_complete(&names).await;
    let windows = scene.windows(&names, REPLICAS, from);
    assert_soaked(&windows, soak);
    let (_, zone_b) = windows
        .iter()
        .find(|(name, _)| name == "ingester-zone-b")
        .expect("zone b");
    let started = zone_b.started.expect("zone b started");
    let restarted_by = leads + soak - Duration::from_secs(1);
    assert!(
        started < restarted_by,
        "zone b started {:?} after the new leader led: the soak was restarted",
        started.saturating_duration_since(leads)
    );
}

// ---------------------------------------------------------------------------------------------
// Health checks against a real Prometheus
// ---------------------------------------------------------------------------------------------

const ERROR_RATIO: &str = "test_error_ratio";

/// A real Prometheus scraping a metric the test sets, a RolloutHealthCheck `errors` on it
/// (`test_error_ratio < 0.1`, every second, one pass per step, one failure halts), and a ready
/// group of 3 zones opted in.
struct CheckedScene {
    scene: Scene,
    metrics: Metrics,
    prometheus: Prometheus,
    names: Vec<String>,
}

impl CheckedScene {
    async fn new(prefix: &str) -> Self {
        Self::with(prefix, json!({})).await
    }

    /// As [`CheckedScene::new`], the check's spec with `fields` set besides.
    async fn with(prefix: &str, fields: serde_json::Value) -> Self {
        let metrics = Metrics::start().await;
        metrics.set(ERROR_RATIO, 0.0);
        let prometheus = Prometheus::start(metrics.address()).await;
        prometheus.wait_value(ERROR_RATIO, 0.0).await;
        // The operator lets checks query this Prometheus (on loopback, refused unless listed).
        let allowed = format!("[\"{}\"]", prometheus.url());
        let scene =
            Scene::start_with(prefix, &[("BATON_GATES__PROMETHEUS_ADDRESSES", &allowed)]).await;
        let spec = json!({
            "prometheus": {"address": prometheus.url(), "timeout": "2s"},
            "queries": [{
                "name": "error-ratio",
                "query": ERROR_RATIO,
                "threshold": {"operator": "<", "value": 0.1},
            }],
            "interval": "1s",
            "successThreshold": 1,
            "failureThreshold": 1,
        });
        let mut spec = spec;
        if let (Some(spec), Some(fields)) = (spec.as_object_mut(), fields.as_object()) {
            spec.extend(fields.clone());
        }
        let (client, namespace) = (scene.namespace.client(), scene.namespace.name());
        create_health_check(&client, namespace, "errors", spec).await;
        let names = scene
            .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
                "a" => fixture.annotation(HEALTH_CHECK_ANNOTATION, "errors"),
                _ => fixture,
            })
            .await;
        Self {
            scene,
            metrics,
            prometheus,
            names,
        }
    }

    /// Waits until a pod of `zone` left after `from`: the zone is rolling.
    async fn wait_rolling(&self, zone: &str, from: Instant) {
        wait_until(TIMEOUT, &format!("{zone} rolls"), || async {
            !self.deletions_in(zone, from).is_empty()
        })
        .await;
    }

    /// Pods of `zone` that started terminating (or were deleted) after `from`.
    fn deletions_in(&self, zone: &str, from: Instant) -> Vec<String> {
        self.scene
            .simulator
            .timeline()
            .iter()
            .filter(|transition| {
                transition.at >= from
                    && transition.statefulset.as_deref() == Some(zone)
                    && matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted)
            })
            .map(|transition| transition.pod.clone())
            .collect()
    }

    /// The steps baton took since `from`: each pod it deleted (by uid), when it started going,
    /// in order.
    fn steps_since(&self, from: Instant) -> Vec<(Instant, String, String)> {
        let mut steps: Vec<(Instant, String, String)> = Vec::new();
        for transition in self.scene.simulator.timeline() {
            let deleted = matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted);
            let member = transition
                .statefulset
                .as_ref()
                .is_some_and(|name| self.names.contains(name));
            if transition.at >= from
                && deleted
                && member
                && !steps.iter().any(|(_, _, uid)| *uid == transition.uid)
            {
                steps.push((
                    transition.at,
                    transition.pod.clone(),
                    transition.uid.clone(),
                ));
            }
        }
        steps.sort();
        steps
    }

    /// The last check run stored on the group's first zone.
    async fn last_run(&self) -> Option<(String, String)> {
        let annotations = self.scene.annotations(&self.names[0]).await;
        let state: serde_json::Value =
            serde_json::from_str(annotations.get(CHECK_STATE_ANNOTATION)?).ok()?;
        Some((
            state["lastRun"].as_str()?.to_owned(),
            state["lastOutcome"].as_str()?.to_owned(),
        ))
    }

    async fn halted(&self) -> Vec<String> {
        self.scene.halted(&self.names).await
    }
}

#[tokio::test]
async fn a_health_check_failing_while_zone_b_rolls_halts_before_zone_c_and_resuming_completes() {
    // Given a group gated by a health check that passes
    let checked = CheckedScene::new("health-halt").await;
    let scene = &checked.scene;

    // When the template changes, and the error ratio rises while zone b rolls
    let from = scene.roll_out(&checked.names, "v2").await;
    checked.wait_rolling("ingester-zone-b", from).await;
    checked.metrics.set(ERROR_RATIO, 0.5);

    // Then the group is halted, with a Warning Event naming the query, its value and the zone
    wait_until(TIMEOUT, "the group is halted", || async {
        !checked.halted().await.is_empty()
    })
    .await;
    let halted = checked.halted().await;
    let zone = &halted[0];
    scene
        .wait_event(
            zone,
            "Halted",
            &[&format!(
                "query `{ERROR_RATIO}` returned 0.5 (must be < 0.1)"
            )],
        )
        .await;
    scene
        .wait_event(zone, "Halted", &[&format!("while {zone} rolled")])
        .await;
    // and no pod of zone c was deleted
    assert_eq!(
        checked.deletions_in("ingester-zone-c", from),
        Vec::<String>::new()
    );
    assert_eq!(scene.updated_pods("ingester-zone-c").await, 0);

    // When the metric recovers and a person resumes the group
    checked.metrics.set(ERROR_RATIO, 0.0);
    checked.prometheus.wait_value(ERROR_RATIO, 0.0).await;
    scene.annotate(zone, HALTED_ANNOTATION, None).await;

    // Then the rollout completes
    scene.wait_complete(&checked.names).await;
}

#[tokio::test]
async fn an_empty_statefulset_joining_after_the_canary_does_not_shorten_the_initial_delay() {
    // Given a group gated by a health check that passes, whose runs count only 20 s after a
    // step
    let initial_delay = Duration::from_secs(20);
    let checked = CheckedScene::with("health-newcomer", json!({"initialDelay": "20s"})).await;
    let scene = &checked.scene;

    // When the template changes and baton takes its canary step
    let from = scene.roll_out(&checked.names, "v2").await;
    checked.wait_rolling("ingester-zone-a", from).await;
    let (canary, canary_pod, _) = checked.steps_since(from)[0].clone();

    // and an empty StatefulSet (no replicas) with the group's label, named to sort before the
    // zones, joins the group: whoever may create a StatefulSet there can do that
    let newcomer = "ingester-aaa";
    scene
        .create(&[StatefulSetFixture::new(newcomer)
            .group("ingester")
            .replicas(0)])
        .await;
    // (baton takes it for a member: it stores the check's state on it too)
    wait_until(
        TIMEOUT,
        "baton stores the check state on the newcomer",
        || async {
            scene
                .annotations(newcomer)
                .await
                .contains_key(CHECK_STATE_ANNOTATION)
        },
    )
    .await;
    let joined = Instant::now();
    assert!(
        joined < canary + initial_delay - Duration::from_secs(5),
        "the newcomer joined {:?} after the canary: too late to tell",
        joined.saturating_duration_since(canary)
    );

    // Then the next step comes no earlier than the initial delay after the canary's
    wait_until(TIMEOUT, "the step after the canary", || async {
        checked.steps_since(from).len() >= 2
    })
    .await;
    let (next, next_pod, _) = checked.steps_since(from)[1].clone();
    assert!(
        next + WATCH_SKEW >= canary + initial_delay,
        "{next_pod} went {:?} after the canary {canary_pod}; the initial delay is \
         {initial_delay:?}",
        next.saturating_duration_since(canary)
    );
    // and the rollout goes on: the step after that one comes too
    wait_until(TIMEOUT, "the next step again", || async {
        checked.steps_since(from).len() >= 3
    })
    .await;
    let (third, _, _) = checked.steps_since(from)[2].clone();
    assert!(
        third + WATCH_SKEW >= next + initial_delay,
        "the third step came {:?} after the second",
        third.saturating_duration_since(next)
    );
}

#[tokio::test]
async fn a_stopped_prometheus_passes_nothing_and_halts_nothing_and_the_rollout_continues_when_it_is_back()
 {
    // Given a group gated by a health check whose one failure would halt it
    let mut checked = CheckedScene::new("health-down").await;

    // When the template changes, and Prometheus stops while zone b rolls
    let from = checked.scene.roll_out(&checked.names, "v2").await;
    checked.wait_rolling("ingester-zone-b", from).await;
    checked.prometheus.stop().await;

    // Then the runs are inconclusive
    wait_until(TIMEOUT, "an inconclusive run", || async {
        checked
            .last_run()
            .await
            .is_some_and(|(_, outcome)| outcome.starts_with("inconclusive"))
    })
    .await;
    let fence = Instant::now();
    let (first, _) = checked.last_run().await.expect("a run");
    // and two runs later no pod was deleted since, and nothing is halted
    for run in 0..2 {
        let seen = checked.last_run().await.expect("a run").0;
        wait_until(
            TIMEOUT,
            &format!("inconclusive run {}", run + 2),
            || async {
                checked.last_run().await.is_some_and(|(at, outcome)| {
                    at != seen && at != first && outcome.starts_with("inconclusive")
                })
            },
        )
        .await;
    }
    for zone in ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"] {
        assert_eq!(
            checked.deletions_in(zone, fence),
            Vec::<String>::new(),
            "{zone}"
        );
    }
    assert_eq!(checked.halted().await, Vec::<String>::new());

    // When Prometheus is back
    checked.prometheus.restart().await;

    // Then the rollout completes
    checked.scene.wait_complete(&checked.names).await;
}

#[tokio::test]
async fn a_checks_credentials_are_never_batons_own_secret_nor_sent_over_plain_http_unless_asked_nor_unlabelled()
 {
    // Given a group gated by a check on a Prometheus the operator allowed
    let checked = CheckedScene::new("health-secrets").await;
    let scene = &checked.scene;
    let client = scene.namespace.client();
    let checks: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        scene.namespace.name(),
        &health::api_resource(),
    );
    let set_prometheus = |prometheus: serde_json::Value| {
        let checks = checks.clone();
        async move {
            let patch = json!({"spec": {"prometheus": prometheus}});
            checks
                .patch("errors", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("patching the check");
        }
    };
    let zone_a = checked.names[0].clone();

    // When the check asks for baton's own TLS Secret as its token, and the template changes
    set_prometheus(json!({"bearerTokenSecret": {"name": "baton-webhook-tls", "key": "tls.key"}}))
        .await;
    scene.roll_out(&checked.names, "v2").await;
    // Then it is refused with a Warning saying why
    scene
        .wait_event(
            &zone_a,
            "UnusableHealthCheck",
            &["Secret baton-webhook-tls is baton's own TLS Secret, which no health check may use"],
        )
        .await;

    // When it names a Secret of the namespace instead, to be sent over plain http
    set_prometheus(json!({"bearerTokenSecret": {"name": "prometheus-token", "key": "token"}}))
        .await;
    // Then that is refused, saying how to send it anyway
    scene
        .wait_event(
            &zone_a,
            "UnusableHealthCheck",
            &["set spec.prometheus.allowInsecureCredentials: true to send them anyway"],
        )
        .await;

    // When the check says so explicitly, but the Secret's owner did not opt it in
    let secrets: Api<Secret> = Api::namespaced(client.clone(), scene.namespace.name());
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "prometheus-token"},
        "stringData": {"token": "t0ken"},
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the Secret");
    set_prometheus(json!({"allowInsecureCredentials": true})).await;
    // Then it is refused, naming the label the Secret lacks
    scene
        .wait_event(
            &zone_a,
            "UnusableHealthCheck",
            &["Secret prometheus-token is not labelled baton.dev/health-check-secret=true"],
        )
        .await;
    // and meanwhile no step was taken
    for name in &checked.names {
        assert_eq!(scene.updated_pods(name).await, 0, "{name}");
    }

    // When the Secret's owner opts it in
    let label = json!({"metadata": {"labels": {health::SECRET_OPT_IN_LABEL: "true"}}});
    secrets
        .patch(
            "prometheus-token",
            &PatchParams::default(),
            &Patch::Merge(&label),
        )
        .await
        .expect("labelling the Secret");
    // Then the rollout completes
    scene.wait_complete(&checked.names).await;
}

/// A server (a "Prometheus", a hook's receiver) that accepts connections and never answers:
/// every call waits for its timeout.
struct SilentServer {
    url: String,
    _task: tokio::task::JoinHandle<()>,
}

impl SilentServer {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        Self { url, _task: task }
    }
}

/// Eight groups (as many as reconcile at once) of two ready zones × 1 pod, `<prefix>-<n>`,
/// zone a of each carrying `gate` (a gate key and its value): their member names.
async fn gated_groups(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
    gate: (&str, &str),
) -> Vec<Vec<String>> {
    let mut groups = Vec::new();
    for index in 0..8 {
        let group = format!("{prefix}-{index}");
        let mut names = Vec::new();
        for (zone, fixture) in ["a", "b"].iter().zip(rollout_group(&group, &["a", "b"], 1)) {
            let fixture = match *zone {
                "a" => fixture.annotation(gate.0, gate.1),
                _ => fixture,
            };
            names.push(
                fixture
                    .create(client, ns)
                    .await
                    .metadata
                    .name
                    .unwrap_or_default(),
            );
        }
        wait_group_ready(client, ns, &names).await;
        groups.push(names);
    }
    groups
}

#[tokio::test]
async fn a_dead_prometheus_holds_only_the_groups_whose_checks_query_it() {
    // Given eight groups (as many as reconcile at once) gated by a check on a Prometheus that
    // never answers (queries wait 120 s), and a group gated by a check on a live one
    let metrics = Metrics::start().await;
    metrics.set(ERROR_RATIO, 0.0);
    let prometheus = Prometheus::start(metrics.address()).await;
    prometheus.wait_value(ERROR_RATIO, 0.0).await;
    let dead = SilentServer::start().await;
    let allowed = format!("[\"{}\", \"{}\"]", prometheus.url(), dead.url);
    let scene = Scene::start_with(
        "dead-prometheus",
        &[
            ("BATON_GATES__PROMETHEUS_ADDRESSES", &allowed),
            ("BATON_GATES__MAX_QUERY_TIMEOUT", "120s"),
        ],
    )
    .await;
    let (client, ns) = (scene.namespace.client(), scene.namespace.name().to_owned());
    for (name, address, timeout) in [
        ("errors", prometheus.url(), "2s"),
        ("dead", dead.url.clone(), "120s"),
    ] {
        let spec = json!({
            "prometheus": {"address": address, "timeout": timeout},
            "queries": [{"name": "error-ratio", "query": ERROR_RATIO}],
            "interval": "1s",
        });
        create_health_check(&client, &ns, name, spec).await;
    }
    let stuck = gated_groups(&client, &ns, "stuck", (HEALTH_CHECK_ANNOTATION, "dead")).await;
    let live = scene
        .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
            "a" => fixture.annotation(HEALTH_CHECK_ANNOTATION, "errors"),
            _ => fixture,
        })
        .await;

    // When every group's template changes
    for names in &stuck {
        roll_out(&client, &ns, names, "v2").await;
    }
    scene.roll_out(&live, "v2").await;

    // Then the live group's rollout completes while every query to the dead Prometheus is
    // still waiting: no stuck group has seen a run end, nor deleted a pod
    scene.wait_complete(&live).await;
    for names in &stuck {
        let first = scene.annotations(&names[0]).await;
        let last_run = first
            .get(CHECK_STATE_ANNOTATION)
            .and_then(|state| serde_json::from_str::<serde_json::Value>(state).ok())
            .and_then(|state| state.get("lastRun").cloned());
        assert_eq!(last_run, None, "{}: a dead query ended", names[0]);
        for name in names {
            assert_eq!(scene.updated_pods(name).await, 0, "{name}");
        }
    }
}

#[tokio::test]
async fn hooks_that_never_answer_hold_only_their_own_groups() {
    // Given eight groups (as many as reconcile at once) whose BeforeZone hook is at an address
    // that accepts and never answers (calls wait 120 s), and a group without hooks
    let dead = SilentServer::start().await;
    let allowed = format!("[\"{}\"]", dead.url);
    let scene = Scene::start_with(
        "dead-hooks",
        &[
            ("BATON_GATES__HOOK_ADDRESSES", &allowed),
            ("BATON_KUBERNETES__REQUEST_TIMEOUT", "120s"),
        ],
    )
    .await;
    let (client, ns) = (scene.namespace.client(), scene.namespace.name().to_owned());
    let hook = format!("{}/deploys", dead.url);
    let stuck = gated_groups(&client, &ns, "hooked", (HOOK_ANNOTATION, &hook)).await;
    let free = scene
        .create_group(&ZONES, REPLICAS as i32, |_, fixture| fixture)
        .await;

    // When every group's template changes
    for names in &stuck {
        roll_out(&client, &ns, names, "v2").await;
    }
    scene.roll_out(&free, "v2").await;

    // Then the group without hooks completes while every hook call is still waiting: no hooked
    // group has an answer recorded, nor a pod deleted
    scene.wait_complete(&free).await;
    for names in &stuck {
        let first = scene.annotations(&names[0]).await;
        let answered = first
            .get(HOOK_STATE_ANNOTATION)
            .is_some_and(|state| state.contains("\"last\""));
        assert!(!answered, "{}: a hook call ended: {first:?}", names[0]);
        for name in names {
            assert_eq!(scene.updated_pods(name).await, 0, "{name}");
        }
    }
}

#[tokio::test]
async fn a_ramp_rolls_each_zone_1_then_2_then_4_pods_with_max_unavailable_4() {
    // Given a ready group of 2 zones × 7 pods, max-unavailable 4, with an exponential ramp
    let scene = Scene::start("ramp").await;
    let client = scene.namespace.client();
    let mut names = Vec::new();
    for fixture in rollout_group("ingester", &["a", "b"], 7) {
        let fixture = fixture
            .annotation("rollout-max-unavailable", "4")
            .annotation(RAMP_ANNOTATION, "exponential");
        let created = fixture.create(&client, scene.namespace.name()).await;
        names.push(created.metadata.name.unwrap_or_default());
    }
    wait_group_ready(&client, scene.namespace.name(), &names).await;

    // When the template changes
    let from = scene.roll_out(&names, "v2").await;

    // Then each zone rolls in steps of 1, 2 and 4 pods, with docs/compatibility.md's guarantees
    // held
    scene.wait_complete(&names).await;
    let timeline = scene.simulator.timeline();
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 7, 4)).collect();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();
    for zone in &zones {
        let batches = deletion_batches(&timeline, zone, from);
        assert_eq!(batches, vec![1, 2, 4], "{}", zone.statefulset);
    }
}

// ---------------------------------------------------------------------------------------------
// Hooks
// ---------------------------------------------------------------------------------------------

const HOOK_ADDRESSES: &str = "BATON_GATES__HOOK_ADDRESSES";

/// Settings as the controller's environment takes them.
fn env<'a>(settings: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    settings
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect()
}

/// An HTTP endpoint on loopback standing in for a rollout hook: records every request's JSON
/// body and answers with the status it is told.
struct HookServer {
    url: String,
    calls: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl HookServer {
    async fn start(status: u16) -> Self {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}/rollout", listener.local_addr().expect("bound"));
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = calls.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let Some((_, _, body)) =
                        baton_e2e::http_support::read_request_with_body(&mut stream).await
                    else {
                        return;
                    };
                    let call = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                    recorded.lock().expect("not poisoned").push(call);
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        Self {
            url,
            calls,
            _task: task,
        }
    }

    fn calls(&self) -> Vec<serde_json::Value> {
        self.calls.lock().expect("not poisoned").clone()
    }

    /// The controller setting that lets hooks call this server (on loopback, refused unless
    /// the operator lists it).
    fn allowed(&self) -> [(&'static str, String); 1] {
        [(HOOK_ADDRESSES, format!("[\"{}\"]", self.url))]
    }
}

#[tokio::test]
async fn hooks_are_called_before_and_after_each_zone_in_order_with_the_documented_body() {
    // Given a ready group whose hook answers 200
    let hook = HookServer::start(200).await;
    let scene = Scene::start_with("hooks", &env(&hook.allowed())).await;
    let names = scene
        .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
            "a" => fixture.annotation(HOOK_ANNOTATION, &hook.url),
            _ => fixture,
        })
        .await;
    let before: Vec<String> = {
        let mut revisions = Vec::new();
        for name in &names {
            revisions.push(
                rollout_state(&scene.namespace.client(), scene.namespace.name(), name)
                    .await
                    .update_revision,
            );
        }
        revisions
    };

    // When the template changes
    scene.roll_out(&names, "v2").await;

    // Then the rollout completes, and the hook was called before and after each zone, in order
    scene.wait_complete(&names).await;
    wait_until(TIMEOUT, "the last zone's AfterZone hook call", || async {
        hook.calls()
            .last()
            .is_some_and(|call| call["zone"] == "ingester-zone-c" && call["phase"] == "AfterZone")
    })
    .await;
    let calls = hook.calls();
    let seen: Vec<(String, String)> = calls
        .iter()
        .map(|call| {
            (
                call["zone"].as_str().unwrap_or_default().to_owned(),
                call["phase"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = names
        .iter()
        .flat_map(|name| {
            [
                (name.clone(), "BeforeZone".to_owned()),
                (name.clone(), "AfterZone".to_owned()),
            ]
        })
        .collect();
    assert_eq!(seen, expected);
    // with the documented body
    for (call, (name, old)) in calls.iter().step_by(2).zip(names.iter().zip(&before)) {
        let new = rollout_state(&scene.namespace.client(), scene.namespace.name(), name)
            .await
            .update_revision;
        assert_eq!(
            *call,
            json!({
                "group": "ingester",
                "namespace": scene.namespace.name(),
                "zone": name,
                "phase": "BeforeZone",
                "fromRevision": old,
                "toRevision": new,
            })
        );
    }
}

#[tokio::test]
async fn a_failing_hook_is_retried_and_then_halts_the_group() {
    // Given a ready group whose hook answers 500
    let hook = HookServer::start(500).await;
    let scene = Scene::start_with("hook-fails", &env(&hook.allowed())).await;
    let names = scene
        .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
            "a" => fixture.annotation(HOOK_ANNOTATION, &hook.url),
            _ => fixture,
        })
        .await;

    // When the template changes
    scene.roll_out(&names, "v2").await;

    // Then the hook is tried 5 times, and the group halts naming the hook and its answer
    scene
        .wait_event(
            "ingester-zone-a",
            "Halted",
            &[&format!(
                "hook BeforeZone of ingester-zone-a ({}) failed 5 times: HTTP 500",
                hook.url
            )],
        )
        .await;
    assert_eq!(hook.calls().len(), 5);
    // and no pod was deleted
    for name in &names {
        assert_eq!(scene.updated_pods(name).await, 0, "{name}");
    }
}

#[tokio::test]
async fn a_hook_at_an_address_the_operator_did_not_allow_is_never_called_and_the_group_says_why() {
    // Given a group whose hook is on loopback (the leader's own ports live there), with a token
    // in its URL, and an operator who allowed no such address
    let hook = HookServer::start(200).await;
    let scene = Scene::start("hook-refused").await;
    let url = format!("{}?token=s3cret", hook.url);
    let names = scene
        .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
            "a" => fixture.annotation(HOOK_ANNOTATION, &url),
            _ => fixture,
        })
        .await;

    // When the template changes
    scene.roll_out(&names, "v2").await;

    // Then the group waits with a Warning saying why, the URL shown without its token
    scene
        .wait_event(
            "ingester-zone-a",
            "RefusedHook",
            &[
                "is a loopback, link-local, unspecified or metadata-service address; only \
             gates.hook_addresses can permit it",
            ],
        )
        .await;
    let events = baton_e2e::controller_support::events_about(
        &scene.namespace.client(),
        scene.namespace.name(),
        "ingester-zone-a",
    )
    .await;
    assert!(
        events.iter().all(|(_, note)| !note.contains("s3cret")),
        "no Event shows the token: {events:?}"
    );
    // and the hook was never called, and no pod was deleted
    assert_eq!(hook.calls(), Vec::<serde_json::Value>::new());
    for name in &names {
        assert_eq!(scene.updated_pods(name).await, 0, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// baton's memory is baton's
// ---------------------------------------------------------------------------------------------

/// A scene whose controller runs as its service account with deploy/'s roles, behind the state
/// and record guards as deploy/ ships them (a webhook replica letting only that identity write
/// what baton remembers).
struct Guarded {
    scene: Scene,
    /// A client authenticating as the controller's service account.
    controller_client: kube::Client,
    _replica: WebhookReplica,
    _guards: StateGuardConfiguration,
}

impl Guarded {
    async fn start(prefix: &str) -> Self {
        let control_plane = ControlPlane::shared().await;
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let (client, ns) = (namespace.client(), namespace.name().to_owned());
        bind_deploy_roles(&client, &ns, Binary::Controller)
            .await
            .expect("binding the controller's roles");
        let account = Binary::Controller.service_account();
        let kubeconfig = control_plane
            .service_account_kubeconfig(SERVICE_ACCOUNT_NAMESPACE, account)
            .expect("the controller's service account");
        let controller = Controller::start_as(kubeconfig, &ns, &[]).await;
        let controller_client = baton_e2e::control_plane::supervisor::client_from(kubeconfig)
            .await
            .expect("a client as the controller");
        let tls = TestTls::generate().expect("a test CA");
        let writers = format!("[\"system:serviceaccount:{SERVICE_ACCOUNT_NAMESPACE}:{account}\"]");
        let replica = WebhookReplica::start_with(
            control_plane,
            &tls,
            &ns,
            &[
                ("BATON_WEBHOOK__STATE_WRITERS", &writers),
                ("BATON_WEBHOOK__RECORD_WRITERS", &writers),
            ],
        )
        .await
        .expect("baton-webhook starts");
        let guards = StateGuardConfiguration::register(control_plane, &ns, &tls, &replica)
            .await
            .expect("registering the guards");
        // The API server picks configurations up asynchronously: until a forged member and a
        // forged record are refused.
        let statefulsets: Api<StatefulSet> = namespace.api();
        wait_until(TIMEOUT, "the API server calls the state guard", || async {
            let forged = StatefulSetFixture::new("probe")
                .label("rollout-group", "probe")
                .annotation(CHECK_STATE_ANNOTATION, "{}");
            match statefulsets
                .create(&PostParams::default(), &forged.build())
                .await
            {
                Err(refused) => refused.to_string().contains("only baton's controller sets"),
                Ok(_) => {
                    let _ = statefulsets.delete("probe", &Default::default()).await;
                    false
                }
            }
        })
        .await;
        let config_maps: Api<ConfigMap> = namespace.api();
        wait_until(TIMEOUT, "the API server calls the guards", || async {
            let probe: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": "probe", "labels": {"app.kubernetes.io/managed-by": "baton"}},
            }))
            .expect("a ConfigMap");
            match config_maps.create(&PostParams::default(), &probe).await {
                Err(refused) => refused.to_string().contains("one of baton's records"),
                Ok(_) => {
                    let _ = config_maps.delete("probe", &Default::default()).await;
                    false
                }
            }
        })
        .await;
        Self {
            scene: Scene {
                control_plane,
                namespace,
                simulator,
                controller,
            },
            controller_client,
            _replica: replica,
            _guards: guards,
        }
    }
}

#[tokio::test]
async fn a_person_cannot_forge_batons_memory_to_skip_a_soak_while_batons_own_writes_go_through() {
    // Given baton run with its deploy/ roles (the controller as its service account), and the
    // guards as deploy/ ships them, letting that identity alone write what baton remembers
    let guarded = Guarded::start("state-guard").await;
    let (scene, statefulsets) = (&guarded.scene, guarded.scene.namespace.api::<StatefulSet>());
    let forged_member = || {
        StatefulSetFixture::new("forged")
            .label("rollout-group", "ingester")
            .annotation(CHECK_STATE_ANNOTATION, r#"{"passes":99}"#)
    };

    // and a group whose zone a soaks an hour once rolled
    let names = scene
        .create_group(&ZONES, REPLICAS as i32, |zone, fixture| match zone {
            "a" => fixture.annotation(SOAK_ANNOTATION, "1h"),
            _ => fixture,
        })
        .await;

    // When the template changes, baton rolls zone a and starts the soak: its own gate state
    // goes through the guard
    scene.roll_out(&names, "v2").await;
    scene
        .wait_event("ingester-zone-b", "Soak", &["ingester-zone-b starts in"])
        .await;
    assert!(
        scene
            .annotations(&names[0])
            .await
            .contains_key(STATE_ANNOTATION)
    );

    // When a person writes zone b's gate state as cleared, to skip the soak
    let forged = json!({"metadata": {"annotations": {
        STATE_ANNOTATION: r#"{"revision":"any","clearedAt":"2026-01-01T00:00:00Z"}"#,
    }}});
    let refused = statefulsets
        .patch(&names[1], &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .expect_err("a forged gate state is refused")
        .to_string();
    // Then it is refused, saying whose it is and what may be done instead
    assert!(
        refused.contains(
            "baton.dev/gate-state is baton's memory of the rollout, which only baton's controller \
             sets"
        ) && refused.contains("remove the annotation to make baton start afresh"),
        "{refused}"
    );
    // and so is a new member bringing a forged check state
    let created = statefulsets
        .create(&PostParams::default(), &forged_member().build())
        .await
        .expect_err("a member with forged state is refused")
        .to_string();
    assert!(created.contains("baton.dev/check-state"), "{created}");
    // and so is the state written through the status subresource (whose updates keep changes
    // to metadata): refused, or at least never stored
    match statefulsets
        .patch_status(&names[1], &PatchParams::default(), &Patch::Merge(&forged))
        .await
    {
        Err(refused) => assert!(
            refused.to_string().contains("only baton's controller sets"),
            "{refused}"
        ),
        Ok(written) => assert!(
            written
                .metadata
                .annotations
                .unwrap_or_default()
                .get(STATE_ANNOTATION)
                .is_none_or(|state| !state.contains("2026-01-01")),
            "a gate state forged through the status subresource was stored"
        ),
    }
    // and so is a StatefulSet made outside every group with forged state, then labelled in
    let outsider = StatefulSetFixture::new("outsider")
        .annotation(CHECK_STATE_ANNOTATION, r#"{"passes":99}"#)
        .build();
    statefulsets
        .create(&PostParams::default(), &outsider)
        .await
        .expect("outside every group, nothing is baton's");
    let join = json!({"metadata": {"labels": {"rollout-group": "ingester"}}});
    let joined = statefulsets
        .patch("outsider", &PatchParams::default(), &Patch::Merge(&join))
        .await
        .expect_err("state labelled into a group is refused")
        .to_string();
    assert!(joined.contains("baton.dev/check-state"), "{joined}");
    // and zone b is still soaking, not one pod updated
    assert_eq!(scene.updated_pods(&names[1]).await, 0);
    let stored = scene.annotations(&names[1]).await;
    assert!(
        stored
            .get(STATE_ANNOTATION)
            .is_none_or(|state| !state.contains("2026-01-01")),
        "{stored:?}"
    );
}

#[tokio::test]
async fn a_person_cannot_rewrite_batons_records_while_batons_own_writes_go_through() {
    // Given baton behind the guards as deploy/ ships them
    let guarded = Guarded::start("record-guard").await;
    let namespace = &guarded.scene.namespace;

    // When baton writes a group's downscale ledger, as the controller does after a downscale
    let as_baton: Api<ConfigMap> =
        Api::namespaced(guarded.controller_client.clone(), namespace.name());
    let name = baton_core::ledger::ledger_name("ingester");
    let ledger = baton_core::ledger::Ledger {
        resource_version: None,
        data: std::collections::BTreeMap::from([(
            "ingester-zone-a".to_owned(),
            r#"{"at":"2026-11-25T12:00:00Z"}"#.to_owned(),
        )]),
    };
    let written = baton_shared::ledger::write(&as_baton, &name, "ingester", &ledger)
        .await
        .expect("baton writes its ledger");
    assert!(
        matches!(written, baton_shared::ledger::Written::Done(_)),
        "{written:?}"
    );

    // Then a person cannot remove its entry (which would lift the zone's min-time)
    let config_maps: Api<ConfigMap> = namespace.api();
    let lift = json!({"data": {"ingester-zone-a": null}});
    let refused = config_maps
        .patch(&name, &PatchParams::default(), &Patch::Merge(&lift))
        .await
        .expect_err("removing a ledger entry is refused")
        .to_string();
    assert!(
        refused.contains(&format!(
            "ConfigMap {name} is one of baton's records (app.kubernetes.io/managed-by=baton), \
             which only baton writes"
        )),
        "{refused}"
    );
    // nor forge an eviction record, nor unlabel the ledger to edit it later
    let forged: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "baton-zpdb-ingester", "labels": {"app.kubernetes.io/managed-by": "baton"}},
        "data": {"ingester-zone-a-0": r#"{"allowedAt":"2026-11-25T12:00:00Z","request":"x"}"#},
    }))
    .expect("a ConfigMap");
    assert!(
        config_maps
            .create(&PostParams::default(), &forged)
            .await
            .is_err()
    );
    let unlabel = json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}});
    assert!(
        config_maps
            .patch(&name, &PatchParams::default(), &Patch::Merge(&unlabel))
            .await
            .is_err()
    );
    // nor freeze it (every later write of baton's would fail: every downscale denied)
    let freeze = json!({"immutable": true});
    assert!(
        config_maps
            .patch(&name, &PatchParams::default(), &Patch::Merge(&freeze))
            .await
            .is_err()
    );
    // but annotating it is anyone's
    let note = json!({"metadata": {"annotations": {"note": "seen"}}});
    config_maps
        .patch(&name, &PatchParams::default(), &Patch::Merge(&note))
        .await
        .expect("annotations are anyone's");
    let kept = config_maps.get(&name).await.expect("the ledger");
    assert_eq!(kept.data, Some(ledger.data));

    // And when a person deletes it and creates their own under its name, unlabelled, baton
    // does not read it as its record
    config_maps
        .delete(&name, &Default::default())
        .await
        .expect("deleting a whole record is not judged");
    let impostor: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name},
        "data": {"ingester-zone-a": r#"{"at":"2020-01-01T00:00:00Z"}"#},
    }))
    .expect("a ConfigMap");
    config_maps
        .create(&PostParams::default(), &impostor)
        .await
        .expect("an unlabelled ConfigMap is anyone's");
    let read = baton_shared::ledger::read(&config_maps, &name).await;
    assert!(
        matches!(
            &read,
            Err(baton_shared::ledger::ReadError::NotBatons { .. })
        ),
        "{read:?}"
    );
    assert!(
        read.unwrap_err()
            .to_string()
            .contains("is not one of baton's records"),
    );
}
