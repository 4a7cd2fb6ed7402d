//! baton-webhook: the stateless admission service that guards downscales (no-downscale,
//! prepare-downscale). This file only wires the library's pieces together.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use baton_config::Config;
use baton_shared::cli::ConfigArgs;
use baton_shared::http_server::{self, Draining};
use baton_shared::ops_server::{self, Readiness};
use baton_shared::pod_client::PodHttpClient;
use baton_webhook::admission::prepare_downscale::flow::PrepareDownscale;
use baton_webhook::evictions::{Evictions, ZpdbMetrics};
use baton_webhook::metrics::WebhookMetrics;
use baton_webhook::parents::ParentCache;
use baton_webhook::server::{self, WebhookState};
use baton_webhook::tls_reload::{CertFiles, ReloadingCert};
use clap::Parser;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(
    name = "baton-webhook",
    version,
    about = "Admission webhooks guarding StatefulSet downscales"
)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
}

fn main() -> ExitCode {
    baton_shared::crypto::install_default_provider();
    let cli = Cli::parse();
    baton_shared::cli::run_binary("baton-webhook", &cli.config, run)
}

async fn run(config: Config) -> anyhow::Result<()> {
    let shutdown = baton_shared::shutdown::on_signal()?;
    let registry = prometheus::Registry::new();
    let readiness = Readiness::default();
    let draining = Draining::default();

    // The certificate first: without it nothing can be served, and the error names the file.
    let cert = Arc::new(
        ReloadingCert::load(CertFiles {
            cert: config.webhook.cert_file.clone(),
            key: config.webhook.key_file.clone(),
        })
        .context("loading the webhook's serving certificate")?,
    );
    let client = baton_shared::kube_client::client(&config.kubernetes, &registry).await?;
    let metrics = WebhookMetrics::register(&registry)?;
    let pods = PodHttpClient::new(&config.pods, &registry)?;
    let (parents, fill_parents) = ParentCache::new(
        client.clone(),
        &config.namespace,
        Some(metrics.parent_lookups.clone()),
    );
    let (evictions, fill_evictions) = Evictions::new(
        client.clone(),
        &config.namespace,
        ZpdbMetrics::register(&registry)?,
    );
    let evictions = Arc::new(evictions);
    let prepare = PrepareDownscale::new(client, pods, &config);
    let state = actix_web::web::Data::new(
        WebhookState::new(parents.clone(), prepare, metrics, &config.webhook)
            .with_evictions(evictions.clone()),
    );

    // In-flight requests end by their deadline; give them that long, plus a little.
    let drain = config.webhook.request_timeout.get() + Duration::from_secs(1);
    let webhook = server::bind(
        config.webhook.address.0,
        cert.server_config(),
        state.clone(),
        draining.clone(),
        drain,
    )
    .with_context(|| format!("binding webhook.address {}", config.webhook.address))?;
    let ops = ops_server::bind(config.ops.address.0, registry, readiness.clone())
        .with_context(|| format!("binding ops.address {}", config.ops.address))?;
    tracing::info!(
        webhook = %webhook.local_addr(), ops = %ops.local_addr(), namespace = %config.namespace,
        "baton-webhook listening"
    );

    // Every task below is critical: if one ends (or panics) before shutdown, the process ends.
    let serving = CancellationToken::new();
    let background = CancellationToken::new();
    let mut critical: JoinSet<anyhow::Result<&'static str>> = JoinSet::new();
    critical.spawn({
        let serving = serving.clone();
        async move {
            webhook.run(serving).await.context("webhook server")?;
            Ok("webhook server")
        }
    });
    critical.spawn({
        let background = background.clone();
        async move {
            ops.run(background).await.context("ops server")?;
            Ok("ops server")
        }
    });
    critical.spawn({
        let background = background.clone();
        async move {
            tokio::select! {
                _ = fill_parents => anyhow::bail!("the parent caches stopped watching"),
                _ = background.cancelled() => Ok("parent caches"),
            }
        }
    });
    critical.spawn({
        let background = background.clone();
        async move {
            tokio::select! {
                _ = fill_evictions => anyhow::bail!("the eviction caches stopped watching"),
                _ = background.cancelled() => Ok("eviction caches"),
            }
        }
    });
    critical.spawn({
        let (cert, background) = (cert.clone(), background.clone());
        let interval = config.webhook.cert_reload_interval.get();
        async move {
            cert.watch(interval, background).await;
            Ok("certificate reloader")
        }
    });
    critical.spawn({
        let (readiness, draining) = (readiness.clone(), draining.clone());
        let serving = serving.clone();
        async move {
            tokio::select! {
                _ = async { futures::join!(parents.wait_synced(), evictions.wait_synced()) } => {
                    readiness.set(true);
                    // `leave` starts draining before it turns unready: if it began meanwhile,
                    // this sees it and takes readiness back.
                    if draining.is_draining() {
                        readiness.set(false);
                    } else {
                        tracing::info!("caches synced; ready");
                    }
                }
                _ = serving.cancelled() => {}
            }
            // Stays until shutdown, so that ending here is not taken for a failure.
            serving.cancelled().await;
            Ok("readiness")
        }
    });

    let failure = tokio::select! {
        _ = shutdown.cancelled() => None,
        ended = critical.join_next() => Some(match ended {
            Some(Ok(Ok(task))) => anyhow::anyhow!("{task} ended unexpectedly"),
            Some(Ok(Err(error))) => error,
            Some(Err(join_error)) => anyhow::anyhow!("a critical task failed: {join_error}"),
            None => anyhow::anyhow!("no task left"),
        }),
    };

    // Not ready, every answer closing its connection → keep serving for webhook.shutdown_delay
    // while the Service's endpoints drop this replica → stop accepting, close idle connections,
    // finish in-flight requests and prepare-downscale flows (bounded) → exit. A failing process
    // stops at once.
    let delay = match failure {
        None => config.webhook.shutdown_delay.get(),
        Some(_) => Duration::ZERO,
    };
    tracing::info!(
        delay = ?delay,
        "not ready; serving on, answers closing their connections, until webhook.shutdown_delay has passed"
    );
    http_server::leave(&readiness, &draining, tokio::time::sleep(delay), &serving).await;
    tracing::info!("stopped accepting; finishing in-flight requests");
    let server_ended = tokio::time::timeout(drain + Duration::from_secs(1), async {
        while let Some(ended) = critical.join_next().await {
            if let Ok(Ok("webhook server")) = ended {
                break;
            }
        }
    });
    let (server_ended, flows_done) = tokio::join!(server_ended, state.drain(drain));
    let drained = server_ended.is_ok();
    if !drained || !flows_done {
        tracing::warn!("shutdown deadline passed with requests still in flight");
    }
    background.cancel();
    critical.shutdown().await;
    match failure {
        Some(error) => Err(error),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}
