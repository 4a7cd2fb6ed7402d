//! `pause ZONE` and `resume ZONE`: the annotation changes are decided by a pure function of the
//! StatefulSet's annotations, applied in one merge patch, and printed as what changed.
//!
//! Pausing sets `grafana.com/rollout-paused: "true"` (the Go operator's key: the planner
//! deletes no pod of a paused zone and moves on). Resuming removes it and, as it is what a
//! person resumes from, the gates' `baton.dev/halted` on that StatefulSet; a halt on another
//! member still holds the group, and the output names it.
//!
//! Across member clusters (`--cluster`) ZONE is named as the group names it,
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

use baton_core::commands::Reach;
use baton_core::gates;
use baton_core::rollout::GroupSnapshot;

use crate::access::{AccessError, History};
use crate::render;
use crate::scope::{GroupRead, Scope};

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

/// Applies `command` to `name`: a StatefulSet of a group (as the group names it), else a
/// rollout group, each of whose members it pauses or resumes. Returns the lines to print.
pub async fn run(scope: &Scope, name: &str, command: Command) -> Result<Vec<String>, AccessError> {
    let zone = scope.grouped_statefulset(name).await;
    // Not a StatefulSet, and a plain name (a zone across clusters is `cluster/statefulset`):
    // perhaps the group; if no group can be read by that name, the StatefulSet's error stands
    // (it names what was asked for).
    let may_be_group = !name.contains(baton_core::clusters::SEPARATOR)
        && matches!(
            zone,
            Err(AccessError::NoSuchStatefulSet { .. } | AccessError::Clusters(_))
        );
    if may_be_group && let Ok(read) = scope.read_group(name, History::Without).await {
        return run_on_group(scope, read, command).await;
    }
    let (statefulset, group) = zone?;
    // Resume says which other member still halts the group: across members, on the whole group
    // as read before anything is written.
    let others = match (command, scope) {
        (Command::Resume, Scope::Clusters(_)) => Some(
            scope
                .read_group_to_write(&group, History::Without)
                .await?
                .statefulsets,
        ),
        _ => None,
    };
    let mut lines = apply(scope, name, &group, statefulset.annotations(), command).await?;
    let reach = scope.reach();
    match command {
        Command::Pause => lines.push(pause_holds(name, &group, &reach)),
        Command::Resume => {
            // The halt of any member holds the whole group: say who still holds it, and what
            // resuming does not lift.
            let members = match (others, scope) {
                (Some(members), _) => members,
                (None, Scope::One(access)) => access.group_members(&group).await?,
                (None, Scope::Clusters(_)) => unreachable!("read before the write"),
            };
            lines.extend(still_halted(&group, name, &members, &reach));
            lines.extend(still_invalid(&group, &members, scope));
        }
    }
    Ok(lines)
}

/// `command` on every member of the group `read`: a pause holds the whole group (each member
/// paused), a resume lifts every member's pause and halt.
async fn run_on_group(
    scope: &Scope,
    read: GroupRead,
    command: Command,
) -> Result<Vec<String>, AccessError> {
    let group = read.group.clone();
    let mut lines = Vec::new();
    for member in &read.statefulsets {
        let name = member.name_any();
        lines.extend(apply(scope, &name, &group, member.annotations(), command).await?);
    }
    let reach = scope.reach();
    match command {
        Command::Pause => lines.push(format!(
            "rollout group {group} is paused: no pod of its {} members is deleted until \
             {} (a StatefulSet that joins the group later is not paused)",
            read.statefulsets.len(),
            reach.baton(&format!("resume {group}"))
        )),
        Command::Resume => lines.extend(still_invalid(&group, &read.statefulsets, scope)),
    }
    Ok(lines)
}

