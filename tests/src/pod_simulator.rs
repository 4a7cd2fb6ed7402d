//! Stands in for the kubelet: there is none in the test control plane, so pods would stay
//! Pending forever. Watches the pods of one namespace and, after a delay, marks each new pod
//! Running and Ready with a loopback IP of its own (`127.x.y.z`, so a test server can listen
//! "on the pod"). Like a kubelet it also finishes the deletion of a terminating pod, which
//! matters when a deleting client died mid-request: the API server then leaves the pod with a
//! deletionTimestamp and nothing else would ever remove it. Tests can hold pods NotReady, make
//! a pod or a whole version crash-loop (Ready False, its container waiting in
//! `CrashLoopBackOff`, as a kubelet reports it), and read a timeline of what every pod did, as
//! seen through the API server's watch.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_core::pods::PodReadiness;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::task::JoinSet;

/// How the simulated kubelet behaves.
#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    /// Time from a pod's creation to Running + Ready.
    pub ready_after: Duration,
}

impl Default for SimulatorOptions {
    fn default() -> Self {
        Self {
            ready_after: Duration::from_millis(200),
        }
    }
}

/// What happened to a pod, in the order the watch delivered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodEvent {
    Created,
    Ready,
    NotReady,
    Terminating,
    Deleted,
}

/// One entry of the timeline.
#[derive(Debug, Clone)]
pub struct PodTransition {
    pub at: Instant,
    pub pod: String,
    pub uid: String,
    /// Name of the StatefulSet that controls the pod, if any.
    pub statefulset: Option<String>,
    /// The pod's `controller-revision-hash`.
    pub revision: Option<String>,
    pub event: PodEvent,
}

#[derive(Debug)]
struct Shared {
    api: Api<Pod>,
    options: SimulatorOptions,
    /// False when real kubelets run the pods: only the timeline is recorded.
    plays_kubelet: bool,
    held: Mutex<HashSet<String>>,
    /// Pod names whose next incarnations stay Pending, with the uid of the one left alone.
    held_replacements: Mutex<HashMap<String, String>>,
    /// Uids of pods that crash-loop (that one pod only, not its replacement).
    crash_looping: Mutex<HashSet<String>>,
    /// Image tags whose pods crash-loop: a broken version.
    broken_versions: Mutex<HashSet<String>>,
    timeline: Mutex<Vec<PodTransition>>,
    /// Each pod's readiness as last recorded, by uid: whichever sees a change first, the
    /// simulator's own write or its watch, records it, once.
    readiness: Mutex<HashMap<String, bool>>,
    ips: Mutex<HashMap<String, Ipv4Addr>>,
}

/// A running simulator; stops when dropped.
#[derive(Debug)]
pub struct PodSimulator {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl PodSimulator {
    /// Starts watching the pods of `namespace`.
    /// The simulator of a test namespace, with the default options.
    pub async fn for_namespace(namespace: &crate::TestNamespace) -> Self {
        Self::start(
            namespace.client(),
            namespace.name(),
            SimulatorOptions::default(),
        )
        .await
    }

    pub async fn start(client: kube::Client, namespace: &str, options: SimulatorOptions) -> Self {
        Self::spawn(client, namespace, options, true)
    }

    /// Records the timeline of the pods of `namespace` and does nothing else: for pods that real
    /// kubelets run (`crate::real_nodes`), so their scenarios check the same timeline.
    pub fn observe(client: kube::Client, namespace: &str) -> Self {
        Self::spawn(client, namespace, SimulatorOptions::default(), false)
    }

    fn spawn(
        client: kube::Client,
        namespace: &str,
        options: SimulatorOptions,
        plays_kubelet: bool,
    ) -> Self {
        let shared = Arc::new(Shared {
            api: Api::namespaced(client, namespace),
            options,
            plays_kubelet,
            held: Mutex::default(),
            held_replacements: Mutex::default(),
            crash_looping: Mutex::default(),
            broken_versions: Mutex::default(),
            timeline: Mutex::default(),
            readiness: Mutex::default(),
            ips: Mutex::default(),
        });
        let task = tokio::spawn(run(shared.clone()));
        Self { shared, task }
    }

    /// The loopback IP this pod gets (the same for every incarnation of a pod name).
    pub fn pod_ip(&self, pod: &str) -> Ipv4Addr {
        self.shared.ip_for(pod)
    }

    /// The loopback IP of any pod by name, for a caller that outlives a borrow of the simulator
    /// (a proxy resolving pods' DNS names): the same addresses as [`PodSimulator::pod_ip`].
    pub fn pod_addresses(&self) -> impl Fn(&str) -> Ipv4Addr + Send + Sync + 'static {
        let shared = self.shared.clone();
        move |pod| shared.ip_for(pod)
    }

