//! Wires the controller together: caches, leader election, the group queue, the ops server.
//! Every task is critical: if one ends or panics, the process shuts down and exits non-zero
//! (Kubernetes restarts it) rather than running with a part missing.
//!
//! Nothing here ends because the API server is unreachable: the watches retry with backoff
//! (their caches keep the last state), a lost Lease ends a leadership term and the elector
//! campaigns again, and certificate and Event calls are retried. Exiting is for bugs only.
//!
//! What survives a term: the caches (state, not decisions) and the pending deletions (facts:
//! deletes this replica sent, which keep a new term from deleting again a pod a lagging cache
//! still shows Ready). What does not: every reconcile and certificate round is bound to the term
//! it started in and stops when it ends; each new term re-reads and re-plans every group.
//!
//! Readiness (`/ready`) turns true once the caches have synced and stays true through an API
//! server outage: nothing routes traffic to the controller, and flapping it would only stall a
//! rollout of baton itself during a control-plane upgrade. Whether this replica acts is the
//! `baton_leader` metric.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use baton_config::Config;
use baton_shared::http_server::BoundServer;
use baton_shared::ops_server::{self, Readiness};
use baton_shared::supervisor::Supervisor;
use prometheus::Registry;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cache::{self, Caches};
use crate::clusters::Clusters;
use crate::explain::Explainer;
use crate::group::GroupReconciler;
use crate::leader::{LeaderElector, LeaderMetrics, Leadership, Term, unique_identity};
use crate::metrics::ControllerMetrics;
use crate::queue;
use crate::rollout::pending::PendingDeletions;
use crate::rollout::reconcile::Rollouts;
use crate::runner::MayStart;
use crate::watch_source::WatchSource;

/// How long tasks get to finish after shutdown starts (the Lease release is one of them).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// An unchanged explanation is published again as an Event after this long.
const EVENT_REPEAT_AFTER: Duration = Duration::from_secs(600);

/// Runs the controller until `shutdown` is cancelled or a task fails. Start-up is a sequence of
/// named parts, each built from the ones before it: what every part stands on, the lease, the
/// watches, what people are told (Events, the ops server and its status page), the group
/// reconciler; then every part's task is started under one supervisor.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let base = Base::connect(&config).await?;
    let elector = elector(&config, &base)?;
    let leadership = elector.leadership();
    tracing::info!(identity = %base.identity, lease = %config.controller.lease.name, "campaigning for the lease");
    let shard_loop = shard_loop(&config, &base)?;
    let shards = shard_loop.as_ref().map(crate::shards::ShardLoop::shards);
    let (touched, touched_groups) = tokio::sync::mpsc::unbounded_channel();
    let clients = Clients::build(&config, &base)?;
    let serving = Serving::start(&config, &base, &touched)?;
    let clusters = match &serving {
        Serving::One(watched) => watched.clusters.clone(),
        Serving::Many { .. } => Clusters::single(base.client.clone()),
    };
    // One explainer for every feature; its publisher is the one task that writes Events.
    let (explainer, event_publisher) = Explainer::new(
        clusters,
        base.identity.clone(),
        EVENT_REPEAT_AFTER,
        config.kubernetes.request_timeout.get(),
    );
    // What the leader's reconciles remember for the status page (the ops server reads it).
    let board = crate::status::StatusBoard::default();
    let ops = bind_ops_server(
        &config,
        &base,
        serving.status_source(),
        (&leadership, shards.as_ref()),
        &board,
    )?;
    // Exactly one task awaits the caches' sync and broadcasts it: kube's store readiness wakes
    // only one of several concurrent waiters.
    let (synced_sender, synced) = watch::channel(false);
    let reconcile = match &serving {
        Serving::One(watched) => {
            let reconciler = group_reconciler(
                &config,
                &base,
                watched,
                &explainer,
                &board,
                may_start(&leadership, shards.as_ref(), &config.namespace, &synced),
                (&touched, &clients),
            )?;
            Reconcile::One(reconciler)
        }
        Serving::Many(many) => Reconcile::Many(many.tenants.clone()),
    };
    let parts = Parts {
        reconcile,
        shards,
        base,
        elector,
        leadership,
        serving,
        clients,
        explainer,
        event_publisher,
        board,
        ops,
        synced_sender,
        synced,
        touched,
        touched_groups,
    };
    let readiness = parts.base.readiness.clone();
    let mut tasks = parts.spawn(&config, &shutdown);
    if let Some(sharer) = shard_loop {
        let shutdown = shutdown.clone();
        tasks.spawn(Task::ShardLeases, async move {
            sharer.run(shutdown).await;
            Ok(())
        });
    }
    supervise(tasks, &readiness, &shutdown).await
}

