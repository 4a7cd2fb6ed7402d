//! The timeline as the leader records it: given what passes see, which spans and marks the
//! group's picture holds, and that it keeps exactly its bound, the most recent first.

use jiff::SignedDuration;

use super::*;
use crate::testing::{NEW, group, now, zone};

fn at(seconds: i64) -> Timestamp {
    now() + SignedDuration::from_secs(seconds)
}

/// Zone `ingester-a` of 2 pods rolling to `rev-2`, `change` applied to pod 0.
fn rolling(change: impl Fn(&mut crate::rollout::PodSnapshot)) -> GroupSnapshot {
    group([zone("ingester-a", 2)
        .template_changed()
        .each_pod(&[0], change)])
}

/// Pod 0 recreated (a new uid) at the update revision, Ready since `ready_since`.
fn recreated(ready: bool, ready_since: Option<Timestamp>) -> GroupSnapshot {
    rolling(|pod| {
        pod.uid = "uid-new".to_owned();
        pod.revision = Some(NEW.to_owned());
        pod.ready = ready;
        pod.ready_since = ready_since;
    })
}

fn wait(kind: &'static str, statefulset: &str, message: &str) -> Option<WaitSeen> {
    Some(WaitSeen {
        kind,
        statefulset: Some(statefulset.to_owned()),
        message: message.to_owned(),
        halts: kind == "Halted",
    })
}

fn spans(timelines: &Timelines) -> Vec<Span> {
    timelines.timeline("ingester").expect("recorded").spans
}

/// Spans as `(kind, reason or pod, start, end)`, for comparing whole timelines.
fn outline(timelines: &Timelines) -> Vec<(SpanKind, String, Timestamp, Option<Timestamp>)> {
    spans(timelines)
        .into_iter()
        .map(|span| {
            let what = span.reason.or(span.pod).unwrap_or_default();
            (span.kind, what, span.start, span.end)
        })
        .collect()
}

#[test]
fn a_replacement_lasts_from_the_deletion_until_its_successor_is_ready_at_the_update_revision() {
    let mut timelines = Timelines::default();
    timelines.deleted(
        "ingester",
        "ingester-a",
        "ingester-a-0",
        "uid-ingester-a-0",
        at(0),
    );

    // The deleted pod itself, still Ready at the old revision in the cache: not its successor
    timelines.observe(&rolling(|_| {}), None, at(1));
    // Its successor at the update revision, not Ready yet
    timelines.observe(&recreated(false, None), None, at(5));
    assert_eq!(
        outline(&timelines),
        [(
            SpanKind::Replacement,
            "ingester-a-0".to_owned(),
            at(0),
            None
        )]
    );

    // Ready since 8 s, seen at 10 s: it ended when the pod says it became Ready
    timelines.observe(&recreated(true, Some(at(8))), None, at(10));
    let span = &spans(&timelines)[0];
    assert_eq!((span.start, span.end), (at(0), Some(at(8))));
    assert_eq!(span.statefulset.as_deref(), Some("ingester-a"));

    // Later passes change nothing
    timelines.observe(&recreated(true, Some(at(8))), None, at(20));
    assert_eq!(spans(&timelines)[0].end, Some(at(8)));
    assert_eq!(spans(&timelines).len(), 1);
}

#[test]
fn a_ready_time_outside_the_span_is_kept_within_it() {
    for (ready_since, end) in [
        (Some(at(-30)), at(0)),
        (Some(at(99)), at(10)),
        (None, at(10)),
    ] {
        let mut timelines = Timelines::default();
        timelines.deleted(
            "ingester",
            "ingester-a",
            "ingester-a-0",
            "uid-ingester-a-0",
            at(0),
        );
        timelines.observe(&recreated(true, ready_since), None, at(10));
        assert_eq!(spans(&timelines)[0].end, Some(end), "{ready_since:?}");
    }
}

#[test]
fn a_pod_deleted_again_ends_its_open_replacement_and_starts_another() {
    let mut timelines = Timelines::default();
    timelines.deleted("ingester", "ingester-a", "ingester-a-0", "uid-1", at(0));
    timelines.deleted("ingester", "ingester-a", "ingester-a-1", "uid-2", at(1));
    timelines.deleted("ingester", "ingester-a", "ingester-a-0", "uid-3", at(4));
    assert_eq!(
        outline(&timelines),
        [
            (
                SpanKind::Replacement,
                "ingester-a-0".to_owned(),
                at(0),
                Some(at(4))
            ),
            (
                SpanKind::Replacement,
                "ingester-a-1".to_owned(),
                at(1),
                None
            ),
            (
                SpanKind::Replacement,
                "ingester-a-0".to_owned(),
                at(4),
                None
            ),
        ]
    );
}

