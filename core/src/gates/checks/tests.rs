//! Scenarios for the health-check gate, composed with the real planner and gate decision.

use super::*;
use crate::explained::Explained;
use crate::gates::decide::tests::{annotated, cleared, deleted_zones, group, now, secs, zone};
use crate::gates::{HEALTH_CHECK_ANNOTATION, decide};

fn policy() -> CheckPolicy {
    CheckPolicy {
        name: "errors".to_owned(),
        interval: secs(10),
        initial_delay: secs(30),
        success_threshold: 2,
        failure_threshold: 3,
        on_failure: OnFailure::Halt,
    }
}

fn checked(
    statefulset: crate::rollout::StatefulSetSnapshot,
) -> crate::rollout::StatefulSetSnapshot {
    annotated(statefulset, HEALTH_CHECK_ANNOTATION, "errors")
}

fn with_checks(
    statefulset: crate::rollout::StatefulSetSnapshot,
    state: &CheckState,
) -> crate::rollout::StatefulSetSnapshot {
    annotated(
        checked(statefulset),
        CHECK_STATE_ANNOTATION,
        &state.to_annotation(),
    )
}

fn run(outcome: CheckOutcome) -> CheckRun {
    CheckRun {
        at: now(),
        outcome,
        seen: None,
    }
}

fn fail() -> CheckOutcome {
    CheckOutcome::Fail {
        query: "sum(rate(errors[1m]))".to_owned(),
        value: "0.3".to_owned(),
    }
}

fn gate(group: &GroupSnapshot, run: Option<&CheckRun>) -> (Plan, GateDecision) {
    apply(group, &policy(), run, decide(group, now()), now())
}

fn stored(decision: &GateDecision) -> CheckState {
    let write = decision
        .writes
        .iter()
        .find(|write| write.key == CHECK_STATE_ANNOTATION)
        .unwrap_or_else(|| panic!("no check state written: {decision:?}"));
    serde_json::from_str(write.value.as_deref().expect("set")).expect("readable")
}

fn state(passes: u32, failures: u32) -> CheckState {
    CheckState {
        passes,
        failures,
        last_run: Some((now() - secs(10)).to_string()),
        last_step: Some((now() - secs(600)).to_string()),
        last_outcome: Some("passed".to_owned()),
        ..CheckState::default()
    }
}

#[test]
fn a_step_waits_for_consecutive_passes_then_goes_and_resets_the_count() {
    let one = group(vec![
        with_checks(zone("a", 3, 0), &state(0, 0)),
        zone("b", 3, 0),
    ]);
    let (gated, decision) = gate(&one, Some(&run(CheckOutcome::Pass)));
    assert!(deleted_zones(&gated).is_empty());
    let wait = decision.wait().expect("held");
    assert_eq!(wait.kind(), "HealthCheck");
    assert_eq!(
        wait.to_string(),
        "a waits for health check errors: 1 of 2 passes in a row; last run passed"
    );
    assert_eq!(stored(&decision).passes, 1);
    assert_eq!(decision.recheck_after, Some(now() + secs(10)));

    let two = group(vec![
        with_checks(zone("a", 3, 0), &state(1, 0)),
        zone("b", 3, 0),
    ]);
    let (gated, decision) = gate(&two, Some(&run(CheckOutcome::Pass)));
    assert_eq!(deleted_zones(&gated), ["a"]);
    let after = stored(&decision);
    assert_eq!(after.passes, 0, "the step resets the count");
    assert_eq!(after.last_step, Some(now().to_string()));
}

#[test]
fn a_passing_run_stores_the_values_it_saw_as_a_failing_one_does() {
    // Given a group waiting for its second pass
    let one = group(vec![
        with_checks(zone("a", 3, 0), &state(0, 0)),
        zone("b", 3, 0),
    ]);
    // When a run passes, having seen an error rate of 0.01
    let passing = CheckRun {
        seen: Some("error-rate: 0.01".to_owned()),
        ..run(CheckOutcome::Pass)
    };
    let (_, decision) = gate(&one, Some(&passing));
    // Then the stored outcome and the wait say what it saw
    assert_eq!(
        stored(&decision).last_outcome.as_deref(),
        Some("passed (error-rate: 0.01)")
    );
    assert!(
        decision
            .wait()
            .expect("held")
            .to_string()
            .ends_with("last run passed (error-rate: 0.01)"),
        "{:?}",
        decision.wait()
    );
    // and a failure's own words are kept whatever was seen
    let failing = CheckRun {
        seen: Some("ignored".to_owned()),
        ..run(fail())
    };
    assert_eq!(failing.described(), fail().to_string());
}