    /// Keeps `pod` (and any pod recreated with its name) NotReady until [`release`]d; a pod
    /// that is Ready now goes NotReady at once.
    ///
    /// [`release`]: PodSimulator::release
    pub async fn hold_not_ready(&self, pod: &str) {
        self.shared.held.lock().unwrap().insert(pod.to_owned());
        if let Ok(current) = self.shared.api.get(pod).await
            && PodReadiness::of(&current).ready
        {
            self.shared.set_ready(&current, false).await;
        }
    }

    /// Keeps every pod that replaces the one now named `pod` (a new pod of that name) Pending
    /// until [`release`]d, as a slow start does; the pod itself is left as it is.
    ///
    /// [`release`]: PodSimulator::release
    pub async fn hold_replacement(&self, pod: &str) {
        let current = self
            .shared
            .api
            .get(pod)
            .await
            .unwrap_or_else(|error| panic!("pod simulator: cannot read pod {pod}: {error}"));
        let uid = current.metadata.uid.unwrap_or_default();
        self.shared
            .held_replacements
            .lock()
            .unwrap()
            .insert(pod.to_owned(), uid);
    }

    /// Lets `pod` become Ready again (after the usual delay).
    pub async fn release(&self, pod: &str) {
        self.shared.held.lock().unwrap().remove(pod);
        self.shared.held_replacements.lock().unwrap().remove(pod);
        if let Ok(current) = self.shared.api.get(pod).await
            && !PodReadiness::of(&current).ready
            && current.metadata.deletion_timestamp.is_none()
        {
            tokio::time::sleep(self.shared.options.ready_after).await;
            self.shared.set_ready(&current, true).await;
        }
    }

    /// Makes the pod now named `pod` crash-loop from now on (its replacement, a new pod of the
    /// same name, is healthy): Ready False, its containers waiting in `CrashLoopBackOff`.
    pub async fn crash_loop(&self, pod: &str) {
        let current = self
            .shared
            .api
            .get(pod)
            .await
            .unwrap_or_else(|error| panic!("pod simulator: cannot read pod {pod}: {error}"));
        let uid = current.metadata.uid.clone().unwrap_or_default();
        self.shared.crash_looping.lock().unwrap().insert(uid);
        self.shared.set_health(&current, Health::CrashLooping).await;
    }

    /// Every pod running the image tag `version` (a fixture's version) crash-loops: a broken
    /// release. Pods created before are affected on their next status update.
    pub fn break_version(&self, version: &str) {
        self.shared
            .broken_versions
            .lock()
            .unwrap()
            .insert(version.to_owned());
    }

    /// Every transition seen so far.
    pub fn timeline(&self) -> Vec<PodTransition> {
        self.shared.timeline.lock().unwrap().clone()
    }
}

impl Drop for PodSimulator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Per pod uid: what the simulator last saw.
#[derive(Debug)]
struct Seen {
    pod: Pod,
    ready: bool,
    terminating: bool,
}

/// How often pods that should be Ready but are not are looked at again: like a kubelet's sync,
/// this catches a status write that failed or an event that was missed.
const RESYNC: Duration = Duration::from_millis(500);

async fn run(shared: Arc<Shared>) {
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut in_flight: HashSet<String> = HashSet::new();
    let mut becoming_ready: JoinSet<String> = JoinSet::new();
    // Backoff: while the API server is down (an outage scenario) errors come at once, and
    // retrying without a pause would spin. The controller's (at most 2 s apart), not kube's
    // default (up to 30 s): a kubelet that stays away long after an outage would stall rollouts.
    let mut events = watcher(shared.api.clone(), watcher::Config::default())
        .backoff(baton_shared::kube_client::watch_backoff())
        .boxed();
    let mut resync = tokio::time::interval(RESYNC);
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                    if let Some(uid) = observe(&shared, &mut seen, pod) {
                        act(&shared, &seen, &mut in_flight, &mut becoming_ready, &uid);
                    }
                }
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(uid) = pod.metadata.uid.clone() {
                        seen.remove(&uid);
                        shared.readiness.lock().unwrap().remove(&uid);
                        shared.record(&pod, PodEvent::Deleted);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => tracing::debug!(%error, "pod simulator watch error; retrying"),
                None => return,
            },
            Some(done) = becoming_ready.join_next(), if !becoming_ready.is_empty() => {
                if let Ok(uid) = done {
                    in_flight.remove(&uid);
                }
            }
            _ = resync.tick() => {
                let uids: Vec<String> = seen.keys().cloned().collect();
                for uid in uids {
                    act(&shared, &seen, &mut in_flight, &mut becoming_ready, &uid);
                }
            }
        }
    }
}

