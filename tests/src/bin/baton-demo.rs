//! The live demo: a local control plane, the pod simulator, baton-controller, a three-zone
//! rollout group, and a rollout followed zone by zone with `kubectl baton wait`, as a deploy
//! pipeline follows one. Keeps running until Ctrl-C, so you can poke it with kubectl and
//! `kubectl baton`, and look at the status page.
//!
//! The new version is deployed before baton-controller starts (OnDelete: nothing moves until
//! baton deletes a pod), and the controller starts only once `wait` follows the group: the
//! reader sees the first zone roll from its first pod, not a group already half done.
//! scripts/demo.sh builds the binaries first, showing cargo's progress.

use std::io::IsTerminal;
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
const SOAK_SECONDS: i64 = 10;
/// baton's gate keys (docs/gates.md).
const SOAK_ANNOTATION: &str = "baton.dev/soak";
/// On a terminal `wait` draws progress bars and prints no line to say it read the group: it is
/// given this long to do so before the controller starts (its first read takes well under a
/// second; the controller's first step, after its lease and caches, takes longer still).
const HEAD_START_ON_A_TERMINAL: Duration = Duration::from_secs(1);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    baton_shared::crypto::install_default_provider();
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
    let _simulator = PodSimulator::start(client.clone(), NAMESPACE, options).await;

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
    let mut wait = tokio::process::Command::new(&plugin)
        .args(["wait", "ingester", "-n", NAMESPACE, "--timeout", "10m"])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting kubectl-baton wait")?;
    // Its lines pass through here, so the demo knows when it printed the first.
    let (read_tx, read_rx) = tokio::sync::oneshot::channel::<()>();
    let mut lines = tokio::io::BufReader::new(wait.stdout.take().context("wait's stdout")?).lines();
    let forward = tokio::spawn(async move {
        let mut read = Some(read_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            println!("{line}");
            if let Some(read) = read.take() {
                let _ = read.send(());
            }
        }
    });
    if std::io::stderr().is_terminal() {
        tokio::time::sleep(HEAD_START_ON_A_TERMINAL).await;
    } else {
        // Its first lines say it read the group (or it ended: the sender is then dropped).
        let _ = read_rx.await;
    }

    let mut controller = Controller::start_unready(
        control_plane,
        NAMESPACE,
        &[("BATON_LOG__LEVEL", "info")],
        setup,
    )
    .await;
    tokio::select! {
        () = controller.wait_ready() => {}
        _ = tokio::signal::ctrl_c() => {
            stop(controller, &log);
            return Ok(());
        }
    }

    tokio::select! {
        status = wait.wait() => {
            let status = status.context("waiting for kubectl-baton wait")?;
            // Every line it printed is shown before what follows.
            let _ = forward.await;
            if status.success() {
                let status = tokio::process::Command::new(&plugin)
                    .args(["status", "ingester", "-n", NAMESPACE])
                    .env("KUBECONFIG", &kubeconfig)
                    .status()
                    .await
                    .context("running kubectl-baton status")?;
                if !status.success() {
                    println!("kubectl baton status failed ({status})");
                }
                println!(
                    "{}",
                    instructions(&kubeconfig, &plugin.display().to_string(), &address, &log)
                );
            } else {
                println!(
                    "\nkubectl baton wait ended with {status}: the rollout did not complete. \
                     baton-controller's log: {log}"
                );
            }
            tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        }
        _ = tokio::signal::ctrl_c() => {}
    }
    stop(controller, &log);
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
