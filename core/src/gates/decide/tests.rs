//! Scenarios for the gate decision, each composed with the real planner: given a group and
//! its stored gate state, what the gate lets through, what it stores and why it waits.

use crate::annotations::ROLLOUT_PAUSED_ANNOTATION;
use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::explained::Explained;
use crate::gates::decision::GateVerdict;
use crate::gates::keys::{HALTED_ANNOTATION, SOAK_ANNOTATION};
use crate::rollout::{Action, StatefulSetSnapshot, plan};
use crate::testing;
pub(crate) use crate::testing::{annotated, group, now};

pub(crate) fn secs(seconds: i64) -> SignedDuration {
    SignedDuration::from_secs(seconds)
}

pub(crate) fn new_revision(name: &str) -> String {
    format!("{name}-new")
}

/// A ready StatefulSet rolling to `<name>-new`, whose first `updated` pods are already there.
pub(crate) fn zone(name: &str, replicas: u32, updated: u32) -> StatefulSetSnapshot {
    testing::zone(name, replicas)
        .at_revision(&format!("{name}-old"))
        .template_changed_to(&new_revision(name))
        .updated_first(updated)
        .build()
}

pub(crate) fn soaked(statefulset: StatefulSetSnapshot, soak: &str) -> StatefulSetSnapshot {
    annotated(statefulset, SOAK_ANNOTATION, soak)
}

/// Stores a gate state for the zone's current update revision.
pub(crate) fn with_state(
    statefulset: StatefulSetSnapshot,
    soak_started_at: Option<Timestamp>,
    cleared_at: Option<Timestamp>,
) -> StatefulSetSnapshot {
    let state = ZoneState {
        revision: new_revision(&statefulset.name),
        soak_started_at,
        soak_after: soak_started_at
            .map(|_| vec!["a".to_owned()])
            .unwrap_or_default(),
        cleared_at,
    };
    annotated(statefulset, STATE_ANNOTATION, &state.to_annotation())
}

pub(crate) fn cleared(statefulset: StatefulSetSnapshot) -> StatefulSetSnapshot {
    with_state(statefulset, None, Some(now() - secs(60)))
}

/// Pod `ordinal` crash-loops (not ready), so its StatefulSet is not ready.
pub(crate) fn crash_looping(
    mut statefulset: StatefulSetSnapshot,
    ordinal: usize,
) -> StatefulSetSnapshot {
    let pod = &mut statefulset.pods[ordinal];
    pod.ready = false;
    pod.ready_since = None;
    pod.container_state = Some("CrashLoopBackOff".to_owned());
    statefulset.ready_replicas -= 1;
    statefulset
}

/// The planner's plan alone, the gated plan, and the decision.
fn gate(group: &GroupSnapshot, at: Timestamp) -> (Plan, Plan, GateDecision) {
    let (gated, decision) = decide(group, at);
    (plan(group, at), gated, decision)
}

pub(crate) fn deleted_zones(plan: &Plan) -> Vec<String> {
    let mut zones: Vec<String> = plan
        .deletions()
        .filter_map(|action| action.rolls().map(str::to_owned))
        .collect();
    zones.dedup();
    zones
}

fn state_written(decision: &GateDecision, statefulset: &str) -> ZoneState {
    let write = decision
        .writes
        .iter()
        .find(|write| write.statefulset == statefulset && write.key == STATE_ANNOTATION)
        .unwrap_or_else(|| panic!("no state written on {statefulset}: {decision:?}"));
    ZoneState::from_annotation(write.value.as_deref().expect("set, not removed"))
        .expect("baton writes readable state")
}

#[test]
fn a_group_without_gate_keys_rolls_exactly_as_planned_and_stores_nothing() {
    let group = group(vec![zone("a", 3, 0), zone("b", 3, 0)]);
    let (planned, gated, decision) = gate(&group, now());
    assert_eq!(decision, GateDecision::proceed());
    assert_eq!(gated.clone(), planned);
    assert_eq!(deleted_zones(&planned), ["a"]);
}