/// Records what changed about `pod`; returns its uid.
fn observe(shared: &Arc<Shared>, seen: &mut HashMap<String, Seen>, pod: Pod) -> Option<String> {
    let uid = pod.metadata.uid.clone()?;
    let state = seen.entry(uid.clone()).or_insert_with(|| {
        shared.record(&pod, PodEvent::Created);
        Seen {
            pod: pod.clone(),
            ready: false,
            terminating: false,
        }
    });
    let ready = PodReadiness::of(&pod).ready;
    if ready != state.ready {
        state.ready = ready;
        shared.record_readiness(&pod, ready);
    }
    if pod.metadata.deletion_timestamp.is_some() && !state.terminating {
        state.terminating = true;
        shared.record(&pod, PodEvent::Terminating);
    }
    state.pod = pod;
    Some(uid)
}

/// What a kubelet would do next for the pod, unless something is already on its way: remove
/// it if it is terminating, else make it Ready after the configured delay (unless held).
fn act(
    shared: &Arc<Shared>,
    seen: &HashMap<String, Seen>,
    in_flight: &mut HashSet<String>,
    tasks: &mut JoinSet<String>,
    uid: &str,
) {
    let Some(state) = seen.get(uid) else {
        return;
    };
    if !shared.plays_kubelet || in_flight.contains(uid) {
        return;
    }
    let name = state.pod.metadata.name.clone().unwrap_or_default();
    let shared = shared.clone();
    let pod = state.pod.clone();
    let uid = uid.to_owned();
    if state.terminating {
        in_flight.insert(uid.clone());
        tasks.spawn(async move {
            shared.remove(&pod).await;
            uid
        });
        return;
    }
    if shared.crash_loops(&pod) {
        if is_crash_looping(&pod) {
            return;
        }
        in_flight.insert(uid.clone());
        tasks.spawn(async move {
            tokio::time::sleep(shared.options.ready_after).await;
            shared.set_health(&pod, Health::CrashLooping).await;
            uid
        });
        return;
    }
    if state.ready || shared.holds(&name, &uid) {
        return;
    }
    in_flight.insert(uid.clone());
    tasks.spawn(async move {
        tokio::time::sleep(shared.options.ready_after).await;
        if !shared.holds(&name, &uid) {
            shared.set_ready(&pod, true).await;
        }
        uid
    });
}

/// What the simulated kubelet reports about a pod's containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Ready,
    NotReady,
    /// Running, restarting its container over and over: Ready False, waiting in
    /// `CrashLoopBackOff` with the last run terminated in `Error`.
    CrashLooping,
}

fn is_crash_looping(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .is_some_and(|containers| {
            containers.iter().any(|container| {
                container
                    .state
                    .as_ref()
                    .and_then(|state| state.waiting.as_ref())
                    .and_then(|waiting| waiting.reason.as_deref())
                    == Some("CrashLoopBackOff")
            })
        })
}

static NEXT_IP: AtomicU32 = AtomicU32::new(0);

impl Shared {
    fn ip_for(&self, pod: &str) -> Ipv4Addr {
        *self
            .ips
            .lock()
            .unwrap()
            .entry(pod.to_owned())
            .or_insert_with(|| {
                // The second octet comes from the process id so that test processes running at the
                // same time do not hand out the same addresses.
                let n = NEXT_IP.fetch_add(1, Ordering::Relaxed);
                let process = (std::process::id() % 240) as u8 + 10;
                Ipv4Addr::new(127, process, (n / 250) as u8, (n % 250) as u8 + 1)
            })
    }