#[test]
fn passes_within_the_initial_delay_after_a_step_do_not_count() {
    let mut recent = state(0, 0);
    recent.last_step = Some((now() - secs(20)).to_string());
    let group = group(vec![
        with_checks(cleared(zone("a", 3, 1)), &recent),
        zone("b", 3, 0),
    ]);
    let (gated, decision) = gate(&group, Some(&run(CheckOutcome::Pass)));
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(stored(&decision).passes, 0);
}

#[test]
fn an_inconclusive_run_passes_nothing_and_halts_nothing() {
    let group = group(vec![
        with_checks(zone("a", 3, 0), &state(1, 2)),
        zone("b", 3, 0),
    ]);
    let outcome = CheckOutcome::Inconclusive {
        why: "connection refused".to_owned(),
    };
    let (gated, decision) = gate(&group, Some(&run(outcome)));
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("HealthCheck"));
    let after = stored(&decision);
    assert_eq!((after.passes, after.failures), (0, 2));
    assert!(
        decision
            .wait()
            .expect("held")
            .to_string()
            .ends_with("last run inconclusive: connection refused"),
        "{decision:?}"
    );
}

#[test]
fn consecutive_failures_halt_the_group_naming_check_query_value_and_zone() {
    let group = group(vec![
        with_checks(cleared(zone("a", 3, 1)), &state(0, 2)),
        zone("b", 3, 0),
    ]);
    let (gated, decision) = gate(&group, Some(&run(fail())));
    assert!(deleted_zones(&gated).is_empty());
    let why = "health check errors failed 3 times in a row while a rolled: \
               query `sum(rate(errors[1m]))` returned 0.3";
    assert_eq!(
        decision.wait(),
        Some(&GateWait::Halted {
            statefulset: "a".to_owned(),
            why: why.to_owned(),
            reach: Box::new(group.reach.clone()),
        })
    );
    assert!(decision.writes.contains(&AnnotationWrite {
        statefulset: "a".to_owned(),
        key: HALTED_ANNOTATION,
        value: Some(why.to_owned()),
    }));
    let after = stored(&decision);
    assert_eq!(
        (after.passes, after.failures),
        (0, 0),
        "resuming re-runs the gate"
    );
}

#[test]
fn fewer_failures_than_the_threshold_only_count() {
    let group = group(vec![
        with_checks(zone("a", 3, 0), &state(1, 0)),
        zone("b", 3, 0),
    ]);
    let (_, decision) = gate(&group, Some(&run(fail())));
    assert_eq!(decision.wait().map(GateWait::kind), Some("HealthCheck"));
    assert_eq!(
        (stored(&decision).passes, stored(&decision).failures),
        (0, 1)
    );
}

#[test]
fn a_halted_group_counts_no_runs_and_starts_from_zero_when_resumed() {
    let group = group(vec![
        annotated(
            with_checks(zone("a", 3, 0), &state(0, 0)),
            HALTED_ANNOTATION,
            "by hand",
        ),
        zone("b", 3, 0),
    ]);
    let (_, decision) = gate(&group, Some(&run(CheckOutcome::Pass)));
    assert_eq!(decision.wait().map(GateWait::kind), Some("Halted"));
    let after = stored(&decision);
    assert_eq!((after.passes, after.failures), (0, 0));
    assert_eq!(after.last_run, Some(now().to_string()));
}

#[test]
fn runs_are_due_every_interval_from_the_stored_last_run() {
    let stored = state(0, 0);
    assert!(!stored.due(&policy(), now() - secs(1)));
    assert!(stored.due(&policy(), now()));
    assert!(CheckState::default().due(&policy(), now()));
}

#[test]
fn without_a_run_due_the_state_is_not_rewritten() {
    let group = group(vec![
        with_checks(zone("a", 3, 0), &state(2, 0)),
        zone("b", 3, 0),
    ]);
    let (gated, decision) = gate(&group, None);
    // Two passes stored: the step goes (and that is written), nothing else.
    assert_eq!(deleted_zones(&gated), ["a"]);
    assert_eq!(stored(&decision).passes, 0);
}