/// The election of the leader, who keeps what is the cluster's (the webhook's certificate) and,
/// without shards, acts on every group.
fn elector(config: &Config, base: &Base) -> anyhow::Result<LeaderElector> {
    Ok(LeaderElector::new(
        base.client.clone(),
        config.system_namespace(),
        &config.controller.lease,
        base.identity.clone(),
        config.kubernetes.request_timeout.get(),
    )
    .with_metrics(
        LeaderMetrics::register(&base.registry)?
            .counting_failures_in(base.metrics.failures.clone()),
    ))
}

/// With `controller.shards > 1`, this replica's share of the shard Leases: a namespace's groups
/// act under its shard's term, not the leader's.
fn shard_loop(config: &Config, base: &Base) -> anyhow::Result<Option<crate::shards::ShardLoop>> {
    crate::shards::ShardLoop::from_config(base.client.clone(), config, &base.identity)
        .map(|sharer| -> anyhow::Result<_> {
            let metrics = crate::shards::ShardMetrics::register(&base.registry)?;
            Ok(sharer.with_metrics(metrics.counting_failures_in(base.metrics.failures.clone())))
        })
        .transpose()
}

/// The HTTP clients every namespace served shares: each holds its TLS roots and connection
/// pool, built once per process (the pods' registers its histogram once).
#[derive(Clone)]
struct Clients {
    pods: baton_shared::pod_client::PodHttpClient,
    hooks: reqwest::Client,
}

impl Clients {
    fn build(config: &Config, base: &Base) -> anyhow::Result<Self> {
        Ok(Self {
            pods: baton_shared::pod_client::PodHttpClient::new(&config.pods, &base.registry)
                .context("building the pods' HTTP client")?,
            hooks: crate::gates::calls::GateCalls::hook_client(
                &config.gates,
                config.kubernetes.request_timeout.get(),
            )
            .context("building the hooks' HTTP client")?,
        })
    }
}

/// What every part stands on: the metrics registry, the API client, this replica's identity
/// and readiness.
#[derive(Clone)]
struct Base {
    registry: Registry,
    client: kube::Client,
    layers: baton_shared::kube_client::ClientLayers,
    metrics: ControllerMetrics,
    readiness: Readiness,
    identity: String,
}

impl Base {
    async fn connect(config: &Config) -> anyhow::Result<Self> {
        let registry = Registry::new();
        let (client, layers) =
            baton_shared::kube_client::client_and_layers(&config.kubernetes, &registry).await?;
        // Each group's series name its namespace where several are served.
        let namespaced = config.scope().is_ok_and(|scope| scope.only().is_none());
        let metrics = ControllerMetrics::register_serving(&registry, namespaced)?;
        Ok(Self {
            registry,
            client,
            layers,
            metrics,
            readiness: Readiness::default(),
            identity: unique_identity(),
        })
    }
}

/// The caches the watches fill (of each cluster, with several), where writes go, and the
/// zone-aware budgets; and the futures that drive their watches.
struct Watched {
    caches: Caches,
    clusters: Clusters,
    /// Where its watch events come from (the PhasedRollouts' too).
    source: WatchSource,
    budgets: crate::zpdb_check::ZoneBudgets,
    watches: futures::future::BoxFuture<'static, ()>,
    budget_watch: futures::future::BoxFuture<'static, ()>,
}

