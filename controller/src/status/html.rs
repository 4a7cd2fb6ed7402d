//! The status page: a [`RolloutStatus`] as one self-contained HTML page — inline CSS, no
//! script, no external asset (it must work in an air-gapped cluster), a meta refresh. Read
//! only: nothing on it acts. Every string from the cluster goes through maud's `(…)`
//! interpolation, which escapes it; nothing is spliced in raw but the constant stylesheet.

use jiff::{SignedDuration, Timestamp};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use baton_core::gates::keys::format_duration;
use baton_core::status::model::{
    ActionRecord, GroupStatus, Role, RolloutPhase, RolloutStatus, ZoneStatus,
};

/// How often the page reloads itself.
pub const REFRESH_SECONDS: u32 = 5;

const STYLE: &str = r#"
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1f2328; background: #f6f8fa; }
h1 { font-size: 20px; margin: 0 0 .2em; }
.replica { color: #57606a; margin-bottom: 1em; }
.standby { background: #fff8c5; border: 1px solid #d4a72c; padding: .5em .8em; border-radius: 6px; }
section.group { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: .8em 1em; margin: 1em 0; }
h2 { font-size: 17px; margin: 0 0 .5em; }
.phase { display: inline-block; border-radius: 10px; padding: 0 .6em; font-size: 12px; font-weight: 600; color: #fff; }
.complete { background: #1a7f37; } .rolling { background: #0969da; } .waiting { background: #9a6700; }
.paused { background: #6e7781; } .halted { background: #cf222e; } .skipped { background: #8250df; }
.invalidConfiguration { background: #a40e26; } .warning { color: #9a6700; }
.awaitingApproval { background: #bf3989; } .rollingBack { background: #bc4c00; }
.rolledBack { background: #953800; }
.wait { margin: .3em 0 .6em; } .wait code { color: #57606a; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid #eaeef2; vertical-align: middle; }
th { font-size: 12px; color: #57606a; font-weight: 600; }
.bar { position: relative; width: 220px; height: 12px; background: #eaeef2; border-radius: 6px; overflow: hidden; }
.bar .fill { height: 100%; border-radius: 6px; }
.counts { font-size: 12px; color: #57606a; }
.rev { font-family: ui-monospace, monospace; font-size: 12px; }
ul.actions { margin: .4em 0 0; padding-left: 1.2em; font-size: 13px; }
.muted { color: #57606a; }
"#;

/// Renders the page.
pub fn page(status: &RolloutStatus) -> String {
    let title = format!("baton: rollouts in {}", status.namespace);
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(REFRESH_SECONDS);
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                (replica(status))
                @if status.groups.is_empty() {
                    p.muted { "No rollout group in this namespace (StatefulSets labelled rollout-group)." }
                }
                @for group in &status.groups {
                    (group_section(group, status.generated_at))
                }
                p.muted {
                    "Generated " (format_time(status.generated_at)) "; reloads every "
                    (REFRESH_SECONDS) " s. JSON: " a href="../api/v1/status" { "/api/v1/status" }
                }
            }
        }
    };
    markup.into_string()
}

fn replica(status: &RolloutStatus) -> Markup {
    let leader = status.leader.as_deref();
    html! {
        @match status.replica.role {
            Role::Leader => {
                div.replica {
                    "Replica " strong { (status.replica.identity) } " — the leader."
                }
            }
            Role::Standby => {
                div.replica.standby {
                    "Replica " strong { (status.replica.identity) } " is a standby; the leader is "
                    strong { (leader.unwrap_or("unknown")) }
                    ". This view is computed from the standby's own caches: since when a group "
                    "waits and its last actions are known to the leader only."
                }
            }
        }
    }
}

fn group_section(group: &GroupStatus, now: Timestamp) -> Markup {
    html! {
        section.group data-group=(group.name) data-phase=(group.phase.as_str()) {
            h2 { "Group " (group.name) " " (badge(group.phase)) }
            @if let Some(rollback) = &group.rollback {
                p.wait { "Rollback: " (rollback) }
            }
            @if let Some(waiting) = &group.waiting {
                div.wait {
                    "Waiting: " (waiting.message) " " code { "(" (waiting.kind) ")" }
                    @if let Some(since) = waiting.since {
                        span.muted {
                            " since " (format_time(since)) " (" (format_age(now, since)) ")"
                        }
                    }
                }
            }
            (super::warnings::section(group))
            table {
                thead {
                    tr { th { "zone" } th { "phase" } th { "progress" } th { "updated / ready / total" } th { "revisions (current → update)" } }
                }
                tbody {
                    @for zone in &group.zones { (zone_row(zone)) }
                }
            }
            @if !group.last_actions.is_empty() {
                div.muted { "Last actions" }
                ul.actions {
                    @for action in &group.last_actions { (action_item(action)) }
                }
            }
        }
    }
}

fn zone_row(zone: &ZoneStatus) -> Markup {
    // The bar is the share of pods updated, in the zone's phase colour.
    let percent = |count: u32| {
        if zone.total == 0 {
            100
        } else {
            u64::from(count.min(zone.total)) * 100 / u64::from(zone.total)
        }
    };
    let revision = |revision: &Option<String>| revision.clone().unwrap_or_else(|| "—".to_owned());
    html! {
        tr.zone data-zone=(zone.statefulset) data-phase=(zone.phase.as_str()) {
            td { (zone.statefulset) }
            td { (badge(zone.phase)) @if zone.paused && zone.phase != RolloutPhase::Paused { " (paused)" } }
            td {
                div.bar title={ (zone.updated) " of " (zone.total) " updated" } {
                    div class={ "fill " (zone.phase.as_str()) } style={ "width:" (percent(zone.updated)) "%" } {}
                }
            }
            td.counts { (zone.updated) " / " (zone.ready) " / " (zone.total) }
            td.rev { (revision(&zone.current_revision)) " → " (revision(&zone.update_revision)) }
        }
    }
}

fn action_item(action: &ActionRecord) -> Markup {
    html! {
        li { (format_time(action.at)) " " code { (action.action) } " " (action.note) }
    }
}

fn badge(phase: RolloutPhase) -> Markup {
    html! { span class={ "phase " (phase.as_str()) } { (phase.as_str()) } }
}

/// `2026-11-23 06:12:03 UTC`.
fn format_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// How long ago, to the second: `4m10s`.
fn format_age(now: Timestamp, since: Timestamp) -> String {
    let age = now.duration_since(since).max(SignedDuration::ZERO);
    format_duration(SignedDuration::from_secs(age.as_secs()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::status::model::{Replica, Waiting};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).expect("valid time")
    }

    fn zone(statefulset: &str, phase: RolloutPhase, updated: u32) -> ZoneStatus {
        ZoneStatus {
            statefulset: statefulset.to_owned(),
            phase,
            updated,
            ready: 3,
            total: 3,
            current_revision: Some("rev-1".to_owned()),
            update_revision: Some("rev-2".to_owned()),
            paused: false,
        }
    }

    fn document(role: Role, groups: Vec<GroupStatus>) -> RolloutStatus {
        RolloutStatus::new(
            "mimir",
            at(0),
            Replica {
                identity: "baton-1".to_owned(),
                role,
            },
            Some("baton-0".to_owned()),
            groups,
        )
    }

    #[test]
    fn every_name_from_the_cluster_is_escaped() {
        let hostile = "zone-<script>alert(1)</script>";
        let group = GroupStatus {
            name: "<b>ingester</b>".to_owned(),
            phase: RolloutPhase::Rolling,
            zones: vec![zone(hostile, RolloutPhase::Rolling, 1)],
            waiting: Some(Waiting {
                kind: "NotReady".to_owned(),
                message: format!("zone {hostile} has 1 not-ready pod"),
                since: Some(at(-65)),
            }),
            last_actions: vec![ActionRecord {
                at: at(-70),
                action: "DeletePod".to_owned(),
                statefulset: hostile.to_owned(),
                pod: Some(format!("{hostile}-0")),
                note: format!("deleted pod {hostile}-0\" onload=\"x"),
            }],
            rollback: Some(format!("rolling back: asked by <i>{hostile}</i>")),
            warnings: Vec::new(),
        };
        let page = page(&document(Role::Leader, vec![group]));
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("<b>ingester"), "{page}");
        assert!(!page.contains("\" onload=\""), "{page}");
        assert!(!page.contains("<i>"), "{page}");
        assert!(
            page.contains("zone-&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        assert!(page.contains("&lt;b&gt;ingester&lt;/b&gt;"), "{page}");
    }

    #[test]
    fn shows_each_zone_with_its_phase_progress_and_the_wait_with_its_age() {
        let group = GroupStatus {
            name: "ingester".to_owned(),
            phase: RolloutPhase::Rolling,
            zones: vec![
                zone("ingester-a", RolloutPhase::Complete, 3),
                zone("ingester-b", RolloutPhase::Rolling, 1),
                zone("ingester-c", RolloutPhase::Waiting, 0),
            ],
            waiting: Some(Waiting {
                kind: "MaxUnavailable".to_owned(),
                message: "waiting for ingester-b-0".to_owned(),
                since: Some(at(-65)),
            }),
            last_actions: Vec::new(),
            rollback: None,
            warnings: Vec::new(),
        };
        let page = page(&document(Role::Leader, vec![group]));
        for (zone, phase) in [
            ("ingester-a", "complete"),
            ("ingester-b", "rolling"),
            ("ingester-c", "waiting"),
        ] {
            let row = format!(r#"data-zone="{zone}" data-phase="{phase}""#);
            assert!(page.contains(&row), "{row} in {page}");
        }
        assert!(page.contains(r#"style="width:33%""#), "b's bar: {page}");
        assert!(page.contains("1 / 3 / 3"), "{page}");
        assert!(page.contains("(1m5s)"), "{page}");
        assert!(page.contains(r#"http-equiv="refresh""#));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no external asset"
        );
    }

    #[test]
    fn a_standby_says_so_and_names_the_leader() {
        let page = page(&document(Role::Standby, Vec::new()));
        assert!(page.contains("is a standby; the leader is"), "{page}");
        assert!(page.contains("baton-0"), "{page}");
        assert!(page.contains("No rollout group"), "{page}");
    }
}
