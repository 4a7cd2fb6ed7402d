//! A Job check's run (`spec.job` of a `RolloutHealthCheck`): read the Job of the step (a get per
//! run: runs come every `interval`, a watch would keep every Job of the namespace in memory for
//! that), take the core's verdict on it, or create it when it is missing. What the Job is
//! (name, labels, owner, environment, deadline) and what its status means are the core's
//! (`baton_core::gates::job_check`).
//!
//! Why the creation goes through the pass's [`Runner`]: a run is started by a pass and runs
//! beside the reconciles, without the leader's term checked (its reads decide nothing on their
//! own); a Job's creation is a write, and a replica that no longer leads must make none (its
//! successor, reading the same check state, makes the same Job by name). So the create is a
//! step of the pass's term: asked for once, bounded by what is left of it; a term already over
//! leaves the Job to the next leader and the run inconclusive.
//!
//! Every call is bounded: the read by the request timeout, the create by the sooner of it and
//! the term's end. Finished Jobs are left to their `ttlSecondsAfterFinished` (the core sets a
//! day when the template does not say) and to the garbage collector once their check is gone
//! (the check owns them: it is in the Job's namespace and cluster, which a member StatefulSet
//! of another cluster is not).

use baton_shared::kube_client::bounded;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};

use super::calls::CheckConnector;
use crate::runner::{Runner, TermLost};
use baton_core::gates::checks::CheckOutcome;
use baton_core::gates::job_check::JobRun;

/// The run's outcome with what it saw (a pass: the Job complete), and when the Job could not
/// be created, why (for a Warning).
pub async fn run(
    connector: &CheckConnector,
    runner: &Runner,
    job_run: &JobRun,
    check_uid: &str,
) -> ((CheckOutcome, Option<String>), Option<String>) {
    let (outcome, problem) = judge(connector, runner, job_run, check_uid).await;
    let seen = (outcome == CheckOutcome::Pass).then(|| job_run.seen());
    ((outcome, seen), problem)
}

async fn judge(
    connector: &CheckConnector,
    runner: &Runner,
    job_run: &JobRun,
    check_uid: &str,
) -> (CheckOutcome, Option<String>) {
    let jobs: Api<Job> = Api::namespaced(connector.client.clone(), &connector.namespace);
    let name = job_run.name();
    let reading = format!("reading Job {name}");
    let read = bounded(connector.request_timeout, reading.clone(), jobs.get(name)).await;
    let existing = match read {
        Ok(Ok(existing)) => Some(existing),
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => None,
        Ok(Err(error)) => {
            let why = format!("{reading}: {error}");
            return (CheckOutcome::Inconclusive { why }, None);
        }
        Err(timed_out) => {
            let why = timed_out.to_string();
            return (CheckOutcome::Inconclusive { why }, None);
        }
    };
    if let Some(job) = existing {
        return (job_run.verdict(&job, check_uid, Timestamp::now()), None);
    }
    if let Err(waiting) = job_run.missing(Timestamp::now()) {
        return (waiting, None);
    }
    let creating = format!("creating Job {name}");
    let created = runner
        .step(creating, jobs.create(&PostParams::default(), &job_run.job))
        .await;
    let why = match created {
        Ok(Ok(Ok(_))) => return (job_run.created(), None),
        // Made meanwhile (a run of another replica): read by the next run.
        Ok(Ok(Err(kube::Error::Api(status)))) if status.code == 409 => {
            return (job_run.created(), None);
        }
        Ok(Ok(Err(kube::Error::Api(status)))) => status.message,
        Ok(Ok(Err(error))) => error.to_string(),
        Ok(Err(timed_out)) => timed_out.to_string(),
        Err(TermLost) => {
            let why = "this replica no longer leads; the next leader makes it".to_owned();
            return (job_run.not_created(&why), None);
        }
    };
    let outcome = job_run.not_created(&why);
    let problem = match &outcome {
        CheckOutcome::Inconclusive { why } => Some(why.clone()),
        _ => None,
    };
    (outcome, problem)
}

#[cfg(test)]
mod tests;