impl Watched {
    fn start(
        config: &Config,
        base: &Base,
        source: &WatchSource,
        touched: &UnboundedSender<String>,
    ) -> anyhow::Result<Self> {
        use futures::FutureExt;
        // With several clusters, the groups' StatefulSets and pods are watched in each of them.
        let (cluster_caches, clusters, cluster_watches) = if config.controller.clusters.is_empty() {
            let idle = futures::future::ready(()).boxed();
            (None, Clusters::single(base.client.clone()), idle)
        } else {
            let settings = crate::clusters::Settings {
                hub: base.client.clone(),
                layers: base.layers.clone(),
                system_namespace: config.system_namespace(),
                namespace: &config.namespace,
                request_timeout: config.kubernetes.request_timeout.get(),
                out: crate::clusters::register_out_gauge(&base.registry)?,
                failures: base.metrics.failures.clone(),
            };
            let (caches, clusters, watches) =
                crate::clusters::start(settings, &config.controller.clusters, touched.clone());
            let names: Vec<&str> = config
                .controller
                .clusters
                .iter()
                .map(|cluster| cluster.name.as_str())
                .collect();
            tracing::info!(clusters = ?names, "rollout groups span clusters");
            (Some(caches), clusters, watches.boxed())
        };
        let (caches, watches) =
            cache::start(source, &config.namespace, cluster_caches, touched.clone());
        // The zone-aware disruption budgets rollout deletions consult (none without the CRD).
        let (budgets, budget_watch) = crate::zpdb_check::ZoneBudgets::start(
            base.client.clone(),
            source,
            &config.namespace,
            caches.clone(),
            touched.clone(),
        );
        // With member clusters, deletions are claimed in a majority of their budgets' records.
        let budgets = if config.controller.clusters.is_empty() {
            budgets
        } else {
            let names: Vec<String> = config
                .controller
                .clusters
                .iter()
                .map(|cluster| cluster.name.clone())
                .collect();
            budgets.with_members(clusters.clone(), &names)
        };
        Ok(Self {
            caches,
            clusters,
            source: source.clone(),
            budgets,
            watches: async move {
                futures::join!(watches, cluster_watches);
            }
            .boxed(),
            budget_watch: budget_watch.boxed(),
        })
    }
}

/// The ops server with the status page: every replica serves it from its own caches.
fn bind_ops_server(
    config: &Config,
    base: &Base,
    source: crate::status::Source,
    (leadership, shards): (&Leadership, Option<&crate::shards::Shards>),
    board: &crate::status::StatusBoard,
) -> anyhow::Result<BoundServer> {
    let status_routes = crate::status::StatusRoutes {
        namespace: config.namespace.clone(),
        identity: base.identity.clone(),
        source,
        readiness: base.readiness.clone(),
        board: board.clone(),
        leadership: leadership.clone(),
        shards: shards.cloned(),
    };
    let ops = ops_server::bind_with_routes(
        config.ops.address.0,
        base.registry.clone(),
        base.readiness.clone(),
        status_routes.mount(),
    )
    .with_context(|| format!("binding the ops server to {}", config.ops.address))?;
    tracing::info!(address = %ops.local_addr(), "ops server listening");
    Ok(ops)
}

/// What reconciles a group of `config.namespace`: its rollout (with its gates' calls) and its
/// scaling. `queue` takes the groups a gate's call ended for (keyed as the reconcile was).
fn group_reconciler(
    config: &Config,
    base: &Base,
    watched: &Watched,
    explainer: &Explainer,
    board: &crate::status::StatusBoard,
    may_start: MayStart,
    (queue, clients): (&UnboundedSender<String>, &Clients),
) -> anyhow::Result<Arc<GroupReconciler>> {
    let request_timeout = config.kubernetes.request_timeout.get();
    let gate_calls = crate::gates::calls::GateCalls::with_hook_client(
        clients.hooks.clone(),
        base.client.clone(),
        config.namespace.clone(),
        request_timeout,
        &config.gates,
        (
            // Checks read Secrets of the groups' namespace: baton's own is there only when
            // baton runs beside the groups.
            (config.system_namespace() == config.namespace)
                .then(|| config.certificates.secret_name.clone()),
            queue.clone(),
        ),
    );
    Ok(Arc::new(GroupReconciler {
        caches: watched.caches.clone(),
        metrics: base.metrics.clone(),
        explainer: explainer.clone(),
        may_start,
        rollouts: Rollouts {
            namespace: config.namespace.clone(),
            clusters: watched.clusters.clone(),
            metrics: base.metrics.clone(),
            explainer: explainer.clone(),
            request_timeout,
            pending: PendingDeletions::default(),
            budgets: watched.budgets.clone(),
            status: board.clone(),
            gate_calls,
            completions: Default::default(),
        },
        scaler: crate::scaling::Scaler::with_pod_client(
            watched.clusters.clone(),
            config,
            clients.pods.clone(),
        ),
    }))
}

/// What the controller serves: one namespace with its watches (the Go operator's way), or
/// several, each taken up and let go by the watch of Namespaces ([`crate::tenants`]).
enum Serving {
    One(Box<Watched>),
    Many(Box<Namespaces>),
}

