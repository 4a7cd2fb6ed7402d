//! Scenarios for the status view, each through the real planner and gates: given a group
//! (built with the gate scenarios' helpers), what the page says of it and of each zone.

use crate::explained::Explained;
use jiff::SignedDuration;

use super::*;
use crate::annotations::ROLLOUT_PAUSED_ANNOTATION;
use crate::gates::decide::tests::{annotated, cleared, crash_looping, group, now, soaked, zone};
use crate::gates::keys::HALTED_ANNOTATION;
use crate::rollout::StatefulSetSnapshot;

fn status(members: Vec<StatefulSetSnapshot>, history: Option<&History>) -> GroupStatus {
    compute(&group(members), history, now())
}

fn phases(status: &GroupStatus) -> Vec<(&str, RolloutPhase)> {
    status
        .zones
        .iter()
        .map(|zone| (zone.statefulset.as_str(), zone.phase))
        .collect()
}

/// Pod `ordinal` was just recreated at the new revision and is not ready yet.
fn starting(mut statefulset: StatefulSetSnapshot, ordinal: usize) -> StatefulSetSnapshot {
    statefulset = crash_looping(statefulset, ordinal);
    statefulset.pods[ordinal].container_state = None;
    statefulset
}

fn done(name: &str) -> StatefulSetSnapshot {
    let mut zone = zone(name, 3, 3);
    zone.current_revision = zone.update_revision.clone();
    zone
}

#[test]
fn a_settled_group_is_complete_and_waits_for_nothing() {
    let status = status(vec![done("a"), done("b"), done("c")], None);
    assert_eq!(status.phase, RolloutPhase::Complete);
    assert_eq!(
        phases(&status),
        [
            ("a", RolloutPhase::Complete),
            ("b", RolloutPhase::Complete),
            ("c", RolloutPhase::Complete)
        ]
    );
    assert_eq!(status.waiting, None);
    let a = &status.zones[0];
    assert_eq!((a.updated, a.ready, a.total), (3, 3, 3));
}

#[test]
fn a_settled_group_with_a_member_that_cannot_be_read_is_not_complete_but_waits_for_it() {
    let mut lost = done("b");
    lost.unreachable = Some(crate::rollout::Unreachable {
        cluster: "cluster-b".into(),
        error: "connection refused".into(),
    });
    let status = status(vec![done("a"), lost, done("c")], None);
    assert_eq!(status.phase, RolloutPhase::Waiting);
    assert_eq!(
        phases(&status),
        [
            ("a", RolloutPhase::Complete),
            ("b", RolloutPhase::Waiting),
            ("c", RolloutPhase::Complete)
        ]
    );
    let waiting = status.waiting.expect("a wait");
    assert_eq!(waiting.kind, "MemberUnreachable");
    assert!(waiting.message.contains("cluster-b"), "{}", waiting.message);
}

#[test]
fn a_fresh_rollout_rolls_the_first_zone_and_the_others_wait_their_turn() {
    let status = status(
        vec![zone("a", 3, 0), zone("b", 3, 0), zone("c", 3, 0)],
        None,
    );
    assert_eq!(status.phase, RolloutPhase::Rolling, "the plan deletes in a");
    assert_eq!(
        phases(&status),
        [
            ("a", RolloutPhase::Rolling),
            ("b", RolloutPhase::Waiting),
            ("c", RolloutPhase::Waiting)
        ]
    );
    assert_eq!(status.waiting, None, "nothing holds the group");
    assert_eq!(status.zones[0].update_revision.as_deref(), Some("a-new"));
    assert_eq!(status.zones[0].current_revision.as_deref(), Some("a-old"));
}

#[test]
fn zone_a_complete_b_half_rolled_with_a_new_pod_starting_c_waiting() {
    let status = status(
        vec![done("a"), starting(zone("b", 3, 1), 0), zone("c", 3, 0)],
        None,
    );
    assert_eq!(
        phases(&status),
        [
            ("a", RolloutPhase::Complete),
            ("b", RolloutPhase::Rolling),
            ("c", RolloutPhase::Waiting)
        ]
    );
    assert_eq!(
        status.phase,
        RolloutPhase::Rolling,
        "waiting for b's own new pod"
    );
    let waiting = status.waiting.expect("waits for b-0");
    assert_eq!(waiting.kind, "MaxUnavailable", "b's budget is taken by b-0");
    assert!(
        waiting.message.contains("b-0 (new revision)"),
        "{}",
        waiting.message
    );
    assert_eq!(waiting.since, None, "no history: since unknown");
    let b = &status.zones[1];
    assert_eq!((b.updated, b.ready, b.total), (1, 2, 3));
}

