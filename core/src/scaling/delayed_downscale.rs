//! Delayed downscale: which pods may go, from their answers to the prepare call (pure).
//!
//! The contract (docs/compatibility.md): every pod at an index in `[to, from)` is POSTed and must
//! answer 2xx with `{"timestamp": <unix seconds>}` (when it started preparing). Any failure
//! blocks the downscale. Then, from the highest ordinal down, pods prepared at least `delay` ago
//! may go; the first one that is not stops the count (a partial downscale is allowed). Indexes
//! count from the first pod; its ordinal is `spec.ordinals.start` ([`PodNames`] names them).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::annotations::scaling::DelayedDownscale;
use crate::pod_address::PodAddressing;
use crate::pod_address::{PodEndpoint, PodRef, pod_host};
use crate::pods::CachedPod;
use crate::pods::is_controlled_by;
use crate::statefulset::{PodNames, StatefulSetState, pod_ordinal};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

/// The body a pod answers to POST.
#[derive(Debug, serde::Deserialize)]
struct PrepareAnswer {
    timestamp: i64,
}

/// When a pod started preparing, from its answer's body.
pub fn parse_answer(body: &[u8]) -> Result<Timestamp, String> {
    // What the pod said is not repeated (it ends up in Events): its size and the parser's
    // position are enough to find it in the pod's own logs.
    let answer: PrepareAnswer = serde_json::from_slice(body).map_err(|error| {
        format!(
            "expected JSON {{\"timestamp\": <unix seconds>}}, got {} bytes that are not ({error})",
            body.len()
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

/// The delayed-downscale endpoint of each of `statefulset`'s pods whose index is in `indexes`,
/// or why it cannot be reached, in index order. Only pods that exist (in `pods`, controlled by
/// `statefulset`) are named: a range comes from replica counts anyone editing the StatefulSet
/// writes (2147483647 would be two billion names), the pods are what is really there.
pub fn endpoints(
    statefulset: &StatefulSet,
    pods: &[Arc<CachedPod>],
    settings: &DelayedDownscale,
    indexes: Range<i32>,
    addressing: PodAddressing,
    cluster_domain: &str,
    namespace: &str,
) -> Vec<(i32, Result<PodEndpoint, String>)> {
    let state = StatefulSetState::of(statefulset);
    let service_name = statefulset
        .spec
        .as_ref()
        .and_then(|spec| spec.service_name.as_deref())
        .unwrap_or_default();
    let mut found: Vec<(i32, Result<PodEndpoint, String>)> = pods
        .iter()
        .filter(|pod| is_controlled_by(pod, statefulset))
        .filter_map(|pod| {
            let ordinal = i64::from(pod_ordinal(&state.name, &pod.name)?);
            let index = i32::try_from(ordinal - i64::from(state.ordinals_start)).ok()?;
            indexes.contains(&index).then_some((index, pod))
        })
        .map(|(index, pod)| {
            let reference = PodRef {
                name: &pod.name,
                namespace,
                service_name,
                pod_ip: pod.ip.as_deref(),
            };
            let endpoint = pod_host(addressing, cluster_domain, &reference)
                .map_err(|error| error.to_string())
                .and_then(|host| settings.url_for_host(&host))
                .map(|url| PodEndpoint {
                    pod: pod.name.clone(),
                    url,
                });
            (index, endpoint)
        })
        .collect();
    found.sort_by_key(|(index, _)| *index);
    found
}

/// How many pods without an answer a blocked downscale names.
const NAMED_MISSING: usize = 10;

/// What the pods' answers allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelayedDownscaleDecision {
    /// Scale down to `replicas` (between `to` and `from - 1`).
    ScaleTo { replicas: i32 },
    /// No pod at the end is old enough yet; the highest one will be at `until`.
    Wait { until: Timestamp },
    /// A pod could not be prepared: no downscale. Pod name → what went wrong.
    Blocked { failures: BTreeMap<String, String> },
}

/// Decides a delayed downscale from `from` to `to` replicas at `now`, given each going pod's
/// answer keyed by index (`[to, from)`; a missing index is a failure). `names` names the pods
/// of the failures.
pub fn decide(
    names: PodNames<'_>,
    from: i32,
    to: i32,
    delay: Duration,
    answers: &BTreeMap<i32, Result<Timestamp, String>>,
    now: Timestamp,
) -> DelayedDownscaleDecision {
    let mut failures: BTreeMap<String, String> = answers
        .iter()
        .filter(|(index, _)| (to..from).contains(*index))
        .filter_map(|(index, answer)| Some((names.at(*index), answer.as_ref().err()?.clone())))
        .collect();
    // Pods without an answer were not there to ask. The range may be huge (replicas are
    // anyone's to write): a few are named, the rest counted.
    let asked = answers
        .keys()
        .filter(|index| (to..from).contains(*index))
        .count();
    let missing = (i64::from(from) - i64::from(to)).max(0) - i64::try_from(asked).unwrap_or(0);
    if missing > 0 {
        for index in (to..from)
            .filter(|index| !answers.contains_key(index))
            .take(NAMED_MISSING)
        {
            failures.insert(names.at(index), "was not asked to prepare".to_owned());
        }
        let unnamed = missing - i64::try_from(NAMED_MISSING).unwrap_or(i64::MAX);
        if unnamed > 0 {
            failures.insert(
                format!("{unnamed} more pods"),
                "were not asked to prepare (they do not exist)".to_owned(),
            );
        }
    }
    if !failures.is_empty() {
        return DelayedDownscaleDecision::Blocked { failures };
    }
    let delay = jiff::SignedDuration::try_from(delay).unwrap_or(jiff::SignedDuration::MAX);
    let ready_at = |index: i32| -> Timestamp {
        let prepared = answers
            .get(&index)
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
        return DelayedDownscaleDecision::Wait {
            until: ready_at(from - 1),
        };
    }
    DelayedDownscaleDecision::ScaleTo { replicas: allowed }
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
        let cases: &[(&str, i32, i32, Vec<Answer>, DelayedDownscaleDecision)] = &[
            (
                "all going pods are old enough: full downscale",
                5,
                2,
                vec![(2, Ok(old)), (3, Ok(old)), (4, Ok(old))],
                DelayedDownscaleDecision::ScaleTo { replicas: 2 },
            ),
            (
                "only the highest are old enough: partial downscale",
                5,
                2,
                vec![(2, Ok(young)), (3, Ok(old)), (4, Ok(old))],
                DelayedDownscaleDecision::ScaleTo { replicas: 3 },
            ),
            (
                "an old pod below a young one does not count",
                5,
                2,
                vec![(2, Ok(old)), (3, Ok(old)), (4, Ok(young))],
                DelayedDownscaleDecision::Wait {
                    until: at(young + 3600),
                },
            ),
            (
                "exactly the delay ago is old enough",
                3,
                2,
                vec![(2, Ok(NOW - 3600))],
                DelayedDownscaleDecision::ScaleTo { replicas: 2 },
            ),
            (
                "a timestamp in the future waits",
                3,
                2,
                vec![(2, Ok(NOW + 10))],
                DelayedDownscaleDecision::Wait {
                    until: at(NOW + 10 + 3600),
                },
            ),
        ];
        for (name, from, to, pairs, expected) in cases {
            let got = decide(
                PodNames::new("sts", 0),
                *from,
                *to,
                hour,
                &answers(pairs),
                at(NOW),
            );
            assert_eq!(&got, expected, "{name}");
        }
    }

    #[test]
    fn any_failure_or_missing_answer_blocks() {
        let blocked = |names| {
            decide(
                names,
                4,
                1,
                Duration::from_secs(60),
                &answers(&[(1, Ok(NOW - 3600)), (3, Err("HTTP 500"))]),
                at(NOW),
            )
        };
        assert_eq!(
            blocked(PodNames::new("sts", 0)),
            DelayedDownscaleDecision::Blocked {
                failures: BTreeMap::from([
                    ("sts-2".to_owned(), "was not asked to prepare".to_owned()),
                    ("sts-3".to_owned(), "HTTP 500".to_owned()),
                ])
            }
        );
        assert_eq!(
            blocked(PodNames::new("sts", 3)),
            DelayedDownscaleDecision::Blocked {
                failures: BTreeMap::from([
                    ("sts-5".to_owned(), "was not asked to prepare".to_owned()),
                    ("sts-6".to_owned(), "HTTP 500".to_owned()),
                ])
            },
            "with ordinals from 3, indexes 2 and 3 are pods 5 and 6"
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

    #[test]
    fn endpoints_name_pods_from_the_ordinals_start() {
        use crate::annotations::{
            DELAYED_DOWNSCALE_ANNOTATION, PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION,
        };
        use k8s_openapi::api::apps::v1::{StatefulSetOrdinals, StatefulSetSpec};
        use k8s_openapi::api::core::v1::{Pod, PodStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            LabelSelector, ObjectMeta, OwnerReference,
        };

        let zone = BTreeMap::from([("zone".to_owned(), "a".to_owned())]);
        let statefulset = StatefulSet {
            metadata: ObjectMeta {
                name: Some("ingester-zone-a".into()),
                namespace: Some("mimir".into()),
                uid: Some("uid-a".into()),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(5),
                ordinals: Some(StatefulSetOrdinals { start: Some(3) }),
                service_name: Some("ingester".into()),
                selector: LabelSelector {
                    match_labels: Some(zone.clone()),
                    match_expressions: None,
                },
                ..StatefulSetSpec::default()
            }),
            status: None,
        };
        let pod = |ordinal: i32, owner_uid: &str| {
            Arc::new(CachedPod::of(&Pod {
                metadata: ObjectMeta {
                    name: Some(format!("ingester-zone-a-{ordinal}")),
                    namespace: Some("mimir".into()),
                    labels: Some(zone.clone()),
                    owner_references: Some(vec![OwnerReference {
                        kind: "StatefulSet".into(),
                        name: "ingester-zone-a".into(),
                        uid: owner_uid.into(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]),
                    ..ObjectMeta::default()
                },
                spec: None,
                status: Some(PodStatus {
                    pod_ip: Some(format!("10.0.0.{ordinal}")),
                    ..PodStatus::default()
                }),
            }))
        };
        // Ordinals 3..=7; pod 6 is a namesake owned by an older StatefulSet of that name.
        let pods: Vec<Arc<CachedPod>> = vec![pod(3, "uid-a"), pod(6, "uid-old"), pod(7, "uid-a")];
        let settings = crate::annotations::scaling::delayed_downscale(&BTreeMap::from([
            (DELAYED_DOWNSCALE_ANNOTATION.to_owned(), "1h".to_owned()),
            (
                PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION.to_owned(),
                "http://pod:8080/prepare".to_owned(),
            ),
        ]))
        .expect("valid settings")
        .expect("enabled");
        let urls = |addressing| -> Vec<(i32, Result<String, String>)> {
            endpoints(
                &statefulset,
                &pods,
                &settings,
                3..5,
                addressing,
                "cluster.local",
                "mimir",
            )
            .into_iter()
            .map(|(index, endpoint)| (index, endpoint.map(|endpoint| endpoint.url)))
            .collect()
        };
        // Pod 6 is not this StatefulSet's: it is not called, whatever the addressing (the
        // decision then says it was not asked); pod 7 is index 4.
        assert_eq!(
            urls(PodAddressing::Dns),
            [(
                4,
                Ok(
                    "http://ingester-zone-a-7.ingester.mimir.svc.cluster.local:8080/prepare"
                        .to_owned()
                )
            )]
        );
        assert_eq!(
            urls(PodAddressing::Ip),
            [(4, Ok("http://10.0.0.7:8080/prepare".to_owned()))]
        );
        // A range as large as a replica count allows names only the pods that exist.
        let all = endpoints(
            &statefulset,
            &pods,
            &settings,
            0..i32::MAX,
            PodAddressing::Dns,
            "cluster.local",
            "mimir",
        );
        assert_eq!(
            all.iter().map(|(index, _)| *index).collect::<Vec<_>>(),
            [0, 4]
        );
    }

    /// A downscale from a replica count nobody could create pods for is blocked naming a few
    /// of the missing pods and counting the rest, in time and memory bounded by the answers.
    #[test]
    fn a_huge_range_of_missing_pods_is_blocked_and_counted() {
        let names = PodNames::new("ingester-zone-a", 0);
        let answered = answers(&[(2, Ok(NOW - 7200))]);
        let decision = decide(
            names,
            i32::MAX,
            2,
            Duration::from_secs(3600),
            &answered,
            at(NOW),
        );
        let DelayedDownscaleDecision::Blocked { failures } = decision else {
            panic!("{decision:?}");
        };
        assert_eq!(failures.len(), NAMED_MISSING + 1);
        assert_eq!(
            failures[&format!("{} more pods", i64::from(i32::MAX) - 3 - 10)],
            "were not asked to prepare (they do not exist)"
        );
        assert_eq!(failures["ingester-zone-a-3"], "was not asked to prepare");
    }
}
