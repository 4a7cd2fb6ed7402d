//! Delayed downscale: which pods may go, from their answers to the prepare call (pure).
//!
//! The contract (compat.md): every pod in `[to, from)` is POSTed and must answer 2xx with
//! `{"timestamp": <unix seconds>}` (when it started preparing). Any failure blocks the
//! downscale. Then, from the highest ordinal down, pods prepared at least `delay` ago may go;
//! the first one that is not stops the count (a partial downscale is allowed).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

/// The body a pod answers to POST.
#[derive(Debug, serde::Deserialize)]
struct PrepareAnswer {
    timestamp: i64,
}

/// When a pod started preparing, from its answer's body.
pub fn parse_answer(body: &[u8]) -> Result<Timestamp, String> {
    let answer: PrepareAnswer = serde_json::from_slice(body).map_err(|error| {
        format!(
            "expected JSON {{\"timestamp\": <unix seconds>}}, got {:?} ({error})",
            String::from_utf8_lossy(body)
                .chars()
                .take(128)
                .collect::<String>()
        )
    })?;
    if answer.timestamp <= 0 {
        return Err(format!(
            "timestamp {} is not a time after the Unix epoch",
            answer.timestamp
        ));
    }
    Timestamp::from_second(answer.timestamp)
        .map_err(|error| format!("timestamp {} is out of range: {error}", answer.timestamp))
}

/// What the pods' answers allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Scale down to `replicas` (between `to` and `from - 1`).
    ScaleTo { replicas: i32 },
    /// No pod at the end is old enough yet; the highest one will be at `until`.
    Wait { until: Timestamp },
    /// A pod could not be prepared: no downscale. Pod name → what went wrong.
    Blocked { failures: BTreeMap<String, String> },
}

/// Decides a delayed downscale from `from` to `to` replicas at `now`, given each going pod's
/// answer keyed by ordinal (`[to, from)`; a missing ordinal is a failure).
pub fn decide(
    statefulset: &str,
    from: i32,
    to: i32,
    delay: Duration,
    answers: &BTreeMap<i32, Result<Timestamp, String>>,
    now: Timestamp,
) -> Decision {
    let mut failures = BTreeMap::new();
    for ordinal in to..from {
        match answers.get(&ordinal) {
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                failures.insert(format!("{statefulset}-{ordinal}"), error.clone());
            }
            None => {
                failures.insert(
                    format!("{statefulset}-{ordinal}"),
                    "was not asked to prepare".to_owned(),
                );
            }
        }
    }
    if !failures.is_empty() {
        return Decision::Blocked { failures };
    }
    let delay = jiff::SignedDuration::try_from(delay).unwrap_or(jiff::SignedDuration::MAX);
    let ready_at = |ordinal: i32| -> Timestamp {
        let prepared = answers
            .get(&ordinal)
            .and_then(|answer| answer.as_ref().ok())
            .copied()
            .unwrap_or(Timestamp::MAX);
        prepared.checked_add(delay).unwrap_or(Timestamp::MAX)
    };
    let mut allowed = from;
    while allowed > to && ready_at(allowed - 1) <= now {
        allowed -= 1;
    }
    if allowed == from {
        return Decision::Wait {
            until: ready_at(from - 1),
        };
    }
    Decision::ScaleTo { replicas: allowed }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn answers(pairs: &[(i32, Result<i64, &str>)]) -> BTreeMap<i32, Result<Timestamp, String>> {
        pairs
            .iter()
            .map(|(ordinal, answer)| {
                (
                    *ordinal,
                    answer.map(at).map_err(|error| (*error).to_owned()),
                )
            })
            .collect()
    }

    /// A pod's answer in a test row: its timestamp or an error.
    type Answer = (i32, Result<i64, &'static str>);

    #[test]
    fn decides_from_the_highest_ordinal_down() {
        let hour = Duration::from_secs(3600);
        let old = NOW - 3600;
        let young = NOW - 60;
        let cases: &[(&str, i32, i32, Vec<Answer>, Decision)] = &[
            (
                "all going pods are old enough: full downscale",
                5,
                2,
                vec![(2, Ok(old)), (3, Ok(old)), (4, Ok(old))],
                Decision::ScaleTo { replicas: 2 },
            ),
            (
                "only the highest are old enough: partial downscale",
                5,
                2,
                vec![(2, Ok(young)), (3, Ok(old)), (4, Ok(old))],
                Decision::ScaleTo { replicas: 3 },
            ),
            (
                "an old pod below a young one does not count",
                5,
                2,
                vec![(2, Ok(old)), (3, Ok(old)), (4, Ok(young))],
                Decision::Wait {
                    until: at(young + 3600),
                },
            ),
            (
                "exactly the delay ago is old enough",
                3,
                2,
                vec![(2, Ok(NOW - 3600))],
                Decision::ScaleTo { replicas: 2 },
            ),
            (
                "a timestamp in the future waits",
                3,
                2,
                vec![(2, Ok(NOW + 10))],
                Decision::Wait {
                    until: at(NOW + 10 + 3600),
                },
            ),
        ];
        for (name, from, to, pairs, expected) in cases {
            let got = decide("sts", *from, *to, hour, &answers(pairs), at(NOW));
            assert_eq!(&got, expected, "{name}");
        }
    }

    #[test]
    fn any_failure_or_missing_answer_blocks() {
        let got = decide(
            "sts",
            4,
            1,
            Duration::from_secs(60),
            &answers(&[(1, Ok(NOW - 3600)), (3, Err("HTTP 500"))]),
            at(NOW),
        );
        assert_eq!(
            got,
            Decision::Blocked {
                failures: BTreeMap::from([
                    ("sts-2".to_owned(), "was not asked to prepare".to_owned()),
                    ("sts-3".to_owned(), "HTTP 500".to_owned()),
                ])
            }
        );
    }

    #[test]
    fn answers_must_be_json_with_a_positive_timestamp() {
        assert_eq!(parse_answer(br#"{"timestamp": 1700000000}"#), Ok(at(NOW)));
        assert_eq!(
            parse_answer(br#"{"timestamp": 1700000000, "extra": true}"#),
            Ok(at(NOW))
        );
        for bad in [
            &b"not json"[..],
            b"",
            b"{}",
            br#"{"timestamp": "1700000000"}"#,
            br#"{"timestamp": 1.5}"#,
            br#"{"timestamp": 0}"#,
            br#"{"timestamp": -5}"#,
            br#"{"timestamp": 99999999999999999}"#,
        ] {
            assert!(
                parse_answer(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
