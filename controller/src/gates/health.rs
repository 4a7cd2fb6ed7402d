//! Health checks at run time, the part that needs the cluster and the network: [`run`] reads a
//! group's `RolloutHealthCheck` (baton.dev/v1alpha1) and its Secrets under the operator's
//! bounds ([`super::egress`]), connects to its Prometheus and starts the queries beside the
//! reconcile ([`super::calls`]); [`evaluate`] is a group's whole gate pass, the check run when
//! due. What a
//! check is (its spec as read, the policy it gives, its queries rendered for a zone, the
//! verdict on Prometheus' answers) is pure, and the core's: `baton_core::gates::health_check`
//! and `baton_core::gates::checks`.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_shared::kube_client::bounded;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};

use super::calls::GateCalls;
use super::prometheus::{Auth, PrometheusClient, Tls};
use baton_core::gates::checks::{self, CheckOutcome, CheckPolicy, CheckRun, CheckState};
use baton_core::gates::health_check::{
    self, Author, PrometheusField, QuerySpec, Spec, combine, holding_policy, judge, render,
};
use baton_core::gates::keys::{self, GateWarning, HEALTH_CHECK_ANNOTATION};
use baton_core::gates::{GateDecision, GateWait, decide, hooks};
use baton_core::rollout::{GroupSnapshot, Plan};

pub use baton_core::gates::health_check::{GROUP, KIND, VERSION, api_resource};

/// The label a Secret needs before a health check may use it: a check's author names the
/// Secret, its owner decides whether checks may send it.
pub const SECRET_OPT_IN_LABEL: &str = "baton.dev/health-check-secret";

/// The policy to apply for `group`, which names the check `name`, and the run to apply now: one
/// that ended since the last pass, or an inconclusive one when the check cannot be used (with
/// the reason, for a Warning). A due run that can be made is started beside the reconcile
/// ([`GateCalls::runs`]); its outcome comes with a later pass.
pub async fn run(
    calls: &GateCalls,
    group: &GroupSnapshot,
    name: &str,
    state: &CheckState,
    variables: &BTreeMap<&str, &str>,
    now: Timestamp,
) -> (CheckPolicy, Option<CheckRun>, Option<String>) {
    let unusable = |policy: CheckPolicy, why: String| {
        // Paced like a usable check: a run (and its write) per interval, not per reconcile.
        let run = state.due(&policy, now).then(|| CheckRun {
            at: now,
            outcome: CheckOutcome::Inconclusive { why: why.clone() },
        });
        (policy, run, Some(why))
    };
    let (spec, generation, author) = match read_spec(calls, name).await {
        Ok(read) => read,
        Err(why) => return unusable(holding_policy(name), why),
    };
    let policy = match spec.policy(name) {
        Ok(policy) => policy,
        Err(error) => return unusable(holding_policy(name), format!("{KIND} {name}: {error}")),
    };
    // A run is about this check as written now and what the group rolls to now.
    let key = format!("{generation}/{}", checks::target(group));
    if let Some(ended) = calls.runs.take_ended(&group.name, &key) {
        return (policy, Some(ended), None);
    }
    if !state.due(&policy, now) || calls.runs.running(&group.name, &key) {
        return (policy, None, None);
    }
    let timeout = match spec.timeout() {
        Ok(timeout) => timeout.min(calls.max_query_timeout),
        Err(error) => return unusable(policy, format!("{KIND} {name}: {error}")),
    };
    let prometheus = match connect(calls, &spec, &author, timeout).await {
        Ok(prometheus) => prometheus,
        Err(Unusable::Refused(why)) => return unusable(policy, format!("{KIND} {name}: {why}")),
        Err(Unusable::Unavailable(why)) => {
            let outcome = CheckOutcome::Inconclusive {
                why: format!("{KIND} {name}: {why}"),
            };
            return (policy, Some(CheckRun { at: now, outcome }), None);
        }
    };
    let queries: Vec<(QuerySpec, String)> = spec
        .queries
        .iter()
        .map(|query| (query.clone(), render(&query.query, variables)))
        .collect();
    // Every query at once, the whole run bounded by one timeout (and a second for the answers
    // to be read and judged).
    let run = async move {
        let answers = queries.iter().map(|(query, rendered)| {
            let prometheus = &prometheus;
            async move {
                let answer = prometheus
                    .query(rendered)
                    .await
                    .map_err(|error| error.to_string());
                judge(query, rendered, answer)
            }
        });
        combine(futures::future::join_all(answers).await)
    };
    let bound = timeout + Duration::from_secs(1);
    let run = super::calls::bounded_run(bound, run);
    calls.runs.start(&group.name, &key, async move {
        CheckRun {
            at: now,
            outcome: run.await,
        }
    });
    (policy, None, None)
}

