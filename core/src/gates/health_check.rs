//! A `RolloutHealthCheck`'s spec as read, the check policy it gives, its queries rendered for a
//! zone, and the verdict on Prometheus' answers. A check asks one source: Prometheus
//! (`spec.prometheus`, PromQL queries), HTTP endpoints (`spec.web`, [`super::web_check`]) or a
//! Job made for every step (`spec.job`, [`super::job_check`]).
//! Pure: the controller reads the check and its Secrets and makes the queries (its
//! `gates::health`, `gates::calls`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::duration::go as go_duration;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::Deserialize;

use super::checks::{CheckOutcome, CheckPolicy, OnFailure};
use super::job_check::JobSpec;
use super::web_check::{WebQuery, WebSpec};
use super::{GateDecision, decide, hooks, keys};
use crate::rollout::{GroupSnapshot, Plan};

/// The CRD's API group, version and kind.
pub const GROUP: &str = "baton.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "RolloutHealthCheck";

/// The resource, for a dynamic client.
pub fn api_resource() -> kube_core::discovery::ApiResource {
    kube_core::discovery::ApiResource::from_gvk_with_plural(
        &kube_core::gvk::GroupVersionKind::gvk(GROUP, VERSION, KIND),
        "rollouthealthchecks",
    )
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The source, exactly one of these: Prometheus, HTTP endpoints, or a Job
    /// ([`Spec::source`]).
    #[serde(default)]
    pub prometheus: Option<PrometheusSpec>,
    #[serde(default)]
    pub web: Option<WebSpec>,
    #[serde(default)]
    pub job: Option<JobSpec>,
    /// Prometheus' and web checks' queries (a Job check has none: its Job is the query).
    #[serde(default)]
    pub queries: Vec<QuerySpec>,
    #[serde(default)]
    pub initial_delay: Option<String>,
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub success_threshold: Option<u32>,
    #[serde(default)]
    pub failure_threshold: Option<u32>,
    /// `Halt` (the default) or `Warn`.
    #[serde(default)]
    pub on_failure: Option<String>,
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
    /// PromQL, with `spec.prometheus`.
    #[serde(default)]
    pub query: String,
    #[serde(default)]
    pub pass_when: PassWhen,
    #[serde(default)]
    pub threshold: Option<Threshold>,
    /// The call and its condition, with `spec.web`.
    #[serde(default)]
    pub web: Option<WebQuery>,
}

/// Where a check's answers come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source<'a> {
    Prometheus(&'a PrometheusSpec),
    Web(&'a WebSpec),
    Job(&'a JobSpec),
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
    pub(crate) fn holds(&self, sample: f64) -> Option<bool> {
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

/// Who writes a check's spec, so that what baton refuses names a field that person can
/// change: the check's own author, or, for the check baton makes of a PhasedRollout
/// (`phasedrollout-<name>`, owned by it), the PhasedRollout's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Author {
    Check,
    PhasedRollout(String),
}

impl Author {
    /// The PhasedRollout that controls the check (its controlling owner reference), if one
    /// does. Only words depend on it: a check that claims an owner gains nothing else.
    pub fn of(owners: &[OwnerReference]) -> Self {
        owners
            .iter()
            .find(|owner| {
                owner.controller == Some(true)
                    && owner.kind == crate::phased::KIND
                    && owner.api_version
                        == format!("{}/{}", crate::phased::GROUP, crate::phased::VERSION)
            })
            .map_or(Self::Check, |owner| Self::PhasedRollout(owner.name.clone()))
    }

    /// Where this author sets what a check's `field` (`spec.prometheus.<field>`) comes from.
    pub fn field(&self, field: PrometheusField) -> String {
        match self {
            Self::Check => format!("spec.prometheus.{}", field.check_name()),
            Self::PhasedRollout(name) => {
                format!("{} of PhasedRollout {name}", field.phased_rollout_path())
            }
        }
    }
}

/// The fields of `spec.prometheus` a PhasedRollout writes too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrometheusField {
    Address,
    AllowInsecureCredentials,
}

impl PrometheusField {
    fn check_name(self) -> &'static str {
        match self {
            Self::Address => "address",
            Self::AllowInsecureCredentials => "allowInsecureCredentials",
        }
    }

    fn phased_rollout_path(self) -> &'static str {
        match self {
            Self::Address => crate::phased::URL_FIELD,
            Self::AllowInsecureCredentials => crate::phased::ALLOW_INSECURE_CREDENTIALS_FIELD,
        }
    }
}

