//! The webhook's metrics, registered in the registry `main` passes in (no global registry).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Request latency by route, named and labelled as the Go operator's (dashboards use it).
pub const REQUEST_DURATION_METRIC: &str = "rollout_operator_request_duration_seconds";
/// Requests being served, as the Go operator's HTTP middleware counts them.
pub const INFLIGHT_METRIC: &str = "rollout_operator_inflight_requests";
/// Request body sizes, as the Go operator's HTTP middleware measures them.
pub const REQUEST_BYTES_METRIC: &str = "rollout_operator_request_message_bytes";
/// Response body sizes, likewise.
pub const RESPONSE_BYTES_METRIC: &str = "rollout_operator_response_message_bytes";
/// The Go operator's body size buckets: 1 MiB to 250 MiB.
const BODY_SIZE_BUCKETS: [f64; 8] = [
    1_048_576.0,
    2_621_440.0,
    5_242_880.0,
    10_485_760.0,
    26_214_400.0,
    52_428_800.0,
    104_857_600.0,
    262_144_000.0,
];
/// Admission answers by webhook and result.
pub const DECISIONS_METRIC: &str = "baton_admission_decisions_total";
/// Where `/scale` parents were looked up (cache or API).
pub const PARENT_LOOKUPS_METRIC: &str = "baton_webhook_parent_lookups_total";

#[derive(Debug, Clone)]
pub struct WebhookMetrics {
    /// `{method, route, status_code, ws}`.
    pub request_duration: HistogramVec,
    /// `{method, route}`.
    pub inflight: IntGaugeVec,
    /// `{method, route}`.
    pub request_bytes: HistogramVec,
    /// `{method, route}`.
    pub response_bytes: HistogramVec,
    /// `{webhook, result}`; result is `allowed`, `denied`, `allowed_on_error`, `bad_request`,
    /// `throttled` (no room in the body budget in time) or `timed_out` (the body too slow).
    pub decisions: IntCounterVec,
    /// `{source}`: `cache` or `api`.
    pub parent_lookups: IntCounterVec,
    /// `baton_webhook_failures_total{error}`, by
    /// [`Error::metric_label`](crate::error::Error::metric_label).
    pub failures: crate::error::Failures,
}

impl WebhookMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                REQUEST_DURATION_METRIC,
                "Time (in seconds) spent serving HTTP requests.",
            ),
            &["method", "route", "status_code", "ws"],
        )?;
        let inflight = IntGaugeVec::new(
            Opts::new(INFLIGHT_METRIC, "Current number of inflight requests."),
            &["method", "route"],
        )?;
        let bytes = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(BODY_SIZE_BUCKETS.to_vec()),
                &["method", "route"],
            )
        };
        let request_bytes = bytes(
            REQUEST_BYTES_METRIC,
            "Size (in bytes) of messages received in the request.",
        )?;
        let response_bytes = bytes(
            RESPONSE_BYTES_METRIC,
            "Size (in bytes) of messages sent in response.",
        )?;
        let decisions = IntCounterVec::new(
            Opts::new(
                DECISIONS_METRIC,
                "Admission reviews answered, by webhook and result.",
            ),
            &["webhook", "result"],
        )?;
        let parent_lookups = IntCounterVec::new(
            Opts::new(
                PARENT_LOOKUPS_METRIC,
                "Parents of /scale requests looked up, by where they were found.",
            ),
            &["source"],
        )?;
        registry.register(Box::new(request_duration.clone()))?;
        registry.register(Box::new(inflight.clone()))?;
        registry.register(Box::new(request_bytes.clone()))?;
        registry.register(Box::new(response_bytes.clone()))?;
        registry.register(Box::new(decisions.clone()))?;
        registry.register(Box::new(parent_lookups.clone()))?;
        let failures = crate::error::register_failures(registry)?;
        Ok(Self {
            request_duration,
            inflight,
            request_bytes,
            response_bytes,
            decisions,
            parent_lookups,
            failures,
        })
    }
}

/// The `route` label of a path, as the Go operator's HTTP middleware names routes.
pub fn route_label(path: &str) -> &'static str {
    match path {
        "/admission/no-downscale" => "admission_no_downscale",
        "/admission/prepare-downscale" => "admission_prepare_downscale",
        "/admission/pod-eviction" => "admission_pod_eviction",
        "/admission/zpdb-validation" => "admission_zpdb_validation",
        "/admission/state-guard" => "admission_state_guard",
        _ => "other",
    }
}
