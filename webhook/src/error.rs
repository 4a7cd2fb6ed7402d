//! The webhook's one error type: every way serving a review fails, each variant named after
//! the failing step, and the one counter that counts them
//! (`baton_webhook_failures_total{error}`, by [`Error::metric_label`]).
//!
//! Each kind of loop counts its failures in one place: a request that is not answered with a
//! verdict, or whose change could not be judged ([`crate::server`]); a step of
//! prepare-downscale's flow, where its error becomes the text the flow's core reads
//! ([`crate::admission::prepare_downscale::flow`]); a reload of the TLS files
//! ([`crate::tls_reload`]). Errors a judge turns into a verdict on the spot (an object that
//! does not decode, a parent that cannot be read) are counted as what they made of the
//! review: `unjudged`.

use std::path::PathBuf;
use std::time::Duration;

use baton_core::admission::JudgingFailed;
use baton_shared::ledger;
use baton_shared::pod_client::{PodCallError, error_chain};
use prometheus::Registry;

/// Why the webhook could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The TLS files; each names the file at fault.
    #[error("reading {path}: {error}")]
    ReadTlsFile {
        path: PathBuf,
        /// In the message already, so not also a `source` (chains would print it twice).
        error: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} is not a PEM certificate chain: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("{path} is not a PEM private key: {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("{path} holds no CA certificate the client verifier can use: {reason}")]
    BadClientCa { path: PathBuf, reason: String },
    #[error("the private key {key} does not match the certificate {cert}: {reason}")]
    KeyMismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },

    // A request that is not a review baton can answer: HTTP 400 with this text, unless said.
    #[error("no content type: AdmissionReviews are application/json")]
    NoContentType,
    #[error("wrong content type {0:?}: AdmissionReviews are application/json")]
    WrongContentType(String),
    #[error("the request body is larger than webhook.max_request_bytes ({limit} bytes)")]
    BodyTooLarge { limit: usize },
    #[error("reading the request body: {0}")]
    ReadBody(String),
    /// No room in the body budget within `webhook.read_timeout`: HTTP 429.
    #[error(
        "too many request bodies in flight (webhook.max_inflight_request_bytes, a quarter of it per client address unless webhook.client_ca_file is set): none freed within webhook.read_timeout ({read_timeout:?}); retry"
    )]
    BodyBudgetExhausted { read_timeout: Duration },
    /// The body did not arrive within `webhook.read_timeout`: HTTP 408.
    #[error("the request body did not arrive within webhook.read_timeout ({read_timeout:?})")]
    BodyTimedOut { read_timeout: Duration },
    #[error("the request body is not JSON: {0}")]
    NotJson(String),
    #[error("the request body is not an AdmissionReview: {0}")]
    NotAReview(String),

    // The objects of a review.
    #[error("{0}")]
    MalformedObject(String),
    #[error("unsupported type {api_version}/{kind}")]
    UnsupportedObject { api_version: String, kind: String },

    // The parent of a `/scale` request.
    #[error("{resource}/{name} in namespace {namespace} does not exist")]
    ParentNotFound {
        resource: &'static str,
        namespace: String,
        name: String,
    },
    #[error("reading {resource}/{name} in namespace {namespace}: {}", error_chain(.error.as_ref()))]
    ReadParent {
        resource: &'static str,
        namespace: String,
        name: String,
        /// In the message already, so not also a `source` (chains would print it twice).
        /// Boxed: the names beside it would make every `Error` large.
        error: Box<kube::Error>,
    },

    /// The change could not be judged (the policy, `webhook.allow_on_error`, answers it).
    #[error("{}", .0.refusal().message)]
    Unjudged(JudgingFailed),

    // The steps of prepare-downscale's flow.
    #[error("{}", error_chain(.0))]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    ReadRecord(#[from] ledger::ReadError),
    #[error("{0}")]
    PodCall(PodCallError),
    #[error("the request deadline passed")]
    DeadlinePassed,

    /// A member cluster's kubeconfig Secret (`webhook.clusters`): each names the member, the
    /// Secret and what is wrong, and keeps its own label.
    /// Boxed: the names it holds would make every `Error` large.
    #[error(transparent)]
    Member(Box<baton_shared::members::MemberError>),
}