impl PrometheusSpec {
    /// Why the Secrets this check names may not be used for `address` (already permitted as a
    /// destination; `listed`: named in the operator's `gates.prometheus_addresses`), if they may
    /// not: baton's own TLS Secret (`own_secret`) never; credentials only to a listed address,
    /// and only over verified TLS unless `allowInsecureCredentials` says so (named where
    /// `author` sets it).
    pub fn refuse_credentials(
        &self,
        address: &url::Url,
        listed: bool,
        own_secret: Option<&str>,
        author: &Author,
    ) -> Option<String> {
        let named = [
            self.bearer_token_secret.as_ref().map(|secret| &secret.name),
            self.basic_auth_secret.as_ref().map(|secret| &secret.name),
            self.ca_secret.as_ref().map(|secret| &secret.name),
        ];
        if let Some(own) = named
            .into_iter()
            .flatten()
            .find(|name| own_secret == Some(name.as_str()))
        {
            return Some(format!(
                "Secret {own} is baton's own TLS Secret, which no health check may use"
            ));
        }
        if self.bearer_token_secret.is_none() && self.basic_auth_secret.is_none() {
            return None;
        }
        if !listed {
            return Some(format!(
                "credentials are sent only to addresses in gates.prometheus_addresses, and {} is \
                 not one (the operator's configuration)",
                super::redact::redact(&self.address)
            ));
        }
        let exposed = address.scheme() == "http" || self.insecure_skip_verify;
        (exposed && !self.allow_insecure_credentials).then(|| {
            format!(
                "credentials over plain http or without certificate checks can be read on the \
                 way; set {}: true to send them anyway",
                author.field(PrometheusField::AllowInsecureCredentials)
            )
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
        let source = self.source()?;
        match source {
            Source::Job(job) => {
                if !self.queries.is_empty() {
                    return Err(
                        "spec.queries is for spec.prometheus and spec.web; a job check's \
                                result is its Job's: leave it out"
                            .to_owned(),
                    );
                }
                if let Some(why) = job.problem() {
                    return Err(format!("spec.job.{why}"));
                }
            }
            _ if self.queries.is_empty() => return Err("spec.queries is empty".to_owned()),
            _ => {}
        }
        for (index, query) in self.queries.iter().enumerate() {
            query_problem(source, query)
                .map_or(Ok(()), |why| Err(format!("spec.queries[{index}].{why}")))?;
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
            on_failure: match self.on_failure.as_deref() {
                None | Some("Halt") => OnFailure::Halt,
                Some("Warn") => OnFailure::Warn,
                Some("Rollback") => OnFailure::Rollback,
                Some(other) => {
                    return Err(format!(
                        "spec.onFailure {other:?} is not one of Halt, Warn, Rollback"
                    ));
                }
            },
        })
    }

    /// The bound on each query.
    pub fn timeout(&self) -> Result<Duration, String> {
        let (field, timeout) = match self.source()? {
            Source::Prometheus(prometheus) => ("prometheus", &prometheus.timeout),
            Source::Web(web) => ("web", &web.timeout),
            // Its calls are a read and a create, each bounded by the operator's request timeout.
            Source::Job(_) => return Ok(DEFAULT_TIMEOUT),
        };
        match timeout {
            None => Ok(DEFAULT_TIMEOUT),
            Some(raw) => match go_duration::parse(raw) {
                Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos.unsigned_abs())),
                _ => Err(format!(
                    "spec.{field}.timeout {raw:?} is not a duration such as 10s"
                )),
            },
        }
    }

    /// The check's one source, or why it has not exactly one.
    pub fn source(&self) -> Result<Source<'_>, String> {
        let sources = [
            (
                "spec.prometheus",
                self.prometheus.as_ref().map(Source::Prometheus),
            ),
            ("spec.web", self.web.as_ref().map(Source::Web)),
            ("spec.job", self.job.as_ref().map(Source::Job)),
        ];
        let set: Vec<(&str, Source<'_>)> = sources
            .into_iter()
            .filter_map(|(field, source)| source.map(|source| (field, source)))
            .collect();
        match set.as_slice() {
            [(_, source)] => Ok(*source),
            [] => Err(
                "spec sets none of prometheus, web and job; a check needs one source for its \
                 results"
                    .to_owned(),
            ),
            many => {
                let fields: Vec<&str> = many.iter().map(|(field, _)| *field).collect();
                let both = if fields.len() == 2 { "both" } else { "all" };
                Err(format!(
                    "{} are {both} set; a check asks one source: keep one",
                    fields.join(" and ")
                ))
            }
        }
    }
}

