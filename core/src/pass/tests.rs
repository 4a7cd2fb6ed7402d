//! Scenarios of a whole pass: given a group and what the controller read, which effects, in
//! which order.

use super::*;
use crate::gates::hooks::HookPhase;
use crate::gates::rollback::ROLLBACK_ANNOTATION;
use crate::gates::{HALTED_ANNOTATION, HOOK_ANNOTATION, STATE_ANNOTATION};
use crate::testing::{annotated, group, now, zone};

const URL: &str = "http://hooks.example/zone";

/// The pass over `snapshot` with nothing read besides it.
fn pass_over(snapshot: &GroupSnapshot) -> Pass {
    pass_reading(
        snapshot,
        &CheckRead::NotRead,
        &HookRead::default(),
        &Rolling::new(),
    )
}

fn pass_reading(
    snapshot: &GroupSnapshot,
    check: &CheckRead,
    hook: &HookRead,
    rolling: &Rolling,
) -> Pass {
    let gates = Gates::read(snapshot);
    decide(&Read {
        snapshot,
        gates: &gates,
        check,
        hook,
        rolling,
        namespace: "ingest",
        now: now(),
    })
}

/// Each effect's name and what it is about, to compare orders at a glance.
fn outline(pass: &Pass) -> Vec<String> {
    pass.effects
        .iter()
        .map(|effect| match effect {
            Effect::StartRollback { carrier, .. } => format!("start rollback on {carrier}"),
            Effect::RestoreTemplates(records) => format!("restore {} templates", records.len()),
            Effect::RecordHookAnswer { key, .. } => format!("record hook answer {key}"),
            Effect::CallHook(call) => format!("call hook {:?} of {}", call.phase, call.statefulset),
            Effect::StartCheck(start) => format!("start check {}", start.name),
            Effect::Tell { explanation, .. } => format!("tell {}", explanation.reason),
            Effect::Store(writes) => format!("store {} writes", writes.len()),
            Effect::Noticed(notices) => format!("count {} notices", notices.len()),
            Effect::ConsultBudget { pod, .. } => format!("consult budget for {pod}"),
            Effect::Act { action, .. } => format!("act: {action}"),
        })
        .collect()
}

fn rolling_group() -> GroupSnapshot {
    group(vec![
        zone("a", 2).template_changed().build(),
        zone("b", 2).template_changed().build(),
    ])
}

#[test]
fn a_deletion_comes_after_its_budget_and_tells_what_it_did() {
    // Given a group whose first zone may roll
    let pass = pass_over(&rolling_group());
    // Then the pod goes only after its budget was consulted, and says so once done
    let outline = outline(&pass);
    let consult = outline
        .iter()
        .position(|line| line.starts_with("consult budget for a-"))
        .expect("a budget consulted");
    let act = outline
        .iter()
        .position(|line| line.starts_with("act: delete"))
        .expect("a deletion");
    assert!(consult < act, "{outline:?}");
    let Effect::Act { action, told } = &pass.effects[act] else {
        unreachable!("found above")
    };
    let told = told.as_ref().expect("a deletion is told");
    assert_eq!(told.explanation().severity, Severity::Normal);
    assert_eq!(told.explanation().note, told.note);
    // On the StatefulSet and the pod it deleted
    assert_eq!(action.statefulset(), "a");
    assert!(action.pod().is_some_and(|pod| pod.starts_with("a-")));
    assert_eq!(pass.actions().count(), 1);
}

#[test]
fn a_rollback_asked_for_is_the_whole_pass() {
    // Given every member asking for a rollback
    let asked = group(
        rolling_group()
            .statefulsets
            .into_iter()
            .map(|member| annotated(member, ROLLBACK_ANNOTATION, "errors are up")),
    );
    // Then the pass starts it and does nothing else
    let pass = pass_over(&asked);
    assert_eq!(
        pass.effects,
        vec![Effect::StartRollback {
            carrier: "a".to_owned(),
            why: "errors are up".to_owned(),
            refused: None,
        }]
    );
    assert!(pass.starts_with_rollback());
}

