//! Decoding AdmissionReview requests (`admission.k8s.io/v1` and `v1beta1`, which share the
//! fields baton reads) and encoding the answer in the request's version.
//!
//! Only the fields the webhooks use are decoded, and the objects are kept as raw JSON borrowed
//! from the body: an object that does not decode is the webhook's business (allow with a
//! warning), not a malformed review (HTTP 400).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::decision::Decision;
use crate::error::Error;

/// `apiVersion` of v1 reviews.
pub const API_VERSION_V1: &str = "admission.k8s.io/v1";
/// `apiVersion` of v1beta1 reviews (API servers before 1.16 send only these).
pub const API_VERSION_V1BETA1: &str = "admission.k8s.io/v1beta1";
const KIND: &str = "AdmissionReview";

/// The version a review came in, and must be answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1Beta1,
}

impl ReviewVersion {
    pub fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => API_VERSION_V1,
            ReviewVersion::V1Beta1 => API_VERSION_V1BETA1,
        }
    }
}

/// Group, version and resource of the request (`resource.resource` is e.g. `statefulsets`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GroupVersionResource<'a> {
    #[serde(borrow)]
    pub group: Cow<'a, str>,
    #[serde(borrow)]
    pub version: Cow<'a, str>,
    #[serde(borrow)]
    pub resource: Cow<'a, str>,
}

/// The part of `request` the webhooks read.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest<'a> {
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    #[serde(default, borrow)]
    pub resource: GroupVersionResource<'a>,
    #[serde(default, borrow)]
    pub sub_resource: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub operation: Cow<'a, str>,
    #[serde(default, borrow)]
    pub object: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub old_object: Option<&'a RawValue>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    #[serde(default, borrow)]
    pub user_info: UserInfo<'a>,
}

/// Who asked for the change (the part the webhooks read).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct UserInfo<'a> {
    #[serde(default, borrow)]
    pub username: Cow<'a, str>,
}

impl AdmissionRequest<'_> {
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
    pub fn sub_resource(&self) -> &str {
        self.sub_resource.as_deref().unwrap_or("")
    }
    pub fn is_dry_run(&self) -> bool {
        self.dry_run.unwrap_or(false)
    }
    /// The object as the request wants it, `None` when absent or JSON `null`.
    pub fn object(&self) -> Option<&str> {
        non_null(self.object)
    }
    /// The object as it is stored, `None` when absent or JSON `null` (CREATE).
    pub fn old_object(&self) -> Option<&str> {
        non_null(self.old_object)
    }
}

fn non_null(raw: Option<&RawValue>) -> Option<&str> {
    raw.map(RawValue::get).filter(|json| json.trim() != "null")
}

/// A decoded review: its version and its request.
#[derive(Debug, Clone)]
pub struct Review<'a> {
    pub version: ReviewVersion,
    pub request: AdmissionRequest<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    #[serde(default, borrow)]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    request: Option<AdmissionRequest<'a>>,
}

/// Decodes a review from a request body, in one pass (the objects stay raw); else why the body
/// is not a review baton can answer ([`Error::NotJson`], [`Error::NotAReview`]): HTTP 400.
pub fn decode(body: &[u8]) -> Result<Review<'_>, Error> {
    let envelope: Envelope<'_> =
        serde_json::from_slice(body).map_err(|error| match error.classify() {
            serde_json::error::Category::Data => Error::NotAReview(error.to_string()),
            _ => Error::NotJson(error.to_string()),
        })?;
    let api_version = envelope.api_version.as_deref().unwrap_or("");
    let kind = envelope.kind.as_deref().unwrap_or("");
    let version = match (api_version, kind) {
        (API_VERSION_V1, KIND) => ReviewVersion::V1,
        (API_VERSION_V1BETA1, KIND) => ReviewVersion::V1Beta1,
        _ => {
            return Err(Error::NotAReview(format!(
                "apiVersion {api_version:?} and kind {kind:?}; expected kind {KIND:?} with apiVersion \
                 {API_VERSION_V1:?} or {API_VERSION_V1BETA1:?}"
            )));
        }
    };
    let request = envelope
        .request
        .ok_or_else(|| Error::NotAReview("it has no request".to_owned()))?;
    if request.uid.is_empty() {
        return Err(Error::NotAReview("its request has no uid".to_owned()));
    }
    Ok(Review { version, request })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: Response<'a>,
}

#[derive(Serialize)]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct Status<'a> {
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

