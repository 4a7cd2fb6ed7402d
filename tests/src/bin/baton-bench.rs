//! Benchmarks of baton-controller on the local control plane (figures in docs/benchmarks.md):
//!
//! - `rollout [PODS]`: a 3 zones × PODS (default 30) rollout with pods Ready 200 ms after
//!   creation: reaction time (a pod becomes Ready → baton deletes the next one) p50/p90/p99/max,
//!   to the next pod gone (the simulated kubelet removes a terminating pod) and to the next pod
//!   Terminating (baton's DELETE taken effect), wall time against the 3 × PODS × 200 ms a
//!   perfect operator needs, and where the passes
//!   went: how many the controller ran, their mean duration (its reconcile histogram), and its
//!   API requests by method per pod replaced. `BATON_BENCH_SAMPLES=FILE` appends every
//!   reaction (`deleted MS` and `terminating MS` lines) to FILE, to pool several runs.
//! - `rss`: resident memory (VmRSS, and its peak VmHWM) of the controller watching 100 groups ×
//!   3 StatefulSets × 30 pods, then of the webhook idle on the same namespace.
//! - `start`: a fresh install (no Lease yet) started in a namespace whose group already waits
//!   for a rollout: process start → first pod deleted, over several runs.
//! - `namespaces [N]`: the same pods (N groups × 3 StatefulSets × 30, default N = 50) once in one
//!   namespace and once one group in each of N namespaces, in one run: the controller serving
//!   the one namespace, then every namespace labelled for the bench (`namespaces: ["*"]` and a
//!   selector): start → ready, → every group reconciled, its RSS at both, and its API requests
//!   over an idle minute.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use baton_e2e::bench_support::{Memory, api_requests, sum_of};
use baton_e2e::controller_support::{Controller, create_ready_group, roll_out, rollout_state};
use baton_e2e::fixtures::{rollout_group, set_version};
use baton_e2e::webhook_support::{TestTls, WebhookReplica};
use baton_e2e::{
    ControlPlane, PodEvent, PodSimulator, PodTransition, SimulatorOptions, TestNamespace,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    baton_shared::crypto::install_default_provider();
    let which = std::env::args().nth(1).unwrap_or_default();
    let control_plane = ControlPlane::shared().await;
    match which.as_str() {
        "rollout" => rollout(control_plane).await,
        "rss" => rss(control_plane).await,
        "start" => start(control_plane).await,
        "namespaces" => namespaces(control_plane).await,
        other => bail!("usage: baton-bench rollout|rss|start|namespaces (got {other:?})"),
    }
}

