//! The floor of the admission benchmarks (docs/benchmarks.md, "Side by side"): baton-webhook's
//! own TLS server (`server::bind_routes`: actix-web, rustls with the workspace's ring provider,
//! the same settings and middleware, one tokio worker as baton's binaries run) whose only
//! handler decodes the AdmissionReview with baton-webhook's decoder and answers it allowed.
//! No request budget, no metrics, no decision, no cache. What baton-webhook measures below
//! this, on the same review, is what its own work costs.
//!
//! Configured as baton-webhook is, by environment: `BATON_WEBHOOK__ADDRESS` (e.g.
//! `127.0.0.1:8443`), `BATON_WEBHOOK__CERT_FILE`, `BATON_WEBHOOK__KEY_FILE`. Every path
//! answers; a body that is not a review gets 400.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpResponse, web};
use anyhow::Context;
use baton_core::admission::Verdict;
use baton_shared::http_server::Draining;
use baton_webhook::admission::Decision;
use baton_webhook::admission::review;
use baton_webhook::server::bind_routes;
use baton_webhook::tls_reload::{CertFiles, ReloadingCert};
use tokio_util::sync::CancellationToken;

fn main() -> anyhow::Result<()> {
    baton_shared::crypto::install_default_provider();
    let variable = |name: &str| {
        std::env::var(name).with_context(|| {
            format!("{name} is not set (the floor is configured as baton-webhook is)")
        })
    };
    let address: SocketAddr = variable("BATON_WEBHOOK__ADDRESS")?
        .parse()
        .context("BATON_WEBHOOK__ADDRESS is not an address such as 127.0.0.1:8443")?;
    let cert = Arc::new(
        ReloadingCert::load(CertFiles {
            cert: variable("BATON_WEBHOOK__CERT_FILE")?.into(),
            key: variable("BATON_WEBHOOK__KEY_FILE")?.into(),
        })
        .context("loading the serving certificate")?,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let server = bind_routes(
            address,
            cert.server_config(None),
            |config| {
                config.default_service(web::to(answer_allowed));
            },
            Draining::default(),
            Duration::from_secs(1),
            Duration::from_secs(10),
        )
        .with_context(|| format!("binding {address}"))?;
        eprintln!("baton-admission-floor listening on {}", server.local_addr());
        server
            .run(CancellationToken::new())
            .await
            .context("serving")
    })
}

/// Decodes the review and answers it allowed, in its own version.
async fn answer_allowed(body: web::Bytes) -> HttpResponse {
    match review::decode(&body) {
        Ok(review) => HttpResponse::Ok()
            .content_type("application/json")
            .body(review::encode(
                review.version,
                &review.request.uid,
                &Decision::of(Verdict::allow(), false),
            )),
        Err(error) => HttpResponse::BadRequest().body(format!("{error}\n")),
    }
}