#[test]
fn a_halted_group_acts_on_nothing_reads_no_check_and_says_why() {
    // Given a group a person halted, which names a health check
    let halted = group(vec![
        annotated(
            annotated(
                zone("a", 2).template_changed().build(),
                HALTED_ANNOTATION,
                "bad canary",
            ),
            HEALTH_CHECK_ANNOTATION,
            "errors",
        ),
        annotated(
            zone("b", 2).template_changed().build(),
            HEALTH_CHECK_ANNOTATION,
            "errors",
        ),
    ]);
    // Then no check is read for it
    assert_eq!(Gates::read(&halted).check_to_read(), None);
    // And its pass deletes nothing and warns on the halted member
    let pass = pass_over(&halted);
    assert_eq!(pass.actions().count(), 0);
    let warned = pass.effects.iter().any(|effect| {
        matches!(effect, Effect::Tell { statefulset, explanation, .. }
            if statefulset == "a" && explanation.reason == "Halted"
                && explanation.severity == Severity::Warning)
    });
    assert!(warned, "{:?}", outline(&pass));
    assert_eq!(pass.waiting().map(|(kind, _)| kind), Some("Halted"));
}

#[test]
fn the_gates_state_is_stored_before_anything_is_acted_on() {
    // Given a group with a soak between zones, starting its first zone
    let soaked = group(
        rolling_group()
            .statefulsets
            .into_iter()
            .map(|member| annotated(member, crate::gates::SOAK_ANNOTATION, "10m")),
    );
    let pass = pass_over(&soaked);
    let outline = outline(&pass);
    // Then the zone's state is stored first, and the deletion follows it
    let store = outline
        .iter()
        .position(|line| line.starts_with("store"))
        .expect("the gate's state stored");
    let first_act = outline
        .iter()
        .position(|line| line.starts_with("consult") || line.starts_with("act"))
        .expect("the zone starts");
    assert!(store < first_act, "{outline:?}");
    let Effect::Store(writes) = &pass.effects[store] else {
        unreachable!("found above")
    };
    assert!(writes.iter().any(|write| write.key == STATE_ANNOTATION));
}

fn hooked_group() -> GroupSnapshot {
    group(
        rolling_group()
            .statefulsets
            .into_iter()
            .map(|member| annotated(member, HOOK_ANNOTATION, URL)),
    )
}

#[test]
fn a_hook_due_is_called_once_and_its_answer_recorded() {
    // Given a group whose first zone's before-hook is due
    let hooked = hooked_group();
    let pass = pass_over(&hooked);
    let calls: Vec<&HookCall> = pass
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::CallHook(call) => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "{:?}", outline(&pass));
    let call = calls[0].clone();
    assert_eq!(
        (call.statefulset.as_str(), call.phase),
        ("a", HookPhase::BeforeZone)
    );
    // And nothing goes before the hook answers
    assert_eq!(pass.actions().count(), 0);
    assert_eq!(pass.waiting().map(|(kind, _)| kind), Some("Hook"));
    // When the call is in flight, it is not called again
    let running = HookRead {
        running: Some(hooks::key(&call)),
        ..HookRead::default()
    };
    let pass = pass_reading(&hooked, &CheckRead::NotRead, &running, &Rolling::new());
    assert!(
        !outline(&pass)
            .iter()
            .any(|line| line.starts_with("call hook"))
    );
    // When it answered, the answer is recorded under its key
    let answered = HookRead {
        ended: Some((
            hooks::key(&call),
            HookAnswer {
                at: now(),
                answer: Ok(200),
            },
        )),
        ..HookRead::default()
    };
    let pass = pass_reading(&hooked, &CheckRead::NotRead, &answered, &Rolling::new());
    let recorded = pass.effects.iter().find_map(|effect| match effect {
        Effect::RecordHookAnswer { key, writes } => Some((key.clone(), writes.clone())),
        _ => None,
    });
    let (key, writes) = recorded.expect("the answer recorded");
    assert_eq!(key, hooks::key(&call));
    assert_eq!(writes, hooks::record(&hooked, &call, Ok(200), now()));
    // And an answer to another call is not
    let other = HookRead {
        ended: Some((
            "b/AfterZone/rev-0/x".to_owned(),
            HookAnswer {
                at: now(),
                answer: Ok(200),
            },
        )),
        ..HookRead::default()
    };
    let pass = pass_reading(&hooked, &CheckRead::NotRead, &other, &Rolling::new());
    assert!(!outline(&pass).iter().any(|line| line.starts_with("record")));
    assert!(
        outline(&pass)
            .iter()
            .any(|line| line.starts_with("call hook"))
    );
}

#[test]
fn a_hook_the_operator_refuses_is_never_called() {
    let refused = HookRead {
        refused: Some("not in gates.hook_addresses".to_owned()),
        ..HookRead::default()
    };
    let pass = pass_reading(
        &hooked_group(),
        &CheckRead::NotRead,
        &refused,
        &Rolling::new(),
    );
    assert!(
        !outline(&pass)
            .iter()
            .any(|line| line.starts_with("call hook"))
    );
    assert_eq!(pass.waiting().map(|(kind, _)| kind), Some("RefusedHook"));
}

