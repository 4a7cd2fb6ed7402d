//! Scenarios for rollout hooks, composed with the real planner and zone gate.

use super::*;
use crate::explained::Explained;
use crate::gates::decide::tests::{annotated, cleared, deleted_zones, group, now, secs, zone};
use crate::gates::{HOOK_ANNOTATION, decide};

const URL: &str = "http://hooks.example/rollout";

fn hooked(statefulset: crate::rollout::StatefulSetSnapshot) -> crate::rollout::StatefulSetSnapshot {
    annotated(statefulset, HOOK_ANNOTATION, URL)
}

fn with_hooks(
    statefulset: crate::rollout::StatefulSetSnapshot,
    before: HookState,
    after: HookState,
) -> crate::rollout::StatefulSetSnapshot {
    let hooks = ZoneHooks {
        revision: format!("{}-new", statefulset.name),
        before,
        after,
    };
    let value = serde_json::to_string(&hooks).expect("serialises");
    annotated(statefulset, HOOK_STATE_ANNOTATION, &value)
}

fn done() -> HookState {
    HookState {
        done: true,
        ..HookState::default()
    }
}

fn gate(group: &GroupSnapshot) -> (Plan, GateDecision, Option<HookCall>) {
    apply(group, URL, decide(group, now()), now())
}

#[test]
fn the_first_zone_starts_only_after_its_before_hook_answered() {
    let group = group(vec![hooked(zone("a", 3, 0)), zone("b", 3, 0)]);
    let (gated, decision, call) = gate(&group);
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(decision.wait().map(GateWait::kind), Some("Hook"));
    assert!(
        decision.writes.is_empty(),
        "a is not cleared yet: {decision:?}"
    );
    let call = call.expect("the before hook is due");
    assert_eq!(
        (call.statefulset.as_str(), call.phase),
        ("a", HookPhase::BeforeZone)
    );
    assert_eq!(
        body(&call, "ingester", "prod"),
        serde_json::json!({
            "group": "ingester", "namespace": "prod", "zone": "a", "phase": "BeforeZone",
            "fromRevision": "a-old", "toRevision": "a-new",
        })
    );

    let answered = record(&group, &call, Ok(204), now());
    let mut after = group.clone();
    for write in answered {
        after.statefulsets[0]
            .annotations
            .insert(write.key.to_owned(), write.value.expect("set"));
    }
    let (gated, _, call) = gate(&after);
    assert_eq!(deleted_zones(&gated), ["a"]);
    assert_eq!(call, None, "a hook that answered is not called again");
}

#[test]
fn a_completed_zone_calls_its_after_hook_before_anything_else() {
    let group = group(vec![
        with_hooks(
            hooked(cleared(zone("a", 2, 2))),
            done(),
            HookState::default(),
        ),
        zone("b", 2, 0),
    ]);
    let (gated, decision, call) = gate(&group);
    assert!(deleted_zones(&gated).is_empty());
    assert_eq!(
        decision.wait().expect("held").to_string(),
        "a waits for its AfterZone hook"
    );
    let call = call.expect("due");
    assert_eq!(
        (call.statefulset.as_str(), call.phase),
        ("a", HookPhase::AfterZone)
    );
    // The zone gate alone would clear b now; b must wait for its own before-hook.
    let (_, zones_only) = decide(&group, now());
    assert!(
        zones_only
            .writes
            .iter()
            .any(|write| write.statefulset == "b")
    );
    assert!(
        decision
            .writes
            .iter()
            .all(|write| write.key != STATE_ANNOTATION),
        "{decision:?}"
    );
}

#[test]
fn failures_are_retried_with_backoff_and_halt_past_the_limit() {
    let group = group(vec![hooked(zone("a", 3, 0)), zone("b", 3, 0)]);
    let (_, _, call) = gate(&group);
    let call = call.expect("due");
    let mut state = group.clone();
    for attempt in 1..=ATTEMPTS {
        let writes = record(&state, &call, Ok(503), now());
        let halted = writes.iter().find(|write| write.key == HALTED_ANNOTATION);
        if attempt < ATTEMPTS {
            assert!(halted.is_none(), "attempt {attempt}");
        } else {
            let why = halted.expect("halted").value.clone().expect("set");
            assert_eq!(
                why,
                format!("hook BeforeZone of a ({URL}) failed {ATTEMPTS} times: HTTP 503")
            );
        }
        for write in writes {
            state.statefulsets[0]
                .annotations
                .insert(write.key.to_owned(), write.value.expect("set"));
        }
        if attempt == 1 {
            // Retried after a second, not before.
            let (_, decision, call) = gate(&state);
            assert_eq!(call, None);
            assert_eq!(decision.recheck_after, Some(now() + secs(1)));
            assert!(
                decision
                    .wait()
                    .expect("held")
                    .to_string()
                    .ends_with("(1 failed so far, last: HTTP 503)")
            );
        }
    }
}