/// Several namespaces, before their watch runs.
struct Namespaces {
    tenants: crate::tenants::Tenants,
    scope: baton_core::namespaces::Scope,
    /// One cluster-wide watch per kind, every namespace's caches filled from them.
    source: WatchSource,
    /// What drives those watches.
    shared_watches: futures::future::BoxFuture<'static, ()>,
}

impl Serving {
    /// The namespaces `config` serves: one namespace's watches started now, or several taken
    /// up by the watch of Namespaces once it runs.
    fn start(
        config: &Config,
        base: &Base,
        touched: &UnboundedSender<String>,
    ) -> anyhow::Result<Self> {
        let scope = config
            .scope()
            .context("reading the namespaces served (namespaces, namespace_selector)")?;
        tracing::info!(serving = %scope.describe(), "serving rollout groups");
        let zone_tracker = &config.downscale.zone_tracker_config_map;
        Ok(match scope.only() {
            Some(_) => {
                let source = WatchSource::own(base.client.clone(), zone_tracker);
                Serving::One(Box::new(Watched::start(config, base, &source, touched)?))
            }
            None => {
                use futures::FutureExt;
                let (source, shared_watches) = WatchSource::shared(&base.client, zone_tracker);
                Serving::Many(Box::new(Namespaces {
                    tenants: crate::tenants::Tenants::default(),
                    scope,
                    source,
                    shared_watches: shared_watches.boxed(),
                }))
            }
        })
    }

    /// Where the status page reads the groups.
    fn status_source(&self) -> crate::status::Source {
        match self {
            Serving::One(watched) => crate::status::Source::One(watched.caches.clone()),
            Serving::Many(many) => crate::status::Source::Many(many.tenants.clone()),
        }
    }
}

/// What the group queue runs for a key: the one namespace's reconciler, or the tenants'.
enum Reconcile {
    One(Arc<GroupReconciler>),
    Many(crate::tenants::Tenants),
}

/// Every part, built: what [`Parts::spawn`] starts.
struct Parts {
    base: Base,
    elector: LeaderElector,
    leadership: Leadership,
    serving: Serving,
    clients: Clients,
    explainer: Explainer,
    event_publisher: crate::explain::EventPublisher,
    board: crate::status::StatusBoard,
    ops: BoundServer,
    synced_sender: watch::Sender<bool>,
    synced: watch::Receiver<bool>,
    touched: UnboundedSender<String>,
    touched_groups: tokio::sync::mpsc::UnboundedReceiver<String>,
    reconcile: Reconcile,
    /// This replica's shards, with `controller.shards > 1`.
    shards: Option<crate::shards::Shards>,
}

impl Parts {
    /// Starts every part's task: what keeps the caches and people informed, then what acts.
    fn spawn(self, config: &Config, shutdown: &CancellationToken) -> Supervisor<Task> {
        let mut tasks: Supervisor<Task> = Supervisor::default();
        let queue_wait = self.base.metrics.group_queue_wait.clone();
        let Self {
            base,
            elector,
            leadership,
            serving,
            clients,
            explainer,
            event_publisher,
            board,
            ops,
            synced_sender,
            synced,
            touched,
            touched_groups,
            reconcile,
            shards,
        } = self;
        let shutdown_ = shutdown.clone();
        tasks.spawn(Task::EventPublisher, async move {
            event_publisher.run(shutdown_).await;
            Ok(())
        });
        let shutdown_ = shutdown.clone();
        tasks.spawn(Task::OpsServer, async move {
            ops.run(shutdown_).await.map_err(anyhow::Error::from)
        });
        let common = Common {
            config,
            base: &base,
            leadership: &leadership,
            board: &board,
            explainer: &explainer,
            queue: &touched,
            clients: &clients,
            shards: shards.as_ref(),
        };
        match serving {
            Serving::One(watched) => {
                common.spawn_one(*watched, (synced_sender, synced), &mut tasks, shutdown);
            }
            Serving::Many(many) => {
                let Namespaces {
                    tenants,
                    scope,
                    source,
                    shared_watches,
                } = *many;
                let shutdown_ = shutdown.clone();
                tasks.spawn(Task::Watches, async move {
                    tokio::select! {
                        () = shared_watches => {}
                        () = shutdown_.cancelled() => {}
                    }
                    Ok(())
                });
                common.spawn_many(
                    tenants,
                    scope,
                    source,
                    (synced_sender, synced),
                    &mut tasks,
                    shutdown,
                );
            }
        }
        tasks.spawn(
            Task::Certificates,
            certificates(config, &base, &leadership, &explainer, shutdown),
        );
        tasks.spawn(Task::LeaderElection, {
            let shutdown = shutdown.clone();
            async move {
                elector.run(shutdown).await;
                Ok(())
            }
        });
        tasks.spawn(
            Task::GroupQueue,
            group_queue(
                touched_groups,
                reconcile,
                (config.controller.concurrent_groups as usize, queue_wait),
                shutdown.clone(),
            ),
        );
        tasks
    }
}