#[test]
fn a_complete_rollout_forgets_the_check_state_on_every_member() {
    let mut done = group(vec![
        with_checks(cleared(zone("a", 2, 2)), &state(1, 0)),
        annotated(
            cleared(zone("b", 2, 2)),
            CHECK_STATE_ANNOTATION,
            &state(1, 0).to_annotation(),
        ),
    ]);
    for member in &mut done.statefulsets {
        member.current_revision = member.update_revision.clone();
    }
    let (_, decision) = gate(&done, None);
    for member in ["a", "b"] {
        assert!(
            decision.writes.contains(&AnnotationWrite {
                statefulset: member.to_owned(),
                key: CHECK_STATE_ANNOTATION,
                value: None,
            }),
            "{member}: {decision:?}"
        );
    }
}

#[test]
fn an_unreadable_check_state_starts_afresh_with_a_warning() {
    let group = group(vec![
        annotated(
            checked(zone("a", 3, 0)),
            CHECK_STATE_ANNOTATION,
            "{\"lastRun\":\"soon\"}",
        ),
        zone("b", 3, 0),
    ]);
    let (_, decision) = gate(&group, None);
    assert!(
        decision
            .warnings
            .iter()
            .any(|warning| warning.kind() == "UnreadableGateState"),
        "{decision:?}"
    );
    assert_eq!(decision.wait().map(GateWait::kind), Some("HealthCheck"));
}

#[test]
fn an_invalid_check_name_holds_the_group() {
    let group = group(vec![
        annotated(zone("a", 3, 0), HEALTH_CHECK_ANNOTATION, "Errors!"),
        zone("b", 3, 0),
    ]);
    let (gated, decision) = gate(&group, None);
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("InvalidGate"));
}

#[test]
fn passes_seen_before_the_template_changed_do_not_let_the_new_revisions_step_go() {
    // Given a check that passed twice and failed twice while the group rolled to an earlier
    // revision
    let earlier = CheckState {
        revisions: [("a", "a-old"), ("b", "b-old")]
            .map(|(member, revision)| (member.to_owned(), revision.to_owned()))
            .into(),
        ..state(2, 2)
    };
    let one = group(vec![
        with_checks(zone("a", 3, 0), &earlier),
        zone("b", 3, 0),
    ]);
    // When it is gated with no new run
    let (gated, decision) = gate(&one, None);
    // Then nothing is deleted, and the counts start again for the new revisions
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("HealthCheck"));
    let counted = stored(&decision);
    assert_eq!((counted.passes, counted.failures), (0, 0));
    assert_eq!(counted.revisions, revisions(&one));
    // while the same passes for the revisions being rolled let it go
    let same = CheckState {
        revisions: revisions(&one),
        ..state(2, 0)
    };
    let two = group(vec![with_checks(zone("a", 3, 0), &same), zone("b", 3, 0)]);
    assert_eq!(deleted_zones(&gate(&two, None).0), ["a"]);
}

#[test]
fn an_earlier_batons_target_that_differs_forgets_the_passes_and_keeps_the_failures() {
    // Given a state stored by an earlier baton, for other revisions (or other members: its
    // target cannot tell)
    let earlier = CheckState {
        target: Some("rev-old,rev-old".to_owned()),
        ..state(2, 2)
    };
    let one = group(vec![
        with_checks(zone("a", 3, 0), &earlier),
        zone("b", 3, 0),
    ]);
    // When it is gated with no new run
    let (gated, decision) = gate(&one, None);
    // Then nothing is deleted: the passes count for nothing, the failures still count
    assert!(deleted_zones(&gated).is_empty());
    let counted = stored(&decision);
    assert_eq!((counted.passes, counted.failures), (0, 2));
    assert_eq!((counted.target, counted.revisions), (None, revisions(&one)));
}

/// A StatefulSet that joins the group: no pods, not a zone, named to sort before the zones.
fn newcomer() -> crate::rollout::StatefulSetSnapshot {
    crate::testing::zone("0-newcomer", 0).build()
}

/// `state`, as stored for `group`'s revisions.
fn about(group: &GroupSnapshot, state: CheckState) -> CheckState {
    CheckState {
        revisions: revisions(group),
        ..state
    }
}

