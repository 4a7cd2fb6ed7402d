//! The Kubernetes client both binaries use, instrumented with the Go operator's
//! `rollout_operator_kubernetes_api_client_request_duration_seconds` histogram and its
//! client-side rate limits ([`crate::rate_limit`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use baton_config::KubernetesConfig;
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;
use prometheus::{HistogramOpts, HistogramVec, Registry};

#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    #[error(
        "no Kubernetes configuration: neither KUBECONFIG (or ~/.kube/config) nor the in-cluster service account could be used: {0}"
    )]
    Infer(#[from] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
    #[error("registering the API client metric: {0}")]
    Metric(#[from] prometheus::Error),
}

/// A client configured as kubectl would be (`KUBECONFIG`, then `~/.kube/config`), else from the
/// in-cluster service account; every request is timed into `registry`. The process's watches
/// start as `config.initial_list` says from now on ([`crate::initial_list`]).
pub async fn client(
    config: &KubernetesConfig,
    registry: &Registry,
) -> Result<kube::Client, KubeClientError> {
    Ok(client_and_layers(config, registry).await?.0)
}

/// As [`client`], with its layers, for more clients of the same process.
pub async fn client_and_layers(
    config: &KubernetesConfig,
    registry: &Registry,
) -> Result<(kube::Client, ClientLayers), KubeClientError> {
    crate::initial_list::configure(config.initial_list);
    let kube_config = kube::Config::infer().await?;
    let layers = ClientLayers::register(config, registry)?;
    Ok((layers.client(kube_config)?, layers))
}

/// The measuring and rate-limiting layers of [`client`], registered once per process, for every
/// client it builds (the controller's member clusters each have one, from their kubeconfigs).
#[derive(Clone)]
pub struct ClientLayers {
    timed: RequestDurationLayer,
    limited: crate::rate_limit::RateLimitLayer,
    connect_timeout: Duration,
}

impl ClientLayers {
    pub fn register(
        config: &KubernetesConfig,
        registry: &Registry,
    ) -> Result<Self, KubeClientError> {
        Ok(Self {
            timed: RequestDurationLayer::register(registry)?,
            limited: crate::rate_limit::RateLimitLayer::register(config, registry)?,
            connect_timeout: config.connect_timeout.get(),
        })
    }

    /// A client of `kube_config`, with the configured connect timeout, timed and limited.
    pub fn client(&self, mut kube_config: kube::Config) -> Result<kube::Client, KubeClientError> {
        kube_config.connect_timeout = Some(self.connect_timeout);
        // Timed outside the limit, as the Go operator's client: a wait for a token is time the
        // request took.
        Ok(kube::client::ClientBuilder::try_from(kube_config)?
            .with_layer(&self.limited)
            .with_layer(&self.timed)
            .build())
    }
}

/// An API call that did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("{what} did not answer within {timeout:?}")]
pub struct TimedOut {
    pub what: String,
    pub timeout: Duration,
}

/// Bounds a call: kube's client has no read timeout and retries throttling for long, which a
/// lease renewal or an admission answer cannot afford.
pub async fn bounded<T>(
    timeout: Duration,
    what: impl Into<String>,
    call: impl Future<Output = T>,
) -> Result<T, TimedOut> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| TimedOut {
            what: what.into(),
            timeout,
        })
}

/// Times every request of the client (until its response headers: a watch counts its start).
#[derive(Debug, Clone)]
pub struct RequestDurationLayer {
    histogram: HistogramVec,
}

impl RequestDurationLayer {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let histogram = HistogramVec::new(
            HistogramOpts::new(
                "rollout_operator_kubernetes_api_client_request_duration_seconds",
                "Time spent doing Kubernetes API requests.",
            ),
            &["path", "method", "status_code"],
        )?;
        registry.register(Box::new(histogram.clone()))?;
        Ok(Self { histogram })
    }

    /// The histogram it registered (tests read its name: dashboards query it).
    pub fn histogram(&self) -> &HistogramVec {
        &self.histogram
    }
}

impl<S> tower::Layer<S> for RequestDurationLayer {
    type Service = RequestDuration<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestDuration {
            inner,
            histogram: self.histogram.clone(),
        }
    }
}

/// The service [`RequestDurationLayer`] wraps around the client's stack.
#[derive(Debug, Clone)]
pub struct RequestDuration<S> {
    inner: S,
    histogram: HistogramVec,
}

