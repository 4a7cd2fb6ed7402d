//! The `RolloutHealthCheck` (baton.dev/v1alpha1): its spec as read, the check policy it gives,
//! its queries rendered for a zone, and the verdict on Prometheus' answers, all pure; then
//! [`run`], which reads the check and its Secrets under the operator's bounds
//! ([`super::egress`]) and starts the queries beside the reconcile ([`super::calls`]).

use std::collections::BTreeMap;
use std::time::Duration;

use baton_core::duration::go as go_duration;
use baton_shared::kube_client::bounded;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde::Deserialize;

use super::calls::GateCalls;
use super::checks::{self, CheckOutcome, CheckPolicy, CheckRun, CheckState};
use super::egress;
use super::keys::{self, GateWarning, HEALTH_CHECK_ANNOTATION};
use super::prometheus::{Auth, PrometheusClient, Tls};
use super::{GateDecision, GateWait, decide, hooks};
use crate::rollout::{GroupSnapshot, Plan};

/// The CRD's API group, version and kind.
pub const GROUP: &str = "baton.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "RolloutHealthCheck";

/// The resource, for a dynamic client.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, KIND),
        "rollouthealthchecks",
    )
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub prometheus: PrometheusSpec,
    pub queries: Vec<QuerySpec>,
    #[serde(default)]
    pub initial_delay: Option<String>,
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub success_threshold: Option<u32>,
    #[serde(default)]
    pub failure_threshold: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSpec {
    pub address: String,
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub bearer_token_secret: Option<SecretKey>,
    #[serde(default)]
    pub basic_auth_secret: Option<SecretName>,
    #[serde(default)]
    pub ca_secret: Option<SecretKey>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// Send credentials even over plain http or without certificate checks.
    #[serde(default)]
    pub allow_insecure_credentials: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecretKey {
    pub name: String,
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecretName {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuerySpec {
    pub name: String,
    pub query: String,
    #[serde(default)]
    pub pass_when: PassWhen,
    #[serde(default)]
    pub threshold: Option<Threshold>,
}

/// When a query passes: it returns samples (the phased rollout operator's rule, the default) or none (for
/// alert-style queries).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum PassWhen {
    #[default]
    Samples,
    NoSamples,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Threshold {
    pub operator: String,
    pub value: f64,
}

impl Threshold {
    /// Whether `sample` satisfies it; `None` for an unknown operator.
    fn holds(&self, sample: f64) -> Option<bool> {
        let value = self.value;
        Some(match self.operator.as_str() {
            "<" => sample < value,
            "<=" => sample <= value,
            ">" => sample > value,
            ">=" => sample >= value,
            "==" => sample == value,
            "!=" => sample != value,
            _ => return None,
        })
    }
}

const DEFAULT_INTERVAL: SignedDuration = SignedDuration::from_secs(30);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl Spec {
    /// The check policy, or what is wrong with the spec (naming the field and the value).
    pub fn policy(&self, name: &str) -> Result<CheckPolicy, String> {
        let duration = |field: &str, raw: &Option<String>, default: SignedDuration| match raw {
            None => Ok(default),
            Some(raw) => match go_duration::parse(raw) {
                Ok(nanos) if nanos >= 0 => Ok(SignedDuration::from_nanos(nanos)),
                _ => Err(format!(
                    "spec.{field} {raw:?} is not a duration such as 30s or 1m"
                )),
            },
        };
        let interval = duration("interval", &self.interval, DEFAULT_INTERVAL)?;
        if interval.is_zero() {
            return Err("spec.interval must be more than 0s".to_owned());
        }
        if self.queries.is_empty() {
            return Err("spec.queries is empty".to_owned());
        }
        for (index, query) in self.queries.iter().enumerate() {
            if let Some(threshold) = &query.threshold
                && threshold.holds(0.0).is_none()
            {
                return Err(format!(
                    "spec.queries[{index}].threshold.operator {:?} is not one of <, <=, >, >=, ==, !=",
                    threshold.operator
                ));
            }
        }
        let threshold = |field: &str, value: Option<u32>, default: u32| match value {
            None => Ok(default),
            Some(0) => Err(format!("spec.{field} must be at least 1")),
            Some(value) => Ok(value),
        };
        Ok(CheckPolicy {
            name: name.to_owned(),
            interval,
            initial_delay: duration("initialDelay", &self.initial_delay, SignedDuration::ZERO)?,
            success_threshold: threshold("successThreshold", self.success_threshold, 1)?,
            failure_threshold: threshold("failureThreshold", self.failure_threshold, 3)?,
        })
    }

    /// The bound on each query.
    pub fn timeout(&self) -> Result<Duration, String> {
        match &self.prometheus.timeout {
            None => Ok(DEFAULT_TIMEOUT),
            Some(raw) => match go_duration::parse(raw) {
                Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos.unsigned_abs())),
                _ => Err(format!(
                    "spec.prometheus.timeout {raw:?} is not a duration such as 10s"
                )),
            },
        }
    }
}

/// Replaces `{{group}}`, `{{zone}}`, `{{namespace}}` and `{{revision}}` in `query`.
pub fn render(query: &str, variables: &BTreeMap<&str, &str>) -> String {
    variables
        .iter()
        .fold(query.to_owned(), |query, (name, value)| {
            query.replace(&format!("{{{{{name}}}}}"), value)
        })
}

/// The verdict on one query's answer: its sample values, or why there is no answer.
pub fn judge(query: &QuerySpec, rendered: &str, answer: Result<Vec<f64>, String>) -> CheckOutcome {
    let samples = match answer {
        Ok(samples) => samples,
        Err(why) => {
            return CheckOutcome::Inconclusive {
                why: format!("query {} ({rendered}): {why}", query.name),
            };
        }
    };
    let fail = |value: String| CheckOutcome::Fail {
        query: rendered.to_owned(),
        value,
    };
    match query.pass_when {
        PassWhen::NoSamples if samples.is_empty() => CheckOutcome::Pass,
        PassWhen::NoSamples => fail(format_samples(&samples)),
        PassWhen::Samples if samples.is_empty() => fail("no samples".to_owned()),
        PassWhen::Samples => match &query.threshold {
            Some(threshold)
                if samples
                    .iter()
                    .any(|sample| threshold.holds(*sample) == Some(false)) =>
            {
                fail(format!(
                    "{} (must be {} {})",
                    format_samples(&samples),
                    threshold.operator,
                    threshold.value
                ))
            }
            _ => CheckOutcome::Pass,
        },
    }
}

fn format_samples(samples: &[f64]) -> String {
    let shown: Vec<String> = samples.iter().take(3).map(f64::to_string).collect();
    let more = samples.len().saturating_sub(3);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// The run's outcome from the queries': the first failure, else the first inconclusive, else
/// a pass.
pub fn combine(outcomes: Vec<CheckOutcome>) -> CheckOutcome {
    let failed = outcomes
        .iter()
        .find(|outcome| matches!(outcome, CheckOutcome::Fail { .. }));
    let inconclusive = outcomes
        .iter()
        .find(|outcome| matches!(outcome, CheckOutcome::Inconclusive { .. }));
    failed
        .or(inconclusive)
        .cloned()
        .unwrap_or(CheckOutcome::Pass)
}

/// The label a Secret needs before a health check may use it: a check's author names the
/// Secret, its owner decides whether checks may send it.
pub const SECRET_OPT_IN_LABEL: &str = "baton.dev/health-check-secret";

/// A policy that holds every step: a check that cannot be read or used passes nothing and never
/// halts.
fn holding_policy(name: &str) -> CheckPolicy {
    CheckPolicy {
        name: name.to_owned(),
        interval: DEFAULT_INTERVAL,
        initial_delay: SignedDuration::ZERO,
        success_threshold: 1,
        failure_threshold: u32::MAX,
    }
}

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
    let (spec, generation) = match read_spec(calls, name).await {
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
    let prometheus = match connect(calls, &spec, timeout).await {
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
    calls.runs.start(
        &group.name,
        &key,
        now,
        super::calls::bounded_run(bound, run),
    );
    (policy, None, None)
}

/// The check's spec and generation.
async fn read_spec(calls: &GateCalls, name: &str) -> Result<(Spec, i64), String> {
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
    Ok((spec, object.metadata.generation.unwrap_or_default()))
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
/// unless the check says `allowInsecureCredentials`.
async fn connect(
    calls: &GateCalls,
    spec: &Spec,
    timeout: Duration,
) -> Result<PrometheusClient, Unusable> {
    let prometheus = &spec.prometheus;
    let address = calls
        .prometheus
        .permit(&prometheus.address)
        .map_err(|why| Unusable::Refused(format!("spec.prometheus.address: {why}")))?;
    let named = [
        prometheus
            .bearer_token_secret
            .as_ref()
            .map(|secret| &secret.name),
        prometheus
            .basic_auth_secret
            .as_ref()
            .map(|secret| &secret.name),
        prometheus.ca_secret.as_ref().map(|secret| &secret.name),
    ];
    if let Some(own) = named
        .into_iter()
        .flatten()
        .find(|name| calls.own_secret.as_ref() == Some(*name))
    {
        return Err(Unusable::Refused(format!(
            "Secret {own} is baton's own TLS Secret, which no health check may use"
        )));
    }
    let credentials =
        prometheus.bearer_token_secret.is_some() || prometheus.basic_auth_secret.is_some();
    if credentials {
        if !calls.prometheus.lists(&address) {
            return Err(Unusable::Refused(format!(
                "credentials are sent only to addresses in gates.prometheus_addresses, and {} is \
                 not one (the operator's configuration)",
                egress::redact(&prometheus.address)
            )));
        }
        let exposed = address.scheme() == "http" || prometheus.insecure_skip_verify;
        if exposed && !prometheus.allow_insecure_credentials {
            return Err(Unusable::Refused(
                "credentials over plain http or without certificate checks can be read on the \
                 way; set spec.prometheus.allowInsecureCredentials: true to send them anyway"
                    .to_owned(),
            ));
        }
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

/// Plans and gates `group` as the leader would, without I/O: [`decide()`], then the hook gate
/// (it reads only stored state). A health check needs queries: it is left out — its wait is
/// known from the leader only. What the status page and `kubectl baton plan` show.
pub fn evaluate_without_queries(group: &GroupSnapshot, now: Timestamp) -> (Plan, GateDecision) {
    let (config, _) = keys::read(group);
    let decided = decide(group, now);
    let Some(url) = config.hook.filter(|_| config.invalid.is_none()) else {
        return decided;
    };
    let (plan, decision, _) = hooks::apply(group, &url, decided, now);
    (plan, decision)
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
    // The zone the queries are about: the one rolling, else the next to roll.
    let progress = &gated.0.progress;
    let zone = progress
        .iter()
        .find(|progress| !progress.done && progress.updated > 0)
        .or_else(|| progress.iter().find(|progress| !progress.done))
        .map(|progress| progress.statefulset.as_str())
        .unwrap_or_default();
    let revision = group
        .statefulsets
        .iter()
        .find(|member| member.name == zone)
        .and_then(|member| member.update_revision.as_deref())
        .unwrap_or_default();
    let variables = BTreeMap::from([
        ("group", group.name.as_str()),
        ("zone", zone),
        ("namespace", calls.namespace.as_str()),
        ("revision", revision),
    ]);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> Spec {
        serde_json::from_value(json).expect("a valid spec")
    }

    fn query(pass_when: PassWhen, threshold: Option<(&str, f64)>) -> QuerySpec {
        QuerySpec {
            name: "errors".to_owned(),
            query: "q".to_owned(),
            pass_when,
            threshold: threshold.map(|(operator, value)| Threshold {
                operator: operator.to_owned(),
                value,
            }),
        }
    }

    #[test]
    fn a_minimal_spec_gets_the_documented_defaults() {
        let spec = spec(serde_json::json!({
            "prometheus": {"address": "http://prometheus:9090"},
            "queries": [{"name": "up", "query": "up"}],
        }));
        assert_eq!(
            spec.policy("check"),
            Ok(CheckPolicy {
                name: "check".to_owned(),
                interval: SignedDuration::from_secs(30),
                initial_delay: SignedDuration::ZERO,
                success_threshold: 1,
                failure_threshold: 3,
            })
        );
        assert_eq!(spec.timeout(), Ok(Duration::from_secs(10)));
        assert_eq!(spec.queries[0].pass_when, PassWhen::Samples);
    }

    #[test]
    fn bad_fields_are_named_with_their_value() {
        let base = serde_json::json!({
            "prometheus": {"address": "http://p", "timeout": "soon"},
            "queries": [{"name": "up", "query": "up", "threshold": {"operator": "=~", "value": 1}}],
            "interval": "0s",
        });
        let mut bad = spec(base.clone());
        assert_eq!(
            bad.policy("c"),
            Err("spec.interval must be more than 0s".to_owned())
        );
        bad.interval = Some("1 minute".to_owned());
        assert_eq!(
            bad.policy("c"),
            Err("spec.interval \"1 minute\" is not a duration such as 30s or 1m".to_owned())
        );
        bad.interval = None;
        assert_eq!(
            bad.policy("c"),
            Err(
                "spec.queries[0].threshold.operator \"=~\" is not one of <, <=, >, >=, ==, !="
                    .to_owned()
            )
        );
        bad.queries[0].threshold = None;
        bad.failure_threshold = Some(0);
        assert_eq!(
            bad.policy("c"),
            Err("spec.failureThreshold must be at least 1".to_owned())
        );
        assert_eq!(
            bad.timeout(),
            Err("spec.prometheus.timeout \"soon\" is not a duration such as 10s".to_owned())
        );
    }

    #[test]
    fn queries_are_rendered_for_the_zone() {
        let variables = BTreeMap::from([
            ("group", "ingester"),
            ("zone", "ingester-zone-b"),
            ("namespace", "prod"),
            ("revision", "ingester-zone-b-6f9c"),
        ]);
        assert_eq!(
            render(
                r#"errors{statefulset="{{zone}}",namespace="{{namespace}}",group="{{group}}",rev="{{revision}}"}"#,
                &variables
            ),
            r#"errors{statefulset="ingester-zone-b",namespace="prod",group="ingester",rev="ingester-zone-b-6f9c"}"#
        );
    }

    #[test]
    fn samples_pass_by_default_and_no_samples_fail() {
        let samples = query(PassWhen::Samples, None);
        assert_eq!(judge(&samples, "q", Ok(vec![1.0])), CheckOutcome::Pass);
        assert_eq!(
            judge(&samples, "q", Ok(vec![])),
            CheckOutcome::Fail {
                query: "q".to_owned(),
                value: "no samples".to_owned()
            }
        );
    }

    #[test]
    fn alert_style_queries_pass_without_samples() {
        let alert = query(PassWhen::NoSamples, None);
        assert_eq!(judge(&alert, "q", Ok(vec![])), CheckOutcome::Pass);
        assert_eq!(
            judge(&alert, "q", Ok(vec![0.3, 0.5])),
            CheckOutcome::Fail {
                query: "q".to_owned(),
                value: "0.3, 0.5".to_owned()
            }
        );
    }

    #[test]
    fn a_threshold_must_hold_for_every_sample() {
        let bounded = query(PassWhen::Samples, Some(("<", 0.1)));
        assert_eq!(
            judge(&bounded, "q", Ok(vec![0.01, 0.05])),
            CheckOutcome::Pass
        );
        assert_eq!(
            judge(&bounded, "q", Ok(vec![0.01, 0.3])),
            CheckOutcome::Fail {
                query: "q".to_owned(),
                value: "0.01, 0.3 (must be < 0.1)".to_owned()
            }
        );
    }

    #[test]
    fn no_answer_is_inconclusive_and_a_failure_outranks_it() {
        let samples = query(PassWhen::Samples, None);
        let inconclusive = judge(&samples, "q", Err("connection refused".to_owned()));
        assert_eq!(
            inconclusive,
            CheckOutcome::Inconclusive {
                why: "query errors (q): connection refused".to_owned()
            }
        );
        let failed = judge(&samples, "q", Ok(vec![]));
        assert_eq!(
            combine(vec![CheckOutcome::Pass, inconclusive.clone()]),
            inconclusive
        );
        assert_eq!(combine(vec![inconclusive, failed.clone()]), failed);
        assert_eq!(combine(vec![CheckOutcome::Pass]), CheckOutcome::Pass);
    }
}