async fn rollout(control_plane: &ControlPlane) -> anyhow::Result<()> {
    const READY_AFTER: Duration = Duration::from_millis(200);
    let pods: i32 = match std::env::args().nth(2) {
        Some(pods) => pods.parse().context("PODS is a number")?,
        None => 30,
    };
    let namespace = TestNamespace::create(control_plane, "bench-rollout").await;
    let options = SimulatorOptions {
        ready_after: READY_AFTER,
    };
    let simulator = PodSimulator::start(namespace.client(), namespace.name(), options).await;
    let controller = Controller::start(
        control_plane,
        namespace.name(),
        &[("BATON_LOG__LEVEL", "warn")],
    )
    .await;
    let client = namespace.client();
    let mut names = Vec::new();
    for fixture in rollout_group("ingester", &["a", "b", "c"], pods) {
        names.push(
            fixture
                .create(&client, namespace.name())
                .await
                .metadata
                .name
                .unwrap_or_default(),
        );
    }
    wait(Duration::from_secs(120), || async {
        let mut ready = true;
        for name in &names {
            let state = rollout_state(&client, namespace.name(), name).await;
            ready &= state.ready_replicas == pods
                && state.pod_revisions.len() == usize::try_from(pods).unwrap_or_default();
        }
        ready
    })
    .await?;
    // The clock starts once the controller leads.
    wait(Duration::from_secs(60), || controller.is_leader()).await?;

    let before = controller.metrics().await;
    let started = Instant::now();
    for name in &names {
        set_version(&client, namespace.name(), name, "v2").await;
    }
    wait(Duration::from_secs(300), || async {
        let mut complete = true;
        for name in &names {
            complete &= rollout_state(&client, namespace.name(), name)
                .await
                .is_complete();
        }
        complete
    })
    .await?;

    let timeline: Vec<_> = simulator
        .timeline()
        .into_iter()
        .filter(|t| t.at >= started)
        .collect();
    let last_ready = timeline
        .iter()
        .filter(|t| t.event == PodEvent::Ready)
        .map(|t| t.at)
        .max()
        .unwrap_or(started);
    let wall = last_ready.duration_since(started);
    let reactions = reactions_to(&timeline, PodEvent::Deleted);
    let deletions = reactions_to(&timeline, PodEvent::Terminating);
    // Each run's samples, for percentiles pooled over several runs.
    if let Some(path) = std::env::var_os("BATON_BENCH_SAMPLES") {
        use std::io::Write;
        let mut samples = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        for (measure, sorted) in [("deleted", &reactions), ("terminating", &deletions)] {
            for sample in sorted {
                writeln!(samples, "{measure} {:.3}", sample.as_secs_f64() * 1000.0)?;
            }
        }
    }
    let after = controller.metrics().await;
    let replaced = 3 * pods;
    let ideal = READY_AFTER * u32::try_from(replaced).unwrap_or_default();
    println!("rollout of 3 zones x {pods} pods, pods Ready {READY_AFTER:?} after creation");
    println!(
        "reaction (pod Ready -> next pod deleted, as seen by a watch), n={}: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        reactions.len(),
        percentile(&reactions, 0.50),
        percentile(&reactions, 0.90),
        percentile(&reactions, 0.99),
        percentile(&reactions, 1.0)
    );
    println!(
        "reaction to the DELETE's effect (pod Ready -> next pod Terminating, the same watch; without the simulated kubelet's removal that ends the pod), n={}: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        deletions.len(),
        percentile(&deletions, 0.50),
        percentile(&deletions, 0.90),
        percentile(&deletions, 0.99),
        percentile(&deletions, 1.0)
    );
    let passes = sum_of(
        &after,
        "rollout_operator_group_reconcile_duration_seconds_count",
        "",
    ) - sum_of(
        &before,
        "rollout_operator_group_reconcile_duration_seconds_count",
        "",
    );
    let pass_seconds = sum_of(
        &after,
        "rollout_operator_group_reconcile_duration_seconds_sum",
        "",
    ) - sum_of(
        &before,
        "rollout_operator_group_reconcile_duration_seconds_sum",
        "",
    );
    println!(
        "passes: {passes} ({:.1} per pod replaced), mean {:.2} ms each",
        passes / f64::from(replaced),
        pass_seconds / passes * 1000.0
    );
    for ((method, path), count) in api_requests(&before, &after) {
        println!(
            "API requests {method} {path}: {count} ({:.2} per pod replaced)",
            count / f64::from(replaced)
        );
    }
    println!(
        "wall time: {:.2} s = {:.2} x the ideal {:.1} s",
        wall.as_secs_f64(),
        wall.as_secs_f64() / ideal.as_secs_f64(),
        ideal.as_secs_f64()
    );
    Ok(())
}

/// Start → first pod deleted: each run is a new namespace (no Lease) with a ready group of
/// 3 zones × 3 pods already at a new update revision; the clock starts when the controller
/// process is spawned (its binary built beforehand) with the production lease timings, and
/// stops when the pod simulator's watch sees the first pod terminating.
async fn start(control_plane: &ControlPlane) -> anyhow::Result<()> {
    const RUNS: usize = 7;
    let production_lease = [
        ("BATON_LOG__LEVEL", "warn"),
        ("BATON_CONTROLLER__LEASE__DURATION", "15s"),
        ("BATON_CONTROLLER__LEASE__RENEW_DEADLINE", "10s"),
        ("BATON_CONTROLLER__LEASE__RETRY_PERIOD", "2s"),
    ];
    tokio::task::spawn_blocking(|| baton_e2e::process::workspace_binary("baton-controller"))
        .await??;
    let mut firsts = Vec::new();
    let mut readies = Vec::new();
    for run in 0..RUNS {
        let namespace = TestNamespace::create(control_plane, "bench-start").await;
        let client = namespace.client();
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let names = create_ready_group(&client, namespace.name(), &["a", "b", "c"], 3).await;
        roll_out(&client, namespace.name(), &names, "v2").await;

        let started = Instant::now();
        let controller =
            Controller::start(control_plane, namespace.name(), &production_lease).await;
        let ready = started.elapsed();
        let deleted = || {
            simulator
                .timeline()
                .into_iter()
                .find(|t| t.at >= started && t.event == PodEvent::Terminating)
        };
        wait(Duration::from_secs(60), || async { deleted().is_some() }).await?;
        let first = deleted()
            .map(|t| t.at.duration_since(started))
            .unwrap_or_default();
        println!(
            "run {run}: ready (caches synced) after {:.0} ms, first pod deleted after {:.0} ms",
            ready.as_secs_f64() * 1000.0,
            first.as_secs_f64() * 1000.0
        );
        firsts.push(first);
        readies.push(ready);
        drop(controller);
    }
    firsts.sort();
    readies.sort();
    println!(
        "start -> first pod deleted, fresh install (no Lease), lease duration 15 s, n={RUNS}: min {:.0} ms, median {:.0} ms, max {:.0} ms (ready: median {:.0} ms)",
        percentile(&firsts, 0.0),
        percentile(&firsts, 0.5),
        percentile(&firsts, 1.0),
        percentile(&readies, 0.5),
    );
    Ok(())
}

