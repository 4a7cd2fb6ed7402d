//! The TLS admission server. Handlers are thin: check the request, decode the review, call the
//! decision, encode the answer in the review's version. Anything that is not an answerable
//! review is HTTP 400 with a message saying what is wrong.
//!
//! A request is received within deadlines (`webhook.read_timeout`), so that a client sending
//! slowly cannot keep the replica from answering the API server: actix bounds the TLS handshake
//! and the head of a connection's first request; the body budget and the body are bounded
//! here, actix having no deadline for a body. What a request holds of the budget
//! ([`crate::budget`]) is given back however it ends: answered, timed out, failed, or dropped
//! because its client hung up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::ConnectionType;
use actix_web::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use actix_web::middleware::from_fn;
use actix_web::web::{self, BytesMut};
use actix_web::{HttpRequest, HttpResponse, HttpServer};
use baton_config::WebhookConfig;
use baton_core::annotations::NO_DOWNSCALE_LABEL;
use baton_shared::http_server::{BoundServer, Draining, close_connections_when_draining};
use futures::StreamExt;
use tokio_util::task::TaskTracker;

use crate::admission::no_downscale::{self, Assessment};
use crate::admission::prepare_downscale::{self, flow::PrepareDownscale};
use crate::admission::review::{self, AdmissionRequest, Review};
use crate::admission::{Decision, Outcome};
use crate::admission::{state_guard, zpdb_reviews};
use crate::budget::{BodyBudget, BodyPermit};
use crate::error::Error;
use crate::evictions::Evictions;
use crate::metrics::{WebhookMetrics, route_label};
use crate::parents::ParentCache;
use baton_core::admission::{JudgingFailed, Reason, Verdict};

/// Path of the no-downscale webhook.
pub const NO_DOWNSCALE_PATH: &str = "/admission/no-downscale";
/// Path of the prepare-downscale webhook.
pub const PREPARE_DOWNSCALE_PATH: &str = "/admission/prepare-downscale";
/// Path of the zone-aware disruption budgets' eviction webhook (the Go operator's).
pub const POD_EVICTION_PATH: &str = "/admission/pod-eviction";
/// Path of the ZoneAwarePodDisruptionBudget validation webhook (the Go operator's).
pub const ZPDB_VALIDATION_PATH: &str = "/admission/zpdb-validation";
/// Path of the webhook that lets only baton's controller set its state annotations.
pub const STATE_GUARD_PATH: &str = "/admission/state-guard";

/// The webhooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    NoDownscale,
    PrepareDownscale,
    PodEviction,
    ZpdbValidation,
    StateGuard,
}

impl Webhook {
    pub fn name(self) -> &'static str {
        match self {
            Webhook::NoDownscale => "no-downscale",
            Webhook::PrepareDownscale => "prepare-downscale",
            Webhook::PodEviction => "pod-eviction",
            Webhook::ZpdbValidation => "zpdb-validation",
            Webhook::StateGuard => "state-guard",
        }
    }
    fn path(self) -> &'static str {
        match self {
            Webhook::NoDownscale => NO_DOWNSCALE_PATH,
            Webhook::PrepareDownscale => PREPARE_DOWNSCALE_PATH,
            Webhook::PodEviction => POD_EVICTION_PATH,
            Webhook::ZpdbValidation => ZPDB_VALIDATION_PATH,
            Webhook::StateGuard => STATE_GUARD_PATH,
        }
    }
}

/// What the handlers share. Holds no decision state: any replica can answer any request.
#[derive(Debug)]
pub struct WebhookState {
    parents: ParentCache,
    prepare: PrepareDownscale,
    metrics: WebhookMetrics,
    max_request_bytes: usize,
    /// `webhook.allow_on_error`: a change that could not be judged is allowed (else refused).
    allow_on_error: bool,
    /// Body bytes that may be held at once, in KiB (see [`body_permit`]).
    body_budget: BodyBudget,
    request_timeout: Duration,
    /// Deadline for the body budget and the body, once the head is in.
    read_timeout: Duration,
    /// prepare-downscale flows run here, on the main runtime, so their undo finishes even if
    /// the caller hangs up; shutdown waits for them.
    tasks: TaskTracker,
    runtime: tokio::runtime::Handle,
    /// The zone-aware disruption budgets' caches; without them evictions are allowed with a
    /// warning (and budgets validated against no namespace are refused).
    evictions: Option<Arc<Evictions>>,
    /// Who may write what baton remembers (`Config::state_writers`, `Config::record_writers`);
    /// nobody until told.
    writers: state_guard::Writers,
}