/// The answer to the review with `uid`, in `version`.
pub fn encode(version: ReviewVersion, uid: &str, decision: &Decision) -> Vec<u8> {
    let review = ResponseReview {
        api_version: version.api_version(),
        kind: KIND,
        response: Response {
            uid,
            allowed: decision.allowed,
            status: decision.message.as_deref().map(|message| Status {
                message,
                // Without a code the API server answers the client 403 for a denial anyway;
                // saying it keeps the intent explicit.
                code: (!decision.allowed).then_some(decision.code.unwrap_or(403)),
            }),
            warnings: &decision.warnings,
        },
    };
    // Only strings, booleans and numbers: serialization cannot fail.
    serde_json::to_vec(&review).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn review(api_version: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": api_version,
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "apps", "version": "v1", "kind": "Scale"},
                "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
                "subResource": "scale",
                "name": "ingester-zone-a",
                "namespace": "mimir",
                "operation": "UPDATE",
                "userInfo": {"username": "admin"},
                "object": {"spec": {"replicas": 3}},
                "oldObject": {"spec": {"replicas": 5}},
                "dryRun": true
            }
        }))
        .unwrap()
    }

    #[test]
    fn decodes_both_versions() {
        for (api_version, version) in [
            (API_VERSION_V1, ReviewVersion::V1),
            (API_VERSION_V1BETA1, ReviewVersion::V1Beta1),
        ] {
            let body = review(api_version);
            let review = decode(&body).unwrap();
            assert_eq!(review.version, version);
            let request = review.request;
            assert_eq!(request.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
            assert_eq!(request.resource.resource, "statefulsets");
            assert_eq!(request.sub_resource(), "scale");
            assert_eq!(request.name, "ingester-zone-a");
            assert_eq!(request.namespace(), "mimir");
            assert_eq!(request.operation, "UPDATE");
            assert!(request.is_dry_run());
            assert_eq!(request.object(), Some(r#"{"spec":{"replicas":3}}"#));
            assert_eq!(request.old_object(), Some(r#"{"spec":{"replicas":5}}"#));
        }
    }

    #[test]
    fn null_objects_and_missing_optionals_are_absent() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
            "request":{"uid":"u","object":null,"oldObject":null,"namespace":null}}"#;
        let request = decode(body).unwrap().request;
        assert_eq!(request.object(), None);
        assert_eq!(request.old_object(), None);
        assert_eq!(request.namespace(), "");
        assert_eq!(request.sub_resource(), "");
        assert!(!request.is_dry_run());
    }

    #[test]
    fn rejects_what_is_not_a_review_saying_why() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "not JSON"),
            (b"{", "not JSON"),
            (b"\xff\xfe", "not JSON"),
            (b"[1,2]", "not an AdmissionReview"),
            (b"42", "not an AdmissionReview"),
            (br#"{"apiVersion":"v1","kind":"Pod"}"#, "apiVersion \"v1\" and kind \"Pod\""),
            (
                br#"{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"u"}}"#,
                "expected kind",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
                "has no request",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#,
                "has no request",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}"#,
                "missing field `uid`",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}"#,
                "has no uid",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}"#,
                "not an AdmissionReview: invalid type: integer `7`",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","dryRun":"yes"}}"#,
                "invalid type: string \"yes\", expected a boolean",
            ),
            (br#"{"apiVersion":1}"#, "not an AdmissionReview"),
        ];
        for (body, expected) in cases {
            let error = decode(body).unwrap_err().to_string();
            assert!(
                error.contains(expected),
                "{:?}: {error:?} should contain {expected:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn answers_in_the_request_version() {
        use baton_core::admission::{Reason, Verdict};
        let denied = Decision::of(Verdict::refuse(Reason::Unreadable, "no"), false);
        let allowed = Decision::of(Verdict::allow_with_warning("could not look"), false);
        for version in [ReviewVersion::V1, ReviewVersion::V1Beta1] {
            let answer: Value = serde_json::from_slice(&encode(version, "u-1", &denied)).unwrap();
            assert_eq!(
                answer,
                json!({
                    "apiVersion": version.api_version(),
                    "kind": "AdmissionReview",
                    "response": {"uid": "u-1", "allowed": false, "status": {"message": "no", "code": 403}}
                })
            );
            let answer: Value = serde_json::from_slice(&encode(version, "u-2", &allowed)).unwrap();
            assert_eq!(
                answer,
                json!({
                    "apiVersion": version.api_version(),
                    "kind": "AdmissionReview",
                    "response": {"uid": "u-2", "allowed": true, "warnings": ["could not look"]}
                })
            );
        }
    }

    #[test]
    fn escaped_strings_decode() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a\"b","name":"n\u0041"}}"#;
        let request = decode(body).unwrap().request;
        assert_eq!(request.uid, "a\"b");
        assert_eq!(request.name, "nA");
    }
}
