//! One watch of a kind for every namespace served: a baton serving many namespaces watches each
//! kind once, cluster-wide, and routes every event to the namespace it concerns, so the API
//! server holds one watch per kind, not one per namespace, and each namespace's caches are filled
//! exactly as a watch of their own would fill them.
//!
//! A namespace subscribes ([`Fanout::subscribe`]) and is given watch events as a namespaced
//! watch gives them: a listing (`Init`, its objects, `InitDone`), then its changes. Only the
//! objects of subscribed namespaces are passed on; the others are dropped as they arrive, so a
//! replica keeps only what it serves (with shards, its share).
//!
//! A namespace that subscribes while the watch runs needs a listing of its own, and a running
//! watch cannot give one: the watch is started over and every subscriber is given the new
//! listing (each cache swaps it in whole, as after any relist). Subscriptions that come together
//! (the namespaces listed at start, a dead replica's shards) are gathered into one listing: the
//! watch starts over once no other came for [`GATHER`]. So taking a namespace up costs one
//! listing of the kind, and until it is done the others' changes wait behind it; letting one go
//! costs nothing (its stream is dropped). With no subscriber left, the watch is dropped at its
//! next event, which finds every stream gone.
//!
//! A watch error is passed to every subscriber as the API's status (so a missing CRD stays a
//! state each of them keeps); the watch itself retries, with its backoff.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::core::Status;
use kube::runtime::watcher;
use tokio::sync::mpsc;

/// Watch events, as a watch gives them (a relist retried by the stream itself).
pub type Events<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// How long subscriptions are gathered into one listing: the quiet time after the last one.
pub const GATHER: Duration = Duration::from_millis(50);

/// A subscriber's channel carries each event boxed: an unbounded channel keeps at least one
/// block of 32 slots allocated per subscriber, and a `Pod`'s event is 2 KiB inline, so unboxed
/// each namespace would hold ~70 KiB per kind whether anything changes or not.
type Subscriber<K> = mpsc::UnboundedSender<Box<Result<watcher::Event<K>, watcher::Error>>>;

/// Subscriptions to one cluster-wide watch of a kind. Cheap to clone.
pub struct Fanout<K> {
    subscriptions: mpsc::UnboundedSender<(String, Subscriber<K>)>,
}

impl<K> Clone for Fanout<K> {
    fn clone(&self) -> Self {
        Self {
            subscriptions: self.subscriptions.clone(),
        }
    }
}

impl<K> Fanout<K>
where
    K: Resource + Send + 'static,
{
    /// The fanout of the watches `watch` starts (each a listing, then changes, retried by the
    /// stream itself) and the future that drives it: run it as a critical task. It ends once
    /// every handle and every subscriber is gone.
    pub fn new(
        watch: impl Fn() -> Events<K> + Send + 'static,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (subscriptions, requests) = mpsc::unbounded_channel();
        (Self { subscriptions }, drive(watch, requests))
    }

    /// The watch events of `namespace`'s objects, from a listing on. A namespace subscribed
    /// again replaces its earlier stream. Dropping the stream lets the namespace go.
    pub fn subscribe(&self, namespace: &str) -> Events<K> {
        let (sender, receiver) = mpsc::unbounded_channel();
        // The driver gone means the process is stopping: the stream then ends at once.
        let _ = self.subscriptions.send((namespace.to_owned(), sender));
        stream_of(receiver).map(|event| *event).boxed()
    }
}

fn stream_of<T: Send + 'static>(
    mut receiver: mpsc::UnboundedReceiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |context| receiver.poll_recv(context))
}

/// What the driver waits for next.
enum Next<K> {
    Subscription(Option<(String, Subscriber<K>)>),
    Event(Option<Result<watcher::Event<K>, watcher::Error>>),
}

async fn drive<K>(
    watch: impl Fn() -> Events<K>,
    mut requests: mpsc::UnboundedReceiver<(String, Subscriber<K>)>,
) where
    K: Resource + Send + 'static,
{
    let mut subscribers: HashMap<String, Subscriber<K>> = HashMap::new();
    let mut events: Option<Events<K>> = None;
    let mut open = true;
    loop {
        let next = match (events.as_mut(), open) {
            (Some(events), true) => tokio::select! {
                biased;
                subscription = requests.recv() => Next::Subscription(subscription),
                event = events.next() => Next::Event(event),
            },
            (Some(events), false) => Next::Event(events.next().await),
            (None, true) => Next::Subscription(requests.recv().await),
            (None, false) => return,
        };
        match next {
            Next::Subscription(None) => open = false,
            Next::Subscription(Some((namespace, subscriber))) => {
                subscribers.insert(namespace, subscriber);
                open = gather(&mut requests, &mut subscribers).await;
                subscribers.retain(|_, subscriber| !subscriber.is_closed());
                // A listing for every subscriber, the new ones' first.
                events = Some(watch());
            }
            // A watch retries by itself; one that ended is started over.
            Next::Event(None) => events = Some(watch()),
            Next::Event(Some(event)) => route(&mut subscribers, event),
        }
        if subscribers.is_empty() {
            events = None;
        }
    }
}

