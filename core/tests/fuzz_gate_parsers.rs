//! The controller's parsers of what namespace users and remote endpoints write, fed generated
//! input: every gate annotation (`baton.dev/soak`, `ramp`, `batches`, `approval`, `approved`,
//! `bypass-gates-until`, `rollback`, `hook`, `health-check`, `halted` and the stored
//! `gate-state`, `check-state`, `hook-state`), Prometheus' answers, and a web check's JSONPaths
//! and answers. Inputs
//! are arbitrary strings and mutations of the corpus in `tests/corpus/`. Nothing may panic, and
//! a gate, whatever it reads, only ever takes deletions away from the planner's plan.
//!
//! `FUZZ_CASES=N` runs N cases per target instead of the default (figures of a long run are in
//! docs/security.md).

use std::collections::BTreeMap;

use baton_core::gates::answers::samples;
use baton_core::gates::checks::CheckOutcome;
use baton_core::gates::health_check::evaluate_without_queries;
use baton_core::gates::rollback::ROLLBACK_ANNOTATION;
use baton_core::gates::web_check::{WebAnswer, WebQuery, judge};
use baton_core::gates::{
    APPROVAL_ANNOTATION, APPROVED_ANNOTATION, BATCHES_ANNOTATION, BYPASS_ANNOTATION,
    CHECK_STATE_ANNOTATION, HALTED_ANNOTATION, HEALTH_CHECK_ANNOTATION, HOOK_ANNOTATION,
    HOOK_STATE_ANNOTATION, RAMP_ANNOTATION, SOAK_ANNOTATION, STATE_ANNOTATION,
};
use baton_core::rollout::{
    Action, GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy, plan,
};
use jiff::Timestamp;
use proptest::prelude::*;

#[path = "support/fuzz.rs"]
mod fuzz;
use fuzz::{corpus, runner, value_from};

const GATE_VALUES: &str = include_str!("corpus/gate-values.txt");
const PROMETHEUS_ANSWERS: &str = include_str!("corpus/prometheus-answers.txt");
const WEB_ANSWERS: &str = include_str!("corpus/web-answers.txt");
const JSON_PATHS: &str = include_str!("corpus/json-paths.txt");

const KEYS: [&str; 13] = [
    SOAK_ANNOTATION,
    BATCHES_ANNOTATION,
    APPROVAL_ANNOTATION,
    APPROVED_ANNOTATION,
    BYPASS_ANNOTATION,
    ROLLBACK_ANNOTATION,
    RAMP_ANNOTATION,
    HOOK_ANNOTATION,
    HEALTH_CHECK_ANNOTATION,
    HALTED_ANNOTATION,
    STATE_ANNOTATION,
    CHECK_STATE_ANNOTATION,
    HOOK_STATE_ANNOTATION,
];

/// Three ready zones of two pods whose template changed, carrying `annotations` (zone index,
/// key, value).
fn group(annotations: &[(usize, &str, String)]) -> GroupSnapshot {
    let statefulsets = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(index, zone)| {
            let name = format!("ingester-zone-{zone}");
            let pods = (0..2)
                .map(|ordinal| PodSnapshot {
                    name: format!("{name}-{ordinal}"),
                    uid: format!("{name}-{ordinal}"),
                    revision: Some(format!("{name}-old")),
                    phase: PodPhase::Running,
                    ready: true,
                    ready_since: Some(Timestamp::UNIX_EPOCH),
                    terminating: false,
                    container_state: None,
                    created_at: None,
                })
                .collect();
            StatefulSetSnapshot {
                unreachable: None,
                uid: format!("uid-{name}"),
                spec_replicas: 2,
                ordinals_start: 0,
                min_ready_seconds: 0,
                status_replicas: 2,
                ready_replicas: 2,
                current_revision: Some(format!("{name}-old")),
                update_revision: Some(format!("{name}-new")),
                status_lag: None,
                update_strategy: UpdateStrategy::OnDelete,
                partition: 0,
                ordered_ready: true,
                annotations: annotations
                    .iter()
                    .filter(|(at, _, _)| *at == index)
                    .map(|(_, key, value)| ((*key).to_owned(), value.clone()))
                    .collect::<BTreeMap<_, _>>(),
                pods,
                name,
            }
        })
        .collect();
    GroupSnapshot {
        name: "ingester".to_owned(),
        statefulsets,
        reach: Default::default(),
    }
}

fn deleted(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::DeletePod { pod, .. } => Some(pod.clone()),
            Action::SetCurrentRevision { .. } | Action::SetPartition { .. } => None,
        })
        .collect()
}

#[test]
fn gate_annotations_never_panic_and_never_add_a_deletion() {
    let annotation = (
        0usize..3,
        prop::sample::select(KEYS.to_vec()),
        value_from(corpus(GATE_VALUES)),
    );
    let strategy = prop::collection::vec(annotation, 0..8);
    runner(2_000)
        .run(&strategy, |annotations| {
            let group = group(&annotations);
            let now = Timestamp::from_second(1_800_000_000).expect("a time");
            let planned = deleted(&plan(&group, now).actions);
            let (gated, _) = evaluate_without_queries(&group, now);
            for pod in deleted(&gated.actions) {
                prop_assert!(planned.contains(&pod), "{pod} was not planned");
            }
            Ok(())
        })
        .expect("no gate annotation panics or adds a deletion");
}

#[test]
fn prometheus_answers_never_panic_and_never_invent_samples() {
    let body = prop_oneof![
        4 => value_from(corpus(PROMETHEUS_ANSWERS)).prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ];
    let strategy = (prop::sample::select(vec![200u16, 400, 422, 502, 503]), body);
    runner(5_000)
        .run(&strategy, |(status, body)| {
            if let Ok(values) = samples(status, &body) {
                // One value per sample written: never more than the answer's `value` pairs.
                let written = String::from_utf8_lossy(&body).matches("value").count();
                prop_assert!(values.len() <= written.max(1), "{values:?}");
            }
            Ok(())
        })
        .expect("no Prometheus answer panics");
}

#[test]
fn web_answers_and_json_paths_never_panic_and_pass_only_2xx_json() {
    let body = prop_oneof![
        4 => value_from(corpus(WEB_ANSWERS)).prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ];
    let strategy = (
        prop::sample::select(vec![200u16, 204, 302, 404, 500]),
        body,
        value_from(corpus(JSON_PATHS)),
    );
    runner(5_000)
        .run(&strategy, |(status, body, path)| {
            let query: WebQuery = serde_json::from_value(serde_json::json!({
                "url": "https://app.example/stats",
                "jsonPath": path,
                "threshold": {"operator": "<", "value": 0.1},
            }))
            .expect("a web query");
            // A path that does not parse is the check's problem, never a panic.
            let problem = query.problem();
            let outcome = judge(
                "fuzzed",
                &query,
                Ok(WebAnswer {
                    status,
                    body: body.clone(),
                }),
            );
            if outcome == CheckOutcome::Pass {
                prop_assert!(problem.is_none(), "{problem:?}");
                prop_assert!((200..300).contains(&status), "passed HTTP {status}");
                prop_assert!(
                    serde_json::from_slice::<serde_json::Value>(&body).is_ok(),
                    "passed an answer that is not JSON"
                );
            }
            Ok(())
        })
        .expect("no web answer or JSONPath panics");
}
