//! Table-driven tests of the scaling planner: one row per rule.

use std::time::Duration;

use crate::annotations::InvalidAnnotation;
use crate::annotations::scaling::{DelayedDownscale, MirrorReference};
use jiff::Timestamp;

use super::*;

const NOW: &str = "2026-01-01T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn ago(seconds: i64) -> Timestamp {
    now() - jiff::SignedDuration::from_secs(seconds)
}

fn member(name: &str, replicas: i32) -> Member {
    Member {
        name: name.to_owned(),
        replicas,
        ready_replicas: replicas,
        leader: None,
        upscale_only_when_leader_ready: false,
        force_replicas: None,
        min_time_between_downscale: Ok(Some(Duration::from_secs(12 * 3600))),
        last_downscale: Ok(None),
        mirror: Ok(None),
        delayed_downscale: Ok(None),
        warnings: Vec::new(),
    }
}

fn follower(name: &str, replicas: i32, leader: &str) -> Member {
    Member {
        leader: Some(leader.to_owned()),
        ..member(name, replicas)
    }
}

fn mirroring(name: &str, replicas: i32, wanted: i32, status: Option<i32>) -> Member {
    Member {
        mirror: Ok(Some(Mirror {
            reference: MirrorReference {
                name: "ref".into(),
                kind: "ReplicaTemplate".into(),
                api_version: "rollout-operator.grafana.com/v1".into(),
                write_back: true,
            },
            scale: Ok(ReferenceScale {
                spec_replicas: wanted,
                status_replicas: status,
            }),
        })),
        ..member(name, replicas)
    }
}

fn delayed() -> DelayedDownscale {
    DelayedDownscale {
        delay: Duration::from_secs(3600),
        url: "http://pod:8080/prepare".parse().unwrap(),
    }
}

fn invalid(key: &'static str) -> InvalidAnnotation {
    InvalidAnnotation {
        key,
        value: "bad".into(),
        accepted: "good",
        fallback: "hold".into(),
    }
}

fn set(statefulset: &str, from: i32, to: i32) -> ScalingAction {
    ScalingAction::SetReplicas {
        statefulset: statefulset.into(),
        from,
        to,
    }
}

fn write_back(statefulset: &str, replicas: i32) -> ScalingAction {
    ScalingAction::WriteBack {
        statefulset: statefulset.into(),
        replicas,
    }
}

fn cancel(statefulset: &str, keep: i32) -> ScalingAction {
    ScalingAction::CancelDelayedDownscale {
        statefulset: statefulset.into(),
        keep,
    }
}

