//! baton-webhook: the stateless admission service that guards downscales (no-downscale,
//! prepare-downscale). This file only wires the library's pieces together.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use baton_config::Config;
use baton_shared::http_server::{self, BoundServer, Draining};
use baton_shared::ops_server::{self, Readiness};
use baton_shared::pod_client::PodHttpClient;
use baton_shared::supervisor::Supervisor;
use baton_webhook::admission::prepare_downscale::flow::PrepareDownscale;
use baton_webhook::evictions::{Evictions, ZpdbMetrics};
use baton_webhook::members::Members;
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

/// Start-up as named parts: the serving certificate (first: without it nothing can be served,
/// and the error names the file), the judges and the caches they read, the two servers; then
/// every part's task under one supervisor, and the shutdown that drains them.
async fn run(config: Config) -> anyhow::Result<()> {
    let shutdown = baton_shared::shutdown::on_signal()?;
    let registry = prometheus::Registry::new();
    let tls = Tls::load(&config)?;
    let judges = Judges::build(&config, &registry).await?;
    let tasks = Tasks {
        serving: CancellationToken::new(),
        background: CancellationToken::new(),
        readiness: Readiness::default(),
        draining: Draining::default(),
        // In-flight requests end by their deadline; give them that long, plus a little.
        drain: config.webhook.request_timeout.get() + Duration::from_secs(1),
    };
    let webhook = server::bind(
        config.webhook.address.0,
        tls.cert.server_config(tls.client_ca.clone()),
        judges.state.clone(),
        tasks.draining.clone(),
        tasks.drain,
    )
    .with_context(|| format!("binding webhook.address {}", config.webhook.address))?;
    let ops = ops_server::bind(config.ops.address.0, registry, tasks.readiness.clone())
        .with_context(|| format!("binding ops.address {}", config.ops.address))?;
    tracing::info!(
        webhook = %webhook.local_addr(), ops = %ops.local_addr(), namespace = %config.namespace,
        serving = %judges.scope,
        "baton-webhook listening"
    );
    let state = judges.state.clone();
    let interval = config.webhook.cert_reload_interval.get();
    let critical = tasks.spawn(webhook, ops, tls, judges, interval);
    let delay = config.webhook.shutdown_delay.get();
    tasks.shut_down(critical, &shutdown, &state, delay).await
}

/// The serving certificate and, when configured, the CA of the API server's client
/// certificate; both reloaded from their files.
struct Tls {
    cert: Arc<ReloadingCert>,
    client_ca: Option<Arc<ReloadingClientCa>>,
}

impl Tls {
    fn load(config: &Config) -> anyhow::Result<Self> {
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
                ReloadingClientCa::load(ClientCaFile(config.webhook.client_ca_file.clone()))
                    .context(
                        "loading webhook.client_ca_file, the CA of the API server's client certificate",
                    )?,
            ))
        };
        Ok(Self { cert, client_ca })
    }
}

/// What judges the reviews (the handlers' shared state), the caches it reads, and the futures
/// that fill them.
struct Judges {
    /// The namespaces served, as a log line reads them.
    scope: String,
    state: actix_web::web::Data<WebhookState>,
    parents: ParentCache,
    evictions: Arc<Evictions>,
    fill_statefulsets: futures::future::BoxFuture<'static, ()>,
    fill_parents: futures::future::BoxFuture<'static, ()>,
    fill_evictions: futures::future::BoxFuture<'static, ()>,
    /// Keeps the member clusters' clients current (`webhook.clusters`); never ends.
    follow_members: futures::future::BoxFuture<'static, ()>,
}

impl Judges {
    async fn build(config: &Config, registry: &prometheus::Registry) -> anyhow::Result<Self> {
        use futures::FutureExt;
        let (client, layers) =
            baton_shared::kube_client::client_and_layers(&config.kubernetes, registry).await?;
        let metrics = WebhookMetrics::register(registry)?;
        let connector = baton_shared::members::Connector {
            hub: client.clone(),
            layers,
            system_namespace: config.system_namespace().to_owned(),
            request_timeout: config.webhook.request_timeout.get(),
        };
        let (members, follow_members) = match Members::start(
            connector,
            &config.webhook.clusters,
            Some(metrics.failures.clone()),
        ) {
            Some((members, follow)) => (Some(members), follow),
            None => (None, std::future::pending().boxed()),
        };
        let pods = PodHttpClient::new(&config.pods, registry)?;
        let scope = config
            .scope()
            .context("reading namespaces and namespace_selector")?;
        // One namespace: namespaced watches (and a Role) as the Go operator's; more: watches of
        // every namespace, each review judged in its own namespace.
        let only = scope.only();
        if only.is_none() && members.is_some() {
            anyhow::bail!(
                "webhook.clusters: member clusters are served with one namespace for now, and this baton serves {}",
                scope.describe()
            );
        }
        let (statefulsets, fill_statefulsets) = statefulsets::watch(client.clone(), only);
        let (parents, fill_parents) = ParentCache::new(
            client.clone(),
            only,
            statefulsets.clone(),
            Some(metrics.parent_lookups.clone()),
        );
        let (evictions, fill_evictions) = Evictions::new(
            client.clone(),
            &scope,
            statefulsets,
            ZpdbMetrics::register(registry)?,
        );
        // With members, budgets span them: their pods are watched from the first budget on.
        let (evictions, fill_evictions) = match &members {
            Some(members) => {
                let reach = members.clone();
                let client_of: baton_webhook::member_pods::ClientOf =
                    Arc::new(move |cluster: &str| reach.client(cluster));
                let (evictions, fill_members) =
                    evictions.with_members(members.own(), members.names(), client_of);
                let fill = async move {
                    futures::join!(fill_evictions, fill_members);
                };
                (evictions, fill.boxed())
            }
            None => (evictions, fill_evictions),
        };
        let evictions = Arc::new(evictions);
        let prepare =
            PrepareDownscale::new(client, pods, config, scope.clone()).with_members(members);
        let state = actix_web::web::Data::new(
            WebhookState::new(parents.clone(), prepare, metrics, &config.webhook)
                .with_evictions(evictions.clone())
                .with_writers(baton_webhook::admission::state_guard::Writers {
                    state: config.state_writers(),
                    records: config.record_writers(),
                }),
        );
        Ok(Self {
            scope: scope.describe(),
            state,
            parents,
            evictions,
            fill_statefulsets: fill_statefulsets.boxed(),
            fill_parents,
            fill_evictions,
            follow_members,
        })
    }
}

