//! `pause ZONE` and `resume ZONE`: the annotation changes are decided by a pure function of the
//! StatefulSet's annotations, applied in one merge patch, and printed as what changed.
//!
//! Pausing sets `grafana.com/rollout-paused: "true"` (the Go operator's key: the planner
//! deletes no pod of a paused zone and moves on). Resuming removes it and, as it is what a
//! person resumes from, the gates' `baton.dev/halted` on that StatefulSet; a halt on another
//! member still holds the group, and the output names it.
//!
//! Across member clusters (`--member`) ZONE is named as the group names it,
//! `cluster-c/querier`, and the write goes to cluster-c's context under the name `querier`.
//! `pause` reads only the zone it pauses: a pause only takes deletions away, so it works while
//! another member is out (the brake must not wait for the cluster that is away). `resume` reads
//! every member first, to say which other member still halts the group: a member that cannot be
//! read refuses it, nothing written.

use std::collections::BTreeMap;
use std::fmt;

use baton_core::annotations::ROLLOUT_PAUSED_ANNOTATION;
use baton_core::gates::HALTED_ANNOTATION;
use kube::ResourceExt;

use crate::access::{AccessError, History};
use crate::render;
use crate::scope::Scope;

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

/// Applies `command` to StatefulSet `zone` (as the group names it); returns the lines to print.
pub async fn run(scope: &Scope, zone: &str, command: Command) -> Result<Vec<String>, AccessError> {
    let (statefulset, group) = scope.grouped_statefulset(zone).await?;
    // Resume says which other member still halts the group: across members, on the whole group
    // as read before anything is written.
    let others = match (command, scope) {
        (Command::Resume, Scope::Members(_)) => Some(
            scope
                .read_group_to_write(&group, History::Without)
                .await?
                .statefulsets,
        ),
        _ => None,
    };
    let annotations = statefulset.annotations();
    let changes = match command {
        Command::Pause => pause(annotations),
        Command::Resume => resume(annotations),
    };
    let target = render::statefulset(zone);
    let mut lines = Vec::new();
    if changes.is_empty() {
        let state = match command {
            Command::Pause => "already paused",
            Command::Resume => "neither paused nor halted",
        };
        lines.push(format!(
            "{target} (rollout group {group}) is {state}: nothing changed"
        ));
    } else {
        let patch: Vec<(&str, Option<&str>)> = changes
            .iter()
            .map(|change| (change.key, change.to.as_deref()))
            .collect();
        scope.patch_annotations(zone, &patch).await?;
        lines.extend(changes.iter().map(|change| format!("{target}: {change}")));
    }
    if command == Command::Resume {
        // The halt of any member holds the whole group: say who still holds it.
        let members = match (others, scope) {
            (Some(members), _) => members,
            (None, Scope::One(access)) => access.group_members(&group).await?,
            (None, Scope::Members(_)) => unreachable!("read before the write"),
        };
        lines.extend(still_halted(&group, zone, &members, &scope.flags()));
    }
    Ok(lines)
}

/// The other members of `group` still halting it, each with the command that resumes it
/// (`flags`: what the command needs after its arguments, `--member …` across clusters).
fn still_halted(
    group: &str,
    resumed: &str,
    members: &[k8s_openapi::api::apps::v1::StatefulSet],
    flags: &str,
) -> Vec<String> {
    let mut lines = Vec::new();
    for member in members {
        let name = member.name_any();
        if name == resumed {
            continue;
        }
        if let Some(why) = member.annotations().get(HALTED_ANNOTATION) {
            lines.push(format!(
                "rollout group {group} is still halted by {} ({why}): \
                 kubectl baton resume {name}{flags}",
                render::statefulset(&name)
            ));
        }
    }
    lines
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
    fn resume_names_each_other_member_still_halting_with_the_command_for_it() {
        let member = |name: &str, halted: Option<&str>| {
            let mut statefulset = k8s_openapi::api::apps::v1::StatefulSet::default();
            statefulset.metadata.name = Some(name.to_owned());
            statefulset.metadata.annotations = halted
                .map(|why| annotations(&[(HALTED_ANNOTATION, why)]))
                .filter(|annotations| !annotations.is_empty());
            statefulset
        };
        let members = [
            member("cluster-a/querier", Some("error rate 0.3")),
            member("cluster-b/querier", Some("resumed now")),
            member("cluster-c/querier", None),
        ];
        assert_eq!(
            still_halted(
                "querier",
                "cluster-b/querier",
                &members,
                " --member cluster-a --member cluster-b=prod-us"
            ),
            [
                "rollout group querier is still halted by statefulset/querier in cluster cluster-a \
             (error rate 0.3): kubectl baton resume cluster-a/querier --member cluster-a \
             --member cluster-b=prod-us"
            ]
        );
        let one = [member("a", Some("why")), member("b", None)];
        assert_eq!(
            still_halted("g", "b", &one, ""),
            ["rollout group g is still halted by statefulset/a (why): kubectl baton resume a"]
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