/// What every namespace served stands on, the one or each of several.
struct Common<'a> {
    config: &'a Config,
    base: &'a Base,
    leadership: &'a Leadership,
    board: &'a crate::status::StatusBoard,
    explainer: &'a Explainer,
    /// The group queue.
    queue: &'a UnboundedSender<String>,
    clients: &'a Clients,
    /// This replica's shards, with `controller.shards > 1`.
    shards: Option<&'a crate::shards::Shards>,
}

impl Common<'_> {
    /// The one namespace's tasks (and, with shards, every group at once when its shard comes).
    fn spawn_one(
        &self,
        watched: Watched,
        (synced_sender, synced): (watch::Sender<bool>, watch::Receiver<bool>),
        tasks: &mut Supervisor<Task>,
        shutdown: &CancellationToken,
    ) {
        let namespace = Namespace {
            config: self.config,
            base: self.base,
            leadership: self.leadership,
            board: self.board,
            explainer: self.explainer,
            touched: self.queue,
            may_start: may_start(
                self.leadership,
                self.shards,
                &self.config.namespace,
                &synced,
            ),
        };
        if let Some(shards) = self.shards {
            tasks.spawn(
                Task::ShardWatch,
                reconcile_all_on_shard(
                    watched.caches.clone(),
                    self.config.namespace.clone(),
                    shards.held_changes(),
                    self.queue.clone(),
                    shutdown.clone(),
                ),
            );
        }
        namespace.spawn(watched, synced_sender, synced, tasks, shutdown);
    }

    /// The watch of Namespaces taking each served one up and letting it go (with shards, only
    /// those whose shard this replica leads: it watches, caches and acts on its share alone),
    /// and readiness once the first ones listed.
    fn spawn_many(
        &self,
        tenants: crate::tenants::Tenants,
        scope: baton_core::namespaces::Scope,
        source: WatchSource,
        (synced_sender, synced): (watch::Sender<bool>, watch::Receiver<bool>),
        tasks: &mut Supervisor<Task>,
        shutdown: &CancellationToken,
    ) {
        use futures::FutureExt;
        let (served, watch) = crate::tenants::watch_namespaces(self.base.client.clone(), scope);
        let (served, watch) = match self.shards {
            Some(shards) => {
                let (held, narrow) = crate::tenants::of_held_shards(served, shards.held_changes());
                let both = async move {
                    futures::join!(watch, narrow);
                };
                (held, both.boxed())
            }
            None => (served, watch.boxed()),
        };
        let start = tenant_starter(self, source);
        let forget = crate::tenants::Forget {
            metrics: self.base.metrics.clone(),
            board: self.board.clone(),
        };
        let shutdown_ = shutdown.clone();
        tasks.spawn(Task::Namespaces, async move {
            let serve = crate::tenants::serve(
                tenants,
                served,
                start,
                forget,
                synced_sender,
                shutdown_.clone(),
            );
            tokio::select! {
                served = serve => served,
                () = watch => Ok(()),
            }
        });
        let readiness = self.base.readiness.clone();
        let shutdown = shutdown.clone();
        tasks.spawn(Task::Readiness, async move {
            let mut synced = synced;
            tokio::select! {
                _ = synced.wait_for(|synced| *synced) => readiness.set(true),
                () = shutdown.cancelled() => {}
            }
            shutdown.cancelled().await;
            Ok(())
        });
    }
}

/// What one namespace's tasks stand on, whichever way it is served.
struct Namespace<'a> {
    config: &'a Config,
    base: &'a Base,
    leadership: &'a Leadership,
    board: &'a crate::status::StatusBoard,
    explainer: &'a Explainer,
    /// Where its caches send the groups their changes concern.
    touched: &'a UnboundedSender<String>,
    /// The right to act on it (its PhasedRollouts; its groups' reconciler has its own copy).
    may_start: MayStart,
}

