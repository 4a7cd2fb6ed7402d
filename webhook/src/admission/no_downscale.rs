//! no-downscale (validating): a StatefulSet, Deployment or ReplicaSet labelled
//! `grafana.com/no-downscale=true` may not lose replicas, through its spec or its `/scale`.
//!
//! The rule is `baton_core::admission::downscale`; here the review is decoded into a
//! downscale, and for `/scale` the caller looks up the parent's labels (cache, else API) and
//! hands them to [`judge`].

use baton_core::admission::Verdict;
pub use baton_core::admission::downscale::{
    NO_DOWNSCALE_VALUE, no_downscale as judge, parent_unavailable,
};
use baton_core::admission::downscale::{NoDownscale, assess_no_downscale};
use baton_core::annotations::NO_DOWNSCALE_LABEL;

use super::object::{Downscale, ParentKind, downscale_of};
use super::review::AdmissionRequest;

/// What [`assess`] concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    Decided(Verdict),
    /// A downscale through `/scale`: the parent's labels decide ([`judge`]).
    NeedsParentLabels {
        downscale: Downscale,
        parent: ParentKind,
    },
}

/// Judges a review as far as it can without looking anything up.
pub fn assess(request: &AdmissionRequest<'_>) -> Assessment {
    let (downscale, old) = match downscale_of(request) {
        Ok(found) => found,
        Err(verdict) => return Assessment::Decided(verdict),
    };
    match assess_no_downscale(&downscale, old.kind, old.label(NO_DOWNSCALE_LABEL)) {
        NoDownscale::Decided(verdict) => Assessment::Decided(verdict),
        NoDownscale::NeedsParentLabel(parent) => {
            Assessment::NeedsParentLabels { downscale, parent }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::admission::decision::{Decision, Outcome};

    const DENIED: &str = "downscale of statefulsets/ingester-zone-a in mimir from 5 to 3 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'";

    fn request(resource: &str, sub_resource: Option<&str>, old: Value, new: Value) -> String {
        json!({
            "uid": "u", "name": "ingester-zone-a", "namespace": "mimir", "operation": "UPDATE",
            "resource": {"group": "apps", "version": "v1", "resource": resource},
            "subResource": sub_resource, "object": new, "oldObject": old, "dryRun": false
        })
        .to_string()
    }

    fn workload(kind: &str, replicas: Value, label: Option<&str>) -> Value {
        let labels = label.map(|value| json!({ NO_DOWNSCALE_LABEL: value, "other": "x" }));
        json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "ingester-zone-a", "labels": labels},
               "spec": {"replicas": replicas}})
    }

    fn scale(replicas: i32) -> Value {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "ingester-zone-a"},
               "spec": {"replicas": replicas}})
    }

    fn assess_json(json: &str) -> Assessment {
        let request: AdmissionRequest<'_> = serde_json::from_str(json).unwrap();
        assess(&request)
    }

    #[test]
    fn labelled_workloads_cannot_lose_replicas() {
        struct Case {
            kind: &'static str,
            resource: &'static str,
            label: Option<&'static str>,
            old: Value,
            new: Value,
            denied: bool,
        }
        let mut cases = Vec::new();
        for (kind, resource) in [
            ("StatefulSet", "statefulsets"),
            ("Deployment", "deployments"),
            ("ReplicaSet", "replicasets"),
        ] {
            for (label, old, new, denied) in [
                (Some("true"), json!(5), json!(3), true),
                (Some("true"), json!(1), json!(0), true),
                (Some("true"), json!(3), json!(5), false),
                (Some("true"), json!(3), json!(3), false),
                (Some("true"), json!(null), json!(3), false),
                (Some("true"), json!(3), json!(null), false),
                (Some("false"), json!(5), json!(3), false),
                (Some("TRUE"), json!(5), json!(3), false),
                (Some(""), json!(5), json!(3), false),
                (None, json!(5), json!(3), false),
            ] {
                cases.push(Case {
                    kind,
                    resource,
                    label,
                    old,
                    new,
                    denied,
                });
            }
        }
        for case in cases {
            let json = request(
                case.resource,
                None,
                workload(case.kind, case.old.clone(), case.label),
                workload(case.kind, case.new.clone(), case.label),
            );
            let Assessment::Decided(verdict) = assess_json(&json) else {
                panic!("{} is judged from the request alone", case.kind)
            };
            let decision = Decision::of(verdict, false);
            assert_eq!(
                !decision.allowed, case.denied,
                "{} {:?} {} -> {}: {decision}",
                case.kind, case.label, case.old, case.new
            );
            if case.denied {
                let expected = format!(
                    "downscale of {}/ingester-zone-a in mimir from {} to {} replicas is not allowed because it has the label 'grafana.com/no-downscale=true'",
                    case.resource, case.old, case.new
                );
                assert_eq!(decision.message.as_deref(), Some(expected.as_str()));
                assert_eq!(decision.outcome, Outcome::Denied);
            }
        }
    }

    #[test]
    fn the_old_objects_label_decides() {
        // Removing the label in the same update does not let a downscale through.
        let json = request(
            "statefulsets",
            None,
            workload("StatefulSet", json!(5), Some("true")),
            workload("StatefulSet", json!(3), None),
        );
        assert_eq!(
            assess_json(&json),
            Assessment::Decided(Verdict::refuse(
                baton_core::admission::Reason::NoDownscaleLabel,
                DENIED
            ))
        );
    }

    #[test]
    fn scale_downscales_need_the_parents_labels() {
        for (resource, parent) in [
            ("statefulsets", ParentKind::StatefulSet),
            ("deployments", ParentKind::Deployment),
            ("replicasets", ParentKind::ReplicaSet),
        ] {
            let json = request(resource, Some("scale"), scale(5), scale(3));
            let Assessment::NeedsParentLabels {
                downscale,
                parent: got,
            } = assess_json(&json)
            else {
                panic!("{resource}/scale needs a lookup")
            };
            assert_eq!(got, parent);
            assert_eq!((downscale.from, downscale.to), (5, 3));
            assert_eq!(downscale.resource, resource);
            let denied = judge(&downscale, Some("true"));
            assert!(!denied.is_allowed());
            assert!(denied.message().unwrap().starts_with(&format!(
                "downscale of {resource}/ingester-zone-a in mimir from 5 to 3"
            )));
            assert_eq!(judge(&downscale, None), Verdict::allow());
            assert_eq!(judge(&downscale, Some("false")), Verdict::allow());
        }
        // Upscales and unchanged scales need no lookup.
        for (old, new) in [(3, 5), (3, 3)] {
            let json = request("statefulsets", Some("scale"), scale(old), scale(new));
            assert_eq!(assess_json(&json), Assessment::Decided(Verdict::allow()));
        }
    }

    #[test]
    fn scales_of_other_resources_are_allowed_with_a_warning() {
        let json = request("widgets", Some("scale"), scale(5), scale(3));
        let Assessment::Decided(verdict) = assess_json(&json) else {
            panic!("decided")
        };
        let decision = Decision::of(verdict, false);
        // Not an error (refused under webhook.allow_on_error: false): allowed, with a warning.
        assert!(decision.allowed);
        assert_eq!(decision.outcome, Outcome::Allowed);
        assert_eq!(
            decision.warnings,
            vec!["unsupported resource widgets, allowing the change".to_owned()]
        );
    }

    #[test]
    fn dry_runs_are_judged_like_real_requests() {
        let mut request: Value = serde_json::from_str(&request(
            "statefulsets",
            None,
            workload("StatefulSet", json!(5), Some("true")),
            workload("StatefulSet", json!(3), Some("true")),
        ))
        .unwrap();
        request["dryRun"] = json!(true);
        assert_eq!(
            assess_json(&request.to_string()),
            Assessment::Decided(Verdict::refuse(
                baton_core::admission::Reason::NoDownscaleLabel,
                DENIED
            ))
        );
    }

    #[test]
    fn the_shipped_match_conditions_name_the_labels_the_webhooks_read() {
        // The API server sends only what deploy/'s matchConditions let through: a label named
        // wrongly there would let every labelled downscale through unjudged.
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/webhooks.yaml");
        let shipped = std::fs::read_to_string(&path).expect("deploy/base/webhooks.yaml");
        use crate::admission::prepare_downscale::PREPARE_DOWNSCALE_VALUE;
        use baton_core::annotations::PREPARE_DOWNSCALE_LABEL;
        for (condition, label, value) in [
            (
                "scale-or-labelled-no-downscale",
                NO_DOWNSCALE_LABEL,
                NO_DOWNSCALE_VALUE,
            ),
            (
                "scale-or-labelled-prepare-downscale",
                PREPARE_DOWNSCALE_LABEL,
                PREPARE_DOWNSCALE_VALUE,
            ),
        ] {
            let start = shipped
                .find(&format!("name: {condition}"))
                .unwrap_or_else(|| panic!("the match condition {condition}"));
            let expression = &shipped[start..start + shipped[start..].find("rules:").unwrap()];
            let value = format!("oldObject.metadata.labels['{label}'] == '{value}'");
            assert!(expression.contains(&value), "{value} missing: {expression}");
        }
    }

    #[test]
    fn lookup_failures_allow_with_a_warning_naming_the_object() {
        let downscale = Downscale {
            resource: "statefulsets".into(),
            name: "web".into(),
            namespace: "ns".into(),
            from: 2,
            to: 1,
        };
        let decision = Decision::of(parent_unavailable(&downscale, &"timed out"), true);
        assert!(decision.allowed);
        assert_eq!(
            decision.warnings,
            vec![
                "can't get statefulsets/web in namespace ns, allowing the change: timed out"
                    .to_owned()
            ]
        );
    }
}
