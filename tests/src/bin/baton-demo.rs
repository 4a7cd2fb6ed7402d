//! The live demo: a local control plane, the pod simulator, baton-controller, a three-zone
//! rollout group, and a rollout to watch zone by zone. Keeps running (and showing the group)
//! until Ctrl-C, so you can poke it with kubectl.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use baton_e2e::controller_support::{Controller, RolloutState, rollout_state};
use baton_e2e::fixtures::{rollout_group, set_version};
use baton_e2e::{ControlPlane, PodSimulator, SimulatorOptions};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};

const NAMESPACE: &str = "baton-demo";
const ZONES: [&str; 3] = ["a", "b", "c"];
const REPLICAS: i32 = 5;
/// The soak between zones (docs/gates.md), on zone a: long enough to watch it count down.
const SOAK_SECONDS: i64 = 10;
/// baton's gate keys (docs/gates.md).
const SOAK_ANNOTATION: &str = "baton.dev/soak";
const STATE_ANNOTATION: &str = "baton.dev/gate-state";

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
    loop {
        let states = states(&client, &names).await;
        if states.iter().all(|state| state.ready_replicas == REPLICAS) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "All zones are ready. Deploying version v2 to every zone: baton now rolls them one at a time.\n"
    );
    for name in &names {
        set_version(&client, NAMESPACE, name, "v2").await;
    }

    let kubeconfig = control_plane.kubeconfig_path().display().to_string();
    let status_page = format!(
        "\nIn a browser: http://{}/ui/status (the controller's status page; JSON at /api/v1/status)\n",
        controller.ops_address
    );
    let terminal = std::io::stdout().is_terminal();
    let mut announced = false;
    let mut last_frame = String::new();
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        let states = states(&client, &names).await;
        let complete = states.iter().all(RolloutState::is_complete);
        let gates = gates(&client, &names).await;
        let mut frame = render(&names, &states, &gates, &events(&client).await);
        frame.push_str(&status_page);
        if complete {
            frame.push_str(&instructions(&kubeconfig));
        }
        if frame == last_frame {
            continue;
        }
        if terminal {
            print!("\x1b[2J\x1b[H{frame}");
        } else if complete && !announced {
            println!("{frame}");
        }
        if complete {
            announced = true;
        }
        last_frame = frame;
    }
    println!("\nStopping baton-controller and the control plane…");
    drop(controller);
    Ok(())
}

async fn states(client: &kube::Client, names: &[String]) -> Vec<RolloutState> {
    let mut states = Vec::new();
    for name in names {
        states.push(rollout_state(client, NAMESPACE, name).await);
    }
    states
}

/// What the gate stored for a zone (baton.dev/gate-state), for its current update revision.
#[derive(Debug, Default)]
struct Gate {
    soak_started_at: Option<jiff::Timestamp>,
    soak_after: Vec<String>,
    cleared_at: Option<jiff::Timestamp>,
}

async fn gates(client: &kube::Client, names: &[String]) -> Vec<Option<Gate>> {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NAMESPACE);
    let mut gates = Vec::new();
    for name in names {
        let statefulset = api.get(name).await.ok();
        let gate = statefulset.and_then(|statefulset| {
            let revision = statefulset.status?.update_revision?;
            let raw = statefulset.metadata.annotations?.remove(STATE_ANNOTATION)?;
            let state: serde_json::Value = serde_json::from_str(&raw).ok()?;
            if state["revision"].as_str() != Some(revision.as_str()) {
                return None;
            }
            let time = |field: &str| state[field].as_str()?.parse().ok();
            Some(Gate {
                soak_started_at: time("soakStartedAt"),
                soak_after: state["soakAfter"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|zone| zone.as_str().map(str::to_owned))
                    .collect(),
                cleared_at: time("clearedAt"),
            })
        });
        gates.push(gate);
    }
    gates
}

/// What the gate says about a zone: a soak counting down, or the gate it passed.
fn gate_status(gate: Option<&Gate>) -> Option<String> {
    let gate = gate?;
    let started = gate.soak_started_at?;
    match gate.cleared_at {
        None => {
            let waited = jiff::Timestamp::now().duration_since(started).as_secs();
            Some(format!(
                "soaking after {}: starts in {}s",
                gate.soak_after.join(", "),
                (SOAK_SECONDS - waited).max(0)
            ))
        }
        Some(cleared) => Some(format!(
            "gate passed after a {}s soak",
            cleared.duration_since(started).as_secs()
        )),
    }
}

fn render(
    names: &[String],
    states: &[RolloutState],
    gates: &[Option<Gate>],
    events: &[String],
) -> String {
    let mut out =
        String::from("baton demo: rollout group `ingester` (one StatefulSet per zone)\n\n");
    for ((name, state), gate) in names.iter().zip(states).zip(gates) {
        let updated = state.updated();
        let total = state.replicas.max(0) as usize;
        let bar: String = (0..total)
            .map(|i| if i < updated { '█' } else { '░' })
            .collect();
        let gate = gate_status(gate.as_ref());
        let status = match (state.is_complete(), updated, gate) {
            (true, _, Some(gate)) => format!("done ({gate})"),
            (true, _, None) => "done".to_owned(),
            (false, 0, Some(gate)) => gate,
            (false, 0, None) => "waiting for its turn".to_owned(),
            (false, _, Some(gate)) => format!("rolling ({gate})"),
            (false, _, None) => "rolling".to_owned(),
        };
        out.push_str(&format!(
            "  {name:<18} {bar}  {updated}/{total} updated, {}/{total} ready  {status}\n",
            state.ready_replicas
        ));
    }
    out.push_str("\nWhat baton did and why it waits (latest Events):\n");
    for event in events {
        out.push_str(&format!("  {event}\n"));
    }
    out
}

/// The newest Events of baton-controller, newest last.
async fn events(client: &kube::Client) -> Vec<String> {
    let mut events: Vec<Event> = Api::<Event>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|event| event.reporting_controller.as_deref() == Some("baton-controller"))
        .collect();
    events.sort_by_key(|event| event.event_time.as_ref().map(|time| time.0));
    events
        .iter()
        .rev()
        .take(8)
        .rev()
        .map(|event| {
            let regarding = event
                .regarding
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default();
            format!(
                "{:<18} {:<18} {}",
                regarding,
                event.reason.clone().unwrap_or_default(),
                event.note.clone().unwrap_or_default()
            )
        })
        .collect()
}

fn instructions(kubeconfig: &str) -> String {
    format!(
        "\nThe rollout is complete. Poke it from another terminal:\n\n\
         \x20 export KUBECONFIG={kubeconfig}\n\
         \x20 kubectl -n {NAMESPACE} get statefulsets,pods\n\
         \x20 kubectl -n {NAMESPACE} set image statefulset/ingester-zone-a app=baton.test/app:v3   # a new rollout of zone a\n\
         \x20 kubectl -n {NAMESPACE} annotate statefulset ingester-zone-b grafana.com/rollout-paused=true\n\
         \x20 kubectl -n {NAMESPACE} annotate statefulset ingester-zone-b baton.dev/halted=stopped-by-hand   # halt the group\n\
         \x20 kubectl -n {NAMESPACE} annotate statefulset ingester-zone-b baton.dev/halted-                  # and resume it\n\
         \x20 kubectl -n {NAMESPACE} get events --sort-by=.eventTime\n\n\
         This view keeps updating. Ctrl-C stops everything.\n"
    )
}