#[test]
fn the_first_zone_of_a_rollout_is_the_canary_and_is_cleared_at_once() {
    let group = group(vec![soaked(zone("a", 3, 0), "5s"), zone("b", 3, 0)]);
    let (_, gated, decision) = gate(&group, now());
    assert_eq!(decision.verdict, GateVerdict::Proceed);
    assert_eq!(
        state_written(&decision, "a"),
        ZoneState {
            revision: new_revision("a"),
            soak_started_at: None,
            soak_after: Vec::new(),
            cleared_at: Some(now()),
        }
    );
    assert_eq!(deleted_zones(&gated), ["a"]);
}

#[test]
fn a_cleared_zone_keeps_rolling_without_new_writes() {
    let group = group(vec![
        cleared(soaked(zone("a", 3, 1), "5s")),
        zone("b", 3, 0),
    ]);
    let (_, gated, decision) = gate(&group, now());
    assert_eq!(decision, GateDecision::proceed());
    assert_eq!(deleted_zones(&gated), ["a"]);
}

#[test]
fn the_next_zone_waits_the_whole_soak_and_its_start_is_stored() {
    let group = group(vec![
        cleared(soaked(zone("a", 3, 3), "5s")),
        zone("b", 3, 0),
    ]);
    let (planned, gated, decision) = gate(&group, now());
    assert_eq!(
        deleted_zones(&planned),
        ["b"],
        "the planner alone would go on"
    );
    let wait = decision.wait().expect("held");
    assert_eq!(
        wait,
        &GateWait::Soak {
            zone: "b".to_owned(),
            after: vec!["a".to_owned()],
            remaining: secs(5),
            until: now() + secs(5),
        }
    );
    assert_eq!(wait.kind(), "Soak");
    assert_eq!(wait.to_string(), "soaking after a: b starts in 5s");
    assert_eq!(state_written(&decision, "b").soak_started_at, Some(now()));
    assert_eq!(state_written(&decision, "b").cleared_at, None);
    assert_eq!(decision.recheck_after, Some(now() + secs(5)));
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(gated.recheck_after, Some(now() + secs(5)));
}

#[test]
fn a_stored_soak_start_is_honoured_without_restarting_it() {
    // As a new leader sees it after a failover 3 s into the soak.
    let group = group(vec![
        cleared(soaked(zone("a", 3, 3), "5s")),
        with_state(zone("b", 3, 0), Some(now() - secs(3)), None),
    ]);
    let (_, _, decision) = gate(&group, now());
    assert!(
        matches!(decision.wait(), Some(GateWait::Soak { remaining, .. }) if *remaining == secs(2)),
        "{decision:?}"
    );
    assert!(decision.writes.is_empty(), "the stored start is kept");
    assert_eq!(decision.recheck_after, Some(now() + secs(2)));
}

#[test]
fn once_the_soak_is_over_the_next_zone_is_cleared_and_rolls() {
    let started = now() - secs(5);
    let group = group(vec![
        cleared(soaked(zone("a", 3, 3), "5s")),
        with_state(zone("b", 3, 0), Some(started), None),
        zone("c", 3, 0),
    ]);
    let (_, gated, decision) = gate(&group, now());
    assert_eq!(decision.verdict, GateVerdict::Proceed);
    assert_eq!(
        state_written(&decision, "b"),
        ZoneState {
            revision: new_revision("b"),
            soak_started_at: Some(started),
            soak_after: vec!["a".to_owned()],
            cleared_at: Some(now()),
        }
    );
    assert_eq!(deleted_zones(&gated), ["b"]);
}

#[test]
fn the_soak_after_the_second_zone_counts_from_when_the_third_first_waited() {
    let group = group(vec![
        cleared(soaked(zone("a", 2, 2), "10s")),
        cleared(zone("b", 2, 2)),
        zone("c", 2, 0),
    ]);
    let (_, _, decision) = gate(&group, now());
    assert!(
        matches!(decision.wait(), Some(GateWait::Soak { zone, after, remaining, .. })
            if zone == "c" && after == &["a", "b"] && *remaining == secs(10)),
        "{decision:?}"
    );
}

