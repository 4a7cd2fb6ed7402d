//! The shared rule, then each use's own behaviour through it.

use std::convert::Infallible;
use std::time::Duration;

use jiff::Timestamp;

use super::*;

const HOUR: Duration = Duration::from_secs(3600);

fn now() -> Timestamp {
    "2026-11-26T12:00:00Z".parse().unwrap()
}

fn ago(hours: i64) -> Timestamp {
    now() - SignedDuration::from_hours(hours)
}

fn zone(name: &'static str, hours_ago: i64, min_time: Option<u64>) -> Downscaled<&'static str> {
    Downscaled {
        zone: name,
        at: ago(hours_ago),
        its_min_time: min_time.map(|hours| HOUR * u32::try_from(hours).unwrap()),
    }
}

/// The other zones, and who blocks until when.
type Case = (
    Vec<Option<Downscaled<&'static str>>>,
    Option<(&'static str, Timestamp)>,
);

fn judge(
    others: Vec<Option<Downscaled<&'static str>>>,
    whose: Whose,
) -> Option<(&'static str, Timestamp)> {
    blocker(others.into_iter().map(Ok::<_, Infallible>), whose, now())
        .unwrap()
        .map(|blocker| (blocker.zone, blocker.until))
}

#[test]
fn prepare_downscale_holds_each_downscaled_zone_to_its_own_min_time() {
    let each = Whose::EachDownscaledZone;
    let cases: Vec<Case> = vec![
        (vec![], None),
        (vec![None, None], None),
        // b was downscaled 1h ago and waits 2h: 1h left
        (vec![Some(zone("b", 1, Some(2)))], Some(("b", ago(-1)))),
        // over exactly at its end: the wait is strictly before
        (vec![Some(zone("b", 2, Some(2)))], None),
        (vec![Some(zone("b", 3, Some(2)))], None),
        // a zone with no min-time of its own holds nobody back
        (vec![Some(zone("b", 0, None))], None),
        // the longest wait left is named, not the newest downscale
        (
            vec![Some(zone("b", 1, Some(2))), Some(zone("c", 3, Some(10)))],
            Some(("c", ago(-7))),
        ),
        // on a tie, the first in order
        (
            vec![Some(zone("b", 1, Some(3))), Some(zone("c", 2, Some(4)))],
            Some(("b", ago(-2))),
        ),
    ];
    for (others, expected) in cases {
        let described = format!("{others:?}");
        assert_eq!(judge(others, each), expected, "{described}");
    }
}

#[test]
fn the_scaling_plan_holds_the_follower_to_its_own_min_time_after_the_newest_downscale() {
    let follower = Whose::ZoneGoingDown(HOUR * 12);
    let cases: Vec<Case> = vec![
        (vec![], None),
        (vec![None], None),
        // the other zones' own min-times are not read: none, shorter, longer
        (vec![Some(zone("b", 3, None))], Some(("b", ago(-9)))),
        (vec![Some(zone("b", 3, Some(1)))], Some(("b", ago(-9)))),
        (vec![Some(zone("b", 13, Some(100)))], None),
        (vec![Some(zone("b", 12, None))], None),
        // the newest downscale decides; on a tie the first in order
        (
            vec![Some(zone("b", 3, None)), Some(zone("c", 1, None))],
            Some(("c", ago(-11))),
        ),
        (
            vec![Some(zone("b", 1, None)), Some(zone("c", 1, None))],
            Some(("b", ago(-11))),
        ),
    ];
    for (others, expected) in cases {
        let described = format!("{others:?}");
        assert_eq!(judge(others, follower), expected, "{described}");
    }
}

#[test]
fn the_first_unreadable_record_stops_the_judgement_even_past_a_blocker() {
    for whose in [Whose::EachDownscaledZone, Whose::ZoneGoingDown(HOUR)] {
        let others = vec![
            Ok(Some(zone("b", 0, Some(1)))),
            Err("c's record"),
            Err("d's record"),
        ];
        assert_eq!(blocker(others, whose, now()), Err("c's record"));
    }
}

#[test]
fn a_wait_beyond_the_last_representable_time_blocks_until_then() {
    let far = blocker(
        [Ok::<_, Infallible>(Some(zone("b", 0, None)))],
        Whose::ZoneGoingDown(Duration::from_secs(u64::MAX)),
        now(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(far.until, Timestamp::MAX);
    assert_eq!(far.min_time_nanos(), i64::MAX);
    assert!(far.left(now()) > SignedDuration::ZERO);
}

#[test]
fn the_same_history_judged_by_each_use() {
    // Zone b was downscaled an hour ago. Whose min-time counts decides: b's own under
    // prepare-downscale, the zone going down's under the scaling plan.
    let b = |its_hours| vec![Some(zone("b", 1, Some(its_hours)))];
    let going_down = |hours: u32| Whose::ZoneGoingDown(HOUR * hours);
    // b waits 30 minutes, over for prepare-downscale; the follower going down waits 2 hours,
    // held another hour.
    let short_for_b = vec![Some(Downscaled {
        its_min_time: Some(HOUR / 2),
        ..zone("b", 1, None)
    })];
    assert_eq!(judge(short_for_b.clone(), Whose::EachDownscaledZone), None);
    assert_eq!(judge(short_for_b, going_down(2)), Some(("b", ago(-1))));
    // b waits 3 hours, the follower 30 minutes: the other way round.
    assert_eq!(judge(b(3), Whose::EachDownscaledZone), Some(("b", ago(-2))));
    assert_eq!(judge(b(3), Whose::ZoneGoingDown(HOUR / 2)), None);
}
