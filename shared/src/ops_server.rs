//! The plain-HTTP operations server: `/healthz` (the process answers), `/ready` (caches
//! synced, or for the webhook: serving and not draining) and `/metrics` (the registry the
//! binary passes in; no global registry). A binary may mount routes of its own
//! ([`bind_with_routes`]: the controller's status page).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actix_web::{App, HttpResponse, HttpServer, web};
use prometheus::{Encoder, Registry, TextEncoder};

use crate::http_server::BoundServer;

/// Whether the process is ready to serve; shared between the ops server and the code that
/// knows (cache sync, shutdown).
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone)]
struct OpsState {
    registry: Registry,
    readiness: Readiness,
}

/// Binds the operations server to `address` (port 0 picks a free port, see
/// [`BoundServer::local_addr`]).
pub fn bind(
    address: SocketAddr,
    registry: Registry,
    readiness: Readiness,
) -> std::io::Result<BoundServer> {
    bind_with_routes(address, registry, readiness, |_| {})
}

/// [`bind`], with the routes `routes` adds mounted beside the standard ones (it is called
/// once per worker, like an actix `App` factory).
pub fn bind_with_routes(
    address: SocketAddr,
    registry: Registry,
    readiness: Readiness,
    routes: impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
) -> std::io::Result<BoundServer> {
    let state = web::Data::new(OpsState {
        registry,
        readiness,
    });
    let http = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .route("/healthz", web::get().to(healthz))
            .route("/ready", web::get().to(ready))
            .route("/metrics", web::get().to(metrics))
            .configure(routes.clone())
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(5)
    .bind(address)?;
    let local_addr = http.addrs().first().copied().unwrap_or(address);
    Ok(BoundServer::new(http.run(), local_addr))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().body("ok\n")
}

async fn ready(state: web::Data<OpsState>) -> HttpResponse {
    if state.readiness.is_ready() {
        HttpResponse::Ok().body("ready\n")
    } else {
        HttpResponse::ServiceUnavailable().body("not ready\n")
    }
}

async fn metrics(state: web::Data<OpsState>) -> HttpResponse {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&state.registry.gather(), &mut body) {
        Ok(()) => HttpResponse::Ok()
            .content_type(encoder.format_type())
            .body(body),
        Err(error) => {
            HttpResponse::InternalServerError().body(format!("encoding metrics: {error}\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;

    #[tokio::test]
    async fn serves_health_readiness_and_the_given_registry() {
        crate::crypto::install_default_provider();
        let registry = Registry::new();
        let counter = prometheus::IntCounter::new("baton_test_total", "a test counter").unwrap();
        registry.register(Box::new(counter.clone())).unwrap();
        counter.inc_by(3);
        let readiness = Readiness::default();
        let server = bind("127.0.0.1:0".parse().unwrap(), registry, readiness.clone()).unwrap();
        let base = format!("http://{}", server.local_addr());
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(server.run(shutdown.clone()));
        let http = reqwest::Client::new();

        let status = |path: &'static str| {
            let http = http.clone();
            let url = format!("{base}{path}");
            async move { http.get(url).send().await.unwrap().status().as_u16() }
        };
        assert_eq!(status("/healthz").await, 200);
        assert_eq!(status("/ready").await, 503, "not ready until told");
        readiness.set(true);
        assert_eq!(status("/ready").await, 200);
        let metrics = http
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(metrics.contains("baton_test_total 3"), "{metrics}");

        shutdown.cancel();
        running.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn serves_the_routes_a_binary_adds_beside_the_standard_ones() {
        crate::crypto::install_default_provider();
        let server = bind_with_routes(
            "127.0.0.1:0".parse().unwrap(),
            Registry::new(),
            Readiness::default(),
            |routes| {
                routes.route(
                    "/extra",
                    web::get().to(|| async { HttpResponse::Ok().body("extra\n") }),
                );
            },
        )
        .unwrap();
        let base = format!("http://{}", server.local_addr());
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(server.run(shutdown.clone()));
        let get = |path: &str| reqwest::get(format!("{base}{path}"));
        let extra = get("/extra").await.unwrap();
        assert_eq!(extra.status().as_u16(), 200);
        assert_eq!(extra.text().await.unwrap(), "extra\n");
        assert_eq!(get("/healthz").await.unwrap().status().as_u16(), 200);
        assert_eq!(get("/missing").await.unwrap().status().as_u16(), 404);
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }
}
