//! A health check whose queries are HTTP calls (`spec.web` of a `RolloutHealthCheck`): each
//! query GETs or POSTs a URL, reads a value out of the JSON answer with a JSONPath (RFC 9535)
//! and holds it to a condition (a threshold, a string match), or only asks that the answer be
//! 2xx. What Argo Rollouts' Web metric provider does, as one more result source of the same
//! check: the same policy, thresholds and `onFailure`.
//!
//! Pure: the spec's validation (errors name the field), which Secrets may be sent where, the
//! query rendered for a zone, and the verdict on an answer. The controller makes the call
//! (`gates::health`), under the same egress guard as Prometheus' (its own allowlist,
//! `gates.web_check_addresses`), and reads at most `gates.max_answer_bytes` of the answer.
//!
//! Whatever answers at the URL writes the answer, and the verdict lands in Events, the halt
//! annotation and the status page: values are shown shortened, strings quoted, URLs redacted.

use std::collections::BTreeMap;

use jsonpath_rust::JsonPath;
use serde::Deserialize;
use serde_json::Value;

use super::checks::CheckOutcome;
use super::health_check::{SecretKey, Threshold, render};
use super::redact::redact;

/// `spec.web`: what every query of a web check shares.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebSpec {
    /// Bound on each call (Go duration). Default 10s.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Send header values read from Secrets even over plain http.
    #[serde(default)]
    pub allow_insecure_credentials: bool,
}

/// A query's `web`: the call and the condition on its answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebQuery {
    pub url: String,
    /// `GET` (the default) or `POST`.
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// The request's body (POST only), rendered like the URL.
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub json_path: Option<String>,
    #[serde(default)]
    pub threshold: Option<Threshold>,
    /// Every value at `jsonPath` must be this string.
    #[serde(default, rename = "match")]
    pub matches: Option<String>,
    /// `2xx`: the answer's status alone decides.
    #[serde(default)]
    pub status: Option<String>,
}

/// A header's value: written in the check, or read from a Secret (which must opt in, and goes
/// only where Prometheus credentials may go).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValue {
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub secret_key_ref: Option<SecretKey>,
}

/// What a query asks of the answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition<'a> {
    Threshold {
        path: &'a str,
        threshold: &'a Threshold,
    },
    Match {
        path: &'a str,
        expected: &'a str,
    },
    Status2xx,
}

/// What the endpoint answered: its status and body (at most the operator's bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebAnswer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Headers the check may not set: the destination is decided by the URL alone, and the
/// request's framing by the HTTP client.
const FORBIDDEN_HEADERS: [&str; 4] = ["host", "content-length", "transfer-encoding", "connection"];

/// The longest part of a value the endpoint wrote that a message shows.
const MAX_SHOWN_CHARS: usize = 64;

