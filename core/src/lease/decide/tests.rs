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
    let absent = |last_holder: Option<&str>| Observation::Absent {
        since: t0,
        last_holder: last_holder.map(str::to_owned),
    };
    let cases: Vec<(&str, Observation, Duration, LeaseDecision)> = vec![
        (
            "nothing read yet",
            Observation::Unknown,
            ms(0),
            LeaseDecision::Read,
        ),
        (
            "a fresh install (never seen): create at once",
            absent(None),
            ms(0),
            LeaseDecision::Create,
        ),
        (
            "seen released, then gone: create at once",
            Observation::Absent {
                since: t0,
                last_holder: None,
            },
            ms(0),
            LeaseDecision::Create,
        ),
        (
            "seen held by me, then gone: create at once (I stopped acting when I saw it gone)",
            absent(Some(ME)),
            ms(0),
            LeaseDecision::Create,
        ),
        (
            "seen held by another, just gone: wait a duration, it may still act",
            absent(Some(OTHER)),
            ms(0),
            LeaseDecision::Wait {
                holder: None,
                free_at: t0 + ms(2000),
            },
        ),
        (
            "seen held by another, gone for just under a duration",
            absent(Some(OTHER)),
            ms(1999),
            LeaseDecision::Wait {
                holder: None,
                free_at: t0 + ms(2000),
            },
        ),
        (
            "seen held by another, gone for a whole duration: create",
            absent(Some(OTHER)),
            ms(2000),
            LeaseDecision::Create,
        ),
        (
            "ours, just written",
            present(Some(ME), Some(2)),
            ms(0),
            LeaseDecision::Renew,
        ),
        (
            "ours, seen long ago: still renew (the write is conditional anyway)",
            present(Some(ME), Some(2)),
            ms(60_000),
            LeaseDecision::Renew,
        ),
        (
            "released: take it at once",
            present(None, Some(1)),
            ms(0),
            LeaseDecision::Acquire(AcquireReason::Released),
        ),
        (
            "released without a duration",
            present(None, None),
            ms(0),
            LeaseDecision::Acquire(AcquireReason::Released),
        ),
        (
            "someone else's, just seen",
            present(Some(OTHER), Some(5)),
            ms(0),
            LeaseDecision::Wait {
                holder: Some(OTHER.to_owned()),
                free_at: t0 + ms(5000),
            },
        ),
        (
            "someone else's, unchanged for just under its own duration",
            present(Some(OTHER), Some(5)),
            ms(4999),
            LeaseDecision::Wait {
                holder: Some(OTHER.to_owned()),
                free_at: t0 + ms(5000),
            },
        ),
        (
            "someone else's, unchanged for its whole duration",
            present(Some(OTHER), Some(5)),
            ms(5000),
            LeaseDecision::Acquire(AcquireReason::Expired {
                holder: OTHER.to_owned(),
            }),
        ),
        (
            "its holder's duration counts, even when shorter than ours",
            present(Some(OTHER), Some(1)),
            ms(1000),
            LeaseDecision::Acquire(AcquireReason::Expired {
                holder: OTHER.to_owned(),
            }),
        ),
        (
            "no duration written: ours counts",
            present(Some(OTHER), None),
            ms(1999),
            LeaseDecision::Wait {
                holder: Some(OTHER.to_owned()),
                free_at: t0 + ms(2000),
            },
        ),
        (
            "no duration written, ours elapsed",
            present(Some(OTHER), None),
            ms(2000),
            LeaseDecision::Acquire(AcquireReason::Expired {
                holder: OTHER.to_owned(),
            }),
        ),
        (
            "a prefix of my name is not me",
            present(Some("me"), Some(2)),
            ms(0),
            LeaseDecision::Wait {
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
            "first read, absent: never seen held",
            Observation::Unknown,
            None,
            Observation::Absent {
                since: now,
                last_holder: None,
            },
        ),
        (
            "still absent keeps its since and last holder",
            Observation::Absent {
                since: t0,
                last_holder: Some(OTHER.to_owned()),
            },
            None,
            Observation::Absent {
                since: t0,
                last_holder: Some(OTHER.to_owned()),
            },
        ),
        (
            "gone: absent from now, remembering who held it",
            Observation::Present {
                record: v1.clone(),
                since: t0,
            },
            None,
            Observation::Absent {
                since: now,
                last_holder: Some(OTHER.to_owned()),
            },
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
            Observation::Absent {
                since: t0,
                last_holder: None,
            },
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
    let cases: Vec<(LeaseDecision, Result<(), LostReason>)> = vec![
        (LeaseDecision::Read, Ok(())),
        (LeaseDecision::Renew, Ok(())),
        (LeaseDecision::Create, Err(LostReason::Deleted)),
        (
            LeaseDecision::Wait {
                holder: None,
                free_at: t0,
            },
            Err(LostReason::Deleted),
        ),
        (
            LeaseDecision::Acquire(AcquireReason::Released),
            Err(LostReason::ReleasedByOther),
        ),
        (
            LeaseDecision::Wait {
                holder: Some(OTHER.to_owned()),
                free_at: t0,
            },
            Err(LostReason::TakenBy(OTHER.to_owned())),
        ),
        (
            LeaseDecision::Acquire(AcquireReason::Expired {
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
                LeaseDecision::Acquire(_) => break now,
                LeaseDecision::Wait { free_at, .. } => now = next_look(now, free_at, &timing),
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

/// A replica restarted with a new identity (or any newcomer) finds the old holder's Lease: it
/// waits the holder's whole duration from its own first read, however old `renewTime` looks.
#[test]
fn a_newcomer_waits_out_another_identitys_lease_from_its_first_read() {
    let t0 = Instant::now();
    let old = record("41", Some("me-old-identity"), Some(2));
    let observation = observe(&Observation::Unknown, Some(old.clone()), t0);
    assert_eq!(
        decide(&observation, ME, t0, &timing()),
        LeaseDecision::Wait {
            holder: Some("me-old-identity".to_owned()),
            free_at: t0 + ms(2000),
        }
    );
    let later = observe(&observation, Some(old), t0 + ms(1999));
    assert!(matches!(
        decide(&later, ME, t0 + ms(1999), &timing()),
        LeaseDecision::Wait { .. }
    ));
    assert_eq!(
        decide(&later, ME, t0 + ms(2000), &timing()),
        LeaseDecision::Acquire(AcquireReason::Expired {
            holder: "me-old-identity".to_owned()
        })
    );
}

/// Losing a term is not the end: a leader cut off from the API server stops at its renew
/// deadline, keeps campaigning, and when the API server returns renews its own Lease at its
/// first successful read (resuming within a retry period); a standby that saw the same version
/// before the outage may race it for the Lease, but only because that version went unchanged
/// for a whole duration; whoever's conditional write lands first leads.
#[test]
fn after_an_outage_the_holder_resumes_at_its_first_read_and_never_overlaps() {
    let timing = timing();
    let t0 = Instant::now();
    let held = record("7", Some(ME), Some(2));
    // The leader's last successful renewal was sent at t0; then the API server goes away for
    // 15 s: every call fails, so nothing is observed.
    let leader_until = timing.leading_until(t0);
    let mut leader = observe(&Observation::Unknown, Some(held.clone()), t0);
    let mut standby = observe(
        &Observation::Unknown,
        Some(record("7", Some(ME), Some(2))),
        t0 + ms(100),
    );
    assert!(
        leader_until < t0 + ms(15_000),
        "the outage outlasts the term"
    );
    assert_eq!(
        leader_outcome(&decide(&leader, ME, t0 + ms(1499), &timing)),
        Ok(()),
        "the term lasts until the renew deadline"
    );

    // The API server is back: both read the unchanged Lease.
    let back = t0 + ms(15_000);
    leader = observe(&leader, Some(held.clone()), back);
    standby = observe(&standby, Some(held), back);
    assert_eq!(
        decide(&leader, ME, back, &timing),
        LeaseDecision::Renew,
        "the holder campaigns again and resumes at its first read"
    );
    assert_eq!(
        decide(&standby, OTHER, back, &timing),
        LeaseDecision::Acquire(AcquireReason::Expired {
            holder: ME.to_owned()
        }),
        "the version went unchanged for a whole duration: the standby may race for it"
    );
    // Whoever wins writes a new version: the loser then waits a full duration from it.
    let renewed = record("8", Some(ME), Some(2));
    standby = observe(&standby, Some(renewed), back + ms(10));
    assert_eq!(
        decide(&standby, OTHER, back + ms(10), &timing),
        LeaseDecision::Wait {
            holder: Some(ME.to_owned()),
            free_at: back + ms(10) + ms(2000),
        }
    );
    // And the new term starts after the old one ended: no overlap.
    assert!(back > leader_until);
}

/// A leader that sees its Lease deleted stops (its term is lost), then, having stopped, may
/// create it again at once; a standby that saw it held waits a whole duration.
#[test]
fn a_deleted_lease_ends_the_term_and_its_holder_may_recreate_it() {
    let t0 = Instant::now();
    let mine = observe(
        &Observation::Unknown,
        Some(record("3", Some(ME), Some(2))),
        t0,
    );
    let gone = observe(&mine, None, t0 + ms(300));
    let decision = decide(&gone, ME, t0 + ms(300), &timing());
    assert_eq!(leader_outcome(&decision), Err(LostReason::Deleted));
    assert_eq!(
        decision,
        LeaseDecision::Create,
        "as a candidate again: create"
    );
    let theirs = observe(
        &Observation::Unknown,
        Some(record("3", Some(ME), Some(2))),
        t0,
    );
    let gone = observe(&theirs, None, t0 + ms(300));
    assert_eq!(
        decide(&gone, OTHER, t0 + ms(300), &timing()),
        LeaseDecision::Wait {
            holder: None,
            free_at: t0 + ms(2300),
        }
    );
}
