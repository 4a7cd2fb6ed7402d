//! The webhook's metrics, registered in the registry `main` passes in (no global registry).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// Request latency by route, named and labelled as the Go operator's (dashboards use it).
pub const REQUEST_DURATION_METRIC: &str = "rollout_operator_request_duration_seconds";
/// Admission answers by webhook and result.
pub const DECISIONS_METRIC: &str = "baton_admission_decisions_total";
/// Where `/scale` parents were looked up (cache or API).
pub const PARENT_LOOKUPS_METRIC: &str = "baton_webhook_parent_lookups_total";

#[derive(Debug, Clone)]
pub struct WebhookMetrics {
    /// `{method, route, status_code, ws}`.
    pub request_duration: HistogramVec,
    /// `{webhook, result}`; result is `allowed`, `denied`, `allowed_on_error` or `bad_request`.
    pub decisions: IntCounterVec,
    /// `{source}`: `cache` or `api`.
    pub parent_lookups: IntCounterVec,
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
        registry.register(Box::new(decisions.clone()))?;
        registry.register(Box::new(parent_lookups.clone()))?;
        Ok(Self {
            request_duration,
            decisions,
            parent_lookups,
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
        _ => "other",
    }
}