#[test]
fn without_a_soak_the_next_zone_is_cleared_as_soon_as_the_previous_finished() {
    let group = group(vec![cleared(soaked(zone("a", 3, 3), "0")), zone("b", 3, 0)]);
    let (_, gated, decision) = gate(&group, now());
    assert_eq!(decision.verdict, GateVerdict::Proceed);
    assert_eq!(state_written(&decision, "b").cleared_at, Some(now()));
    assert_eq!(deleted_zones(&gated), ["b"]);
}

#[test]
fn a_not_ready_later_zone_gets_no_free_replacement_before_the_rolling_zone_finished() {
    let group = group(vec![
        cleared(soaked(zone("a", 3, 1), "5s")),
        zone("b", 3, 0),
        crash_looping(zone("c", 3, 0), 2),
    ]);
    let (planned, gated, decision) = gate(&group, now());
    assert_eq!(
        deleted_zones(&planned),
        ["c"],
        "the planner replaces c-2 for free"
    );
    let wait = decision.wait().expect("held");
    assert_eq!(
        wait,
        &GateWait::ZoneUnfinished {
            zone: "c".to_owned(),
            unfinished: "a".to_owned(),
        }
    );
    assert_eq!(wait.kind(), "ZoneUnfinished");
    assert!(decision.writes.is_empty());
    assert!(deleted_zones(&gated).is_empty());
}

#[test]
fn a_paused_zone_counts_as_finished_as_the_planner_moves_past_it() {
    let group = group(vec![
        cleared(annotated(
            soaked(zone("a", 3, 1), "5s"),
            ROLLOUT_PAUSED_ANNOTATION,
            "true",
        )),
        zone("b", 3, 0),
    ]);
    let (planned, _, decision) = gate(&group, now());
    assert_eq!(deleted_zones(&planned), ["b"]);
    assert_eq!(decision.wait().map(GateWait::kind), Some("Soak"));
}

#[test]
fn of_several_zones_the_planner_replaces_in_only_the_first_is_cleared() {
    // Two zones crash-loop at the old revision: the planner replaces in both at once.
    let group = group(vec![
        soaked(crash_looping(zone("a", 2, 0), 0), "5s"),
        crash_looping(zone("b", 2, 0), 1),
    ]);
    let (planned, gated, decision) = gate(&group, now());
    assert_eq!(deleted_zones(&planned), ["a", "b"]);
    assert_eq!(
        decision.wait(),
        Some(&GateWait::ZoneUnfinished {
            zone: "b".to_owned(),
            unfinished: "a".to_owned(),
        })
    );
    assert_eq!(state_written(&decision, "a").cleared_at, Some(now()));
    assert_eq!(deleted_zones(&gated), ["a"]);
}

#[test]
fn a_halted_group_deletes_nothing_even_without_other_gate_keys() {
    for members in [
        vec![
            annotated(zone("a", 3, 1), HALTED_ANNOTATION, "error rate 0.4"),
            zone("b", 3, 0),
        ],
        vec![
            cleared(soaked(zone("a", 3, 1), "5s")),
            annotated(zone("b", 3, 0), HALTED_ANNOTATION, "error rate 0.4"),
        ],
    ] {
        let group = group(members);
        let (planned, gated, decision) = gate(&group, now());
        assert!(!deleted_zones(&planned).is_empty());
        let wait = decision.wait().expect("held");
        assert_eq!(wait.kind(), "Halted");
        let text = wait.to_string();
        assert!(text.contains("error rate 0.4"), "{text}");
        assert!(
            text.contains(&format!(
                "kubectl annotate statefulset {} baton.dev/halted-",
                wait.statefulset()
            )),
            "{text}"
        );
        assert!(decision.writes.is_empty());
        assert!(deleted_zones(&gated).is_empty());
    }
}

#[test]
fn resuming_a_halted_group_goes_back_through_the_gate() {
    let halted = group(vec![
        cleared(soaked(zone("a", 3, 3), "5s")),
        annotated(zone("b", 3, 0), HALTED_ANNOTATION, "hook failed"),
    ]);
    assert_eq!(
        gate(&halted, now()).2.wait().map(GateWait::kind),
        Some("Halted")
    );
    let mut resumed = halted.clone();
    resumed.statefulsets[1]
        .annotations
        .remove(HALTED_ANNOTATION);
    assert_eq!(
        gate(&resumed, now()).2.wait().map(GateWait::kind),
        Some("Soak")
    );
}