impl WebQuery {
    /// The method to use, or what is wrong with it.
    pub fn method(&self) -> Result<&'static str, String> {
        match self.method.as_deref() {
            None | Some("GET") => Ok("GET"),
            Some("POST") => Ok("POST"),
            Some(other) => Err(format!("method {other:?} is not one of GET, POST")),
        }
    }

    /// The condition, or what is wrong with it (relative to `web.`).
    pub fn condition(&self) -> Result<Condition<'_>, String> {
        let set = [
            self.threshold.is_some(),
            self.matches.is_some(),
            self.status.is_some(),
        ];
        if set.iter().filter(|set| **set).count() != 1 {
            return Err(
                "needs exactly one of threshold, match and status (the condition on the answer)"
                    .to_owned(),
            );
        }
        if let Some(status) = &self.status {
            if status != "2xx" {
                return Err(format!("status {status:?} is not 2xx"));
            }
            if self.json_path.is_some() {
                return Err("jsonPath is read only with threshold or match, not status".to_owned());
            }
            return Ok(Condition::Status2xx);
        }
        let Some(path) = self.json_path.as_deref() else {
            return Err("jsonPath is needed with threshold or match".to_owned());
        };
        if let Err(error) = jsonpath_rust::parser::parse_json_path(path) {
            let error = shorten(&error.to_string());
            return Err(format!(
                "jsonPath {:?} is not a JSONPath (RFC 9535): {error}",
                shorten(path)
            ));
        }
        match (&self.threshold, &self.matches) {
            (Some(threshold), _) => {
                if threshold.holds(0.0).is_none() {
                    return Err(format!(
                        "threshold.operator {:?} is not one of <, <=, >, >=, ==, !=",
                        threshold.operator
                    ));
                }
                Ok(Condition::Threshold { path, threshold })
            }
            (None, Some(expected)) => Ok(Condition::Match { path, expected }),
            (None, None) => unreachable!("one condition is set, checked above"),
        }
    }

    /// What is wrong with the query, relative to its `web.`, if anything.
    pub fn problem(&self) -> Option<String> {
        if self.url.trim().is_empty() {
            return Some("url is empty".to_owned());
        }
        if let Err(why) = self.method() {
            return Some(why);
        }
        if self.body.is_some() && self.method.as_deref() != Some("POST") {
            return Some("body is sent only with method POST".to_owned());
        }
        for (name, value) in &self.headers {
            let field = format!("headers[{name:?}]");
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() || !name.chars().all(token) {
                return Some(format!("{field} is not an HTTP header name"));
            }
            if FORBIDDEN_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                return Some(format!(
                    "{field}: baton sets {name} itself; a check may not"
                ));
            }
            match (&value.value, &value.secret_key_ref) {
                (Some(text), None) if text.chars().any(|c| c.is_control() && c != '\t') => {
                    return Some(format!("{field}.value holds a control character"));
                }
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return Some(format!(
                        "{field} needs exactly one of value and secretKeyRef"
                    ));
                }
            }
        }
        self.condition().err()
    }

    /// The Secrets the query's headers read.
    pub fn secrets(&self) -> impl Iterator<Item = &SecretKey> {
        self.headers
            .values()
            .filter_map(|value| value.secret_key_ref.as_ref())
    }

    /// The query for the zone now: its URL and body with the variables replaced
    /// ([`super::health_check::variables`]).
    pub fn rendered(&self, variables: &BTreeMap<&str, &str>) -> Self {
        Self {
            url: render(&self.url, variables),
            body: self.body.as_ref().map(|body| render(body, variables)),
            ..self.clone()
        }
    }

    /// The query as messages show it: the method, the URL redacted and what is read of the
    /// answer (`GET https://app.example/stats → $.errorRate`).
    pub fn shown(&self) -> String {
        let method = self.method().unwrap_or("GET");
        let read = self.json_path.as_deref().unwrap_or("status");
        format!("{method} {} → {read}", redact(&self.url))
    }
}

impl WebSpec {
    /// Why the query `index` (its URL `url`, already permitted as a destination; `listed`: in
    /// the operator's `gates.web_check_addresses`) may not send its Secrets, if it may not:
    /// baton's own TLS Secret (`own_secret`) never; Secrets only to a listed address, and only
    /// over https unless `spec.web.allowInsecureCredentials` says so.
    pub fn refuse_credentials(
        &self,
        index: usize,
        query: &WebQuery,
        url: &url::Url,
        listed: bool,
        own_secret: Option<&str>,
    ) -> Option<String> {
        if let Some(own) = query
            .secrets()
            .find(|secret| own_secret == Some(secret.name.as_str()))
        {
            return Some(format!(
                "Secret {} is baton's own TLS Secret, which no health check may use",
                own.name
            ));
        }
        query.secrets().next()?;
        if !listed {
            return Some(format!(
                "spec.queries[{index}].web.headers read Secrets, which are sent only to addresses \
                 in gates.web_check_addresses, and {} is not one (the operator's configuration)",
                redact(url.as_str())
            ));
        }
        (url.scheme() == "http" && !self.allow_insecure_credentials).then(|| {
            format!(
                "spec.queries[{index}].web.headers read Secrets, which over plain http can be \
                 read on the way; set spec.web.allowInsecureCredentials: true to send them anyway"
            )
        })
    }
}

