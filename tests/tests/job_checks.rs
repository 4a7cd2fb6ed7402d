//! Job health checks on the real control plane and real nodes, each a scenario: given a rollout
//! group whose RolloutHealthCheck makes a Job for every step (`spec.job`: the test app's image,
//! told how to end: exit 0, exit 1, or never), when the template changes, then baton holds each
//! step until the step's Job succeeds, halts or rolls the group back when it fails, and takes a
//! Job that never ends or cannot be created (a quota, a template the API server refuses) as no
//! result: inconclusive, saying why, never a pass. The Jobs run in containerd under real
//! kubelets, made by the Job controller; one control plane and one set of nodes serve every
//! scenario of this binary.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_core::gates::HEALTH_CHECK_ANNOTATION;
use baton_core::gates::job_check::{
    CHECK_LABEL, ENV_BASELINE_REVISION, ENV_UPDATE_REVISION, ENV_ZONE, GROUP_LABEL,
    STEP_ANNOTATION, ZONE_LABEL,
};
use baton_e2e::controller_support::events_about;
use baton_e2e::plugin_support::Run;
use baton_e2e::prometheus_support::create_health_check;
use baton_e2e::real_nodes::{APP_IMAGE, Behaviour, real_rollout_group, roll_out};
use baton_e2e::{Scene, wait_until};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
const CHECK: &str = "smoke";

/// A group of two zones of one real pod each, zone a naming the check [`CHECK`].
struct JobChecked {
    scene: Scene,
    names: Vec<String>,
}

impl JobChecked {
    async fn start(prefix: &str) -> Self {
        let scene = Scene::on_real_nodes(prefix, &[]).await;
        let fixtures: Vec<_> = real_rollout_group("ingester", 1)
            .into_iter()
            .take(2)
            .enumerate()
            .map(|(index, mut fixture)| {
                if index == 0 {
                    fixture.base = fixture.base.annotation(HEALTH_CHECK_ANNOTATION, CHECK);
                }
                fixture
            })
            .collect();
        let names = scene.create(&fixtures).await;
        Self { scene, names }
    }

    /// A check whose Job runs the test app with `args` (`exit <code> [NAME=value...]`, or
    /// `pause`: never ends), run every second, one failure doing `on_failure`.
    fn check(args: &[&str], on_failure: &str) -> serde_json::Value {
        json!({
            "job": {"template": {"metadata": {"labels": {"team": "ingest"}}, "spec": {
                "backoffLimit": 0,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "smoke",
                        "image": format!("{APP_IMAGE}:v1"),
                        "imagePullPolicy": "Never",
                        "command": ["/testapp"],
                        "args": args,
                    }],
                }},
            }}},
            "interval": "1s",
            "failureThreshold": 1,
            "onFailure": on_failure,
        })
    }

    async fn create_check(&self, spec: serde_json::Value) {
        let client = self.scene.namespace.client();
        create_health_check(&client, self.scene.name(), CHECK, spec).await;
    }

    /// Replaces the check's spec.job with `spec`'s.
    async fn set_job(&self, spec: serde_json::Value) {
        let checks: Api<DynamicObject> = Api::namespaced_with(
            self.scene.namespace.client(),
            self.scene.name(),
            &baton_core::gates::health_check::api_resource(),
        );
        // A merge patch: a field `spec` leaves out is removed, not kept
        let mut job = spec["job"].clone();
        if job.get("deadline").is_none() {
            job["deadline"] = serde_json::Value::Null;
        }
        let patch = json!({"spec": {"job": job}});
        checks
            .patch(CHECK, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("replacing the check's spec.job");
    }

    async fn roll_out(&self) {
        roll_out(
            &self.scene.client(),
            self.scene.name(),
            &self.names,
            "v2",
            Behaviour::Healthy,
        )
        .await;
    }

    /// The Jobs baton made for the check.
    async fn jobs(&self) -> Vec<Job> {
        Api::<Job>::namespaced(self.scene.client(), self.scene.name())
            .list(&ListParams::default().labels(&format!("{CHECK_LABEL}={CHECK}")))
            .await
            .expect("listing the Jobs")
            .items
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

    /// Nothing rolled and nothing halted.
    async fn assert_held(&self) {
        let updated = self.updated().await;
        assert!(updated.values().all(|count| *count == 0), "{updated:?}");
        assert_eq!(self.halted().await, Vec::<String>::new());
    }
}

/// `name=value` of the container's environment in `job`'s pod template.
fn env_of(job: &Job) -> BTreeMap<String, String> {
    job.spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .map(|pod| pod.containers[0].env.clone().unwrap_or_default())
        .unwrap_or_default()
        .into_iter()
        .map(|var| (var.name, var.value.unwrap_or_default()))
        .collect()
}

fn succeeded(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|status| status.succeeded)
        .unwrap_or_default()
        > 0
}

