//! A group's rollout over time, for the status page's picture of it: each pod's replacement
//! from its deletion to its successor Ready, the soaks, checks and other waits as spans, and
//! the halts and rollbacks as marks.
//!
//! Why it is recorded rather than computed: the caches hold the present only. The leader sees
//! each step as it happens — a deletion it made, a pod its caches show Ready at the update
//! revision, the wait its pass reports — so it records them here as it reconciles, and the
//! page draws what was recorded. Like the rest of the leader's history it lives in memory: a
//! new leader starts a fresh picture.
//!
//! Why it is bounded: a long-lived controller must not grow with the rollouts it has seen.
//! Per group at most [`SPANS_KEPT`] spans and [`MARKS_KEPT`] marks are kept, each note cut
//! to [`NOTE_CHARS`] characters, and at most [`GROUPS_KEPT`] groups; the oldest go first
//! (the oldest span, the oldest mark, the group whose latest record is oldest). The page says
//! how many spans were dropped, so a picture that starts late says so.

use std::collections::{HashMap, VecDeque};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::explained::Explained;
use crate::pass::Pass;
use crate::rollout::GroupSnapshot;

/// Spans kept per group: a 3-zone group of 50 pods each, two spans per pod (the replacement,
/// the wait for it), fits one rollout and a bit.
pub const SPANS_KEPT: usize = 400;
/// Marks (halts, rollbacks) kept per group.
pub const MARKS_KEPT: usize = 20;
/// Groups with a timeline kept at once.
pub const GROUPS_KEPT: usize = 32;
/// Characters kept of a note (a wait's message, a rollback's reason): annotation values a
/// namespace user writes can be long.
pub const NOTE_CHARS: usize = 200;

/// A group's recorded rollout, as the status document carries it (`groups[].timeline`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// When this replica started recording the group (it leads since then, or the group
    /// appeared then).
    pub recorded_since: Timestamp,
    /// Oldest first (by start).
    pub spans: Vec<Span>,
    /// Oldest first.
    pub marks: Vec<Mark>,
    /// Spans dropped, oldest first, to stay within [`SPANS_KEPT`].
    pub dropped_spans: u64,
}

/// Something that lasted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    pub kind: SpanKind,
    /// The zone it concerns; none for a wait about several.
    pub statefulset: Option<String>,
    /// The pod replaced, for a replacement.
    pub pod: Option<String>,
    /// The wait's stable kind (`Soak`, `HealthCheck`, `MaxUnavailable`, …), for a wait.
    pub reason: Option<String>,
    /// The wait's latest message, cut to [`NOTE_CHARS`].
    pub note: Option<String>,
    pub start: Timestamp,
    /// None while it lasts.
    pub end: Option<Timestamp>,
}

/// What a span is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SpanKind {
    /// A pod deleted by baton, until its successor runs the update revision and is Ready (or
    /// the same pod is deleted again).
    Replacement,
    /// The group waits for a soak (`Soak`).
    Soak,
    /// The group waits for a gate's check: a health check (`HealthCheck`) or a hook (`Hook`).
    Check,
    /// The group waits for anything else (`reason` says what).
    Wait,
}

impl SpanKind {
    /// The word of the JSON document, for the page.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replacement => "replacement",
            Self::Soak => "soak",
            Self::Check => "check",
            Self::Wait => "wait",
        }
    }

    /// The span a wait of `kind` is drawn as.
    fn of_wait(kind: &str) -> Self {
        match kind {
            "Soak" => Self::Soak,
            "HealthCheck" | "Hook" => Self::Check,
            _ => Self::Wait,
        }
    }
}

/// Something that happened at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mark {
    pub kind: MarkKind,
    pub at: Timestamp,
    /// The zone it concerns, if one.
    pub statefulset: Option<String>,
    /// Why, in words (the halt's wait message, the rollback's reason), cut to [`NOTE_CHARS`].
    pub note: String,
}

/// What a mark is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MarkKind {
    /// The group became halted: a person must act.
    Halt,
    /// A rollback started.
    Rollback,
}

impl MarkKind {
    /// The word of the JSON document, for the page.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Halt => "halt",
            Self::Rollback => "rollback",
        }
    }
}

/// The wait one pass reports, as the timeline records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitSeen {
    /// The stable kind ([`Explained::kind`]).
    pub kind: &'static str,
    pub statefulset: Option<String>,
    pub message: String,
    /// The wait halts the group (a person must act).
    pub halts: bool,
}

