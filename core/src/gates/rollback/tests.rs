//! Scenarios for rollbacks: what is decided when one is asked for, and how the gate rolls the
//! pods back.

use super::*;
use crate::explained::Explained;
use crate::gates::decide::tests::deleted_zones;
use crate::gates::{GateWait, HALTED_ANNOTATION, SOAK_ANNOTATION, decide};
use crate::rollout::{Action, StatefulSetSnapshot};
use crate::testing::{annotated, group, now, zone};

/// Zone `name` rolling from `<name>-v1` to `<name>-v2`, its first `updated` pods at v2.
fn rolling(name: &str, replicas: u32, updated: u32) -> StatefulSetSnapshot {
    zone(name, replicas)
        .at_revision(&format!("{name}-v1"))
        .template_changed_to(&format!("{name}-v2"))
        .updated_first(updated)
        .build()
}

/// Zone `name` done at `<name>-v2` (current revision moved on).
fn finished(name: &str, replicas: u32) -> StatefulSetSnapshot {
    zone(name, replicas)
        .at_revision(&format!("{name}-v2"))
        .build()
}

fn history(names: &[&str]) -> BTreeMap<String, Vec<Revision>> {
    names
        .iter()
        .map(|name| {
            let revisions = vec![
                Revision {
                    name: format!("{name}-v1"),
                    number: 1,
                },
                Revision {
                    name: format!("{name}-v2"),
                    number: 2,
                },
            ];
            ((*name).to_owned(), revisions)
        })
        .collect()
}

/// The zone's pods were created `seconds_ago`.
fn created_ago(mut statefulset: StatefulSetSnapshot, seconds_ago: i64) -> StatefulSetSnapshot {
    for pod in &mut statefulset.pods {
        pod.created_at = Some(now() - jiff::SignedDuration::from_secs(seconds_ago));
    }
    statefulset
}

#[test]
fn a_rollback_goes_back_to_what_each_zone_ran_before_the_last_zone_reached_first() {
    // a finished (its pods older), b half way (its new pod newer), c not reached.
    let group = group(vec![
        created_ago(finished("a", 2), 600),
        created_ago(rolling("b", 2, 1), 60),
        rolling("c", 2, 0),
    ]);
    let records = start(&group, &history(&["a", "b", "c"]), "errors up", now()).expect("starts");
    let order: Vec<(&str, &str, &str, u32)> = records
        .iter()
        .map(|(name, record)| {
            (
                name.as_str(),
                record.from.as_str(),
                record.to.as_str(),
                record.turn,
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("b", "b-v2", "b-v1", 0),
            ("a", "a-v2", "a-v1", 1),
            ("c", "c-v2", "c-v1", 2),
        ]
    );
    assert_eq!(
        describe(&records),
        "b from b-v2 to b-v1, then a from a-v2 to a-v1, then c from c-v2 to c-v1"
    );
    assert!(
        records
            .iter()
            .all(|(_, record)| record.why == "errors up" && !record.restored)
    );
}

#[test]
fn without_creation_times_the_zones_reached_go_in_reverse_member_order() {
    let group = group(vec![
        finished("a", 2),
        rolling("b", 2, 1),
        rolling("c", 2, 0),
    ]);
    let records = start(&group, &history(&["a", "b", "c"]), "why", now()).expect("starts");
    let names: Vec<&str> = records.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["b", "a", "c"]);
}

#[test]
fn a_rollback_that_cannot_be_done_says_which_member_and_why() {
    let no_history = group(vec![finished("a", 2)]);
    assert_eq!(
        start(&no_history, &BTreeMap::new(), "why", now())
            .unwrap_err()
            .to_string(),
        "cannot roll back StatefulSet a: its ControllerRevision a-v2 is not found"
    );
    let first_revision = group(vec![finished("a", 2)]);
    let only = BTreeMap::from([(
        "a".to_owned(),
        vec![Revision {
            name: "a-v2".to_owned(),
            number: 1,
        }],
    )]);
    assert_eq!(
        start(&first_revision, &only, "why", now()).unwrap_err().why,
        "it has no revision before a-v2 to go back to"
    );
    let by_partition = group(vec![annotated(
        rolling("a", 2, 1),
        crate::annotations::UPDATE_BY_ANNOTATION,
        "partition",
    )]);
    assert!(
        start(&by_partition, &history(&["a"]), "why", now())
            .unwrap_err()
            .why
            .contains("roll its template back in Git")
    );
}

