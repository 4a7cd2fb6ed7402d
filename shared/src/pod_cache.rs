//! A watch-fed cache of one namespace's pods, kept as [`CachedPod`]s.
//!
//! Why not kube's reflector: its store keeps the watched type whole, and a `Pod` costs 2,176
//! bytes before its strings however much of it is emptied, so 9,000 pods took ~19 MiB of each
//! binary for struct space nobody reads. The reflector cannot store another type than the one
//! it watches, so this cache is an [`Index`] of the one watch driver ([`crate::index`]): each
//! pod is converted once per change, then the event's `Pod` is dropped.
//!
//! The cache is filled like the reflector's: a relist is swapped in whole, so readers never see
//! half a list, and [`PodCache::wait_until_ready`] returns once the first list is in.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::index::{self, Index};

use baton_core::pods::CachedPod;

/// A read handle on the cache; clones share it.
#[derive(Clone)]
pub struct PodCache {
    shared: Arc<Shared>,
    ready: watch::Receiver<bool>,
}

struct Shared {
    /// The pods (one namespace), found by name.
    pods: RwLock<HashSet<ByName>>,
    /// Changes applied so far (0: none yet), for callers that index the pods.
    changes: AtomicU64,
}

impl std::fmt::Debug for PodCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodCache")
            .field("pods", &self.len())
            .field("ready", &*self.ready.borrow())
            .finish()
    }
}

/// The watch that fills a [`PodCache`] has stopped: the cache will never be complete.
#[derive(Debug, thiserror::Error)]
#[error("the pod watch stopped before the pods were listed")]
pub struct WatchStopped;

impl PodCache {
    /// A cache that holds `pods`, listed, and watches nothing: for tests of what reads one.
    pub fn of_pods(pods: impl IntoIterator<Item = CachedPod>) -> Self {
        let (cache, writer) = empty(|_: &CachedPod| {});
        *writer.write() = pods.into_iter().map(|pod| ByName(Arc::new(pod))).collect();
        writer.changed();
        writer.ready.send_replace(true);
        cache
    }

    /// The pod named `name`, if the cache has it.
    pub fn get(&self, name: &str) -> Option<Arc<CachedPod>> {
        self.read().get(name).map(|pod| pod.0.clone())
    }

    /// Every cached pod, in no particular order.
    pub fn state(&self) -> Vec<Arc<CachedPod>> {
        self.read().iter().map(|pod| pod.0.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many changes the watch has applied: equal counts, equal contents.
    pub fn changes(&self) -> u64 {
        self.shared.changes.load(Ordering::Acquire)
    }

    /// Whether the first list is in.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until the first list is in.
    pub async fn wait_until_ready(&self) -> Result<(), WatchStopped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| WatchStopped)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashSet<ByName>> {
        // Writers never panic while holding the lock (inserts and swaps only).
        self.shared.pods.read().expect("pod cache lock")
    }
}

/// A cached pod, keyed by its own name: a map from a copy of the name would cost each pod a
/// second string.
#[derive(Clone)]
struct ByName(Arc<CachedPod>);

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

// Equal and hashed as its name, as `Borrow<str>` requires.
impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

impl Hash for ByName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name.as_str().hash(state);
    }
}

/// An empty cache, not listed yet, and the writer that fills it, telling `touched` of each pod
/// a change touched.
fn empty<T: FnMut(&CachedPod)>(touched: T) -> (PodCache, Writer<T>) {
    let shared = Arc::new(Shared {
        pods: RwLock::default(),
        changes: AtomicU64::new(0),
    });
    let (ready_sender, ready) = watch::channel(false);
    let cache = PodCache {
        shared: shared.clone(),
        ready,
    };
    let writer = Writer {
        shared,
        ready: ready_sender,
        touched,
    };
    (cache, writer)
}

/// The writing side: the watch's index.
struct Writer<T> {
    shared: Arc<Shared>,
    ready: watch::Sender<bool>,
    touched: T,
}

impl<T> Writer<T> {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<ByName>> {
        self.shared.pods.write().expect("pod cache lock")
    }

    fn changed(&self) {
        self.shared.changes.fetch_add(1, Ordering::Release);
    }
}

impl<T: FnMut(&CachedPod)> Index<Pod> for Writer<T> {
    type Kept = Arc<CachedPod>;

    fn keep(&self, pod: Pod) -> Arc<CachedPod> {
        Arc::new(CachedPod::of(&pod))
    }

