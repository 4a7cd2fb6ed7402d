//! Bad input, generated: arbitrary bytes, mutated real reviews and structurally plausible
//! reviews with arbitrary values go through the decoder, both decisions and the HTTP handlers.
//! Nothing may panic; every failure is an HTTP 400 with a message or a denial with a message.

mod common;

use actix_web::http::StatusCode;
use actix_web::{App, test as actix_test};
use baton_config::Config;
use baton_core::admission::Verdict;
use baton_webhook::admission::review::{self, Review};
use baton_webhook::admission::{Decision, no_downscale, prepare_downscale};
use baton_webhook::server::{NO_DOWNSCALE_PATH, PREPARE_DOWNSCALE_PATH, routes};
use common::{labelled_downscale, review, scale, state, workload};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::{Value, json};

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    })
}

/// Arbitrary JSON, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<String>().prop_map(Value::String),
        prop_oneof![
            Just("true"),
            Just("apps/v1"),
            Just("StatefulSet"),
            Just("Scale"),
            Just("autoscaling/v1")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Replicas as the API server might send them, and as it never would.
fn replicas() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-2i64..8).prop_map(|n| json!(n)),
        Just(json!(i64::from(i32::MAX) + 1)),
        Just(Value::Null),
        any_json(),
    ]
}

fn labels() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"grafana.com/no-downscale": "true"})),
        Just(json!({"grafana.com/prepare-downscale": "true", "rollout-group": "ingester"})),
        Just(json!({})),
        Just(Value::Null),
        any_json(),
    ]
}

fn kind() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("StatefulSet"),
        Just("Deployment"),
        Just("ReplicaSet"),
        Just("Scale"),
        Just("Pod")
    ]
}

fn object() -> impl Strategy<Value = Value> {
    prop_oneof![
        (kind(), replicas(), labels()).prop_map(|(kind, replicas, labels)| {
            if kind == "Scale" {
                json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": replicas}})
            } else {
                workload(kind, replicas, labels)
            }
        }),
        any_json(),
    ]
}

/// Reviews that look right with values that may be anything.
fn plausible_review() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just("admission.k8s.io/v1"),
            Just("admission.k8s.io/v1beta1")
        ],
        prop_oneof![
            Just("statefulsets"),
            Just("deployments"),
            Just("replicasets"),
            Just("pods")
        ],
        prop_oneof![Just(None), Just(Some("scale")), Just(Some("status"))],
        object(),
        object(),
        any::<bool>(),
        prop_oneof![Just("UPDATE"), Just("CREATE"), Just("DELETE")],
        prop::option::of(any_json()),
    )
        .prop_map(
            |(version, resource, sub_resource, old, new, dry_run, operation, junk)| {
                let mut review = review(version, resource, sub_resource, old, new, dry_run);
                review["request"]["operation"] = json!(operation);
                if let Some(junk) = junk {
                    review["request"]["name"] = junk;
                }
                review
            },
        )
}

/// A denial or a warning-less refusal must say why, under either allow-on-error policy; an
/// allowed answer may say nothing.
fn check_decision(verdict: &Verdict) -> Result<(), TestCaseError> {
    for allow_on_error in [false, true] {
        let decision = Decision::of(verdict.clone(), allow_on_error);
        if !decision.allowed {
            prop_assert!(
                decision
                    .message
                    .as_deref()
                    .is_some_and(|message| !message.is_empty())
            );
        }
    }
    Ok(())
}

fn judge_everything(review: &Review<'_>) -> Result<(), TestCaseError> {
    match no_downscale::assess(&review.request) {
        no_downscale::Assessment::Decided(decision) => check_decision(&decision)?,
        no_downscale::Assessment::NeedsParentLabels { downscale, .. } => {
            prop_assert!(downscale.from > downscale.to);
            check_decision(&no_downscale::judge(&downscale, Some("true")))?;
            check_decision(&no_downscale::judge(&downscale, None))?;
        }
    }
    if let Err(decision) = prepare_downscale::prepare_request_of(&review.request) {
        check_decision(&decision)?;
    }
    Ok(())
}

#[test]
fn arbitrary_bytes_never_panic_the_decoder() {
    runner(4000)
        .run(&prop::collection::vec(any::<u8>(), 0..512), |bytes| {
            match review::decode(&bytes) {
                Ok(review) => judge_everything(&review)?,
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn mutated_real_reviews_decode_or_are_rejected_with_a_reason() {
    let original = serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap();
    let length = original.len();
    let mutation = prop::collection::vec((0..length, any::<u8>(), 0u8..3), 1..8);
    runner(3000)
        .run(&mutation, |edits| {
            let mut bytes = original.clone();
            for (at, byte, how) in edits {
                let at = at.min(bytes.len().saturating_sub(1));
                match how {
                    0 if !bytes.is_empty() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ if !bytes.is_empty() => {
                        bytes.remove(at);
                    }
                    _ => {}
                }
            }
            match review::decode(&bytes) {
                Ok(review) => judge_everything(&review)?,
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn plausible_reviews_get_a_decision_with_a_reason() {
    runner(3000)
        .run(&plausible_review(), |review| {
            let bytes = serde_json::to_vec(&review).unwrap();
            match review::decode(&bytes) {
                Ok(decoded) => judge_everything(&decoded)?,
                Err(error) => prop_assert!(
                    error.to_string().contains("not an AdmissionReview"),
                    "{error}"
                ),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_handlers_answer_200_or_400_to_anything() {
    let system = actix_web::rt::System::new();
    let mut config = Config::default();
    config.webhook.request_timeout = baton_config::Duration::from_secs(2);
    let app = system.block_on(async {
        let (state, _) = state(&config);
        actix_test::init_service(App::new().configure(routes(state))).await
    });
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        plausible_review().prop_map(|review| serde_json::to_vec(&review).unwrap()),
        Just(
            serde_json::to_vec(&review(
                "admission.k8s.io/v1",
                "statefulsets",
                Some("scale"),
                scale(5),
                scale(3),
                true
            ))
            .unwrap()
        ),
    ];
    let input = (
        body,
        prop_oneof![Just(NO_DOWNSCALE_PATH), Just(PREPARE_DOWNSCALE_PATH)],
    );
    runner(1500)
        .run(&input, |(body, path)| {
            let (status, text) = system.block_on(async {
                let request = actix_test::TestRequest::post()
                    .uri(path)
                    .insert_header(("content-type", "application/json"))
                    .set_payload(body)
                    .to_request();
                let response = actix_test::call_service(&app, request).await;
                let status = response.status();
                (status, actix_test::read_body(response).await)
            });
            match status {
                StatusCode::OK => {
                    let answer: Value = serde_json::from_slice(&text)
                        .map_err(|error| TestCaseError::fail(error.to_string()))?;
                    let allowed = answer["response"]["allowed"].as_bool();
                    prop_assert!(allowed.is_some(), "{answer}");
                    if allowed == Some(false) {
                        prop_assert!(
                            answer["response"]["status"]["message"]
                                .as_str()
                                .is_some_and(|m| !m.is_empty())
                        );
                    }
                }
                StatusCode::BAD_REQUEST => prop_assert!(text.len() > 1, "a 400 says why"),
                other => prop_assert!(false, "unexpected status {other}"),
            }
            Ok(())
        })
        .unwrap();
}