impl WaitSeen {
    /// The wait `pass` reports: the gate's hold, else the planner's (as [`Pass::waiting`]).
    pub fn of_pass(pass: &Pass) -> Option<Self> {
        match (&pass.gate_wait, &pass.plan.waiting) {
            (Some(wait), _) => Some(Self::of(wait, wait.halts())),
            (None, Some(reason)) => Some(Self::of(reason, false)),
            (None, None) => None,
        }
    }

    fn of(wait: &impl Explained, halts: bool) -> Self {
        Self {
            kind: wait.kind(),
            statefulset: wait.statefulset().map(str::to_owned),
            message: wait.to_string(),
            halts,
        }
    }
}

/// Every group's timeline, bounded (see the module header). Pure data: the controller's
/// status board holds one behind its lock and feeds it from the leader's reconciles.
#[derive(Debug, Clone, Default)]
pub struct Timelines {
    groups: HashMap<String, Recorder>,
}

/// One group's timeline while it is recorded.
#[derive(Debug, Clone)]
struct Recorder {
    since: Timestamp,
    /// When something was last recorded: the group recorded longest ago goes first.
    touched: Timestamp,
    /// Oldest first, each with the uid of the pod whose deletion opened it (a replacement).
    spans: VecDeque<(Span, Option<String>)>,
    marks: VecDeque<Mark>,
    dropped: u64,
    /// The open wait halts the group (its halt is marked).
    halted: bool,
}

impl Timelines {
    /// Baton deleted `pod` (uid `uid`) of `statefulset` at `at`: its replacement starts. A
    /// replacement of the same pod still open ends there (its successor never became Ready).
    pub fn deleted(&mut self, group: &str, statefulset: &str, pod: &str, uid: &str, at: Timestamp) {
        let recorder = self.recorder(group, at);
        for (span, _) in recorder.open_mut(SpanKind::Replacement) {
            if span.pod.as_deref() == Some(pod) && span.statefulset.as_deref() == Some(statefulset)
            {
                span.end = Some(at);
            }
        }
        recorder.push(
            Span {
                kind: SpanKind::Replacement,
                statefulset: Some(statefulset.to_owned()),
                pod: Some(pod.to_owned()),
                reason: None,
                note: None,
                start: at,
                end: None,
            },
            Some(uid.to_owned()),
        );
    }

    /// What one pass of the leader saw at `now`: the group as its caches show it (a pod that
    /// replaced a deleted one, now Ready at its zone's update revision, ends the replacement)
    /// and the wait the pass reports (the same kind in the same zone continues a wait span,
    /// anything else ends it and starts the next; a wait that halts, after one that did not,
    /// is marked).
    pub fn observe(&mut self, snapshot: &GroupSnapshot, waiting: Option<WaitSeen>, now: Timestamp) {
        let group = snapshot.name.as_str();
        let open = self.groups.get_mut(group).map(|recorder| {
            recorder.end_replacements(snapshot, now);
            recorder.open_wait().cloned()
        });
        let open = open.flatten();
        let continues = |open: &Span, waiting: &WaitSeen| {
            open.reason.as_deref() == Some(waiting.kind) && open.statefulset == waiting.statefulset
        };
        match (&open, &waiting) {
            (None, None) => {}
            (Some(open), Some(waiting)) if continues(open, waiting) => {
                let note = cut(&waiting.message);
                if let Some(span) = self.recorder(group, now).open_wait_mut() {
                    span.note = Some(note);
                }
            }
            _ => {
                let recorder = self.recorder(group, now);
                let was_halted = std::mem::take(&mut recorder.halted);
                if let Some(span) = recorder.open_wait_mut() {
                    span.end = Some(now);
                }
                if let Some(waiting) = waiting {
                    recorder.halted = waiting.halts;
                    if waiting.halts && !was_halted {
                        recorder.mark(Mark {
                            kind: MarkKind::Halt,
                            at: now,
                            statefulset: waiting.statefulset.clone(),
                            note: cut(&waiting.message),
                        });
                    }
                    recorder.push(
                        Span {
                            kind: SpanKind::of_wait(waiting.kind),
                            statefulset: waiting.statefulset,
                            pod: None,
                            reason: Some(waiting.kind.to_owned()),
                            note: Some(cut(&waiting.message)),
                            start: now,
                            end: None,
                        },
                        None,
                    );
                }
            }
        }
    }