#[test]
fn the_leaders_history_says_since_when_the_same_kind_of_wait_lasts() {
    let since = now() - SignedDuration::from_mins(7);
    let history = History {
        waiting: Some(ObservedWait {
            kind: "MaxUnavailable",
            message: "zone b has 1 of 1 pods unavailable".to_owned(),
            since,
        }),
        actions: vec![ActionRecord {
            at: since,
            action: "DeletePod".to_owned(),
            statefulset: "b".to_owned(),
            pod: Some("b-0".to_owned()),
            note: "deleted pod b-0".to_owned(),
        }],
        ..History::default()
    };
    let members = || vec![done("a"), starting(zone("b", 3, 1), 0), zone("c", 3, 0)];
    let status = status(members(), Some(&history));
    assert_eq!(status.waiting.expect("waits").since, Some(since));
    assert_eq!(status.last_actions, history.actions);

    let other_kind = History {
        waiting: Some(ObservedWait {
            kind: "Soak",
            ..history.waiting.clone().expect("set above")
        }),
        ..history
    };
    let status = self::status(members(), Some(&other_kind));
    assert_eq!(
        status.waiting.expect("waits").since,
        None,
        "another kind of wait started when the leader saw it, not before"
    );
}

#[test]
fn a_soak_between_zones_holds_the_next_zone_waiting() {
    let status = status(
        vec![
            cleared(soaked(done("a"), "10m")),
            soaked(zone("b", 3, 0), "10m"),
            soaked(zone("c", 3, 0), "10m"),
        ],
        None,
    );
    assert_eq!(status.phase, RolloutPhase::Waiting);
    assert_eq!(
        phases(&status),
        [
            ("a", RolloutPhase::Complete),
            ("b", RolloutPhase::Waiting),
            ("c", RolloutPhase::Waiting)
        ]
    );
    let waiting = status.waiting.expect("soaks");
    assert_eq!(waiting.kind, "Soak");
    assert!(
        waiting.message.contains("b starts in"),
        "{}",
        waiting.message
    );
}

#[test]
fn a_halted_group_is_halted_in_every_unfinished_zone() {
    let status = status(
        vec![
            done("a"),
            annotated(zone("b", 3, 1), HALTED_ANNOTATION, "errors went up"),
            zone("c", 3, 0),
        ],
        None,
    );
    assert_eq!(status.phase, RolloutPhase::Halted);
    assert_eq!(
        phases(&status),
        [
            ("a", RolloutPhase::Complete),
            ("b", RolloutPhase::Halted),
            ("c", RolloutPhase::Halted)
        ]
    );
    let waiting = status.waiting.expect("halted");
    assert_eq!(waiting.kind, "Halted");
    assert!(
        waiting.message.contains("errors went up"),
        "{}",
        waiting.message
    );
}

#[test]
fn a_typo_in_a_gate_key_is_invalid_configuration_not_a_halt_and_names_what_to_fix() {
    // Given a group rolling to a new revision whose zone b carries a soak nobody can read
    let status = status(
        vec![
            done("a"),
            soaked(zone("b", 3, 0), "5 minutes"),
            zone("c", 3, 0),
        ],
        None,
    );
    // Then the group and its unfinished zones are held by invalid configuration, not halted
    assert_eq!(status.phase, RolloutPhase::InvalidConfiguration);
    assert_eq!(status.phase.as_str(), "invalidConfiguration");
    assert_eq!(
        phases(&status),
        [
            ("a", RolloutPhase::Complete),
            ("b", RolloutPhase::InvalidConfiguration),
            ("c", RolloutPhase::InvalidConfiguration)
        ]
    );
    // and the wait names the annotation, the value as written and the StatefulSet
    let waiting = status.waiting.as_ref().expect("held");
    assert_eq!(waiting.kind, "InvalidGate");
    for part in [
        "baton.dev/soak",
        "\"5 minutes\"",
        "StatefulSet b",
        "baton.dev/soak-",
    ] {
        assert!(
            waiting.message.contains(part),
            "{part}: {}",
            waiting.message
        );
    }
    // and the group's warnings say it too, as the Warning Event does
    let [warning] = status.warnings.as_slice() else {
        panic!("one warning: {:?}", status.warnings);
    };
    assert_eq!(warning.kind, "InvalidAnnotation");
    assert_eq!(warning.statefulset.as_deref(), Some("b"));

    // A settled group with the typo says so before the next rollout is held by it
    let settled = self::status(vec![done("a"), soaked(done("b"), "5 minutes")], None);
    assert_eq!(settled.phase, RolloutPhase::InvalidConfiguration);
    assert_eq!(
        phases(&settled),
        [("a", RolloutPhase::Complete), ("b", RolloutPhase::Complete)]
    );
}

#[test]
fn a_bad_value_the_planner_replaces_is_a_warning_of_the_group_while_it_rolls_on() {
    let status = status(
        vec![
            annotated(zone("a", 3, 0), "rollout-max-unavailable", "abc"),
            zone("b", 3, 0),
        ],
        None,
    );
    assert_eq!(status.phase, RolloutPhase::Rolling);
    let [warning] = status.warnings.as_slice() else {
        panic!("one warning: {:?}", status.warnings);
    };
    assert_eq!(warning.kind, "InvalidAnnotation");
    assert_eq!(warning.statefulset.as_deref(), Some("a"));
    assert!(
        warning.message.contains("invalid value \"abc\"") && warning.message.ends_with("; using 1"),
        "{}",
        warning.message
    );
    // A group without a bad value has none
    assert!(self::status(vec![done("a")], None).warnings.is_empty());
}

