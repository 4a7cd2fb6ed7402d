use super::*;
use crate::gates::health_check::{Source, Spec};
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn spec(json: serde_json::Value) -> JobSpec {
    serde_json::from_value(json).expect("a job spec")
}

fn minimal() -> JobSpec {
    spec(
        serde_json::json!({"template": {"spec": {"template": {"spec": {
            "containers": [{"name": "smoke", "image": "smoke:1",
                "env": [{"name": "BATON_ZONE", "value": "forged"}, {"name": "MINE", "value": "1"}]}],
            "initContainers": [{"name": "wait", "image": "wait:1"}],
        }}}}}),
    )
}

fn variables() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("group", "ingester"),
        ("namespace", "mimir"),
        ("zone", "ingester-zone-b"),
        ("revision", "ingester-zone-b-6f9c"),
        ("baseline_revision", "ingester-zone-b-5d4a"),
    ])
}

fn target<'a>(variables: &'a BTreeMap<&'a str, &'a str>, step: Option<&'a str>) -> Target<'a> {
    Target {
        check: "smoke",
        check_uid: "uid-1",
        generation: 1,
        variables,
        step,
    }
}

fn run(deadline_secs: i64) -> JobRun {
    let variables = variables();
    JobRun {
        job: target(&variables, None).job(&minimal()),
        deadline: SignedDuration::from_secs(deadline_secs),
        create_from: None,
    }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

/// The Job as the API server shows it: owned by `owner`, created at 0, with `conditions`.
fn read_job(run: &JobRun, owner: &str, conditions: &[(&str, &str, &str)]) -> Job {
    let mut job = run.job.clone();
    if let Some(owners) = job.metadata.owner_references.as_mut() {
        owners[0].uid = owner.to_owned();
    }
    job.metadata.creation_timestamp = Some(Time(at(0)));
    job.status = Some(JobStatus {
        start_time: Some(Time(at(0))),
        conditions: Some(
            conditions
                .iter()
                .map(|(kind, reason, message)| JobCondition {
                    type_: (*kind).to_owned(),
                    status: "True".to_owned(),
                    reason: Some((*reason).to_owned()),
                    message: Some((*message).to_owned()),
                    ..JobCondition::default()
                })
                .collect(),
        ),
        ..JobStatus::default()
    });
    job
}

#[test]
fn a_job_check_is_one_source_without_queries_and_its_problems_name_the_field() {
    let check = |json: serde_json::Value| {
        serde_json::from_value::<Spec>(json)
            .expect("a spec")
            .policy("smoke")
            .map(|_| ())
    };
    let job = serde_json::json!({"template": {"spec": {"template": {"spec": {
        "containers": [{"name": "smoke", "image": "smoke:1"}]}}}}});
    // A job check alone: valid, no queries, the default timeout for its calls
    assert_eq!(check(serde_json::json!({"job": job})), Ok(()));
    let read: Spec = serde_json::from_value(serde_json::json!({"job": job})).unwrap();
    assert!(matches!(read.source(), Ok(Source::Job(_))));
    assert_eq!(read.timeout(), Ok(std::time::Duration::from_secs(10)));
    // With another source, or with queries
    assert_eq!(
        check(serde_json::json!({"job": job, "web": {}})),
        Err("spec.web and spec.job are both set; a check asks one source: keep one".to_owned())
    );
    assert_eq!(
        check(serde_json::json!({"job": job, "web": {}, "prometheus": {"address": "http://p"}})),
        Err(
            "spec.prometheus and spec.web and spec.job are all set; a check asks one source: \
             keep one"
                .to_owned()
        )
    );
    assert_eq!(
        check(serde_json::json!({"job": job, "queries": [{"name": "up", "query": "up"}]})),
        Err(
            "spec.queries is for spec.prometheus and spec.web; a job check's result is its \
             Job's: leave it out"
                .to_owned()
        )
    );
    // And a Prometheus check still needs its queries
    assert_eq!(
        check(serde_json::json!({"prometheus": {"address": "http://p"}})),
        Err("spec.queries is empty".to_owned())
    );
}

#[test]
fn what_baton_needs_to_name_own_and_judge_the_job_is_checked_and_named() {
    let problem = |json: serde_json::Value| {
        serde_json::from_value::<Spec>(serde_json::json!({"job": json}))
            .expect("a spec")
            .policy("smoke")
            .err()
    };
    let pods = |pod: serde_json::Value| serde_json::json!({"spec": {"template": {"spec": pod}}});
    let container = serde_json::json!([{"name": "smoke", "image": "smoke:1"}]);
    assert_eq!(
        problem(serde_json::json!({"template": {}})),
        Some("spec.job.template.spec is needed (the Job's spec, with its pod template)".into())
    );
    assert_eq!(
        problem(serde_json::json!({"template": {"spec": {"template": {}}}})),
        Some("spec.job.template.spec.template.spec is needed (the Job's pods)".into())
    );
    assert_eq!(
        problem(serde_json::json!({"template": pods(serde_json::json!({"containers": []}))})),
        Some("spec.job.template.spec.template.spec.containers is empty".into())
    );
    assert_eq!(
        problem(serde_json::json!({"template": pods(serde_json::json!({
            "containers": container, "restartPolicy": "Always"}))})),
        Some(
            "spec.job.template.spec.template.spec.restartPolicy \"Always\" is not one of Never, \
             OnFailure (a Job's pods end)"
                .into()
        )
    );
    let mut suspended = pods(serde_json::json!({"containers": container}));
    suspended["spec"]["suspend"] = true.into();
    assert_eq!(
        problem(serde_json::json!({"template": suspended})),
        Some("spec.job.template.spec.suspend: a suspended Job never runs".into())
    );
    for field in ["name", "generateName", "namespace"] {
        let mut named = pods(serde_json::json!({"containers": container}));
        named["metadata"] = serde_json::json!({ field: "mine" });
        let why = problem(serde_json::json!({"template": named})).expect("refused");
        assert!(
            why.starts_with(&format!(
                "spec.job.template.metadata.{field} is baton's to set"
            )),
            "{why}"
        );
    }
    for deadline in ["soon", "0s", "500ms", "-1m"] {
        let template = pods(serde_json::json!({"containers": container}));
        assert_eq!(
            problem(serde_json::json!({"template": template, "deadline": deadline})),
            Some(format!(
                "spec.job.deadline {deadline:?} is not a duration of at least 1s such as 5m"
            ))
        );
    }
    // What the namespace may run is its own business: privileged, host paths, host network
    let hostile = pods(
        serde_json::json!({"containers": [{"name": "smoke", "image": "smoke:1",
        "securityContext": {"privileged": true}}], "hostNetwork": true,
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
    );
    assert_eq!(problem(serde_json::json!({"template": hostile})), None);
}

#[test]
fn the_job_is_named_after_group_zone_and_step_the_same_for_every_replica() {
    let variables = variables();
    let first = target(&variables, None).job_name();
    assert!(first.starts_with("ingester-ingester-zone-b-"), "{first}");
    assert!(crate::names::is_dns_label(&first), "{first}");
    // Deterministic: a new leader reading the same state finds the same Job
    assert_eq!(target(&variables, None).job_name(), first);
    // Every step, revision and zone gets its own
    let step = target(&variables, Some("2026-11-28T17:00:00Z")).job_name();
    assert_ne!(step, first);
    let mut other_revision = variables.clone();
    other_revision.insert("revision", "ingester-zone-b-7a1b");
    assert_ne!(target(&other_revision, None).job_name(), first);
    let changed_check = Target {
        generation: 2,
        ..target(&variables, None)
    };
    assert_ne!(
        changed_check.job_name(),
        first,
        "a changed check gets a new Job"
    );
    let mut other_zone = variables.clone();
    other_zone.insert("zone", "ingester-zone-c");
    let zone_c = target(&other_zone, None).job_name();
    assert!(zone_c.starts_with("ingester-ingester-zone-c-"), "{zone_c}");
}

#[test]
fn long_and_hostile_names_become_dns_labels_that_still_differ() {
    let long_zone = format!("{}-a", "z".repeat(200));
    let long_zone_b = format!("{}-b", "z".repeat(200));
    let names: Vec<String> = [
        ("ingester", long_zone.as_str()),
        ("ingester", long_zone_b.as_str()),
        ("Ingester_Group.v2", "cluster-east/ingester-zone-a"),
        ("---", "..."),
        ("", ""),
    ]
    .into_iter()
    .map(|(group, zone)| {
        let variables = BTreeMap::from([("group", group), ("zone", zone)]);
        target(&variables, None).job_name()
    })
    .collect();
    for name in &names {
        assert!(crate::names::is_dns_label(name), "{name:?}");
    }
    assert_ne!(
        names[0], names[1],
        "truncated alike, told apart by the hash"
    );
    assert!(
        names[2].starts_with("ingester-group-v2-ingester-zone-a-"),
        "{}",
        names[2]
    );
    assert!(names[3].starts_with("check-"), "{}", names[3]);
    // Label values too: a qualified zone, a long group
    let variables = BTreeMap::from([("group", long_zone.as_str()), ("zone", "east/ingester")]);
    let job = target(&variables, None).job(&minimal());
    let labels = job.metadata.labels.unwrap();
    for key in [GROUP_LABEL, ZONE_LABEL] {
        let value = &labels[key];
        assert!(value.len() <= 63, "{value}");
        assert!(
            value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "{value}"
        );
    }
}

#[test]
fn the_job_is_labelled_owned_bounded_and_sees_the_zone_and_revisions() {
    let variables = variables();
    let job = target(&variables, Some("2026-11-28T17:00:00Z")).job(&minimal());
    let metadata = &job.metadata;
    let labels = metadata.labels.as_ref().unwrap();
    assert_eq!(labels[MANAGED_BY_LABEL], "baton");
    assert_eq!(labels[CHECK_LABEL], "smoke");
    assert_eq!(labels[GROUP_LABEL], "ingester");
    assert_eq!(labels[ZONE_LABEL], "ingester-zone-b");
    let annotations = metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[STEP_ANNOTATION], "2026-11-28T17:00:00Z");
    assert_eq!(annotations[REVISION_ANNOTATION], "ingester-zone-b-6f9c");
    assert_eq!(metadata.namespace, None);
    let owner = &metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("RolloutHealthCheck", "smoke", "uid-1")
    );
    assert_eq!(owner.api_version, "baton.dev/v1alpha1");
    assert_eq!(owner.controller, Some(true));
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(600));
    assert_eq!(spec.ttl_seconds_after_finished, Some(86_400));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let env = |container: &Container| -> BTreeMap<String, String> {
        container
            .env
            .iter()
            .flatten()
            .map(|var| (var.name.clone(), var.value.clone().unwrap_or_default()))
            .collect()
    };
    for container in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let seen = env(container);
        assert_eq!(
            seen[ENV_ZONE], "ingester-zone-b",
            "baton's over the template's"
        );
        assert_eq!(seen[ENV_STATEFULSET], "ingester-zone-b");
        assert_eq!(seen[ENV_GROUP], "ingester");
        assert_eq!(seen[ENV_NAMESPACE], "mimir");
        assert_eq!(seen[ENV_UPDATE_REVISION], "ingester-zone-b-6f9c");
        assert_eq!(seen[ENV_BASELINE_REVISION], "ingester-zone-b-5d4a");
        assert_eq!(seen[ENV_CHECK], "smoke");
    }
    assert_eq!(
        env(&pod.containers[0])["MINE"],
        "1",
        "the template's own stay"
    );
    assert_eq!(
        pod.containers[0]
            .env
            .iter()
            .flatten()
            .filter(|var| var.name == ENV_ZONE)
            .count(),
        1
    );
    // A member of another cluster: the zone as baton names it, the StatefulSet's own name
    let mut remote = variables.clone();
    remote.insert("zone", "east/ingester-zone-b");
    let env = target(&remote, None).env();
    assert!(env.contains(&(ENV_ZONE, "east/ingester-zone-b".to_owned())));
    assert!(env.contains(&(ENV_STATEFULSET, "ingester-zone-b".to_owned())));
    // The template's shorter deadline and its own time to live stay; a longer one is cut
    let mut own = minimal();
    let template = own.template.spec.as_mut().unwrap();
    template.active_deadline_seconds = Some(30);
    template.ttl_seconds_after_finished = Some(60);
    own.deadline = Some("2m".to_owned());
    let spec = target(&variables, None).job(&own).spec.unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(30));
    assert_eq!(spec.ttl_seconds_after_finished, Some(60));
    own.template.spec.as_mut().unwrap().active_deadline_seconds = Some(3600);
    let spec = target(&variables, None).job(&own).spec.unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(120));
}