impl WebhookState {
    /// Must be called inside the runtime prepare-downscale flows should run on.
    pub fn new(
        parents: ParentCache,
        prepare: PrepareDownscale,
        metrics: WebhookMetrics,
        config: &WebhookConfig,
    ) -> Self {
        Self {
            parents,
            prepare: prepare.counting_failures_in(metrics.failures.clone()),
            metrics,
            max_request_bytes: usize::try_from(config.max_request_bytes.0).unwrap_or(usize::MAX),
            allow_on_error: config.allow_on_error,
            body_budget: BodyBudget::new(
                kib(config.max_inflight_request_bytes.0),
                kib(config.max_request_bytes.0),
                !config.client_ca_file.as_os_str().is_empty(),
            ),
            request_timeout: config.request_timeout.get(),
            read_timeout: config.read_timeout.get(),
            tasks: TaskTracker::new(),
            runtime: tokio::runtime::Handle::current(),
            evictions: None,
            writers: state_guard::Writers::default(),
        }
    }

    /// Lets `writers` write what baton remembers.
    pub fn with_writers(self, writers: state_guard::Writers) -> Self {
        Self { writers, ..self }
    }

    /// Judges evictions and validates budgets with `evictions`.
    pub fn with_evictions(self, evictions: Arc<Evictions>) -> Self {
        Self {
            evictions: Some(evictions),
            ..self
        }
    }

    /// The bytes of request bodies held now, and by whom.
    pub fn body_budget(&self) -> &BodyBudget {
        &self.body_budget
    }

    /// Waits (at most `timeout`) for running prepare-downscale flows; true when none is left.
    pub async fn drain(&self, timeout: Duration) -> bool {
        self.tasks.close();
        tokio::time::timeout(timeout, self.tasks.wait())
            .await
            .is_ok()
    }

    /// The failures counter, for the tasks beside the handlers (the TLS files' reload).
    pub fn failures(&self) -> &crate::error::Failures {
        &self.metrics.failures
    }

    /// The one place a request's failure is counted (what it was answered is counted in
    /// `count`).
    fn failed(&self, error: &Error) {
        self.metrics.failures.count(error);
    }

    fn count(&self, webhook: Webhook, result: &str) {
        self.metrics
            .decisions
            .with_label_values(&[webhook.name(), result])
            .inc();
    }

    /// Counts a request as in flight until the returned guard is dropped.
    fn in_flight(&self, path: &str, method: &str) -> InFlight {
        let gauge = self
            .metrics
            .inflight
            .with_label_values(&[method, route_label(path)]);
        gauge.inc();
        InFlight(gauge)
    }

    fn observe(
        &self,
        path: &str,
        method: &str,
        started: Instant,
        request_bytes: usize,
        response: &HttpResponse,
    ) {
        let (status, route) = (response.status(), route_label(path));
        self.metrics
            .request_duration
            .with_label_values(&[method, route, status.as_str(), "false"])
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .request_bytes
            .with_label_values(&[method, route])
            .observe(request_bytes as f64);
        let sent = match actix_web::body::MessageBody::size(response.body()) {
            actix_web::body::BodySize::Sized(bytes) => bytes,
            actix_web::body::BodySize::None | actix_web::body::BodySize::Stream => 0,
        };
        self.metrics
            .response_bytes
            .with_label_values(&[method, route])
            .observe(sent as f64);
    }
}