fn checked_group() -> GroupSnapshot {
    group(
        rolling_group()
            .statefulsets
            .into_iter()
            .map(|member| annotated(member, HEALTH_CHECK_ANNOTATION, "errors")),
    )
}

fn spec() -> Spec {
    serde_json::from_value(serde_json::json!({
        "prometheus": {"address": "http://prometheus:9090"},
        "queries": [{"name": "errors", "query": "sum(rate(errors{statefulset=\"{{zone}}\"}[1m]))"}],
    }))
    .expect("a valid spec")
}

fn read_check(ended: Option<EndedRun>, running: bool) -> CheckRead {
    CheckRead::Read(Box::new(ReadCheck {
        spec: spec(),
        generation: 3,
        uid: "check-uid".to_owned(),
        author: Author::Check,
        ended,
        running,
    }))
}

/// The check run the pass starts, if it starts one.
fn started(pass: &Pass) -> Option<&CheckStart> {
    pass.effects.iter().find_map(|effect| match effect {
        Effect::StartCheck(start) => Some(start.as_ref()),
        _ => None,
    })
}

#[test]
fn a_due_check_starts_with_its_queries_rendered_for_the_zone() {
    let checked = checked_group();
    let pass = pass_reading(
        &checked,
        &read_check(None, false),
        &HookRead::default(),
        &Rolling::new(),
    );
    let start = started(&pass).expect("a run started");
    assert_eq!(start.key, run_key(3, &checked));
    assert_eq!(start.name, "errors");
    assert_eq!(start.queries.len(), 1);
    assert!(
        !start.queries[0].1.contains("$zone"),
        "{}",
        start.queries[0].1
    );
    // And no step goes before the check passes
    assert_eq!(pass.actions().count(), 0);
    // While a run is in flight, none starts
    let pass = pass_reading(
        &checked,
        &read_check(None, true),
        &HookRead::default(),
        &Rolling::new(),
    );
    assert!(
        !outline(&pass)
            .iter()
            .any(|line| line.starts_with("start check"))
    );
}

#[test]
fn a_check_that_cannot_be_used_holds_and_warns_on_the_member_naming_it() {
    let checked = checked_group();
    for read in [
        CheckRead::Unreadable("reading RolloutHealthCheck errors: 404".to_owned()),
        read_check(
            Some(EndedRun {
                run: CheckRun {
                    at: now(),
                    seen: None,
                    outcome: CheckOutcome::Inconclusive {
                        why: "refused".to_owned(),
                    },
                },
                problem: Some("spec.prometheus.address is not allowed".to_owned()),
            }),
            false,
        ),
    ] {
        let pass = pass_reading(&checked, &read, &HookRead::default(), &Rolling::new());
        assert_eq!(pass.actions().count(), 0, "{read:?}");
        let warned = pass.effects.iter().any(|effect| {
            matches!(effect, Effect::Tell { statefulset, explanation, .. }
                if statefulset == "a" && explanation.reason == "UnusableHealthCheck")
        });
        assert!(warned, "{read:?}: {:?}", outline(&pass));
    }
}

