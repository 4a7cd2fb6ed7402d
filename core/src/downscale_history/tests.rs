use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::ledger::{Entry, Ledger};

const GRACE: Duration = Duration::from_secs(60);

fn t(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn statefulset(name: &str, generation: i64, annotation: Option<&str>) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            generation: Some(generation),
            annotations: annotation
                .map(|at| BTreeMap::from([(LAST_DOWNSCALE_ANNOTATION.to_owned(), at.to_owned())])),
            ..ObjectMeta::default()
        },
        ..StatefulSet::default()
    }
}

fn tracker(entries: &[(&str, &str)]) -> ZoneTracker {
    ZoneTracker {
        resource_version: Some("1".into()),
        data: entries
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
    }
}

#[test]
fn the_go_operators_tracker_entries_are_read_and_written_in_its_format() {
    let tracker = tracker(&[
        ("zone-a", r#"{"lastDownscaled":"2026-11-24T10:00:00Z"}"#),
        (
            "zone-b",
            r#"{"lastDownscaled":"2026-11-24T10:00:00.123456789Z"}"#,
        ),
    ]);
    assert_eq!(
        tracker.last_downscaled("zone-a"),
        Ok(Some(t("2026-11-24T10:00:00Z")))
    );
    assert_eq!(
        tracker.last_downscaled("zone-b"),
        Ok(Some(t("2026-11-24T10:00:00.123456789Z")))
    );
    assert_eq!(tracker.last_downscaled("zone-c"), Ok(None));
    assert!(tracker.malformed(["zone-a", "zone-b", "zone-c"]).is_empty());
    assert_eq!(
        tracker_value(t("2026-11-24T10:00:00.9Z")),
        r#"{"lastDownscaled":"2026-11-24T10:00:00Z"}"#
    );
}

#[test]
fn a_malformed_tracker_entry_counts_as_a_downscale_now_and_is_named() {
    let now = t("2026-11-24T12:00:00Z");
    for bad in [
        "yesterday",
        r#"{"lastDownscaled":"yesterday"}"#,
        r#"{"lastDownscaled":5}"#,
        "{}",
        "",
    ] {
        let tracker = tracker(&[("zone-a", bad)]);
        let malformed = tracker.malformed(["zone-a", "zone-b"]);
        assert_eq!(malformed.len(), 1, "{bad:?}");
        // Another group's (or anyone's) keys are not read at all
        assert!(tracker.malformed(["zone-b"]).is_empty(), "{bad:?}");
        let message = malformed[0].to_string();
        assert!(message.contains("\"zone-a\""), "{message}");
        assert!(message.contains(&format!("{bad:?}")), "{message}");

        let last = last_downscale(
            &statefulset("zone-a", 1, None),
            Records {
                ledger: &Ledger::default(),
                tracker: &tracker,
                claim_grace: GRACE,
            },
            now,
        )
        .unwrap()
        .unwrap();
        assert_eq!(last.at, now, "{bad:?}");
        assert!(matches!(last.source, Source::MalformedTracker(_)));
        assert!(last.describe("zone-a").contains("counts as downscaled"));
    }
}

/// min-time is judged on the newest record, whichever holds it.
#[test]
fn the_newest_of_ledger_tracker_and_annotation_counts() {
    let now = t("2026-11-24T12:00:00Z");
    let (old, middle, new) = (
        "2026-11-24T09:00:00Z",
        "2026-11-24T10:00:00Z",
        "2026-11-24T11:00:00Z",
    );
    let ledger_at =
        |at: &str| Ledger::default().with_entry("zone-a", Some(&Entry::new(t(at), "u")));
    let tracked_at = |at: &str| tracker(&[("zone-a", &format!(r#"{{"lastDownscaled":"{at}"}}"#))]);
    let cases = [
        (
            ledger_at(new),
            tracked_at(middle),
            Some(old),
            Source::Ledger,
        ),
        (
            ledger_at(old),
            tracked_at(new),
            Some(middle),
            Source::ZoneTracker,
        ),
        (
            ledger_at(middle),
            tracked_at(old),
            Some(new),
            Source::Annotation,
        ),
        (
            Ledger::default(),
            tracked_at(new),
            None,
            Source::ZoneTracker,
        ),
    ];
    for (ledger, tracker, annotation, source) in cases {
        let last = last_downscale(
            &statefulset("zone-a", 1, annotation),
            Records {
                ledger: &ledger,
                tracker: &tracker,
                claim_grace: GRACE,
            },
            now,
        )
        .unwrap()
        .unwrap();
        assert_eq!(last.at, t(new));
        assert_eq!(last.source, source);
    }
    let nothing = last_downscale(
        &statefulset("zone-a", 1, None),
        Records {
            ledger: &Ledger::default(),
            tracker: &ZoneTracker::default(),
            claim_grace: GRACE,
        },
        now,
    );
    assert_eq!(nothing, Ok(None));
}

#[test]
fn an_unreadable_annotation_or_ledger_entry_is_an_error_naming_it() {
    let tracker = ZoneTracker::default();
    let records = |ledger| Records {
        ledger,
        tracker: &tracker,
        claim_grace: GRACE,
    };
    let now = t("2026-11-24T12:00:00Z");
    let empty = Ledger::default();
    let error = last_downscale(
        &statefulset("zone-a", 1, Some("soon")),
        records(&empty),
        now,
    )
    .unwrap_err();
    assert!(
        error.contains("grafana.com/last-downscale annotation of zone-a"),
        "{error}"
    );
    let mut broken = Ledger::default();
    broken.data.insert("zone-a".into(), "garbage".into());
    let error = last_downscale(&statefulset("zone-a", 1, None), records(&broken), now).unwrap_err();
    assert!(error.contains("downscale ledger"), "{error}");
}

/// A claim on a StatefulSet whose spec never changed stops holding other zones after the
/// grace, and the controller is told to void it; one whose spec changed is confirmed.
#[test]
fn pending_claims_are_confirmed_voided_or_rechecked_from_the_statefulset() {
    let at = t("2026-11-24T12:00:00Z");
    let previous = t("2026-11-23T12:00:00Z");
    let ledger = Ledger::default()
        .with_entry(
            "zone-a",
            Some(&Entry::claim(at, "ua", (3, 2), 5, Some(previous))),
        )
        .with_entry("zone-b", Some(&Entry::claim(at, "ub", (3, 2), 5, None)))
        .with_entry("zone-c", Some(&Entry::new(at, "uc")));
    let members = [
        // zone a's update landed: its generation moved.
        statefulset("zone-a", 6, None),
        // zone b's did not.
        statefulset("zone-b", 5, None),
        statefulset("zone-c", 5, None),
    ];
    let soon = at + SignedDuration::from_secs(10);
    let follow_ups = follow_up_claims(&ledger, &members, soon, GRACE);
    assert_eq!(
        follow_ups,
        vec![
            ClaimFollowUp::Confirm {
                statefulset: "zone-a".into(),
                entry: ledger.entry("zone-a").unwrap().unwrap(),
            },
            ClaimFollowUp::Recheck {
                at: at + SignedDuration::from_secs(60)
            },
        ]
    );
    let late = at + SignedDuration::from_secs(60);
    let follow_ups = follow_up_claims(&ledger, &members, late, GRACE);
    assert_eq!(
        follow_ups[1],
        ClaimFollowUp::Void {
            statefulset: "zone-b".into(),
            entry: ledger.entry("zone-b").unwrap().unwrap(),
        }
    );
    // Meanwhile, judging zone b's last downscale: its claim held other zones until the grace,
    // then nothing; zone a's counts from its claim.
    let records = Records {
        ledger: &ledger,
        tracker: &ZoneTracker::default(),
        claim_grace: GRACE,
    };
    let b = |now| last_downscale(&members[1], records, now).unwrap();
    assert_eq!(b(soon).map(|last| last.at), Some(at));
    assert_eq!(b(late), None);
    let a = last_downscale(&members[0], records, late).unwrap().unwrap();
    assert_eq!((a.at, a.source), (at, Source::Ledger));
}

/// A time far in the future (anyone who may edit the records can write 2099) holds nothing
/// silently until then: it is unreadable, naming the record; within clock skew it counts.
#[test]
fn a_time_beyond_clock_skew_is_unreadable_naming_its_record() {
    let now = t("2026-11-24T12:00:00Z");
    let future = "2099-01-01T00:00:00Z";
    let ledger = Ledger::default().with_entry("zone-a", Some(&Entry::new(t(future), "u")));
    let tracked = tracker(&[("zone-a", &format!(r#"{{"lastDownscaled":"{future}"}}"#))]);
    let empty = Ledger::default();
    let none = ZoneTracker::default();
    let cases = [
        (
            &ledger,
            &none,
            None,
            "the group's downscale ledger says zone-a",
        ),
        (&empty, &tracked, None, "the zone tracker says zone-a"),
        (
            &empty,
            &none,
            Some(future),
            "grafana.com/last-downscale says zone-a",
        ),
    ];
    for (ledger, tracker, annotation, named) in cases {
        let records = Records {
            ledger,
            tracker,
            claim_grace: GRACE,
        };
        let error =
            last_downscale(&statefulset("zone-a", 1, annotation), records, now).unwrap_err();
        assert!(error.starts_with(named), "{error}");
        assert!(error.contains("unreadable"), "{error}");
    }
    let soon = "2026-11-24T12:04:00Z";
    let records = Records {
        ledger: &empty,
        tracker: &none,
        claim_grace: GRACE,
    };
    let last = last_downscale(&statefulset("zone-a", 1, Some(soon)), records, now);
    assert_eq!(last.unwrap().unwrap().at, t(soon));
}
