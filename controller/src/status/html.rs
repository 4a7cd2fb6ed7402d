//! The status page: a [`RolloutStatus`] as one self-contained HTML page — inline CSS, no
//! script, no external asset (it must work in an air-gapped cluster), a meta refresh. Read
//! only: nothing on it acts. Every string from the cluster goes through maud's `(…)`
//! interpolation, which escapes it; nothing is spliced in raw but the constant stylesheet.
//! A group's timeline is drawn with CSS alone (positioned boxes, widths in percent of the
//! recorded time), so it needs no script and no asset either.

use jiff::{SignedDuration, Timestamp};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use baton_core::gates::keys::format_duration;
use baton_core::status::model::{
    ActionRecord, GroupStatus, Role, RolloutPhase, RolloutStatus, ZoneStatus,
};
use baton_core::status::timeline::{Span, SpanKind, Timeline};

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
.timeline { margin: .8em 0 .2em; }
.tl { position: relative; margin-top: .3em; }
.tl-row { display: grid; grid-template-columns: 280px 1fr; align-items: center; border-bottom: 1px solid #eaeef2; }
.tl-label { font-size: 12px; line-height: 1.2; padding: .2em .6em .2em 0; min-width: 0; }
.tl-label div { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.tl-label .rev { font-size: 10px; color: #57606a; }
.tl-track { position: relative; height: 32px; background: #f6f8fa; }
.tl-span { position: absolute; box-sizing: border-box; min-width: 2px; border-radius: 3px; }
.tl-span.replacement { top: 4px; height: 12px; background: #0969da; opacity: .75; border: 1px solid #0550ae; }
.tl-span.soak, .tl-span.check, .tl-span.wait { top: 20px; height: 9px; }
.tl-span.soak { background: #8250df; } .tl-span.check { background: #1b7c83; } .tl-span.wait { background: #d4a72c; }
.tl-span.halting { background: #cf222e; }
.tl-span.open { border-right: 2px dashed #1f2328; }
.tl-marks { position: absolute; top: 0; bottom: 0; left: 280px; right: 0; pointer-events: none; }
.tl-mark { position: absolute; top: 0; bottom: 0; width: 3px; margin-left: -1px; pointer-events: auto; }
.tl-mark.halt { background: #cf222e; } .tl-mark.rollback { background: #bc4c00; }
.tl-axis { display: grid; grid-template-columns: 280px 1fr auto; font-size: 11px; color: #57606a; }
.tl-legend { font-size: 11px; color: #57606a; margin: .3em 0; }
.tl-legend span { display: inline-block; margin-right: 1em; }
.tl-legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: .3em; vertical-align: middle; }
ul.marks { margin: .2em 0 0; padding-left: 1.2em; font-size: 13px; }
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
            @if let Some(check) = &group.check {
                p.check { "Health check " (check.line()) }
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
            (timeline_section(group, now))
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
            td.rev { (revisions(zone)) }
        }
    }
}

/// `current → update` while they differ, else the one revision: a finished zone's says once
/// what it runs.
fn revisions(zone: &ZoneStatus) -> String {
    let revision = |revision: &Option<String>| revision.clone().unwrap_or_else(|| "—".to_owned());
    if zone.current_revision == zone.update_revision {
        revision(&zone.update_revision)
    } else {
        format!(
            "{} → {}",
            revision(&zone.current_revision),
            revision(&zone.update_revision)
        )
    }
}

/// The group's timeline, when the leader recorded one: a row per zone in rollout order (and
/// one for waits about the whole group, if any), time across, each span a box placed in
/// percent of the recorded time, each mark a line across every row.
fn timeline_section(group: &GroupStatus, now: Timestamp) -> Markup {
    let Some(timeline) = &group.timeline else {
        return html! {};
    };
    let window = Window::of(timeline, now);
    let whole_group = of_zone(timeline, None).next().is_some();
    html! {
        div.timeline data-timeline=(group.name) {
            div.muted {
                "Timeline since " (format_time(timeline.recorded_since))
                @if timeline.dropped_spans > 0 {
                    " (" (timeline.dropped_spans) " older spans dropped)"
                }
            }
            div.tl {
                @for zone in &group.zones {
                    div.tl-row data-tl-zone=(zone.statefulset) {
                        div.tl-label title=(revisions(zone)) {
                            div { (zone.statefulset) }
                            div.rev { (revisions(zone)) }
                        }
                        div.tl-track {
                            @for span in of_zone(timeline, Some(&zone.statefulset)) { (span_box(span, &window)) }
                        }
                    }
                }
                @if whole_group {
                    div.tl-row data-tl-lane="group" {
                        div.tl-label { "whole group" }
                        div.tl-track {
                            @for span in of_zone(timeline, None) { (span_box(span, &window)) }
                        }
                    }
                }
                div.tl-marks {
                    @for mark in &timeline.marks {
                        div class={ "tl-mark " (mark.kind.as_str()) } data-mark=(mark.kind.as_str())
                            style=(format!("left:{:.2}%", window.percent(mark.at)))
                            title={ (mark.kind.as_str()) " at " (format_time(mark.at)) ": " (mark.note) } {}
                    }
                }
            }
            div.tl-axis {
                span {} span { (format_time(window.start)) } span { (format_time(window.end)) }
            }
            div.tl-legend {
                span { i.replacement style="background:#0969da" {} "pod replaced: deleted → Ready" }
                span { i style="background:#8250df" {} "soak" }
                span { i style="background:#1b7c83" {} "check" }
                span { i style="background:#d4a72c" {} "wait" }
                span { i style="background:#cf222e" {} "halt" }
                span { i style="background:#bc4c00" {} "rollback" }
            }
            @if !timeline.marks.is_empty() {
                ul.marks {
                    @for mark in &timeline.marks {
                        li {
                            (format_time(mark.at)) " " strong { (mark.kind.as_str()) }
                            // (a halt's note names its zone already)
                            @if let Some(statefulset) = mark.statefulset.as_ref().filter(|name| !mark.note.contains(name.as_str())) {
                                " at " (statefulset)
                            }
                            ": " (mark.note)
                        }
                    }
                }
            }
        }
    }
}

/// The spans of `zone` (`None`: those about the whole group).
fn of_zone<'a>(timeline: &'a Timeline, zone: Option<&'a str>) -> impl Iterator<Item = &'a Span> {
    timeline
        .spans
        .iter()
        .filter(move |span| span.statefulset.as_deref() == zone)
}

/// The time a timeline covers: from its first record (or when recording started) to now.
struct Window {
    start: Timestamp,
    end: Timestamp,
}

impl Window {
    fn of(timeline: &Timeline, now: Timestamp) -> Self {
        let starts = timeline.spans.iter().map(|span| span.start);
        let marks = timeline.marks.iter().map(|mark| mark.at);
        let start = starts
            .chain(marks)
            .fold(timeline.recorded_since, Timestamp::min);
        let ends = timeline.spans.iter().filter_map(|span| span.end);
        Self {
            start,
            end: ends.fold(now, Timestamp::max),
        }
    }

    /// Where `at` falls, in percent from the start.
    fn percent(&self, at: Timestamp) -> f64 {
        let whole = self.end.duration_since(self.start).as_secs_f64().max(1.0);
        let part = at.duration_since(self.start).as_secs_f64();
        (part / whole * 100.0).clamp(0.0, 100.0)
    }
}

fn span_box(span: &Span, window: &Window) -> Markup {
    let end = span.end.unwrap_or(window.end);
    let left = window.percent(span.start);
    let width = (window.percent(end) - left).max(0.0);
    let halting = span.reason.as_deref() == Some("Halted");
    let until = match span.end {
        Some(end) => format!("{} to {}", format_time(span.start), format_time(end)),
        None => format!("since {}, still", format_time(span.start)),
    };
    let title = match span.kind {
        SpanKind::Replacement => format!(
            "{}: deleted, {} Ready — {until}",
            span.pod.as_deref().unwrap_or("a pod"),
            if span.end.is_some() {
                "then"
            } else {
                "not yet"
            }
        ),
        _ => format!(
            "{} — {until}: {}",
            span.reason.as_deref().unwrap_or(span.kind.as_str()),
            span.note.as_deref().unwrap_or_default()
        ),
    };
    let mut class = format!("tl-span {}", span.kind.as_str());
    if halting {
        class.push_str(" halting");
    }
    if span.end.is_none() {
        class.push_str(" open");
    }
    html! {
        div class=(class)
            data-span=(span.kind.as_str()) data-pod=[span.pod.as_deref()]
            style=(format!("left:{left:.2}%;width:{width:.2}%"))
            title=(title) {}
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
    use baton_core::status::timeline::{Mark, MarkKind};

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
            namespace: None,
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
            timeline: Some(timeline_of(hostile)),
            // What the endpoint answered is the endpoint's to write
            check: Some(baton_core::status::model::CheckStatus {
                name: "error-rate".to_owned(),
                last_run: Some("2026-11-28T10:00:00Z".to_owned()),
                last_result: Some("query `q` returned \"<svg onload=x>\"".to_owned()),
                passes: 0,
                failures: 1,
            }),
        };
        let page = page(&document(Role::Leader, vec![group]));
        assert!(!page.contains("<svg"), "{page}");
        assert!(
            page.contains("Health check error-rate: query `q` returned &quot;&lt;svg onload=x&gt;&quot; at 2026-11-28T10:00:00Z (0 in a row passed, 1 failed)"),
            "{page}"
        );
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("<b>ingester"), "{page}");
        assert!(!page.contains("\" onload=\""), "{page}");
        assert!(!page.contains("<i>"), "{page}");
        assert!(
            page.contains("zone-&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        assert!(page.contains("&lt;b&gt;ingester&lt;/b&gt;"), "{page}");
        assert!(!page.contains("<img"), "the timeline's notes: {page}");
        assert!(
            page.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{page}"
        );
    }

    /// Zone `statefulset`'s pod `ordinal` replaced from `start` to `end` (seconds).
    fn replaced(statefulset: &str, ordinal: u32, start: i64, end: Option<i64>) -> Span {
        Span {
            kind: SpanKind::Replacement,
            statefulset: Some(statefulset.to_owned()),
            pod: Some(format!("{statefulset}-{ordinal}")),
            reason: None,
            note: None,
            start: at(start),
            end: end.map(at),
        }
    }

    fn waited(kind: SpanKind, reason: &str, statefulset: Option<&str>, start: i64) -> Span {
        Span {
            kind,
            statefulset: statefulset.map(str::to_owned),
            pod: None,
            reason: Some(reason.to_owned()),
            note: Some(format!("{reason} <img src=x onerror=alert(1)>")),
            start: at(start),
            end: Some(at(start + 10)),
        }
    }

    /// Zone `b` replaced, then soaked before `c`, then a wait about the whole group, and a
    /// halt at `b` whose reason is markup.
    fn timeline_of(b: &str) -> Timeline {
        Timeline {
            recorded_since: at(-100),
            spans: vec![
                replaced(b, 0, -90, Some(-80)),
                replaced(b, 1, -80, Some(-70)),
                waited(SpanKind::Soak, "Soak", Some("ingester-c"), -70),
                waited(SpanKind::Wait, "MultipleNotReady", None, -60),
                replaced("ingester-c", 0, -20, None),
            ],
            marks: vec![Mark {
                kind: MarkKind::Halt,
                at: at(-10),
                statefulset: Some(b.to_owned()),
                note: "halted: <img src=x onerror=alert(1)>".to_owned(),
            }],
            dropped_spans: 0,
        }
    }

    #[test]
    fn the_timeline_has_a_row_per_zone_in_order_its_spans_and_marks_and_a_finished_revision_once() {
        let mut zones = vec![
            zone("ingester-a", RolloutPhase::Complete, 3),
            zone("ingester-b", RolloutPhase::Complete, 3),
            zone("ingester-c", RolloutPhase::Rolling, 1),
        ];
        zones[0].current_revision = zones[0].update_revision.clone();
        let group = GroupStatus {
            name: "ingester".to_owned(),
            namespace: None,
            phase: RolloutPhase::Rolling,
            zones,
            waiting: None,
            last_actions: Vec::new(),
            rollback: None,
            warnings: Vec::new(),
            timeline: Some(timeline_of("ingester-b")),
            check: None,
        };
        let page = page(&document(Role::Leader, vec![group]));

        let rows: Vec<usize> = ["ingester-a", "ingester-b", "ingester-c"]
            .iter()
            .map(|zone| {
                let row = format!(r#"data-tl-zone="{zone}""#);
                page.find(&row)
                    .unwrap_or_else(|| panic!("no {row} in {page}"))
            })
            .collect();
        assert!(rows.is_sorted(), "rows in zone order: {rows:?}");
        assert_eq!(page.matches("data-tl-zone=").count(), 3, "{page}");
        assert_eq!(page.matches(r#"data-span="replacement""#).count(), 3);
        for pod in ["ingester-b-0", "ingester-b-1", "ingester-c-0"] {
            assert_eq!(
                page.matches(&format!(r#"data-pod="{pod}""#)).count(),
                1,
                "{pod}"
            );
        }
        // b's first replacement: a tenth of the 100 s recorded, from 10 % in
        assert!(
            page.contains(r#"style="left:10.00%;width:10.00%""#),
            "{page}"
        );
        let c = &page[rows[2]..];
        assert!(c.find(r#"data-span="soak""#) < c.find(r#"data-span="replacement""#));
        assert!(
            page.contains(r#"data-tl-lane="group""#),
            "a lane for the whole group"
        );
        assert!(
            page.contains(r#"class="tl-span replacement open""#),
            "c-0 not Ready yet"
        );
        assert_eq!(page.matches(r#"data-mark="halt""#).count(), 1);
        assert!(
            page.contains(r#"data-mark="halt" style="left:90.00%""#),
            "{page}"
        );

        // a's revision once, b's and c's as they were given (rev-1 → rev-2)
        assert!(page.contains(r#"<td class="rev">rev-2</td>"#), "{page}");
        assert_eq!(
            page.matches(r#"<td class="rev">rev-1 → rev-2</td>"#)
                .count(),
            2
        );
        assert!(!page.contains("rev-2 → rev-2"), "{page}");
    }

    #[test]
    fn a_group_without_a_timeline_draws_none() {
        let group = GroupStatus {
            name: "ingester".to_owned(),
            namespace: None,
            phase: RolloutPhase::Complete,
            zones: vec![zone("ingester-a", RolloutPhase::Complete, 3)],
            waiting: None,
            last_actions: Vec::new(),
            rollback: None,
            warnings: Vec::new(),
            timeline: None,
            check: None,
        };
        let page = page(&document(Role::Standby, vec![group]));
        assert!(!page.contains("data-timeline"), "{page}");
    }

    #[test]
    fn shows_each_zone_with_its_phase_progress_and_the_wait_with_its_age() {
        let group = GroupStatus {
            name: "ingester".to_owned(),
            namespace: None,
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
            timeline: None,
            check: None,
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