#[test]
fn a_warn_checks_failure_is_told_and_counted_before_the_store_that_may_end_the_pass() {
    // Given a group whose check only warns, and a run of it that failed
    let checked = checked_group();
    let mut spec = spec();
    spec.on_failure = Some("Warn".to_owned());
    let read = CheckRead::Read(Box::new(ReadCheck {
        spec,
        generation: 3,
        uid: "check-uid".to_owned(),
        author: Author::Check,
        ended: Some(EndedRun {
            run: CheckRun {
                at: now(),
                seen: None,
                outcome: CheckOutcome::Fail {
                    query: "errors".to_owned(),
                    value: "0.5 (must be < 0.1)".to_owned(),
                },
            },
            problem: None,
        }),
        running: false,
    }));
    let pass = pass_reading(&checked, &read, &HookRead::default(), &Rolling::new());
    // Then the failure is told, counted, and its state stored, in that order: a stale store
    // ends the pass and spends the run, so the count cannot wait for it
    let outline = outline(&pass);
    let at = |prefix: &str| {
        outline
            .iter()
            .position(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {outline:?}"))
    };
    let (told, counted, stored) = (
        at("tell HealthCheckWarning"),
        at("count 1 notices"),
        at("store "),
    );
    assert!(told < counted && counted < stored, "{outline:?}");
    // and it holds no step: the zone still rolls
    assert!(pass.actions().count() >= 1, "{outline:?}");
}

#[test]
fn a_zone_seen_rolling_is_told_complete_with_its_history() {
    // Given zone a seen rolling to rev-2, now done
    let done = group(vec![
        zone("a", 2).at_revision("rev-2").build(),
        zone("b", 2).build(),
    ]);
    let rolling = Rolling::from([("a".to_owned(), "rev-2".to_owned())]);
    let pass = pass_reading(&done, &CheckRead::NotRead, &HookRead::default(), &rolling);
    // Then it is told, into the history, and forgotten
    let told = pass.effects.iter().any(|effect| {
        matches!(effect, Effect::Tell { statefulset, explanation, history: true }
            if statefulset == "a" && explanation.reason == "RolloutComplete")
    });
    assert!(told, "{:?}", outline(&pass));
    assert!(pass.rolling.is_empty());
}

#[test]
fn only_writes_and_claims_need_the_leaders_term() {
    let tell = Effect::Tell {
        statefulset: "a".to_owned(),
        explanation: Explanation::of_warning(&GateWarning::UnusableHealthCheck {
            statefulset: "a".to_owned(),
            why: "x".to_owned(),
        }),
        history: false,
    };
    assert!(!tell.needs_term());
    assert!(Effect::Store(Vec::new()).needs_term());
    assert!(
        Effect::ConsultBudget {
            statefulset: "a".to_owned(),
            pod: "a-0".to_owned(),
            free_replacement: false,
        }
        .needs_term()
    );
}

fn job_check(initial_delay: &str) -> CheckRead {
    let spec = serde_json::from_value(serde_json::json!({
        "job": {"template": {"spec": {"template": {"spec": {
            "containers": [{"name": "smoke", "image": "smoke:1"}]}}}}},
        "initialDelay": initial_delay,
    }))
    .expect("a valid spec");
    CheckRead::Read(Box::new(ReadCheck {
        spec,
        generation: 3,
        uid: "check-uid".to_owned(),
        author: Author::Check,
        ended: None,
        running: false,
    }))
}

/// `group` with its check state: `passes` counted, the last run an hour ago, the last step at
/// `last_step`.
fn with_check_state(group: &GroupSnapshot, passes: u32, last_step: Timestamp) -> GroupSnapshot {
    let state = CheckState {
        passes,
        last_run: Some((now() - jiff::SignedDuration::from_hours(1)).to_string()),
        last_step: Some(last_step.to_string()),
        revisions: checks::revisions(group),
        ..CheckState::default()
    };
    let value = serde_json::to_string(&state).unwrap();
    crate::testing::group(
        group
            .statefulsets
            .iter()
            .cloned()
            .map(|member| annotated(member, crate::gates::CHECK_STATE_ANNOTATION, &value)),
    )
}

#[test]
fn a_job_checks_run_carries_the_job_of_the_step_created_after_its_initial_delay() {
    // Given a Job check whose last step was a minute ago, its initialDelay 5m
    let last_step = now() - jiff::SignedDuration::from_mins(1);
    let checked = with_check_state(&checked_group(), 0, last_step);
    let pass = pass_reading(
        &checked,
        &job_check("5m"),
        &HookRead::default(),
        &Rolling::new(),
    );
    // When the run due starts
    let start = started(&pass).expect("a run started");
    // Then it carries the Job of that step, owned by the check, created 5m after the step
    let (run, uid) = start
        .job
        .as_ref()
        .expect("a Job check's run carries its Job");
    assert_eq!(uid, "check-uid");
    assert!(start.queries.is_empty());
    let annotations = run.job.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        annotations[job_check::STEP_ANNOTATION],
        last_step.to_string()
    );
    assert_eq!(
        run.create_from,
        Some(last_step + jiff::SignedDuration::from_mins(5))
    );
    assert_eq!(run.deadline, jiff::SignedDuration::from_mins(10));
    let owner = &run.job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, "check-uid");
}

#[test]
fn a_pass_that_makes_a_step_starts_no_job_for_it() {
    // Given a Job check that has passed for the step to come, and a run due
    let checked = with_check_state(
        &checked_group(),
        1,
        now() - jiff::SignedDuration::from_hours(2),
    );
    let pass = pass_reading(
        &checked,
        &job_check("0s"),
        &HookRead::default(),
        &Rolling::new(),
    );
    // When the pass makes the step, no run starts in it: the Job for the step after it is made
    // by the next pass, about the zone after the deletions
    assert!(pass.actions().count() > 0, "{:?}", outline(&pass));
    assert!(
        !outline(&pass)
            .iter()
            .any(|line| line.starts_with("start check")),
        "{:?}",
        outline(&pass)
    );
}
