//! Calls baton makes to pods (addressed with `baton_core::pod_address`): an HTTP client whose
//! every call is bounded and measured in
//! `rollout_operator_pod_http_client_request_duration_seconds{path,method,status_code}`.
//!
//! Used by the webhook (prepare-downscale) and the controller (delayed downscale).

use std::time::{Duration, Instant};

use baton_config::PodsConfig;
use baton_core::pod_address::{PodEndpoint, PodMethod};
use futures::{Stream, StreamExt, TryStreamExt};
use prometheus::{HistogramOpts, HistogramVec, Registry};

/// Name of the pod HTTP client histogram (docs/compatibility.md: dashboards use it).
pub const POD_CLIENT_DURATION_METRIC: &str =
    "rollout_operator_pod_http_client_request_duration_seconds";

/// Largest response body kept from a pod; pods answer with a small JSON document at most.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Why a call to a pod failed.
#[derive(Debug, thiserror::Error)]
pub enum PodCallError {
    #[error("{method} {url} (pod {pod}): {}", error_chain(.error))]
    Transport {
        pod: String,
        method: PodMethod,
        url: String,
        /// In the message already, so not also a `source` (chains would print it twice).
        error: reqwest::Error,
    },
    #[error("{method} {url} (pod {pod}) did not answer within {timeout:?}")]
    TimedOut {
        pod: String,
        method: PodMethod,
        url: String,
        timeout: Duration,
    },
    /// The body is not repeated: messages end up in denials and Events, which must not make
    /// baton a way to read what some port of a pod answers.
    #[error("{method} {url} (pod {pod}) answered HTTP {status}")]
    Status {
        pod: String,
        method: PodMethod,
        url: String,
        status: u16,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum PodClientError {
    #[error("building the pod HTTP client: {0}")]
    Build(#[from] reqwest::Error),
    #[error("registering {POD_CLIENT_DURATION_METRIC}: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// HTTP client for pods: connect and whole-call timeouts from `pods.*`, no proxy (pods are
/// reached inside the cluster), bounded concurrency for fan-outs.
#[derive(Debug, Clone)]
pub struct PodHttpClient {
    http: reqwest::Client,
    duration: HistogramVec,
    /// The `path` label values used so far (see [`PathLabels`]).
    paths: std::sync::Arc<PathLabels>,
    request_timeout: Duration,
    max_concurrent_calls: usize,
}

impl PodHttpClient {
    /// Builds the client and registers its histogram in `registry`.
    pub fn new(config: &PodsConfig, registry: &Registry) -> Result<Self, PodClientError> {
        let duration = HistogramVec::new(
            HistogramOpts::new(
                POD_CLIENT_DURATION_METRIC,
                "Time spent on HTTP calls to pods (prepare-downscale and delayed downscale).",
            ),
            &["path", "method", "status_code"],
        )?;
        registry.register(Box::new(duration.clone()))?;
        // No redirects: a pod's answer must not send baton's call anywhere else.
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout.get())
            .timeout(config.request_timeout.get())
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(Self {
            http,
            duration,
            paths: std::sync::Arc::default(),
            request_timeout: config.request_timeout.get(),
            max_concurrent_calls: config.max_concurrent_calls.max(1),
        })
    }

    /// The histogram it registered (tests read its name: dashboards query it).
    pub fn duration_histogram(&self) -> &HistogramVec {
        &self.duration
    }

    /// Calls one endpoint; a 2xx answer returns its body (at most 64 KiB), anything else is an
    /// error naming the pod, the URL and what went wrong.
    #[tracing::instrument(skip_all, fields(pod = %endpoint.pod, method = method.as_str()))]
    pub async fn call(
        &self,
        method: PodMethod,
        endpoint: &PodEndpoint,
    ) -> Result<Vec<u8>, PodCallError> {
        let path = self.paths.label(url_path(&endpoint.url));
        let started = Instant::now();
        let request = match method {
            PodMethod::Post => self.http.post(&endpoint.url),
            PodMethod::Delete => self.http.delete(&endpoint.url),
        }
        .header("Content-Type", "application/json");
        let outcome = async {
            let mut response = request.send().await?;
            let status = response.status().as_u16();
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                let room = MAX_BODY_BYTES.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok::<_, reqwest::Error>((status, body))
        }
        .await;
        let status_label = match &outcome {
            Ok((status, _)) => status.to_string(),
            Err(error) if error.is_timeout() => "timeout".to_owned(),
            Err(_) => "error".to_owned(),
        };
        self.duration
            .with_label_values(&[path.as_str(), method.as_str(), status_label.as_str()])
            .observe(started.elapsed().as_secs_f64());
        let (status, body) = outcome.map_err(|source| {
            if source.is_timeout() {
                PodCallError::TimedOut {
                    pod: endpoint.pod.clone(),
                    method,
                    url: endpoint.url.clone(),
                    timeout: self.request_timeout,
                }
            } else {
                PodCallError::Transport {
                    pod: endpoint.pod.clone(),
                    method,
                    url: endpoint.url.clone(),
                    error: source,
                }
            }
        })?;
        if !(200..300).contains(&status) {
            return Err(PodCallError::Status {
                pod: endpoint.pod.clone(),
                method,
                url: endpoint.url.clone(),
                status,
            });
        }
        tracing::debug!(pod = %endpoint.pod, %method, url = %endpoint.url, status, "pod call succeeded");
        Ok(body)
    }

    /// Calls every endpoint, in the given order, at most `pods.max_concurrent_calls` at once, and
    /// stops at the first failure (calls in flight are cancelled, none is started after it).
    pub async fn call_all(
        &self,
        method: PodMethod,
        endpoints: &[PodEndpoint],
    ) -> Result<(), PodCallError> {
        self.calls(method, endpoints)
            .try_for_each(|_| async { Ok(()) })
            .await
    }

    /// Calls every endpoint whatever happens to the others, and returns the failures. Used to
    /// undo: each pod must be told even when another one cannot be reached.
    pub async fn call_each(
        &self,
        method: PodMethod,
        endpoints: &[PodEndpoint],
    ) -> Vec<PodCallError> {
        self.calls(method, endpoints)
            .filter_map(|result| async move { result.err() })
            .collect()
            .await
    }

    /// The calls to `endpoints`, at most `pods.max_concurrent_calls` in flight, in the order
    /// they finish.
    fn calls<'a>(
        &'a self,
        method: PodMethod,
        endpoints: &'a [PodEndpoint],
    ) -> impl Stream<Item = Result<Vec<u8>, PodCallError>> + Send + 'a {
        // Futures collected first: a closure inside the stream would make the future not
        // provably Send for every lifetime, and callers spawn it.
        let calls: Vec<_> = endpoints
            .iter()
            .map(|endpoint| self.call(method, endpoint))
            .collect();
        futures::stream::iter(calls).buffer_unordered(self.max_concurrent_calls)
    }
}

/// An error and its causes, `outer: inner: root` (reqwest keeps the root cause, such as
/// "Connection refused", out of its own message).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        cause = inner.source();
    }
    text
}