/// The check's spec and generation, and who writes it (so a refusal names their field).
async fn read_spec(calls: &GateCalls, name: &str) -> Result<(Spec, i64, Author), String> {
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
    Ok((spec, object.metadata.generation.unwrap_or_default(), author))
}

/// Why a check cannot be run now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unusable {
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
    calls: &GateCalls,
    spec: &Spec,
    author: &Author,
    timeout: Duration,
) -> Result<PrometheusClient, Unusable> {
    let prometheus = &spec.prometheus;
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
async fn read_secret(calls: &GateCalls, name: &str, key: &str) -> Result<String, Unusable> {
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

/// Plans and gates `group` (see [`decide()`]), and with a health check named, runs it when due
/// and applies it ([`checks::apply`]). The only I/O: reading the check and its Secrets, and the
/// queries; none while the group is halted or has nothing left to roll.
pub async fn evaluate(
    calls: &GateCalls,
    group: &GroupSnapshot,
    now: Timestamp,
) -> (Plan, GateDecision) {
    let (config, _) = keys::read(group);
    let checked = check(calls, group, &config, now).await;
    let Some(url) = config.hook.clone().filter(|_| config.invalid.is_none()) else {
        return checked;
    };
    let (plan, mut decision, call) = hooks::apply(group, &url, checked, now);
    match calls.refuse_hook(&url) {
        Some(why) => decision = hooks::refuse(decision, why),
        None => decision.hook = call,
    }
    (plan, decision)
}

/// [`decide`], then the health check if the group names one. Kubernetes reads are bounded
/// by `request_timeout`; the queries run beside the reconcile ([`GateCalls::runs`]).
async fn check(
    calls: &GateCalls,
    group: &GroupSnapshot,
    config: &keys::GateConfig,
    now: Timestamp,
) -> (Plan, GateDecision) {
    let gated = decide(group, now);
    if gated.1.rolling_back {
        // Checks hold no rollback: nothing to query.
        return gated;
    }
    let Some(name) = config
        .health_check
        .clone()
        .filter(|_| config.invalid.is_none())
    else {
        return gated;
    };
    let halted = matches!(gated.1.wait(), Some(GateWait::Halted { .. }));
    if halted || !checks::rollout_in_progress(&gated.0) {
        return checks::apply(group, &holding_policy(&name), None, gated, now);
    }
    let variables = health_check::variables(group, &gated.0, &calls.namespace);
    let (state, _) = CheckState::read(group);
    let (policy, run, problem) = run(calls, group, &name, &state, &variables, now).await;
    let (plan, mut decision) = checks::apply(group, &policy, run.as_ref(), gated, now);
    if let Some(why) = problem {
        let carrier = group
            .statefulsets
            .iter()
            .find(|member| member.annotations.contains_key(HEALTH_CHECK_ANNOTATION))
            .map(|member| member.name.clone())
            .unwrap_or_default();
        decision.warnings.push(GateWarning::UnusableHealthCheck {
            statefulset: carrier,
            why,
        });
    }
    (plan, decision)
}
