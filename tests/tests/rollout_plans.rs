//! Rollout plans on the real control plane, each a scenario: given a rollout group whose
//! members ask for batches, approvals, a health check that compares with the baseline or only
//! warns, or a bypass of the gates, when its template changes, then baton rolls as asked, with
//! the availability guarantees held throughout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use baton_core::gates::{
    APPROVAL_ANNOTATION, APPROVED_ANNOTATION, BATCHES_ANNOTATION, BYPASS_ANNOTATION,
    HALTED_ANNOTATION, HEALTH_CHECK_ANNOTATION, SOAK_ANNOTATION,
};
use baton_e2e::controller_support::rollout_state;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::plugin_support::{Run, kubectl_baton};
use baton_e2e::prometheus_support::{Metrics, Prometheus, create_health_check};
use baton_e2e::timeline::{Zone, deletion_batches};
use baton_e2e::{PodEvent, PodTransition, Scene, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const MAX_UNAVAILABLE: &str = "rollout-max-unavailable";

/// A namespace with the pod simulator and a controller, and the group of the scenario.
/// A group of these scenarios on its scene: the StatefulSets created, each of `replicas` pods.
struct Group {
    scene: Scene,
    names: Vec<String>,
    replicas: u32,
}

impl std::ops::Deref for Group {
    type Target = Scene;
    fn deref(&self) -> &Scene {
        &self.scene
    }
}

impl Group {
    /// Creates group `ingester` of `zones` × `replicas` pods, `annotate` deciding each zone's
    /// annotations, with the controller configured with `extra`; returns once every pod is
    /// ready.
    async fn new(
        prefix: &str,
        extra: &[(&str, &str)],
        zones: &[&str],
        replicas: u32,
        annotate: impl Fn(&str, StatefulSetFixture) -> StatefulSetFixture,
    ) -> Self {
        let scene = Scene::start_with(prefix, extra).await;
        let names = scene
            .create_group(zones, i32::try_from(replicas).expect("few"), annotate)
            .await;
        Self {
            scene,
            names,
            replicas,
        }
    }

    fn namespace(&self) -> &str {
        self.scene.name()
    }

    async fn roll_out(&self, version: &str) -> Instant {
        self.scene.roll_out(&self.names, version).await
    }

    async fn wait_complete(&self) {
        self.scene.wait_complete(&self.names).await;
    }

    /// `kubectl baton <args> -n <namespace>`, as a person runs it.
    async fn kubectl_baton(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend(["-n", self.namespace()]);
        kubectl_baton(self.scene.control_plane.kubeconfig_path(), &all).await
    }

    /// The timeline since `from` holds docs/compatibility.md's guarantees, every zone rolling
    /// with `max_unavailable`.
    fn check_guarantees(&self, from: Instant, max_unavailable: u32) -> Vec<Zone> {
        self.scene
            .check_guarantees(&self.names, self.replicas, max_unavailable, from)
    }

    /// The members carrying `baton.dev/halted`.
    async fn halted(&self) -> Vec<String> {
        self.scene.halted(&self.names).await
    }

    /// The pods that started leaving (Terminating or deleted) since `from`, in order, as
    /// (StatefulSet, pod).
    fn departures(&self, from: Instant) -> Vec<(String, String)> {
        self.departures_where(from, |_| true)
    }

    /// As [`Group::departures`], only the pods that ran another revision than `old[member]`: the
    /// new pods a rollback takes back, not an old pod the rollout took just before.
    fn departures_of_new_pods(
        &self,
        from: Instant,
        old: &BTreeMap<String, String>,
    ) -> Vec<(String, String)> {
        self.departures_where(from, |transition| {
            let member = transition.statefulset.clone().unwrap_or_default();
            transition.revision.as_ref() != old.get(&member)
        })
    }

    /// The departures since `from` of the pods `keep` takes, each pod once, in order.
    fn departures_where(
        &self,
        from: Instant,
        keep: impl Fn(&PodTransition) -> bool,
    ) -> Vec<(String, String)> {
        let mut seen = std::collections::BTreeSet::new();
        self.scene
            .simulator
            .timeline()
            .iter()
            .filter(|transition| {
                transition.at >= from
                    && matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted)
            })
            .filter(|transition| seen.insert(transition.uid.clone()))
            .filter(|transition| keep(transition))
            .map(|transition| {
                (
                    transition.statefulset.clone().unwrap_or_default(),
                    transition.pod.clone(),
                )
            })
            .collect()
    }

    /// Every pod of every member runs `revisions[member]`, and it is the update revision.
    async fn assert_all_at(&self, revisions: &BTreeMap<String, String>) {
        let client = self.scene.namespace.client();
        for name in &self.names {
            let state = rollout_state(&client, self.namespace(), name).await;
            assert_eq!(state.update_revision, revisions[name], "{name}: {state:?}");
            assert!(
                state
                    .pod_revisions
                    .values()
                    .all(|revision| *revision == revisions[name]),
                "{name}: {state:?}"
            );
        }
    }

    /// The update revision of every member, by name.
    async fn update_revisions(&self) -> BTreeMap<String, String> {
        let mut revisions = BTreeMap::new();
        for name in &self.names {
            let (_, update) = self.revisions(name).await;
            revisions.insert(name.clone(), update);
        }
        revisions
    }

    /// The image of `name`'s pod template.
    async fn image(&self, name: &str) -> String {
        let statefulset: StatefulSet = self
            .scene
            .namespace
            .api::<StatefulSet>()
            .get(name)
            .await
            .expect("the StatefulSet exists");
        statefulset
            .spec
            .and_then(|spec| spec.template.spec)
            .and_then(|spec| spec.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default()
    }

    /// The controller's counter `name` with `labels` (each `key="value"`), 0 when absent.
    async fn counter(&self, name: &str, labels: &[&str]) -> f64 {
        let text = self.scene.controller.metrics().await;
        text.lines()
            .filter(|line| line.starts_with(&format!("{name}{{")))
            .filter(|line| labels.iter().all(|label| line.contains(label)))
            .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }
}

#[tokio::test]
async fn batches_of_1_then_50_then_100_percent_of_a_4_pod_zone_are_the_steps_in_the_timeline() {
    // Given a group of 2 zones × 4 pods, max-unavailable 4, in batches "1, 50%, 100%"
    let group = Group::new("batches", &[], &["a", "b"], 4, |zone, fixture| {
        let fixture = fixture.annotation(MAX_UNAVAILABLE, "4");
        match zone {
            "a" => fixture.annotation(BATCHES_ANNOTATION, "1, 50%, 100%"),
            _ => fixture,
        }
    })
    .await;

    // When the template changes
    let from = group.roll_out("v2").await;

    // Then each zone deletes 1 pod, then 1, then the last 2, each batch once the zone is
    // available again, never two zones at once
    group.wait_complete().await;
    let zones = group.check_guarantees(from, 4);
    let timeline = group.scene.simulator.timeline();
    for zone in &zones {
        assert_eq!(
            deletion_batches(&timeline, zone, from),
            vec![1, 1, 2],
            "{}",
            zone.statefulset
        );
    }
}

#[tokio::test]
async fn approval_after_the_canary_stops_there_until_a_person_approves_and_a_new_revision_asks_again()
 {
    // Given a group of 3 zones × 3 pods asking for approval after the canary, in batches
    // "1, 100%"
    let group = Group::new("approval", &[], &["a", "b", "c"], 3, |zone, fixture| {
        let fixture = fixture.annotation(MAX_UNAVAILABLE, "3");
        match zone {
            "a" => fixture
                .annotation(APPROVAL_ANNOTATION, "canary")
                .annotation(BATCHES_ANNOTATION, "1, 100%"),
            _ => fixture,
        }
    })
    .await;
    let zone_a = group.names[0].clone();

    // When the template changes
    let from = group.roll_out("v2").await;

    // Then the canary (1 pod of zone a) goes, and the group awaits approval: `wait` says so
    // with its own exit code, as do the status and an Event
    group
        .kubectl_baton(&["wait", "ingester", "--timeout", "2m"])
        .await
        .exited(6)
        .complains(&[
            "rollout group ingester awaits approval",
            "the rollout past its canary",
        ]);
    assert_eq!(group.updated_pods(&zone_a).await, 1);
    for other in &group.names[1..] {
        assert_eq!(group.updated_pods(other).await, 0, "{other}");
    }
    let status = group
        .kubectl_baton(&["status", "ingester", "-o", "json"])
        .await;
    let document: serde_json::Value = serde_json::from_str(&status.exited(0).stdout).expect("JSON");
    assert_eq!(document["groups"][0]["phase"], "awaitingApproval");
    assert_eq!(
        document["groups"][0]["zones"][0]["phase"],
        "awaitingApproval"
    );
    group
        .wait_event(
            &zone_a,
            "AwaitingApproval",
            &["approve with kubectl baton approve ingester"],
        )
        .await;

    // When someone writes the awaited step on one member only (as one who may create a
    // StatefulSet in the group, but not touch its members, could)
    let zone_b = group.names[1].clone();
    let revisions: Vec<String> = group.update_revisions().await.into_values().collect();
    let canary_step = format!("canary/{}", revisions.join("+"));
    group
        .annotate(&zone_b, APPROVED_ANNOTATION, Some(&canary_step))
        .await;
    // Then it approves nothing, and is named
    group
        .wait_event(&zone_b, "InvalidAnnotation", &["one member alone"])
        .await;
    group
        .kubectl_baton(&["wait", "ingester", "--timeout", "0"])
        .await
        .exited(6);
    assert_eq!(group.updated_pods(&zone_b).await, 0);

    // When a person approves a step they did not see awaited, nothing is written
    group
        .kubectl_baton(&[
            "approve",
            "ingester",
            "--step",
            "canary/an-earlier-revision",
        ])
        .await
        .exited(1)
        .complains(&[&format!(
            "awaits {canary_step}, not canary/an-earlier-revision"
        )]);

    // When a person approves the step they saw awaited
    let approved = group
        .kubectl_baton(&["approve", "ingester", "--step", &canary_step])
        .await;
    approved.exited(0).says(&[
        "approved the rollout past its canary of rollout group ingester",
        APPROVED_ANNOTATION,
        &format!("statefulset/{zone_b}"),
        "(by admin)",
    ]);
    // Then every member carries it, with who approved as the API server knows them
    for name in &group.names {
        let annotations = group.annotations(name).await;
        assert_eq!(annotations.get(APPROVED_ANNOTATION), Some(&canary_step));
        assert_eq!(
            annotations.get("baton.dev/approved-by").map(String::as_str),
            Some("admin")
        );
    }

    // Then the rollout goes on to the end, within the guarantees
    group
        .kubectl_baton(&["wait", "ingester", "--timeout", "2m"])
        .await
        .exited(0);
    group.wait_complete().await;
    group.check_guarantees(from, 3);
    // and there is nothing left to approve
    group
        .kubectl_baton(&["approve", "ingester"])
        .await
        .exited(1)
        .complains(&["rollout group ingester awaits no approval: nothing written"]);

    // When the template changes again, the old approval still written
    let approval = group.annotations(&zone_a).await[APPROVED_ANNOTATION].clone();
    group.roll_out("v3").await;

    // Then it does not approve the new revision: its canary goes, then the group waits again
    group
        .kubectl_baton(&["wait", "ingester", "--timeout", "2m"])
        .await
        .exited(6)
        .complains(&["the rollout past its canary"]);
    assert_eq!(group.updated_pods(&zone_a).await, 1);
    assert_eq!(
        group.annotations(&zone_a).await.get(APPROVED_ANNOTATION),
        Some(&approval),
        "the v2 approval is still there, and void"
    );
}

/// A real Prometheus scraping values the test serves, allowed as a check's destination.
struct Checked {
    metrics: Metrics,
    prometheus: Prometheus,
    allowed: String,
}

impl Checked {
    async fn start(exposition: &str, settled: (&str, f64)) -> Self {
        let metrics = Metrics::start().await;
        metrics.serve(exposition);
        let prometheus = Prometheus::start(metrics.address()).await;
        prometheus.wait_value(settled.0, settled.1).await;
        // The operator lets checks query this Prometheus (on loopback, refused unless listed).
        let allowed = format!("[\"{}\"]", prometheus.url());
        Self {
            metrics,
            prometheus,
            allowed,
        }
    }

    /// A check that [`ERROR_RATIO`] stays below 0.1, run every second, failing at the first
    /// failure with `on_failure`.
    fn error_ratio_check(&self, on_failure: &str) -> serde_json::Value {
        json!({
            "prometheus": {"address": self.prometheus.url(), "timeout": "2s"},
            "queries": [{
                "name": "error-ratio",
                "query": ERROR_RATIO,
                "threshold": {"operator": "<", "value": 0.1},
            }],
            "interval": "1s",
            "failureThreshold": 1,
            "onFailure": on_failure,
        })
    }

    fn settings(&self) -> [(&'static str, &str); 1] {
        [("BATON_GATES__PROMETHEUS_ADDRESSES", self.allowed.as_str())]
    }
}

const ERROR_RATIO: &str = "error_ratio";

#[tokio::test]
async fn a_failing_check_whose_on_failure_is_warn_never_holds_a_step_and_tells_each_failure() {
    // Given a group whose health check fails, with onFailure Warn
    let checked = Checked::start(
        &format!("# TYPE {ERROR_RATIO} gauge\n{ERROR_RATIO} 0.5\n"),
        (ERROR_RATIO, 0.5),
    )
    .await;
    let group = Group::new(
        "warn",
        &checked.settings(),
        &["a", "b"],
        2,
        |zone, fixture| match zone {
            "a" => fixture.annotation(HEALTH_CHECK_ANNOTATION, "trial"),
            _ => fixture,
        },
    )
    .await;
    let spec = checked.error_ratio_check("Warn");
    let client = group.scene.namespace.client();
    create_health_check(&client, group.namespace(), "trial", spec).await;

    // When the template changes
    let from = group.roll_out("v2").await;

    // Then the rollout completes, nothing halted, and each failure is a Warning Event and
    // counted
    group.wait_complete().await;
    group.check_guarantees(from, 1);
    assert_eq!(group.halted().await, Vec::<String>::new());
    let told = group.names.iter().map(String::as_str).collect::<Vec<_>>();
    wait_until(TIMEOUT, "a HealthCheckWarning Event", || async {
        let client = group.scene.namespace.client();
        let mut found = false;
        for name in &told {
            let events =
                baton_e2e::controller_support::events_about(&client, group.namespace(), name).await;
            found |= events.iter().any(|(reason, note)| {
                reason == "HealthCheckWarning"
                    && note.contains("health check trial failed")
                    && note.contains("returned 0.5 (must be < 0.1)")
            });
        }
        found
    })
    .await;
    let warnings = group
        .counter(
            "baton_rollout_gate_notices_total",
            &[
                "rollout_group=\"ingester\"",
                "reason=\"HealthCheckWarning\"",
            ],
        )
        .await;
    assert!(warnings >= 1.0, "{warnings}");
    drop(checked.metrics);
}

/// What the test serves: each revision's error ratio, labelled with its revision.
fn by_revision(values: &[(&str, f64)]) -> String {
    let mut text = "# TYPE errors gauge\n".to_owned();
    for (revision, value) in values {
        text.push_str(&format!("errors{{revision=\"{revision}\"}} {value}\n"));
    }
    text
}

#[tokio::test]
async fn a_check_comparing_new_pods_with_the_baseline_passes_a_good_version_and_halts_a_bad_one() {
    // Given a group whose check compares the new revision's error ratio with the baseline's
    // (the revision before the rollout), and a person's halt while the series are set up
    let checked = Checked::start("# TYPE ready gauge\nready 1\n", ("ready", 1.0)).await;
    let group = Group::new(
        "baseline",
        &checked.settings(),
        &["a", "b"],
        2,
        |zone, fixture| match zone {
            "a" => fixture
                .annotation(HEALTH_CHECK_ANNOTATION, "versus-baseline")
                .annotation(HALTED_ANNOTATION, "setting up the series"),
            _ => fixture,
        },
    )
    .await;
    let spec = json!({
        "prometheus": {"address": checked.prometheus.url(), "timeout": "2s"},
        "queries": [{
            "name": "worse-than-baseline",
            "query": "max(errors{revision=\"{{revision}}\"}) / max(errors{revision=\"{{baseline_revision}}\"})",
            "threshold": {"operator": "<", "value": 1.5},
        }],
        "interval": "1s",
        "failureThreshold": 2,
    });
    let client = group.scene.namespace.client();
    create_health_check(&client, group.namespace(), "versus-baseline", spec).await;
    let zone_a = group.names[0].clone();

    // When a good version rolls out (its error ratio 1.25 times the baseline's)
    group.roll_out("v2").await;
    let mut series = Vec::new();
    for name in &group.names {
        let (current, update) = group.revisions(name).await;
        series.push((current, 0.04));
        series.push((update, 0.05));
    }
    let served: Vec<(&str, f64)> = series.iter().map(|(r, v)| (r.as_str(), *v)).collect();
    checked.metrics.serve(&by_revision(&served));
    let (_, update) = group.revisions(&group.names[1]).await;
    checked
        .prometheus
        .wait_value(&format!("errors{{revision=\"{update}\"}}"), 0.05)
        .await;
    group.annotate(&zone_a, HALTED_ANNOTATION, None).await;

    // Then it passes, and the rollout completes
    group.wait_complete().await;
    assert_eq!(group.halted().await, Vec::<String>::new());

    // When a bad version rolls out (4 times the baseline's, now the version before it), its
    // series set up while a person halts the group
    group
        .annotate(&zone_a, HALTED_ANNOTATION, Some("setting up the series"))
        .await;
    group.roll_out("v3").await;
    let mut bad = Vec::new();
    for name in &group.names {
        let (current, update) = group.revisions(name).await;
        bad.push((current, 0.05));
        bad.push((update, 0.2));
    }
    let served: Vec<(&str, f64)> = bad.iter().map(|(r, v)| (r.as_str(), *v)).collect();
    checked.metrics.serve(&by_revision(&served));
    let (_, update) = group.revisions(&group.names[1]).await;
    checked
        .prometheus
        .wait_value(&format!("errors{{revision=\"{update}\"}}"), 0.2)
        .await;
    group.annotate(&zone_a, HALTED_ANNOTATION, None).await;

    // Then the group halts before zone a's canary, naming the query with both revisions
    wait_until(TIMEOUT, "the group halts", || async {
        !group.halted().await.is_empty()
    })
    .await;
    let (baseline, new) = group.revisions(&zone_a).await;
    let why = group.annotations(&zone_a).await[HALTED_ANNOTATION].clone();
    assert!(
        why.contains(&format!("errors{{revision=\"{new}\"}}"))
            && why.contains(&format!("errors{{revision=\"{baseline}\"}}"))
            && why.contains("returned 4"),
        "{why}"
    );
    for name in &group.names {
        assert_eq!(group.updated_pods(name).await, 0, "{name}");
    }
}

#[tokio::test]
async fn an_expired_bypass_bypasses_nothing_and_one_in_force_skips_the_soak_telling_each_step() {
    // Given a group with a 1h soak and a bypass that expired a minute ago, on every member
    let expired = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60)).to_string();
    let group = Group::new("bypass", &[], &["a", "b"], 2, |zone, fixture| match zone {
        "a" => fixture
            .annotation(SOAK_ANNOTATION, "1h")
            .annotation(BYPASS_ANNOTATION, &expired),
        _ => fixture.annotation(BYPASS_ANNOTATION, &expired),
    })
    .await;
    let (zone_a, zone_b) = (group.names[0].clone(), group.names[1].clone());

    // When the template changes
    let from = group.roll_out("v2").await;

    // Then zone a rolls, and zone b soaks: the expired bypass bypasses nothing
    let client = group.scene.namespace.client();
    wait_until(TIMEOUT, "zone a is complete", || async {
        rollout_state(&client, group.namespace(), &zone_a)
            .await
            .is_complete()
    })
    .await;
    group
        .wait_event(&zone_b, "Soak", &[&format!("soaking after {zone_a}")])
        .await;
    assert_eq!(group.updated_pods(&zone_b).await, 0);

    // When the expired bypass is removed from zone a and a bypass for the next 10 minutes is
    // set on zone b alone, it bypasses nothing and is named (one member speaks for nobody)
    let until = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(600)).to_string();
    group.annotate(&zone_a, BYPASS_ANNOTATION, None).await;
    group
        .annotate(&zone_b, BYPASS_ANNOTATION, Some(&until))
        .await;
    group
        .wait_event(&zone_b, "InvalidAnnotation", &["one member alone"])
        .await;
    assert_eq!(group.updated_pods(&zone_b).await, 0);

    // When a person sets it on every member
    group
        .annotate(&zone_a, BYPASS_ANNOTATION, Some(&until))
        .await;

    // Then zone b starts without the rest of the soak, and the step that went without it is
    // told, naming the bypass
    group.wait_complete().await;
    group.check_guarantees(from, 1);
    group
        .wait_event(
            &zone_b,
            "GateBypassed",
            &[
                &format!("the soak after {zone_a}"),
                &format!("{BYPASS_ANNOTATION} is {until}"),
            ],
        )
        .await;
}