impl Namespace<'_> {
    /// The one namespace's tasks, each critical: its watches, readiness once they listed, the
    /// resync, every group at each term, its PhasedRollouts.
    fn spawn(
        &self,
        watched: Watched,
        synced_sender: watch::Sender<bool>,
        synced: watch::Receiver<bool>,
        tasks: &mut Supervisor<Task>,
        shutdown: &CancellationToken,
    ) {
        let until_shutdown = |work: futures::future::BoxFuture<'static, ()>| {
            let shutdown = shutdown.clone();
            async move {
                tokio::select! {
                    () = work => {}
                    () = shutdown.cancelled() => {}
                }
                Ok(())
            }
        };
        tasks.spawn(Task::Watches, until_shutdown(watched.watches));
        tasks.spawn(Task::BudgetWatch, until_shutdown(watched.budget_watch));
        let caches = watched.caches;
        let readiness = self.base.readiness.clone();
        let ready =
            mark_ready_when_synced(caches.clone(), synced_sender, readiness, shutdown.clone());
        tasks.spawn(Task::Readiness, ready);
        let every = self.config.controller.resync_interval.get();
        let resync = resync(
            caches.clone(),
            self.touched.clone(),
            every,
            shutdown.clone(),
        );
        tasks.spawn(Task::Resync, resync);
        tasks.spawn(
            Task::LeadershipWatch,
            reconcile_all_on_leadership(
                caches.clone(),
                synced,
                self.leadership.clone(),
                self.touched.clone(),
                shutdown.clone(),
            ),
        );
        tasks.spawn(
            Task::PhasedRollouts,
            phased_rollouts(
                self.config,
                self.base,
                caches,
                (watched.clusters, watched.source),
                self.may_start.clone(),
                self.board.clone(),
                self.explainer.clone(),
                shutdown,
            ),
        );
    }

    /// The same tasks for a namespace of several: one future, ended by dropping it when the
    /// namespace is let go; its caches' groups go to the queue keyed `namespace/group`.
    fn work(
        &self,
        watched: Watched,
        synced_sender: watch::Sender<bool>,
        synced: watch::Receiver<bool>,
        bare_groups: tokio::sync::mpsc::UnboundedReceiver<String>,
        queue: UnboundedSender<String>,
    ) -> futures::future::BoxFuture<'static, ()> {
        use futures::FutureExt;
        // Dropped with the future, never cancelled: the tasks below end with it.
        let never = CancellationToken::new();
        let namespace = self.config.namespace.clone();
        let forward = async move {
            let mut bare_groups = bare_groups;
            while let Some(group) = bare_groups.recv().await {
                let _ = queue.send(baton_core::namespaces::qualify(&namespace, &group));
            }
        };
        let caches = watched.caches;
        // Once listed, every group once: the initial list's changes came while the groups
        // could not act yet, and a namespace taken up with its shard has no new term of the
        // leader to bring them back.
        let listed = {
            let (caches, touched) = (caches.clone(), self.touched.clone());
            async move {
                if caches.synced().await.is_ok() {
                    synced_sender.send_replace(true);
                    for group in caches.groups() {
                        let _ = touched.send(group);
                    }
                }
            }
        };
        let every = self.config.controller.resync_interval.get();
        let resync = resync(caches.clone(), self.touched.clone(), every, never.clone());
        let at_each_term = reconcile_all_on_leadership(
            caches.clone(),
            synced,
            self.leadership.clone(),
            self.touched.clone(),
            never.clone(),
        );
        let phased = phased_rollouts(
            self.config,
            self.base,
            caches,
            (watched.clusters, watched.source),
            self.may_start.clone(),
            self.board.clone(),
            self.explainer.clone(),
            &never,
        );
        let (watches, budget_watch) = (watched.watches, watched.budget_watch);
        async move {
            let _ = futures::join!(
                watches,
                budget_watch,
                forward,
                listed,
                resync,
                at_each_term,
                phased
            );
        }
        .boxed()
    }
}