/// Takes every subscription that follows within [`GATHER`] of the last; false once no more can
/// come.
async fn gather<K>(
    requests: &mut mpsc::UnboundedReceiver<(String, Subscriber<K>)>,
    subscribers: &mut HashMap<String, Subscriber<K>>,
) -> bool {
    loop {
        match tokio::time::timeout(GATHER, requests.recv()).await {
            Ok(Some((namespace, subscriber))) => {
                subscribers.insert(namespace, subscriber);
            }
            Ok(None) => return false,
            Err(_quiet) => return true,
        }
    }
}

/// Passes `event` on: a listing's start and end to every subscriber, an object to its
/// namespace's alone (none if not subscribed), an error to every subscriber. A subscriber that
/// is gone is forgotten.
fn route<K>(
    subscribers: &mut HashMap<String, Subscriber<K>>,
    event: Result<watcher::Event<K>, watcher::Error>,
) where
    K: Resource,
{
    let object = match event {
        Ok(watcher::Event::Init) => {
            return broadcast(subscribers, || Ok(watcher::Event::Init));
        }
        Ok(watcher::Event::InitDone) => {
            return broadcast(subscribers, || Ok(watcher::Event::InitDone));
        }
        Err(error) => {
            let status = status_of(&error);
            return broadcast(subscribers, || {
                Err(watcher::Error::WatchError(status.clone()))
            });
        }
        Ok(event) => event,
    };
    // Looked up by a borrowed name: no allocation per event (a listing is every object of the
    // kind in the cluster); a subscriber gone is forgotten by the name its event gives back.
    let Some(subscriber) = namespace_of(&object).and_then(|namespace| subscribers.get(namespace))
    else {
        return;
    };
    if let Err(mpsc::error::SendError(event)) = subscriber.send(Box::new(Ok(object)))
        && let Ok(object) = *event
        && let Some(namespace) = namespace_of(&object)
    {
        subscribers.remove(namespace);
    }
}