/// `bytes` in whole KiB, rounded up.
fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// A request counted in `rollout_operator_inflight_requests` until dropped.
struct InFlight(prometheus::IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Registers the webhook routes; used by the server and by in-process tests.
pub fn routes(state: web::Data<WebhookState>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |config| {
        config
            .app_data(state)
            .route(NO_DOWNSCALE_PATH, admission(Webhook::NoDownscale))
            .route(PREPARE_DOWNSCALE_PATH, admission(Webhook::PrepareDownscale))
            .route(POD_EVICTION_PATH, admission(Webhook::PodEviction))
            .route(ZPDB_VALIDATION_PATH, admission(Webhook::ZpdbValidation))
            .route(STATE_GUARD_PATH, admission(Webhook::StateGuard))
            .default_service(web::to(not_found));
    }
}

/// The POST route answering `webhook`'s reviews.
fn admission(webhook: Webhook) -> actix_web::Route {
    web::post().to(
        move |request: HttpRequest, payload: web::Payload, state: web::Data<WebhookState>| {
            admit(webhook, request, payload, state)
        },
    )
}

async fn not_found(request: HttpRequest, state: web::Data<WebhookState>) -> HttpResponse {
    let started = Instant::now();
    let _in_flight = state.in_flight(request.path(), request.method().as_str());
    let known = [
        NO_DOWNSCALE_PATH,
        PREPARE_DOWNSCALE_PATH,
        POD_EVICTION_PATH,
        ZPDB_VALIDATION_PATH,
        STATE_GUARD_PATH,
    ]
    .contains(&request.path());
    let response = if known {
        HttpResponse::MethodNotAllowed().body("admission reviews are POSTed\n")
    } else {
        HttpResponse::NotFound().body(format!(
            "no such path {:?}; the webhooks are {NO_DOWNSCALE_PATH}, {PREPARE_DOWNSCALE_PATH}, {POD_EVICTION_PATH}, {ZPDB_VALIDATION_PATH} and {STATE_GUARD_PATH}\n",
            request.path()
        ))
    };
    state.observe(
        request.path(),
        request.method().as_str(),
        started,
        0,
        &response,
    );
    response
}

async fn admit(
    webhook: Webhook,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<WebhookState>,
) -> HttpResponse {
    let started = Instant::now();
    let _in_flight = state.in_flight(webhook.path(), "POST");
    // The head is in (actix bounds it); the budget and the body get one deadline together.
    let deadline = tokio::time::Instant::now() + state.read_timeout;
    // The body's share of the budget is held until the answer is built.
    let permit = match body_permit(&request, &state, deadline).await {
        Ok(permit) => permit,
        Err(error) => {
            let response = unanswerable(&state, webhook, &request, error);
            state.observe(webhook.path(), "POST", started, 0, &response);
            return response;
        }
    };
    let body = match tokio::time::timeout_at(
        deadline,
        read_body(&request, payload, state.max_request_bytes),
    )
    .await
    {
        Ok(body) => body,
        Err(_) => {
            drop(permit);
            let read_timeout = state.read_timeout;
            let error = Error::BodyTimedOut { read_timeout };
            let response = unanswerable(&state, webhook, &request, error);
            state.observe(webhook.path(), "POST", started, 0, &response);
            return response;
        }
    };
    let received = body.as_ref().map_or(0, |body| body.len());
    let response = match body {
        Err(error) => unanswerable(&state, webhook, &request, error),
        Ok(body) => match review::decode(&body) {
            Err(error) => unanswerable(&state, webhook, &request, error),
            Ok(review) => {
                let verdict = match webhook {
                    Webhook::NoDownscale => judge_no_downscale(&state, &review.request).await,
                    Webhook::PrepareDownscale => {
                        judge_prepare_downscale(&state, &review.request).await
                    }
                    Webhook::PodEviction => judge_pod_eviction(&state, &review.request).await,
                    Webhook::ZpdbValidation => judge_zpdb(&state, &review.request),
                    Webhook::StateGuard => state_guard::validate(&review.request, &state.writers),
                };
                if let Verdict::Unjudged(failed) = &verdict {
                    state.failed(&Error::Unjudged(failed.clone()));
                }
                // What could not be judged is allowed or refused by the policy, here only.
                let decision = Decision::of(verdict, state.allow_on_error);
                answer(&state, webhook, &review, &decision)
            }
        },
    };
    drop(permit);
    state.observe(webhook.path(), "POST", started, received, &response);
    response
}

/// A share of the body budget for `request`: its declared length, or the largest body allowed
/// when it declares none (it may send up to that), taken from its client's share too (see
/// [`crate::budget`]). Waits until `deadline` for others to finish; then
/// [`Error::BodyBudgetExhausted`] (answered 429, which the API server treats as a failed call:
/// the configuration's failurePolicy decides).
async fn body_permit(
    request: &HttpRequest,
    state: &WebhookState,
    deadline: tokio::time::Instant,
) -> Result<BodyPermit, Error> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(state.max_request_bytes as u64)
        .min(state.max_request_bytes as u64);
    let client = request.peer_addr().map(|address| address.ip());
    tokio::time::timeout_at(
        deadline,
        state.body_budget.acquire(client, kib(declared).max(1)),
    )
    .await
    .map_err(|_| Error::BodyBudgetExhausted {
        read_timeout: state.read_timeout,
    })
}