/// Starts a namespace of several: its own config (the namespace served, as one install's),
/// watches, reconciler and tasks.
fn tenant_starter(common: &Common<'_>, source: WatchSource) -> crate::tenants::StartTenant {
    let shards = common.shards.cloned();
    let (template, base, leadership, board, explainer, queue, clients) = (
        common.config.clone(),
        common.base.clone(),
        common.leadership.clone(),
        common.board.clone(),
        common.explainer.clone(),
        common.queue.clone(),
        common.clients.clone(),
    );
    Box::new(move |namespace: &str| {
        let mut config = template.clone();
        config.namespace = namespace.to_owned();
        config.namespaces.clear();
        config.namespace_selector = baton_config::NamespaceSelector::default();
        let (bare, bare_groups) = tokio::sync::mpsc::unbounded_channel();
        let watched = Watched::start(&config, &base, &source, &bare)?;
        let (synced_sender, synced) = watch::channel(false);
        let may_start_here = may_start(&leadership, shards.as_ref(), namespace, &synced);
        let reconciler = group_reconciler(
            &config,
            &base,
            &watched,
            &explainer,
            &board,
            may_start_here.clone(),
            (&queue, &clients),
        )?;
        let caches = watched.caches.clone();
        let parts = Namespace {
            config: &config,
            base: &base,
            leadership: &leadership,
            board: &board,
            explainer: &explainer,
            touched: &bare,
            may_start: may_start_here.clone(),
        };
        let work = parts.work(
            watched,
            synced_sender,
            synced.clone(),
            bare_groups,
            queue.clone(),
        );
        let tenant = crate::tenants::Tenant {
            caches,
            reconciler,
            synced,
        };
        Ok((tenant, work))
    })
}

/// Reconciles each group a change concerns, at most `controller.concurrent_groups` at once,
/// one group never twice at once.
async fn group_queue(
    touched_groups: tokio::sync::mpsc::UnboundedReceiver<String>,
    reconcile: Reconcile,
    (concurrent_groups, waited): (usize, prometheus::Histogram),
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let reconcile = Arc::new(reconcile);
    queue::run(
        touched_groups,
        concurrent_groups,
        waited,
        move |group| {
            let reconcile = reconcile.clone();
            async move {
                match reconcile.as_ref() {
                    Reconcile::One(reconciler) => reconciler.reconcile(&group).await,
                    Reconcile::Many(tenants) => tenants.reconcile(&group).await,
                }
            }
        },
        shutdown,
    )
    .await;
    Ok(())
}

/// The webhook's certificate, kept by the leader.
fn certificates(
    config: &Config,
    base: &Base,
    leadership: &Leadership,
    explainer: &Explainer,
    shutdown: &CancellationToken,
) -> impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static {
    let settings = crate::certificates::Settings {
        config: config.certificates.clone(),
        namespace: config.namespace.clone(),
        system_namespace: config.system_namespace().to_owned(),
        cluster_domain: config.cluster_domain.clone(),
        request_timeout: config.kubernetes.request_timeout.get(),
    };
    let (client, leadership, registry) = (
        base.client.clone(),
        leadership.clone(),
        base.registry.clone(),
    );
    let (explainer, failures, shutdown) = (
        explainer.clone(),
        base.metrics.failures.clone(),
        shutdown.clone(),
    );
    async move {
        crate::certificates::run(
            client, settings, leadership, explainer, &registry, failures, shutdown,
        )
        .await
    }
}

/// The PhasedRollouts of the namespace, each naming a StatefulSet of the namespace or, with
/// member clusters, a member (`cluster/statefulset`).
#[allow(
    clippy::too_many_arguments,
    reason = "what serving them needs, each named"
)]
fn phased_rollouts(
    config: &Config,
    base: &Base,
    caches: Caches,
    (clusters, source): (Clusters, WatchSource),
    may_start: MayStart,
    board: crate::status::StatusBoard,
    explainer: Explainer,
    shutdown: &CancellationToken,
) -> impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static {
    let phased = crate::phased::PhasedRollouts {
        client: base.client.clone(),
        clusters,
        members: config
            .controller
            .clusters
            .iter()
            .map(|cluster| cluster.name.clone())
            .collect(),
        namespace: config.namespace.clone(),
        source,
        request_timeout: config.kubernetes.request_timeout.get(),
        caches,
        may_start,
        board,
        explainer,
        failures: base.metrics.failures.clone(),
    };
    let shutdown = shutdown.clone();
    async move { phased.run(shutdown).await }
}