/// What is wrong with a query for the check's `source`, relative to `spec.queries[i].`.
fn query_problem(source: Source<'_>, query: &QuerySpec) -> Option<String> {
    match (source, &query.web) {
        (Source::Prometheus(_), Some(_)) => {
            Some("web is for checks with spec.web; this check asks spec.prometheus".to_owned())
        }
        (Source::Prometheus(_), None) if query.query.trim().is_empty() => {
            Some("query is empty (PromQL, for spec.prometheus)".to_owned())
        }
        (Source::Prometheus(_), None) => query
            .threshold
            .as_ref()
            .filter(|threshold| threshold.holds(0.0).is_none())
            .map(|threshold| {
                format!(
                    "threshold.operator {:?} is not one of <, <=, >, >=, ==, !=",
                    threshold.operator
                )
            }),
        (Source::Web(_), None) => Some("web is needed: this check asks spec.web".to_owned()),
        (Source::Web(_), Some(_)) if !query.query.is_empty() => Some(
            "query is PromQL, for checks with spec.prometheus; a web query's condition is in web"
                .to_owned(),
        ),
        (Source::Web(_), Some(_)) if query.threshold.is_some() => Some(
            "threshold is for spec.prometheus; a web query's threshold is web.threshold".to_owned(),
        ),
        (Source::Web(_), Some(_)) if query.pass_when != PassWhen::Samples => {
            Some("passWhen is for spec.prometheus".to_owned())
        }
        (Source::Web(_), Some(web)) => web.problem().map(|why| format!("web.{why}")),
        (Source::Job(_), _) => Some("is for spec.prometheus and spec.web".to_owned()),
    }
}

/// `query` as run for the zone now ([`variables`]): a PromQL query rendered, or a web query's
/// URL and body; and the query as sent, for messages (a web query's URL redacted).
pub fn render_query(query: &QuerySpec, variables: &BTreeMap<&str, &str>) -> (QuerySpec, String) {
    match &query.web {
        Some(web) => {
            let rendered = web.rendered(variables);
            let shown = rendered.shown();
            let query = QuerySpec {
                web: Some(rendered),
                ..query.clone()
            };
            (query, shown)
        }
        None => (query.clone(), render(&query.query, variables)),
    }
}

