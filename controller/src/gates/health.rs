//! Health checks at run time, the part that needs the cluster and the network: [`read`] reads a
//! group's `RolloutHealthCheck` (baton.dev/v1alpha1) for its pass, and [`start`] runs what the
//! pass started beside the reconcile ([`super::calls`]): it reads the check's Secrets under the
//! operator's bounds ([`super::egress`]), connects to its Prometheus and makes the queries, or,
//! for a web check, makes its HTTP calls ([`super::web`]), or, for a Job check, reads (or
//! creates) the Job of the step ([`super::job`]). What a check is (its spec as read,
//! the policy it gives, its queries rendered for a zone, the verdict on the answers) and when it
//! runs are pure, and the core's: `baton_core::gates::health_check`,
//! `baton_core::gates::web_check`, `baton_core::gates::checks` and `baton_core::pass`.

use std::time::Duration;

use baton_shared::kube_client::bounded;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};

use super::calls::{CheckConnector, GateCalls};
use super::prometheus::{Auth, PrometheusClient, Tls};
use crate::runner::Runner;
use baton_core::gates::checks::{CheckOutcome, CheckRun};
use baton_core::gates::health_check::{
    self, Author, PrometheusField, PrometheusSpec, QuerySpec, Source, Spec, combine, judge,
};
use baton_core::gates::web_check::{self, WebSpec};
use baton_core::pass::{CheckRead, CheckStart, EndedRun, ReadCheck, run_key};
use baton_core::rollout::GroupSnapshot;

pub use baton_core::gates::health_check::{GROUP, KIND, VERSION, api_resource};

/// The label a Secret needs before a health check may use it: a check's author names the
/// Secret, its owner decides whether checks may send it.
pub const SECRET_OPT_IN_LABEL: &str = "baton.dev/health-check-secret";

/// The check `name` as the pass decides on it ([`CheckRead`]): its spec, and the run made
/// for this spec and target that ended since the last pass (taken), or whether one is in
/// flight. The pass reads it whenever the group names a check and is not halted: a complete
/// group's pass reads it too, and decides nothing on it.
pub async fn read(calls: &GateCalls, group: &GroupSnapshot, name: &str) -> CheckRead {
    let (spec, generation, uid, author) = match read_spec(calls, name).await {
        Ok(read) => read,
        Err(why) => return CheckRead::Unreadable(why),
    };
    let key = run_key(generation, group);
    let ended = calls.runs.take_ended(&group.name, &key);
    let running = ended.is_none() && calls.runs.running(&group.name, &key);
    CheckRead::Read(Box::new(ReadCheck {
        spec,
        generation,
        uid,
        author,
        ended,
        running,
    }))
}

/// Starts the run `start` of `group` beside the reconciles: connecting to its Prometheus (an
/// address the operator permits, credentials only as [`connect`] allows) and every query at
/// once, or, for a web check, every call at once ([`super::web`]); the whole run bounded by the
/// check's timeout (at most the operator's) and a second for the answers to be read and
/// judged. When it ends, the group is queued again and its pass applies the outcome; a check
/// that cannot connect ends at once, inconclusive (with the reason for a Warning when what it
/// asks is refused). A Job check's run creates its Job only within `runner`'s term (the pass's:
/// [`super::job`]).
pub fn start(calls: &GateCalls, runner: &Runner, group: &str, start: CheckStart) {
    let CheckStart {
        key,
        name,
        spec,
        author,
        timeout,
        queries,
        job,
    } = start;
    let runner = runner.clone();
    let timeout = timeout.min(calls.max_query_timeout);
    let connecting = calls.connector();
    let at = Timestamp::now();
    let run = async move {
        let ended =
            |(outcome, seen): (CheckOutcome, Option<String>), problem: Option<String>| EndedRun {
                run: CheckRun { at, outcome, seen },
                problem,
            };
        let outcome = match spec.source() {
            Ok(Source::Prometheus(prometheus)) => {
                ask_prometheus(&connecting, prometheus, &author, timeout, &queries).await
            }
            Ok(Source::Web(web)) => call_web(&connecting, web, timeout, &queries).await,
            Ok(Source::Job(_)) => match &job {
                Some((job_run, uid)) => {
                    let bound = timeout + Duration::from_secs(1);
                    let running = super::job::run(&connecting, &runner, job_run, uid);
                    return match tokio::time::timeout(bound, running).await {
                        Ok((seen, problem)) => ended(seen, problem),
                        Err(_) => ended(
                            (
                                CheckOutcome::Inconclusive {
                                    why: format!("{KIND} {name}: no answer within {bound:?}"),
                                },
                                None,
                            ),
                            None,
                        ),
                    };
                }
                None => Err(Unusable::Refused(
                    "spec.job: no Job for this run".to_owned(),
                )),
            },
            Err(why) => Err(Unusable::Refused(why)),
        };
        match outcome {
            Ok(seen) => ended(seen, None),
            Err(Unusable::Refused(why)) => {
                let why = format!("{KIND} {name}: {why}");
                ended(
                    (CheckOutcome::Inconclusive { why: why.clone() }, None),
                    Some(why),
                )
            }
            Err(Unusable::Unavailable(why)) => ended(
                (
                    CheckOutcome::Inconclusive {
                        why: format!("{KIND} {name}: {why}"),
                    },
                    None,
                ),
                None,
            ),
        }
    };
    calls.runs.start(group, &key, run);
}

