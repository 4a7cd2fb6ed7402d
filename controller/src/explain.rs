//! Telling people what baton does and why it waits: Kubernetes Events on the StatefulSets
//! concerned, and a structured log line for each. An explanation that has not changed is not
//! repeated on every reconcile, only after `repeat_after`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use baton_shared::kube_client::bounded;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// How important an explanation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Progress and expected waits.
    Normal,
    /// Something a person must fix (a bad annotation, a group that cannot roll).
    Warning,
}

/// One thing to tell about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub severity: Severity,
    /// CamelCase reason, e.g. `RolloutWaiting`.
    pub reason: String,
    /// What baton did or is about to do, e.g. `Rollout`.
    pub action: String,
    /// The sentence a person reads.
    pub note: String,
}

/// Publishes explanations as Events, skipping repeats.
pub struct Explainer {
    recorder: Recorder,
    repeats: RepeatFilter,
    /// Bounds each publish: reconciles await it, and an unanswered call would otherwise hold
    /// its group forever (kube's client has no read timeout).
    publish_timeout: Duration,
}

impl std::fmt::Debug for Explainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Explainer")
            .field("repeats", &self.repeats)
            .finish()
    }
}

/// Remembers, per (object, reason), the last note published and when.
#[derive(Debug)]
struct RepeatFilter {
    repeat_after: Duration,
    published: Mutex<HashMap<(String, String), (String, Instant)>>,
}

impl RepeatFilter {
    /// Whether `note` should be published now; if so it is remembered as published.
    fn admit(&self, key: (String, String), note: &str, now: Instant) -> bool {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let repeat = published
            .get(&key)
            .is_some_and(|(last, at)| last == note && now.duration_since(*at) < self.repeat_after);
        if repeat {
            return false;
        }
        published.insert(key, (note.to_owned(), now));
        true
    }

    /// Publishing failed: let the next attempt through.
    fn forget(&self, key: &(String, String)) {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        published.remove(key);
    }
}

impl Explainer {
    pub fn new(
        client: kube::Client,
        instance: String,
        repeat_after: Duration,
        publish_timeout: Duration,
    ) -> Self {
        let reporter = Reporter {
            controller: "baton-controller".into(),
            instance: Some(instance),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            repeats: RepeatFilter {
                repeat_after,
                published: Mutex::default(),
            },
            publish_timeout,
        }
    }

    /// Logs the explanation and publishes it as an Event on `object`, unless the same note was
    /// published for the same object and reason less than `repeat_after` ago.
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
            reason: explanation.reason.clone(),
            note: Some(truncate(&explanation.note, 1000)),
            action: explanation.action.clone(),
            secondary: None,
        };
        let published = bounded(
            self.publish_timeout,
            "publishing an Event",
            self.recorder.publish(&event, object),
        )
        .await;
        let error = match published {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error.to_string(),
            Err(timed_out) => timed_out.to_string(),
        };
        tracing::warn!(object = name, %error, "could not publish an Event");
        self.repeats.forget(&key);
    }

    fn key(object: &ObjectReference, explanation: &Explanation) -> (String, String) {
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
}