/// For every `event` of the timeline, the time since the last pod became Ready before it (the
/// readiness that allowed it), sorted.
fn reactions_to(timeline: &[PodTransition], event: PodEvent) -> Vec<Duration> {
    let mut reactions = Vec::new();
    for (index, transition) in timeline.iter().enumerate() {
        if transition.event != event {
            continue;
        }
        let enabling = timeline[..index]
            .iter()
            .rev()
            .find(|t| t.event == PodEvent::Ready);
        if let Some(ready) = enabling {
            reactions.push(transition.at.duration_since(ready.at));
        }
    }
    reactions.sort();
    reactions
}

fn percentile(sorted: &[Duration], quantile: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * quantile).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

async fn rss(control_plane: &ControlPlane) -> anyhow::Result<()> {
    const GROUPS: usize = 100;
    const PODS: i32 = 30;
    let namespace = TestNamespace::create(control_plane, "bench-rss").await;
    let client = namespace.client();
    let zones = ["a", "b", "c"];
    for group in 0..GROUPS {
        for fixture in rollout_group(&format!("g{group:03}"), &zones, PODS) {
            fixture.create(&client, namespace.name()).await;
        }
    }
    let expected = GROUPS * zones.len() * PODS as usize;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace.name());
    let creating = Instant::now();
    wait(Duration::from_secs(900), || async {
        pods.list(&ListParams::default().limit(1))
            .await
            .ok()
            .and_then(|list| list.metadata.remaining_item_count)
            .map(|remaining| remaining as usize + 1)
            .unwrap_or(0)
            >= expected
    })
    .await?;
    println!(
        "{expected} pods created in {:.0} s",
        creating.elapsed().as_secs_f64()
    );

    // Each variant (a set of extra environment variables, e.g. an allocator preloaded or
    // MALLOC_ARENA_MAX) is measured on the same pods; none given: the binaries as shipped.
    let variants: Vec<String> = match std::env::args().skip(2).collect::<Vec<_>>() {
        variants if variants.is_empty() => vec![String::new()],
        variants => variants,
    };
    for variant in &variants {
        let mut env = vec![("BATON_LOG__LEVEL", "warn")];
        for setting in variant.split_whitespace() {
            let (key, value) = setting.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("variant {variant:?}: {setting:?} is not KEY=VALUE")
            })?;
            env.push((key, value));
        }
        let label = if variant.is_empty() {
            "as shipped"
        } else {
            variant.as_str()
        };
        println!("-- {label}");
        measure(control_plane, namespace.name(), &env, GROUPS).await?;
    }
    Ok(())
}