struct Case {
    name: &'static str,
    members: Vec<Member>,
    actions: Vec<ScalingAction>,
    /// (statefulset, kind, reason, a piece of the note)
    findings: Vec<(&'static str, FindingKind, &'static str, &'static str)>,
}

fn cases() -> Vec<Case> {
    use FindingKind::{Hold, Problem, Scale};
    vec![
        Case {
            name: "no scaling settings: nothing to do",
            members: vec![member("a", 3), member("b", 3)],
            actions: vec![],
            findings: vec![],
        },
        Case {
            name: "follower scales up to its leader at once, even right after a downscale",
            members: vec![
                Member {
                    last_downscale: Ok(Some(ago(10))),
                    ..member("a", 5)
                },
                follower("b", 3, "a"),
            ],
            actions: vec![set("b", 3, 5)],
            findings: vec![(
                "b",
                Scale,
                reasons::SCALE_UP,
                "b scales up from 3 to 5: its leader a has 5 replicas",
            )],
        },
        Case {
            name: "upscale-only-when-leader-ready holds while the leader is not ready",
            members: vec![
                Member {
                    ready_replicas: 4,
                    ..member("a", 5)
                },
                Member {
                    upscale_only_when_leader_ready: true,
                    ..follower("b", 3, "a")
                },
            ],
            actions: vec![],
            findings: vec![("b", Hold, reasons::HELD, "only 4 are ready")],
        },
        Case {
            name: "upscale-only-when-leader-ready scales once the leader is ready",
            members: vec![
                member("a", 5),
                Member {
                    upscale_only_when_leader_ready: true,
                    ..follower("b", 3, "a")
                },
            ],
            actions: vec![set("b", 3, 5)],
            findings: vec![("b", Scale, reasons::SCALE_UP, "from 3 to 5")],
        },
        Case {
            name: "downscale waits for the min time since the newest downscale of another zone",
            members: vec![
                Member {
                    last_downscale: Ok(Some(ago(3 * 3600))),
                    ..member("a", 5)
                },
                follower("b", 10, "a"),
                Member {
                    last_downscale: Ok(Some(ago(20 * 3600))),
                    ..member("c", 10)
                },
            ],
            actions: vec![],
            findings: vec![(
                "b",
                Hold,
                reasons::HELD,
                "b stays at 10 (its leader a has 5 replicas): a was downscaled at 2026-01-01T09:00:00Z, min time 12h0m0s; not before 2026-01-01T21:00:00Z",
            )],
        },
        Case {
            name: "the follower's own last downscale does not count",
            members: vec![
                member("a", 5),
                Member {
                    last_downscale: Ok(Some(ago(60))),
                    ..follower("b", 10, "a")
                },
            ],
            actions: vec![set("b", 10, 5)],
            findings: vec![(
                "b",
                Scale,
                reasons::SCALE_DOWN,
                "b scales down from 10 to 5: its leader a has 5 replicas",
            )],
        },
        Case {
            name: "downscale goes once the min time has passed",
            members: vec![
                Member {
                    last_downscale: Ok(Some(ago(12 * 3600))),
                    ..member("a", 5)
                },
                follower("b", 10, "a"),
            ],
            actions: vec![set("b", 10, 5)],
            findings: vec![("b", Scale, reasons::SCALE_DOWN, "from 10 to 5")],
        },
        Case {
            name: "a follower without the min-time label follows down when no zone was ever downscaled",
            members: vec![
                member("a", 5),
                Member {
                    min_time_between_downscale: Ok(None),
                    ..follower("b", 10, "a")
                },
            ],
            actions: vec![set("b", 10, 5)],
            findings: vec![("b", Scale, reasons::SCALE_DOWN, "from 10 to 5")],
        },
        Case {
            name: "a follower with an unreadable min-time label follows down when no zone was ever downscaled, and is told",
            members: vec![
                member("a", 5),
                Member {
                    min_time_between_downscale: Err(invalid(
                        "grafana.com/min-time-between-zones-downscale",
                    )),
                    ..follower("b", 10, "a")
                },
            ],
            actions: vec![set("b", 10, 5)],
            findings: vec![
                (
                    "b",
                    Problem,
                    reasons::INVALID,
                    "min-time-between-zones-downscale",
                ),
                ("b", Scale, reasons::SCALE_DOWN, "from 10 to 5"),
            ],
        },
        Case {
            name: "a follower without the min-time label does not scale down after another zone's downscale",
            members: vec![
                Member {
                    last_downscale: Ok(Some(ago(12 * 3600))),
                    ..member("a", 5)
                },
                Member {
                    min_time_between_downscale: Ok(None),
                    ..follower("b", 10, "a")
                },
            ],
            actions: vec![],
            findings: vec![(
                "b",
                Problem,
                reasons::INVALID,
                "has no grafana.com/min-time",
            )],
        },
        Case {
            name: "an invalid min-time label holds the downscale",
            members: vec![
                Member {
                    last_downscale: Ok(Some(ago(12 * 3600))),
                    ..member("a", 5)
                },
                Member {
                    min_time_between_downscale: Err(invalid(
                        "grafana.com/min-time-between-zones-downscale",
                    )),
                    ..follower("b", 10, "a")
                },
            ],
            actions: vec![],
            findings: vec![(
                "b",
                Problem,
                reasons::INVALID,
                "min-time-between-zones-downscale",
            )],
        },
        Case {
            name: "an unparsable last-downscale of another zone holds the downscale",
            members: vec![
                Member {
                    last_downscale: Err(
                        "can't parse grafana.com/last-downscale annotation of a: \"yesterday\""
                            .into(),
                    ),
                    ..member("a", 5)
                },
                follower("b", 10, "a"),
            ],
            actions: vec![],
            findings: vec![("b", Problem, reasons::INVALID, "\"yesterday\"")],
        },
        Case {
            name: "a forced count past the ceiling holds, saying why",
            members: vec![
                member("a", 5),
                Member {
                    force_replicas: Some(i32::MAX),
                    ..follower("b", 5, "a")
                },
            ],
            actions: vec![],
            findings: vec![(
                "b",
                Problem,
                reasons::INVALID,
                "b stays at 5: force-replicas is 2147483647, more than the 100000 replicas baton ever sets",
            )],
        },
        Case {
            name: "a reference asking past the ceiling holds, saying why",
            members: vec![mirroring("m", 3, 1_000_000, Some(3))],
            actions: vec![],
            findings: vec![(
                "m",
                Problem,
                reasons::INVALID,
                "more than the 100000 replicas",
            )],
        },
        Case {
            name: "a leader at the ceiling is followed",
            members: vec![member("a", MAX_REPLICAS), follower("b", 5, "a")],
            actions: vec![set("b", 5, MAX_REPLICAS)],
            findings: vec![("b", Scale, reasons::SCALE_UP, "from 5 to 100000")],
        },
        Case {
            name: "a missing leader warns and the group keeps going",
            members: vec![follower("b", 3, "zone-x"), follower("c", 1, "b")],
            actions: vec![set("c", 1, 3)],
            findings: vec![
                (
                    "b",
                    Problem,
                    reasons::LEADER_NOT_FOUND,
                    "its leader zone-x is not a StatefulSet of rollout group g",
                ),
                ("c", Scale, reasons::SCALE_UP, "from 1 to 3"),
            ],
        },
        Case {
            name: "force-replicas overrides the leader",
            members: vec![
                member("a", 5),
                Member {
                    force_replicas: Some(8),
                    ..follower("b", 5, "a")
                },
            ],
            actions: vec![set("b", 5, 8)],
            findings: vec![("b", Scale, reasons::SCALE_UP, "force-replicas is 8")],
        },
        Case {
            name: "one StatefulSet per pass: zone c waits for the next pass",
            members: vec![member("a", 5), follower("b", 3, "a"), follower("c", 1, "b")],
            actions: vec![set("b", 3, 5)],
            findings: vec![("b", Scale, reasons::SCALE_UP, "from 3 to 5")],
        },
        Case {
            name: "ignored bad values are reported and scaling goes on",
            members: vec![
                member("a", 5),
                Member {
                    warnings: vec![invalid("grafana.com/rollout-force-replicas")],
                    ..follower("b", 3, "a")
                },
            ],
            actions: vec![set("b", 3, 5)],
            findings: vec![
                (
                    "b",
                    Problem,
                    reasons::INVALID,
                    "grafana.com/rollout-force-replicas",
                ),
                ("b", Scale, reasons::SCALE_UP, "from 3 to 5"),
            ],
        },
        Case {
            name: "mirroring follows the reference up and writes status back",
            members: vec![mirroring("a", 3, 5, Some(3))],
            actions: vec![set("a", 3, 5), write_back("a", 5)],
            findings: vec![(
                "a",
                Scale,
                reasons::SCALE_UP,
                "a scales up from 3 to 5: ReplicaTemplate ref (rollout-operator.grafana.com/v1) wants 5 replicas",
            )],
        },
        Case {
            name: "mirroring follows the reference down without delay (min time does not apply)",
            members: vec![
                Member {
                    last_downscale: Ok(Some(ago(1))),
                    ..member("b", 1)
                },
                mirroring("a", 5, 2, Some(5)),
            ],
            actions: vec![set("a", 5, 2), write_back("a", 2)],
            findings: vec![("a", Scale, reasons::SCALE_DOWN, "from 5 to 2")],
        },
        Case {
            name: "mirroring with equal replicas only writes back when status differs",
            members: vec![mirroring("a", 3, 3, Some(1)), mirroring("b", 3, 3, Some(3))],
            actions: vec![write_back("a", 3)],
            findings: vec![],
        },
        Case {
            name: "write-back false never writes the status",
            members: vec![{
                let mut m = mirroring("a", 3, 5, None);
                if let Ok(Some(mirror)) = &mut m.mirror {
                    mirror.reference.write_back = false;
                }
                m
            }],
            actions: vec![set("a", 3, 5)],
            findings: vec![("a", Scale, reasons::SCALE_UP, "from 3 to 5")],
        },
        Case {
            name: "mirroring with force-replicas follows the forced count",
            members: vec![Member {
                force_replicas: Some(4),
                ..mirroring("a", 3, 10, Some(3))
            }],
            actions: vec![set("a", 3, 4), write_back("a", 4)],
            findings: vec![("a", Scale, reasons::SCALE_UP, "force-replicas is 4")],
        },
        Case {
            name: "delayed downscale: equal replicas cancel every pod's preparation",
            members: vec![Member {
                delayed_downscale: Ok(Some(delayed())),
                ..mirroring("a", 3, 3, Some(3))
            }],
            actions: vec![cancel("a", 3)],
            findings: vec![],
        },
        Case {
            name: "delayed downscale: upscale cancels on the pods that stay, then scales",
            members: vec![Member {
                delayed_downscale: Ok(Some(delayed())),
                ..mirroring("a", 3, 5, Some(3))
            }],
            actions: vec![cancel("a", 5), set("a", 3, 5), write_back("a", 5)],
            findings: vec![("a", Scale, reasons::SCALE_UP, "from 3 to 5")],
        },
        Case {
            name: "delayed downscale: a downscale asks the pods first",
            members: vec![Member {
                delayed_downscale: Ok(Some(delayed())),
                ..mirroring("a", 5, 2, Some(5))
            }],
            actions: vec![ScalingAction::DelayedDownscale {
                statefulset: "a".into(),
                from: 5,
                to: 2,
            }],
            findings: vec![],
        },
        Case {
            name: "a bad delayed-downscale setting holds all scaling of that StatefulSet",
            members: vec![Member {
                delayed_downscale: Err(invalid("grafana.com/rollout-delayed-downscale")),
                ..mirroring("a", 5, 2, Some(5))
            }],
            actions: vec![],
            findings: vec![(
                "a",
                Problem,
                reasons::INVALID,
                "grafana.com/rollout-delayed-downscale",
            )],
        },
        Case {
            name: "an unreadable reference warns and does not scale",
            members: vec![Member {
                mirror: Ok(Some(Mirror {
                    reference: MirrorReference {
                        name: "missing".into(),
                        kind: "ReplicaTemplate".into(),
                        api_version: "v1".into(),
                        write_back: true,
                    },
                    scale: Err("not found".into()),
                })),
                ..member("a", 5)
            }],
            actions: vec![],
            findings: vec![(
                "a",
                Problem,
                reasons::REFERENCE_UNAVAILABLE,
                "cannot read the scale of ReplicaTemplate missing (v1): not found",
            )],
        },
        Case {
            name: "incomplete mirroring annotations warn and do not scale",
            members: vec![Member {
                mirror: Err(invalid(
                    "grafana.com/rollout-mirror-replicas-from-resource-kind",
                )),
                ..member("a", 5)
            }],
            actions: vec![],
            findings: vec![(
                "a",
                Problem,
                reasons::INVALID,
                "mirror-replicas-from-resource-kind",
            )],
        },
        Case {
            name: "leader/follower goes first: mirroring waits for the next pass",
            members: vec![
                mirroring("a", 3, 5, Some(3)),
                member("b", 5),
                follower("c", 1, "b"),
            ],
            actions: vec![set("c", 1, 5)],
            findings: vec![("c", Scale, reasons::SCALE_UP, "from 1 to 5")],
        },
    ]
}

#[test]
fn every_rule() {
    for case in cases() {
        let snapshot = ScalingSnapshot {
            group: "g".into(),
            members: case.members,
            unread: Vec::new(),
        };
        let plan = plan(&snapshot, now());
        assert_eq!(plan.actions, case.actions, "{}: actions", case.name);
        assert_eq!(
            plan.findings.len(),
            case.findings.len(),
            "{}: findings {:#?}",
            case.name,
            plan.findings
        );
        for (finding, (statefulset, kind, reason, note)) in plan.findings.iter().zip(&case.findings)
        {
            assert_eq!(finding.statefulset, *statefulset, "{}", case.name);
            assert_eq!(finding.kind, *kind, "{}", case.name);
            assert_eq!(finding.reason, *reason, "{}", case.name);
            assert!(
                finding.note.contains(note),
                "{}: {:?} does not contain {note:?}",
                case.name,
                finding.note
            );
        }
    }
}

#[test]
fn a_held_downscale_asks_to_look_again_when_it_becomes_possible() {
    let snapshot = ScalingSnapshot {
        group: "g".into(),
        unread: Vec::new(),
        members: vec![
            Member {
                last_downscale: Ok(Some(ago(3 * 3600))),
                ..member("a", 5)
            },
            follower("b", 10, "a"),
        ],
    };
    let plan = plan(&snapshot, now());
    assert_eq!(
        plan.recheck_at,
        Some(ago(3 * 3600) + jiff::SignedDuration::from_hours(12))
    );
    assert!(!plan.poll);
}

#[test]
fn groups_with_mirroring_members_are_polled() {
    let snapshot = ScalingSnapshot {
        group: "g".into(),
        unread: Vec::new(),
        members: vec![member("a", 1), mirroring("b", 3, 3, Some(3))],
    };
    assert!(plan(&snapshot, now()).poll);
}

#[test]
fn a_group_with_a_cluster_unread_is_not_scaled_and_every_member_says_why() {
    // Given a follower that would go up and a mirroring member that would go down, in a group
    // of which cluster-c could not be read;
    let snapshot = ScalingSnapshot {
        group: "g".into(),
        members: vec![
            member("cluster-a/a", 5),
            follower("cluster-b/b", 1, "cluster-a/a"),
            mirroring("cluster-b/m", 5, 3, Some(5)),
        ],
        unread: vec![super::Unread {
            cluster: "cluster-c".into(),
            why: "its pods are not listed yet".into(),
        }],
    };
    // when the group is planned,
    let plan = plan(&snapshot, now());
    // then nothing is done, not even a write-back, and every member is held naming cluster-c;
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert_eq!(plan.findings.len(), 3, "{:#?}", plan.findings);
    for finding in &plan.findings {
        assert_eq!(
            (finding.kind, finding.reason),
            (FindingKind::Hold, reasons::HELD)
        );
        assert!(
            finding
                .note
                .contains("cluster cluster-c cannot be read: its pods are not listed yet"),
            "{}",
            finding.note
        );
    }
    // and the group comes back by itself.
    assert!(plan.poll);
    // The same group read whole scales the follower.
    let whole = ScalingSnapshot {
        unread: Vec::new(),
        ..snapshot
    };
    assert_eq!(
        plan_of(&whole).actions,
        vec![set("cluster-b/b", 1, 5)],
        "the whole view scales"
    );
}

fn plan_of(snapshot: &ScalingSnapshot) -> ScalingPlan {
    plan(snapshot, now())
}