#[test]
fn a_non_on_delete_member_skips_the_group() {
    let mut rolling_update = zone("b", 3, 0);
    rolling_update.update_strategy = crate::rollout::UpdateStrategy::RollingUpdate;
    let status = status(vec![done("a"), rolling_update, zone("c", 3, 0)], None);
    assert_eq!(status.phase, RolloutPhase::Skipped);
    assert_eq!(
        phases(&status),
        [
            ("a", RolloutPhase::Complete),
            ("b", RolloutPhase::Skipped),
            ("c", RolloutPhase::Skipped)
        ]
    );
    assert_eq!(status.waiting.expect("skipped").kind, "NonOnDeleteMember");
}

#[test]
fn paused_zones_left_to_update_pause_the_group() {
    let status = status(
        vec![
            done("a"),
            annotated(zone("b", 3, 0), ROLLOUT_PAUSED_ANNOTATION, "true"),
        ],
        None,
    );
    assert_eq!(status.phase, RolloutPhase::Paused);
    assert_eq!(
        phases(&status),
        [("a", RolloutPhase::Complete), ("b", RolloutPhase::Paused)]
    );
    assert!(status.zones[1].paused);
    assert_eq!(status.waiting.expect("paused").kind, "Paused");
}

#[test]
fn two_zones_down_make_the_group_wait_not_roll() {
    let status = status(
        vec![
            starting(zone("a", 3, 1), 0),
            crash_looping(zone("b", 3, 0), 2),
            zone("c", 3, 0),
        ],
        None,
    );
    assert_eq!(status.phase, RolloutPhase::Waiting);
    assert_eq!(status.waiting.expect("waits").kind, "MultipleNotReady");
    assert_eq!(
        status.zones[0].phase,
        RolloutPhase::Rolling,
        "a is half rolled"
    );
    assert_eq!(status.zones[2].phase, RolloutPhase::Waiting);
}

#[test]
fn a_health_check_wait_is_known_from_the_leader_only() {
    assert_eq!(
        HEALTH_CHECK,
        GateWait::HealthCheck {
            zone: String::new(),
            check: String::new(),
            passes: 0,
            needed: 0,
            last: None,
        }
        .kind()
    );
    let since = now() - SignedDuration::from_mins(2);
    let history = History {
        waiting: Some(ObservedWait {
            kind: HEALTH_CHECK,
            message: "b waits for health check errors: 1 of 3 passes in a row".to_owned(),
            since,
        }),
        actions: Vec::new(),
        ..History::default()
    };
    let status = status(vec![done("a"), zone("b", 3, 0)], Some(&history));
    assert_eq!(status.phase, RolloutPhase::Waiting);
    let waiting = status.waiting.expect("the leader's wait");
    assert_eq!(waiting.kind, HEALTH_CHECK);
    assert_eq!(waiting.since, Some(since));
    assert!(waiting.message.contains("1 of 3 passes"));
}

#[test]
fn groups_are_found_by_label_and_computed_from_kubernetes_objects() {
    use crate::annotations::ROLLOUT_GROUP_LABEL;
    use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let statefulset = |name: &str, group: &str| StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(ROLLOUT_GROUP_LABEL.to_owned(), group.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(0),
            ..StatefulSetSpec::default()
        }),
        status: Some(StatefulSetStatus {
            current_revision: Some("r1".to_owned()),
            update_revision: Some("r1".to_owned()),
            ..StatefulSetStatus::default()
        }),
    };
    let objects = [
        statefulset("store-b", "store"),
        statefulset("ingester-a", "ingester"),
        statefulset("store-a", "store"),
        StatefulSet::default(),
    ];
    let refs: Vec<&StatefulSet> = objects.iter().collect();
    let statuses = groups(&refs, &[], &[], |_| None, &Default::default(), now());
    let names: Vec<(&str, Vec<&str>)> = statuses
        .iter()
        .map(|group| {
            let zones = group.zones.iter().map(|z| z.statefulset.as_str()).collect();
            (group.name.as_str(), zones)
        })
        .collect();
    assert_eq!(
        names,
        [
            ("ingester", vec!["ingester-a"]),
            ("store", vec!["store-a", "store-b"])
        ]
    );
}

#[test]
fn the_leaders_timeline_is_the_groups_and_without_history_there_is_none() {
    let mut timelines = crate::status::Timelines::default();
    timelines.deleted("ingester", "b", "b-0", "uid-b-0", now());
    let history = History {
        timeline: timelines.timeline("ingester"),
        ..History::default()
    };
    assert!(history.timeline.is_some());
    let members = || vec![done("a"), starting(zone("b", 3, 1), 0), zone("c", 3, 0)];
    assert_eq!(status(members(), Some(&history)).timeline, history.timeline);
    assert_eq!(status(members(), None).timeline, None, "a standby's view");
}