#[test]
fn waits_of_one_kind_in_one_zone_are_one_span_anything_else_starts_the_next() {
    let mut timelines = Timelines::default();
    let snapshot = rolling(|_| {});
    // A group that never waited has no timeline
    timelines.observe(&snapshot, None, at(0));
    assert_eq!(timelines.timeline("ingester"), None);

    timelines.observe(
        &snapshot,
        wait("NotReady", "ingester-a", "a-0 starting"),
        at(1),
    );
    timelines.observe(
        &snapshot,
        wait("NotReady", "ingester-a", "a-0 crashing"),
        at(2),
    );
    timelines.observe(
        &snapshot,
        wait("NotReady", "ingester-b", "b-0 starting"),
        at(3),
    );
    timelines.observe(&snapshot, wait("Soak", "ingester-b", "soaking"), at(4));
    timelines.observe(
        &snapshot,
        wait("HealthCheck", "ingester-b", "checking"),
        at(6),
    );
    timelines.observe(&snapshot, wait("Hook", "ingester-b", "calling"), at(7));
    timelines.observe(&snapshot, None, at(9));
    timelines.observe(&snapshot, None, at(10));

    assert_eq!(
        outline(&timelines),
        [
            (SpanKind::Wait, "NotReady".to_owned(), at(1), Some(at(3))),
            (SpanKind::Wait, "NotReady".to_owned(), at(3), Some(at(4))),
            (SpanKind::Soak, "Soak".to_owned(), at(4), Some(at(6))),
            (
                SpanKind::Check,
                "HealthCheck".to_owned(),
                at(6),
                Some(at(7))
            ),
            (SpanKind::Check, "Hook".to_owned(), at(7), Some(at(9))),
        ]
    );
    let spans = spans(&timelines);
    assert_eq!(
        spans[0].note.as_deref(),
        Some("a-0 crashing"),
        "the latest message"
    );
    assert_eq!(spans[1].statefulset.as_deref(), Some("ingester-b"));
    assert!(timelines.timeline("ingester").unwrap().marks.is_empty());
}

#[test]
fn a_halt_is_marked_once_when_it_starts_and_again_after_a_resume() {
    let mut timelines = Timelines::default();
    let snapshot = rolling(|_| {});
    let halted = || wait("Halted", "ingester-b", "halted at ingester-b: error rate");
    timelines.observe(&snapshot, wait("NotReady", "ingester-a", "a-0"), at(0));
    timelines.observe(&snapshot, halted(), at(2));
    timelines.observe(&snapshot, halted(), at(3));
    // Another halting kind right after is the same halt
    let invalid = WaitSeen {
        halts: true,
        ..wait("InvalidGate", "ingester-b", "invalid soak").unwrap()
    };
    timelines.observe(&snapshot, Some(invalid), at(4));
    timelines.observe(&snapshot, None, at(5));
    timelines.observe(&snapshot, halted(), at(8));

    let marks = timelines.timeline("ingester").unwrap().marks;
    let marks: Vec<(MarkKind, Timestamp, Option<&str>, &str)> = marks
        .iter()
        .map(|mark| {
            (
                mark.kind,
                mark.at,
                mark.statefulset.as_deref(),
                mark.note.as_str(),
            )
        })
        .collect();
    let halt = "halted at ingester-b: error rate";
    assert_eq!(
        marks,
        [
            (MarkKind::Halt, at(2), Some("ingester-b"), halt),
            (MarkKind::Halt, at(8), Some("ingester-b"), halt),
        ]
    );
    let halted_spans: Vec<_> = outline(&timelines)
        .into_iter()
        .filter(|(_, reason, _, _)| reason == "Halted")
        .collect();
    assert_eq!(
        halted_spans,
        [
            (SpanKind::Wait, "Halted".to_owned(), at(2), Some(at(4))),
            (SpanKind::Wait, "Halted".to_owned(), at(8), None),
        ]
    );
}

#[test]
fn a_rollback_is_marked_with_its_reason() {
    let mut timelines = Timelines::default();
    timelines.rollback("ingester", Some("ingester-b"), "errors after b", at(3));
    let timeline = timelines.timeline("ingester").expect("recorded");
    assert_eq!(
        timeline.marks,
        [Mark {
            kind: MarkKind::Rollback,
            at: at(3),
            statefulset: Some("ingester-b".to_owned()),
            note: "errors after b".to_owned(),
        }]
    );
    assert_eq!(timeline.recorded_since, at(3));
}