/// The members after the controller stored `records` and wrote every template back.
fn restored(
    mut group: crate::rollout::GroupSnapshot,
    records: &[(String, RollbackRecord)],
) -> crate::rollout::GroupSnapshot {
    for member in &mut group.statefulsets {
        let (_, record) = records
            .iter()
            .find(|(name, _)| *name == member.name)
            .expect("a record per member");
        let record = RollbackRecord {
            restored: true,
            settled: true,
            ..record.clone()
        };
        member.update_revision = Some(record.to.clone());
        member
            .annotations
            .insert(ROLLBACK_STATE_ANNOTATION.to_owned(), record.to_annotation());
    }
    group
}

#[test]
fn the_gate_rolls_back_one_zone_at_a_time_in_turn_newest_pods_first_whatever_else_holds() {
    // A 1h soak and a halt-free group: b (3 of 4 at v2) goes first, its newest pod first.
    let before = group(vec![
        annotated(created_ago(finished("a", 4), 600), SOAK_ANNOTATION, "1h"),
        created_ago(rolling("b", 4, 3), 60),
    ]);
    let records = start(&before, &history(&["a", "b"]), "why", now()).expect("starts");
    let rolling_back = restored(before, &records);
    let (plan, decision) = decide(&rolling_back, now());
    assert!(decision.rolling_back);
    assert_eq!(decision.wait(), None);
    assert_eq!(deleted_zones(&plan), ["b"]);
    let deleted: Vec<&str> = plan
        .deletions()
        .filter_map(|action| match action {
            Action::DeletePod { pod, .. } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        deleted,
        ["b-2"],
        "the newest of b's v2 pods (0, 1, 2) first"
    );
    assert_eq!(
        status(&rolling_back, |_| false),
        Status::RollingBack(vec!["b".to_owned(), "a".to_owned()])
    );
}

#[test]
fn a_persons_halt_holds_a_rollback() {
    let before = group(vec![finished("a", 2), rolling("b", 2, 1)]);
    let records = start(&before, &history(&["a", "b"]), "why", now()).expect("starts");
    let mut halted = restored(before, &records);
    halted.statefulsets[0]
        .annotations
        .insert(HALTED_ANNOTATION.to_owned(), "wait".to_owned());
    let (plan, decision) = decide(&halted, now());
    assert!(deleted_zones(&plan).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("Halted"));
}

#[test]
fn a_template_that_comes_back_after_the_rollback_holds_and_is_never_written_again() {
    let before = group(vec![finished("a", 2), rolling("b", 2, 1)]);
    let records = start(&before, &history(&["a", "b"]), "why", now()).expect("starts");
    let mut reverted = restored(before, &records);
    // A GitOps tool re-applies v2 on b.
    reverted.statefulsets[1].update_revision = Some("b-v2".to_owned());
    let (plan, decision) = decide(&reverted, now());
    assert!(deleted_zones(&plan).is_empty());
    let wait = decision.wait().expect("holds");
    assert_eq!(wait.kind(), "TemplateReverted");
    assert!(
        wait.to_string()
            .contains("went back to b-v2 after baton rolled it back to b-v1")
    );
    assert!(matches!(
        status(&reverted, |_| false),
        Status::Reverted { .. }
    ));
}

#[test]
fn once_every_zone_runs_the_old_revision_the_group_rolled_back_until_the_template_moves_on() {
    let before = group(vec![finished("a", 2), rolling("b", 2, 1)]);
    let records = start(&before, &history(&["a", "b"]), "why", now()).expect("starts");
    let mut done = restored(before, &records);
    for member in &mut done.statefulsets {
        let to = member.update_revision.clone();
        member.current_revision.clone_from(&to);
        for pod in &mut member.pods {
            pod.revision.clone_from(&to);
        }
    }
    assert!(matches!(status(&done, |_| true), Status::RolledBack(_)));
    let (plan, decision) = decide(&done, now());
    assert!(deleted_zones(&plan).is_empty());
    assert!(!decision.rolling_back);
    // A new version: the records are forgotten, and it rolls forward.
    done.statefulsets[0].update_revision = Some("a-v3".to_owned());
    done.statefulsets[1].update_revision = Some("b-v3".to_owned());
    let (plan, decision) = decide(&done, now());
    assert_eq!(deleted_zones(&plan), ["a"]);
    let forgotten: Vec<&str> = decision
        .writes
        .iter()
        .filter(|write| write.key == ROLLBACK_STATE_ANNOTATION && write.value.is_none())
        .map(|write| write.statefulset.as_str())
        .collect();
    assert_eq!(forgotten, ["a", "b"]);
}

#[test]
fn a_second_request_is_refused_while_rolling_back_or_rolled_back() {
    let before = group(vec![finished("a", 2), rolling("b", 2, 1)]);
    let records = start(&before, &history(&["a", "b"]), "why", now()).expect("starts");
    let rolling_back = restored(before, &records);
    assert!(
        refuse_request("ingester", &status(&rolling_back, |_| false))
            .expect("refused")
            .contains("rolling back already")
    );
    assert_eq!(refuse_request("ingester", &Status::None), None);
}

#[test]
fn a_template_written_back_but_not_yet_taken_is_waited_for_then_marked_settled() {
    let before = group(vec![finished("a", 2), rolling("b", 2, 1)]);
    let records = start(&before, &history(&["a", "b"]), "why", now()).expect("starts");
    let mut lagging = restored(before, &records);
    for member in &mut lagging.statefulsets {
        let raw = member.annotations[ROLLBACK_STATE_ANNOTATION].clone();
        let record: RollbackRecord = serde_json::from_str(&raw).expect("a record");
        let unsettled = RollbackRecord {
            settled: false,
            ..record
        };
        member.annotations.insert(
            ROLLBACK_STATE_ANNOTATION.to_owned(),
            unsettled.to_annotation(),
        );
    }
    // The StatefulSet controller has not taken b's template yet.
    lagging.statefulsets[1].update_revision = Some("b-v2".to_owned());
    let (plan, decision) = decide(&lagging, now());
    assert!(deleted_zones(&plan).is_empty());
    let wait = decision.wait().expect("holds");
    assert_eq!(wait.kind(), "RollingBack");
    assert!(
        wait.to_string()
            .contains("waiting for the StatefulSet controller")
    );
    // a, which took it, is marked settled; b is not.
    let settled: Vec<&str> = decision
        .writes
        .iter()
        .filter(|write| write.key == ROLLBACK_STATE_ANNOTATION)
        .map(|write| write.statefulset.as_str())
        .collect();
    assert_eq!(settled, ["a"]);
}

#[test]
fn a_long_reason_is_kept_to_a_bounded_size_on_every_member() {
    let before = group(vec![finished("a", 2), rolling("b", 2, 1)]);
    let long = "é".repeat(200_000);
    let records = start(&before, &history(&["a", "b"]), &long, now()).expect("starts");
    for (_, record) in &records {
        assert_eq!(
            record.why.chars().count(),
            MOST_WHY_CHARS + 1,
            "cut, with an ellipsis"
        );
        assert!(record.why.ends_with('…'));
    }
    let short = start(&before, &history(&["a", "b"]), "errors up", now()).expect("starts");
    assert_eq!(short[0].1.why, "errors up");
}

#[test]
fn records_missing_while_the_request_stands_are_a_rollback_starting_not_stale_ones() {
    let before = group(vec![finished("a", 2), finished("b", 2)]);
    let records = start(&before, &history(&["a", "b"]), "why", now()).expect("starts");
    // The controller stored a's record, not yet b's; the request still stands.
    let mut starting = before.clone();
    let (_, record_a) = records
        .iter()
        .find(|(name, _)| name == "a")
        .expect("a's record");
    starting.statefulsets[0].annotations.insert(
        ROLLBACK_STATE_ANNOTATION.to_owned(),
        record_a.to_annotation(),
    );
    for member in &mut starting.statefulsets {
        member
            .annotations
            .insert(ROLLBACK_ANNOTATION.to_owned(), "why".to_owned());
    }
    assert_eq!(status(&starting, |_| true), Status::None);
    let (_, decision) = decide(&starting, now());
    assert!(
        !decision
            .writes
            .iter()
            .any(|write| write.key == ROLLBACK_STATE_ANNOTATION),
        "a's record is kept: {decision:?}"
    );
    // Without the request, a lone record is stale and forgotten.
    for member in &mut starting.statefulsets {
        member.annotations.remove(ROLLBACK_ANNOTATION);
    }
    assert!(matches!(status(&starting, |_| true), Status::Stale(_)));
}

#[test]
fn one_members_rollback_request_asks_for_nothing_and_is_told() {
    // Given a rollback request on one member only (a StatefulSet anyone who may create one
    // with the group's label could add)
    let lone = group(vec![
        finished("a", 2),
        annotated(finished("b", 2), ROLLBACK_ANNOTATION, "me: because"),
    ]);
    // Then nothing is asked, and the lone request is named
    assert_eq!(request(&lone), None);
    assert_eq!(requesters(&lone), ["b"]);
    let (_, decision) = decide(&lone, now());
    assert!(
        !decision
            .writes
            .iter()
            .any(|write| write.key == ROLLBACK_STATE_ANNOTATION)
    );
    let (_, warnings) = crate::gates::keys::read(&lone);
    assert!(
        warnings.iter().any(|warning| {
            let text = warning.to_string();
            text.contains("StatefulSet b") && text.contains("one member alone")
        }),
        "{warnings:?}"
    );
    // On every member (as kubectl baton rollback and a failing check write it), it asks
    let mut asked = lone.clone();
    for write in ask(&lone, "a person: because") {
        asked
            .statefulsets
            .iter_mut()
            .find(|member| member.name == write.statefulset)
            .expect("a member")
            .annotations
            .insert(write.key.to_owned(), write.value.expect("set"));
    }
    assert_eq!(request(&asked), Some(("a", "a person: because")));
}

#[test]
fn only_a_members_own_revisions_are_its_history_and_written_back_from() {
    use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    let member = |name: &str, uid: &str| StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            uid: Some(uid.to_owned()),
            ..ObjectMeta::default()
        },
        ..StatefulSet::default()
    };
    let revision = |name: &str, owner: Option<(&str, bool)>| ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: owner.map(|(uid, controller)| {
                vec![OwnerReference {
                    uid: uid.to_owned(),
                    controller: Some(controller),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        revision: 1,
        ..ControllerRevision::default()
    };
    let (a, b) = (member("a", "uid-a"), member("b", "uid-b"));
    // Given a's own revision, b's, one a person made, and one that only names a as a non-controller
    let own = revision("a-1", Some(("uid-a", true)));
    let others = revision("b-1", Some(("uid-b", true)));
    let forged = revision("forged", None);
    let loose = revision("loose", Some(("uid-a", false)));
    // Then only a's own is a's to go back to
    assert!(is_revision_of(&own, &a));
    for not_ours in [&others, &forged, &loose] {
        assert!(
            !is_revision_of(not_ours, &a),
            "{:?}",
            not_ours.metadata.name
        );
    }
    assert!(
        !is_revision_of(&own, &member("c", "")),
        "no uid, no history"
    );
    let read = super::history(
        &[&a, &b],
        &[own.clone(), others.clone(), forged.clone(), loose.clone()],
    );
    assert_eq!(
        read["a"]
            .iter()
            .map(|revision| revision.name.as_str())
            .collect::<Vec<_>>(),
        ["a-1"]
    );
    assert_eq!(
        read["b"]
            .iter()
            .map(|revision| revision.name.as_str())
            .collect::<Vec<_>>(),
        ["b-1"]
    );
}

#[test]
fn a_rollback_tells_nothing_of_the_health_check_it_does_not_consult() {
    // Given a group rolling back that names a check whose stored state cannot be read
    let before = group(vec![
        annotated(
            finished("a", 4),
            crate::gates::HEALTH_CHECK_ANNOTATION,
            "errors",
        ),
        annotated(
            rolling("b", 4, 3),
            crate::gates::HEALTH_CHECK_ANNOTATION,
            "errors",
        ),
    ]);
    let records = start(&before, &history(&["a", "b"]), "why", now()).expect("starts");
    let mut rolling_back = restored(before, &records);
    rolling_back.statefulsets[0].annotations.insert(
        crate::gates::CHECK_STATE_ANNOTATION.to_owned(),
        "not json".to_owned(),
    );
    // When the leader's pass decides it
    let gates = crate::pass::Gates::read(&rolling_back);
    assert!(!gates.check_warnings.is_empty(), "the state cannot be read");
    let pass = crate::pass::decide(&crate::pass::Read {
        snapshot: &rolling_back,
        gates: &gates,
        check: &crate::pass::CheckRead::NotRead,
        hook: &crate::pass::HookRead::default(),
        rolling: &crate::rollout::completion::Rolling::new(),
        namespace: "ingest",
        now: now(),
    });
    // Then the rollback goes on, and nothing is said of the check
    assert_eq!(pass.actions().count(), 1);
    let told: Vec<&str> = pass
        .effects
        .iter()
        .filter_map(|effect| match effect {
            crate::pass::Effect::Tell { explanation, .. } => Some(explanation.reason.as_str()),
            _ => None,
        })
        .collect();
    assert!(!told.contains(&"UnreadableGateState"), "{told:?}");
}

#[test]
fn starting_a_rollback_stores_every_record_before_removing_the_request_and_tells_the_first_zone() {
    // Given every member asking, b reached last, a never reached
    let asked = |statefulset| annotated(statefulset, ROLLBACK_ANNOTATION, "me: errors up");
    let group = group(vec![
        asked(rolling("a", 2, 0)),
        asked(created_ago(rolling("b", 2, 1), 60)),
    ]);
    let history = history(&["a", "b"]);
    let starting = starting(
        "ingester",
        &group,
        Ok(&history),
        "a",
        "me: errors up",
        now(),
    );
    // Then the records go to both, in turn order; the request is removed from both; and the
    // zone the rollback starts with is told the order
    let records: Vec<(&str, RollbackRecord)> = starting
        .records
        .iter()
        .map(|write| {
            assert_eq!(write.key, ROLLBACK_STATE_ANNOTATION);
            let value = write.value.as_deref().expect("a record");
            let record: RollbackRecord = serde_json::from_str(value).expect("a record");
            (write.statefulset.as_str(), record)
        })
        .collect();
    let turns: Vec<(&str, u32)> = records.iter().map(|(name, r)| (*name, r.turn)).collect();
    assert_eq!(turns, [("b", 0), ("a", 1)]);
    let removed: Vec<(&str, &str, Option<&str>)> = starting
        .remove_request
        .iter()
        .map(|write| {
            (
                write.statefulset.as_str(),
                write.key,
                write.value.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        removed,
        [
            ("a", ROLLBACK_ANNOTATION, None),
            ("b", ROLLBACK_ANNOTATION, None)
        ]
    );
    assert_eq!(starting.first.as_deref(), Some("b"));
    assert_eq!(starting.told_on, "b");
    assert_eq!(
        starting.explanation.severity,
        crate::explained::Severity::Normal
    );
    assert_eq!(starting.explanation.reason, "RollbackStarted");
    assert_eq!(
        starting.explanation.note,
        "rolling back rollout group ingester, in this order: b from b-v2 to b-v1, then a from \
         a-v2 to a-v1 — asked: me: errors up"
    );
}

#[test]
fn a_refused_rollback_stores_no_record_removes_the_request_and_warns_the_first_asking() {
    let asked = |statefulset| annotated(statefulset, ROLLBACK_ANNOTATION, "me: errors up");
    // a finished rolling, so only its history says what it ran before
    let group = group(vec![asked(finished("a", 2)), asked(rolling("b", 2, 1))]);
    // Refused by the pass before reading any history, and refused by the history itself
    let empty = BTreeMap::new();
    for (history, says) in [
        (Err("a rollback already ran"), "a rollback already ran"),
        (Ok(&empty), "cannot roll back StatefulSet a"),
    ] {
        let starting = starting("ingester", &group, history, "a", "me: errors up", now());
        assert_eq!(starting.records, [], "{says}");
        assert_eq!(starting.remove_request.len(), 2, "{says}");
        assert_eq!(starting.first, None, "{says}");
        assert_eq!(starting.told_on, "a", "{says}");
        assert_eq!(
            starting.explanation.severity,
            crate::explained::Severity::Warning
        );
        assert_eq!(starting.explanation.reason, "RollbackRefused");
        let note = &starting.explanation.note;
        assert!(
            note.starts_with(says) && note.ends_with("; the request is removed"),
            "{note}"
        );
    }
}
