//! The few fields of a workload object (StatefulSet, Deployment, ReplicaSet) or of its `Scale`
//! that the webhooks read, decoded straight from the review's raw JSON without building the
//! whole typed object: this is the hot path of no-downscale.

use std::borrow::Cow;
use std::collections::HashMap;

use baton_core::admission::Verdict;
pub use baton_core::admission::downscale::{Downscale, ParentKind, StoredAs, WorkloadKind};
use baton_core::admission::downscale::{replicas_change, undecodable};
use serde::Deserialize;

use super::review::AdmissionRequest;
use crate::error::Error;

/// A workload object as far as the webhooks care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload<'a> {
    pub kind: WorkloadKind,
    /// `spec.replicas`; `None` when absent or null (a `Scale` always has a number, 0 if absent).
    pub replicas: Option<i32>,
    pub labels: HashMap<Cow<'a, str>, Cow<'a, str>>,
    /// Which stored object this copy says it is (a Scale carries its parent's).
    pub stored_as: StoredAs,
}

impl Workload<'_> {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(|value| value.as_ref())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawWorkload<'a> {
    #[serde(default, borrow)]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    metadata: Option<RawMetadata<'a>>,
    #[serde(default)]
    spec: Option<RawSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMetadata<'a> {
    #[serde(default, borrow)]
    labels: Option<HashMap<Cow<'a, str>, Cow<'a, str>>>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
}

#[derive(Deserialize)]
struct RawSpec {
    #[serde(default)]
    replicas: Option<i32>,
}

/// Decodes the fields of a StatefulSet, Deployment, ReplicaSet or Scale, in any of the API
/// groups the API server may send them in (`apps`, `extensions`, `autoscaling`).
pub fn decode_workload(json: &str) -> Result<Workload<'_>, Error> {
    let raw: RawWorkload<'_> =
        serde_json::from_str(json).map_err(|error| Error::MalformedObject(error.to_string()))?;
    let api_version = raw.api_version.as_deref().unwrap_or("");
    let kind_name = raw.kind.as_deref().unwrap_or("");
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    let kind = match (group, kind_name) {
        ("apps" | "extensions", "StatefulSet") => WorkloadKind::StatefulSet,
        ("apps" | "extensions", "Deployment") => WorkloadKind::Deployment,
        ("apps" | "extensions", "ReplicaSet") => WorkloadKind::ReplicaSet,
        ("autoscaling" | "apps" | "extensions", "Scale") => WorkloadKind::Scale,
        _ => {
            return Err(Error::UnsupportedObject {
                api_version: api_version.to_owned(),
                kind: kind_name.to_owned(),
            });
        }
    };
    let replicas = raw.spec.and_then(|spec| spec.replicas);
    let (labels, stored_as) = raw
        .metadata
        .map(|metadata| {
            (
                metadata.labels.unwrap_or_default(),
                StoredAs {
                    uid: metadata.uid,
                    resource_version: metadata.resource_version,
                },
            )
        })
        .unwrap_or_default();
    Ok(Workload {
        kind,
        replicas: if kind == WorkloadKind::Scale {
            Some(replicas.unwrap_or(0))
        } else {
            replicas
        },
        labels,
        stored_as,
    })
}

