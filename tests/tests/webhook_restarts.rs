//! Webhook replicas restarted under load fail no admission. Three baton-webhook replicas behind
//! haproxy (the stand-in for their Service: TCP passthrough, `/ready` checked every 200 ms), the
//! API server calling them with `failurePolicy: Fail`, four writers updating a StatefulSet
//! through the API server, and the replicas restarted one after another about every 2.5 s, as
//! a rolling update does. Every failed update would be a user's `kubectl scale` or deploy that errors.
//!
//! `E2E_WEBHOOK_SHUTDOWN_DELAY` overrides the replicas' `webhook.shutdown_delay` (default here:
//! 2s, enough for haproxy's two failed checks); docs/benchmarks.md compares it with `0s`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::load_balancer::{Backend, LoadBalancer};
use baton_e2e::webhook_support::{
    TestTls, WebhookConfigurations, WebhookReplica, wait_for_webhooks,
};
use baton_e2e::{ControlPlane, TestNamespace};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

const REPLICAS: usize = 3;
const WRITERS: usize = 4;
const RESTARTS: usize = 12;
const RESTART_EVERY: Duration = Duration::from_millis(2500);
const TARGET: &str = "written-under-restarts";

/// What the writers did: successful updates and the message of every failed one.
#[derive(Debug, Default)]
struct Tally {
    written: AtomicUsize,
    failures: Mutex<Vec<String>>,
}

/// Updates the target StatefulSet (an annotation of its own: merge patches never conflict)
/// until `stop`; each update is an UPDATE admission both webhooks judge.
async fn write(
    statefulsets: Api<StatefulSet>,
    writer: usize,
    tally: Arc<Tally>,
    stop: CancellationToken,
) {
    let mut sequence = 0_u64;
    while !stop.is_cancelled() {
        sequence += 1;
        let patch = json!({"metadata": {"annotations": {format!("baton.test/writer-{writer}"): sequence.to_string()}}});
        match statefulsets
            .patch(TARGET, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                tally.written.fetch_add(1, Ordering::SeqCst);
            }
            Err(error) => tally.failures.lock().await.push(error.to_string()),
        }
    }
}

#[tokio::test]
async fn rolling_restarts_of_the_webhook_replicas_under_load_fail_no_admission() {
    // Given three webhook replicas behind haproxy, the API server calling them through it
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "wh-restarts").await;
    let tls = TestTls::generate().unwrap();
    let delay = std::env::var("E2E_WEBHOOK_SHUTDOWN_DELAY").unwrap_or_else(|_| "2s".to_owned());
    let env = [
        ("BATON_WEBHOOK__SHUTDOWN_DELAY", delay.as_str()),
        ("BATON_LOG__LEVEL", "info"),
    ];
    let mut replicas = futures::future::try_join_all(
        (0..REPLICAS)
            .map(|_| WebhookReplica::start_with(control_plane, &tls, namespace.name(), &env)),
    )
    .await
    .unwrap();
    let backends: Vec<Backend> = replicas
        .iter()
        .map(|replica| Backend {
            port: replica.port,
            check_port: replica.ops_port,
        })
        .collect();
    let balancer = LoadBalancer::start(&backends).await.unwrap();
    let _configurations = WebhookConfigurations::register_at(
        control_plane,
        namespace.name(),
        &tls,
        &balancer.base_url(),
    )
    .await
    .unwrap();
    wait_for_webhooks(&namespace).await;
    StatefulSetFixture::new(TARGET)
        .replicas(1)
        .create(&namespace.client(), namespace.name())
        .await;

    // And four writers updating a StatefulSet through the API server
    let tally = Arc::new(Tally::default());
    let stop = CancellationToken::new();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            tokio::spawn(write(
                namespace.api::<StatefulSet>(),
                writer,
                tally.clone(),
                stop.clone(),
            ))
        })
        .collect();

    // When the replicas are restarted one after another, one every 2.5 s at most, each once
    // back in the rotation before the next goes (a schedule of the load, not a wait: with a
    // zero shutdown delay a restart takes well under 2.5 s)
    let started = Instant::now();
    let mut schedule = tokio::time::interval(RESTART_EVERY);
    schedule.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for restart in 0..RESTARTS {
        schedule.tick().await;
        let index = restart % REPLICAS;
        let written_before = tally.written.load(Ordering::SeqCst);
        let code = replicas[index]
            .restart(Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(code, Some(0), "replica {index} stops cleanly on SIGTERM");
        assert!(
            tally.written.load(Ordering::SeqCst) > written_before,
            "restart {restart} happened under load: no update was written meanwhile"
        );
        balancer.wait_for(index, "UP").await;
    }
    let elapsed = started.elapsed();
    stop.cancel();
    for writer in writers {
        writer.await.unwrap();
    }

    // Then no update failed
    let written = tally.written.load(Ordering::SeqCst);
    let failures = tally.failures.lock().await;
    println!(
        "webhook.shutdown_delay {delay}: {RESTARTS} restarts in {elapsed:.1?}, {written} updates written, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} updates failed during {RESTARTS} restarts; the first ones:\n{}",
        failures.len(),
        written + failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(written >= 100, "too little load to tell: {written} updates");
}