#[test]
fn an_invalid_gate_key_holds_every_deletion_and_names_key_and_value() {
    let group = group(vec![
        soaked(zone("a", 3, 0), "ten seconds"),
        zone("b", 3, 0),
    ]);
    let (_, gated, decision) = gate(&group, now());
    let wait = decision.wait().expect("held");
    assert_eq!(wait.kind(), "InvalidGate");
    assert_eq!(
        wait.to_string(),
        "invalid configuration: annotation baton.dev/soak on StatefulSet a has the invalid \
         value \"ten seconds\" (accepted: a duration such as 30s, 5m or 1h30m (0 for no soak)); \
         holding the group until it is fixed: set it to an accepted value, or remove it with \
         kubectl annotate statefulset a baton.dev/soak-"
    );
    // and the Warning says the same without \"using\" a hold as if it were a value
    let [warning] = decision.warnings.as_slice() else {
        panic!("one warning: {:?}", decision.warnings);
    };
    assert_eq!(
        warning.to_string(),
        "StatefulSet a: annotation baton.dev/soak has the invalid value \"ten seconds\" \
         (accepted: a duration such as 30s, 5m or 1h30m (0 for no soak)); holding the group \
         until it is fixed"
    );
    assert!(deleted_zones(&gated).is_empty());
}

#[test]
fn a_state_of_an_earlier_revision_does_not_clear_a_zone() {
    let mut stale = ZoneState::new("a-older");
    stale.cleared_at = Some(now() - secs(600));
    let group = group(vec![
        soaked(zone("a", 3, 3), "5s"),
        annotated(zone("b", 3, 0), STATE_ANNOTATION, &stale.to_annotation()),
    ]);
    // a is done but was never cleared for this revision: b is this rollout's first zone.
    let (_, _, decision) = gate(&group, now());
    assert_eq!(decision.verdict, GateVerdict::Proceed);
    assert_eq!(state_written(&decision, "b").revision, new_revision("b"));
}

#[test]
fn a_complete_rollout_forgets_its_gate_state() {
    let mut done = group(vec![
        cleared(soaked(zone("a", 2, 2), "5s")),
        cleared(zone("b", 2, 2)),
        zone("c", 2, 2),
    ]);
    for member in &mut done.statefulsets {
        member.current_revision = member.update_revision.clone();
    }
    let (planned, _, decision) = gate(&done, now());
    assert!(planned.actions.is_empty());
    assert_eq!(
        decision.writes,
        ["a", "b"]
            .map(|name| AnnotationWrite {
                statefulset: name.to_owned(),
                key: STATE_ANNOTATION,
                value: None,
            })
            .to_vec()
    );
}

#[test]
fn a_rollout_in_progress_keeps_its_state_while_nothing_is_deleted() {
    // Zone b has a pod not ready: the planner waits, the gate must not forget.
    let group = group(vec![
        cleared(soaked(zone("a", 2, 2), "5s")),
        cleared(crash_looping(zone("b", 2, 2), 0)),
    ]);
    let (planned, _, decision) = gate(&group, now());
    assert!(planned.deletions().next().is_none());
    assert_eq!(decision, GateDecision::proceed());
}

#[test]
fn applying_a_hold_keeps_revision_marks_and_the_earlier_recheck() {
    let mut planned = Plan {
        actions: vec![
            Action::SetCurrentRevision {
                statefulset: "a".to_owned(),
                revision: "a-new".to_owned(),
            },
            Action::DeletePod {
                statefulset: "b".to_owned(),
                pod: "b-0".to_owned(),
                uid: "uid".to_owned(),
                unavailable: None,
            },
        ],
        waiting: None,
        warnings: Vec::new(),
        progress: Vec::new(),
        recheck_after: Some(now() + secs(9)),
    };
    let mut decision = GateDecision::hold(
        GateWait::ZoneUnfinished {
            zone: "b".to_owned(),
            unfinished: "a".to_owned(),
        },
        BTreeSet::new(),
    );
    decision.recheck_after = Some(now() + secs(3));
    let (gated, _) = decision.clone().apply(planned.clone());
    assert_eq!(gated.actions, planned.actions[..1]);
    assert_eq!(gated.recheck_after, Some(now() + secs(3)));
    planned.recheck_after = Some(now() + secs(1));
    assert_eq!(
        decision.apply(planned).0.recheck_after,
        Some(now() + secs(1))
    );
}

