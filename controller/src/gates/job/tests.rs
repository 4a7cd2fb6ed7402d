//! A Job check's run against the recorded API server: which requests it makes, and what it
//! takes of each answer.

use std::sync::Arc;
use std::time::Duration;

use http::Method;

use super::*;
use crate::gates::egress::Allowlist;
use crate::runner::MayAct;
use crate::runner::recorded::{self, Reply};
use baton_core::gates::job_check::{JobSpec, Target};

const NAMESPACE: &str = "ingest";
const UID: &str = "check-uid";

fn job_run(create_from: Option<Timestamp>) -> JobRun {
    let spec: JobSpec = serde_json::from_value(serde_json::json!({"template": {"spec": {
        "template": {"spec": {"containers": [{"name": "smoke", "image": "smoke:1"}]}}}}}))
    .unwrap();
    let variables = std::collections::BTreeMap::from([
        ("group", "ingester"),
        ("zone", "ingester-zone-a"),
        ("revision", "r2"),
    ]);
    let target = Target {
        check: "smoke",
        check_uid: UID,
        generation: 1,
        variables: &variables,
        step: None,
    };
    JobRun {
        job: target.job(&spec),
        deadline: jiff::SignedDuration::from_mins(5),
        create_from,
    }
}

fn connector(client: kube::Client) -> CheckConnector {
    CheckConnector {
        client,
        namespace: NAMESPACE.to_owned(),
        request_timeout: Duration::from_secs(5),
        prometheus: Allowlist::new("gates.prometheus_addresses", Vec::new()),
        web: Allowlist::new("gates.web_check_addresses", Vec::new()),
        max_answer_bytes: 1024,
        own_secret: None,
    }
}

fn runner(leads: bool) -> Runner {
    let may_act: MayAct = Arc::new(move || leads.then_some(Duration::from_secs(30)));
    Runner::new(may_act, Duration::from_secs(5))
}

/// The run against an API server where the Job is `existing` (absent: a 404) and a create
/// answers `create`; the outcome, the problem and the requests made.
async fn run_against(
    existing: Option<serde_json::Value>,
    create: u16,
    leads: bool,
    job_run: &JobRun,
) -> (CheckOutcome, Option<String>, Vec<String>) {
    let created = serde_json::to_value(&job_run.job).unwrap();
    let (client, recorded) =
        recorded::api(NAMESPACE, move |method, _path| match (method, &existing) {
            (&Method::GET, Some(job)) => Reply::Object(job.clone()),
            (&Method::GET, None) => Reply::Status(404),
            (&Method::POST, _) if create == 200 => Reply::Object(created.clone()),
            _ => Reply::Status(create),
        });
    let ((outcome, seen), problem) = run(&connector(client), &runner(leads), job_run, UID).await;
    if outcome == CheckOutcome::Pass {
        assert_eq!(seen, Some(format!("Job {} complete", job_run.name())));
    } else {
        assert_eq!(seen, None, "only a pass says what it saw");
    }
    (outcome, problem, recorded.requests())
}

fn inconclusive_why(outcome: &CheckOutcome) -> &str {
    match outcome {
        CheckOutcome::Inconclusive { why } => why,
        other => panic!("{other:?} is not inconclusive"),
    }
}

#[tokio::test]
async fn a_missing_job_is_created_by_the_leader_and_read_by_the_next_run() {
    let job_run = job_run(None);
    let path = format!("/apis/batch/v1/namespaces/{NAMESPACE}/jobs");
    let (outcome, problem, requests) = run_against(None, 200, true, &job_run).await;
    assert_eq!(
        requests,
        [
            format!("GET {path}/{}", job_run.name()),
            format!("POST {path}")
        ]
    );
    assert!(inconclusive_why(&outcome).contains("was created"));
    assert_eq!(problem, None);
}

#[tokio::test]
async fn a_replica_whose_term_ended_creates_no_job() {
    let job_run = job_run(None);
    let (outcome, problem, requests) = run_against(None, 200, false, &job_run).await;
    assert_eq!(requests.len(), 1, "only the read: {requests:?}");
    assert!(inconclusive_why(&outcome).contains("no longer leads"));
    assert_eq!(problem, None);
}

#[tokio::test]
async fn a_job_the_api_server_refuses_is_inconclusive_naming_why_with_a_warning() {
    let job_run = job_run(None);
    for code in [403, 422] {
        let (outcome, problem, _) = run_against(None, code, true, &job_run).await;
        let why = inconclusive_why(&outcome);
        assert!(why.contains("could not be created"), "{why}");
        assert!(why.contains(&format!("answered {code}")), "{why}");
        assert_eq!(problem.as_deref(), Some(why));
    }
}

#[tokio::test]
async fn a_job_is_created_only_once_the_initial_delay_after_the_step_passed() {
    let job_run = job_run(Some(Timestamp::now() + jiff::SignedDuration::from_hours(1)));
    let (outcome, _, requests) = run_against(None, 200, true, &job_run).await;
    assert_eq!(requests.len(), 1, "only the read: {requests:?}");
    assert!(inconclusive_why(&outcome).contains("initialDelay"));
}

#[tokio::test]
async fn an_existing_job_is_judged_and_never_created_again() {
    let job_run = job_run(None);
    let mut complete = serde_json::to_value(&job_run.job).unwrap();
    complete["status"] = serde_json::json!({"conditions": [
        {"type": "Complete", "status": "True"}]});
    let (outcome, problem, requests) = run_against(Some(complete), 200, true, &job_run).await;
    assert_eq!(outcome, CheckOutcome::Pass);
    assert_eq!(problem, None);
    assert_eq!(requests.len(), 1, "{requests:?}");
}