/// What a query's variables stand for while `plan` is the group's gated plan: `group`,
/// `namespace`, `zone` (the zone rolling, else the next to roll, as the group names it:
/// `cluster/statefulset` for a member of another cluster), `statefulset` and `cluster` (that
/// zone's StatefulSet under the name its own cluster knows it by, and that cluster's name:
/// empty in a group of the controller's own cluster, where `statefulset` is `zone`), `revision`
/// (the zone's update revision: its new pods' `controller-revision-hash`) and
/// `baseline_revision` (the revision the zone ran before this rollout: its current revision,
/// which baton moves only once the zone is done; empty once nothing in the zone differs). With
/// both, one query can compare the new pods with the old ones.
///
/// `statefulset` and `cluster` are apart because metrics carry them apart: a StatefulSet's
/// series are labelled with its own name (kube-state-metrics' `statefulset`), and the cluster,
/// if at all, by a label of the scrape (`cluster`); `cluster/ingester` matches no series.
pub fn variables<'a>(
    group: &'a GroupSnapshot,
    plan: &Plan,
    namespace: &'a str,
) -> BTreeMap<&'static str, &'a str> {
    let zone = plan.rolling_or_next().and_then(|progress| {
        group
            .statefulsets
            .iter()
            .find(|member| member.name == progress.statefulset)
    });
    let revision = zone
        .and_then(|member| member.update_revision.as_deref())
        .unwrap_or_default();
    let baseline = zone
        .and_then(|member| member.current_revision.as_deref())
        .filter(|current| *current != revision)
        .unwrap_or_default();
    let zone_name = zone.map(|member| member.name.as_str()).unwrap_or_default();
    let (cluster, statefulset) = crate::clusters::split(zone_name);
    BTreeMap::from([
        ("group", group.name.as_str()),
        ("zone", zone_name),
        ("statefulset", statefulset),
        ("cluster", cluster.unwrap_or_default()),
        ("namespace", namespace),
        ("revision", revision),
        ("baseline_revision", baseline),
    ])
}

/// Replaces `{{group}}`, `{{zone}}`, `{{statefulset}}`, `{{cluster}}`, `{{namespace}}`,
/// `{{revision}}` and `{{baseline_revision}}` in `query` (see [`variables`]).
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