#[test]
fn the_zone_that_started_finishes_first_whatever_order_the_planner_would_pick() {
    // b started first (its pod crashed and was replaced); the planner alone would now go
    // back to a, by name.
    let group = group(vec![
        soaked(zone("a", 3, 0), "5s"),
        cleared(zone("b", 3, 1)),
        zone("c", 3, 0),
    ]);
    let (planned, gated, decision) = gate(&group, now());
    assert_eq!(deleted_zones(&planned), ["a"]);
    assert_eq!(deleted_zones(&gated), ["b"]);
    assert_eq!(decision, GateDecision::proceed());
}

#[test]
fn a_zone_finishing_during_a_soak_starts_it_again() {
    // b's soak followed a; since then c (not ready, so first) was cleared and finished.
    let group = group(vec![
        cleared(soaked(zone("a", 2, 2), "5s")),
        with_state(zone("b", 2, 0), Some(now() - secs(60)), None),
        cleared(zone("c", 2, 2)),
    ]);
    let (_, _, decision) = gate(&group, now());
    assert!(
        matches!(decision.wait(), Some(GateWait::Soak { remaining, after, .. })
            if *remaining == secs(5) && after == &["a", "c"]),
        "{decision:?}"
    );
    let stored = state_written(&decision, "b");
    assert_eq!(stored.soak_started_at, Some(now()));
    assert_eq!(stored.soak_after, ["a", "c"]);
}

fn ramped(statefulset: StatefulSetSnapshot) -> StatefulSetSnapshot {
    annotated(
        annotated(statefulset, crate::gates::RAMP_ANNOTATION, "exponential"),
        MAX_UNAVAILABLE,
        "4",
    )
}

const MAX_UNAVAILABLE: &str = crate::annotations::MAX_UNAVAILABLE_ANNOTATION;

#[test]
fn a_ramp_takes_1_then_2_then_4_pods_capped_by_max_unavailable() {
    for (updated, expected) in [(0, 1), (1, 2), (3, 4), (7, 4), (2, 1)] {
        let group = group(vec![ramped(zone("a", 12, updated)), zone("b", 3, 0)]);
        let (planned, gated, decision) = gate(&group, now());
        assert_eq!(planned.deletions().count(), 4, "the planner alone takes 4");
        assert_eq!(gated.deletions().count(), expected, "{updated} updated");
        assert_eq!(decision.wait(), None, "{updated} updated");
    }
}

#[test]
fn a_ramp_step_waits_until_the_previous_one_is_available() {
    let mut group = group(vec![ramped(cleared(zone("a", 7, 1))), zone("b", 3, 0)]);
    let pod = &mut group.statefulsets[0].pods[0];
    pod.ready = false;
    pod.ready_since = None;
    group.statefulsets[0].ready_replicas -= 1;
    let (planned, gated, decision) = gate(&group, now());
    assert!(planned.deletions().count() > 0);
    assert!(deleted_zones(&gated).is_empty());
    let wait = decision.wait().expect("held");
    assert_eq!(wait.kind(), "Ramp");
    assert_eq!(
        wait.to_string(),
        "a ramps: its last step must be available first (1 of 7 pods updated)"
    );
}

#[test]
fn an_invalid_ramp_holds_the_group() {
    let group = group(vec![
        annotated(zone("a", 3, 0), crate::gates::RAMP_ANNOTATION, "linear"),
        zone("b", 3, 0),
    ]);
    let (_, gated, decision) = gate(&group, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("InvalidGate"));
}