#[tokio::test]
async fn a_job_check_holds_each_step_while_its_job_runs_and_lets_each_go_once_the_steps_job_succeeds()
 {
    // Given a group whose check's Job never ends (a 10m deadline)
    let checked = JobChecked::start("job-held").await;
    checked
        .create_check(JobChecked::check(&["pause"], "Halt"))
        .await;
    let zone_a = checked.names[0].clone();

    // When the template changes
    checked.roll_out().await;

    // Then baton makes the step's Job, in the group's namespace, named after the group and
    // zone, labelled and owned by the check; it runs on a real node, and the check is
    // inconclusive while it runs
    checked.wait_outcome(&["inconclusive", "is running"]).await;
    let jobs = checked.jobs().await;
    assert_eq!(jobs.len(), 1, "one Job for the step");
    let job = &jobs[0];
    let name = job.metadata.name.clone().unwrap_or_default();
    assert!(name.starts_with("ingester-ingester-zone-a-"), "{name}");
    let labels = job.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels[GROUP_LABEL], "ingester");
    assert_eq!(labels[ZONE_LABEL], zone_a);
    assert_eq!(labels["team"], "ingest", "the template's own labels stay");
    let owner = &job.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("RolloutHealthCheck", CHECK)
    );
    // and it sees the zone and the revisions it rolls between
    let (current, update) = checked.scene.revisions(&zone_a).await;
    let env = env_of(job);
    assert_eq!(env[ENV_ZONE], zone_a);
    assert_eq!(env[ENV_UPDATE_REVISION], update);
    assert_eq!(env[ENV_BASELINE_REVISION], current);
    // and the leader's status page says what the group waits for
    wait_until(
        TIMEOUT,
        "the status page shows the check's wait",
        || async {
            let status = checked.leader_status().await;
            status.contains(&format!("waits for health check {CHECK}")) && status.contains(&name)
        },
    )
    .await;
    // and no step was taken, nothing halted, while it runs
    checked.assert_held().await;

    // When the check's Job ends well, asserting what it sees (group, namespace, check)
    let namespace = format!("BATON_NAMESPACE={}", checked.scene.name());
    checked
        .set_job(JobChecked::check(
            &[
                "exit",
                "0",
                "BATON_GROUP=ingester",
                &namespace,
                &format!("BATON_CHECK={CHECK}"),
            ],
            "Halt",
        ))
        .await;

    // Then the rollout completes, nothing halted, and each of its two steps (a pod per zone)
    // went after a Job of its own succeeded: the first step's about zone a
    checked.scene.wait_complete(&checked.names).await;
    assert_eq!(checked.halted().await, Vec::<String>::new());
    let jobs = checked.jobs().await;
    let steps: BTreeMap<String, String> = jobs
        .iter()
        .filter(|job| succeeded(job))
        .map(|job| {
            let annotations = job.metadata.annotations.clone().unwrap_or_default();
            let labels = job.metadata.labels.clone().unwrap_or_default();
            (
                annotations[STEP_ANNOTATION].clone(),
                labels[ZONE_LABEL].clone(),
            )
        })
        .collect();
    assert!(steps.len() >= 2, "a succeeded Job per step: {steps:?}");
    assert_eq!(steps.get("first"), Some(&zone_a), "{steps:?}");
}

#[tokio::test]
async fn a_job_check_whose_job_fails_halts_the_group_naming_the_job() {
    // Given a group whose check's Job exits 1, one failure halting it
    let checked = JobChecked::start("job-halt").await;
    checked
        .create_check(JobChecked::check(&["exit", "1"], "Halt"))
        .await;

    // When the template changes
    checked.roll_out().await;

    // Then the group is halted before any step, the halt naming the Job and why it failed,
    // and the Event and `kubectl baton wait` report it
    let failed = format!("health check {CHECK} failed");
    let says = [
        failed.as_str(),
        "query `Job ingester-ingester-zone-a-",
        "returned failed (BackoffLimitExceeded)",
    ];
    checked
        .scene
        .wait_halted_saying(
            &checked.names,
            &says,
            "returned failed (BackoffLimitExceeded)",
        )
        .await;
    // and no pod was updated
    let updated = checked.updated().await;
    assert!(updated.values().all(|count| *count == 0), "{updated:?}");
}