impl From<baton_shared::members::MemberError> for Error {
    fn from(error: baton_shared::members::MemberError) -> Self {
        Self::Member(Box::new(error))
    }
}

/// Every label [`Error::metric_label`] gives, one per variant, in the order of the variants.
/// Stable: dashboards and alerts select on them.
pub const METRIC_LABELS: [&str; 29] = [
    "read_tls_file",
    "no_certificate",
    "bad_certificate",
    "bad_key",
    "bad_client_ca",
    "key_mismatch",
    "no_content_type",
    "wrong_content_type",
    "body_too_large",
    "read_body",
    "body_budget_exhausted",
    "body_timed_out",
    "not_json",
    "not_a_review",
    "malformed_object",
    "unsupported_object",
    "parent_not_found",
    "read_parent",
    "unjudged",
    "kube_api",
    "read_record",
    "pod_call",
    "deadline_passed",
    "read_member_secret",
    "read_member_secret_timeout",
    "member_secret_key_missing",
    "member_not_kubeconfig",
    "member_kubeconfig_refused",
    "member_client",
];

impl Error {
    /// The failure's stable snake_case label, the `error` label of
    /// `baton_webhook_failures_total`: one per variant ([`METRIC_LABELS`]).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::ReadTlsFile { .. } => "read_tls_file",
            Self::NoCertificate { .. } => "no_certificate",
            Self::BadCertificate { .. } => "bad_certificate",
            Self::BadKey { .. } => "bad_key",
            Self::BadClientCa { .. } => "bad_client_ca",
            Self::KeyMismatch { .. } => "key_mismatch",
            Self::NoContentType => "no_content_type",
            Self::WrongContentType(_) => "wrong_content_type",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::ReadBody(_) => "read_body",
            Self::BodyBudgetExhausted { .. } => "body_budget_exhausted",
            Self::BodyTimedOut { .. } => "body_timed_out",
            Self::NotJson(_) => "not_json",
            Self::NotAReview(_) => "not_a_review",
            Self::MalformedObject(_) => "malformed_object",
            Self::UnsupportedObject { .. } => "unsupported_object",
            Self::ParentNotFound { .. } => "parent_not_found",
            Self::ReadParent { .. } => "read_parent",
            Self::Unjudged(_) => "unjudged",
            Self::Kube(_) => "kube_api",
            Self::ReadRecord(_) => "read_record",
            Self::PodCall(_) => "pod_call",
            Self::DeadlinePassed => "deadline_passed",
            Self::Member(error) => error.metric_label(),
        }
    }
}

impl baton_shared::failures::MetricLabel for Error {
    fn metric_label(&self) -> &'static str {
        Error::metric_label(self)
    }
}

/// The name of the failures counter.
pub const FAILURES_METRIC: &str = "baton_webhook_failures_total";

/// `baton_webhook_failures_total{error}`: the webhook's failures, by [`Error::metric_label`];
/// cheap to clone.
pub type Failures = baton_shared::failures::Failures<Error>;