impl<S, B, R> tower::Service<http::Request<B>> for RequestDuration<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = route_of(request.uri().path());
        let method = request.method().to_string();
        let histogram = self.histogram.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            let status = match &response {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_owned(),
            };
            histogram
                .with_label_values(&[path.as_str(), method.as_str(), status.as_str()])
                .observe(started.elapsed().as_secs_f64());
            response
        })
    }
}

/// The request path with namespaces and object names replaced by placeholders, so the metric
/// has one series per kind of call, not per pod:
/// `/api/v1/namespaces/{namespace}/pods/{name}`.
pub fn route_of(path: &str) -> String {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let prefix = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return path.to_owned(),
    };
    let mut route: Vec<String> = segments
        .iter()
        .take(prefix)
        .map(|s| (*s).to_owned())
        .collect();
    let mut rest = &segments[prefix.min(segments.len())..];
    if rest.first() == Some(&"namespaces") && rest.len() >= 2 {
        route.push("namespaces".to_owned());
        route.push("{namespace}".to_owned());
        rest = &rest[2..];
    }
    if let Some((resource, after)) = rest.split_first() {
        route.push((*resource).to_owned());
        if let Some((_, subresources)) = after.split_first() {
            route.push("{name}".to_owned());
            route.extend(subresources.iter().map(|s| (*s).to_owned()));
        }
    }
    format!("/{}", route.join("/"))
}

#[cfg(test)]
mod tests {
    use super::route_of;

    #[test]
    fn routes_hide_namespaces_and_names() {
        for (path, route) in [
            (
                "/api/v1/namespaces/prod/pods/ingester-zone-a-0",
                "/api/v1/namespaces/{namespace}/pods/{name}",
            ),
            (
                "/api/v1/namespaces/prod/pods",
                "/api/v1/namespaces/{namespace}/pods",
            ),
            (
                "/apis/apps/v1/namespaces/prod/statefulsets/ingester-zone-a/status",
                "/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}/status",
            ),
            (
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/no-downscale",
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}",
            ),
            ("/api/v1/namespaces/prod", "/api/v1/namespaces/{namespace}"),
            ("/readyz", "/readyz"),
        ] {
            assert_eq!(route_of(path), route, "{path}");
        }
    }
}

/// How baton's watches retry after an error, such as an API server outage: 250 ms doubling up
/// to 2 s, plus a random jitter of up to as much again, back to 250 ms after two minutes without
/// error, and never giving up (an ended backoff would end the watch). kube's default goes up to
/// 30 s, which after a 15 s outage left the caches stale (and the rollout waiting, though the
/// controller led again) for up to half a minute after the API server was back.
pub fn watch_backoff() -> WatchBackoff {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times();
    WatchBackoff(ResetTimerBackoff::new(
        exponential.into(),
        Duration::from_secs(120),
    ))
}

/// [`watch_backoff`]'s backoff, which only time resets. kube's `StreamBackoff` resets its
/// backoff on every item that is not an error, and a watcher yields one (`Init`) each time it
/// starts listing again, before the list is even sent: a list that kept failing (a CRD not
/// installed, a permission missing) was retried every 250-500 ms, a warning each time, for as
/// long as it failed.
pub struct WatchBackoff(ResetTimerBackoff<ExponentialBackoff>);

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.0.next()
    }
}

impl Backoff for WatchBackoff {
    /// Not on an item: only two minutes without a retry reset it (see [`watch_backoff`]).
    fn reset(&mut self) {}
}

#[cfg(test)]
mod watch_backoff_tests {
    use super::*;

    #[test]
    fn watch_backoff_never_gives_up_and_never_waits_more_than_four_seconds() {
        let delays: Vec<Duration> = watch_backoff().take(100).collect();
        assert_eq!(
            delays.len(),
            100,
            "it never ends: an ended backoff ends the watch"
        );
        assert!(delays[0] < Duration::from_millis(600), "{:?}", delays[0]);
        assert!(
            delays.iter().all(|delay| *delay <= Duration::from_secs(4)),
            "{delays:?}"
        );
    }

    #[test]
    fn a_watch_that_keeps_failing_backs_off_though_each_restart_yields_an_item() {
        // As kube's StreamBackoff drives it when a list keeps failing: an error (a delay
        // taken), then the watcher's `Init` item on restarting (a reset), again and again.
        let mut backoff = watch_backoff();
        let delays: Vec<Duration> = (0..6)
            .map(|_| {
                let delay = backoff.next().expect("never ends");
                backoff.reset();
                delay
            })
            .collect();
        assert!(
            delays[4..]
                .iter()
                .all(|delay| *delay >= Duration::from_secs(2)),
            "the delay grew to its 2 s maximum: {delays:?}"
        );
    }
}