#[tokio::test]
async fn a_job_check_whose_job_fails_in_zone_b_with_on_failure_rollback_rolls_the_group_back() {
    // Given a group whose check's Job succeeds only for zone a, rolling back at a failure
    let checked = JobChecked::start("job-rollback").await;
    let zone_a = checked.names[0].clone();
    let zone_b = checked.names[1].clone();
    checked
        .create_check(JobChecked::check(
            &["exit", "0", &format!("BATON_STATEFULSET={zone_a}")],
            "Rollback",
        ))
        .await;
    let mut before = BTreeMap::new();
    for name in &checked.names {
        let (_, update) = checked.scene.revisions(name).await;
        before.insert(name.clone(), update);
    }

    // When the template changes
    checked.roll_out().await;

    // Then zone a rolls after its Job passed, zone b's Job fails, and the group rolls back:
    // `wait` exits with its rolled-back code naming the check, and every pod runs the
    // revision from before
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
    // and the rollback was told, naming the failing Job of zone b
    wait_until(
        TIMEOUT,
        "an Event RollbackStarted names the check",
        || async {
            let mut notes = Vec::new();
            for name in &checked.names {
                notes.extend(
                    events_about(&checked.scene.client(), checked.scene.name(), name).await,
                );
            }
            notes.iter().any(|(reason, note)| {
                reason == "RollbackStarted"
                    && note.contains(&format!("health check {CHECK} failed 1 times in a row"))
                    && note.contains("returned failed (BackoffLimitExceeded)")
            })
        },
    )
    .await;
    // and zone a's Job had passed, zone b's failed
    let jobs = checked.jobs().await;
    let of_zone = |zone: &str| {
        jobs.iter()
            .find(|job| job.metadata.labels.clone().unwrap_or_default()[ZONE_LABEL] == zone)
            .unwrap_or_else(|| panic!("a Job for {zone}"))
    };
    assert!(succeeded(of_zone(&zone_a)));
    assert!(!succeeded(of_zone(&zone_b)));
}

#[tokio::test]
async fn hostile_job_checks_pass_nothing_and_say_why_a_job_that_never_ends_a_quota_of_no_jobs_and_a_template_the_api_server_refuses()
 {
    // Given a group whose check's Job never ends, with a deadline of 3s
    let checked = JobChecked::start("job-hostile").await;
    let mut never = JobChecked::check(&["pause"], "Halt");
    never["job"]["deadline"] = json!("3s");
    checked.create_check(never).await;
    let zone_a = checked.names[0].clone();

    // When the template changes
    checked.roll_out().await;

    // Then past its deadline the run is inconclusive, naming it, and never a pass
    checked
        .wait_outcome(&["inconclusive", "within its deadline (3s"])
        .await;
    checked.assert_held().await;

    // When the namespace's quota allows no Job, and the check changes (a new Job)
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-jobs"},
        "spec": {"hard": {"count/jobs.batch": "0"}},
    }))
    .expect("a ResourceQuota");
    let quotas = Api::<ResourceQuota>::namespaced(checked.scene.client(), checked.scene.name());
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .expect("creating the quota");
    wait_until(TIMEOUT, "the quota counts Jobs", || async {
        let quota = quotas.get("no-jobs").await.expect("reading the quota");
        quota
            .status
            .and_then(|status| status.hard)
            .is_some_and(|hard| hard.contains_key("count/jobs.batch"))
    })
    .await;
    checked
        .set_job(JobChecked::check(&["exit", "0"], "Halt"))
        .await;
    // Then the Job cannot be created: inconclusive naming the quota, and a Warning says so
    checked
        .wait_outcome(&["inconclusive", "could not be created", "quota"])
        .await;
    checked
        .scene
        .wait_event(
            &zone_a,
            "UnusableHealthCheck",
            &["could not be created", "quota"],
        )
        .await;
    checked.assert_held().await;

    // When the quota is gone but the template names its container as no API server takes
    quotas
        .delete("no-jobs", &Default::default())
        .await
        .expect("deleting the quota");
    let mut invalid = JobChecked::check(&["exit", "0"], "Halt");
    invalid["job"]["template"]["spec"]["template"]["spec"]["containers"][0]["name"] =
        json!("Not_A_Name");
    checked.set_job(invalid).await;
    // Then it cannot be created either, the API server's reason named
    checked
        .wait_outcome(&["could not be created", "Not_A_Name"])
        .await;
    checked.assert_held().await;
    let leader = checked.leader_status().await;
    assert!(
        leader.contains(&format!("waits for health check {CHECK}")),
        "{leader}"
    );
}