/// What every task shares: `serving` ends the webhook server, `background` the rest;
/// readiness and draining as the servers report them; how long in-flight requests get.
struct Tasks {
    serving: CancellationToken,
    background: CancellationToken,
    readiness: Readiness,
    draining: Draining,
    drain: Duration,
}

impl Tasks {
    /// Every task is critical: if one ends (or panics) before shutdown, the process ends.
    fn spawn(
        &self,
        webhook: BoundServer,
        ops: BoundServer,
        tls: Tls,
        judges: Judges,
        reload_interval: Duration,
    ) -> Supervisor<Task> {
        let mut critical: Supervisor<Task> = Supervisor::default();
        let serving = self.serving.clone();
        critical.spawn(Task::WebhookServer, async move {
            webhook.run(serving).await.map_err(anyhow::Error::from)
        });
        let background = self.background.clone();
        critical.spawn(Task::OpsServer, async move {
            ops.run(background).await.map_err(anyhow::Error::from)
        });
        let watch = |fill| watching(fill, self.background.clone());
        critical.spawn(Task::StatefulSetCache, watch(judges.fill_statefulsets));
        critical.spawn(Task::ParentCaches, watch(judges.fill_parents));
        critical.spawn(Task::EvictionCaches, watch(judges.fill_evictions));
        critical.spawn(Task::MemberClusters, watch(judges.follow_members));
        let failures = judges.state.failures().clone();
        critical.spawn(
            Task::CertificateReloader,
            reload(tls, reload_interval, failures, self.background.clone()),
        );
        critical.spawn(
            Task::Readiness,
            ready_when_synced(
                judges.parents,
                judges.evictions,
                self.readiness.clone(),
                self.draining.clone(),
                self.serving.clone(),
            ),
        );
        critical
    }

    /// Waits for shutdown or the first failure. Then: not ready, every answer closing its
    /// connection → keep serving for `delay` (webhook.shutdown_delay) while the Service's
    /// endpoints drop this replica → stop accepting, close idle connections, finish in-flight
    /// requests and prepare-downscale flows (bounded) → exit. A failing process stops at once.
    async fn shut_down(
        &self,
        mut critical: Supervisor<Task>,
        shutdown: &CancellationToken,
        state: &WebhookState,
        delay: Duration,
    ) -> anyhow::Result<()> {
        let failure = critical.until_failure(shutdown).await;
        let delay = match failure {
            None => delay,
            Some(_) => Duration::ZERO,
        };
        tracing::info!(
            delay = ?delay,
            "not ready; serving on, answers closing their connections, until webhook.shutdown_delay has passed"
        );
        let wait = tokio::time::sleep(delay);
        http_server::leave(&self.readiness, &self.draining, wait, &self.serving).await;
        tracing::info!("stopped accepting; finishing in-flight requests");
        let drain = self.drain;
        let server_ended = critical.wait_for(Task::WebhookServer, drain + Duration::from_secs(1));
        let (drained, flows_done) = tokio::join!(server_ended, state.drain(drain));
        if !drained || !flows_done {
            tracing::warn!("shutdown deadline passed with requests still in flight");
        }
        self.background.cancel();
        let late = critical.stop(BACKGROUND_GRACE).await;
        match failure.or(late) {
            Some(error) => Err(error),
            None => {
                tracing::info!("stopped");
                Ok(())
            }
        }
    }
}

/// Reloads the certificate (and the client CA) from their files every `interval`, counting
/// each reload that fails in `failures`.
async fn reload(
    tls: Tls,
    interval: Duration,
    failures: baton_webhook::error::Failures,
    background: CancellationToken,
) -> anyhow::Result<()> {
    let client_ca = async {
        if let Some(client_ca) = tls.client_ca {
            let failures = Some(failures.clone());
            client_ca
                .watch(interval, failures, background.clone())
                .await;
        }
    };
    let cert = tls
        .cert
        .watch(interval, Some(failures.clone()), background.clone());
    futures::join!(cert, client_ca);
    Ok(())
}

/// Ready once the caches synced, until shutdown.
async fn ready_when_synced(
    parents: ParentCache,
    evictions: Arc<Evictions>,
    readiness: Readiness,
    draining: Draining,
    serving: CancellationToken,
) -> anyhow::Result<()> {
    tokio::select! {
        _ = async { futures::join!(parents.wait_synced(), evictions.wait_synced()) } => {
            readiness.set(true);
            // `leave` starts draining before it turns unready: if it began meanwhile, this
            // sees it and takes readiness back.
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
    MemberClusters,
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
            Task::MemberClusters => "member clusters",
            Task::CertificateReloader => "certificate reloader",
            Task::Readiness => "readiness",
        })
    }
}