/// Waits until the first task ends before shutdown (a failure: everything stops, the process
/// exits non-zero), or until shutdown; then gives the tasks SHUTDOWN_GRACE (the Lease release
/// is one of them).
async fn supervise(
    mut tasks: Supervisor<Task>,
    readiness: &Readiness,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let failure = tasks.until_failure(shutdown).await;
    if let Some(failure) = &failure {
        tracing::error!(error = format!("{failure:#}"), "stopping");
        shutdown.cancel();
    }
    readiness.set(false);
    let late = tasks.stop(SHUTDOWN_GRACE).await;
    match failure.or(late) {
        Some(failure) => Err(failure),
        None => Ok(()),
    }
}

/// The controller's critical tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    EventPublisher,
    OpsServer,
    Watches,
    BudgetWatch,
    Readiness,
    Resync,
    LeadershipWatch,
    Certificates,
    PhasedRollouts,
    LeaderElection,
    ShardLeases,
    GroupQueue,
    Namespaces,
    ShardWatch,
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Task::EventPublisher => "event publisher",
            Task::OpsServer => "ops server",
            Task::Watches => "watches",
            Task::BudgetWatch => "zone-aware budget watch",
            Task::Readiness => "readiness",
            Task::Resync => "resync",
            Task::LeadershipWatch => "leadership watch",
            Task::Certificates => "certificates",
            Task::PhasedRollouts => "phased rollouts",
            Task::LeaderElection => "leader election",
            Task::ShardLeases => "shard leases",
            Task::GroupQueue => "group queue",
            Task::Namespaces => "namespaces",
            Task::ShardWatch => "shard watch",
        })
    }
}

/// The right to act on `namespace`'s groups: its shard's term with shards, else the leader's;
/// never before `synced`.
fn may_start(
    leadership: &Leadership,
    shards: Option<&crate::shards::Shards>,
    namespace: &str,
    synced: &watch::Receiver<bool>,
) -> MayStart {
    match shards {
        Some(shards) => shards.may_start(namespace, synced.clone()),
        None => crate::runner::may_start(leadership.clone(), synced.clone()),
    }
}

/// With shards and one namespace: every group at once when this replica comes to hold the
/// namespace's shard, as [`reconcile_all_on_leadership`] does at each term of the leader.
async fn reconcile_all_on_shard(
    caches: Caches,
    namespace: String,
    mut held: watch::Receiver<crate::shards::HeldShards>,
    touched: UnboundedSender<String>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut serving = false;
    loop {
        let now = held.borrow_and_update().serves(&namespace);
        if now && !serving {
            tracing::info!(
                namespace,
                "leading the namespace's shard: reconciling every group"
            );
            for group in caches.groups() {
                let _ = touched.send(group);
            }
        }
        serving = now;
        tokio::select! {
            changed = held.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            () = shutdown.cancelled() => break,
        }
    }
    shutdown.cancelled().await;
    Ok(())
}

async fn mark_ready_when_synced(
    caches: Caches,
    synced_sender: watch::Sender<bool>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    tokio::select! {
        synced = caches.synced() => {
            synced.map_err(|_| anyhow!("the caches' writers were dropped before they synced"))?;
            tracing::info!(?caches, "caches synced");
            synced_sender.send_replace(true);
            readiness.set(true);
        }
        () = shutdown.cancelled() => {}
    }
    // Readiness stays until shutdown: finishing early is not a failure.
    shutdown.cancelled().await;
    Ok(())
}

/// The safety net behind the watches: every group, every `interval`.
async fn resync(
    caches: Caches,
    touched: UnboundedSender<String>,
    interval: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                for group in caches.groups() {
                    let _ = touched.send(group);
                }
            }
            () = shutdown.cancelled() => return Ok(()),
        }
    }
}

/// At the start of every term the leader looks at every group at once instead of waiting for
/// the next change: a term regained after an outage finds groups whose reconciles stopped (or
/// were never requeued) while it was not leading.
async fn reconcile_all_on_leadership(
    caches: Caches,
    mut synced: watch::Receiver<bool>,
    leadership: Leadership,
    touched: UnboundedSender<String>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut last: Option<Term> = None;
    loop {
        tokio::select! {
            acquired = leadership.acquired_after(last) => {
                let Ok(term) = acquired else { break };
                last = Some(term);
                if synced.wait_for(|synced| *synced).await.is_err() {
                    break;
                }
                tracing::info!(term = term.0, "leading: reconciling every group");
                for group in caches.groups() {
                    let _ = touched.send(group);
                }
            }
            () = shutdown.cancelled() => break,
        }
    }
    shutdown.cancelled().await;
    Ok(())
}
