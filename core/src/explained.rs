//! What baton tells people about a group, in one shape: why the planner or a gate holds it
//! ([`crate::rollout::WaitReason`], [`crate::gates::GateWait`]), what a person should fix
//! ([`crate::rollout::Warning`], [`crate::gates::GateWarning`]) and what a gate let go
//! ([`crate::gates::GateNotice`]). Each has a kind, the StatefulSet it is about and a message;
//! one trait so that whoever tells (Events, metrics, the status page, `kubectl baton`) reads
//! them all alike, and so that what a kind is, and that it never changes, is said once.

use std::fmt;

/// Something baton explains: [`Display`](fmt::Display) is the sentence a person reads.
pub trait Explained: fmt::Display {
    /// A short, stable identifier (CamelCase, like Kubernetes Event reasons): metric labels,
    /// Event reasons and the status JSON carry it, and dashboards and alerts match on it.
    /// Never change one.
    fn kind(&self) -> &'static str;

    /// The StatefulSet it is about, where its Event goes: none when it is about several (a
    /// group waiting for more than one zone). The enums that always name one also say so in
    /// an inherent `statefulset()` returning `&str`.
    fn statefulset(&self) -> Option<&str>;

    /// Its kind and its message, as the leader's status board records a wait.
    fn kind_and_message(&self) -> (&'static str, String) {
        (self.kind(), self.to_string())
    }
}

/// How important what baton tells is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Progress and expected waits.
    Normal,
    /// Something a person must fix (a bad annotation, a group that cannot roll).
    Warning,
}

/// One thing to tell about one object: an Event's type, reason, action and sentence.
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

impl Explanation {
    /// The Event of a warning, the planner's or a gate's: a person should fix what it names.
    pub fn of_warning(warning: &impl Explained) -> Self {
        Self {
            severity: Severity::Warning,
            reason: warning.kind().to_owned(),
            action: "Validate".to_owned(),
            note: warning.to_string(),
        }
    }
}
