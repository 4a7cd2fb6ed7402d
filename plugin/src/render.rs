//! Text for people and documents for programs: pure functions from a view (or a plan) to the
//! lines to print, so every output is unit tested without a cluster. They hand what namespace
//! users wrote over as it is: [`crate::output`] escapes every line on its way out. Tables are
//! laid out the way kubectl lays out its own (Go's text/tabwriter, here its port `tabwriter`).

use std::io::Write;

use baton_core::explained::Explained;
use baton_core::gates::GateDecision;
use baton_core::rollout::{Action, Plan};
use baton_core::status::{GroupStatus, RolloutStatus, ZoneStatus};
use tabwriter::TabWriter;

use crate::output;

/// `-o` of `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

/// The `status` output: the controller's status document (docs/status.md), as a table or as is.
pub fn status(document: &RolloutStatus, format: Format) -> Vec<String> {
    match format {
        Format::Table => status_table(&document.groups),
        Format::Json => output::lines_of(
            &serde_json::to_string_pretty(document).expect("a document of strings and numbers"),
        ),
        Format::Yaml => output::lines_of(
            &serde_saphyr::to_string(document).expect("a document of strings and numbers"),
        ),
    }
}

/// A StatefulSet as kubectl takes it: `statefulset/querier`, and for a member of a group across
/// clusters (`cluster-b/querier`) `statefulset/querier in cluster cluster-b`.
pub fn statefulset(name: &str) -> String {
    match baton_core::clusters::split(name) {
        (Some(cluster), local) => format!("statefulset/{local} in cluster {cluster}"),
        (None, local) => format!("statefulset/{local}"),
    }
}

/// What `status` says of a namespace without any rollout group, read at `read_where` (a
/// context, or member clusters).
pub fn no_groups(namespace: &str, read_where: &str) -> String {
    format!(
        "no rollout group in namespace {namespace} ({read_where}): no StatefulSet there has the \
         label {}; another namespace? (-n NAMESPACE)",
        baton_core::annotations::ROLLOUT_GROUP_LABEL
    )
}

/// What `status -A` says of a cluster without any rollout group, read at `read_where`.
pub fn no_groups_anywhere(read_where: &str) -> String {
    format!(
        "no rollout group in any namespace ({read_where}): no StatefulSet has the label {}",
        baton_core::annotations::ROLLOUT_GROUP_LABEL
    )
}

/// One row per zone, then one line per group saying why it waits.
pub fn status_table(groups: &[GroupStatus]) -> Vec<String> {
    let header = ["GROUP", "ZONE", "PHASE", "UPDATED", "READY", "REVISION"].map(String::from);
    let rows = groups.iter().flat_map(|group| {
        group.zones.iter().map(|zone| {
            vec![
                named(group),
                zone.statefulset.clone(),
                zone.phase.as_str().to_owned(),
                format!("{}/{}", zone.updated, zone.total),
                format!("{}/{}", zone.ready, zone.total),
                revisions(zone),
            ]
        })
    });
    let mut lines = table(std::iter::once(header.to_vec()).chain(rows));
    if !groups.is_empty() {
        lines.push(String::new());
    }
    for group in groups {
        lines.push(group_line(group));
        lines.extend(check_line(group));
        lines.extend(warning_lines(group));
    }
    lines
}

/// `ingester: health check error-rate: passed (…) at … (…)`, when the group names a check.
pub fn check_line(group: &GroupStatus) -> Option<String> {
    let check = group.check.as_ref()?;
    Some(format!("{}: health check {}", named(group), check.line()))
}

/// A line per warning of `group`: `ingester: warning (InvalidAnnotation): …`.
pub fn warning_lines(group: &GroupStatus) -> impl Iterator<Item = String> + '_ {
    group.warnings.iter().map(|warning| {
        format!(
            "{}: warning ({}): {}",
            named(group),
            warning.kind,
            warning.message
        )
    })
}

/// `ingester: rolling; waits (NotReady): …`, or `ingester: complete`.
pub fn group_line(group: &GroupStatus) -> String {
    match &group.waiting {
        Some(waiting) => format!(
            "{}: {}; waits ({}): {}",
            named(group),
            group.phase.as_str(),
            waiting.kind,
            waiting.message
        ),
        None => format!("{}: {}", named(group), group.phase.as_str()),
    }
}

