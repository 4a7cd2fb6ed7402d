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
use crate::leader::MayAct;
use crate::leader::{LeaderElector, LeaderMetrics, Leadership, Term, unique_identity};
use crate::metrics::ControllerMetrics;
use crate::queue;
use crate::rollout::pending::PendingDeletions;
use crate::rollout::reconcile::Rollouts;

/// How long tasks get to finish after shutdown starts (the Lease release is one of them).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Groups reconciled at the same time.
const MAX_CONCURRENT_GROUPS: usize = 8;
/// An unchanged explanation is published again as an Event after this long.
const EVENT_REPEAT_AFTER: Duration = Duration::from_secs(600);

/// Runs the controller until `shutdown` is cancelled or a task fails.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let registry = Registry::new();
    let (client, layers) =
        baton_shared::kube_client::client_and_layers(&config.kubernetes, &registry).await?;
    let metrics = ControllerMetrics::register(&registry)?;
    let readiness = Readiness::default();

    let identity = unique_identity();
    let elector = LeaderElector::new(
        client.clone(),
        config.system_namespace(),
        &config.controller.lease,
        identity.clone(),
        config.kubernetes.request_timeout.get(),
    )
    .with_metrics(LeaderMetrics::register(&registry)?);
    let leadership = elector.leadership();
    tracing::info!(identity = %identity, lease = %config.controller.lease.name, "campaigning for the lease");

    let (touched, touched_groups) = tokio::sync::mpsc::unbounded_channel();
    // With member clusters, the groups' StatefulSets and pods are watched in each of them.
    let (cluster_caches, clusters, cluster_watches) = if config.controller.clusters.is_empty() {
        let idle = futures::future::Either::Left(futures::future::ready(()));
        (None, Clusters::single(client.clone()), idle)
    } else {
        let settings = crate::clusters::Settings {
            hub: client.clone(),
            layers,
            system_namespace: config.system_namespace(),
            namespace: &config.namespace,
            request_timeout: config.kubernetes.request_timeout.get(),
            out: crate::clusters::register_out_gauge(&registry)?,
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
        (
            Some(caches),
            clusters,
            futures::future::Either::Right(watches),
        )
    };
    let (caches, watches) = cache::start(
        client.clone(),
        &config.namespace,
        &config.downscale.zone_tracker_config_map,
        cluster_caches,
        touched.clone(),
    );
    let watches = async move {
        futures::join!(watches, cluster_watches);
    };
    // The zone-aware disruption budgets rollout deletions consult (none without the CRD).
    let (budgets, budget_watch) = crate::zpdb_check::ZoneBudgets::start(
        client.clone(),
        &config.namespace,
        caches.clone(),
        touched.clone(),
        config.kubernetes.request_timeout.get(),
    );
    // Exactly one task awaits the caches' sync and broadcasts it: kube's store readiness wakes
    // only one of several concurrent waiters.
    let (synced_sender, synced) = watch::channel(false);
    // One explainer for every feature; its publisher is the one task that writes Events.
    let (explainer, event_publisher) = Explainer::new(
        clusters.clone(),
        identity.clone(),
        EVENT_REPEAT_AFTER,
        config.kubernetes.request_timeout.get(),
    );
    // What the leader's reconciles remember for the status page (the ops server reads it).
    let status_board = crate::status::StatusBoard::default();
    // The ops server, with the status page: every replica serves it from its own caches.
    let status_routes = crate::status::StatusRoutes {
        namespace: config.namespace.clone(),
        identity,
        caches: caches.clone(),
        readiness: readiness.clone(),
        board: status_board.clone(),
        leadership: leadership.clone(),
    };
    let ops = ops_server::bind_with_routes(
        config.ops.address.0,
        registry.clone(),
        readiness.clone(),
        status_routes.mount(),
    )
    .with_context(|| format!("binding the ops server to {}", config.ops.address))?;
    tracing::info!(address = %ops.local_addr(), namespace = %config.namespace, "ops server listening");
    let reconciler = Arc::new(GroupReconciler {
        caches: caches.clone(),
        metrics: metrics.clone(),
        explainer: explainer.clone(),
        // Acting on half-filled caches could miss a not-ready zone: lead AND be synced. A
        // reconcile acts only within the term it started in.
        may_start: {
            let leadership = leadership.clone();
            let synced = synced.clone();
            Arc::new(move || {
                if !*synced.borrow() {
                    return None;
                }
                let term = leadership.term()?;
                let leadership = leadership.clone();
                let may_act: MayAct = Arc::new(move || leadership.time_left_in(term));
                Some(may_act)
            })
        },
        rollouts: Rollouts {
            namespace: config.namespace.clone(),
            clusters,
            metrics,
            explainer: explainer.clone(),
            request_timeout: config.kubernetes.request_timeout.get(),
            pending: PendingDeletions::default(),
            budgets,
            status: status_board.clone(),
            gate_calls: crate::gates::calls::GateCalls::new(
                client.clone(),
                config.namespace.clone(),
                config.kubernetes.request_timeout.get(),
                &config.gates,
                // Checks read Secrets of the groups' namespace: baton's own is there only when
                // baton runs beside the groups.
                (config.system_namespace() == config.namespace)
                    .then(|| config.certificates.secret_name.clone()),
                touched.clone(),
            )
            .context("building the gates' HTTP client")?,
            completions: Default::default(),
        },
        scaler: crate::scaling::Scaler::new(client.clone(), &config, &registry)
            .context("building the scaler")?,
    });

    let mut tasks: Supervisor<Task> = Supervisor::default();
    tasks.spawn(Task::EventPublisher, {
        let shutdown = shutdown.clone();
        async move {
            event_publisher.run(shutdown).await;
            Ok(())
        }
    });
    tasks.spawn(Task::OpsServer, {
        let shutdown = shutdown.clone();
        async move { ops.run(shutdown).await.map_err(anyhow::Error::from) }
    });
    tasks.spawn(Task::Watches, {
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                () = watches => {}
                () = shutdown.cancelled() => {}
            }
            Ok(())
        }
    });
    tasks.spawn(Task::BudgetWatch, {
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                () = budget_watch => {}
                () = shutdown.cancelled() => {}
            }
            Ok(())
        }
    });
    tasks.spawn(
        Task::Readiness,
        mark_ready_when_synced(
            caches.clone(),
            synced_sender,
            readiness.clone(),
            shutdown.clone(),
        ),
    );
    tasks.spawn(
        Task::Resync,
        resync(
            caches.clone(),
            touched.clone(),
            config.controller.resync_interval.get(),
            shutdown.clone(),
        ),
    );
    tasks.spawn(
        Task::LeadershipWatch,
        reconcile_all_on_leadership(
            caches.clone(),
            synced,
            leadership.clone(),
            touched,
            shutdown.clone(),
        ),
    );
    tasks.spawn(Task::Certificates, {
        let certificates = crate::certificates::Settings {
            config: config.certificates.clone(),
            namespace: config.namespace.clone(),
            system_namespace: config.system_namespace().to_owned(),
            cluster_domain: config.cluster_domain.clone(),
            request_timeout: config.kubernetes.request_timeout.get(),
        };
        let explainer = explainer.clone();
        let (client, leadership, registry) = (client.clone(), leadership.clone(), registry.clone());
        let shutdown = shutdown.clone();
        async move {
            let certificates = crate::certificates::run(
                client,
                certificates,
                leadership,
                explainer,
                &registry,
                shutdown,
            );
            certificates.await
        }
    });
    tasks.spawn(Task::PhasedRollouts, {
        // A PhasedRollout names a StatefulSet of its own cluster: served without member
        // clusters only (docs/multi-cluster.md).
        let spans_clusters = caches.spans_clusters();
        let phased = crate::phased::PhasedRollouts {
            client: client.clone(),
            namespace: config.namespace.clone(),
            request_timeout: config.kubernetes.request_timeout.get(),
            caches: caches.clone(),
            leadership: leadership.clone(),
            board: status_board.clone(),
            explainer: explainer.clone(),
        };
        let shutdown = shutdown.clone();
        async move {
            if spans_clusters {
                shutdown.cancelled().await;
                return Ok(());
            }
            phased.run(shutdown).await
        }
    });
    tasks.spawn(Task::LeaderElection, {
        let shutdown = shutdown.clone();
        async move {
            elector.run(shutdown).await;
            Ok(())
        }
    });
    tasks.spawn(Task::GroupQueue, {
        let shutdown = shutdown.clone();
        async move {
            queue::run(
                touched_groups,
                MAX_CONCURRENT_GROUPS,
                move |group| {
                    let reconciler = reconciler.clone();
                    async move { reconciler.reconcile(&group).await }
                },
                shutdown,
            )
            .await;
            Ok(())
        }
    });

    // The first task to end before shutdown is a failure: everything stops, the process exits
    // non-zero. Otherwise the tasks get SHUTDOWN_GRACE (the Lease release is one of them).
    let failure = tasks.until_failure(&shutdown).await;
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
    GroupQueue,
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
            Task::GroupQueue => "group queue",
        })
    }
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
