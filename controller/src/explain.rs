//! Telling people what baton does and why it waits: Kubernetes Events on the StatefulSets
//! concerned, and a structured log line for each. An explanation that has not changed is not
//! repeated on every reconcile, only after `repeat_after`.
//!
//! Events are off the critical path: [`Explainer::tell`] logs, filters and queues, and one
//! [`EventPublisher`] task writes the Events, each call bounded by the request timeout. A
//! reconcile never waits on the API server to explain itself; when the bounded queue is full
//! (the API server is slow or down) an Event is dropped, logged, and let through again next time.
//!
//! Nor does the next step wait on an Event: each is written [`EVENT_SETTLE`] after it was told,
//! in the order told. A pass tells in the moment something changed, which is also when the
//! writes the next step waits on are made (the StatefulSet controller's status, baton's own
//! deletion, the replacement's creation); an Event written then is one more write the API
//! server serves before them. Measured in docs/benchmarks.md ("Where a pass goes").
//!
//! kube's `Recorder` folds every Event with the same object, reason and action into one series
//! and keeps its first note (its cache key leaves the note out), so "waiting for pod 3" would
//! hide "waiting for pod 4" for minutes. The publisher therefore keeps one recorder per
//! (object, reason) and replaces it when the note changes: the same note again is a series on
//! the same Event, a new note is a new Event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_shared::kube_client::bounded;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Events waiting for the publisher, at most. A reconcile of a few groups produces a handful.
pub const EVENT_QUEUE_CAPACITY: usize = 256;

pub use baton_core::explained::{Explanation, Severity};

/// How long after it was told an Event is written (module header): long enough for the writes
/// a rollout step waits on to go first, short next to what a person reading Events notices.
pub const EVENT_SETTLE: Duration = Duration::from_millis(100);

/// Logs explanations and queues them for the [`EventPublisher`], skipping repeats. Cheap to
/// clone: clones share the queue and the repeat filter.
#[derive(Clone)]
pub struct Explainer {
    repeats: Arc<RepeatFilter>,
    queue: mpsc::Sender<Outgoing>,
}

impl std::fmt::Debug for Explainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Explainer")
            .field("repeats", &self.repeats)
            .finish()
    }
}

/// One Event to write.
pub(crate) struct Outgoing {
    key: RepeatKey,
    object: ObjectReference,
    event: Event,
    /// When it was told (tokio's clock, so tests can pause it).
    told: tokio::time::Instant,
}

#[cfg(test)]
impl Outgoing {
    /// The queued Event's reason and note.
    pub(crate) fn reason_and_note(&self) -> (&str, &str) {
        (
            self.event.reason.as_str(),
            self.event.note.as_deref().unwrap_or_default(),
        )
    }
}

/// (object uid or name, reason)
type RepeatKey = (String, String);

/// Remembers, per (object, reason), the last note published and when.
#[derive(Debug)]
struct RepeatFilter {
    repeat_after: Duration,
    published: Mutex<HashMap<RepeatKey, (String, Instant)>>,
    /// When entries older than `repeat_after` were last dropped.
    pruned: Mutex<Option<Instant>>,
}

impl RepeatFilter {
    /// Whether `note` should be published now; if so it is remembered as published.
    fn admit(&self, key: RepeatKey, note: &str, now: Instant) -> bool {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.prune(&mut published, now);
        let repeat = published
            .get(&key)
            .is_some_and(|(last, at)| last == note && now.duration_since(*at) < self.repeat_after);
        if repeat {
            return false;
        }
        published.insert(key, (note.to_owned(), now));
        true
    }

    /// Entries older than `repeat_after` would be admitted anyway: dropping them, at most once
    /// per `repeat_after`, forgets objects and groups that are gone.
    fn prune(&self, published: &mut HashMap<RepeatKey, (String, Instant)>, now: Instant) {
        let mut pruned = self
            .pruned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if pruned.is_some_and(|at| now.duration_since(at) < self.repeat_after) {
            return;
        }
        published.retain(|_, (_, at)| now.duration_since(*at) < self.repeat_after);
        *pruned = Some(now);
    }

