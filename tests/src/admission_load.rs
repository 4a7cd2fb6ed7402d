//! A steady load of admissions through the API server to baton's webhooks, kept running while
//! the install itself is hurt (its leader killed, its node drained, baton upgraded). Every
//! request is one the API server must ask baton about, and baton's webhooks fail closed
//! (`failurePolicy: Fail`): a webhook the API server cannot reach shows here as a failed
//! request, never as a silent allow.
//!
//! Two requests alternate, both dry runs (nothing changes): a downscale of a StatefulSet
//! labelled `grafana.com/no-downscale` (baton refuses it: the answer that proves baton was
//! asked) and an eviction of a pod no budget covers (baton allows it).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::webhook_support::replicas_patch;

/// How often the load asks (each request alternates between the two kinds).
const PERIOD: Duration = Duration::from_millis(100);
/// Longer than the webhooks' own timeout (10s): a request the API server gives up on is
/// answered by it with an error, counted as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// What the load saw so far.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Requests baton answered as it should (the downscale refused by no-downscale, the
    /// eviction allowed).
    pub answered: u64,
    /// Every other outcome: when (since the load started) and what the client got.
    pub failed: Vec<(Duration, String)>,
}

impl Tally {
    /// What happened after `earlier` (a snapshot of the same load).
    pub fn since(&self, earlier: &Tally) -> Tally {
        Tally {
            answered: self.answered - earlier.answered,
            failed: self.failed[earlier.failed.len()..].to_vec(),
        }
    }
}

/// The running load; stopped (and its task awaited) by [`AdmissionLoad::stop`].
pub struct AdmissionLoad {
    tally: Arc<Mutex<Tally>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl AdmissionLoad {
    /// Starts asking, with `client` (one without kube's retries: a retried failure would be
    /// hidden), about the no-downscale StatefulSet `guarded` and the pod `unbudgeted` of
    /// `namespace`.
    pub fn start(client: kube::Client, namespace: &str, guarded: &str, unbudgeted: &str) -> Self {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let stop = CancellationToken::new();
        let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), namespace);
        let eviction = eviction_request(namespace, unbudgeted);
        let (guarded, counted, stopped) = (guarded.to_owned(), tally.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut ticks = tokio::time::interval(PERIOD);
            for turn in 0u64.. {
                tokio::select! {
                    _ = stopped.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                let outcome = if turn % 2 == 0 {
                    downscale_refused(&statefulsets, &guarded).await
                } else {
                    eviction_allowed(&client, eviction.clone()).await
                };
                let mut tally = counted.lock().unwrap();
                match outcome {
                    Ok(()) => tally.answered += 1,
                    Err(what) => tally.failed.push((started.elapsed(), what)),
                }
            }
        });
        Self { tally, stop, task }
    }

    /// What the load saw until now.
    pub fn tally(&self) -> Tally {
        self.tally.lock().unwrap().clone()
    }

    /// Stops asking; returns everything the load saw.
    pub async fn stop(self) -> Tally {
        self.stop.cancel();
        self.task.await.expect("the admission load panicked");
        self.tally.lock().unwrap().clone()
    }
}

/// A dry-run downscale of `name` to 0, which baton's no-downscale webhook must refuse.
async fn downscale_refused(statefulsets: &Api<StatefulSet>, name: &str) -> Result<(), String> {
    let (params, patch) = replicas_patch(0, true);
    match tokio::time::timeout(
        REQUEST_TIMEOUT,
        statefulsets.patch_scale(name, &params, &patch),
    )
    .await
    {
        Err(_) => Err(format!("no answer in {REQUEST_TIMEOUT:?}")),
        Ok(Ok(_)) => Err("the downscale of a no-downscale StatefulSet was allowed".to_owned()),
        Ok(Err(kube::Error::Api(status)))
            if status.message.contains("no-downscale.baton.grafana.com")
                && status.message.contains("is not allowed because") =>
        {
            Ok(())
        }
        Ok(Err(error)) => Err(error.to_string()),
    }
}

fn eviction_request(namespace: &str, pod: &str) -> http::Request<Vec<u8>> {
    let body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
        "deleteOptions": {"dryRun": ["All"]},
    });
    http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&body).expect("an eviction serializes"))
    .expect("an eviction request")
}

/// A dry-run eviction of a pod no budget covers, which baton's eviction webhook allows.
async fn eviction_allowed(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
) -> Result<(), String> {
    match tokio::time::timeout(
        REQUEST_TIMEOUT,
        client.request::<serde_json::Value>(request),
    )
    .await
    {
        Err(_) => Err(format!("no answer in {REQUEST_TIMEOUT:?}")),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
    }
}