/// The webhook's failures counter, registered in `registry`.
pub fn register_failures(registry: &Registry) -> prometheus::Result<Failures> {
    Failures::register(
        registry,
        FAILURES_METRIC,
        "Failures of the webhook (a request not answered with a verdict, a change that could not be judged, a step of prepare-downscale, a reload of the TLS files), by what failed.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("forbidden", "Forbidden")
                .with_code(403)
                .boxed(),
        )
    }

    fn s(text: &str) -> String {
        text.to_owned()
    }

    /// One error of every variant, with the label it must keep.
    fn every_variant() -> Vec<(Error, &'static str)> {
        let path = || PathBuf::from("/tls/tls.crt");
        let timeout = Duration::from_secs(10);
        vec![
            (
                Error::ReadTlsFile {
                    path: path(),
                    error: std::io::Error::from(std::io::ErrorKind::NotFound),
                },
                "read_tls_file",
            ),
            (Error::NoCertificate { path: path() }, "no_certificate"),
            (
                Error::BadCertificate {
                    path: path(),
                    reason: s("x"),
                },
                "bad_certificate",
            ),
            (
                Error::BadKey {
                    path: path(),
                    reason: s("x"),
                },
                "bad_key",
            ),
            (
                Error::BadClientCa {
                    path: path(),
                    reason: s("x"),
                },
                "bad_client_ca",
            ),
            (
                Error::KeyMismatch {
                    cert: path(),
                    key: path(),
                    reason: s("x"),
                },
                "key_mismatch",
            ),
            (Error::NoContentType, "no_content_type"),
            (
                Error::WrongContentType(s("text/plain")),
                "wrong_content_type",
            ),
            (Error::BodyTooLarge { limit: 1 }, "body_too_large"),
            (Error::ReadBody(s("reset")), "read_body"),
            (
                Error::BodyBudgetExhausted {
                    read_timeout: timeout,
                },
                "body_budget_exhausted",
            ),
            (
                Error::BodyTimedOut {
                    read_timeout: timeout,
                },
                "body_timed_out",
            ),
            (Error::NotJson(s("eof")), "not_json"),
            (Error::NotAReview(s("it has no request")), "not_a_review"),
            (Error::MalformedObject(s("eof")), "malformed_object"),
            (
                Error::UnsupportedObject {
                    api_version: s("v1"),
                    kind: s("Pod"),
                },
                "unsupported_object",
            ),
            (
                Error::ParentNotFound {
                    resource: "statefulsets",
                    namespace: s("ns"),
                    name: s("web"),
                },
                "parent_not_found",
            ),
            (
                Error::ReadParent {
                    resource: "statefulsets",
                    namespace: s("ns"),
                    name: s("web"),
                    error: Box::new(refused()),
                },
                "read_parent",
            ),
            (
                Error::Unjudged(JudgingFailed::TimedOut { after: timeout }),
                "unjudged",
            ),
            (Error::Kube(refused()), "kube_api"),
            (
                Error::ReadRecord(ledger::ReadError::NotBatons { name: s("ledger") }),
                "read_record",
            ),
            (
                Error::PodCall(PodCallError::Status {
                    pod: s("web-0"),
                    method: baton_core::pod_address::PodMethod::Post,
                    url: s("http://web-0/prepare"),
                    status: 500,
                }),
                "pod_call",
            ),
            (Error::DeadlinePassed, "deadline_passed"),
        ]
        .into_iter()
        .chain(member_variants())
        .collect()
    }

    /// A member cluster's Secret, each way it fails.
    fn member_variants() -> Vec<(Error, &'static str)> {
        use baton_shared::members::MemberError;
        let (cluster, namespace, secret, key) = (s("b"), s("baton"), s("member-b"), s("k"));
        vec![
            MemberError::ReadSecret {
                cluster: cluster.clone(),
                namespace: namespace.clone(),
                secret: secret.clone(),
                source: Box::new(refused()),
            },
            MemberError::ReadSecretTimedOut {
                cluster: cluster.clone(),
                namespace: namespace.clone(),
                secret: secret.clone(),
                source: baton_shared::kube_client::TimedOut {
                    what: s("reading"),
                    timeout: Duration::from_secs(1),
                },
            },
            MemberError::SecretKeyMissing {
                cluster: cluster.clone(),
                namespace: namespace.clone(),
                secret: secret.clone(),
                key: key.clone(),
            },
            MemberError::NotKubeconfig {
                cluster: cluster.clone(),
                namespace: namespace.clone(),
                secret: secret.clone(),
                key: key.clone(),
                why: s("not YAML"),
            },
            MemberError::KubeconfigRefused {
                cluster: cluster.clone(),
                namespace: namespace.clone(),
                secret: secret.clone(),
                key,
                refusals: s("exec"),
            },
            MemberError::Client {
                cluster,
                namespace,
                secret,
                why: s("no server"),
            },
        ]
        .into_iter()
        .zip(baton_shared::members::METRIC_LABELS)
        .map(|(error, label)| (Error::from(error), label))
        .collect()
    }

    #[test]
    fn every_variant_has_its_own_stable_snake_case_label() {
        baton_shared::failures::check_labels(&every_variant(), &METRIC_LABELS);
    }
}