    fn knows(&self, key: &RepeatKey) -> bool {
        self.published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains_key(key)
    }

    fn len(&self) -> usize {
        self.published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    /// Publishing failed: let the next attempt through.
    fn forget(&self, key: &RepeatKey) {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        published.remove(key);
    }
}

impl Explainer {
    /// An explainer for `instance` (this replica), and the publisher task that writes its Events:
    /// run it ([`EventPublisher::run`]) beside the reconciles.
    pub fn new(
        clusters: crate::clusters::Clusters,
        instance: String,
        repeat_after: Duration,
        publish_timeout: Duration,
    ) -> (Self, EventPublisher) {
        let (explainer, queued) = Self::with_queue(repeat_after, EVENT_QUEUE_CAPACITY);
        let publisher = EventPublisher {
            clusters,
            reporter: Reporter {
                controller: "baton-controller".into(),
                instance: Some(instance),
            },
            queued,
            repeats: explainer.repeats.clone(),
            publish_timeout,
            settle: EVENT_SETTLE,
            recorders: HashMap::new(),
        };
        (explainer, publisher)
    }

    /// An explainer over a queue of `capacity` whose receiving end is returned: the publisher's
    /// (tests read it directly).
    pub(crate) fn with_queue(
        repeat_after: Duration,
        capacity: usize,
    ) -> (Self, mpsc::Receiver<Outgoing>) {
        let (queue, queued) = mpsc::channel(capacity);
        let repeats = Arc::new(RepeatFilter {
            repeat_after,
            published: Mutex::default(),
            pruned: Mutex::default(),
        });
        (Self { repeats, queue }, queued)
    }

    /// Logs the explanation and queues it as an Event on `object`, unless the same note was
    /// published for the same object and reason less than `repeat_after` ago. Never waits on
    /// the API server (async only so that callers need not change when that is true).
    pub async fn tell(&self, object: &ObjectReference, explanation: Explanation) {
        let name = object.name.as_deref().unwrap_or_default();
        let key = Self::key(object, &explanation);
        if !self
            .repeats
            .admit(key.clone(), &explanation.note, Instant::now())
        {
            tracing::debug!(object = name, reason = %explanation.reason, "{}", explanation.note);
            return;
        }
        match explanation.severity {
            Severity::Normal => {
                tracing::info!(object = name, reason = %explanation.reason, "{}", explanation.note)
            }
            Severity::Warning => {
                tracing::warn!(object = name, reason = %explanation.reason, "{}", explanation.note)
            }
        }
        let event = Event {
            type_: match explanation.severity {
                Severity::Normal => EventType::Normal,
                Severity::Warning => EventType::Warning,
            },
            reason: explanation.reason,
            note: Some(truncate(&explanation.note, 1000)),
            action: explanation.action,
            secondary: None,
        };
        let outgoing = Outgoing {
            key,
            object: object.clone(),
            event,
            told: tokio::time::Instant::now(),
        };
        if let Err(error) = self.queue.try_send(outgoing) {
            let outgoing = match error {
                mpsc::error::TrySendError::Full(outgoing)
                | mpsc::error::TrySendError::Closed(outgoing) => outgoing,
            };
            tracing::warn!(
                object = name,
                reason = %outgoing.event.reason,
                "the Event queue is full (the API server is slow or unreachable): this Event is dropped and sent again on the next reconcile"
            );
            self.repeats.forget(&outgoing.key);
        }
    }