fn batched(statefulset: StatefulSetSnapshot, batches: &str) -> StatefulSetSnapshot {
    annotated(
        annotated(statefulset, crate::gates::BATCHES_ANNOTATION, batches),
        MAX_UNAVAILABLE,
        "100%",
    )
}

#[test]
fn batches_take_their_cumulative_sizes_each_once_the_zone_is_available() {
    // 1, 50%, 100% of 4 pods: 1, then 1 more, then the last 2.
    for (updated, expected) in [(0, 1), (1, 1), (2, 2), (3, 1)] {
        let group = group(vec![
            batched(zone("a", 4, updated), "1, 50%, 100%"),
            zone("b", 4, 0),
        ]);
        let (planned, gated, decision) = gate(&group, now());
        assert_eq!(planned.deletions().count(), 4 - updated as usize);
        assert_eq!(gated.deletions().count(), expected, "{updated} updated");
        assert_eq!(decision.wait(), None, "{updated} updated");
    }
}

#[test]
fn a_batch_larger_than_max_unavailable_goes_in_parts() {
    let group = group(vec![
        annotated(
            annotated(zone("a", 10, 0), crate::gates::BATCHES_ANNOTATION, "2"),
            MAX_UNAVAILABLE,
            "2",
        ),
        zone("b", 4, 0),
    ]);
    let (_, gated, _) = gate(&group, now());
    assert_eq!(
        gated.deletions().count(),
        2,
        "max-unavailable still bounds a batch"
    );
}