/// A group as a person finds it: `namespace/group` when it names its namespace (`status -A`),
/// else its name.
fn named(group: &GroupStatus) -> String {
    match &group.namespace {
        Some(namespace) => format!("{namespace}/{}", group.name),
        None => group.name.clone(),
    }
}

/// One zone in a line, for `wait` off a terminal and for its progress bars' messages.
pub fn zone_line(zone: &ZoneStatus) -> String {
    format!(
        "{} {}: {}/{} updated, {}/{} ready",
        zone.statefulset,
        zone.phase.as_str(),
        zone.updated,
        zone.total,
        zone.ready,
        zone.total
    )
}

/// `old → new` while they differ, else the one revision.
fn revisions(zone: &ZoneStatus) -> String {
    match (&zone.current_revision, &zone.update_revision) {
        (Some(current), Some(update)) if current != update => format!("{current} → {update}"),
        (_, Some(update)) => update.clone(),
        (Some(current), None) => current.clone(),
        (None, None) => "-".to_owned(),
    }
}

/// Rows of cells in aligned columns, three spaces apart, as kubectl prints them. A cell is
/// escaped before it is laid out: a tab or a line break in it would break the columns.
fn table(rows: impl IntoIterator<Item = Vec<String>>) -> Vec<String> {
    let mut table = TabWriter::new(Vec::new()).padding(3);
    for row in rows {
        let cells: Vec<_> = row.iter().map(|cell| output::line(cell)).collect();
        let _ = writeln!(table, "{}", cells.join("\t"));
    }
    let bytes = table.into_inner().expect("writing to memory does not fail");
    output::lines_of(&String::from_utf8(bytes).expect("tabwriter keeps UTF-8"))
}

/// The `plan` output: what the controller would do now and why the rest waits.
pub fn plan(namespace: &str, group: &str, plan: &Plan, gate: &GateDecision) -> Vec<String> {
    let mut lines = vec![format!(
        "Rollout group {group} in namespace {namespace} (a dry run: nothing was changed)"
    )];
    lines.push(String::new());
    if plan.actions.is_empty() {
        lines.push("Next: nothing to do now.".to_owned());
    } else {
        lines.push("Next, in order:".to_owned());
        for action in &plan.actions {
            let why = match action {
                Action::DeletePod {
                    unavailable: None, ..
                } => " — to roll it to the update revision",
                Action::DeletePod { .. } => "",
                Action::SetCurrentRevision { .. } => " — every pod of it is updated",
                Action::SetPartition { .. } => "",
            };
            lines.push(format!("  {action}{why}"));
        }
    }
    let mut waits = Vec::new();
    if let Some(wait) = gate.wait() {
        waits.push(format!("  gate ({}): {wait}", wait.kind()));
    }
    if let Some(wait) = &plan.waiting {
        waits.push(format!("  planner ({}): {wait}", wait.kind()));
    }
    if !waits.is_empty() {
        lines.push(String::new());
        lines.push("Waits:".to_owned());
        lines.extend(waits);
    }
    if let Some(at) = plan.recheck_after.filter(|_| plan.actions.is_empty()) {
        lines.push(String::new());
        lines.push(format!(
            "Looks again at {at} (minReadySeconds or a soak ends)."
        ));
    }
    let warnings: Vec<String> = plan
        .warnings
        .iter()
        .map(ToString::to_string)
        .chain(gate.warnings.iter().map(ToString::to_string))
        .collect();
    if !warnings.is_empty() {
        lines.push(String::new());
        lines.push("Warnings:".to_owned());
        lines.extend(warnings.iter().map(|warning| format!("  {warning}")));
    }
    let header = ["ZONE", "UPDATED", "READY", "DONE"].map(String::from);
    let rows = plan.progress.iter().map(|zone| {
        vec![
            zone.statefulset.clone(),
            format!("{}/{}", zone.updated, zone.total),
            format!("{}/{}", zone.ready, zone.total),
            if zone.done { "yes" } else { "no" }.to_owned(),
        ]
    });
    lines.push(String::new());
    lines.extend(table(std::iter::once(header.to_vec()).chain(rows)));
    lines
}