/// The old and new object of an UPDATE, decoded, when the change is a downscale; otherwise
/// the verdict that ends the review. Both downscale webhooks start here.
pub fn downscale_of<'a>(
    request: &'a AdmissionRequest<'a>,
) -> Result<(Downscale, Workload<'a>), Verdict> {
    if request.operation != "UPDATE" {
        return Err(Verdict::allow());
    }
    let decode = |which: &'static str, json: Option<&'a str>| {
        let json = json.ok_or_else(|| undecodable(which, "it is missing"))?;
        decode_workload(json).map_err(|error| undecodable(which, error))
    };
    let old = decode("old", request.old_object())?;
    let new = decode("new", request.object())?;
    let (from, to) = replicas_change(old.replicas, new.replicas)?;
    Ok((
        Downscale {
            resource: request.resource.resource.to_string(),
            name: request.name.to_string(),
            namespace: request.namespace().to_owned(),
            from,
            to,
        },
        old,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_of_the_stored_object_only_with_its_uid_and_version() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let stored = ObjectMeta {
            uid: Some("u-1".into()),
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        };
        let scale = r#"{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"a","uid":"u-1","resourceVersion":"42"},"spec":{"replicas":3}}"#;
        assert!(decode_workload(scale).unwrap().stored_as.matches(&stored));
        for (copy, why) in [
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"uid":"u-1","resourceVersion":"41"}}"#,
                "an older version",
            ),
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"uid":"u-0","resourceVersion":"42"}}"#,
                "another object of that name",
            ),
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"resourceVersion":"42"}}"#,
                "no uid",
            ),
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"uid":"u-1"}}"#,
                "no version",
            ),
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet"}"#,
                "no metadata",
            ),
        ] {
            assert!(
                !decode_workload(copy).unwrap().stored_as.matches(&stored),
                "{why}"
            );
        }
        assert!(!StoredAs::default().matches(&ObjectMeta::default()));
    }

    #[test]
    fn decodes_the_kinds_the_api_server_sends() {
        type Expected = Result<(WorkloadKind, Option<i32>), &'static str>;
        let cases: &[(&str, Expected)] = &[
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"labels":{"a":"b"}},"spec":{"replicas":3}}"#,
                Ok((WorkloadKind::StatefulSet, Some(3))),
            ),
            (
                r#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replicas":null}}"#,
                Ok((WorkloadKind::Deployment, None)),
            ),
            (
                r#"{"apiVersion":"extensions/v1beta1","kind":"ReplicaSet","spec":{}}"#,
                Ok((WorkloadKind::ReplicaSet, None)),
            ),
            (
                r#"{"apiVersion":"apps/v1beta2","kind":"StatefulSet"}"#,
                Ok((WorkloadKind::StatefulSet, None)),
            ),
            (
                r#"{"apiVersion":"autoscaling/v1","kind":"Scale","spec":{"replicas":2}}"#,
                Ok((WorkloadKind::Scale, Some(2))),
            ),
            (
                r#"{"apiVersion":"autoscaling/v1","kind":"Scale","spec":{}}"#,
                Ok((WorkloadKind::Scale, Some(0))),
            ),
            (
                r#"{"apiVersion":"v1","kind":"Pod"}"#,
                Err("unsupported type v1/Pod"),
            ),
            (
                r#"{"kind":"StatefulSet"}"#,
                Err("unsupported type /StatefulSet"),
            ),
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet","spec":{"replicas":"3"}}"#,
                Err("invalid type"),
            ),
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet","spec":{"replicas":2147483648}}"#,
                Err("invalid value"),
            ),
            (
                r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"labels":{"a":1}}}"#,
                Err("invalid type"),
            ),
            ("[]", Err("unsupported type /")),
            ("7", Err("invalid type")),
        ];
        for (json, expected) in cases {
            let got = decode_workload(json).map(|workload| (workload.kind, workload.replicas));
            match (got, expected) {
                (Ok(got), Ok(expected)) => assert_eq!(got, *expected, "{json}"),
                (Err(error), Err(expected)) => {
                    assert!(error.to_string().contains(expected), "{json}: {error}")
                }
                (got, expected) => panic!("{json}: got {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn null_labels_are_no_labels() {
        let workload = decode_workload(
            r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"labels":null}}"#,
        )
        .unwrap();
        assert!(workload.labels.is_empty());
        let workload = decode_workload(
            r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"labels":{"k":"v\"w"}}}"#,
        )
        .unwrap();
        assert_eq!(workload.label("k"), Some("v\"w"));
    }

    fn request_json(operation: &str, old: Option<i32>, new: Option<i32>) -> String {
        let object = |replicas: Option<i32>| serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"replicas": replicas}});
        serde_json::json!({
            "uid": "u", "name": "web", "namespace": "ns", "operation": operation,
            "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "object": object(new), "oldObject": object(old)
        })
        .to_string()
    }

    #[test]
    fn only_decreases_of_replicas_are_downscales() {
        let warned = Verdict::allow_with_warning("old/new replicas is nil, allowing the change");
        let cases = [
            ("UPDATE", Some(5), Some(3), None),
            ("UPDATE", Some(3), Some(5), Some(Verdict::allow())),
            ("UPDATE", Some(3), Some(3), Some(Verdict::allow())),
            ("UPDATE", None, None, Some(Verdict::allow())),
            ("UPDATE", None, Some(3), Some(warned.clone())),
            ("UPDATE", Some(3), None, Some(warned)),
            ("UPDATE", Some(1), Some(0), None),
            ("UPDATE", Some(0), Some(-1), None),
            ("CREATE", Some(5), Some(3), Some(Verdict::allow())),
            ("DELETE", Some(5), Some(3), Some(Verdict::allow())),
        ];
        for (operation, old, new, expected) in cases {
            let json = request_json(operation, old, new);
            let request: AdmissionRequest<'_> = serde_json::from_str(&json).unwrap();
            match (downscale_of(&request), expected) {
                (Ok((downscale, _)), None) => {
                    assert_eq!((downscale.from, downscale.to), (old.unwrap(), new.unwrap()));
                    assert_eq!(
                        downscale.to_string(),
                        format!(
                            "downscale of statefulsets/web in ns from {} to {} replicas",
                            old.unwrap(),
                            new.unwrap()
                        )
                    );
                }
                (Err(decision), Some(expected)) => {
                    assert_eq!(decision, expected, "{operation} {old:?} -> {new:?}")
                }
                (got, expected) => {
                    panic!("{operation} {old:?} -> {new:?}: got {got:?}, expected {expected:?}")
                }
            }
        }
    }

    #[test]
    fn undecodable_objects_are_allowed_with_a_warning() {
        let cases = [
            (
                r#"{"uid":"u","operation":"UPDATE","object":{"apiVersion":"apps/v1","kind":"StatefulSet"}}"#,
                "old object",
            ),
            (
                r#"{"uid":"u","operation":"UPDATE","oldObject":{"apiVersion":"v1","kind":"Pod"},"object":{}}"#,
                "can't decode old object, allowing the change, err: unsupported type v1/Pod",
            ),
            (
                r#"{"uid":"u","operation":"UPDATE","oldObject":{"apiVersion":"apps/v1","kind":"StatefulSet"},"object":7}"#,
                "can't decode new object",
            ),
        ];
        for (json, expected) in cases {
            let request: AdmissionRequest<'_> = serde_json::from_str(json).unwrap();
            let verdict = downscale_of(&request).unwrap_err();
            let Verdict::Unjudged(failed) = &verdict else {
                panic!("not judged: {verdict}")
            };
            assert!(failed.warning().contains(expected), "{verdict}");
        }
    }
}