/// What a Prometheus query returned, as a pass's message shows it (`errors: 0.01, 0.02`).
pub fn seen(query: &QuerySpec, answer: &Result<Vec<f64>, String>) -> Option<String> {
    let samples = answer.as_ref().ok()?;
    let shown = if samples.is_empty() {
        "no samples".to_owned()
    } else {
        format_samples(samples)
    };
    Some(format!("{}: {shown}", query.name))
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

/// A policy that holds every step: a check that cannot be read or used passes nothing and never
/// halts.
pub fn holding_policy(name: &str) -> CheckPolicy {
    CheckPolicy {
        name: name.to_owned(),
        interval: DEFAULT_INTERVAL,
        initial_delay: SignedDuration::ZERO,
        success_threshold: 1,
        failure_threshold: u32::MAX,
        on_failure: OnFailure::Halt,
    }
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
            web: None,
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
                on_failure: OnFailure::Halt,
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
    fn a_check_asks_exactly_one_source_and_its_queries_fit_it() {
        let web_query = serde_json::json!({"name": "up",
            "web": {"url": "https://app.example/ready", "status": "2xx"}});
        let with = |json: serde_json::Value| spec(json).policy("c").map(|_| ());
        // A web check, its timeout read from spec.web
        let web = spec(serde_json::json!({"web": {"timeout": "2s"}, "queries": [web_query]}));
        assert_eq!(web.policy("c").map(|_| ()), Ok(()));
        assert_eq!(web.timeout(), Ok(Duration::from_secs(2)));
        // Both sources, or neither
        assert_eq!(
            with(
                serde_json::json!({"prometheus": {"address": "http://p"}, "web": {},
                "queries": [web_query]})
            ),
            Err(
                "spec.prometheus and spec.web are both set; a check asks one source: keep one"
                    .to_owned()
            )
        );
        assert_eq!(
            with(serde_json::json!({"queries": [web_query]})),
            Err(
                "spec sets none of prometheus, web and job; a check needs one source for its \
                 results"
                    .to_owned()
            )
        );
        // A query of the other source's kind, or of neither
        assert_eq!(
            with(
                serde_json::json!({"prometheus": {"address": "http://p"}, "queries": [web_query]})
            ),
            Err(
                "spec.queries[0].web is for checks with spec.web; this check asks spec.prometheus"
                    .to_owned()
            )
        );
        assert_eq!(
            with(serde_json::json!({"prometheus": {"address": "http://p"},
                "queries": [{"name": "up"}]})),
            Err("spec.queries[0].query is empty (PromQL, for spec.prometheus)".to_owned())
        );
        assert_eq!(
            with(serde_json::json!({"web": {}, "queries": [{"name": "up", "query": "up"}]})),
            Err("spec.queries[0].web is needed: this check asks spec.web".to_owned())
        );
        assert_eq!(
            with(
                serde_json::json!({"web": {}, "queries": [web_query, {"name": "both",
                "query": "up", "web": {"url": "https://a", "status": "2xx"}}]})
            ),
            Err(
                "spec.queries[1].query is PromQL, for checks with spec.prometheus; a web \
                 query's condition is in web"
                    .to_owned()
            )
        );
        // A web query's own problem, named under its field
        assert_eq!(
            with(serde_json::json!({"web": {}, "queries": [{"name": "up",
                "web": {"url": "https://a", "jsonPath": "$.x"}}]})),
            Err(
                "spec.queries[0].web.needs exactly one of threshold, match and status (the \
                 condition on the answer)"
                    .to_owned()
            )
        );
        let bad_timeout =
            spec(serde_json::json!({"web": {"timeout": "0s"}, "queries": [web_query]}));
        assert_eq!(
            bad_timeout.timeout(),
            Err("spec.web.timeout \"0s\" is not a duration such as 10s".to_owned())
        );
    }

    #[test]
    fn a_web_query_is_rendered_for_the_zone_and_shown_redacted() {
        let query: QuerySpec = serde_json::from_value(serde_json::json!({"name": "errors",
            "web": {"url": "https://app.example/{{zone}}/stats?token=t", "jsonPath": "$.e",
                "threshold": {"operator": "<", "value": 1}}}))
        .unwrap();
        let variables = BTreeMap::from([("zone", "zone-b")]);
        let (rendered, shown) = render_query(&query, &variables);
        assert_eq!(
            rendered.web.as_ref().map(|web| web.url.as_str()),
            Some("https://app.example/zone-b/stats?token=t")
        );
        assert_eq!(shown, "GET https://app.example/zone-b/stats?… → $.e");
    }

    #[test]
    fn credentials_go_only_from_others_secrets_to_listed_addresses_over_verified_tls() {
        let prometheus = |json: serde_json::Value| -> PrometheusSpec {
            serde_json::from_value(json).expect("a prometheus spec")
        };
        let url = |raw: &str| url::Url::parse(raw).expect("a URL");
        let own = Some("baton-webhook-tls");
        let token = serde_json::json!({"name": "prometheus-token", "key": "token"});
        // No credentials: nothing to refuse, listed or not
        let open = prometheus(serde_json::json!({"address": "http://p:9090"}));
        assert_eq!(
            open.refuse_credentials(&url("http://p:9090"), false, own, &Author::Check),
            None
        );
        // baton's own Secret, even as a CA and to a listed https address
        let stolen = prometheus(serde_json::json!({"address": "https://p",
            "caSecret": {"name": "baton-webhook-tls", "key": "ca.key"}}));
        let refused = stolen.refuse_credentials(&url("https://p"), true, own, &Author::Check);
        assert!(refused.is_some_and(|why| why.contains("baton's own TLS Secret")));
        // A token to an address the operator did not list
        let bearer =
            prometheus(serde_json::json!({"address": "https://p?x=1", "bearerTokenSecret": token}));
        let refused = bearer.refuse_credentials(&url("https://p"), false, own, &Author::Check);
        assert!(refused.is_some_and(|why| why.contains("https://p/?… is not one")));
        assert_eq!(
            bearer.refuse_credentials(&url("https://p"), true, own, &Author::Check),
            None
        );
        // Over plain http, or without certificate checks, only when the check says so
        let plain =
            prometheus(serde_json::json!({"address": "http://p", "bearerTokenSecret": token}));
        let refused = plain.refuse_credentials(&url("http://p"), true, own, &Author::Check);
        assert!(refused.is_some_and(|why| why.contains("allowInsecureCredentials")));
        let unchecked = prometheus(serde_json::json!({"address": "https://p",
            "bearerTokenSecret": token, "insecureSkipVerify": true}));
        assert!(
            unchecked
                .refuse_credentials(&url("https://p"), true, own, &Author::Check)
                .is_some()
        );
        let asked = prometheus(serde_json::json!({"address": "http://p",
            "bearerTokenSecret": token, "allowInsecureCredentials": true}));
        assert_eq!(
            asked.refuse_credentials(&url("http://p"), true, own, &Author::Check),
            None
        );
    }

    #[test]
    fn a_refusal_names_the_field_its_reader_can_change() {
        let owner = |kind: &str, api_version: &str, controller: bool| OwnerReference {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            name: "phasedrollout-sample".to_owned(),
            uid: "uid".to_owned(),
            controller: Some(controller),
            block_owner_deletion: None,
        };
        // Given the check baton made of PhasedRollout phasedrollout-sample (its controller)
        let generated = Author::of(&[owner("PhasedRollout", "sts.plus/v1alpha1", true)]);
        assert_eq!(
            generated,
            Author::PhasedRollout("phasedrollout-sample".to_owned())
        );
        // When its Secret would go over plain http
        let plain: PrometheusSpec = serde_json::from_value(serde_json::json!({
            "address": "http://p",
            "bearerTokenSecret": {"name": "prom-secret", "key": "token"},
        }))
        .unwrap();
        let refused = plain
            .refuse_credentials(
                &url::Url::parse("http://p").unwrap(),
                true,
                None,
                &generated,
            )
            .unwrap();
        // Then the refusal names the PhasedRollout's field, not the generated check's
        assert!(
            refused.contains(
                "set spec.check.query.allowInsecureCredentials of PhasedRollout \
                 phasedrollout-sample: true"
            ),
            "{refused}"
        );
        assert!(!refused.contains("spec.prometheus"), "{refused}");
        // And a check owned otherwise, or not as its controller, is its own author's
        for owners in [
            vec![owner("PhasedRollout", "sts.plus/v1alpha1", false)],
            vec![owner("Deployment", "apps/v1", true)],
            vec![],
        ] {
            assert_eq!(Author::of(&owners), Author::Check);
        }
        assert_eq!(
            Author::Check.field(PrometheusField::AllowInsecureCredentials),
            "spec.prometheus.allowInsecureCredentials"
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
    fn a_prometheus_pass_shows_the_samples_it_saw() {
        let samples = query(PassWhen::Samples, None);
        assert_eq!(
            seen(&samples, &Ok(vec![0.01, 0.02])).as_deref(),
            Some("errors: 0.01, 0.02")
        );
        assert_eq!(
            seen(&samples, &Ok(vec![])).as_deref(),
            Some("errors: no samples")
        );
        assert_eq!(seen(&samples, &Err("down".to_owned())), None);
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

    #[test]
    fn the_baseline_revision_is_what_the_zone_ran_before_this_rollout() {
        use crate::rollout::plan;
        use crate::testing::{group, now, zone};
        let rolling = |name: &str, updated: u32| {
            zone(name, 3)
                .at_revision(&format!("{name}-old"))
                .template_changed_to(&format!("{name}-new"))
                .updated_first(updated)
                .build()
        };
        let group = group(vec![
            zone("a", 3).at_revision("a-new").build(),
            rolling("b", 1),
        ]);
        let gated = plan(&group, now());
        let rolling_b = variables(&group, &gated, "mimir");
        assert_eq!(rolling_b["zone"], "b");
        assert_eq!(rolling_b["revision"], "b-new");
        assert_eq!(rolling_b["baseline_revision"], "b-old");
        assert_eq!(
            render(
                r#"rate(errors{rev="{{revision}}"}) / rate(errors{rev="{{baseline_revision}}"})"#,
                &rolling_b
            ),
            r#"rate(errors{rev="b-new"}) / rate(errors{rev="b-old"})"#
        );
        // Nothing left to compare with: empty, never the new revision itself.
        let done = crate::testing::group(vec![zone("a", 3).at_revision("a-new").build()]);
        let finished = variables(&done, &plan(&done, now()), "mimir");
        assert_eq!(finished["baseline_revision"], "");
    }

    #[test]
    fn a_member_of_another_cluster_is_named_apart_for_queries_and_one_cluster_is_unchanged() {
        use crate::rollout::plan;
        use crate::testing::{group, now, zone};
        let query =
            r#"errors{cluster="{{cluster}}",statefulset="{{statefulset}}",zone="{{zone}}"}"#;
        let rolling = |name: &str| {
            zone(name, 3)
                .at_revision("old")
                .template_changed_to("new")
                .updated_first(1)
                .build()
        };
        // Across clusters: the member is `cluster-b/ingester`; a query gets both halves.
        let across = group(vec![
            zone("cluster-a/ingester", 3).at_revision("new").build(),
            rolling("cluster-b/ingester"),
            zone("cluster-c/ingester", 3).at_revision("old").build(),
        ]);
        let rolling_b = variables(&across, &plan(&across, now()), "mimir");
        assert_eq!(rolling_b["zone"], "cluster-b/ingester");
        assert_eq!(rolling_b["statefulset"], "ingester");
        assert_eq!(rolling_b["cluster"], "cluster-b");
        assert_eq!(
            render(query, &rolling_b),
            r#"errors{cluster="cluster-b",statefulset="ingester",zone="cluster-b/ingester"}"#
        );
        let web: super::super::web_check::WebQuery = serde_json::from_value(serde_json::json!({
            "url": "https://stats.example/{{cluster}}/{{statefulset}}",
            "jsonPath": "$.a",
            "match": "1",
        }))
        .expect("a web query");
        assert_eq!(
            web.rendered(&rolling_b).url,
            "https://stats.example/cluster-b/ingester"
        );
        // In one cluster: `zone` is the StatefulSet's name as ever, `statefulset` the same, and
        // no cluster.
        let one = group(vec![
            zone("ingester-zone-a", 3).at_revision("new").build(),
            rolling("ingester-zone-b"),
        ]);
        let rolling_zone_b = variables(&one, &plan(&one, now()), "mimir");
        assert_eq!(rolling_zone_b["zone"], "ingester-zone-b");
        assert_eq!(rolling_zone_b["statefulset"], "ingester-zone-b");
        assert_eq!(rolling_zone_b["cluster"], "");
        assert_eq!(
            render(query, &rolling_zone_b),
            r#"errors{cluster="",statefulset="ingester-zone-b",zone="ingester-zone-b"}"#
        );
    }

    #[test]
    fn on_failure_is_halt_or_warn_and_anything_else_is_named() {
        let with = |on_failure: &str| {
            spec(serde_json::json!({
                "prometheus": {"address": "http://prometheus:9090"},
                "queries": [{"name": "up", "query": "up"}],
                "onFailure": on_failure,
            }))
            .policy("check")
        };
        assert_eq!(
            with("Warn").map(|policy| policy.on_failure),
            Ok(OnFailure::Warn)
        );
        assert_eq!(
            with("Halt").map(|policy| policy.on_failure),
            Ok(OnFailure::Halt)
        );
        assert_eq!(
            with("warn"),
            Err(r#"spec.onFailure "warn" is not one of Halt, Warn, Rollback"#.to_owned())
        );
    }
}