/// The path of an `http://host:port/path` URL, for the metric label (no query string).
/// The `path` label of the pod client's histogram. Paths come from annotations anyone editing
/// a StatefulSet writes, so each new one would be a new series: the first
/// [`MAX_PATH_LABELS`] are kept as they are (real deployments use one or two), later ones are
/// counted as `other`.
#[derive(Debug, Default)]
struct PathLabels(std::sync::Mutex<std::collections::HashSet<String>>);

/// How many distinct `path` label values the pod client's histogram takes.
const MAX_PATH_LABELS: usize = 16;

impl PathLabels {
    fn label(&self, path: &str) -> String {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.contains(path) {
            return path.to_owned();
        }
        if seen.len() < MAX_PATH_LABELS {
            seen.insert(path.to_owned());
            return path.to_owned();
        }
        "other".to_owned()
    }
}

fn url_path(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme
        .find('/')
        .map_or("/", |index| &after_scheme[index..]);
    path.split(['?', '#']).next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_labels_are_bounded() {
        let labels = PathLabels::default();
        for index in 0..MAX_PATH_LABELS {
            assert_eq!(labels.label(&format!("/p{index}")), format!("/p{index}"));
        }
        assert_eq!(labels.label("/p0"), "/p0", "a known path keeps its label");
        assert_eq!(labels.label("/one-more"), "other");
        assert_eq!(labels.label("/and-another"), "other");
    }

    #[test]
    fn metric_path_is_the_url_path() {
        assert_eq!(url_path("http://h:80/a/b?x=1"), "/a/b");
        assert_eq!(url_path("http://h:80"), "/");
        assert_eq!(url_path("http://[::1]:80/p#f"), "/p");
    }

    /// A one-route HTTP server on a free loopback port answering `status` to every request and
    /// recording the methods it saw.
    async fn pod_server(
        status: u16,
    ) -> (
        String,
        std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        actix_web::dev::ServerHandle,
    ) {
        use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = seen.clone();
        let server = HttpServer::new(move || {
            let recorded = recorded.clone();
            App::new().default_service(web::to(move |request: HttpRequest| {
                let recorded = recorded.clone();
                async move {
                    recorded.lock().unwrap().push(format!(
                        "{} {}",
                        request.method(),
                        request.path()
                    ));
                    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
                        .body(r#"{"timestamp": 1700000000}"#)
                }
            }))
        })
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .unwrap();
        let address = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        (format!("127.0.0.1:{}", address.port()), seen, handle)
    }

    fn client(registry: &Registry) -> PodHttpClient {
        crate::crypto::install_default_provider();
        PodHttpClient::new(&PodsConfig::default(), registry).unwrap()
    }

    #[tokio::test]
    async fn successful_calls_return_the_body_and_are_measured() {
        let registry = Registry::new();
        let client = client(&registry);
        let (address, seen, handle) = pod_server(200).await;
        let endpoint = PodEndpoint {
            pod: "p-0".into(),
            url: format!("http://{address}/ingester/prepare-shutdown"),
        };
        let body = client.call(PodMethod::Post, &endpoint).await.unwrap();
        assert_eq!(body, br#"{"timestamp": 1700000000}"#);
        assert_eq!(
            *seen.lock().unwrap(),
            vec!["POST /ingester/prepare-shutdown".to_owned()]
        );
        let families = registry.gather();
        let family = families
            .iter()
            .find(|family| family.name() == POD_CLIENT_DURATION_METRIC)
            .unwrap();
        let labels: Vec<(String, String)> = family.get_metric()[0]
            .get_label()
            .iter()
            .map(|label| (label.name().to_owned(), label.value().to_owned()))
            .collect();
        assert_eq!(
            labels,
            vec![
                ("method".to_owned(), "POST".to_owned()),
                ("path".to_owned(), "/ingester/prepare-shutdown".to_owned()),
                ("status_code".to_owned(), "200".to_owned()),
            ]
        );
        handle.stop(false).await;
    }

    #[tokio::test]
    async fn failures_name_the_pod_and_what_went_wrong() {
        let registry = Registry::new();
        let client = client(&registry);
        let (address, _, handle) = pod_server(500).await;
        let failing = PodEndpoint {
            pod: "p-1".into(),
            url: format!("http://{address}/x"),
        };
        let error = client
            .call(PodMethod::Delete, &failing)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("DELETE") && error.contains("p-1") && error.contains("HTTP 500"),
            "{error}"
        );

        // A port nobody listens on: bind one, learn it, close it.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let unreachable = PodEndpoint {
            pod: "p-2".into(),
            url: format!("http://{closed}/x"),
        };
        let failures = client
            .call_each(PodMethod::Delete, &[failing, unreachable])
            .await;
        assert_eq!(
            failures.len(),
            2,
            "every endpoint is called and every failure reported"
        );
        handle.stop(false).await;
    }
}