/// The run's outcome from Prometheus' answers to every query, asked at once, and what they
/// returned.
async fn ask_prometheus(
    connecting: &CheckConnector,
    spec: &PrometheusSpec,
    author: &Author,
    timeout: Duration,
    queries: &[(QuerySpec, String)],
) -> Result<(CheckOutcome, Option<String>), Unusable> {
    let prometheus = connect(connecting, spec, author, timeout).await?;
    let answers = queries.iter().map(|(query, rendered)| {
        let prometheus = &prometheus;
        async move {
            let answer = prometheus
                .query(rendered)
                .await
                .map_err(|error| error.to_string());
            let seen = health_check::seen(query, &answer);
            (judge(query, rendered, answer), seen)
        }
    });
    let bound = timeout + Duration::from_secs(1);
    Ok(super::calls::bounded_seen(bound, async move {
        combine_seen(futures::future::join_all(answers).await)
    })
    .await)
}

/// The run's outcome from its queries' ([`combine`]), and what they returned, joined.
fn combine_seen(judged: Vec<(CheckOutcome, Option<String>)>) -> (CheckOutcome, Option<String>) {
    let (outcomes, seen): (Vec<CheckOutcome>, Vec<Option<String>>) = judged.into_iter().unzip();
    let seen: Vec<String> = seen.into_iter().flatten().collect();
    (
        combine(outcomes),
        (!seen.is_empty()).then(|| seen.join("; ")),
    )
}

/// The run's outcome from a web check's calls, made at once, and what they answered.
async fn call_web(
    connecting: &CheckConnector,
    spec: &WebSpec,
    timeout: Duration,
    queries: &[(QuerySpec, String)],
) -> Result<(CheckOutcome, Option<String>), Unusable> {
    let prepared = super::web::prepare(connecting, spec, queries).await?;
    let http = connecting
        .web
        .client_builder(timeout)
        .build()
        .map_err(|error| Unusable::Refused(format!("building the HTTP client: {error}")))?;
    let max = connecting.max_answer_bytes;
    let answers = prepared.iter().zip(queries).map(|(call, (query, _))| {
        let http = &http;
        async move {
            let answer = call.answer(http, max).await;
            match &query.web {
                Some(web) => {
                    let seen = web_check::seen(&query.name, web, &answer);
                    (web_check::judge(&query.name, web, answer), seen)
                }
                None => {
                    let why = format!("query {} has no web", query.name);
                    (CheckOutcome::Inconclusive { why }, None)
                }
            }
        }
    });
    let bound = timeout + Duration::from_secs(1);
    Ok(super::calls::bounded_seen(bound, async move {
        combine_seen(futures::future::join_all(answers).await)
    })
    .await)
}

/// The check's spec, generation and uid, and who writes it (so a refusal names their field).
async fn read_spec(calls: &GateCalls, name: &str) -> Result<(Spec, i64, String, Author), String> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(calls.client.clone(), &calls.namespace, &api_resource());
    let reading = format!("reading {KIND} {name}");
    let object = match bounded(calls.request_timeout, reading.clone(), api.get(name)).await {
        Ok(Ok(object)) => object,
        Ok(Err(error)) => return Err(format!("{reading}: {error}")),
        Err(timed_out) => return Err(timed_out.to_string()),
    };
    let spec = serde_json::from_value(object.data["spec"].clone())
        .map_err(|error| format!("{KIND} {name}: {error}"))?;
    let author = Author::of(
        object
            .metadata
            .owner_references
            .as_deref()
            .unwrap_or_default(),
    );
    let uid = object.metadata.uid.clone().unwrap_or_default();
    Ok((
        spec,
        object.metadata.generation.unwrap_or_default(),
        uid,
        author,
    ))
}