/// The verdict on one web query's answer (`query` as rendered), or why there is none.
pub fn judge(name: &str, query: &WebQuery, answer: Result<WebAnswer, String>) -> CheckOutcome {
    let shown = query.shown();
    let inconclusive = |why: String| CheckOutcome::Inconclusive {
        why: format!("query {name} ({shown}): {why}"),
    };
    let fail = |value: String| CheckOutcome::Fail {
        query: shown.clone(),
        value,
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(why) => return inconclusive(why),
    };
    let condition = match query.condition() {
        Ok(condition) => condition,
        Err(why) => return inconclusive(why),
    };
    let success = (200..300).contains(&answer.status);
    let path = match condition {
        Condition::Status2xx if success => return CheckOutcome::Pass,
        Condition::Status2xx => return fail(format!("HTTP {} (must be 2xx)", answer.status)),
        _ if !success => return inconclusive(format!("the answer is HTTP {}", answer.status)),
        Condition::Threshold { path, .. } | Condition::Match { path, .. } => path,
    };
    let document: Value = match serde_json::from_slice(&answer.body) {
        Ok(document) => document,
        Err(error) => {
            return inconclusive(format!(
                "the answer is not JSON ({:?} error at line {}, column {})",
                error.classify(),
                error.line(),
                error.column()
            ));
        }
    };
    let values = match document.query(path) {
        Ok(values) => values,
        Err(error) => {
            return inconclusive(format!(
                "jsonPath {}: {}",
                shorten(path),
                shorten(&error.to_string())
            ));
        }
    };
    if values.is_empty() {
        return inconclusive(format!(
            "jsonPath {} matches nothing in the answer",
            shorten(path)
        ));
    }
    let mut failing = false;
    for value in &values {
        match holds(&condition, value) {
            Ok(true) => {}
            Ok(false) => failing = true,
            Err(why) => return inconclusive(why),
        }
    }
    if !failing {
        return CheckOutcome::Pass;
    }
    let seen = format_values(&values);
    fail(match condition_text(query) {
        Some(must) => format!("{seen} (must be {must})"),
        None => seen,
    })
}

/// What a web query's answer held, as a pass's message shows it: the values at its JSONPath
/// (at most three, shortened, strings quoted), or the status for `status: 2xx`
/// (`error-rate: 0.01`, `ready: HTTP 200`); `None` without an answer to show.
pub fn seen(name: &str, query: &WebQuery, answer: &Result<WebAnswer, String>) -> Option<String> {
    let answer = answer.as_ref().ok()?;
    let shown = match query.condition().ok()? {
        Condition::Status2xx => format!("HTTP {}", answer.status),
        Condition::Threshold { path, .. } | Condition::Match { path, .. } => {
            let document: Value = serde_json::from_slice(&answer.body).ok()?;
            let values = document.query(path).ok()?;
            if values.is_empty() {
                return None;
            }
            format_values(&values)
        }
    };
    Some(format!("{name}: {shown}"))
}

/// Whether `value` satisfies `condition` (one on a value), or why it cannot be judged.
fn holds(condition: &Condition<'_>, value: &Value) -> Result<bool, String> {
    match condition {
        Condition::Threshold { path, threshold } => number(value)
            .map(|number| threshold.holds(number) == Some(true))
            .ok_or_else(|| format!("the value at {} is not a number", shorten(path))),
        Condition::Match { expected, .. } => Ok(text(value) == *expected),
        Condition::Status2xx => Ok(true),
    }
}

/// What the condition asks, as a failure's value shows it.
fn condition_text(query: &WebQuery) -> Option<String> {
    if let Some(threshold) = &query.threshold {
        return Some(format!("{} {}", threshold.operator, threshold.value));
    }
    query
        .matches
        .as_ref()
        .map(|expected| format!("{:?}", shorten(expected)))
}

