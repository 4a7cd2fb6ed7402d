//! The live demo: a local control plane, the pod simulator, baton-controller, a three-zone
//! rollout group, and a rollout followed zone by zone with `kubectl baton wait`, as a deploy
//! pipeline follows one. Keeps running until Ctrl-C, so you can poke it with kubectl and
//! `kubectl baton`, and look at the status page.

use std::time::Duration;

use anyhow::Context;
use baton_e2e::controller_support::{Controller, rollout_state};
use baton_e2e::fixtures::{rollout_group, set_version};
use baton_e2e::process::workspace_binary;
use baton_e2e::{ControlPlane, PodSimulator, SimulatorOptions, wait_until};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

const NAMESPACE: &str = "baton-demo";
const ZONES: [&str; 3] = ["a", "b", "c"];
const REPLICAS: i32 = 5;
/// The soak between zones (docs/gates.md), on zone a: long enough to watch it count down.
const SOAK_SECONDS: i64 = 10;
/// baton's gate keys (docs/gates.md).
const SOAK_ANNOTATION: &str = "baton.dev/soak";

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
    println!("Starting baton-controller…");
    let controller =
        Controller::start(control_plane, NAMESPACE, &[("BATON_LOG__LEVEL", "info")]).await;

    println!(
        "Creating rollout group `ingester`: {} zones × {REPLICAS} pods, OnDelete, max-unavailable 1 (zone c: 2), \
         a {SOAK_SECONDS}s soak between zones (baton.dev/soak)…",
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
        "All zones are ready. Deploying version v2 to every zone: baton now rolls them one at a time.\n"
    );
    for name in &names {
        set_version(&client, NAMESPACE, name, "v2").await;
    }

    let kubeconfig = control_plane.kubeconfig_path().display().to_string();
    println!(
        "In a browser: http://{}/ui/status (the controller's status page; JSON at /api/v1/status)\n",
        controller.ops_address
    );
    // The rollout as a deploy pipeline follows it: `kubectl baton wait` (progress bars on a
    // terminal, a line per change otherwise), exiting when every zone runs v2 and is ready.
    println!("Following it as a pipeline would: kubectl baton wait ingester -n {NAMESPACE}\n");
    let plugin = workspace_binary("kubectl-baton").context("building kubectl-baton")?;
    let mut wait = tokio::process::Command::new(&plugin)
        .args(["wait", "ingester", "-n", NAMESPACE, "--timeout", "10m"])
        .env("KUBECONFIG", &kubeconfig)
        .kill_on_drop(true)
        .spawn()
        .context("starting kubectl-baton wait")?;
    tokio::select! {
        status = wait.wait() => {
            let status = status.context("waiting for kubectl-baton wait")?;
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
                println!("{}", instructions(&kubeconfig, &plugin.display().to_string()));
            } else {
                println!("\nkubectl baton wait ended with {status}: the rollout did not complete.");
            }
            tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        }
        _ = tokio::signal::ctrl_c() => {}
    }
    println!("\nStopping baton-controller and the control plane…");
    drop(controller);
    Ok(())
}

fn instructions(kubeconfig: &str, plugin: &str) -> String {
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
         Ctrl-C stops everything.\n"
    )
}
