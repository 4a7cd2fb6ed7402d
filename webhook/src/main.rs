//! baton-webhook: the stateless admission service that guards downscales (no-downscale,
//! prepare-downscale). This file only wires the library's pieces together.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use baton_config::Config;
use baton_shared::http_server::{self, Draining};
use baton_shared::ops_server::{self, Readiness};
use baton_shared::pod_client::PodHttpClient;
use baton_shared::supervisor::Supervisor;
use baton_webhook::admission::prepare_downscale::flow::PrepareDownscale;
use baton_webhook::evictions::{Evictions, ZpdbMetrics};
use baton_webhook::metrics::WebhookMetrics;
use baton_webhook::parents::ParentCache;
use baton_webhook::server::{self, WebhookState};
use baton_webhook::statefulsets;
use baton_webhook::tls_reload::{CertFiles, ClientCaFile, ReloadingCert, ReloadingClientCa};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    baton_shared::cli::main(
        "baton-webhook",
        "Admission webhooks guarding StatefulSet downscales and pod evictions",
        run,
    )
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
    let client_ca = if config.webhook.client_ca_file.as_os_str().is_empty() {
        tracing::warn!(
            "webhook.client_ca_file is not set: any client that reaches webhook.address may send admission reviews (docs/security.md)"
        );
        None
    } else {
        Some(Arc::new(
            ReloadingClientCa::load(ClientCaFile(config.webhook.client_ca_file.clone())).context(
                "loading webhook.client_ca_file, the CA of the API server's client certificate",
            )?,
        ))
    };
    let client = baton_shared::kube_client::client(&config.kubernetes, &registry).await?;
    let metrics = WebhookMetrics::register(&registry)?;
    let pods = PodHttpClient::new(&config.pods, &registry)?;
    let (statefulsets, fill_statefulsets) = statefulsets::watch(client.clone(), &config.namespace);
    let (parents, fill_parents) = ParentCache::new(
        client.clone(),
        &config.namespace,
        statefulsets.clone(),
        Some(metrics.parent_lookups.clone()),
    );
    let (evictions, fill_evictions) = Evictions::new(
        client.clone(),
        &config.namespace,
        statefulsets,
        ZpdbMetrics::register(&registry)?,
    );
    let evictions = Arc::new(evictions);
    let prepare = PrepareDownscale::new(client, pods, &config);
    let state = actix_web::web::Data::new(
        WebhookState::new(parents.clone(), prepare, metrics, &config.webhook)
            .with_evictions(evictions.clone())
            .with_writers(baton_webhook::admission::state_guard::Writers {
                state: config.state_writers(),
                records: config.record_writers(),
            }),
    );

    // In-flight requests end by their deadline; give them that long, plus a little.
    let drain = config.webhook.request_timeout.get() + Duration::from_secs(1);
    let webhook = server::bind(
        config.webhook.address.0,
        cert.server_config(client_ca.clone()),
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
    let mut critical: Supervisor<Task> = Supervisor::default();
    critical.spawn(Task::WebhookServer, {
        let serving = serving.clone();
        async move { webhook.run(serving).await.map_err(anyhow::Error::from) }
    });
    critical.spawn(Task::OpsServer, {
        let background = background.clone();
        async move { ops.run(background).await.map_err(anyhow::Error::from) }
    });
    critical.spawn(
        Task::StatefulSetCache,
        watching(fill_statefulsets, background.clone()),
    );
    critical.spawn(
        Task::ParentCaches,
        watching(fill_parents, background.clone()),
    );
    critical.spawn(
        Task::EvictionCaches,
        watching(fill_evictions, background.clone()),
    );
    critical.spawn(Task::CertificateReloader, {
        let (cert, background) = (cert.clone(), background.clone());
        let interval = config.webhook.cert_reload_interval.get();
        async move {
            let client_ca = async {
                if let Some(client_ca) = client_ca {
                    client_ca.watch(interval, background.clone()).await;
                }
            };
            futures::join!(cert.watch(interval, background.clone()), client_ca);
            Ok(())
        }
    });
    critical.spawn(Task::Readiness, {
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
            Ok(())
        }
    });

    let failure = critical.until_failure(&shutdown).await;

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
    let server_ended = critical.wait_for(Task::WebhookServer, drain + Duration::from_secs(1));
    let (drained, flows_done) = tokio::join!(server_ended, state.drain(drain));
    if !drained || !flows_done {
        tracing::warn!("shutdown deadline passed with requests still in flight");
    }
    background.cancel();
    let late = critical.stop(BACKGROUND_GRACE).await;
    match failure.or(late) {
        Some(error) => Err(error),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// How long the background tasks (caches, reloader, ops server) get to stop once told.
const BACKGROUND_GRACE: Duration = Duration::from_secs(2);

/// A cache's fill, as a critical task: it runs until shutdown; ending before is a failure.
async fn watching(
    fill: impl std::future::Future<Output = ()>,
    background: CancellationToken,
) -> anyhow::Result<()> {
    tokio::select! {
        _ = fill => anyhow::bail!("stopped watching"),
        _ = background.cancelled() => Ok(()),
    }
}

/// The webhook's critical tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    WebhookServer,
    OpsServer,
    StatefulSetCache,
    ParentCaches,
    EvictionCaches,
    CertificateReloader,
    Readiness,
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Task::WebhookServer => "webhook server",
            Task::OpsServer => "ops server",
            Task::StatefulSetCache => "StatefulSet cache",
            Task::ParentCaches => "parent caches",
            Task::EvictionCaches => "eviction caches",
            Task::CertificateReloader => "certificate reloader",
            Task::Readiness => "readiness",
        })
    }
}