/// The namespace of the object an event carries (the cluster-scoped's is "").
fn namespace_of<K: Resource>(event: &watcher::Event<K>) -> Option<&str> {
    match event {
        watcher::Event::InitApply(object)
        | watcher::Event::Apply(object)
        | watcher::Event::Delete(object) => {
            Some(object.meta().namespace.as_deref().unwrap_or_default())
        }
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
}

fn broadcast<K>(
    subscribers: &mut HashMap<String, Subscriber<K>>,
    event: impl Fn() -> Result<watcher::Event<K>, watcher::Error>,
) {
    subscribers.retain(|_, subscriber| subscriber.send(Box::new(event())).is_ok());
}

/// The API's status a watch error carries (a made-up one, code 0, for a failure with none), so
/// one error can be given to every subscriber.
fn status_of(error: &watcher::Error) -> Box<Status> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status.clone(),
        other => Box::new(Status {
            message: other.to_string(),
            ..Status::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    type Event = Result<watcher::Event<ConfigMap>, watcher::Error>;

    fn object(namespace: &str, name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.to_owned()),
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// A cluster-wide "watch" the test drives: each start is counted and given a fresh channel
    /// the test sends its events on.
    struct Cluster {
        starts: Arc<AtomicUsize>,
        feeds: mpsc::UnboundedReceiver<mpsc::UnboundedSender<Event>>,
    }

    impl Cluster {
        fn fanout() -> (Fanout<ConfigMap>, Self) {
            let starts = Arc::new(AtomicUsize::new(0));
            let (feed_sender, feeds) = mpsc::unbounded_channel();
            let counted = starts.clone();
            let (fanout, drive) = Fanout::new(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let (sender, receiver) = mpsc::unbounded_channel();
                let _ = feed_sender.send(sender);
                stream_of(receiver).boxed()
            });
            tokio::spawn(drive);
            (fanout, Self { starts, feeds })
        }

        /// The newest watch started (after waiting for one to start).
        async fn started(&mut self) -> mpsc::UnboundedSender<Event> {
            let mut newest = self.feeds.recv().await.expect("a watch starts");
            while let Ok(newer) = self.feeds.try_recv() {
                newest = newer;
            }
            newest
        }

        fn starts(&self) -> usize {
            self.starts.load(Ordering::SeqCst)
        }
    }

    fn list(feed: &mpsc::UnboundedSender<Event>, objects: &[(&str, &str)]) {
        feed.send(Ok(watcher::Event::Init))
            .expect("the watch is read");
        for (namespace, name) in objects {
            let object = object(namespace, name);
            feed.send(Ok(watcher::Event::InitApply(object)))
                .expect("the watch is read");
        }
        feed.send(Ok(watcher::Event::InitDone))
            .expect("the watch is read");
    }

    /// What the subscriber has been given so far, as short words.
    async fn next_words(events: &mut Events<ConfigMap>, count: usize) -> Vec<String> {
        let mut words = Vec::new();
        for _ in 0..count {
            let event = events.next().await.expect("the stream goes on");
            words.push(match event {
                Ok(watcher::Event::Init) => "init".to_owned(),
                Ok(watcher::Event::InitDone) => "done".to_owned(),
                Ok(watcher::Event::InitApply(object)) => format!("list {}", name(&object)),
                Ok(watcher::Event::Apply(object)) => format!("apply {}", name(&object)),
                Ok(watcher::Event::Delete(object)) => format!("delete {}", name(&object)),
                Err(watcher::Error::WatchError(status)) => format!("error {}", status.code),
                Err(other) => format!("other error {other}"),
            });
        }
        words
    }

    fn name(object: &ConfigMap) -> String {
        format!(
            "{}/{}",
            object.metadata.namespace.as_deref().unwrap_or_default(),
            object.metadata.name.as_deref().unwrap_or_default()
        )
    }

    #[tokio::test(start_paused = true)]
    async fn each_subscriber_is_given_its_own_namespaces_listing_and_changes_alone() {
        // Given two namespaces subscribed together to a watch of three
        let (fanout, mut cluster) = Cluster::fanout();
        let mut a = fanout.subscribe("a");
        let mut b = fanout.subscribe("b");
        let feed = cluster.started().await;
        // Then one watch started for both
        assert_eq!(cluster.starts(), 1);

        // When the watch lists and changes objects of all three
        list(&feed, &[("a", "1"), ("b", "1"), ("c", "1"), ("a", "2")]);
        for event in [
            watcher::Event::Apply(object("c", "1")),
            watcher::Event::Apply(object("b", "1")),
            watcher::Event::Delete(object("a", "1")),
        ] {
            feed.send(Ok(event)).expect("the watch is read");
        }

        // Then each is given its listing and its changes, in order, nothing of the others'
        assert_eq!(
            next_words(&mut a, 5).await,
            ["init", "list a/1", "list a/2", "done", "delete a/1"]
        );
        assert_eq!(
            next_words(&mut b, 4).await,
            ["init", "list b/1", "done", "apply b/1"]
        );
        // And an error is given to both, as the API's status
        let mut gone = kube::core::Status::failure("the CRD is not installed", "NotFound");
        gone.code = 404;
        feed.send(Err(watcher::Error::WatchError(Box::new(gone))))
            .expect("the watch is read");
        assert_eq!(next_words(&mut a, 1).await, ["error 404"]);
        assert_eq!(next_words(&mut b, 1).await, ["error 404"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_namespace_taken_up_while_watching_starts_a_listing_for_every_subscriber() {
        // Given one namespace subscribed and listed
        let (fanout, mut cluster) = Cluster::fanout();
        let mut a = fanout.subscribe("a");
        let first = cluster.started().await;
        list(&first, &[("a", "1"), ("b", "1")]);
        assert_eq!(next_words(&mut a, 3).await, ["init", "list a/1", "done"]);

        // When another namespace subscribes
        let mut b = fanout.subscribe("b");
        let second = cluster.started().await;

        // Then the watch started over: a second start, the first's events no longer passed on
        assert_eq!(cluster.starts(), 2);
        let _ = first.send(Ok(watcher::Event::Apply(object("a", "stale"))));
        // And both are given the new listing, the earlier subscriber's cache swapping it in
        list(&second, &[("a", "1"), ("b", "1"), ("b", "2")]);
        assert_eq!(next_words(&mut a, 3).await, ["init", "list a/1", "done"]);
        assert_eq!(
            next_words(&mut b, 4).await,
            ["init", "list b/1", "list b/2", "done"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_namespace_let_go_is_given_nothing_more_and_the_last_one_stops_the_watch() {
        // Given two namespaces subscribed and listed
        let (fanout, mut cluster) = Cluster::fanout();
        let a = fanout.subscribe("a");
        let mut b = fanout.subscribe("b");
        let feed = cluster.started().await;
        list(&feed, &[("a", "1"), ("b", "1")]);
        assert_eq!(next_words(&mut b, 3).await, ["init", "list b/1", "done"]);

        // When the first is let go: no new listing for the other, which goes on being served
        drop(a);
        feed.send(Ok(watcher::Event::Apply(object("a", "1"))))
            .expect("the watch is read");
        feed.send(Ok(watcher::Event::Apply(object("b", "1"))))
            .expect("the watch is read");
        assert_eq!(next_words(&mut b, 1).await, ["apply b/1"]);
        assert_eq!(cluster.starts(), 1);

        // When the last is let go, then the watch is dropped once the next event shows it
        drop(b);
        feed.send(Ok(watcher::Event::Apply(object("b", "1"))))
            .expect("the watch is read");
        tokio::time::timeout(Duration::from_secs(5), feed.closed())
            .await
            .expect("the watch is dropped with no subscriber left");
    }
}
