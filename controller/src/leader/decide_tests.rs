use std::time::{Duration, Instant};

use super::*;

const ME: &str = "me-1234";
const OTHER: &str = "other-5678";

fn timing() -> LeaseTiming {
    LeaseTiming {
        duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(300),
    }
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn record(version: &str, holder: Option<&str>, duration: Option<u64>) -> LeaseRecord {
    LeaseRecord {
        resource_version: version.to_owned(),
        holder: holder.map(str::to_owned),
        duration: duration.map(Duration::from_secs),
    }
}

#[test]
fn decide_table() {
    let t0 = Instant::now();
    let present = |holder: Option<&str>, duration: Option<u64>| Observation::Present {
        record: record("1", holder, duration),
        since: t0,
    };
    let cases: Vec<(&str, Observation, Duration, Decision)> = vec![
        (
            "nothing read yet",
            Observation::Unknown,
            ms(0),
            Decision::Read,
        ),
        (
            "just seen absent: wait a duration",
            Observation::Absent { since: t0 },
            ms(0),
            Decision::Wait {
                holder: None,
                free_at: t0 + ms(2000),
            },
        ),
        (
            "absent for just under a duration",
            Observation::Absent { since: t0 },
            ms(1999),
            Decision::Wait {
                holder: None,
                free_at: t0 + ms(2000),
            },
        ),
        (
            "absent for a whole duration: create",
            Observation::Absent { since: t0 },
            ms(2000),
            Decision::Create,
        ),
        (
            "ours, just written",
            present(Some(ME), Some(2)),
            ms(0),
            Decision::Renew,
        ),
        (
            "ours, seen long ago: still renew (the write is conditional anyway)",
            present(Some(ME), Some(2)),
            ms(60_000),
            Decision::Renew,
        ),
        (
            "released: take it at once",
            present(None, Some(1)),
            ms(0),
            Decision::Acquire(AcquireReason::Released),
        ),
        (
            "released without a duration",
            present(None, None),
            ms(0),
            Decision::Acquire(AcquireReason::Released),
        ),
        (
            "someone else's, just seen",
            present(Some(OTHER), Some(5)),
            ms(0),
            Decision::Wait {
                holder: Some(OTHER.to_owned()),
                free_at: t0 + ms(5000),
            },
        ),
        (
            "someone else's, unchanged for just under its own duration",
            present(Some(OTHER), Some(5)),
            ms(4999),
            Decision::Wait {
                holder: Some(OTHER.to_owned()),
                free_at: t0 + ms(5000),
            },
        ),
        (
            "someone else's, unchanged for its whole duration",
            present(Some(OTHER), Some(5)),
            ms(5000),
            Decision::Acquire(AcquireReason::Expired {
                holder: OTHER.to_owned(),
            }),
        ),
        (
            "its holder's duration counts, even when shorter than ours",
            present(Some(OTHER), Some(1)),
            ms(1000),
            Decision::Acquire(AcquireReason::Expired {
                holder: OTHER.to_owned(),
            }),
        ),
        (
            "no duration written: ours counts",
            present(Some(OTHER), None),
            ms(1999),
            Decision::Wait {
                holder: Some(OTHER.to_owned()),
                free_at: t0 + ms(2000),
            },
        ),
        (
            "no duration written, ours elapsed",
            present(Some(OTHER), None),
            ms(2000),
            Decision::Acquire(AcquireReason::Expired {
                holder: OTHER.to_owned(),
            }),
        ),
        (
            "a prefix of my name is not me",
            present(Some("me"), Some(2)),
            ms(0),
            Decision::Wait {
                holder: Some("me".to_owned()),
                free_at: t0 + ms(2000),
            },
        ),
    ];
    for (name, observation, elapsed, expected) in cases {
        assert_eq!(
            decide(&observation, ME, t0 + elapsed, &timing()),
            expected,
            "{name}"
        );
    }
}

#[test]
fn observe_table() {
    let t0 = Instant::now();
    let now = t0 + ms(700);
    let v1 = record("1", Some(OTHER), Some(2));
    let v2 = record("2", Some(OTHER), Some(2));
    let cases: Vec<(&str, Observation, Option<LeaseRecord>, Observation)> = vec![
        (
            "first read, absent",
            Observation::Unknown,
            None,
            Observation::Absent { since: now },
        ),
        (
            "still absent keeps its since",
            Observation::Absent { since: t0 },
            None,
            Observation::Absent { since: t0 },
        ),
        (
            "gone: absent from now",
            Observation::Present {
                record: v1.clone(),
                since: t0,
            },
            None,
            Observation::Absent { since: now },
        ),
        (
            "first read, present",
            Observation::Unknown,
            Some(v1.clone()),
            Observation::Present {
                record: v1.clone(),
                since: now,
            },
        ),
        (
            "created after absence",
            Observation::Absent { since: t0 },
            Some(v1.clone()),
            Observation::Present {
                record: v1.clone(),
                since: now,
            },
        ),
        (
            "same version keeps its since",
            Observation::Present {
                record: v1.clone(),
                since: t0,
            },
            Some(v1.clone()),
            Observation::Present {
                record: v1.clone(),
                since: t0,
            },
        ),
        (
            "a new version (a renewal) starts over, same holder or not",
            Observation::Present {
                record: v1.clone(),
                since: t0,
            },
            Some(v2.clone()),
            Observation::Present {
                record: v2.clone(),
                since: now,
            },
        ),
    ];
    for (name, previous, read, expected) in cases {
        assert_eq!(observe(&previous, read, now), expected, "{name}");
    }
}

#[test]
fn leader_outcome_table() {
    let t0 = Instant::now();
    let cases: Vec<(Decision, Result<(), LostReason>)> = vec![
        (Decision::Read, Ok(())),
        (Decision::Renew, Ok(())),
        (Decision::Create, Err(LostReason::Deleted)),
        (
            Decision::Wait {
                holder: None,
                free_at: t0,
            },
            Err(LostReason::Deleted),
        ),
        (
            Decision::Acquire(AcquireReason::Released),
            Err(LostReason::ReleasedByOther),
        ),
        (
            Decision::Wait {
                holder: Some(OTHER.to_owned()),
                free_at: t0,
            },
            Err(LostReason::TakenBy(OTHER.to_owned())),
        ),
        (
            Decision::Acquire(AcquireReason::Expired {
                holder: OTHER.to_owned(),
            }),
            Err(LostReason::TakenBy(OTHER.to_owned())),
        ),
    ];
    for (decision, expected) in cases {
        assert_eq!(leader_outcome(&decision), expected, "{decision:?}");
    }
}

#[test]
fn duration_seconds_round_up_so_nobody_waits_less() {
    for (duration, seconds) in [
        (ms(2000), 2),
        (ms(1500), 2),
        (ms(2001), 3),
        (ms(500), 1),
        (ms(0), 1),
        (Duration::from_secs(u64::MAX / 2), i32::MAX),
    ] {
        let timing = LeaseTiming {
            duration,
            ..timing()
        };
        assert_eq!(timing.duration_seconds(), seconds, "{duration:?}");
    }
}

#[test]
fn next_look_is_a_retry_period_or_when_the_lease_frees_up() {
    let t0 = Instant::now();
    assert_eq!(next_look(t0, t0 + ms(5000), &timing()), t0 + ms(300));
    assert_eq!(next_look(t0, t0 + ms(100), &timing()), t0 + ms(100));
}

/// The fencing argument on the pure functions: a leader renews every retry period with each
/// renewal taking up to `latency` to be applied; a standby reads every retry period. Whatever
/// the latency, when the leader stops renewing, the standby's takeover comes after the leader's
/// own deadline, counted from the send of its last successful renewal.
#[test]
fn a_standby_takes_over_only_after_the_leaders_deadline() {
    let timing = timing();
    for latency_ms in [0, 1, 50, 299, 700, 1400] {
        let latency = ms(latency_ms);
        let t0 = Instant::now();
        // Renewals sent at t0, t0+300ms, ... applied `latency` later; the last one sent at 3s.
        let sends: Vec<Instant> = (0..=10).map(|i| t0 + timing.retry_period * i).collect();
        let last_sent = *sends.last().unwrap();
        let leader_until = timing.leading_until(last_sent);
        let version_at = |t: Instant| {
            sends
                .iter()
                .filter(|sent| **sent + latency <= t)
                .count()
                .to_string()
        };
        // The standby reads at odd offsets on its own schedule.
        let mut observation = Observation::Unknown;
        let mut now = t0 + ms(17);
        let takeover = loop {
            let read = record(&version_at(now), Some(OTHER), Some(2));
            observation = observe(&observation, Some(read), now);
            match decide(&observation, ME, now, &timing) {
                Decision::Acquire(_) => break now,
                Decision::Wait { free_at, .. } => now = next_look(now, free_at, &timing),
                other => panic!("unexpected {other:?}"),
            }
        };
        assert!(
            takeover >= last_sent + timing.duration,
            "latency {latency:?}: takeover {:?} after the last send",
            takeover - last_sent
        );
        assert!(
            takeover > leader_until,
            "latency {latency:?}: the leader may act until {:?}, the standby took over at {:?}",
            leader_until - t0,
            takeover - t0
        );
        assert!(
            takeover <= last_sent + latency + timing.duration + timing.retry_period,
            "latency {latency:?}: takeover is not needlessly late"
        );
    }
}