/// Makes `command`'s changes on StatefulSet `name` (as the group names it, with
/// `annotations`); the lines saying what changed, or that nothing did.
async fn apply(
    scope: &Scope,
    name: &str,
    group: &str,
    annotations: &BTreeMap<String, String>,
    command: Command,
) -> Result<Vec<String>, AccessError> {
    let changes = match command {
        Command::Pause => pause(annotations),
        Command::Resume => resume(annotations),
    };
    let target = render::statefulset(name);
    if changes.is_empty() {
        let state = match command {
            Command::Pause => "already paused",
            Command::Resume => "neither paused nor halted",
        };
        return Ok(vec![format!(
            "{target} (rollout group {group}) is {state}: nothing changed"
        )]);
    }
    let patch: Vec<(&str, Option<&str>)> = changes
        .iter()
        .map(|change| (change.key, change.to.as_deref()))
        .collect();
    scope.patch_annotations(name, &patch).await?;
    Ok(changes
        .iter()
        .map(|change| format!("{target}: {change}"))
        .collect())
}

/// What pausing one zone holds, and what it does not (the Go operator's pause: the zone's own
/// deletions only), with the command that holds the whole group.
fn pause_holds(zone: &str, group: &str, reach: &Reach) -> String {
    format!(
        "a pause holds only {zone}'s own pods: the other zones of rollout group {group} go on, \
         and a zone after {zone} may roll past it; to hold the whole group: {}",
        reach.baton(&format!("pause {group}"))
    )
}

/// The other members of `group` still halting it, each with the command that resumes it.
fn still_halted(
    group: &str,
    resumed: &str,
    members: &[k8s_openapi::api::apps::v1::StatefulSet],
    reach: &Reach,
) -> Vec<String> {
    let mut lines = Vec::new();
    for member in members {
        let name = member.name_any();
        if name == resumed {
            continue;
        }
        if let Some(why) = member.annotations().get(HALTED_ANNOTATION) {
            lines.push(format!(
                "rollout group {group} is still halted by {} ({why}): {}",
                render::statefulset(&name),
                reach.baton(&format!("resume {name}"))
            ));
        }
    }
    lines
}

/// What holds `group` (of `members`, as read) that resuming does not lift: an annotation that
/// cannot be read, named with how to fix it.
fn still_invalid(
    group: &str,
    members: &[k8s_openapi::api::apps::v1::StatefulSet],
    scope: &Scope,
) -> Option<String> {
    let mut snapshot = GroupSnapshot::from_kubernetes(group, members, std::iter::empty());
    snapshot.reach = scope.reach();
    let (config, _) = gates::keys::read(&snapshot);
    gates::decide::invalid_configuration(&snapshot, &config).map(|wait| {
        format!("rollout group {group} is still held, and resume does not lift it: {wait}")
    })
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
        let across = Reach {
            namespace: "mimir".to_owned(),
            clusters: vec!["cluster-a".to_owned(), "cluster-b".to_owned()],
            reader: baton_core::commands::Reader {
                member_contexts: [("cluster-b".to_owned(), "prod-us".to_owned())].into(),
                ..Default::default()
            },
        };
        assert_eq!(
            still_halted("querier", "cluster-b/querier", &members, &across),
            [
                "rollout group querier is still halted by statefulset/querier in cluster cluster-a \
             (error rate 0.3): kubectl baton resume cluster-a/querier -n mimir --cluster cluster-a \
             --cluster cluster-b=prod-us"
            ]
        );
        let one = [member("a", Some("why")), member("b", None)];
        let here = Reach::of("mimir", ["a", "b"]);
        assert_eq!(
            still_halted("g", "b", &one, &here),
            [
                "rollout group g is still halted by statefulset/a (why): kubectl baton resume a -n mimir"
            ]
        );
    }

    #[test]
    fn a_zone_pause_says_what_it_does_not_hold_and_how_to_hold_the_group() {
        let text = pause_holds(
            "ingester-zone-b",
            "ingester",
            &Reach::of("mimir", ["ingester-zone-b"]),
        );
        assert_eq!(
            text,
            "a pause holds only ingester-zone-b's own pods: the other zones of rollout group \
             ingester go on, and a zone after ingester-zone-b may roll past it; to hold the whole \
             group: kubectl baton pause ingester -n mimir"
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