#[test]
fn a_complete_job_passes_a_failed_one_fails_with_its_reason() {
    let run = run(300);
    let complete = read_job(&run, "uid-1", &[("Complete", "Completed", "")]);
    assert_eq!(run.verdict(&complete, "uid-1", at(10)), CheckOutcome::Pass);
    let failed = read_job(
        &run,
        "uid-1",
        &[(
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )],
    );
    assert_eq!(
        run.verdict(&failed, "uid-1", at(10)),
        CheckOutcome::Fail {
            query: format!("Job {}", run.name()),
            value: "failed (BackoffLimitExceeded): Job has reached the specified backoff limit"
                .to_owned()
        }
    );
    // A long message is shortened
    let long = read_job(
        &run,
        "uid-1",
        &[("Failed", "PodFailurePolicy", &"x".repeat(5000))],
    );
    let CheckOutcome::Fail { value, .. } = run.verdict(&long, "uid-1", at(10)) else {
        panic!("a failure");
    };
    assert!(value.chars().count() < 200, "{value}");
}

#[test]
fn a_job_without_a_verdict_is_inconclusive_and_never_a_pass_past_its_deadline() {
    let run = run(300);
    let running = read_job(&run, "uid-1", &[]);
    let inconclusive = |outcome: CheckOutcome, words: &str| match outcome {
        CheckOutcome::Inconclusive { why } => assert!(why.contains(words), "{why}"),
        other => panic!("{other:?} is not inconclusive ({words})"),
    };
    inconclusive(run.verdict(&running, "uid-1", at(10)), "is running");
    inconclusive(run.verdict(&running, "uid-1", at(299)), "is running");
    // Past its deadline, even before Kubernetes stops it
    inconclusive(
        run.verdict(&running, "uid-1", at(300)),
        "has not finished within its deadline (5m",
    );
    // Stopped by Kubernetes for its deadline
    let stopped = read_job(&run, "uid-1", &[("Failed", "DeadlineExceeded", "past")]);
    inconclusive(
        run.verdict(&stopped, "uid-1", at(400)),
        "did not finish within its deadline (5m)",
    );
    // A Job of that name the check does not own: its result is not taken, even a success
    let forged = read_job(&run, "someone-else", &[("Complete", "Completed", "")]);
    inconclusive(
        run.verdict(&forged, "uid-1", at(10)),
        "is not the one baton made for this check",
    );
}

#[test]
fn a_job_that_cannot_be_created_yet_or_at_all_is_inconclusive_naming_why() {
    let mut run = run(300);
    run.create_from = Some(at(60));
    let why = |outcome: Result<(), CheckOutcome>| match outcome {
        Err(CheckOutcome::Inconclusive { why }) => why,
        other => panic!("{other:?}"),
    };
    assert!(why(run.missing(at(59))).contains("initialDelay after the last step"));
    assert_eq!(run.missing(at(60)), Ok(()));
    let refused = run.not_created(
        "jobs.batch \"x\" is forbidden: exceeded quota: jobs, requested: count/jobs.batch=1",
    );
    assert!(
        matches!(&refused, CheckOutcome::Inconclusive { why }
            if why.contains("could not be created") && why.contains("exceeded quota")),
        "{refused:?}"
    );
    assert!(matches!(run.created(), CheckOutcome::Inconclusive { .. }));
}
