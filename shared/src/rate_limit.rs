//! Client-side rate limits on the Kubernetes API, one token bucket per API group, as the Go
//! operator has had them since v0.38 (`-kubernetes.client-qps`, `-kubernetes.client-burst`)
//! with its metrics: `rollout_operator_kubernetes_api_client_rate_limited_requests_total`
//! counts the requests that had to wait for a token, and
//! `rollout_operator_kubernetes_api_client_rate_limit_qps` says the limit each group runs
//! under (0: none). Off by default (`kubernetes.client_qps: 0`): the API server's priority and
//! fairness already shares it out, and baton's calls follow its events.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use baton_config::KubernetesConfig;
use governor::clock::DefaultClock;
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};
use prometheus::{GaugeVec, IntCounterVec, Opts, Registry};

type Limiter = RateLimiter<String, HashMapStateStore<String>, DefaultClock>;

/// The API group and version a request path is for, as the Go operator labels it: `core/v1`
/// for `/api/v1/…`, `<group>/<version>` for `/apis/<group>/<version>/…`, `other` for the rest
/// (discovery, `/version`).
pub fn api_group_of(path: &str) -> String {
    let mut parts = path.trim_start_matches('/').split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("api"), Some(version), _) if !version.is_empty() => format!("core/{version}"),
        (Some("apis"), Some(group), Some(version)) if !group.is_empty() && !version.is_empty() => {
            format!("{group}/{version}")
        }
        _ => "other".to_owned(),
    }
}

/// Waits each request for its API group's token (when limits are on) and counts the waits.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Option<Arc<Limiter>>,
    qps: f64,
    limited: IntCounterVec,
    qps_gauge: GaugeVec,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("qps", &self.qps)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    pub fn register(config: &KubernetesConfig, registry: &Registry) -> prometheus::Result<Self> {
        let limited = IntCounterVec::new(
            Opts::new(
                "rollout_operator_kubernetes_api_client_rate_limited_requests_total",
                "Kubernetes API requests that waited for the client-side rate limit.",
            ),
            &["api_group"],
        )?;
        let qps_gauge = GaugeVec::new(
            Opts::new(
                "rollout_operator_kubernetes_api_client_rate_limit_qps",
                "Client-side rate limit of Kubernetes API requests per second (0: none).",
            ),
            &["api_group"],
        )?;
        registry.register(Box::new(limited.clone()))?;
        registry.register(Box::new(qps_gauge.clone()))?;
        let limiter = quota(config.client_qps, config.client_burst)
            .map(|quota| Arc::new(RateLimiter::hashmap(quota)));
        Ok(Self {
            limiter,
            qps: config.client_qps,
            limited,
            qps_gauge,
        })
    }

    /// Its metrics (tests read their names and labels: dashboards and alerts query them).
    pub fn collectors(&self) -> [&dyn prometheus::core::Collector; 2] {
        [&self.limited, &self.qps_gauge]
    }
}

/// The token bucket for `qps` requests a second with room for `burst`; `None` when `qps` is 0
/// (validated: never negative, never NaN).
fn quota(qps: f64, burst: u32) -> Option<Quota> {
    if qps <= 0.0 {
        return None;
    }
    let period = Duration::from_secs_f64(1.0 / qps).max(Duration::from_nanos(1));
    let burst = NonZeroU32::new(burst.max(1)).expect("at least 1");
    Quota::with_period(period).map(|quota| quota.allow_burst(burst))
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> Self::Service {
        let inner = match self.limiter {
            None => Inner::Direct(inner),
            Some(_) => Inner::Shared(Arc::new(tokio::sync::Mutex::new(inner))),
        };
        RateLimited {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around the client's stack.
pub struct RateLimited<S> {
    inner: Inner<S>,
    layer: RateLimitLayer,
}

enum Inner<S> {
    /// No limit: each request goes straight on, exactly as without the layer.
    Direct(S),
    /// Limited: the stack is made ready and called only once the request's token is there
    /// (kube's stack is one boxed service, not a clone per request); the lock is held for
    /// that, never while the response comes.
    Shared(Arc<tokio::sync::Mutex<S>>),
}

impl<S, B> tower::Service<http::Request<B>> for RateLimited<S>
where
    S: tower::Service<http::Request<B>> + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match &mut self.inner {
            Inner::Direct(inner) => inner.poll_ready(cx),
            // Awaited with the call, after the token.
            Inner::Shared(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let group = api_group_of(request.uri().path());
        self.layer
            .qps_gauge
            .with_label_values(&[group.as_str()])
            .set(self.layer.qps);
        let inner = match &mut self.inner {
            Inner::Direct(inner) => return Box::pin(inner.call(request)),
            Inner::Shared(inner) => inner.clone(),
        };
        let limiter = self.layer.limiter.clone();
        let limited = self.layer.limited.clone();
        Box::pin(async move {
            if let Some(limiter) = limiter
                && limiter.check_key(&group).is_err()
            {
                limited.with_label_values(&[group.as_str()]).inc();
                limiter.until_key_ready(&group).await;
            }
            let response = {
                let mut inner = inner.lock().await;
                std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                inner.call(request)
            };
            response.await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_grouped_as_the_go_operator_labels_them() {
        for (path, group) in [
            ("/api/v1/namespaces/ns/pods/ingester-0", "core/v1"),
            ("/apis/apps/v1/namespaces/ns/statefulsets", "apps/v1"),
            ("/apis/policy/v1/namespaces/ns/pods/p/eviction", "policy/v1"),
            (
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
                "coordination.k8s.io/v1",
            ),
            ("/apis", "other"),
            ("/version", "other"),
        ] {
            assert_eq!(api_group_of(path), group, "{path}");
        }
    }

    #[test]
    fn no_limit_at_zero_and_a_bucket_of_burst_tokens_otherwise() {
        assert!(quota(0.0, 10).is_none());
        let quota = quota(5.0, 10).unwrap();
        assert_eq!(quota.burst_size().get(), 10);
        assert_eq!(quota.replenish_interval(), Duration::from_millis(200));
    }

    /// With 1 request a second and a burst of 2 for `apps/v1`, the third request at once waits
    /// and is counted, while another group's requests do not wait on apps/v1's bucket.
    #[tokio::test]
    async fn a_request_beyond_its_groups_burst_waits_and_is_counted() {
        let registry = Registry::new();
        let config = KubernetesConfig {
            client_qps: 1.0,
            client_burst: 2,
            ..KubernetesConfig::default()
        };
        let layer = RateLimitLayer::register(&config, &registry).unwrap();
        let inner = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(())
        });
        let mut service = tower::Layer::layer(&layer, inner);
        let call = |service: &mut RateLimited<_>, path: &str| {
            tower::Service::call(service, http::Request::get(path).body(()).unwrap())
        };
        for _ in 0..2 {
            call(&mut service, "/apis/apps/v1/statefulsets")
                .await
                .unwrap();
        }
        call(&mut service, "/api/v1/pods").await.unwrap();
        let counted = |group: &str| layer.limited.with_label_values(&[group]).get();
        assert_eq!((counted("apps/v1"), counted("core/v1")), (0, 0));
        call(&mut service, "/apis/apps/v1/statefulsets")
            .await
            .unwrap();
        assert_eq!(counted("apps/v1"), 1);
        assert_eq!(layer.qps_gauge.with_label_values(&["apps/v1"]).get(), 1.0);
    }
}