    /// Records `pod` turning ready or not, unless that is what was last recorded of it (a new
    /// pod is not ready). The simulator records its own readiness writes as soon as the API
    /// server accepted them, not when its watch brings them back: a controller may see them
    /// first, and act on them in another cluster, whose pods another simulator's watch reports;
    /// a timeline merged across clusters must not show the act before its cause.
    fn record_readiness(&self, pod: &Pod, ready: bool) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut readiness = self.readiness.lock().unwrap();
        if readiness.get(&uid).copied().unwrap_or(false) != ready {
            readiness.insert(uid, ready);
            // (under the lock: the other path cannot record the same change meanwhile)
            self.record(
                pod,
                if ready {
                    PodEvent::Ready
                } else {
                    PodEvent::NotReady
                },
            );
        }
    }

    fn record(&self, pod: &Pod, event: PodEvent) {
        let owner = pod
            .metadata
            .owner_references
            .as_ref()
            .and_then(|owners| owners.iter().find(|owner| owner.controller == Some(true)))
            .filter(|owner| owner.kind == "StatefulSet")
            .map(|owner| owner.name.clone());
        self.timeline.lock().unwrap().push(PodTransition {
            at: Instant::now(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            statefulset: owner,
            revision: pod
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get("controller-revision-hash").cloned()),
            event,
        });
    }

    /// Removes a terminating pod for good, as a kubelet does once its containers stopped (they
    /// stop at once here): grace period 0, conditioned on the uid so that a recreated pod of
    /// the same name is left alone.
    async fn remove(&self, pod: &Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.until_through(&name, "delete", || self.api.delete(&name, &params))
            .await;
    }

    /// Whether the pod `name` (`uid`) is kept from becoming Ready: held by name, or a
    /// replacement of a pod whose replacements are held.
    fn holds(&self, name: &str, uid: &str) -> bool {
        self.held.lock().unwrap().contains(name)
            || self
                .held_replacements
                .lock()
                .unwrap()
                .get(name)
                .is_some_and(|spared| spared != uid)
    }

    /// Whether `pod` is one that crash-loops: by uid, or because it runs a broken version.
    fn crash_loops(&self, pod: &Pod) -> bool {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if self.crash_looping.lock().unwrap().contains(uid) {
            return true;
        }
        let broken = self.broken_versions.lock().unwrap();
        pod.spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .any(|container| {
                container
                    .image
                    .as_deref()
                    .and_then(|image| image.rsplit_once(':'))
                    .is_some_and(|(_, tag)| broken.contains(tag))
            })
    }

    async fn set_ready(&self, pod: &Pod, ready: bool) {
        let health = if ready {
            Health::Ready
        } else {
            Health::NotReady
        };
        self.set_health(pod, health).await;
    }

    /// Writes the status a kubelet would: Running, the pod's IP, Ready true or false and the
    /// containers' states. The uid in the patch is a precondition: a recreated pod of the same
    /// name is left alone.
    async fn set_health(&self, pod: &Pod, health: Health) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let now = jiff::Timestamp::now().to_string();
        let ready = health == Health::Ready;
        let flag = if ready { "True" } else { "False" };
        let ip = self.ip_for(&name).to_string();
        let containers: Vec<_> = pod
            .spec
            .as_ref()
            .map(|spec| spec.containers.iter().collect())
            .unwrap_or_default();
        let container_statuses: Vec<_> = containers
            .iter()
            .map(|container| {
                let (state, last_state, restarts) = match health {
                    Health::CrashLooping => (
                        json!({"waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": format!("back-off 10s restarting failed container={} pod={name}", container.name),
                        }}),
                        json!({"terminated": {
                            "exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now,
                        }}),
                        3,
                    ),
                    Health::Ready | Health::NotReady => {
                        (json!({"running": {"startedAt": now}}), json!({}), 0)
                    }
                };
                json!({
                    "name": container.name,
                    "image": container.image,
                    "imageID": "",
                    "ready": ready,
                    "started": health != Health::CrashLooping,
                    "restartCount": restarts,
                    "state": state,
                    "lastState": last_state,
                })
            })
            .collect();
        let patch = json!({
            "metadata": {"uid": pod.metadata.uid},
            "status": {
                "phase": "Running",
                "hostIP": "127.0.0.1",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": now,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                    {"type": "Ready", "status": flag, "lastTransitionTime": now},
                ],
                "containerStatuses": container_statuses,
            }
        });
        let params = PatchParams::default();
        let merge = Patch::Merge(&patch);
        let written = self
            .until_through(&name, "status update", || {
                self.api.patch_status(&name, &params, &merge)
            })
            .await;
        if written && self.plays_kubelet {
            self.record_readiness(pod, ready);
        }
    }

    /// Repeats `call` until it gets through, as a kubelet keeps reporting; only a pod that is
    /// gone (404) or was replaced (409: the uid precondition) ends the attempts early. Whether
    /// it got through.
    async fn until_through<T, F, Fut>(&self, pod: &str, what: &str, call: F) -> bool
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        for attempt in 0..20u64 {
            match tokio::time::timeout(Duration::from_secs(5), call()).await {
                Ok(Ok(_)) => return true,
                Ok(Err(kube::Error::Api(status))) if status.code == 404 || status.code == 409 => {
                    return false;
                }
                Ok(Err(error)) => {
                    tracing::debug!(pod, %error, attempt, "pod simulator {what} failed; retrying")
                }
                Err(_) => tracing::debug!(pod, attempt, "pod simulator {what} timed out; retrying"),
            }
            tokio::time::sleep(Duration::from_millis(100 * (attempt + 1))).await;
        }
        false
    }
}
