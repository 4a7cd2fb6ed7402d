//! `pause ZONE` and `resume ZONE`: the annotation changes are decided by a pure function of the
//! StatefulSet's annotations, applied in one merge patch, and printed as what changed.
//!
//! Pausing sets `grafana.com/rollout-paused: "true"` (the Go operator's key: the planner
//! deletes no pod of a paused zone and moves on). Resuming removes it and, as it is what a
//! person resumes from, the gates' `baton.dev/halted` on that StatefulSet; a halt on another
//! member still holds the group, and the output names it.

use std::collections::BTreeMap;
use std::fmt;

use baton_core::annotations::ROLLOUT_PAUSED_ANNOTATION;
use baton_core::gates::HALTED_ANNOTATION;
use kube::ResourceExt;

use crate::access::{Access, AccessError};

/// One annotation's change: from its old value (if any) to its new one (None: removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: &'static str,
    pub from: Option<String>,
    pub to: Option<String>,
}

impl fmt::Display for Change {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.from, &self.to) {
            (None, Some(to)) => write!(formatter, "{} set to {to:?}", self.key),
            (Some(from), Some(to)) => {
                write!(formatter, "{} changed from {from:?} to {to:?}", self.key)
            }
            (Some(from), None) => write!(formatter, "{} removed (was {from:?})", self.key),
            (None, None) => write!(formatter, "{} unchanged", self.key),
        }
    }
}

/// What `pause` changes on a StatefulSet with `annotations`.
pub fn pause(annotations: &BTreeMap<String, String>) -> Vec<Change> {
    let current = annotations.get(ROLLOUT_PAUSED_ANNOTATION);
    if current.map(String::as_str) == Some("true") {
        return Vec::new();
    }
    vec![Change {
        key: ROLLOUT_PAUSED_ANNOTATION,
        from: current.cloned(),
        to: Some("true".to_owned()),
    }]
}

/// What `resume` changes on a StatefulSet with `annotations`.
pub fn resume(annotations: &BTreeMap<String, String>) -> Vec<Change> {
    [ROLLOUT_PAUSED_ANNOTATION, HALTED_ANNOTATION]
        .into_iter()
        .filter_map(|key| {
            annotations.get(key).map(|from| Change {
                key,
                from: Some(from.clone()),
                to: None,
            })
        })
        .collect()
}

/// Pause or resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Pause,
    Resume,
}

/// Applies `command` to StatefulSet `zone`; returns what to print.
pub async fn run(access: &Access, zone: &str, command: Command) -> Result<String, AccessError> {
    let (statefulset, group) = access.grouped_statefulset(zone).await?;
    let annotations = statefulset.annotations();
    let changes = match command {
        Command::Pause => pause(annotations),
        Command::Resume => resume(annotations),
    };
    let mut text = String::new();
    if changes.is_empty() {
        let state = match command {
            Command::Pause => "already paused",
            Command::Resume => "neither paused nor halted",
        };
        text.push_str(&format!(
            "statefulset/{zone} (rollout group {group}) is {state}: nothing changed\n"
        ));
    } else {
        let patch: Vec<(&str, Option<&str>)> = changes
            .iter()
            .map(|change| (change.key, change.to.as_deref()))
            .collect();
        access.patch_annotations(zone, &patch).await?;
        for change in &changes {
            text.push_str(&format!("statefulset/{zone}: {change}\n"));
        }
    }
    if command == Command::Resume {
        // The halt of any member holds the whole group: say who still holds it.
        let members = access.group_members(&group).await?;
        for member in members {
            let name = member.name_any();
            if name == zone {
                continue;
            }
            if let Some(why) = member.annotations().get(HALTED_ANNOTATION) {
                text.push_str(&format!(
                    "rollout group {group} is still halted by statefulset/{name} ({why}): \
                     kubectl baton resume {name}\n"
                ));
            }
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn pause_sets_the_go_operators_key_once() {
        let changes = pause(&annotations(&[]));
        assert_eq!(
            changes,
            [Change {
                key: ROLLOUT_PAUSED_ANNOTATION,
                from: None,
                to: Some("true".to_owned())
            }]
        );
        assert_eq!(
            changes[0].to_string(),
            "grafana.com/rollout-paused set to \"true\""
        );
        assert!(pause(&annotations(&[(ROLLOUT_PAUSED_ANNOTATION, "true")])).is_empty());
        let changed = pause(&annotations(&[(ROLLOUT_PAUSED_ANNOTATION, "false")]));
        assert_eq!(
            changed[0].to_string(),
            "grafana.com/rollout-paused changed from \"false\" to \"true\""
        );
    }

    #[test]
    fn resume_removes_the_pause_and_the_halt() {
        let changes = resume(&annotations(&[
            (ROLLOUT_PAUSED_ANNOTATION, "true"),
            (HALTED_ANNOTATION, "hook answered 500"),
            ("other", "kept"),
        ]));
        let printed: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(
            printed,
            [
                "grafana.com/rollout-paused removed (was \"true\")",
                "baton.dev/halted removed (was \"hook answered 500\")",
            ]
        );
        assert!(resume(&annotations(&[("other", "kept")])).is_empty());
    }
}
