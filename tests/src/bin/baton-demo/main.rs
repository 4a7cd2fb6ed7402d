//! The live demo: a local control plane, the pod simulator, baton-controller, a three-zone
//! rollout group, and a rollout followed zone by zone with `kubectl baton wait`, as a deploy
//! pipeline follows one. Keeps running until Ctrl-C, so you can poke it with kubectl and
//! `kubectl baton`, and look at the status page.
//!
//! The new version is deployed before baton-controller starts (OnDelete: nothing moves until
//! baton deletes a pod), and the controller starts only once `wait` follows the group: the
//! reader sees the first zone roll from its first pod, not a group already half done.
//! scripts/demo.sh builds the binaries first, showing cargo's progress.
//!
//! `--clusters 3` runs the same story across three clusters instead ([`clusters`]): what a
//! Fleet user would try first.

use std::io::IsTerminal;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use baton_e2e::controller_support::{Controller, ControllerSetup, rollout_state};
use baton_e2e::fixtures::{rollout_group, set_version};
use baton_e2e::process::workspace_binary;
use baton_e2e::{ControlPlane, PodSimulator, SimulatorOptions, wait_until};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use tokio::io::AsyncBufReadExt;

const NAMESPACE: &str = "baton-demo";
const ZONES: [&str; 3] = ["a", "b", "c"];
const REPLICAS: i32 = 5;
/// The soak between zones (docs/gates.md): written on zone a, it is the group's, so zones b and
/// c each wait this long after the zones before them finished. Long enough to watch it count
/// down.
pub(crate) const SOAK_SECONDS: i64 = 10;
/// baton's gate keys (docs/gates.md).
pub(crate) const SOAK_ANNOTATION: &str = "baton.dev/soak";
/// On a terminal `wait` draws progress bars and prints no line to say it read the group: it is
/// given this long to do so before the controller starts (its first read takes well under a
/// second; the controller's first step, after its lease and caches, takes longer still).
const HEAD_START_ON_A_TERMINAL: Duration = Duration::from_secs(1);

mod clusters;

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Demo {
    /// One cluster, three StatefulSets as zones.
    OneCluster,
    /// Three clusters, one StatefulSet each as a zone.
    ThreeClusters,
}

const USAGE: &str = "usage: scripts/demo.sh [--clusters 1|3]";