/// The answer to a request that gets no verdict, saying why: 429 when the body budget had no
/// room in time; 408 when the body did not arrive within `webhook.read_timeout`, and the
/// connection is closed (what is left of the body is never read); else 400. Counted here.
fn unanswerable(
    state: &WebhookState,
    webhook: Webhook,
    request: &HttpRequest,
    error: Error,
) -> HttpResponse {
    state.failed(&error);
    match error {
        Error::BodyBudgetExhausted { .. } => {
            state.count(webhook, "throttled");
            HttpResponse::TooManyRequests().body(format!("{error}\n"))
        }
        Error::BodyTimedOut { .. } => {
            state.count(webhook, "timed_out");
            tracing::warn!(
                webhook = webhook.name(),
                client = ?request.peer_addr(),
                "the request body did not arrive within webhook.read_timeout; closing the connection"
            );
            let mut response = HttpResponse::RequestTimeout()
                .content_type("text/plain; charset=utf-8")
                .body(format!("{error}\n"));
            response
                .head_mut()
                .set_connection_type(ConnectionType::Close);
            response
        }
        problem => bad_request(state, webhook, problem.to_string()),
    }
}

/// pod-eviction, under the request deadline; running out of time refuses for now (429), as
/// the eviction may be one a budget forbids.
async fn judge_pod_eviction(state: &WebhookState, request: &AdmissionRequest<'_>) -> Verdict {
    let eviction = match zpdb_reviews::eviction_of(request) {
        Ok(eviction) => eviction,
        Err(verdict) => return verdict,
    };
    let Some(evictions) = &state.evictions else {
        return Verdict::Unjudged(JudgingFailed::BudgetsNotWatched {
            what: "the eviction",
        });
    };
    tokio::time::timeout(state.request_timeout, evictions.judge(&eviction))
        .await
        .unwrap_or_else(|_| {
            Verdict::refuse_for_now(
                Reason::TimedOut,
                format!(
                    "pod {} cannot be evicted now: no decision within webhook.request_timeout ({:?}); retry",
                    eviction.pod, state.request_timeout
                ),
            )
        })
}

/// zpdb-validation: a pure function of the review.
fn judge_zpdb(state: &WebhookState, request: &AdmissionRequest<'_>) -> Verdict {
    match &state.evictions {
        Some(evictions) => evictions.validate(request),
        None => Verdict::Unjudged(JudgingFailed::BudgetsNotWatched { what: "the change" }),
    }
}

/// no-downscale, under the request deadline; running out of time allows with a warning. The
/// span is at debug level: this is the hot path, and an enabled span costs on every request.
#[tracing::instrument(level = "debug", skip_all, fields(uid = %request.uid, name = %request.name))]
async fn judge_no_downscale(state: &WebhookState, request: &AdmissionRequest<'_>) -> Verdict {
    let judged = async {
        match no_downscale::assess(request) {
            Assessment::Decided(verdict) => verdict,
            Assessment::NeedsParentLabels { downscale, parent } => {
                match state
                    .parents
                    .label(
                        parent,
                        &downscale.namespace,
                        &downscale.name,
                        NO_DOWNSCALE_LABEL,
                    )
                    .await
                {
                    Ok(label) => no_downscale::judge(&downscale, label.as_deref()),
                    Err(error) => no_downscale::parent_unavailable(&downscale, &error),
                }
            }
        }
    };
    tokio::time::timeout(state.request_timeout, judged)
        .await
        .unwrap_or(Verdict::Unjudged(JudgingFailed::TimedOut {
            after: state.request_timeout,
        }))
}

/// prepare-downscale: what the review alone decides is answered here; the rest runs as a
/// tracked task that ends by its own deadline.
async fn judge_prepare_downscale(state: &WebhookState, request: &AdmissionRequest<'_>) -> Verdict {
    let prepare = match prepare_downscale::prepare_request_of(request) {
        Ok(prepare) => prepare,
        Err(verdict) => return verdict,
    };
    let flow = state.prepare.clone();
    let task = state
        .tasks
        .spawn_on(async move { flow.run(prepare).await }, &state.runtime);
    match task.await {
        Ok(verdict) => verdict,
        Err(error) => {
            tracing::error!(%error, "the prepare-downscale flow failed");
            Verdict::refuse(
                Reason::Internal,
                format!("the downscale could not be prepared: internal error: {error}"),
            )
        }
    }
}