#[test]
fn a_newcomer_sorting_first_with_no_state_shortens_no_initial_delay() {
    // Given a group whose canary stepped 20 s ago (initialDelay 30 s), its state on its members
    let zones = || vec![cleared(checked(zone("a", 3, 1))), zone("b", 3, 0)];
    let mut stepped = state(0, 0);
    stepped.last_step = Some((now() - secs(20)).to_string());
    let before = group(zones());
    let stepped = about(&before, stepped);
    // When an empty StatefulSet sorting before the zones joins it, and two runs pass
    let mut members: Vec<_> = zones()
        .into_iter()
        .map(|member| annotated(member, CHECK_STATE_ANNOTATION, &stepped.to_annotation()))
        .collect();
    members.insert(0, newcomer());
    let joined = group(members);
    assert_eq!(joined.statefulsets[0].name, "0-newcomer");
    let (read, warnings) = CheckState::read(&joined);
    assert!(warnings.is_empty());
    // Then the last step is still read (the newcomer holds nothing to say otherwise)
    assert_eq!(read.last_step, stepped.last_step);
    let (gated, decision) = gate(&joined, Some(&run(CheckOutcome::Pass)));
    // and a pass within the initial delay counts for nothing: nothing is deleted
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(stored(&decision).passes, 0);
    // and the state is written to every member, the newcomer included
    let written: Vec<&str> = decision
        .writes
        .iter()
        .filter(|write| write.key == CHECK_STATE_ANNOTATION)
        .map(|write| write.statefulset.as_str())
        .collect();
    assert_eq!(written, ["0-newcomer", "a", "b"]);
}

#[test]
fn a_newcomer_forgets_no_failure_counted_towards_a_halt() {
    // Given a group whose check failed twice in a row (failureThreshold 3)
    let zones = || vec![cleared(checked(zone("a", 3, 1))), zone("b", 3, 0)];
    let failing = about(&group(zones()), state(0, 2));
    let mut members: Vec<_> = zones()
        .into_iter()
        .map(|member| annotated(member, CHECK_STATE_ANNOTATION, &failing.to_annotation()))
        .collect();
    // When an empty StatefulSet joins it (its revision is one the counts were not about)
    members.insert(0, newcomer());
    let joined = group(members);
    // Then the third failure halts the group
    let (_, decision) = gate(&joined, Some(&run(fail())));
    assert_eq!(decision.wait().map(GateWait::kind), Some("Halted"));
}

#[test]
fn removing_the_member_that_sorts_first_leaves_the_state_on_the_others() {
    // Given a newcomer sorting first that joined while the group rolled: the state was
    // written to it too
    let zones = || vec![cleared(checked(zone("a", 3, 1))), zone("b", 3, 0)];
    let mut members = zones();
    members.insert(0, newcomer());
    let joined = group(members);
    let mut stepped = state(0, 2);
    stepped.last_step = Some((now() - secs(20)).to_string());
    let stepped = about(&joined, stepped);
    let writes = store(&joined, &stepped);
    assert_eq!(writes.len(), 3, "{writes:?}");
    // When it goes away again
    let left = group(
        zones()
            .into_iter()
            .map(|member| annotated(member, CHECK_STATE_ANNOTATION, &stepped.to_annotation()))
            .collect::<Vec<_>>(),
    );
    // Then the others still hold the last step and the failures
    let (read, _) = CheckState::read(&left);
    assert_eq!(read.last_step, stepped.last_step);
    assert_eq!(read.failures, 2);
    assert_eq!(read.passes, 0);
}

#[test]
fn states_that_differ_are_read_as_the_most_cautious_of_them() {
    // Given members holding different states (one older: written before a partial write, or a
    // member cluster back from an outage)
    let zones = group(vec![
        checked(zone("a", 3, 1)),
        zone("b", 3, 0),
        zone("c", 3, 0),
    ]);
    let older = about(
        &zones,
        CheckState {
            passes: 2,
            failures: 0,
            last_run: Some((now() - secs(40)).to_string()),
            last_step: Some((now() - secs(100)).to_string()),
            last_outcome: Some("older".to_owned()),
            ..CheckState::default()
        },
    );
    let newer = about(
        &zones,
        CheckState {
            passes: 1,
            failures: 1,
            last_run: Some((now() - secs(5)).to_string()),
            last_step: Some((now() - secs(10)).to_string()),
            last_outcome: Some("newer".to_owned()),
            ..CheckState::default()
        },
    );
    let mixed = group(vec![
        annotated(
            checked(zone("a", 3, 1)),
            CHECK_STATE_ANNOTATION,
            &older.to_annotation(),
        ),
        annotated(
            zone("b", 3, 0),
            CHECK_STATE_ANNOTATION,
            &newer.to_annotation(),
        ),
        annotated(zone("c", 3, 0), CHECK_STATE_ANNOTATION, "not json"),
    ]);
    // When it is read
    let (read, warnings) = CheckState::read(&mixed);
    // Then the fewest passes, the most failures, the latest run and step are read
    assert_eq!((read.passes, read.failures), (1, 1));
    assert_eq!(read.last_run, newer.last_run);
    assert_eq!(read.last_step, newer.last_step);
    assert_eq!(read.last_outcome.as_deref(), Some("newer"));
    // and the unreadable one is a warning naming its member
    let [GateWarning::UnreadableState { statefulset, .. }] = warnings.as_slice() else {
        panic!("one warning: {warnings:?}");
    };
    assert_eq!(statefulset, "c");
}