/// Reads the command line: nothing, `--clusters 1`, or `--clusters 3` (also `--clusters=3`).
fn demo_from(args: &[String]) -> Result<Demo, String> {
    let count = match args {
        [] => return Ok(Demo::OneCluster),
        [flag, count] if flag == "--clusters" => count.as_str(),
        [flag] if flag.starts_with("--clusters=") => &flag["--clusters=".len()..],
        [flag] if flag == "--clusters" => {
            return Err(format!("--clusters needs a count (1 or 3)\n{USAGE}"));
        }
        _ => return Err(format!("unexpected arguments {args:?}\n{USAGE}")),
    };
    match count {
        "1" => Ok(Demo::OneCluster),
        "3" => Ok(Demo::ThreeClusters),
        other => Err(format!(
            "--clusters {other:?}: the demo runs 1 cluster or 3 (cluster-a, the hub where \
             baton-controller runs, and the members cluster-b and cluster-c)\n{USAGE}"
        )),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    baton_shared::crypto::install_default_provider();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let demo = demo_from(&args);
    let mut interrupt = Interrupt::listen()?;
    match demo {
        Ok(Demo::OneCluster) => one_cluster(&mut interrupt).await,
        Ok(Demo::ThreeClusters) => clusters::three_clusters(&mut interrupt).await,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    }
}

async fn one_cluster(interrupt: &mut Interrupt) -> anyhow::Result<()> {
    let prepared = interrupt.during(prepare_one_cluster()).await;
    let Some(prepared) = prepared else {
        println!("\nStopping the control plane…");
        return Ok(());
    };
    let OneCluster {
        control_plane,
        _simulator,
        kubeconfig,
        plugin,
        setup,
        log,
        address,
        mut wait,
    } = prepared?;

    let mut controller = Controller::start_unready(
        control_plane,
        NAMESPACE,
        &[("BATON_LOG__LEVEL", "info")],
        setup,
    )
    .await;
    if interrupt.during(controller.wait_ready()).await.is_none() {
        stop(controller, &log);
        return Ok(());
    }

    if let Some(status) = interrupt.during(wait.finished()).await {
        if status.context("waiting for kubectl-baton wait")?.success() {
            show(
                &plugin,
                &kubeconfig,
                &["status", "ingester", "-n", NAMESPACE],
            )
            .await?;
            println!(
                "{}",
                instructions(&kubeconfig, &plugin.display().to_string(), &address, &log)
            );
        } else {
            println!("\nthe rollout did not complete. baton-controller's log: {log}");
        }
        interrupt.received().await;
    }
    stop(controller, &log);
    Ok(())
}

/// What the one-cluster demo set up before the controller starts.
struct OneCluster {
    control_plane: &'static ControlPlane,
    _simulator: PodSimulator,
    kubeconfig: String,
    plugin: std::path::PathBuf,
    setup: ControllerSetup,
    log: String,
    address: String,
    wait: Follower,
}

/// The control plane, the group at v1 then v2 deployed, and `wait` following it: everything
/// but the controller.
async fn prepare_one_cluster() -> anyhow::Result<OneCluster> {
    println!(
        "Starting a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager)…"
    );
    let control_plane = ControlPlane::shared().await;
    let client = control_plane.admin_client().await;
    println!(
        "  (kubectl works now: export KUBECONFIG={})",
        control_plane.kubeconfig_path().display()
    );
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .context("creating the demo namespace")?;

    println!(
        "Starting the pod simulator (stands in for the kubelet: pods become Ready 1s after creation)…"
    );
    let options = SimulatorOptions {
        ready_after: Duration::from_secs(1),
    };
    let simulator = PodSimulator::start(client.clone(), NAMESPACE, options).await;

    println!(
        "Creating rollout group `ingester`: {} zones × {REPLICAS} pods, OnDelete, max-unavailable 1 (zone c: 2), \
         a {SOAK_SECONDS}s soak before every zone after the first (baton.dev/soak)…",
        ZONES.len()
    );
    let names: Vec<String> = ZONES
        .iter()
        .map(|zone| format!("ingester-zone-{zone}"))
        .collect();
    for fixture in rollout_group("ingester", &ZONES, REPLICAS) {
        let fixture = match fixture.build().metadata.name.as_deref() {
            Some("ingester-zone-a") => {
                fixture.annotation(SOAK_ANNOTATION, &format!("{SOAK_SECONDS}s"))
            }
            Some("ingester-zone-c") => fixture.annotation("rollout-max-unavailable", "2"),
            _ => fixture,
        };
        fixture.create(&client, NAMESPACE).await;
    }
    for name in &names {
        let ready = format!("{name} has {REPLICAS} ready pods");
        wait_until(Duration::from_secs(120), &ready, || async {
            rollout_state(&client, NAMESPACE, name).await.ready_replicas == REPLICAS
        })
        .await;
    }
    println!(
        "All zones are ready. Deploying version v2 to every zone (OnDelete: no pod changes until \
         baton deletes it, and baton-controller is not running yet)…"
    );
    for name in &names {
        set_version(&client, NAMESPACE, name, "v2").await;
    }

    let kubeconfig = control_plane.kubeconfig_path().display().to_string();
    let plugin = workspace_binary("kubectl-baton").context("building kubectl-baton")?;
    let mut setup = ControllerSetup::new()?;
    setup.log.keep();
    let log = setup.log.path().display().to_string();
    let address = setup.ops_address.clone();
    println!(
        "baton-controller starts once the rollout is followed, below. Its log: {log} (kept after \
         the demo stops); its status page: http://{address}/ui/status (JSON at /api/v1/status)"
    );
    // The rollout as a deploy pipeline follows it: `kubectl baton wait` (progress bars on a
    // terminal, a line per change otherwise), exiting when every zone runs v2 and is ready.
    println!(
        "\nFollowing the rollout as a pipeline would: kubectl baton wait ingester -n {NAMESPACE}\n"
    );
    let mut wait = Follower::start(
        &plugin,
        &kubeconfig,
        &["wait", "ingester", "-n", NAMESPACE, "--timeout", "10m"],
    )?;
    wait.first_line().await;
    Ok(OneCluster {
        control_plane,
        _simulator: simulator,
        kubeconfig,
        plugin,
        setup,
        log,
        address,
        wait,
    })
}

/// Ctrl-C, listened for from the demo's start: a Ctrl-C while nothing waits for it (the demo
/// printing its last lines) is kept for the next wait, not lost, and stops everything the demo
/// started rather than killing it with its control planes left running.
struct Interrupt(tokio::signal::unix::Signal);

impl Interrupt {
    fn listen() -> anyhow::Result<Self> {
        let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("listening for Ctrl-C")?;
        Ok(Self(signal))
    }

    async fn received(&mut self) {
        self.0.recv().await;
    }

    /// `work`'s result, or None if Ctrl-C came first (`work` is then dropped, and with it what
    /// it started).
    async fn during<T>(&mut self, work: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            done = work => Some(done),
            () = self.received() => None,
        }
    }
}