#[test]
fn keeps_exactly_the_most_recent_spans_up_to_its_bound() {
    let mut timelines = Timelines::default();
    let delete = |timelines: &mut Timelines, index: usize| {
        let pod = format!("ingester-a-{index}");
        let seconds = i64::try_from(index).expect("small");
        timelines.deleted("ingester", "ingester-a", &pod, &pod, at(seconds));
    };
    // Below and at the bound, every span is kept
    for index in 0..SPANS_KEPT - 1 {
        delete(&mut timelines, index);
    }
    assert_eq!(spans(&timelines).len(), SPANS_KEPT - 1);
    delete(&mut timelines, SPANS_KEPT - 1);
    let timeline = timelines.timeline("ingester").unwrap();
    assert_eq!(
        (timeline.spans.len(), timeline.dropped_spans),
        (SPANS_KEPT, 0)
    );

    // Past it, the oldest go first: exactly the bound is kept, the most recent
    for index in SPANS_KEPT..SPANS_KEPT + 5 {
        delete(&mut timelines, index);
    }
    let timeline = timelines.timeline("ingester").unwrap();
    assert_eq!(
        (timeline.spans.len(), timeline.dropped_spans),
        (SPANS_KEPT, 5)
    );
    assert_eq!(timeline.spans[0].pod.as_deref(), Some("ingester-a-5"));
    let last = format!("ingester-a-{}", SPANS_KEPT + 4);
    assert_eq!(
        timeline.spans[SPANS_KEPT - 1].pod.as_deref(),
        Some(last.as_str())
    );
}

#[test]
fn keeps_exactly_the_most_recent_marks_up_to_its_bound() {
    let mut timelines = Timelines::default();
    for index in 0..MARKS_KEPT {
        let seconds = i64::try_from(index).expect("small");
        timelines.rollback("ingester", None, &format!("why {index}"), at(seconds));
    }
    assert_eq!(
        timelines.timeline("ingester").unwrap().marks.len(),
        MARKS_KEPT
    );
    for index in MARKS_KEPT..MARKS_KEPT + 3 {
        let seconds = i64::try_from(index).expect("small");
        timelines.rollback("ingester", None, &format!("why {index}"), at(seconds));
    }
    let marks = timelines.timeline("ingester").unwrap().marks;
    assert_eq!(marks.len(), MARKS_KEPT);
    assert_eq!(marks[0].note, "why 3");
    assert_eq!(
        marks[MARKS_KEPT - 1].note,
        format!("why {}", MARKS_KEPT + 2)
    );
}

#[test]
fn keeps_exactly_the_most_recently_recorded_groups_up_to_its_bound() {
    let mut timelines = Timelines::default();
    let record = |timelines: &mut Timelines, group: &str, seconds: i64| {
        timelines.rollback(group, None, "why", at(seconds));
    };
    for index in 0..GROUPS_KEPT {
        let seconds = i64::try_from(index).expect("small");
        record(&mut timelines, &format!("group-{index}"), seconds);
    }
    assert_eq!(timelines.groups().count(), GROUPS_KEPT);
    // group-0 was recorded first but again just now: group-1's latest record is the oldest
    record(&mut timelines, "group-0", 1_000);
    record(&mut timelines, "newcomer", 1_001);
    assert_eq!(timelines.groups().count(), GROUPS_KEPT);
    assert!(timelines.timeline("group-1").is_none(), "the oldest went");
    for kept in ["group-0", "group-2", "newcomer"] {
        assert!(timelines.timeline(kept).is_some(), "{kept} kept");
    }

    timelines.forget("newcomer");
    assert_eq!(timelines.groups().count(), GROUPS_KEPT - 1);
}

#[test]
fn notes_are_cut_to_their_bound_on_a_character_boundary() {
    let mut timelines = Timelines::default();
    let long = "é".repeat(NOTE_CHARS + 50);
    timelines.rollback("ingester", None, &long, at(0));
    let exact = "x".repeat(NOTE_CHARS);
    timelines.rollback("ingester", None, &exact, at(1));
    let marks = timelines.timeline("ingester").unwrap().marks;
    assert_eq!(marks[0].note, format!("{}…", "é".repeat(NOTE_CHARS)));
    assert_eq!(marks[1].note, exact, "a note within the bound is whole");
}

#[test]
fn the_document_part_is_camel_case_json() {
    let mut timelines = Timelines::default();
    timelines.deleted("ingester", "ingester-a", "ingester-a-0", "uid", at(0));
    let json = serde_json::to_value(timelines.timeline("ingester").unwrap()).expect("JSON");
    assert_eq!(json["droppedSpans"], 0);
    assert!(json["recordedSince"].is_string(), "{json}");
    assert_eq!(json["spans"][0]["kind"], "replacement");
    assert_eq!(json["spans"][0]["end"], serde_json::Value::Null);
}

#[test]
fn docs_status_md_says_the_bounds_the_code_keeps() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/status.md");
    let docs = std::fs::read_to_string(&path).expect("docs/status.md");
    let docs = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        format!("per group the last **{SPANS_KEPT}** spans and **{MARKS_KEPT}** marks"),
        format!("each message cut to {NOTE_CHARS} characters"),
        format!("for at most **{GROUPS_KEPT}** groups"),
    ] {
        assert!(docs.contains(&said), "docs/status.md says {said:?}");
    }
}