#[test]
fn the_rollout_state_is_kept_until_the_last_after_hook_answered() {
    let mut complete = group(vec![
        with_hooks(hooked(cleared(zone("a", 2, 2))), done(), done()),
        with_hooks(cleared(zone("b", 2, 2)), done(), HookState::default()),
    ]);
    for member in &mut complete.statefulsets {
        member.current_revision = member.update_revision.clone();
    }
    let (_, decision, call) = gate(&complete);
    assert_eq!(call.map(|call| call.statefulset), Some("b".to_owned()));
    assert!(
        decision.writes.is_empty(),
        "nothing forgotten yet: {decision:?}"
    );

    complete.statefulsets[1] = with_hooks(cleared(zone("b", 2, 2)), done(), done());
    complete.statefulsets[1].current_revision = complete.statefulsets[1].update_revision.clone();
    let (_, decision, call) = gate(&complete);
    assert_eq!(call, None);
    for name in ["a", "b"] {
        for key in [STATE_ANNOTATION, HOOK_STATE_ANNOTATION] {
            assert!(
                decision.writes.contains(&AnnotationWrite {
                    statefulset: name.to_owned(),
                    key,
                    value: None,
                }),
                "{name} {key}: {decision:?}"
            );
        }
    }
}

/// The writes of the last of the due hook's attempts, every one answered 503 (each attempt's
/// writes stored on zone a, as the controller stores them, before the next).
fn fail_every_attempt(group: &GroupSnapshot) -> Vec<AnnotationWrite> {
    let (_, _, call) = gate(group);
    let call = call.expect("due");
    let mut state = group.clone();
    let mut last = Vec::new();
    for _ in 1..=ATTEMPTS {
        last = record(&state, &call, Ok(503), now());
        for write in &last {
            state.statefulsets[0]
                .annotations
                .insert(write.key.to_owned(), write.value.clone().expect("set"));
        }
    }
    last
}

#[test]
fn a_group_asking_for_it_is_rolled_back_rather_than_halted_when_its_hook_keeps_failing() {
    let group = group(vec![
        annotated(
            hooked(zone("a", 3, 0)),
            crate::gates::ROLLBACK_ON_FAILURE_ANNOTATION,
            "true",
        ),
        annotated(
            zone("b", 3, 0),
            crate::gates::ROLLBACK_ON_FAILURE_ANNOTATION,
            "true",
        ),
    ]);
    let last = fail_every_attempt(&group);
    assert!(!last.iter().any(|write| write.key == HALTED_ANNOTATION));
    // The request goes on every member, so that it is the group's (a lone one asks nothing)
    let asked: Vec<&AnnotationWrite> = last
        .iter()
        .filter(|write| write.key == crate::gates::rollback::ROLLBACK_ANNOTATION)
        .collect();
    assert_eq!(
        asked
            .iter()
            .map(|write| write.statefulset.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(asked.iter().all(|write| {
        write
            .value
            .as_deref()
            .is_some_and(|why| why.contains("failed 5 times: HTTP 503"))
    }));
}

#[test]
fn one_members_rollback_on_failure_asks_for_nothing_the_hook_halts() {
    // Given rollback-on-failure on one member only
    let group = group(vec![
        annotated(
            hooked(zone("a", 3, 0)),
            crate::gates::ROLLBACK_ON_FAILURE_ANNOTATION,
            "true",
        ),
        zone("b", 3, 0),
    ]);
    let last = fail_every_attempt(&group);
    // Then the failing hook halts, as without the key
    assert!(last.iter().any(|write| write.key == HALTED_ANNOTATION));
    assert!(
        !last
            .iter()
            .any(|write| write.key == crate::gates::rollback::ROLLBACK_ANNOTATION)
    );
}