    fn reset(&mut self, pods: Vec<Arc<CachedPod>>) {
        let listed: HashSet<ByName> = pods.iter().cloned().map(ByName).collect();
        *self.write() = listed;
        self.changed();
        self.ready.send_replace(true);
        pods.iter().for_each(|pod| (self.touched)(pod));
    }

    fn apply(&mut self, pod: Arc<CachedPod>) {
        self.write().replace(ByName(pod.clone()));
        self.changed();
        (self.touched)(&pod);
    }

    fn delete(&mut self, pod: Arc<CachedPod>) {
        self.write().remove(pod.name.as_str());
        self.changed();
        (self.touched)(&pod);
    }

    fn failed(&mut self, error: &watcher::Error) {
        tracing::warn!(%error, "pod watch failed; retrying");
    }
}

/// The cache of the pods of `namespace` (all of them, with `config`'s selectors) and the future
/// that fills it, calling `touched` with each pod a change touched (added, changed, deleted, or
/// listed). Run the future as a critical task; the watch retries by itself, with
/// `crate::kube_client::watch_backoff`.
pub fn watch(
    client: kube::Client,
    namespace: &str,
    config: watcher::Config,
    touched: impl FnMut(&CachedPod) + Send + 'static,
) -> (PodCache, impl Future<Output = ()> + Send + 'static) {
    let (cache, mut writer) = empty(touched);
    let api = Api::<Pod>::namespaced(client, namespace);
    let fill = async move { index::run(api, config, |_| {}, &mut writer).await };
    (cache, fill)
}

/// As [`watch`], from a stream of pod watch events of one's own (a watcher that lists again
/// after each failure, for a member cluster); the stream retries by itself.
pub fn watch_stream(
    events: impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + 'static,
    touched: impl FnMut(&CachedPod) + Send + 'static,
) -> (PodCache, impl Future<Output = ()> + Send + 'static) {
    let (cache, mut writer) = empty(touched);
    let fill = async move { index::drive(events, &mut writer).await };
    (cache, fill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(phase.to_owned()),
                ..Default::default()
            }),
        }
    }

    fn names(cache: &PodCache) -> Vec<String> {
        let mut names: Vec<String> = cache.state().iter().map(|pod| pod.name.clone()).collect();
        names.sort();
        names
    }

    fn kept(name: &str, phase: &str) -> Arc<CachedPod> {
        Arc::new(CachedPod::of(&pod(name, phase)))
    }

    #[test]
    fn a_list_is_swapped_in_whole_and_makes_the_cache_ready() {
        let mut touched = Vec::new();
        let (cache, mut writer) = empty(|pod: &CachedPod| touched.push(pod.name.clone()));
        assert!(cache.is_empty() && !cache.is_ready());
        assert_eq!(cache.changes(), 0);
        writer.reset(vec![kept("a", "Running"), kept("b", "Pending")]);
        assert!(cache.is_ready());
        assert_eq!(names(&cache), ["a", "b"]);
        assert_eq!(cache.changes(), 1);
        drop(writer);
        assert_eq!(touched, ["a", "b"]);
    }

    #[test]
    fn changes_apply_and_count_and_a_relist_drops_what_is_gone() {
        let mut touched = Vec::new();
        let (cache, mut writer) = empty(|pod: &CachedPod| touched.push(pod.name.clone()));
        writer.reset(vec![kept("a", "Pending"), kept("b", "Running")]);
        writer.apply(kept("a", "Running"));
        assert_eq!(
            cache.get("a").map(|pod| pod.readiness.phase),
            Some(baton_core::pods::PodPhase::Running)
        );
        writer.delete(kept("b", "Running"));
        assert_eq!(names(&cache), ["a"]);
        assert_eq!(cache.changes(), 3);
        // A relist after the watch was lost: "a" went meanwhile, "c" came.
        writer.reset(vec![kept("c", "Running")]);
        assert_eq!(names(&cache), ["c"]);
        assert_eq!(cache.changes(), 4);
        drop(writer);
        assert_eq!(touched, ["a", "b", "a", "b", "c"]);
    }

    #[tokio::test]
    async fn waiting_for_the_list_fails_once_the_watch_is_gone() {
        let (cache, writer) = empty(|_: &CachedPod| {});
        drop(writer);
        assert!(cache.wait_until_ready().await.is_err());
    }
}