/// `kubectl baton wait` run as a deploy pipeline runs it (progress bars on a terminal, a line
/// per change otherwise), its lines passed through so the demo knows when it printed the first.
struct Follower {
    child: tokio::process::Child,
    forward: tokio::task::JoinHandle<()>,
    /// Sent with its first line; dropped unsent if it ends without one.
    read: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Follower {
    fn start(plugin: &Path, kubeconfig: &str, args: &[&str]) -> anyhow::Result<Self> {
        let mut child = tokio::process::Command::new(plugin)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting kubectl-baton wait")?;
        let (read_tx, read) = tokio::sync::oneshot::channel::<()>();
        let mut lines =
            tokio::io::BufReader::new(child.stdout.take().context("wait's stdout")?).lines();
        let forward = tokio::spawn(async move {
            let mut read = Some(read_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                println!("{line}");
                if let Some(read) = read.take() {
                    let _ = read.send(());
                }
            }
        });
        Ok(Self {
            child,
            forward,
            read: Some(read),
        })
    }

    /// Returns once it read the group: its first line off a terminal; on one (where it draws
    /// bars and prints no such line) after a head start.
    async fn first_line(&mut self) {
        if std::io::stderr().is_terminal() {
            tokio::time::sleep(HEAD_START_ON_A_TERMINAL).await;
        } else if let Some(read) = self.read.take() {
            // (or it ended: the sender is then dropped)
            let _ = read.await;
        }
    }

    /// Its exit status, once every line it printed is shown; it says itself why it failed.
    async fn finished(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let status = self.child.wait().await?;
        let _ = (&mut self.forward).await;
        if !status.success() {
            println!("\nkubectl baton wait ended with {status}");
        }
        Ok(status)
    }
}

/// Runs a `kubectl baton` command for the reader to see; a failure is said, not fatal.
async fn show(plugin: &Path, kubeconfig: &str, args: &[&str]) -> anyhow::Result<()> {
    let status = tokio::process::Command::new(plugin)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .status()
        .await
        .with_context(|| format!("running kubectl-baton {}", args.join(" ")))?;
    if !status.success() {
        println!("kubectl baton {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Stops the controller (its log is kept) and says where its log is; the control plane stops
/// when the process ends.
fn stop(controller: Controller, log: &str) {
    println!("\nStopping baton-controller and the control plane…");
    drop(controller);
    println!("baton-controller's log is kept: {log}");
}

fn instructions(kubeconfig: &str, plugin: &str, address: &str, log: &str) -> String {
    format!(
        "\nThe rollout is complete. Poke it from another terminal:\n\n\
         \x20 export KUBECONFIG={kubeconfig}\n\
         \x20 alias kubectl-baton={plugin}   # or put it on PATH as kubectl-baton: `kubectl baton …`\n\
         \x20 kubectl-baton status -n {NAMESPACE}\n\
         \x20 kubectl -n {NAMESPACE} set image statefulset/ingester-zone-a app=baton.test/app:v3   # a new rollout of zone a\n\
         \x20 kubectl-baton plan ingester -n {NAMESPACE}                     # what baton does next, and why\n\
         \x20 kubectl-baton pause ingester-zone-b -n {NAMESPACE}             # and resume\n\
         \x20 kubectl-baton wait ingester -n {NAMESPACE}\n\
         \x20 kubectl -n {NAMESPACE} annotate statefulset ingester-zone-b baton.dev/halted=stopped-by-hand   # halt the group\n\
         \x20 kubectl -n {NAMESPACE} get events --sort-by=.eventTime\n\n\
         The controller's status page: http://{address}/ui/status (JSON at /api/v1/status)\n\
         Its log: {log} (kept after the demo stops)\n\n\
         Ctrl-C stops everything.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_command_line_chooses_one_cluster_or_three_and_refuses_the_rest_saying_why() {
        assert_eq!(demo_from(&args("")), Ok(Demo::OneCluster));
        assert_eq!(demo_from(&args("--clusters 1")), Ok(Demo::OneCluster));
        assert_eq!(demo_from(&args("--clusters 3")), Ok(Demo::ThreeClusters));
        assert_eq!(demo_from(&args("--clusters=3")), Ok(Demo::ThreeClusters));
        let two = demo_from(&args("--clusters 2")).unwrap_err();
        assert!(
            two.contains("--clusters \"2\"") && two.contains(USAGE),
            "{two}"
        );
        let missing = demo_from(&args("--clusters")).unwrap_err();
        assert!(missing.contains("needs a count"), "{missing}");
        let other = demo_from(&args("--zones 3")).unwrap_err();
        assert!(
            other.contains("unexpected arguments") && other.contains(USAGE),
            "{other}"
        );
    }
}
