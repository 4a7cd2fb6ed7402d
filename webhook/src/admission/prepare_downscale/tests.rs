//! Decoding a review into what prepare-downscale judges; the decisions' own tests are next to
//! them in `baton_core::admission::prepare`.

use serde_json::{Value, json};

use super::*;
use baton_core::annotations::{
    PREPARE_DOWNSCALE_LABEL, PREPARE_DOWNSCALE_PATH_ANNOTATION, PREPARE_DOWNSCALE_PORT_ANNOTATION,
};

#[test]
fn prepare_request_of_lets_through_what_needs_no_preparation() {
    let sts = |replicas: Value| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "ingester-zone-a", "labels": {PREPARE_DOWNSCALE_LABEL: "true"},
                            "annotations": {PREPARE_DOWNSCALE_PORT_ANNOTATION: "8080",
                                            PREPARE_DOWNSCALE_PATH_ANNOTATION: "p"}},
               "spec": {"replicas": replicas, "serviceName": "ingester"}})
    };
    let unlabelled = |replicas: Value| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ingester-zone-a"},
               "spec": {"replicas": replicas, "serviceName": "ingester"}})
    };
    let scale = |replicas: i32| json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": replicas}});
    let deployment = |replicas: i32| json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": replicas}});
    let request = |resource: &str, old: Value, new: Value, dry_run: bool| {
        json!({"uid": "u", "name": "ingester-zone-a", "namespace": "mimir", "operation": "UPDATE",
               "resource": {"group": "apps", "version": "v1", "resource": resource},
               "object": new, "oldObject": old, "dryRun": dry_run})
        .to_string()
    };
    enum Expect {
        Allowed,
        Warned,
        Inline,
        Fetch,
        Unsupported,
    }
    let cases = [
        (
            request("statefulsets", sts(json!(5)), sts(json!(3)), true),
            Expect::Allowed,
        ),
        // Not opted in: no side effect, so the review's own copy is enough to allow it.
        (
            request(
                "statefulsets",
                unlabelled(json!(5)),
                unlabelled(json!(3)),
                false,
            ),
            Expect::Allowed,
        ),
        (
            request("statefulsets", sts(json!(3)), sts(json!(5)), false),
            Expect::Allowed,
        ),
        (
            request("statefulsets", sts(json!(3)), sts(json!(3)), false),
            Expect::Allowed,
        ),
        (
            request("statefulsets", sts(json!(null)), sts(json!(3)), false),
            Expect::Allowed,
        ),
        (
            request("statefulsets", sts(json!(5)), sts(json!(3)), false),
            Expect::Inline,
        ),
        (
            request("statefulsets", scale(5), scale(3), false),
            Expect::Fetch,
        ),
        (
            request("statefulsets", scale(5), scale(3), true),
            Expect::Allowed,
        ),
        (
            request("deployments", scale(5), scale(3), false),
            Expect::Unsupported,
        ),
        (
            request("deployments", deployment(5), deployment(3), false),
            Expect::Unsupported,
        ),
        (
            request(
                "statefulsets",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"replicas": 5, "serviceName": 7}}),
                sts(json!(3)),
                false,
            ),
            Expect::Warned,
        ),
    ];
    for (json, expected) in cases {
        let request: AdmissionRequest<'_> = serde_json::from_str(&json).unwrap();
        let result = prepare_request_of(&request);
        match (result, expected) {
            (Err(verdict), Expect::Allowed) => {
                assert!(verdict.is_allowed(), "{json}");
            }
            (Err(verdict), Expect::Warned) => {
                assert!(matches!(verdict, Verdict::Unjudged(_)), "{json}");
            }
            // Not StatefulSets: no error, nothing to prepare
            (Err(Verdict::Allow(allowed)), Expect::Unsupported) => {
                assert_eq!(allowed.warnings.len(), 1, "{json}");
            }
            (Ok(prepare), Expect::Inline | Expect::Fetch) => {
                assert_eq!(
                    prepare.downscale.to_string(),
                    "downscale of statefulsets/ingester-zone-a in mimir from 5 to 3 replicas"
                );
                assert_eq!(prepare.uid, "u");
            }
            (other, _) => panic!("{json}: unexpected {other:?}"),
        }
    }
}