#[test]
fn a_member_that_cannot_be_read_now_is_not_written() {
    let mut out = zone("b", 3, 0);
    out.unreachable = Some(crate::rollout::Unreachable {
        cluster: "eu".to_owned(),
        error: "connection refused".to_owned(),
    });
    let group = group(vec![checked(zone("a", 3, 0)), out]);
    let written: Vec<String> = store(&group, &state(1, 0))
        .into_iter()
        .map(|write| write.statefulset)
        .collect();
    assert_eq!(written, ["a"]);
}

#[test]
fn a_warning_check_never_holds_a_step_or_halts_and_tells_each_failure() {
    let warning = CheckPolicy {
        on_failure: OnFailure::Warn,
        ..policy()
    };
    let group = group(vec![
        with_checks(zone("a", 3, 0), &state(0, 2)),
        zone("b", 3, 0),
    ]);
    let (gated, decision) = apply(
        &group,
        &warning,
        Some(&run(fail())),
        decide(&group, now()),
        now(),
    );
    assert_eq!(deleted_zones(&gated), ["a"], "the step goes");
    assert_eq!(decision.wait(), None);
    assert!(
        !decision
            .writes
            .iter()
            .any(|write| write.key == crate::gates::HALTED_ANNOTATION),
        "three failures in a row halt nothing"
    );
    assert_eq!(stored(&decision).failures, 3);
    assert_eq!(decision.notices.len(), 1);
    assert_eq!(decision.notices[0].kind(), "HealthCheckWarning");
    assert!(decision.notices[0].is_warning());
    assert!(decision.notices[0].to_string().contains("returned 0.3"));
    // The same check with onFailure Halt halts.
    let (_, halting) = gate(&group, Some(&run(fail())));
    assert_eq!(halting.wait().map(GateWait::kind), Some("Halted"));
}

#[test]
fn a_bypass_lets_steps_go_without_passes_halts_nothing_and_tells_each_step() {
    let until = (now() + secs(300)).to_string();
    let group = group(vec![
        annotated(
            with_checks(zone("a", 3, 0), &state(0, 2)),
            crate::gates::BYPASS_ANNOTATION,
            &until,
        ),
        annotated(zone("b", 3, 0), crate::gates::BYPASS_ANNOTATION, &until),
    ]);
    let (gated, decision) = gate(&group, Some(&run(fail())));
    assert_eq!(deleted_zones(&gated), ["a"]);
    assert_eq!(decision.wait(), None);
    assert!(decision.notices.iter().any(|notice| {
        notice.kind() == "GateBypassed"
            && notice
                .to_string()
                .contains("health check errors (0 of 2 passes)")
    }));
    assert_eq!(stored(&decision).last_step, Some(now().to_string()));
    // Expired: the failure halts as ever.
    let expired = (now() - secs(1)).to_string();
    let mut group = group;
    group.statefulsets[0]
        .annotations
        .insert(crate::gates::BYPASS_ANNOTATION.to_owned(), expired);
    let (gated, decision) = gate(&group, Some(&run(fail())));
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("Halted"));
    assert!(decision.notices.is_empty());
}

#[test]
fn a_check_whose_on_failure_is_rollback_asks_for_a_rollback_instead_of_halting() {
    let rolling_back = CheckPolicy {
        on_failure: OnFailure::Rollback,
        ..policy()
    };
    let group = group(vec![
        with_checks(cleared(zone("a", 3, 1)), &state(0, 2)),
        zone("b", 3, 0),
    ]);
    let (gated, decision) = apply(
        &group,
        &rolling_back,
        Some(&run(fail())),
        decide(&group, now()),
        now(),
    );
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("RollingBack"));
    let asked = decision
        .writes
        .iter()
        .find(|write| write.key == crate::gates::rollback::ROLLBACK_ANNOTATION)
        .expect("a rollback request");
    assert_eq!(asked.statefulset, "a");
    assert!(
        asked
            .value
            .as_deref()
            .is_some_and(|why| why.starts_with("health check errors failed 3 times in a row"))
    );
    assert!(
        !decision
            .writes
            .iter()
            .any(|write| write.key == crate::gates::HALTED_ANNOTATION)
    );
}