fn answer(
    state: &WebhookState,
    webhook: Webhook,
    review: &Review<'_>,
    decision: &Decision,
) -> HttpResponse {
    state.count(webhook, decision.outcome.label());
    let request = &review.request;
    match decision.outcome {
        Outcome::Allowed => tracing::debug!(
            webhook = webhook.name(), api_version = review.version.api_version(), uid = %request.uid, namespace = request.namespace(), name = %request.name,
            resource = %request.resource.resource, sub_resource = request.sub_resource(), dry_run = request.is_dry_run(),
            "allowed"
        ),
        // no-downscale is a cheap guard that may be hammered (an autoscaler retrying): one log
        // line per denial would cost more than the decision. Its denials are counted in
        // baton_admission_decisions_total and returned to the client (and the API server's
        // audit log); prepare-downscale's are rare and acted upon, so they are logged.
        Outcome::Denied if webhook == Webhook::NoDownscale => tracing::debug!(
            webhook = webhook.name(), api_version = review.version.api_version(), uid = %request.uid, namespace = request.namespace(), name = %request.name,
            dry_run = request.is_dry_run(), kind = decision.kind.unwrap_or(""), message = decision.message.as_deref().unwrap_or(""), "denied"
        ),
        Outcome::Denied => tracing::info!(
            webhook = webhook.name(), api_version = review.version.api_version(), uid = %request.uid, namespace = request.namespace(), name = %request.name,
            dry_run = request.is_dry_run(), kind = decision.kind.unwrap_or(""), message = decision.message.as_deref().unwrap_or(""), "denied"
        ),
        Outcome::AllowedOnError => tracing::warn!(
            webhook = webhook.name(), api_version = review.version.api_version(), uid = %request.uid, namespace = request.namespace(), name = %request.name,
            warnings = ?decision.warnings, "allowed without a full judgement"
        ),
    }
    HttpResponse::Ok()
        .content_type("application/json")
        .body(review::encode(review.version, &request.uid, decision))
}

fn bad_request(state: &WebhookState, webhook: Webhook, problem: String) -> HttpResponse {
    state.count(webhook, "bad_request");
    tracing::warn!(webhook = webhook.name(), %problem, "rejected a request that is not an answerable AdmissionReview");
    HttpResponse::BadRequest()
        .content_type("text/plain; charset=utf-8")
        .body(problem + "\n")
}

/// The body, if the request is JSON and not larger than `limit`.
async fn read_body(
    request: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<BytesMut, Error> {
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .map(|value| value.to_str().unwrap_or("<not text>"));
    let essence = content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(match content_type {
            Some(content_type) => Error::WrongContentType(content_type.to_owned()),
            None => Error::NoContentType,
        });
    }
    let too_large = || Error::BodyTooLarge { limit };
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|error| Error::ReadBody(error.to_string()))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Longer than any client's idle timeout (the API server's is 90 s), so clients close first.
const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(120);

/// Binds the TLS server to `address` (port 0 picks a free one). Once `draining`, every answer
/// closes its connection; in-flight requests get `drain` to finish when the server stops.
///
/// HTTP/1.1 only (actix-web is built without its `http2` feature, so ALPN offers only
/// `http/1.1`): a leaving replica moves its clients away one connection at a time with
/// `Connection: close`, which needs no GOAWAY support, and the API server's connection pool
/// spreads its calls over the replicas instead of multiplexing them all on one connection.
pub fn bind(
    address: SocketAddr,
    tls: rustls::ServerConfig,
    state: web::Data<WebhookState>,
    draining: Draining,
    drain: Duration,
) -> std::io::Result<BoundServer> {
    let read_timeout = state.read_timeout;
    bind_routes(
        address,
        tls,
        move |config| routes(state.clone())(config),
        draining,
        drain,
        read_timeout,
    )
}

/// The server [`bind`] builds, serving the routes `configure` registers: also the benchmark's
/// floor (webhook/bench/floor), which must run on exactly this server to say what the
/// webhooks' own work costs on top of it.
pub fn bind_routes(
    address: SocketAddr,
    tls: rustls::ServerConfig,
    configure: impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
    draining: Draining,
    drain: Duration,
    read_timeout: Duration,
) -> std::io::Result<BoundServer> {
    let listener = std::net::TcpListener::bind(address)?;
    let local_addr = listener.local_addr()?;
    let server = HttpServer::new(move || {
        actix_web::App::new()
            .app_data(draining.clone())
            .wrap(from_fn(close_connections_when_draining))
            .configure(configure.clone())
    })
    .disable_signals()
    // Idle connections are closed by the client, not by us: the API server keeps them for up
    // to 90 s, and a request it sends just as the server closes an idle connection (actix's
    // default: after 5 s) fails with EOF, a failed admission. A stopping replica closes them
    // itself (graceful stop), after the shutdown delay.
    .keep_alive(IDLE_CONNECTION_TIMEOUT)
    // The handshake and the head of a connection's first request each within
    // webhook.read_timeout (actix: the connection is closed, a late head answered 408); the
    // budget and the body are bounded by `admit`. actix bounds no later head on a kept-alive
    // connection; a head holds no budget, only its connection.
    .tls_handshake_timeout(read_timeout)
    .client_request_timeout(read_timeout)
    .shutdown_timeout(drain.as_secs().max(1))
    .listen_rustls_0_23(listener, tls)?
    .run();
    Ok(BoundServer::new(server, local_addr))
}