    fn key(object: &ObjectReference, explanation: &Explanation) -> RepeatKey {
        (
            object
                .uid
                .clone()
                .or_else(|| object.name.clone())
                .unwrap_or_default(),
            explanation.reason.clone(),
        )
    }
}

/// The one task that writes Events, in the order they were told.
pub struct EventPublisher {
    /// Each Event is written in the cluster of the object it is about (a member's object is
    /// named `cluster/name`), on the object under the name it has there.
    clusters: crate::clusters::Clusters,
    reporter: Reporter,
    queued: mpsc::Receiver<Outgoing>,
    repeats: Arc<RepeatFilter>,
    /// Bounds each write: the API server may not answer, and kube's client has no read timeout.
    publish_timeout: Duration,
    /// How long after it was told each Event is written ([`EVENT_SETTLE`]).
    settle: Duration,
    /// Per (object, reason): the note of the Event its recorder carries, and the recorder.
    recorders: HashMap<RepeatKey, (String, Recorder)>,
}

impl EventPublisher {
    /// Writes queued Events until `shutdown`, each once it has settled.
    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let outgoing = tokio::select! {
                () = shutdown.cancelled() => return,
                outgoing = self.queued.recv() => match outgoing {
                    Some(outgoing) => outgoing,
                    None => return,
                },
            };
            // Told in order, so due in order: waiting for this one never delays a later one
            // past its own time.
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep_until(outgoing.told + self.settle) => {}
            }
            self.publish(outgoing).await;
        }
    }

    async fn publish(&mut self, outgoing: Outgoing) {
        let note = outgoing.event.note.clone().unwrap_or_default();
        let name = outgoing.object.name.clone().unwrap_or_default();
        let located = self.clusters.client_for(&name);
        let published = match located {
            Ok((client, local)) => {
                let object = ObjectReference {
                    name: Some(local.to_owned()),
                    ..outgoing.object.clone()
                };
                let recorder = self.recorder(&outgoing.key, note, client);
                bounded(
                    self.publish_timeout,
                    "publishing an Event",
                    recorder.publish(&outgoing.event, &object),
                )
                .await
                .map(|published| published.map_err(|error| error.to_string()))
            }
            Err(not_connected) => Ok(Err(not_connected.to_string())),
        };
        let error = match published {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error,
            Err(timed_out) => timed_out.to_string(),
        };
        let name = outgoing.object.name.as_deref().unwrap_or_default();
        tracing::warn!(object = name, %error, "could not publish an Event");
        self.repeats.forget(&outgoing.key);
    }

    /// The recorder for this object and reason: the same one while the note stays the same (a
    /// repeat becomes a series), a new one when it changes (a new Event). Recorders of objects
    /// the repeat filter has forgotten go too.
    fn recorder(&mut self, key: &RepeatKey, note: String, client: kube::Client) -> Recorder {
        if self.recorders.len() > 2 * self.repeats.len().max(64) {
            let repeats = &self.repeats;
            self.recorders.retain(|key, _| repeats.knows(key));
        }
        match self.recorders.get(key) {
            Some((current, recorder)) if *current == note => recorder.clone(),
            _ => {
                let recorder = Recorder::new(client, self.reporter.clone());
                self.recorders.insert(key.clone(), (note, recorder.clone()));
                recorder
            }
        }
    }
}