#[cfg(test)]
mod tests {
    use baton_core::annotations::{CHECK_STATE_ANNOTATION, ROLLOUT_PAUSED_ANNOTATION};
    use baton_core::gates;
    use baton_core::gates::HEALTH_CHECK_ANNOTATION;
    use baton_core::status::{Replica, Role, RolloutPhase};

    use super::*;
    use crate::fixtures::{annotated, group, status_of, zone};

    fn document(groups: Vec<GroupStatus>) -> RolloutStatus {
        RolloutStatus::new(
            "mimir",
            jiff::Timestamp::UNIX_EPOCH,
            Replica {
                identity: "kubectl-baton".to_owned(),
                role: Role::Standby,
            },
            None,
            groups,
        )
    }

    #[test]
    fn a_group_naming_its_namespace_is_shown_as_namespace_slash_group_on_every_line() {
        let mut view = status_of(&group(vec![zone("a", 2, 1)]));
        let bare = view.name.clone();
        view.namespace = Some("tenant-a".to_owned());
        let named = format!("tenant-a/{bare}");
        let lines = status_table(&[view]);
        assert!(lines[1].starts_with(&named), "{lines:?}");
        assert!(
            lines
                .iter()
                .any(|line| line.starts_with(&format!("{named}: "))),
            "{lines:?}"
        );
        assert_eq!(
            no_groups_anywhere("context kind"),
            "no rollout group in any namespace (context kind): no StatefulSet has the label rollout-group"
        );
    }

    #[test]
    fn a_statefulset_is_named_as_kubectl_takes_it_with_its_cluster_across_clusters() {
        assert_eq!(statefulset("querier"), "statefulset/querier");
        assert_eq!(
            statefulset("cluster-b/querier"),
            "statefulset/querier in cluster cluster-b"
        );
    }

    #[test]
    fn the_table_has_a_row_per_zone_aligned_and_a_line_per_group() {
        let mut b = zone("ingester-zone-b", 3, 1);
        b.pods[0].ready = false;
        b.ready_replicas = 2;
        let view = status_of(&group(vec![
            zone("ingester-zone-a", 3, 3),
            b,
            zone("ingester-zone-c", 3, 0),
        ]));
        let lines = status_table(&[view]);
        let text = lines.join("\n");
        assert_eq!(
            lines[..4],
            [
                "GROUP      ZONE              PHASE      UPDATED   READY   REVISION",
                "ingester   ingester-zone-a   complete   3/3       3/3     new",
                "ingester   ingester-zone-b   rolling    1/3       2/3     old → new",
                "ingester   ingester-zone-c   waiting    0/3       3/3     old → new",
            ]
        );
        assert_eq!(lines[4], "");
        assert!(
            lines[5].starts_with("ingester: rolling; waits (MaxUnavailable): max-unavailable reached in ingester-zone-b (1/1); waiting for ingester-zone-b-0 (new revision)"),
            "{text}"
        );
    }

    #[test]
    fn json_and_yaml_are_the_controllers_status_document() {
        let b = annotated(zone("b", 2, 0), ROLLOUT_PAUSED_ANNOTATION, "true");
        let document = document(vec![status_of(&group(vec![zone("a", 2, 2), b]))]);
        let json: serde_json::Value =
            serde_json::from_str(&status(&document, Format::Json).join("\n")).unwrap();
        assert_eq!(json["apiVersion"], "baton.dev/v1alpha1");
        assert_eq!(json["kind"], "RolloutStatus");
        assert_eq!(json["namespace"], "mimir");
        let ingester = &json["groups"][0];
        assert_eq!(ingester["phase"], "paused");
        assert_eq!(ingester["waiting"]["kind"], "Paused");
        assert_eq!(ingester["zones"][1]["statefulset"], "b");
        assert_eq!(ingester["zones"][1]["updated"], 0);
        assert_eq!(ingester["zones"][1]["updateRevision"], "new");
        assert_eq!(ingester["zones"][1]["paused"], true);
        let yaml: serde_json::Value =
            serde_saphyr::from_str(&status(&document, Format::Yaml).join("\n")).unwrap();
        assert_eq!(yaml, json, "the same document either way");
        let back: RolloutStatus = serde_json::from_value(json).unwrap();
        assert_eq!(back, document, "it reads back as the controller's model");
    }