async fn namespaces(control_plane: &ControlPlane) -> anyhow::Result<()> {
    const PODS: i32 = 30;
    let groups: usize = match std::env::args().nth(2) {
        Some(groups) => groups.parse().context("N is a number")?,
        None => 50,
    };
    let zones = ["a", "b", "c"];
    let key = format!(
        "bench.baton.dev/served-{}",
        baton_e2e::namespace::random_suffix()
    );
    // Built before the clock starts: start times are the controller's, not cargo's.
    tokio::task::spawn_blocking(|| baton_e2e::process::workspace_binary("baton-controller"))
        .await??;
    // As installed: the CRDs whose objects each namespace's watches follow (without them, each
    // namespace's watch of them retries, and the idle minute counts those retries).
    let admin = control_plane.admin_client().await;
    for crd in [
        baton_e2e::crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
        baton_e2e::crds::PHASED_ROLLOUT,
        baton_e2e::crds::ROLLOUT_HEALTH_CHECK,
    ] {
        baton_e2e::crds::install(&admin, crd).await;
    }
    // The same groups twice: all in one namespace, and one in each of `groups` namespaces.
    let one = TestNamespace::create(control_plane, "bench-one").await;
    let client = one.client();
    for group in 0..groups {
        for fixture in rollout_group(&format!("g{group:03}"), &zones, PODS) {
            fixture.create(&client, one.name()).await;
        }
    }
    let mut many = Vec::new();
    for _ in 0..groups {
        let namespace = TestNamespace::create(control_plane, "bench-many").await;
        let patch = serde_json::json!({"metadata": {"labels": {key.as_str(): "true"}}});
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .patch(
                namespace.name(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .context("labelling a namespace")?;
        for fixture in rollout_group("g000", &zones, PODS) {
            fixture.create(&client, namespace.name()).await;
        }
        many.push(namespace);
    }
    let expected = 2 * groups * zones.len() * PODS as usize;
    let creating = Instant::now();
    let all_pods: Api<Pod> = Api::all(client.clone());
    let bench_pods = ListParams::default().labels("statefulset.kubernetes.io/pod-name");
    wait(Duration::from_secs(1800), || async {
        let mut count = 0;
        let mut params = bench_pods.clone().limit(5000);
        loop {
            let Ok(page) = all_pods.list_metadata(&params).await else {
                return false;
            };
            count += page
                .items
                .iter()
                .filter(|pod| {
                    pod.metadata
                        .namespace
                        .as_deref()
                        .is_some_and(|namespace| namespace.starts_with("bench-"))
                })
                .count();
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
        count >= expected
    })
    .await?;
    println!(
        "{expected} pods created in {:.0} s ({groups} groups in one namespace, and one in each of {groups})",
        creating.elapsed().as_secs_f64()
    );

    let quiet = [("BATON_LOG__LEVEL", "warn")];
    println!("-- one namespace, {groups} groups");
    serve_and_measure(control_plane, one.name(), &quiet, groups).await?;
    let folder = tempfile::tempdir()?;
    let config = folder.path().join("baton.yaml");
    std::fs::write(
        &config,
        format!("namespaces: ['*']\nnamespace_selector:\n  match_labels:\n    {key}: 'true'\n"),
    )?;
    let config = config.to_string_lossy().into_owned();
    let system = TestNamespace::create(control_plane, "bench-system").await;
    println!("-- {groups} namespaces, one group each");
    serve_and_measure(
        control_plane,
        system.name(),
        &[("BATON_LOG__LEVEL", "warn"), ("BATON_CONFIG", &config)],
        groups,
    )
    .await?;
    drop(many);
    Ok(())
}

/// A controller started with `env` on `namespace` (its own, or its system namespace when the
/// config serves others): start → ready and → every one of `groups` reconciled, its RSS at
/// both, then its API requests over an idle minute.
async fn serve_and_measure(
    control_plane: &ControlPlane,
    namespace: &str,
    env: &[(&str, &str)],
    groups: usize,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let controller = Controller::start(control_plane, namespace, env).await;
    let ready = started.elapsed();
    let controller_pid = pid(controller.process.pid())?;
    let synced = Memory::of(controller_pid)?;
    every_group_reconciled(&controller, groups, Duration::from_secs(300)).await?;
    let reconciled_after = started.elapsed();
    let reconciled = Memory::of(controller_pid)?;
    println!(
        "controller: ready after {:.1} s (RSS {synced}), every group reconciled after {:.1} s (RSS {reconciled})",
        ready.as_secs_f64(),
        reconciled_after.as_secs_f64()
    );
    let before = controller.metrics().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = controller.metrics().await;
    let requests = api_requests(&before, &after);
    let total: f64 = requests.values().sum();
    println!("API requests over an idle minute: {total:.0}");
    for ((method, path), count) in &requests {
        println!("  {count:>5.0} {method} {path}");
    }
    Ok(())
}

/// The controller's memory once its caches synced and once it reconciled every group, then
/// (the controller stopped) the webhook's on the same namespace: once ready (its caches synced)
/// and once idle (its RSS settled).
async fn measure(
    control_plane: &ControlPlane,
    namespace: &str,
    env: &[(&str, &str)],
    groups: usize,
) -> anyhow::Result<()> {
    let controller = Controller::start(control_plane, namespace, env).await;
    let controller_pid = pid(controller.process.pid())?;
    let synced = Memory::of(controller_pid)?;
    every_group_reconciled(&controller, groups, Duration::from_secs(120)).await?;
    let reconciled = Memory::of(controller_pid)?;
    println!(
        "controller: RSS {synced} after cache sync, RSS {reconciled} after reconciling every group"
    );
    drop(controller);

    let tls = TestTls::generate()?;
    let webhook = WebhookReplica::start_with(control_plane, &tls, namespace, env).await?;
    let webhook_pid = pid(webhook.process.pid())?;
    let ready = Memory::of(webhook_pid)?;
    let idle = Memory::settled(webhook_pid).await?;
    println!("webhook: RSS {ready} when ready (caches synced), RSS {idle} idle");
    Ok(())
}

/// Waits until `controller` has reconciled `groups` groups (a series each in its metrics).
async fn every_group_reconciled(
    controller: &Controller,
    groups: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait(timeout, || async {
        let metrics = controller.metrics().await;
        metrics
            .lines()
            .filter(|line| line.starts_with("rollout_operator_group_reconciles_total{"))
            .count()
            >= groups
    })
    .await
}

fn pid(pid: Option<u32>) -> anyhow::Result<u32> {
    pid.ok_or_else(|| anyhow::anyhow!("the process under measurement exited"))
}

async fn wait<F, Fut>(timeout: Duration, mut condition: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !condition().await {
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
