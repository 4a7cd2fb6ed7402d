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
//! - `cluster [NAMESPACES] [GROUPS] [PODS] [ROLLING]`: one baton for a whole cluster, in one run
//!   (defaults 500 namespaces × 2 groups × 3 StatefulSets × 50 pods = 150,000 pods, 100 groups
//!   rolling): RSS idle, at 9,000 pods and at all of them (namespaces labelled while it runs),
//!   API requests over an idle minute, reaction with one group rolling and with ROLLING at once
//!   (with the group queue's waits over that minute, baton's own share), the one group again
//!   under a baton of its namespace alone (side by side), start to first decision with every
//!   pod listed, three replicas sharing six shards (each one's RSS, a kill and the takeover)
//!   and the webhook's RSS.
//!
//! `BATON_BENCH_HEAPTRACK=DIR` runs each controller under heaptrack (an allocation profile in
//! DIR; the RSS figures are then heaptrack's).

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
        "cluster" => cluster(control_plane).await,
        other => bail!("usage: baton-bench rollout|rss|start|namespaces|cluster (got {other:?})"),
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
    let (key, _) = served_by_label(control_plane, &["baton-controller"]).await?;
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
        label_namespaces(&client, std::slice::from_ref(&namespace), &key).await?;
        for fixture in rollout_group("g000", &zones, PODS) {
            fixture.create(&client, namespace.name()).await;
        }
        many.push(namespace);
    }
    let expected = 2 * groups * zones.len() * PODS as usize;
    let creating = Instant::now();
    wait(Duration::from_secs(1800), || async {
        bench_pods(&client, "bench-").await >= expected
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
    let config = serving_labelled(&folder, &key)?;
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

/// Until `condition` holds, read every 20 ms ([`wait_every`]).
async fn wait<F, Fut>(timeout: Duration, condition: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_every(timeout, Duration::from_millis(20), condition).await
}

/// What `baton-bench cluster` is run with.
struct ClusterShape {
    namespaces: usize,
    groups: usize,
    pods: i32,
    rolling: usize,
}

impl ClusterShape {
    fn from_args() -> anyhow::Result<Self> {
        let arg = |index: usize, default: usize| -> anyhow::Result<usize> {
            match std::env::args().nth(index) {
                Some(value) => value
                    .parse()
                    .with_context(|| format!("argument {index}: {value:?} is not a number")),
                None => Ok(default),
            }
        };
        Ok(Self {
            namespaces: arg(2, 500)?,
            groups: arg(3, 2)?,
            pods: i32::try_from(arg(4, 50)?)?,
            rolling: arg(5, 100)?,
        })
    }

    fn pods_per_namespace(&self) -> usize {
        self.groups * 3 * self.pods as usize
    }

    fn all_groups(&self) -> usize {
        self.namespaces * self.groups
    }

    /// The namespaces whose pods a simulated kubelet makes Ready: those of the rolling groups.
    fn simulated(&self) -> usize {
        self.rolling.div_ceil(self.groups).clamp(1, self.namespaces)
    }
}

/// What the benches of several namespaces start from: `binaries` built (before any clock
/// starts: start times are baton's, not cargo's), the CRDs installed, and the label key (unique
/// to the run) that marks a namespace served. Returns the key and an admin client.
async fn served_by_label(
    control_plane: &ControlPlane,
    binaries: &[&'static str],
) -> anyhow::Result<(String, kube::Client)> {
    for &binary in binaries {
        tokio::task::spawn_blocking(move || baton_e2e::process::workspace_binary(binary)).await??;
    }
    let admin = control_plane.admin_client().await;
    install_crds(&admin).await;
    let key = format!(
        "bench.baton.dev/served-{}",
        baton_e2e::namespace::random_suffix()
    );
    Ok((key, admin))
}

/// One baton for a whole cluster (see the module header).
async fn cluster(control_plane: &ControlPlane) -> anyhow::Result<()> {
    use futures::StreamExt;
    let shape = ClusterShape::from_args()?;
    let zones = ["a", "b", "c"];
    let (key, admin) =
        served_by_label(control_plane, &["baton-controller", "baton-webhook"]).await?;
    let folder = tempfile::tempdir()?;
    let config = serving_labelled(&folder, &key)?;
    let system = TestNamespace::create(control_plane, "bench-system").await;
    let env = [
        ("BATON_LOG__LEVEL", "warn"),
        ("BATON_CONFIG", config.as_str()),
    ];

    // Idle: serving a selector that matches nothing yet.
    let controller = Controller::start(control_plane, system.name(), &env).await;
    let idle = Memory::settled(pid(controller.process.pid())?).await?;
    println!("controller idle (no namespace served): RSS {idle}");

    // The namespaces and their groups, none labelled yet; the rolling groups' pods made Ready by
    // a simulated kubelet, the others left Pending (no kubelet: idle groups).
    let creating = Instant::now();
    let mut namespaces = Vec::new();
    let mut simulators = Vec::new();
    for index in 0..shape.namespaces {
        let namespace = TestNamespace::create(control_plane, &format!("bench-cl{index:03}")).await;
        if index < shape.simulated() {
            let options = SimulatorOptions {
                ready_after: Duration::from_millis(200),
            };
            simulators
                .push(PodSimulator::start(namespace.client(), namespace.name(), options).await);
        }
        namespaces.push(namespace);
    }
    let fixtures: Vec<(String, baton_e2e::fixtures::StatefulSetFixture)> = namespaces
        .iter()
        .flat_map(|namespace| {
            (0..shape.groups).flat_map(move |group| {
                let group = format!("g{group:03}");
                // The group's label on its pods too, as Mimir's are: a budget selects by it.
                rollout_group(&group, &zones, shape.pods)
                    .into_iter()
                    .map(move |fixture| {
                        let fixture = fixture.pod_label("rollout-group", &group);
                        (namespace.name().to_owned(), fixture)
                    })
            })
        })
        .collect();
    // The simulated namespaces' pods first, made Ready before the rest are created: a simulated
    // kubelet's status writes amid 150,000 pod creations time out and retry, a storm the API
    // server of 2 cores does not come out of.
    let simulated_fixtures = shape.simulated() * shape.groups * zones.len();
    let mut fixtures = fixtures.into_iter();
    let create = |fixtures: Vec<(String, baton_e2e::fixtures::StatefulSetFixture)>| {
        futures::stream::iter(fixtures).for_each_concurrent(16, |(namespace, fixture)| {
            let client = admin.clone();
            async move {
                fixture.create(&client, &namespace).await;
            }
        })
    };
    create(fixtures.by_ref().take(simulated_fixtures).collect()).await;
    let simulated_pods = shape.simulated() * shape.pods_per_namespace();
    wait_every(
        Duration::from_secs(1800),
        Duration::from_secs(2),
        || async {
            let mut ready = 0;
            for simulator in &simulators {
                let mut seen = std::collections::HashSet::new();
                for transition in simulator.timeline() {
                    if transition.event == PodEvent::Ready {
                        seen.insert(transition.uid);
                    }
                }
                ready += seen.len();
            }
            ready >= simulated_pods
        },
    )
    .await?;
    println!(
        "{simulated_pods} pods of the rolling groups' namespaces Ready in {:.0} s",
        creating.elapsed().as_secs_f64()
    );
    create(fixtures.collect()).await;
    let expected = shape.namespaces * shape.pods_per_namespace();
    wait_every(
        Duration::from_secs(3600),
        Duration::from_secs(5),
        || async { bench_pods(&admin, "bench-cl").await >= expected },
    )
    .await?;
    println!(
        "{expected} pods created in {:.0} s ({} namespaces x {} groups x 3 x {} pods)",
        creating.elapsed().as_secs_f64(),
        shape.namespaces,
        shape.groups,
        shape.pods
    );

    // At 9,000 pods: enough namespaces labelled, taken up while running.
    let first = (9_000 / shape.pods_per_namespace()).clamp(1, shape.namespaces);
    let taking = Instant::now();
    label_namespaces(&admin, &namespaces[..first], &key).await?;
    every_group_reconciled_every(&controller, first * shape.groups, Duration::from_secs(600))
        .await?;
    let at_first = Memory::settled(pid(controller.process.pid())?).await?;
    println!(
        "{} namespaces ({} pods) taken up in {:.1} s: RSS {at_first}",
        first,
        first * shape.pods_per_namespace(),
        taking.elapsed().as_secs_f64()
    );
    measure_webhook(
        control_plane,
        system.name(),
        &env,
        &namespaces[0],
        first * shape.pods_per_namespace(),
    )
    .await?;

    // At every pod.
    let taking = Instant::now();
    label_namespaces(&admin, &namespaces[first..], &key).await?;
    every_group_reconciled_every(&controller, shape.all_groups(), Duration::from_secs(1800))
        .await?;
    let taken = taking.elapsed();
    let at_all = Memory::settled(pid(controller.process.pid())?).await?;
    println!(
        "{} more namespaces ({} pods in all) taken up in {:.1} s: RSS {at_all}",
        shape.namespaces - first,
        expected,
        taken.as_secs_f64()
    );
    let per_pod = |memory: &Memory, pods: usize| {
        (memory.rss_kib.saturating_sub(idle.rss_kib)) as f64 * 1024.0 / pods as f64
    };
    println!(
        "above idle: {:.0} bytes per pod at {} pods, {:.0} bytes per pod at {}",
        per_pod(&at_first, first * shape.pods_per_namespace()),
        first * shape.pods_per_namespace(),
        per_pod(&at_all, expected),
        expected
    );

    // An idle minute.
    let before = controller.metrics().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = controller.metrics().await;
    let requests = api_requests(&before, &after);
    println!(
        "API requests over an idle minute: {:.0}",
        requests.values().sum::<f64>()
    );
    for ((method, path), count) in &requests {
        println!("  {count:>5.0} {method} {path}");
    }

    // Reaction: one group rolling while every other idles, then `rolling` groups at once.
    let one = [(0, 0)];
    let reactions = roll_and_measure(&admin, &namespaces, &simulators, &one, "v2", &zones).await?;
    print_reactions("one group rolling", &reactions);
    let many: Vec<(usize, usize)> = (0..shape.rolling)
        .map(|index| (index / shape.groups, index % shape.groups))
        .collect();
    let before = controller.metrics().await;
    let api_before = api_server_metrics(&admin).await?;
    let reactions = roll_and_measure(&admin, &namespaces, &simulators, &many, "v3", &zones).await?;
    print_reactions(
        &format!("{} groups rolling at once", many.len()),
        &reactions,
    );
    // Where the time went over that minute: baton's queue and passes, the API server's writes.
    let (after, api_after) = (
        controller.metrics().await,
        api_server_metrics(&admin).await?,
    );
    for (what, name, having, (before, after)) in [
        (
            "baton's group queue, waits",
            "baton_group_queue_wait_seconds",
            &[][..],
            (&before, &after),
        ),
        (
            "baton's passes, durations",
            "rollout_operator_group_reconcile_duration_seconds",
            &[],
            (&before, &after),
        ),
        (
            "the API server's pod DELETEs",
            "apiserver_request_duration_seconds",
            &["verb=\"DELETE\"", "resource=\"pods\"", "subresource=\"\""],
            (&api_before, &api_after),
        ),
        (
            "the API server's pod status PATCHes (the simulated kubelets' Ready)",
            "apiserver_request_duration_seconds",
            &[
                "verb=\"PATCH\"",
                "resource=\"pods\"",
                "subresource=\"status\"",
            ],
            (&api_before, &api_after),
        ),
    ] {
        println!(
            "  {what} over that minute: {}",
            histogram_shares(before, after, name, having)
        );
    }
    wait_rollouts_complete(&admin, &namespaces, &many, &zones).await;

    // Start to first decision, every pod listed: a new process (the old one stopped as a
    // rollout of baton stops it, releasing its Lease, so the clock is the start's alone).
    let mut controller = controller;
    controller.process.signal("TERM")?;
    let _ = controller.process.wait().await;
    drop(controller);

    // Side by side: the same group rolled by a baton of its namespace alone (the Go operator's
    // way), the other 149,700 pods still in the cluster but not its business.
    let alone = Controller::start(
        control_plane,
        namespaces[0].name(),
        &[("BATON_LOG__LEVEL", "warn")],
    )
    .await;
    every_group_reconciled_every(&alone, shape.groups, Duration::from_secs(600)).await?;
    let reactions = roll_and_measure(&admin, &namespaces, &simulators, &one, "v4", &zones).await?;
    print_reactions(
        "one group rolling, a baton of its namespace alone",
        &reactions,
    );
    wait_rollouts_complete(&admin, &namespaces, &one, &zones).await;
    drop(alone);

    let started = Instant::now();
    let controller = start_patiently(control_plane, system.name(), &env).await?;
    let ready = started.elapsed();
    every_group_reconciled_every(&controller, 1, Duration::from_secs(600)).await?;
    let first_decision = started.elapsed();
    every_group_reconciled_every(&controller, shape.all_groups(), Duration::from_secs(600)).await?;
    println!(
        "restart with {expected} pods: ready (caches listed) after {:.1} s, first group reconciled after {:.1} s, every group after {:.1} s; RSS {}",
        ready.as_secs_f64(),
        first_decision.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        Memory::of(pid(controller.process.pid())?)?
    );
    drop(controller);

    // Three replicas sharing six shards.
    let mut replicas = Vec::new();
    for index in 0..3 {
        let host = format!("{}-replica-{index}", system.name());
        let mut with_shards = env.to_vec();
        with_shards.push(("BATON_CONTROLLER__SHARDS", "6"));
        with_shards.push(("HOSTNAME", host.as_str()));
        replicas.push(start_patiently(control_plane, system.name(), &with_shards).await?);
    }
    wait_every(Duration::from_secs(900), Duration::from_secs(2), || async {
        let mut served = 0;
        for replica in &replicas {
            served += groups_reconciled(replica).await;
        }
        served >= shape.all_groups()
    })
    .await?;
    for (index, replica) in replicas.iter().enumerate() {
        println!(
            "replica {index} of 3: {} groups reconciled, RSS {}",
            groups_reconciled(replica).await,
            Memory::settled(pid(replica.process.pid())?).await?
        );
    }
    let mut killed = replicas.remove(0);
    let had = groups_reconciled(&killed).await;
    let counts: Vec<usize> = {
        let mut counts = Vec::new();
        for replica in &replicas {
            counts.push(groups_reconciled(replica).await);
        }
        counts
    };
    killed.process.signal("KILL")?;
    let _ = killed.process.wait().await;
    let died = Instant::now();
    wait_every(
        Duration::from_secs(900),
        Duration::from_millis(500),
        || async {
            let mut gained = 0;
            for (replica, before) in replicas.iter().zip(&counts) {
                gained += groups_reconciled(replica).await.saturating_sub(*before);
            }
            gained >= had
        },
    )
    .await?;
    println!(
        "a replica serving {had} groups killed: the other two reconciled them within {:.1} s",
        died.elapsed().as_secs_f64()
    );
    for (index, replica) in replicas.iter().enumerate() {
        println!(
            "survivor {index}: {} groups reconciled, RSS {}",
            groups_reconciled(replica).await,
            Memory::of(pid(replica.process.pid())?)?
        );
    }
    drop(replicas);

    // The webhook serving every namespace of the selector.
    measure_webhook(control_plane, system.name(), &env, &namespaces[0], expected).await?;
    drop(simulators);
    Ok(())
}

/// How many of the cluster's pods are in namespaces named `prefix…` (paginated metadata lists).
async fn bench_pods(client: &kube::Client, prefix: &str) -> usize {
    let all_pods: Api<Pod> = Api::all(client.clone());
    let mut count = 0;
    let mut params = ListParams::default()
        .labels("statefulset.kubernetes.io/pod-name")
        .limit(5000);
    loop {
        let Ok(page) = all_pods.list_metadata(&params).await else {
            return count;
        };
        count += page
            .items
            .iter()
            .filter(|pod| {
                pod.metadata
                    .namespace
                    .as_deref()
                    .is_some_and(|namespace| namespace.starts_with(prefix))
            })
            .count();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return count,
        }
    }
}

async fn label_namespaces(
    client: &kube::Client,
    namespaces: &[TestNamespace],
    key: &str,
) -> anyhow::Result<()> {
    let patch = serde_json::json!({"metadata": {"labels": {key: "true"}}});
    let api = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    for namespace in namespaces {
        api.patch(
            namespace.name(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .context("labelling a namespace")?;
    }
    Ok(())
}

/// How many groups the controller has reconciled (a series each).
async fn groups_reconciled(controller: &Controller) -> usize {
    controller
        .metrics()
        .await
        .lines()
        .filter(|line| line.starts_with("rollout_operator_group_reconciles_total{"))
        .count()
}

/// As [`every_group_reconciled`], reading the (large) metrics every second.
async fn every_group_reconciled_every(
    controller: &Controller,
    groups: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_every(timeout, Duration::from_secs(1), || async {
        groups_reconciled(controller).await >= groups
    })
    .await
}

/// Changes the template of each `(namespace index, group index)` group to `version` and gives
/// every group's reactions (pod Ready → the group's next pod deleted) over the minute that
/// follows.
async fn roll_and_measure(
    client: &kube::Client,
    namespaces: &[TestNamespace],
    simulators: &[PodSimulator],
    groups: &[(usize, usize)],
    version: &str,
    zones: &[&str],
) -> anyhow::Result<Vec<(String, Vec<Duration>)>> {
    let started = Instant::now();
    for &(namespace, group) in groups {
        for zone in zones {
            let name = format!("g{group:03}-zone-{zone}");
            set_version(client, namespaces[namespace].name(), &name, version).await;
        }
    }
    // An observation window, not a wait for a condition: reading the groups' progress meanwhile
    // (a GET and a LIST per StatefulSet) would load the API server the reactions go through.
    let window = Duration::from_secs(60);
    tokio::time::sleep(window).await;
    let mut reactions = Vec::new();
    for &(namespace, group) in groups {
        let prefix = format!("g{group:03}-zone-");
        let timeline: Vec<PodTransition> = simulators[namespace]
            .timeline()
            .into_iter()
            .filter(|transition| transition.at >= started)
            .filter(|transition| {
                transition
                    .statefulset
                    .as_deref()
                    .is_some_and(|statefulset| statefulset.starts_with(&prefix))
            })
            .collect();
        reactions.push((
            format!("{}/g{group:03}", namespaces[namespace].name()),
            reactions_to(&timeline, PodEvent::Deleted),
        ));
    }
    Ok(reactions)
}

/// Whether every group of `groups` completed (its StatefulSets' status: every replica updated
/// and ready), read every five seconds until `within`.
async fn wait_rollouts_complete_within(
    client: &kube::Client,
    namespaces: &[TestNamespace],
    groups: &[(usize, usize)],
    zones: &[&str],
    within: Duration,
) -> bool {
    use k8s_openapi::api::apps::v1::StatefulSet;
    wait_every(within, Duration::from_secs(5), || async {
        for &(namespace, group) in groups {
            let api: Api<StatefulSet> =
                Api::namespaced(client.clone(), namespaces[namespace].name());
            for zone in zones {
                let name = format!("g{group:03}-zone-{zone}");
                let Ok(statefulset) = api.get(&name).await else {
                    return false;
                };
                let replicas = statefulset.spec.and_then(|spec| spec.replicas).unwrap_or(1);
                let status = statefulset.status.unwrap_or_default();
                let complete = status.update_revision.is_some()
                    && status.current_revision == status.update_revision
                    && status.updated_replicas == Some(replicas)
                    && status.ready_replicas == Some(replicas);
                if !complete {
                    return false;
                }
            }
        }
        true
    })
    .await
    .is_ok()
}

/// Waits (up to ten minutes) for the rolling groups to complete before what follows is measured,
/// saying how long it took, or that they did not.
async fn wait_rollouts_complete(
    client: &kube::Client,
    namespaces: &[TestNamespace],
    groups: &[(usize, usize)],
    zones: &[&str],
) {
    let waiting = Instant::now();
    let within = Duration::from_secs(600);
    if wait_rollouts_complete_within(client, namespaces, groups, zones, within).await {
        println!(
            "the rolling groups completed {:.0} s after the reactions' window",
            waiting.elapsed().as_secs_f64()
        );
    } else {
        println!("the rolling groups did not complete within {within:?}; measuring on");
    }
}

/// A histogram between two scrapes, its series with every label of `having` summed: how many
/// observations, and the share of them under each of its bounds from 10 ms to 1 s (baton's and
/// the API server's buckets differ; a bound it does not have is left out).
fn histogram_shares(before: &str, after: &str, name: &str, having: &[&str]) -> String {
    let total = |metrics: &str, suffix: &str, le: Option<&str>| -> f64 {
        let series = format!("{name}{suffix}");
        metrics
            .lines()
            .filter(|line| line.starts_with(&series))
            .filter(|line| having.iter().all(|label| line.contains(label)))
            .filter(|line| le.is_none_or(|le| line.contains(&format!("le=\"{le}\""))))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let between =
        |suffix: &str, le: Option<&str>| total(after, suffix, le) - total(before, suffix, le);
    let count = between("_count", None);
    if count <= 0.0 {
        return "none recorded".to_owned();
    }
    let has = |le: &str| {
        let bound = format!("le=\"{le}\"");
        after
            .lines()
            .any(|line| line.starts_with(&format!("{name}_bucket")) && line.contains(&bound))
    };
    let shares: Vec<String> = ["0.01", "0.025", "0.05", "0.1", "0.2", "0.25", "0.5", "1"]
        .iter()
        .filter(|le| has(le))
        .map(|le| {
            let under = between("_bucket", Some(le));
            format!("{:.1} % under {le} s", 100.0 * under / count)
        })
        .collect();
    format!("{count:.0}; {}", shares.join(", "))
}

/// The API server's `/metrics`.
async fn api_server_metrics(client: &kube::Client) -> anyhow::Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(request).await?)
}

/// The reactions of each group, pooled (p50/p99/max and how many) and each group's p99 at worst.
fn print_reactions(what: &str, reactions: &[(String, Vec<Duration>)]) {
    let mut pooled: Vec<Duration> = reactions.iter().flat_map(|(_, r)| r.clone()).collect();
    pooled.sort();
    let worst = reactions
        .iter()
        .filter(|(_, group)| !group.is_empty())
        .map(|(name, group)| (name, percentile(group, 0.99)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    println!(
        "{what}: reaction (pod Ready -> the group's next pod deleted) n={}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; worst group's p99 {}",
        pooled.len(),
        percentile(&pooled, 0.5),
        percentile(&pooled, 0.99),
        percentile(&pooled, 1.0),
        worst.map_or("-".to_owned(), |(name, p99)| format!(
            "{p99:.1} ms ({name})"
        ))
    );
}

/// Until `condition` holds, read every `every`, or an error after `timeout`.
async fn wait_every<F, Fut>(
    timeout: Duration,
    every: Duration,
    mut condition: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !condition().await {
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?}");
        }
        tokio::time::sleep(every).await;
    }
    Ok(())
}

/// A controller started with `env`, waited for until ready for as long as a listing of the
/// whole cluster takes (the tests' helper gives up after a minute).
async fn start_patiently(
    control_plane: &ControlPlane,
    namespace: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<Controller> {
    let setup = baton_e2e::controller_support::ControllerSetup::new()?;
    let controller = Controller::start_unready(control_plane, namespace, env, setup).await;
    wait_every(
        Duration::from_secs(900),
        Duration::from_millis(50),
        || async { matches!(controller.ops_get("/ready").await, Some((200, _))) },
    )
    .await?;
    Ok(controller)
}

/// The webhook serving what `env` serves, at `pods` pods: its RSS once ready, and its answer to
/// 500 dry-run evictions of pods of `namespace`'s group `g001`, which a zone-aware budget
/// guards for the measure (created, then deleted): each answer reads the pod and its group's
/// pods live (several namespaces served: no pod cache), p50/p99/max as the client saw it.
async fn measure_webhook(
    control_plane: &ControlPlane,
    system: &str,
    env: &[(&str, &str)],
    namespace: &TestNamespace,
    pods: usize,
) -> anyhow::Result<()> {
    use baton_e2e::zpdb_support::{answer_of, budget, eviction_review, zpdb_resource};
    let budgets = Api::<kube::api::DynamicObject>::namespaced_with(
        namespace.client(),
        namespace.name(),
        &zpdb_resource(),
    );
    let spec = serde_json::json!({
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"rollout-group": "g001"}},
    });
    budgets
        .create(
            &kube::api::PostParams::default(),
            &budget("bench-g001", spec),
        )
        .await
        .context("creating the bench's budget")?;
    let tls = TestTls::generate()?;
    let webhook = WebhookReplica::start_with(control_plane, &tls, system, env).await?;
    let webhook_pid = pid(webhook.process.pid())?;
    let ready = Memory::of(webhook_pid)?;
    let client = tls.client()?;
    let url = webhook.url("/admission/pod-eviction");
    let mut answers = Vec::new();
    let mut allowed = 0;
    let mut denial = None;
    for index in 0..500 {
        let pod = format!("g001-zone-{}-{}", ["a", "b", "c"][index % 3], index % 50);
        let review = eviction_review(namespace.name(), &pod, &format!("bench-{index}"), true);
        let started = Instant::now();
        let answer: serde_json::Value = client
            .post(&url)
            .json(&review)
            .send()
            .await
            .context("asking the webhook")?
            .json()
            .await
            .context("reading the webhook's answer")?;
        answers.push(started.elapsed());
        match answer_of(&answer) {
            (true, _) => allowed += 1,
            (false, message) if denial.is_none() => denial = Some(message),
            (false, _) => {}
        }
    }
    answers.sort();
    let after = Memory::settled(webhook_pid).await?;
    println!(
        "webhook serving the selector at {pods} pods: RSS {ready} ready, {after} after 500 evictions under a budget ({allowed} allowed; a denial: {}); answer p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        denial.as_deref().unwrap_or("none"),
        percentile(&answers, 0.5),
        percentile(&answers, 0.99),
        percentile(&answers, 1.0)
    );
    drop(webhook);
    budgets
        .delete("bench-g001", &kube::api::DeleteParams::default())
        .await
        .context("deleting the bench's budget")?;
    Ok(())
}

/// As installed: the CRDs whose objects the controller's watches follow (without them, each
/// watch of them retries, and an idle minute counts those retries).
async fn install_crds(admin: &kube::Client) {
    for crd in [
        baton_e2e::crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
        baton_e2e::crds::PHASED_ROLLOUT,
        baton_e2e::crds::ROLLOUT_HEALTH_CHECK,
    ] {
        baton_e2e::crds::install(admin, crd).await;
    }
}

/// The path of a config, written in `folder`, serving every namespace labelled `key: true`.
fn serving_labelled(folder: &tempfile::TempDir, key: &str) -> anyhow::Result<String> {
    let config = folder.path().join("baton.yaml");
    std::fs::write(
        &config,
        format!("namespaces: ['*']\nnamespace_selector:\n  match_labels:\n    {key}: 'true'\n"),
    )?;
    Ok(config.to_string_lossy().into_owned())
}