/// Event notes are limited to 1 KiB by the API server.
fn truncate(note: &str, max: usize) -> String {
    if note.len() <= max {
        return note.to_owned();
    }
    let ellipsis = '…';
    let mut end = max - ellipsis.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &note[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter() -> RepeatFilter {
        RepeatFilter {
            repeat_after: Duration::from_secs(600),
            published: Mutex::default(),
            pruned: Mutex::default(),
        }
    }

    fn key(reason: &str) -> (String, String) {
        ("uid-a".to_owned(), reason.to_owned())
    }

    #[test]
    fn the_same_note_is_not_repeated_until_repeat_after() {
        let filter = filter();
        let start = Instant::now();
        assert!(filter.admit(key("RolloutWaiting"), "zone b has 1 not-ready pod", start));
        assert!(!filter.admit(
            key("RolloutWaiting"),
            "zone b has 1 not-ready pod",
            start + Duration::from_secs(5)
        ));
        assert!(filter.admit(
            key("RolloutWaiting"),
            "zone b has 1 not-ready pod",
            start + Duration::from_secs(601)
        ));
    }

    #[test]
    fn a_changed_note_or_another_reason_is_published_at_once() {
        let filter = filter();
        let now = Instant::now();
        assert!(filter.admit(key("RolloutWaiting"), "zone b has 2 not-ready pods", now));
        assert!(filter.admit(key("RolloutWaiting"), "zone b has 1 not-ready pod", now));
        assert!(filter.admit(key("InvalidAnnotation"), "zone b has 1 not-ready pod", now));
    }

    #[test]
    fn a_failed_publication_is_retried() {
        let filter = filter();
        let now = Instant::now();
        assert!(filter.admit(key("RolloutWaiting"), "note", now));
        filter.forget(&key("RolloutWaiting"));
        assert!(filter.admit(key("RolloutWaiting"), "note", now));
    }

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let note = "é".repeat(800);
        let cut = truncate(&note, 1000);
        assert!(cut.len() <= 1000);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn entries_of_objects_gone_for_longer_than_repeat_after_are_forgotten() {
        let filter = filter();
        let start = Instant::now();
        for group in 0..100 {
            assert!(filter.admit(key(&format!("group-{group}")), "note", start));
        }
        assert_eq!(filter.len(), 100);
        let later = start + Duration::from_secs(601);
        assert!(filter.admit(key("still-here"), "note", later));
        assert_eq!(filter.len(), 1, "the hundred silent entries were dropped");
    }

    fn reference(name: &str) -> ObjectReference {
        ObjectReference {
            name: Some(name.to_owned()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn waiting(note: &str) -> Explanation {
        Explanation {
            severity: Severity::Normal,
            reason: "RolloutWaiting".into(),
            action: "Rollout".into(),
            note: note.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn events_are_written_once_settled_in_the_order_told() {
        // Given a publisher over a mocked API server
        let (service, mut handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let (explainer, publisher) = Explainer::new(
            crate::clusters::Clusters::single(client),
            "test".to_owned(),
            Duration::from_secs(600),
            Duration::from_secs(5),
        );
        let shutdown = CancellationToken::new();
        let publishing = tokio::spawn(publisher.run(shutdown.clone()));

        // When two Events are told 30 ms apart
        let start = tokio::time::Instant::now();
        explainer.tell(&reference("zone-a"), waiting("first")).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        explainer
            .tell(&reference("zone-b"), waiting("second"))
            .await;

        // Then each is written EVENT_SETTLE after it was told, not before, in the order told
        for (note, told_after) in [("first", 0), ("second", 30)] {
            let (request, send) = handle.next_request().await.expect("an Event is written");
            let written_after = start.elapsed();
            let body = request.into_body().collect_bytes().await.expect("a body");
            let event: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(event["note"], note);
            assert!(
                written_after >= Duration::from_millis(told_after) + EVENT_SETTLE,
                "{note} written {written_after:?} after the start"
            );
            let created = http::Response::builder()
                .status(201)
                .body(kube::client::Body::from(body.to_vec()))
                .expect("a response");
            send.send_response(created);
        }
        shutdown.cancel();
        publishing.await.expect("the publisher stops");
    }

    #[tokio::test]
    async fn telling_never_waits_and_a_full_queue_drops_without_losing_the_next_attempt() {
        // Given an explainer whose queue holds two Events and whose publisher does not run
        let (explainer, mut queued) = Explainer::with_queue(Duration::from_secs(600), 2);

        // When five different notes are told
        let zone_b = reference("zone-b");
        for pod in 0..5 {
            let told = explainer.tell(&zone_b, waiting(&format!("waiting for pod {pod}")));
            tokio::time::timeout(Duration::from_millis(100), told)
                .await
                .expect("tell does not wait for the publisher");
        }

        // Then two are queued, in order, and the rest were dropped
        assert_eq!(
            queued.recv().await.unwrap().event.note.unwrap(),
            "waiting for pod 0"
        );
        assert_eq!(
            queued.recv().await.unwrap().event.note.unwrap(),
            "waiting for pod 1"
        );
        assert!(queued.try_recv().is_err());
        // And a dropped note is told again next time, not filtered as a repeat
        explainer
            .tell(&reference("zone-b"), waiting("waiting for pod 4"))
            .await;
        assert_eq!(
            queued.recv().await.unwrap().event.note.unwrap(),
            "waiting for pod 4"
        );
    }
}
