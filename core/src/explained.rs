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

/// `text`, written by someone else (a member cluster's API server, a proxy between, whoever
/// wrote its kubeconfig), as a message may show it: each control character escaped (`\n`,
/// `\u{1b}`), at most `most_chars` characters of that shown (an ellipsis says it went on), so that it can neither
/// flood an Event or the status page nor forge lines or terminal escapes in them.
pub fn quoted(text: &str, most_chars: usize) -> String {
    let mut shown = String::new();
    let mut count = 0;
    for character in text.chars() {
        let piece: String = if character.is_control() {
            character.escape_debug().collect()
        } else {
            character.into()
        };
        let length = piece.chars().count();
        if count + length > most_chars {
            shown.push('…');
            break;
        }
        shown.push_str(&piece);
        count += length;
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::quoted;

    #[test]
    fn quoted_text_is_bounded_and_its_control_characters_escaped() {
        assert_eq!(quoted("connection refused", 100), "connection refused");
        assert_eq!(
            quoted("line\nforged: \u{1b}[31mred\r\t", 100),
            "line\\nforged: \\u{1b}[31mred\\r\\t"
        );
        assert_eq!(quoted("abcdef", 3), "abc…");
        assert_eq!(quoted("abc", 3), "abc");
        // An escape is shown whole or not at all.
        assert_eq!(quoted("ab\ncd", 3), "ab…");
        // Counted in characters, not bytes.
        assert_eq!(quoted("ééé", 2), "éé…");
        assert_eq!(quoted(&"x".repeat(100_000), 500).chars().count(), 501);
    }
}