/// A JSON value as a number: a number, or a string holding one (many endpoints quote them).
fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// A JSON value as a string match compares it: a string's content, anything else its JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Up to three values, each shortened, strings quoted.
fn format_values(values: &[&Value]) -> String {
    let shown: Vec<String> = values
        .iter()
        .take(3)
        .map(|value| match value {
            Value::String(text) => format!("{:?}", shorten(text)),
            Value::Number(number) => number.to_string(),
            other => shorten(&other.to_string()),
        })
        .collect();
    let more = values.len().saturating_sub(3);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

fn shorten(text: &str) -> String {
    super::redact::shorten(text, MAX_SHOWN_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(json: serde_json::Value) -> WebQuery {
        serde_json::from_value(json).expect("a web query")
    }

    fn answer(status: u16, body: &str) -> Result<WebAnswer, String> {
        Ok(WebAnswer {
            status,
            body: body.as_bytes().to_vec(),
        })
    }

    #[test]
    fn a_pass_shows_the_values_it_saw_and_the_status_it_got() {
        let rate = query(
            serde_json::json!({"url": "https://a", "jsonPath": "$.zones[*].rate",
            "threshold": {"operator": "<", "value": 0.1}}),
        );
        let body = r#"{"zones": [{"rate": 0.01}, {"rate": "0.02"}, {"rate": 0}, {"rate": 0}]}"#;
        assert_eq!(
            seen("rate", &rate, &answer(200, body)).as_deref(),
            Some(r#"rate: 0.01, "0.02", 0 and 1 more"#)
        );
        let ready = query(serde_json::json!({"url": "https://a", "status": "2xx"}));
        assert_eq!(
            seen("ready", &ready, &answer(204, "")).as_deref(),
            Some("ready: HTTP 204")
        );
        // Nothing to show: no answer, not JSON, nothing at the path
        assert_eq!(seen("rate", &rate, &Err("refused".to_owned())), None);
        assert_eq!(seen("rate", &rate, &answer(200, "<html>")), None);
        assert_eq!(seen("rate", &rate, &answer(200, "{}")), None);
    }

    fn error_rate(operator: &str, value: f64) -> WebQuery {
        query(serde_json::json!({
            "url": "https://app.example/stats?token=secret",
            "jsonPath": "$.errorRate",
            "threshold": {"operator": operator, "value": value},
        }))
    }

    #[test]
    fn a_threshold_holds_for_every_value_the_path_selects() {
        let bounded = error_rate("<", 0.1);
        assert_eq!(
            judge("errors", &bounded, answer(200, r#"{"errorRate": 0.01}"#)),
            CheckOutcome::Pass
        );
        // A number quoted as a string is a number
        assert_eq!(
            judge("errors", &bounded, answer(200, r#"{"errorRate": "0.05"}"#)),
            CheckOutcome::Pass
        );
        assert_eq!(
            judge("errors", &bounded, answer(200, r#"{"errorRate": 0.3}"#)),
            CheckOutcome::Fail {
                query: "GET https://app.example/stats?… → $.errorRate".to_owned(),
                value: "0.3 (must be < 0.1)".to_owned(),
            }
        );
        let every = query(serde_json::json!({
            "url": "https://app.example/zones",
            "jsonPath": "$.zones[*].errorRate",
            "threshold": {"operator": "<=", "value": 0.1},
        }));
        let outcome = judge(
            "errors",
            &every,
            answer(
                200,
                r#"{"zones": [{"errorRate": 0.1}, {"errorRate": 0.2}]}"#,
            ),
        );
        assert!(
            matches!(&outcome, CheckOutcome::Fail { value, .. } if value == "0.1, 0.2 (must be <= 0.1)"),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_match_compares_strings_and_other_values_as_json() {
        let ready = query(serde_json::json!({
            "url": "https://app.example/health", "jsonPath": "$.status", "match": "ok",
        }));
        assert_eq!(
            judge("h", &ready, answer(200, r#"{"status":"ok"}"#)),
            CheckOutcome::Pass
        );
        let outcome = judge("h", &ready, answer(200, r#"{"status":"degraded"}"#));
        assert!(
            matches!(&outcome, CheckOutcome::Fail { value, .. } if value == r#""degraded" (must be "ok")"#),
            "{outcome:?}"
        );
        let flag = query(serde_json::json!({
            "url": "https://app.example/health", "jsonPath": "$.ready", "match": "true",
        }));
        assert_eq!(
            judge("h", &flag, answer(200, r#"{"ready":true}"#)),
            CheckOutcome::Pass
        );
    }

    #[test]
    fn a_status_check_asks_only_for_2xx() {
        let up = query(serde_json::json!({"url": "https://app.example/ready", "status": "2xx"}));
        assert_eq!(judge("up", &up, answer(204, "")), CheckOutcome::Pass);
        assert_eq!(
            judge("up", &up, answer(503, "down")),
            CheckOutcome::Fail {
                query: "GET https://app.example/ready → status".to_owned(),
                value: "HTTP 503 (must be 2xx)".to_owned(),
            }
        );
    }

    #[test]
    fn an_answer_that_cannot_be_judged_is_inconclusive_and_says_why() {
        let bounded = error_rate("<", 0.1);
        let why = |outcome: CheckOutcome| match outcome {
            CheckOutcome::Inconclusive { why } => why,
            other => panic!("not inconclusive: {other:?}"),
        };
        // A path that matches nothing names the path, never passes
        assert_eq!(
            why(judge("errors", &bounded, answer(200, r#"{"rate": 0.01}"#))),
            "query errors (GET https://app.example/stats?… → $.errorRate): jsonPath $.errorRate \
             matches nothing in the answer"
        );
        assert!(
            why(judge(
                "e",
                &bounded,
                answer(200, r#"{"errorRate": "high"}"#)
            ))
            .contains("the value at $.errorRate is not a number")
        );
        assert!(
            why(judge("e", &bounded, answer(200, r#"{"errorRate": null}"#)))
                .contains("not a number")
        );
        assert!(
            why(judge(
                "e",
                &bounded,
                answer(200, "<html>secret page</html>")
            ))
            .contains("the answer is not JSON")
        );
        // An error status with a threshold: no value to judge
        assert!(
            why(judge("e", &bounded, answer(500, r#"{"errorRate": 0.01}"#)))
                .ends_with("the answer is HTTP 500")
        );
        // No answer at all (the controller's words: too large, unreachable)
        assert!(
            why(judge(
                "e",
                &bounded,
                Err("the answer is larger than 1048576 bytes".to_owned())
            ))
            .ends_with("the answer is larger than 1048576 bytes")
        );
        // Whatever the endpoint wrote is shown shortened
        let long = format!(r#"{{"status": "{}"}}"#, "x".repeat(10_000));
        let matching = query(serde_json::json!({
            "url": "https://app.example/h", "jsonPath": "$.status", "match": "ok",
        }));
        let outcome = judge("h", &matching, answer(200, &long));
        assert!(
            matches!(&outcome, CheckOutcome::Fail { value, .. } if value.chars().count() < 100),
            "{outcome:?}"
        );
    }

    #[test]
    fn bad_queries_are_named_with_their_value() {
        let problem = |json: serde_json::Value| query(json).problem();
        let url = "https://app.example/x";
        assert_eq!(
            problem(serde_json::json!({"url": url, "status": "2xx"})),
            None
        );
        assert_eq!(
            problem(serde_json::json!({"url": url, "status": "5xx"})),
            Some(r#"status "5xx" is not 2xx"#.to_owned())
        );
        assert_eq!(
            problem(serde_json::json!({"url": url})),
            Some(
                "needs exactly one of threshold, match and status (the condition on the answer)"
                    .to_owned()
            )
        );
        assert_eq!(
            problem(serde_json::json!({"url": url, "status": "2xx", "match": "ok"})),
            Some(
                "needs exactly one of threshold, match and status (the condition on the answer)"
                    .to_owned()
            )
        );
        assert_eq!(
            problem(serde_json::json!({"url": url, "match": "ok"})),
            Some("jsonPath is needed with threshold or match".to_owned())
        );
        assert!(
            problem(serde_json::json!({"url": url, "match": "ok", "jsonPath": "$[?(@.a=="}))
                .is_some_and(|why| why.starts_with(r#"jsonPath "$[?(@.a==" is not a JSONPath"#))
        );
        assert!(
            problem(serde_json::json!({"url": url, "match": "ok", "jsonPath": "status"}))
                .is_some_and(|why| why.contains("is not a JSONPath"))
        );
        // A path nested beyond reason is refused, never a stack overflow
        let deep = format!("$.a{}", "[?(@.b".repeat(5_000));
        assert!(
            problem(serde_json::json!({"url": url, "match": "ok", "jsonPath": deep}))
                .is_some_and(|why| why.contains("is not a JSONPath") && why.chars().count() < 400)
        );
        assert_eq!(
            problem(serde_json::json!({"url": url, "jsonPath": "$.a",
                "threshold": {"operator": "=~", "value": 1}})),
            Some(r#"threshold.operator "=~" is not one of <, <=, >, >=, ==, !="#.to_owned())
        );
        assert_eq!(
            problem(serde_json::json!({"url": url, "status": "2xx", "method": "DELETE"})),
            Some(r#"method "DELETE" is not one of GET, POST"#.to_owned())
        );
        assert_eq!(
            problem(serde_json::json!({"url": url, "status": "2xx", "body": "{}"})),
            Some("body is sent only with method POST".to_owned())
        );
        assert_eq!(
            problem(serde_json::json!({"url": " ", "status": "2xx"})),
            Some("url is empty".to_owned())
        );
        // Headers: a name, one source, no line breaks, none that steers the request
        let header = |name: &str, value: serde_json::Value| {
            problem(serde_json::json!({"url": url, "status": "2xx", "headers": {name: value}}))
        };
        assert_eq!(
            header("Accept", serde_json::json!({"value": "application/json"})),
            None
        );
        assert_eq!(
            header("X-Evil\r\nHost", serde_json::json!({"value": "a"})),
            Some(r#"headers["X-Evil\r\nHost"] is not an HTTP header name"#.to_owned())
        );
        assert_eq!(
            header("X-A", serde_json::json!({"value": "a\r\nHost: metadata"})),
            Some(r#"headers["X-A"].value holds a control character"#.to_owned())
        );
        assert_eq!(
            header("Host", serde_json::json!({"value": "169.254.169.254"})),
            Some(r#"headers["Host"]: baton sets Host itself; a check may not"#.to_owned())
        );
        assert_eq!(
            header("X-A", serde_json::json!({})),
            Some(r#"headers["X-A"] needs exactly one of value and secretKeyRef"#.to_owned())
        );
        assert_eq!(
            header(
                "X-A",
                serde_json::json!({"value": "a", "secretKeyRef": {"name": "s", "key": "k"}})
            ),
            Some(r#"headers["X-A"] needs exactly one of value and secretKeyRef"#.to_owned())
        );
    }

    #[test]
    fn secret_headers_go_only_from_others_secrets_to_listed_addresses_over_https() {
        let url = |raw: &str| url::Url::parse(raw).expect("a URL");
        let own = Some("baton-webhook-tls");
        let with_secret = |secret: &str| {
            query(
                serde_json::json!({"url": "https://app.example/x", "status": "2xx",
                "headers": {"Authorization": {"secretKeyRef": {"name": secret, "key": "header"}}}}),
            )
        };
        let strict = WebSpec::default();
        let open = query(serde_json::json!({"url": "http://app/x", "status": "2xx",
            "headers": {"Accept": {"value": "application/json"}}}));
        // Written values go anywhere permitted
        assert_eq!(
            strict.refuse_credentials(0, &open, &url("http://app/x"), false, own),
            None
        );
        // baton's own Secret never
        let stolen = with_secret("baton-webhook-tls");
        assert!(
            strict
                .refuse_credentials(0, &stolen, &url("https://app.example/x"), true, own)
                .is_some_and(|why| why.contains("baton's own TLS Secret"))
        );
        // A Secret only to a listed address
        let token = with_secret("app-token");
        assert!(
            strict
                .refuse_credentials(2, &token, &url("https://app.example/x?t=1"), false, own)
                .is_some_and(
                    |why| why.starts_with("spec.queries[2].web.headers read Secrets")
                        && why.contains("https://app.example/x?… is not one")
                )
        );
        assert_eq!(
            strict.refuse_credentials(0, &token, &url("https://app.example/x"), true, own),
            None
        );
        // Over plain http only when the check says so
        assert!(
            strict
                .refuse_credentials(0, &token, &url("http://app.example/x"), true, own)
                .is_some_and(|why| why.contains("spec.web.allowInsecureCredentials"))
        );
        let allowing = WebSpec {
            allow_insecure_credentials: true,
            ..WebSpec::default()
        };
        assert_eq!(
            allowing.refuse_credentials(0, &token, &url("http://app.example/x"), true, own),
            None
        );
    }

    #[test]
    fn the_url_and_body_are_rendered_for_the_zone_and_nothing_else() {
        let post = query(serde_json::json!({
            "url": "https://app.example/zones/{{zone}}/stats",
            "method": "POST",
            "body": r#"{"revision": "{{revision}}", "baseline": "{{baseline_revision}}"}"#,
            "headers": {"X-Zone": {"value": "{{zone}}"}},
            "jsonPath": "$.ratio",
            "threshold": {"operator": "<", "value": 1.5},
        }));
        let variables = BTreeMap::from([
            ("zone", "ingester-zone-b"),
            ("revision", "b-new"),
            ("baseline_revision", "b-old"),
        ]);
        let rendered = post.rendered(&variables);
        assert_eq!(
            rendered.url,
            "https://app.example/zones/ingester-zone-b/stats"
        );
        assert_eq!(
            rendered.body.as_deref(),
            Some(r#"{"revision": "b-new", "baseline": "b-old"}"#)
        );
        assert_eq!(rendered.headers, post.headers);
        assert_eq!(
            rendered.shown(),
            "POST https://app.example/zones/ingester-zone-b/stats → $.ratio"
        );
    }
}
