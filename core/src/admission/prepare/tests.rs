use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetStatus};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::*;
use crate::admission::downscale::Downscale;
use crate::admission::verdict::Refusal;
use crate::annotations::{
    LAST_DOWNSCALE_ANNOTATION, MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL,
    PREPARE_DOWNSCALE_PATH_ANNOTATION, PREPARE_DOWNSCALE_PORT_ANNOTATION,
};
use crate::downscale_history::ZoneTracker;
use crate::ledger::{Entry, Ledger};

fn downscale(name: &str, from: i32, to: i32) -> Downscale {
    Downscale {
        resource: "statefulsets".into(),
        name: name.into(),
        namespace: "mimir".into(),
        from,
        to,
    }
}

fn statefulset(
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    service: Option<&str>,
) -> StatefulSet {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(map(labels)),
            annotations: Some(map(annotations)),
            ..ObjectMeta::default()
        },
        spec: Some(StatefulSetSpec {
            service_name: service.map(str::to_owned),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

const PREPARED: &[(&str, &str)] = &[
    (
        PREPARE_DOWNSCALE_PATH_ANNOTATION,
        "ingester/prepare-shutdown",
    ),
    (PREPARE_DOWNSCALE_PORT_ANNOTATION, "8080"),
];

#[test]
fn labelled_statefulsets_need_port_path_and_service() {
    let d = downscale("ingester-zone-a", 5, 3);
    let subject = "downscale of statefulsets/ingester-zone-a in mimir from 5 to 3 replicas is not allowed because";
    let labelled = [(PREPARE_DOWNSCALE_LABEL, "true")];
    let cases: Vec<(StatefulSet, Result<Target, Verdict>)> = vec![
        (
            statefulset("s", &[], PREPARED, Some("svc")),
            Err(Verdict::allow()),
        ),
        (
            statefulset(
                "s",
                &[(PREPARE_DOWNSCALE_LABEL, "false")],
                PREPARED,
                Some("svc"),
            ),
            Err(Verdict::allow()),
        ),
        (
            // no-downscale is judged before anything is prepared or claimed
            statefulset(
                "s",
                &[
                    (PREPARE_DOWNSCALE_LABEL, "true"),
                    (crate::annotations::NO_DOWNSCALE_LABEL, "true"),
                ],
                PREPARED,
                Some("svc"),
            ),
            Err(Verdict::refuse(
                Reason::NoDownscaleLabel,
                format!("{subject} it has the label 'grafana.com/no-downscale=true'"),
            )),
        ),
        (
            statefulset(
                "s",
                &labelled,
                &[(PREPARE_DOWNSCALE_PATH_ANNOTATION, "p")],
                Some("svc"),
            ),
            Err(Verdict::refuse(
                Reason::PrepareSettings,
                format!(
                    "{subject} the grafana.com/prepare-downscale-http-port annotation is not set or empty."
                ),
            )),
        ),
        (
            // a port that would move the host if pasted into the URL
            statefulset(
                "s",
                &labelled,
                &[
                    (PREPARE_DOWNSCALE_PORT_ANNOTATION, "8080@evil.example"),
                    (PREPARE_DOWNSCALE_PATH_ANNOTATION, "p"),
                ],
                Some("svc"),
            ),
            Err(Verdict::refuse(
                Reason::PrepareSettings,
                format!(
                    "{subject} the grafana.com/prepare-downscale-http-port annotation is \"8080@evil.example\" is not a port number (1-65535)."
                ),
            )),
        ),
        (
            statefulset(
                "s",
                &labelled,
                &[
                    (PREPARE_DOWNSCALE_PORT_ANNOTATION, "80"),
                    (PREPARE_DOWNSCALE_PATH_ANNOTATION, ""),
                ],
                Some("svc"),
            ),
            Err(Verdict::refuse(
                Reason::PrepareSettings,
                format!(
                    "{subject} the grafana.com/prepare-downscale-http-path annotation is not set or empty."
                ),
            )),
        ),
        (
            statefulset("s", &labelled, PREPARED, None),
            Err(Verdict::refuse(
                Reason::PrepareSettings,
                format!("{subject} the serviceName is not set or empty."),
            )),
        ),
        (
            statefulset("s", &labelled, PREPARED, Some("ingester")),
            Ok(Target {
                prepare: PrepareEndpoint {
                    port: 8080,
                    path: "ingester/prepare-shutdown".into(),
                    service_name: "ingester".into(),
                },
                group: None,
                ordinals_start: 0,
            }),
        ),
        (
            statefulset(
                "s",
                &[
                    (PREPARE_DOWNSCALE_LABEL, "true"),
                    (ROLLOUT_GROUP_LABEL, "ingester"),
                ],
                PREPARED,
                Some("i"),
            ),
            Ok(Target {
                prepare: PrepareEndpoint {
                    port: 8080,
                    path: "ingester/prepare-shutdown".into(),
                    service_name: "i".into(),
                },
                group: Some("ingester".into()),
                ordinals_start: 0,
            }),
        ),
    ];
    for (sts, expected) in cases {
        assert_eq!(check_statefulset(&d, &sts), expected, "{:?}", sts.metadata);
    }
}

/// The records a Go v0.38 deployment leaves (the zone tracker, min-time as an annotation) and
/// the claims of downscales still landing or that never landed.
#[test]
fn min_time_between_zones_from_the_tracker_and_from_claims() {
    let now: Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let d = downscale("zone-b", 5, 3);
    let subject =
        "downscale of statefulsets/zone-b in mimir from 5 to 3 replicas is not allowed because";
    let tracked = |entries: &[(&str, &str)]| ZoneTracker {
        resource_version: Some("1".into()),
        data: entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    };
    let annotated_min_time = |generation: i64| {
        let mut zone_a = statefulset(
            "zone-a",
            &[(ROLLOUT_GROUP_LABEL, "ingester")],
            &[(MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, "12h")],
            Some("svc"),
        );
        zone_a.metadata.generation = Some(generation);
        zone_a
    };
    let claimed_at = |seconds_ago: i64| {
        Ledger::default().with_entry(
            "zone-a",
            Some(&Entry::claim(
                now - jiff::SignedDuration::from_secs(seconds_ago),
                "u",
                (3, 2),
                4,
                None,
            )),
        )
    };
    let five_minutes_ago = r#"{"lastDownscaled":"2026-11-21T11:55:00Z"}"#;
    type Case = (&'static str, i64, Ledger, ZoneTracker, Result<(), String>);
    let cases: Vec<Case> = vec![
        (
            "the Go operator's tracker, min-time as an annotation",
            4,
            Ledger::default(),
            tracked(&[("zone-a", five_minutes_ago)]),
            Err(format!(
                "{subject} statefulset zone-a was downscaled at 2026-11-21 11:55:00 +0000 UTC and is annotated to wait 12h0m0s between zone downscales (11h55m0s left)"
            )),
        ),
        (
            "a malformed tracker entry holds",
            4,
            Ledger::default(),
            tracked(&[("zone-a", "last tuesday")]),
            Err(format!(
                "{subject} statefulset zone-a counts as downscaled at 2026-11-21 12:00:00 +0000 UTC: the zone tracker's entry \"zone-a\" is \"last tuesday\""
            )),
        ),
        (
            "a claim still landing holds",
            4,
            claimed_at(30),
            ZoneTracker::default(),
            Err(format!(
                "{subject} statefulset zone-a was downscaled at 2026-11-21 11:59:30"
            )),
        ),
        (
            "a claim that landed holds",
            5,
            claimed_at(120),
            ZoneTracker::default(),
            Err(format!(
                "{subject} statefulset zone-a was downscaled at 2026-11-21 11:58:00"
            )),
        ),
        (
            "a claim that never landed does not",
            4,
            claimed_at(120),
            ZoneTracker::default(),
            Ok(()),
        ),
    ];
    for (case, generation, ledger, tracker, expected) in cases {
        let records = Records {
            ledger: &ledger,
            tracker: &tracker,
            claim_grace: GRACE,
        };
        let members = [annotated_min_time(generation)];
        expect_min_time(case, judge_min_time(&d, &members, records, now), expected);
    }
}

fn member(name: &str, min_time: Option<&str>, last_downscale: Option<&str>) -> StatefulSet {
    let mut labels = vec![(ROLLOUT_GROUP_LABEL, "ingester")];
    if let Some(min_time) = min_time {
        labels.push((MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, min_time));
    }
    let annotations: Vec<(&str, &str)> = last_downscale
        .map(|at| vec![(LAST_DOWNSCALE_ANNOTATION, at)])
        .unwrap_or_default();
    statefulset(name, &labels, &annotations, Some("svc"))
}

#[test]
fn min_time_between_zones() {
    let now: Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let at = |text: &str| -> Timestamp { text.parse().unwrap() };
    let d = downscale("zone-b", 5, 3);
    let subject =
        "downscale of statefulsets/zone-b in mimir from 5 to 3 replicas is not allowed because";
    let empty = Ledger::default();
    let ledger_with = |zone: &str, when: &str| {
        Ledger::default().with_entry(zone, Some(&Entry::new(at(when), "u")))
    };
    type Case = (&'static str, Vec<StatefulSet>, Ledger, Result<(), String>);
    let cases: Vec<Case> = vec![
        (
            "no other zone",
            vec![member("zone-b", Some("1h"), Some("2026-11-21T11:59:00Z"))],
            empty.clone(),
            Ok(()),
        ),
        (
            "never downscaled",
            vec![member("zone-a", Some("1h"), None)],
            empty.clone(),
            Ok(()),
        ),
        (
            "long ago",
            vec![member("zone-a", Some("1h"), Some("2026-11-21T10:00:00Z"))],
            empty.clone(),
            Ok(()),
        ),
        (
            "exactly min-time ago",
            vec![member("zone-a", Some("1h"), Some("2026-11-21T11:00:00Z"))],
            empty.clone(),
            Ok(()),
        ),
        (
            "no min-time label",
            vec![member("zone-a", None, Some("2026-11-21T11:59:59Z"))],
            empty.clone(),
            Ok(()),
        ),
        (
            "annotation within min-time",
            vec![member("zone-a", Some("1h"), Some("2026-11-21T11:30:00Z"))],
            empty.clone(),
            Err(format!(
                "{subject} statefulset zone-a was downscaled at 2026-11-21 11:30:00 +0000 UTC and is labelled to wait 1h0m0s between zone downscales (30m0s left)"
            )),
        ),
        (
            "ledger within min-time",
            vec![member("zone-a", Some("1h"), None)],
            ledger_with("zone-a", "2026-11-21T11:59:58.5Z"),
            Err(format!(
                "{subject} statefulset zone-a was downscaled at 2026-11-21 11:59:58 +0000 UTC and is labelled to wait 1h0m0s between zone downscales (59m59s left)"
            )),
        ),
        (
            "the later of ledger and annotation counts",
            vec![member("zone-a", Some("1h"), Some("2026-11-21T10:00:00Z"))],
            ledger_with("zone-a", "2026-11-21T11:50:00Z"),
            Err(format!(
                "{subject} statefulset zone-a was downscaled at 2026-11-21 11:50:00 +0000 UTC and is labelled to wait 1h0m0s between zone downscales (50m0s left)"
            )),
        ),
        (
            "the longest wait is named",
            vec![
                member("zone-a", Some("30m"), Some("2026-11-21T11:50:00Z")),
                member("zone-c", Some("2h"), Some("2026-11-21T11:00:00Z")),
            ],
            empty.clone(),
            Err(format!(
                "{subject} statefulset zone-c was downscaled at 2026-11-21 11:00:00 +0000 UTC and is labelled to wait 2h0m0s between zone downscales (1h0m0s left)"
            )),
        ),
        (
            "own entry is ignored",
            vec![member("zone-b", Some("1h"), None)],
            ledger_with("zone-b", "2026-11-21T11:59:00Z"),
            Ok(()),
        ),
        (
            "bad annotation",
            vec![member("zone-a", Some("1h"), Some("yesterday"))],
            empty.clone(),
            Err(format!(
                "{subject} parsing downscale annotations failed: can't parse grafana.com/last-downscale annotation of zone-a"
            )),
        ),
        (
            "bad min-time",
            vec![member(
                "zone-a",
                Some("1 hour"),
                Some("2026-11-21T11:30:00Z"),
            )],
            empty.clone(),
            Err(format!(
                "{subject} parsing downscale annotations failed: can't parse grafana.com/min-time-between-zones-downscale of zone-a: \"1 hour\""
            )),
        ),
        (
            "bad ledger entry",
            vec![member("zone-a", Some("1h"), None)],
            {
                let mut ledger = Ledger::default();
                ledger.data.insert("zone-a".into(), "garbage".into());
                ledger
            },
            Err(format!(
                "{subject} parsing downscale annotations failed: the group's downscale ledger: entry \"zone-a\""
            )),
        ),
    ];
    for (case, members, ledger, expected) in cases {
        let records = Records {
            ledger: &ledger,
            tracker: &ZoneTracker::default(),
            claim_grace: GRACE,
        };
        expect_min_time(case, judge_min_time(&d, &members, records, now), expected);
    }
}

const GRACE: std::time::Duration = std::time::Duration::from_secs(60);

fn expect_min_time(case: &str, got: Result<(), Verdict>, expected: Result<(), String>) {
    {
        match (got, expected) {
            (Ok(()), Ok(())) => {}
            (Err(decision), Err(expected)) => {
                assert!(!decision.is_allowed(), "{case}");
                let message = decision.message().unwrap();
                assert!(
                    message.starts_with(&expected),
                    "{case}:\n got {message}\nwant {expected}"
                );
            }
            (got, expected) => panic!("{case}: got {got:?}, expected {expected:?}"),
        }
    }
}

/// A pod of `owner` (whose selector is [`statefulset`]'s: none, so `member` gets one) with
/// one container, Ready since `READY_AT` when `ready` is "True".
fn pod(owner: &str, phase: &str, ready: &str, terminating: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            labels: Some(BTreeMap::from([("zone".to_owned(), owner.to_owned())])),
            owner_references: Some(vec![OwnerReference {
                uid: format!("uid-{owner}"),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            deletion_timestamp: terminating.then_some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: ready.into(),
                last_transition_time: Some(Time(at(READY_AT))),
                ..PodCondition::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".into(),
                ready: ready == "True",
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

const READY_AT: i64 = 1_700_000_000;

fn cached(pods: &[Pod]) -> Vec<crate::pods::CachedPod> {
    pods.iter().map(crate::pods::CachedPod::of).collect()
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

/// `member` with a selector matching [`pod`]'s labels and the given status and minReadySeconds.
fn zone(name: &str, replicas: i32, updated: i32, min_ready_seconds: Option<i32>) -> StatefulSet {
    let mut sts = member(name, None, None);
    if let Some(spec) = sts.spec.as_mut() {
        spec.selector.match_labels = Some(BTreeMap::from([("zone".to_owned(), name.to_owned())]));
        spec.min_ready_seconds = min_ready_seconds;
    }
    sts.status = Some(StatefulSetStatus {
        replicas,
        updated_replicas: Some(updated),
        ..StatefulSetStatus::default()
    });
    sts
}

#[test]
fn readiness_counts_the_owned_pods_the_planner_counts_as_available() {
    let sts = zone("zone-a", 3, 3, None);
    let container_not_ready = {
        let mut pod = pod("zone-a", "Running", "True", false);
        if let Some(status) = pod.status.as_mut() {
            status.container_statuses = Some(vec![ContainerStatus {
                name: "main".into(),
                ready: false,
                ..ContainerStatus::default()
            }]);
        }
        pod
    };
    let relabelled = {
        let mut pod = pod("zone-a", "Running", "True", false);
        pod.metadata.labels = None;
        pod
    };
    let pods = vec![
        pod("zone-a", "Running", "True", false),
        pod("zone-a", "Running", "True", false),
        pod("zone-a", "Running", "False", false),
        pod("zone-a", "Pending", "True", false),
        pod("zone-a", "Running", "True", true),
        pod("zone-x", "Running", "True", false),
        // The Go operator counted these two; the planner does not.
        container_not_ready,
        // Owned, but its StatefulSet's selector no longer matches it.
        relabelled,
    ];
    assert_eq!(
        MemberReadiness::of(&sts, &cached(&pods), at(READY_AT + 60)),
        MemberReadiness {
            name: "zone-a".into(),
            replicas: 3,
            updated_replicas: 3,
            ready_pods: 2
        }
    );
}

#[test]
fn readiness_waits_for_min_ready_seconds() {
    let sts = zone("zone-a", 2, 2, Some(30));
    let pods = vec![
        pod("zone-a", "Running", "True", false),
        pod("zone-a", "Running", "True", false),
    ];
    let ready_pods = |now| MemberReadiness::of(&sts, &cached(&pods), now).ready_pods;
    assert_eq!(ready_pods(at(READY_AT + 29)), 0, "Ready for less than 30s");
    assert_eq!(ready_pods(at(READY_AT + 30)), 2);
    let d = downscale("zone-b", 5, 3);
    let young = [MemberReadiness::of(&sts, &cached(&pods), at(READY_AT + 10))];
    assert_eq!(
        judge_readiness(&d, &young).unwrap_err().message().unwrap(),
        "downscale of statefulsets/zone-b in mimir from 5 to 3 replicas is not allowed because statefulset zone-a has 0 non-updated replicas and 2 non-ready replicas"
    );
}

#[test]
fn other_zones_must_be_ready_and_updated() {
    let d = downscale("zone-b", 5, 3);
    let ready = |name: &str, replicas, updated, ready| MemberReadiness {
        name: name.into(),
        replicas,
        updated_replicas: updated,
        ready_pods: ready,
    };
    let cases = [
        (vec![ready("zone-a", 3, 3, 3)], None),
        (
            vec![ready("zone-b", 5, 2, 1), ready("zone-a", 3, 3, 3)],
            None,
        ),
        (
            vec![ready("zone-a", 3, 3, 2)],
            Some("statefulset zone-a has 0 non-updated replicas and 1 non-ready replicas"),
        ),
        (
            vec![ready("zone-a", 3, 1, 3)],
            Some("statefulset zone-a has 2 non-updated replicas and 0 non-ready replicas"),
        ),
        (
            vec![ready("zone-a", 3, 3, 3), ready("zone-c", 0, 0, 1)],
            Some("statefulset zone-c has 0 non-updated replicas and -1 non-ready replicas"),
        ),
    ];
    for (members, expected) in cases {
        match (judge_readiness(&d, &members), expected) {
            (Ok(()), None) => {}
            (Err(decision), Some(expected)) => {
                assert_eq!(
                    decision.message().unwrap(),
                    format!(
                        "downscale of statefulsets/zone-b in mimir from 5 to 3 replicas is not allowed because {expected}"
                    )
                );
            }
            (got, expected) => panic!("{members:?}: got {got:?}, expected {expected:?}"),
        }
    }
}

/// The StatefulSet's pods as listed: name → IP.
fn existing(pods: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
    pods.iter()
        .map(|(pod, ip)| ((*pod).to_owned(), ip.map(str::to_owned)))
        .collect()
}

#[test]
fn endpoints_of_the_pods_going_away_highest_first() {
    let target = Target {
        prepare: PrepareEndpoint {
            port: 8080,
            path: "/ingester/prepare-shutdown".into(),
            service_name: "ingester".into(),
        },
        group: None,
        ordinals_start: 0,
    };
    let d = downscale("ingester-zone-a", 5, 3);
    let pods = existing(&[
        ("ingester-zone-a-0", Some("127.0.1.0")),
        ("ingester-zone-a-3", Some("127.0.1.3")),
        ("ingester-zone-a-4", Some("127.0.1.4")),
    ]);

    let by_dns = endpoints(&d, &target, PodAddressing::Dns, "cluster.local", &pods).unwrap();
    assert_eq!(
        by_dns,
        vec![
            PodEndpoint {
                pod: "ingester-zone-a-4".into(),
                url: "http://ingester-zone-a-4.ingester.mimir.svc.cluster.local:8080/ingester/prepare-shutdown".into()
            },
            PodEndpoint {
                pod: "ingester-zone-a-3".into(),
                url: "http://ingester-zone-a-3.ingester.mimir.svc.cluster.local:8080/ingester/prepare-shutdown".into()
            },
        ]
    );
    let by_ip = endpoints(&d, &target, PodAddressing::Ip, "cluster.local", &pods).unwrap();
    assert_eq!(
        by_ip[0].url,
        "http://127.0.1.4:8080/ingester/prepare-shutdown"
    );
    assert_eq!(
        by_ip[1].url,
        "http://127.0.1.3:8080/ingester/prepare-shutdown"
    );

    let no_ip = existing(&[("ingester-zone-a-4", None), ("ingester-zone-a-3", None)]);
    let missing = endpoints(&d, &target, PodAddressing::Ip, "cluster.local", &no_ip).unwrap_err();
    assert_eq!(missing.refusal().map(Refusal::kind), Some("pod-address"));
    assert!(
        missing.message().unwrap().ends_with(
            "pod ingester-zone-a-4 cannot be addressed by IP: it has no status.podIP yet"
        )
    );
    // A pod that does not exist has nothing to prepare; names that are not the StatefulSet's
    // pods' are not called
    let gone = existing(&[("ingester-zone-a-4", None), ("ingester-zone-a-4x", None)]);
    let named = endpoints(&d, &target, PodAddressing::Dns, "cluster.local", &gone).unwrap();
    assert_eq!(named.len(), 1);
    assert_eq!(named[0].pod, "ingester-zone-a-4");
}

/// A downscale from a replica count as large as anyone may write costs what the pods cost.
#[test]
fn a_downscale_from_a_huge_replica_count_calls_only_the_pods_that_exist() {
    let target = Target {
        prepare: PrepareEndpoint {
            port: 8080,
            path: "p".into(),
            service_name: "ingester".into(),
        },
        group: None,
        ordinals_start: 0,
    };
    let d = downscale("ingester-zone-a", i32::MAX, 0);
    let pods = existing(&[("ingester-zone-a-0", None), ("ingester-zone-a-1", None)]);
    let named = endpoints(&d, &target, PodAddressing::Dns, "cluster.local", &pods).unwrap();
    let names: Vec<&str> = named.iter().map(|endpoint| endpoint.pod.as_str()).collect();
    assert_eq!(names, ["ingester-zone-a-1", "ingester-zone-a-0"]);
}

#[test]
fn pods_going_away_are_named_from_the_ordinals_start() {
    let mut sts = statefulset(
        "ingester-zone-a",
        &[(PREPARE_DOWNSCALE_LABEL, "true")],
        PREPARED,
        Some("ingester"),
    );
    if let Some(spec) = sts.spec.as_mut() {
        spec.ordinals = Some(k8s_openapi::api::apps::v1::StatefulSetOrdinals { start: Some(3) });
    }
    // Five pods, ordinals 3..=7: going to three removes 7 and 6.
    let d = downscale("ingester-zone-a", 5, 3);
    let target = check_statefulset(&d, &sts).unwrap();
    assert_eq!(target.ordinals_start, 3);
    let ips = existing(&[
        ("ingester-zone-a-3", Some("127.0.1.3")),
        ("ingester-zone-a-6", Some("127.0.1.6")),
        ("ingester-zone-a-7", Some("127.0.1.7")),
    ]);
    let by_dns = endpoints(&d, &target, PodAddressing::Dns, "cluster.local", &ips).unwrap();
    assert_eq!(
        by_dns,
        vec![
            PodEndpoint {
                pod: "ingester-zone-a-7".into(),
                url: "http://ingester-zone-a-7.ingester.mimir.svc.cluster.local:8080/ingester/prepare-shutdown".into()
            },
            PodEndpoint {
                pod: "ingester-zone-a-6".into(),
                url: "http://ingester-zone-a-6.ingester.mimir.svc.cluster.local:8080/ingester/prepare-shutdown".into()
            },
        ]
    );
    let by_ip = endpoints(&d, &target, PodAddressing::Ip, "cluster.local", &ips).unwrap();
    let urls: Vec<&str> = by_ip.iter().map(|endpoint| endpoint.url.as_str()).collect();
    assert_eq!(
        urls,
        [
            "http://127.0.1.7:8080/ingester/prepare-shutdown",
            "http://127.0.1.6:8080/ingester/prepare-shutdown"
        ]
    );
    let to_zero = endpoints(
        &downscale("ingester-zone-a", 1, 0),
        &target,
        PodAddressing::Ip,
        "cluster.local",
        &ips,
    )
    .unwrap();
    assert_eq!(
        to_zero[0].pod, "ingester-zone-a-3",
        "the first pod is ordinal 3"
    );
}

#[test]
fn outcome_messages() {
    let d = downscale("s", 2, 1);
    assert_eq!(
        allowed(&d).message().unwrap(),
        "downscale of statefulsets/s in mimir from 2 to 1 replicas is allowed -- all pods successfully prepared for shutdown."
    );
    let failed = pods_failed(&d, &"POST http://x (pod s-1) answered HTTP 500");
    assert_eq!(
        failed.refusal().map(Refusal::kind),
        Some("pods-failed-to-prepare")
    );
    assert_eq!(
        failed.message().unwrap(),
        "downscale of statefulsets/s in mimir from 2 to 1 replicas is not allowed because one or more pods failed to prepare for shutdown: POST http://x (pod s-1) answered HTTP 500"
    );
}