/// The ordinals of `statefulset`'s pods in `departures`, in order.
fn ordinals(departures: &[(String, String)], statefulset: &str) -> Vec<u32> {
    departures
        .iter()
        .filter(|(name, _)| name == statefulset)
        .filter_map(|(_, pod)| pod.rsplit_once('-')?.1.parse().ok())
        .collect()
}

#[tokio::test]
async fn a_check_failing_in_zone_b_rolls_the_group_back_zone_b_first_newest_pods_first() {
    // Given a group of 3 zones × 3 pods whose health check rolls it back when it fails
    let checked = Checked::start(
        &format!("# TYPE {ERROR_RATIO} gauge\n{ERROR_RATIO} 0\n"),
        (ERROR_RATIO, 0.0),
    )
    .await;
    let group = Group::new(
        "auto-rollback",
        &checked.settings(),
        &["a", "b", "c"],
        3,
        |zone, fixture| match zone {
            "a" => fixture.annotation(HEALTH_CHECK_ANNOTATION, "errors"),
            _ => fixture,
        },
    )
    .await;
    let spec = checked.error_ratio_check("Rollback");
    let client = group.scene.namespace.client();
    create_health_check(&client, group.namespace(), "errors", spec).await;
    let before = group.update_revisions().await;
    let (zone_a, zone_b, zone_c) = (
        group.names[0].clone(),
        group.names[1].clone(),
        group.names[2].clone(),
    );

    // When the template changes, and the error ratio rises once zone b has 2 new pods
    let from = group.roll_out("v2").await;
    wait_until(TIMEOUT, "zone b has 2 new pods", || async {
        group.updated_pods(&zone_b).await >= 2
    })
    .await;
    let failing = Instant::now();
    checked.metrics.set(ERROR_RATIO, 0.5);

    // Then the group rolls back: `wait` says so with its own exit code, every pod runs the
    // revision from before, and an Event says who started it and why
    group
        .kubectl_baton(&["wait", "ingester", "--timeout", "3m"])
        .await
        .exited(7)
        .complains(&[
            "rollout group ingester is rolled back from",
            "health check errors failed",
        ]);
    group.assert_all_at(&before).await;
    group
        .wait_event(
            &zone_b,
            "RollbackStarted",
            &[
                &format!("rolling back rollout group ingester, in this order: {zone_b} from"),
                "asked: health check errors failed 1 times in a row",
            ],
        )
        .await;
    // zone b's new pods went back first, newest first, then zone a's, and zone c was never
    // touched; never two zones unavailable
    group.check_guarantees(from, 1);
    // (the new pods' departures: the rollout may delete zone b's last old pod after `failing`,
    // this test's clock being behind baton's, and that deletion is not the rollback's)
    let departures = group.departures_of_new_pods(failing, &before);
    let last_b = departures.iter().rposition(|(name, _)| *name == zone_b);
    let first_a = departures.iter().position(|(name, _)| *name == zone_a);
    assert!(last_b < first_a && first_a.is_some(), "{departures:?}");
    assert_eq!(ordinals(&departures, &zone_a), [2, 1, 0], "{departures:?}");
    let back_in_b = ordinals(&departures, &zone_b);
    assert!(
        back_in_b.windows(2).all(|pair| pair[0] > pair[1]) && back_in_b.len() >= 2,
        "{departures:?}"
    );
    let every_departure = group.departures(failing);
    assert!(
        ordinals(&every_departure, &zone_c).is_empty(),
        "{every_departure:?}"
    );
    let status = group
        .kubectl_baton(&["status", "ingester", "-o", "json"])
        .await;
    let document: serde_json::Value = serde_json::from_str(&status.exited(0).stdout).expect("JSON");
    assert_eq!(document["groups"][0]["phase"], "rolledBack");

    // And the leader's timeline marks the rollback once, at zone b where it started, saying why
    let (_, leader) = group
        .scene
        .controller
        .ops_get("/api/v1/status")
        .await
        .expect("the leader answers");
    let leader: serde_json::Value = serde_json::from_str(&leader).expect("JSON");
    let marks = leader["groups"][0]["timeline"]["marks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let rollbacks: Vec<&serde_json::Value> = marks
        .iter()
        .filter(|mark| mark["kind"] == "rollback")
        .collect();
    assert_eq!(rollbacks.len(), 1, "{leader}");
    assert_eq!(rollbacks[0]["statefulset"], zone_b.as_str(), "{leader}");
    let note = rollbacks[0]["note"].as_str().unwrap_or_default();
    assert!(note.contains("health check errors failed"), "{leader}");
}

#[tokio::test]
async fn kubectl_baton_rollback_rolls_back_by_hand_and_a_re_applied_template_is_not_fought() {
    // Given a group of 2 zones × 2 pods that rolled out v2
    let group = Group::new("rollback", &[], &["a", "b"], 2, |_, fixture| fixture).await;
    let before = group.update_revisions().await;
    group.roll_out("v2").await;
    group.wait_complete().await;
    let v2 = group.update_revisions().await;

    // When a person rolls it back
    let from = Instant::now();
    group
        .kubectl_baton(&["rollback", "ingester", "--reason", "latency doubled"])
        .await
        .exited(0)
        .says(&[
            "rollback of rollout group ingester requested",
            "ingester-zone-b from",
            "then ingester-zone-a from",
        ]);

    // Then every pod goes back to v1, zone b first, within the guarantees, and the group says
    // it rolled back, why, and who asked: the user the API server authenticated (the test
    // kubeconfig's "admin"), whatever the local environment says
    group
        .kubectl_baton(&["wait", "ingester", "--timeout", "2m"])
        .await
        .exited(7)
        .complains(&["kubectl baton rollback by admin: latency doubled"]);
    group.assert_all_at(&before).await;
    group.check_guarantees(from, 1);
    let departures = group.departures(from);
    assert_eq!(
        departures.first().map(|(name, _)| name.as_str()),
        Some(group.names[1].as_str()),
        "{departures:?}"
    );
    // and asking again is refused
    group
        .kubectl_baton(&["rollback", "ingester"])
        .await
        .exited(1)
        .complains(&["is rolled back already"]);

    // When a GitOps tool re-applies v2
    let reapplied = Instant::now();
    let client = group.scene.namespace.client();
    baton_e2e::fixtures::set_version(&client, group.namespace(), &group.names[0], "v2").await;

    // Then baton holds the group and says why, and neither writes the template again nor
    // deletes a pod
    group
        .wait_event(
            &group.names[0],
            "TemplateReverted",
            &["went back to", "put the previous version in Git"],
        )
        .await;
    assert!(group.image(&group.names[0]).await.ends_with(":v2"));
    assert!(group.departures(reapplied).is_empty());
    assert_eq!(
        group.update_revisions().await[&group.names[0]],
        v2[&group.names[0]]
    );

    // When a new version is pushed instead
    group.roll_out("v3").await;

    // Then it rolls forward as any rollout
    group.wait_complete().await;
    for name in &group.names {
        assert!(group.image(name).await.ends_with(":v3"), "{name}");
        assert!(
            !group
                .annotations(name)
                .await
                .contains_key(baton_core::gates::rollback::ROLLBACK_STATE_ANNOTATION),
            "{name}: the rollback is forgotten"
        );
    }
}