    /// A rollback of `group` started at `at`, with `statefulset` first, because `why`.
    pub fn rollback(&mut self, group: &str, statefulset: Option<&str>, why: &str, at: Timestamp) {
        self.recorder(group, at).mark(Mark {
            kind: MarkKind::Rollback,
            at,
            statefulset: statefulset.map(str::to_owned),
            note: cut(why),
        });
    }

    /// Forgets `group` (it is gone).
    pub fn forget(&mut self, group: &str) {
        self.groups.remove(group);
    }

    /// What was recorded of `group`, if anything.
    pub fn timeline(&self, group: &str) -> Option<Timeline> {
        let recorder = self.groups.get(group)?;
        Some(Timeline {
            recorded_since: recorder.since,
            spans: recorder
                .spans
                .iter()
                .map(|(span, _)| span.clone())
                .collect(),
            marks: recorder.marks.iter().cloned().collect(),
            dropped_spans: recorder.dropped,
        })
    }

    /// The groups recorded, in no order.
    pub fn groups(&self) -> impl Iterator<Item = &str> {
        self.groups.keys().map(String::as_str)
    }

    /// `group`'s recorder, touched at `now`; a new one makes room first by forgetting the
    /// group recorded longest ago.
    fn recorder(&mut self, group: &str, now: Timestamp) -> &mut Recorder {
        if !self.groups.contains_key(group) && self.groups.len() >= GROUPS_KEPT {
            let oldest = self
                .groups
                .iter()
                .min_by_key(|(name, recorder)| (recorder.touched, name.as_str()))
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                self.groups.remove(&oldest);
            }
        }
        let recorder = self
            .groups
            .entry(group.to_owned())
            .or_insert_with(|| Recorder {
                since: now,
                touched: now,
                spans: VecDeque::new(),
                marks: VecDeque::new(),
                dropped: 0,
                halted: false,
            });
        recorder.touched = recorder.touched.max(now);
        recorder
    }
}

impl Recorder {
    fn push(&mut self, span: Span, uid: Option<String>) {
        self.spans.push_back((span, uid));
        while self.spans.len() > SPANS_KEPT {
            self.spans.pop_front();
            self.dropped += 1;
        }
    }

    fn mark(&mut self, mark: Mark) {
        self.marks.push_back(mark);
        while self.marks.len() > MARKS_KEPT {
            self.marks.pop_front();
        }
    }

    fn open_mut(&mut self, kind: SpanKind) -> impl Iterator<Item = &mut (Span, Option<String>)> {
        self.spans
            .iter_mut()
            .filter(move |(span, _)| span.kind == kind && span.end.is_none())
    }

    /// The wait span still open (at most one: each new wait ends the one before).
    fn open_wait(&self) -> Option<&Span> {
        self.spans
            .iter()
            .rev()
            .map(|(span, _)| span)
            .find(|span| span.kind != SpanKind::Replacement && span.end.is_none())
    }

    fn open_wait_mut(&mut self) -> Option<&mut Span> {
        self.spans
            .iter_mut()
            .rev()
            .map(|(span, _)| span)
            .find(|span| span.kind != SpanKind::Replacement && span.end.is_none())
    }

    /// Ends each open replacement whose pod is back: another pod of that name (another uid)
    /// at its zone's update revision, Ready and not terminating. It ended when it became
    /// Ready, if the pod says so (kept within the span and `now`), else now.
    fn end_replacements(&mut self, snapshot: &GroupSnapshot, now: Timestamp) {
        for (span, uid) in self.open_mut(SpanKind::Replacement) {
            let member = snapshot
                .statefulsets
                .iter()
                .find(|member| Some(member.name.as_str()) == span.statefulset.as_deref());
            let Some(member) = member else { continue };
            let back = member.pods.iter().find(|pod| {
                Some(pod.name.as_str()) == span.pod.as_deref()
                    && Some(&pod.uid) != uid.as_ref()
                    && pod.revision.is_some()
                    && pod.revision == member.update_revision
                    && pod.ready
                    && !pod.terminating
            });
            if let Some(pod) = back {
                let ready = pod.ready_since.unwrap_or(now);
                span.end = Some(ready.clamp(span.start, now.max(span.start)));
            }
        }
    }
}

/// `note` cut to [`NOTE_CHARS`] characters, an ellipsis saying it was.
fn cut(note: &str) -> String {
    match note.char_indices().nth(NOTE_CHARS) {
        Some((end, _)) => format!("{}…", &note[..end]),
        None => note.to_owned(),
    }
}

#[cfg(test)]
mod tests;