/// Why a check cannot be run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    /// What the check asks is not allowed, or names something missing: a Warning, until fixed.
    Refused(String),
    /// A read failed: this run is inconclusive, the next may do better.
    Unavailable(String),
}

/// The Prometheus client the check asks for, if what it asks is allowed: an address the
/// operator permits; credentials only to an address the operator listed, only from Secrets
/// labelled [`SECRET_OPT_IN_LABEL`] (never baton's own TLS Secret), and only over verified TLS
/// unless the check says `allowInsecureCredentials`. A refusal names the field where
/// `author` sets what was refused.
async fn connect(
    calls: &CheckConnector,
    prometheus: &PrometheusSpec,
    author: &Author,
    timeout: Duration,
) -> Result<PrometheusClient, Unusable> {
    let address = calls
        .prometheus
        .permit(&prometheus.address)
        .map_err(|why| {
            Unusable::Refused(format!("{}: {why}", author.field(PrometheusField::Address)))
        })?;
    let listed = calls.prometheus.lists(&address);
    if let Some(why) =
        prometheus.refuse_credentials(&address, listed, calls.own_secret.as_deref(), author)
    {
        return Err(Unusable::Refused(why));
    }
    let auth = if let Some(secret) = &prometheus.bearer_token_secret {
        Auth::Bearer(read_secret(calls, &secret.name, &secret.key).await?)
    } else if let Some(secret) = &prometheus.basic_auth_secret {
        Auth::Basic {
            username: read_secret(calls, &secret.name, "username").await?,
            password: read_secret(calls, &secret.name, "password").await?,
        }
    } else {
        Auth::None
    };
    let tls = if prometheus.insecure_skip_verify {
        Tls::Insecure
    } else if let Some(secret) = &prometheus.ca_secret {
        Tls::Ca(read_secret(calls, &secret.name, &secret.key).await?)
    } else {
        Tls::System
    };
    PrometheusClient::new(
        address.as_str(),
        calls.prometheus.client_builder(timeout),
        auth,
        tls,
        calls.max_answer_bytes,
    )
    .map_err(|error| Unusable::Refused(error.to_string()))
}

/// The text under `key` of the Secret `name`, if the Secret opted in: its labels are read
/// first, its data only then.
pub async fn read_secret(
    calls: &CheckConnector,
    name: &str,
    key: &str,
) -> Result<String, Unusable> {
    let secrets: Api<Secret> = Api::namespaced(calls.client.clone(), &calls.namespace);
    let reading = format!("reading Secret {name}");
    let failed = |error: kube::Error| match error {
        kube::Error::Api(status) if status.code == 404 => {
            Unusable::Refused(format!("Secret {name} does not exist"))
        }
        error => Unusable::Unavailable(format!("{reading}: {error}")),
    };
    let timed_out = |timed_out: baton_shared::kube_client::TimedOut| {
        Unusable::Unavailable(timed_out.to_string())
    };
    let metadata = bounded(
        calls.request_timeout,
        reading.clone(),
        secrets.get_metadata(name),
    )
    .await
    .map_err(timed_out)?
    .map_err(failed)?;
    let opted_in = metadata
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(SECRET_OPT_IN_LABEL))
        .is_some_and(|value| value == "true");
    if !opted_in {
        return Err(Unusable::Refused(format!(
            "Secret {name} is not labelled {SECRET_OPT_IN_LABEL}=true, which a Secret needs \
             before health checks may use it"
        )));
    }
    let secret = bounded(calls.request_timeout, reading.clone(), secrets.get(name))
        .await
        .map_err(timed_out)?
        .map_err(failed)?;
    let bytes = secret
        .data
        .and_then(|mut data| data.remove(key))
        .ok_or_else(|| Unusable::Refused(format!("Secret {name} has no key {key}")))?;
    String::from_utf8(bytes.0)
        .map_err(|_| Unusable::Refused(format!("Secret {name} key {key} is not text")))
}