    #[test]
    fn a_group_naming_a_check_shows_its_last_result_and_the_value_seen() {
        let state = r#"{"passes":2,"failures":0,"lastRun":"2026-11-28T10:00:00Z","lastOutcome":"passed (error-rate: 0.01)"}"#;
        let named = |member| {
            let member = annotated(member, HEALTH_CHECK_ANNOTATION, "error-rate");
            annotated(member, CHECK_STATE_ANNOTATION, state)
        };
        let view = status_of(&group(vec![named(zone("a", 2, 2)), named(zone("b", 2, 0))]));
        let text = status_table(std::slice::from_ref(&view)).join("\n");
        assert!(
            text.contains("ingester: health check error-rate: passed (error-rate: 0.01) at 2026-11-28T10:00:00Z (2 in a row passed, 0 failed)"),
            "{text}"
        );
        let document = document(vec![view]);
        let json: serde_json::Value =
            serde_json::from_str(&status(&document, Format::Json).join("\n")).unwrap();
        let check = &json["groups"][0]["check"];
        assert_eq!(check["name"], "error-rate");
        assert_eq!(check["lastResult"], "passed (error-rate: 0.01)");
        assert_eq!(check["passes"], 2);
        // A group naming none has no such line and no such field
        let plain = status_of(&group(vec![zone("a", 1, 1)]));
        assert!(check_line(&plain).is_none());
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("check").is_none(), "{json}");
    }

    #[test]
    fn a_complete_group_says_so_without_a_wait() {
        let view = status_of(&group(vec![zone("a", 1, 1)]));
        assert_eq!(view.phase, RolloutPhase::Complete);
        assert_eq!(group_line(&view), "ingester: complete");
        assert_eq!(
            zone_line(&view.zones[0]),
            "a complete: 1/1 updated, 1/1 ready"
        );
    }

    #[test]
    fn no_groups_is_only_the_header() {
        assert_eq!(
            status_table(&[]),
            ["GROUP   ZONE   PHASE   UPDATED   READY   REVISION"]
        );
    }

    #[test]
    fn the_plan_names_the_next_deletions_and_why_the_rest_waits() {
        let snapshot = group(vec![zone("a", 2, 0), zone("b", 2, 0)]);
        let (planned, gate) = gates::decide(&snapshot, jiff::Timestamp::UNIX_EPOCH);
        let text = plan("mimir", "ingester", &planned, &gate).join("\n") + "\n";
        assert!(
            text.starts_with("Rollout group ingester in namespace mimir (a dry run"),
            "{text}"
        );
        assert!(
            text.contains("  delete pod a-0 of a — to roll it to the update revision\n"),
            "{text}"
        );
        assert!(!text.contains("b-0"), "one zone at a time: {text}");
        assert!(text.contains("\na      0/2       2/2     no\n"), "{text}");

        let paused = annotated(zone("b", 2, 0), ROLLOUT_PAUSED_ANNOTATION, "true");
        let snapshot = group(vec![zone("a", 2, 2), paused]);
        let (planned, gate) = gates::decide(&snapshot, jiff::Timestamp::UNIX_EPOCH);
        let text = plan("mimir", "ingester", &planned, &gate).join("\n") + "\n";
        assert!(text.contains("Next: nothing to do now."), "{text}");
        assert!(
            text.contains("planner (Paused): rollout paused with pods left to update in b"),
            "{text}"
        );
    }

    #[test]
    fn the_plan_shows_invalid_annotations_as_warnings() {
        let a = annotated(zone("a", 2, 0), "rollout-max-unavailable", "lots");
        let snapshot = group(vec![a]);
        let (planned, gate) = gates::decide(&snapshot, jiff::Timestamp::UNIX_EPOCH);
        let text = plan("mimir", "ingester", &planned, &gate).join("\n") + "\n";
        assert!(text.contains("Warnings:\n  StatefulSet a: "), "{text}");
        assert!(text.contains("\"lots\""), "{text}");
    }
}