#[test]
fn a_batch_waits_until_the_last_one_is_available() {
    let mut group = group(vec![
        batched(cleared(zone("a", 4, 1)), "1, 50%, 100%"),
        zone("b", 4, 0),
    ]);
    let pod = &mut group.statefulsets[0].pods[0];
    pod.ready = false;
    pod.ready_since = None;
    group.statefulsets[0].ready_replicas -= 1;
    let (_, gated, decision) = gate(&group, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(
        decision.wait().map(ToString::to_string).as_deref(),
        Some(
            "a rolls in batches: batch 2 of 3 goes once the last one is available (1 of 4 pods \
             updated)"
        )
    );
}

#[test]
fn batches_and_a_ramp_together_hold_the_group() {
    let group = group(vec![batched(ramped(zone("a", 4, 0)), "2"), zone("b", 4, 0)]);
    let (_, gated, decision) = gate(&group, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("InvalidGate"));
}

#[test]
fn bad_batches_hold_the_group_and_say_so() {
    for bad in [
        "",
        "0",
        "50%, 10%",
        "3, 2",
        "1, 150%",
        "many",
        "1,,2",
        &"1,".repeat(200),
    ] {
        let group = group(vec![batched(zone("a", 4, 0), bad), zone("b", 4, 0)]);
        let (_, gated, decision) = gate(&group, now());
        assert!(deleted_zones(&gated).is_empty(), "{bad:?}");
        assert_eq!(
            decision.wait().map(GateWait::kind),
            Some("InvalidGate"),
            "{bad:?}"
        );
        assert!(
            decision
                .warnings
                .iter()
                .any(|warning| warning.to_string().contains("baton.dev/batches")),
            "{bad:?}"
        );
    }
}

fn asking(statefulset: StatefulSetSnapshot, approval: &str) -> StatefulSetSnapshot {
    annotated(statefulset, crate::gates::APPROVAL_ANNOTATION, approval)
}

fn approved(statefulset: StatefulSetSnapshot, step: &str) -> StatefulSetSnapshot {
    annotated(statefulset, crate::gates::APPROVED_ANNOTATION, step)
}

fn awaited(decision: &GateDecision) -> Option<String> {
    match decision.wait() {
        Some(GateWait::AwaitingApproval { step, .. }) => Some(step.clone()),
        _ => None,
    }
}

#[test]
fn approval_after_the_canary_lets_the_canary_go_and_holds_the_rest_until_approved() {
    // The canary: the first step goes by itself.
    let group_ = group(vec![
        batched(asking(zone("a", 4, 0), "canary"), "1, 100%"),
        zone("b", 4, 0),
    ]);
    let (_, gated, decision) = gate(&group_, now());
    assert_eq!(gated.deletions().count(), 1);
    assert_eq!(awaited(&decision), None);
    // After it, the rest waits for a person.
    let waiting = group(vec![
        batched(asking(cleared(zone("a", 4, 1)), "canary"), "1, 100%"),
        zone("b", 4, 0),
    ]);
    let (_, gated, decision) = gate(&waiting, now());
    assert!(deleted_zones(&gated).is_empty());
    let step = awaited(&decision).expect("awaits approval");
    assert_eq!(step, "canary/a-new+b-new");
    assert_eq!(
        decision.wait().map(ToString::to_string).as_deref(),
        Some(
            "a awaits approval of the rollout past its canary; approve with kubectl baton \
             approve ingester --step canary/a-new+b-new"
        )
    );
    // Approved on one member only: nothing goes (one member's word approves nothing).
    let mut approved_group = waiting.clone();
    approved_group.statefulsets[1] = approved(zone("b", 4, 0), &step);
    let (_, gated, decision) = gate(&approved_group, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(awaited(&decision).as_deref(), Some(step.as_str()));
    // Approved on every member: the rest of the rollout goes, zone b too.
    approved_group.statefulsets[0] = approved(approved_group.statefulsets[0].clone(), &step);
    let (_, gated, decision) = gate(&approved_group, now());
    assert_eq!(gated.deletions().count(), 3);
    assert_eq!(decision.wait(), None);
}

#[test]
fn one_members_bypass_bypasses_nothing_and_is_told() {
    // Given a soak under way, and a bypass on one member only (a StatefulSet anyone who may
    // create one with the group's label could add)
    let until = (now() + secs(600)).to_string();
    let group = group(vec![
        soaked(
            with_state(zone("a", 3, 3), None, Some(now() - secs(60))),
            "1h",
        ),
        bypassing(zone("b", 3, 0), &until),
    ]);
    // Then the soak holds, and the lone bypass is named
    let (_, gated, decision) = gate(&group, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("Soak"));
    assert!(
        decision.warnings.iter().any(|warning| {
            let text = warning.to_string();
            text.contains("baton.dev/bypass-gates-until") && text.contains("one member alone")
        }),
        "{:?}",
        decision.warnings
    );
}

#[test]
fn an_approval_for_another_revision_or_step_lets_nothing_go() {
    let stale = [
        "canary/a-old+b-old",
        "a/a-new/0",
        "a/a-old/1",
        "canary/a-new",
        "CANARY/a-new+b-new",
    ];
    for step in stale {
        let group = group(vec![
            batched(
                approved(asking(cleared(zone("a", 4, 1)), "canary,batch"), step),
                "1, 100%",
            ),
            zone("b", 4, 0),
        ]);
        let (_, gated, decision) = gate(&group, now());
        assert!(deleted_zones(&gated).is_empty(), "{step}");
        assert_eq!(
            awaited(&decision).as_deref(),
            Some("canary/a-new+b-new,a/a-new/1"),
            "{step}"
        );
    }
}

#[test]
fn approval_per_zone_holds_each_zones_first_step_only() {
    let group_ = group(vec![asking(zone("a", 4, 0), "zone"), zone("b", 4, 0)]);
    let (_, gated, decision) = gate(&group_, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(awaited(&decision).as_deref(), Some("a/a-new/0"));
    let group_ = group(vec![
        approved(asking(zone("a", 4, 0), "zone"), "a/a-new/0"),
        approved(zone("b", 4, 0), "a/a-new/0"),
    ]);
    let (_, gated, _) = gate(&group_, now());
    assert_eq!(deleted_zones(&gated), ["a"]);
    // Once the zone started, its later steps go without.
    let group_ = group(vec![
        asking(cleared(zone("a", 4, 1)), "zone"),
        zone("b", 4, 0),
    ]);
    let (_, gated, decision) = gate(&group_, now());
    assert_eq!(deleted_zones(&gated), ["a"]);
    assert_eq!(awaited(&decision), None);
}

#[test]
fn an_unknown_approval_holds_the_group() {
    let group = group(vec![
        asking(zone("a", 4, 0), "canary, person"),
        zone("b", 4, 0),
    ]);
    let (_, gated, decision) = gate(&group, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("InvalidGate"));
}

fn bypassing(statefulset: StatefulSetSnapshot, until: &str) -> StatefulSetSnapshot {
    annotated(statefulset, crate::gates::BYPASS_ANNOTATION, until)
}

#[test]
fn a_bypass_in_force_skips_the_soak_and_says_so() {
    let until = (now() + secs(600)).to_string();
    let group = group(vec![
        bypassing(
            soaked(
                with_state(zone("a", 3, 3), None, Some(now() - secs(60))),
                "1h",
            ),
            &until,
        ),
        bypassing(zone("b", 3, 0), &until),
    ]);
    let (_, gated, decision) = gate(&group, now());
    assert_eq!(deleted_zones(&gated), ["b"]);
    assert_eq!(decision.wait(), None);
    assert_eq!(decision.notices.len(), 1);
    assert_eq!(decision.notices[0].kind(), "GateBypassed");
    assert!(decision.notices[0].to_string().contains("the soak after a"));
    assert_eq!(decision.recheck_after, Some(now() + secs(600)));
}

#[test]
fn an_expired_or_unreadable_bypass_bypasses_nothing() {
    for until in [
        (now() - secs(1)).to_string(),
        now().to_string(),
        "tomorrow".to_owned(),
        "2026-13-01T00:00:00Z".to_owned(),
    ] {
        let group = group(vec![
            bypassing(
                soaked(
                    with_state(zone("a", 3, 3), None, Some(now() - secs(60))),
                    "1h",
                ),
                &until,
            ),
            zone("b", 3, 0),
        ]);
        let (_, gated, decision) = gate(&group, now());
        assert!(deleted_zones(&gated).is_empty(), "{until}");
        assert_eq!(decision.wait().map(GateWait::kind), Some("Soak"), "{until}");
        assert!(decision.notices.is_empty(), "{until}");
    }
    let group = group(vec![
        bypassing(zone("a", 3, 0), "tomorrow"),
        zone("b", 3, 0),
    ]);
    let (_, _, decision) = gate(&group, now());
    assert!(
        decision
            .warnings
            .iter()
            .any(|warning| warning.to_string().contains("bypassing nothing"))
    );
}

#[test]
fn a_bypass_never_lifts_a_halt_or_an_approval() {
    let until = (now() + secs(600)).to_string();
    let halted = group(vec![
        bypassing(
            annotated(zone("a", 3, 0), HALTED_ANNOTATION, "errors"),
            &until,
        ),
        zone("b", 3, 0),
    ]);
    let (_, gated, decision) = gate(&halted, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("Halted"));
    let asking_group = group(vec![
        bypassing(asking(zone("a", 3, 0), "zone"), &until),
        zone("b", 3, 0),
    ]);
    let (_, gated, decision) = gate(&asking_group, now());
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(
        decision.wait().map(GateWait::kind),
        Some("AwaitingApproval")
    );
}

#[test]
fn with_gate_keys_members_go_one_at_a_time_whatever_max_rolling_members_allows() {
    use crate::annotations::MAX_ROLLING_MEMBERS_ANNOTATION;
    let rolling_two = |statefulset| annotated(statefulset, MAX_ROLLING_MEMBERS_ANNOTATION, "2");
    // Zone a was cleared and rolls: its new pod 0 is not ready yet.
    let a = rolling_two(cleared(soaked(crash_looping(zone("a", 3, 1), 0), "5s")));
    let group = group(vec![
        a,
        rolling_two(zone("b", 3, 0)),
        rolling_two(zone("c", 3, 0)),
    ]);
    let (planned, gated, _) = gate(&group, now());
    // The planner alone would start zone b beside it...
    assert_eq!(deleted_zones(&planned), ["b"]);
    // ...but the gate's zone finishes before another starts (a soak is between zones).
    assert!(deleted_zones(&gated).is_empty(), "{:?}", gated.actions);
}
