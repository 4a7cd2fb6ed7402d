//! The controller's one error type: every way a pass of the controller fails, each variant
//! named after the failing step, and the one counter that counts them
//! (`baton_controller_failures_total{error}`, by [`Error::metric_label`]).
//!
//! Each kind of loop counts its failures in one place, where its pass ends: a group's
//! reconcile ([`crate::group`]: the rollout's error and the scaling's failures), a certificate
//! round, a Lease call of the election, a member cluster's connection. Failures a pass only
//! tells (an Event, a log line) and goes on from are not counted here.
//!
//! A variant holding another `Error` (`GateState`, `DownscaleFollowUp`, `IssueCertificate`)
//! names the step, its `source` what went wrong in it (the API's answer, a timeout, a member
//! not connected): the step is what the label counts, as `baton_reconcile_errors_total`
//! always has.

use baton_shared::kube_client::TimedOut;
use prometheus::Registry;

/// Why a pass of the controller failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // A group's rollout.
    #[error("deleting pod {pod}: {source}")]
    DeletePod { pod: String, source: kube::Error },
    #[error("setting the current revision of {statefulset}: {source}")]
    UpdateStatus {
        statefulset: String,
        source: kube::Error,
    },
    #[error("setting the partition of {statefulset}: {source}")]
    SetPartition {
        statefulset: String,
        source: kube::Error,
    },
    #[error("rolling back {statefulset}: {step}: {source}")]
    Rollback {
        statefulset: String,
        step: &'static str,
        source: kube::Error,
    },
    /// The rollout gate's state could not be stored on `statefulset` (`source`: refused, timed
    /// out, its cluster not connected): nothing was acted on.
    #[error("{}", storing_gate_state(statefulset, source))]
    GateState {
        statefulset: String,
        source: Box<Error>,
    },
    /// A call did not answer in time (it says which).
    #[error(transparent)]
    TimedOut(#[from] TimedOut),
    /// The leadership term the pass started in ended between two of its writes: nothing more
    /// is written in it. Not a failure: the pass ends ([`crate::runner::TermLost`]), and the
    /// next term reads again.
    #[error("the leadership term this pass started in ended")]
    TermLost,
    /// A write for a member cluster that is not connected (its kubeconfig could not be read
    /// yet).
    #[error("{name} is in member cluster {cluster}, which is not connected")]
    NotConnected { name: String, cluster: String },

    /// A PhasedRollout could not be served (the message names the step and the PhasedRollout);
    /// the next round tries again.
    #[error("{0}")]
    PhasedRollout(String),

    // A group's scaling.
    /// The API server refused or failed a call (the step around it says which).
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// A `/scale` write was refused (by an admission webhook, say) or failed.
    #[error("scaling {statefulset}: {why}")]
    ScaleWrite { statefulset: String, why: String },
    /// A mirrored reference's kind cannot be scaled (not namespaced, no scale subresource).
    #[error("{0}")]
    UnsupportedReference(String),
    /// Following up a downscale prepare-downscale approved failed (`source`); the group comes
    /// back soon and decides again.
    #[error("{source}")]
    DownscaleFollowUp { source: Box<Error> },
    /// A conditional write lost to a change made meanwhile (it names what changed).
    #[error("{0} changed meanwhile")]
    Changed(String),
    /// A record (the ledger, the zone tracker) cannot be read as written.
    #[error("{0}")]
    UnreadableRecord(String),

    // The webhook's certificate.
    #[error("reading Secret {name}: {source}")]
    ReadCertificateSecret { name: String, source: kube::Error },
    #[error("writing Secret {name}: {source}")]
    WriteCertificateSecret { name: String, source: kube::Error },
    /// Issuing for the Secret `name` failed (`source`: generating a key or certificate).
    #[error("issuing for Secret {name}: {source}")]
    IssueCertificate { name: String, source: Box<Error> },
    #[error("generating a {what}: {source}")]
    GenerateCertificate {
        what: &'static str,
        source: rcgen::Error,
    },

    // The election's Lease.
    /// Someone wrote the Lease since we read it (409), or created it before us.
    #[error("lease {namespace}/{name} changed since it was read ({action} got 409 Conflict)")]
    LeaseConflict {
        namespace: String,
        name: String,
        action: &'static str,
    },
    /// The Lease does not exist (any more).
    #[error("lease {namespace}/{name} does not exist ({action} got 404)")]
    LeaseNotFound {
        namespace: String,
        name: String,
        action: &'static str,
    },
    /// A replace without a resourceVersion would overwrite whatever is there: never sent.
    #[error("refusing to replace lease {namespace}/{name} without a resourceVersion precondition")]
    LeaseUnconditional { namespace: String, name: String },
    /// Anything else the API server or the connection said to a Lease call.
    #[error("{action} lease {namespace}/{name}: {source}")]
    LeaseCall {
        namespace: String,
        name: String,
        action: &'static str,
        /// Boxed: with the names beside it, it would make every `Error` large.
        #[source]
        source: Box<kube::Error>,
    },

    /// A member cluster's kubeconfig Secret: each names the member, the Secret and what is
    /// wrong, and keeps its own label.
    /// Boxed: the names it holds would make every `Error` large.
    #[error(transparent)]
    Member(Box<baton_shared::members::MemberError>),

    // The status page: why a request has no status to show.
    #[error("the caches have not synced yet: try again in a few seconds")]
    StatusNotSynced,
    #[error(
        "no rollout group {group:?} in namespace {namespace} (no StatefulSet labelled rollout-group={group})"
    )]
    NoSuchGroup { group: String, namespace: String },
}

/// The message of [`Error::GateState`], as it always read: a refusal names the StatefulSet, a
/// timeout says what timed out already.
fn storing_gate_state(statefulset: &str, source: &Error) -> String {
    match source {
        Error::TimedOut(timed_out) => timed_out.to_string(),
        Error::NotConnected { .. } => format!("storing the gate state: {source}"),
        other => format!("storing the gate state on StatefulSet {statefulset}: {other}"),
    }
}

impl From<baton_shared::members::MemberError> for Error {
    fn from(error: baton_shared::members::MemberError) -> Self {
        Self::Member(Box::new(error))
    }
}

/// Every label [`Error::metric_label`] gives, one per variant, in the order of the variants.
/// Stable: dashboards and alerts select on them.
pub const METRIC_LABELS: [&str; 31] = [
    "delete_pod",
    "update_status",
    "set_partition",
    "rollback",
    "gate_state",
    "timeout",
    "term_lost",
    "member_not_connected",
    "phased_rollout",
    "kube_api",
    "scale_write",
    "unsupported_reference",
    "downscale_follow_up",
    "changed_meanwhile",
    "unreadable_record",
    "read_certificate_secret",
    "write_certificate_secret",
    "issue_certificate",
    "generate_certificate",
    "lease_conflict",
    "lease_not_found",
    "lease_unconditional",
    "lease_call",
    "read_member_secret",
    "read_member_secret_timeout",
    "member_secret_key_missing",
    "member_not_kubeconfig",
    "member_kubeconfig_refused",
    "member_client",
    "status_not_synced",
    "no_such_group",
];

impl From<crate::runner::TermLost> for Error {
    fn from(crate::runner::TermLost: crate::runner::TermLost) -> Self {
        Self::TermLost
    }
}

impl Error {
    /// The failure's stable snake_case label, the `error` label of
    /// `baton_controller_failures_total` and `baton_reconcile_errors_total`: one per variant
    /// ([`METRIC_LABELS`]). A step that holds its cause (`gate_state`, `downscale_follow_up`,
    /// `issue_certificate`) is labelled by the step.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::DeletePod { .. } => "delete_pod",
            Self::UpdateStatus { .. } => "update_status",
            Self::SetPartition { .. } => "set_partition",
            Self::Rollback { .. } => "rollback",
            Self::GateState { .. } => "gate_state",
            Self::TimedOut(_) => "timeout",
            Self::TermLost => "term_lost",
            Self::NotConnected { .. } => "member_not_connected",
            Self::PhasedRollout(_) => "phased_rollout",
            Self::Kube(_) => "kube_api",
            Self::ScaleWrite { .. } => "scale_write",
            Self::UnsupportedReference(_) => "unsupported_reference",
            Self::DownscaleFollowUp { .. } => "downscale_follow_up",
            Self::Changed(_) => "changed_meanwhile",
            Self::UnreadableRecord(_) => "unreadable_record",
            Self::ReadCertificateSecret { .. } => "read_certificate_secret",
            Self::WriteCertificateSecret { .. } => "write_certificate_secret",
            Self::IssueCertificate { .. } => "issue_certificate",
            Self::GenerateCertificate { .. } => "generate_certificate",
            Self::LeaseConflict { .. } => "lease_conflict",
            Self::LeaseNotFound { .. } => "lease_not_found",
            Self::LeaseUnconditional { .. } => "lease_unconditional",
            Self::LeaseCall { .. } => "lease_call",
            Self::Member(error) => error.metric_label(),
            Self::StatusNotSynced => "status_not_synced",
            Self::NoSuchGroup { .. } => "no_such_group",
        }
    }
}

/// The name of the failures counter.
pub const FAILURES_METRIC: &str = "baton_controller_failures_total";

impl baton_shared::failures::MetricLabel for Error {
    fn metric_label(&self) -> &'static str {
        Error::metric_label(self)
    }
}

/// `baton_controller_failures_total{error}`: the controller's failures, by
/// [`Error::metric_label`]. One counter for every loop; cheap to clone.
pub type Failures = baton_shared::failures::Failures<Error>;

/// The controller's failures counter, registered in `registry`.
pub fn register_failures(registry: &Registry) -> prometheus::Result<Failures> {
    Failures::register(
        registry,
        FAILURES_METRIC,
        "Failures of the controller's passes (a group's reconcile, a certificate round, a Lease call, a member cluster's connection, a PhasedRollout's round), by what failed.",
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use baton_shared::members::MemberError;

    fn refused() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("forbidden", "Forbidden")
                .with_code(403)
                .boxed(),
        )
    }

    fn timed_out() -> TimedOut {
        TimedOut {
            what: "a call".to_owned(),
            timeout: Duration::from_secs(1),
        }
    }

    fn s(text: &str) -> String {
        text.to_owned()
    }

    /// One error of every variant, with the label it must keep.
    fn every_variant() -> Vec<(Error, &'static str)> {
        let member = || (s("b"), s("baton"), s("member-b"));
        let (cluster, namespace, secret) = member();
        let lease = || (s("baton"), s("baton-controller"));
        vec![
            (
                Error::DeletePod {
                    pod: s("p"),
                    source: refused(),
                },
                "delete_pod",
            ),
            (
                Error::UpdateStatus {
                    statefulset: s("a"),
                    source: refused(),
                },
                "update_status",
            ),
            (
                Error::SetPartition {
                    statefulset: s("a"),
                    source: refused(),
                },
                "set_partition",
            ),
            (
                Error::Rollback {
                    statefulset: s("a"),
                    step: "listing ControllerRevisions",
                    source: refused(),
                },
                "rollback",
            ),
            (
                Error::GateState {
                    statefulset: s("a"),
                    source: Box::new(Error::TimedOut(timed_out())),
                },
                "gate_state",
            ),
            (Error::TimedOut(timed_out()), "timeout"),
            (Error::TermLost, "term_lost"),
            (
                Error::NotConnected {
                    name: s("b/a"),
                    cluster: s("b"),
                },
                "member_not_connected",
            ),
            (
                Error::PhasedRollout(s("serving web-rollout")),
                "phased_rollout",
            ),
            (Error::Kube(refused()), "kube_api"),
            (
                Error::ScaleWrite {
                    statefulset: s("a"),
                    why: s("denied"),
                },
                "scale_write",
            ),
            (
                Error::UnsupportedReference(s("Foo has no scale subresource")),
                "unsupported_reference",
            ),
            (
                Error::DownscaleFollowUp {
                    source: Box::new(Error::Changed(s("the ledger"))),
                },
                "downscale_follow_up",
            ),
            (Error::Changed(s("the ledger")), "changed_meanwhile"),
            (Error::UnreadableRecord(s("garbage")), "unreadable_record"),
            (
                Error::ReadCertificateSecret {
                    name: s("tls"),
                    source: refused(),
                },
                "read_certificate_secret",
            ),
            (
                Error::WriteCertificateSecret {
                    name: s("tls"),
                    source: refused(),
                },
                "write_certificate_secret",
            ),
            (
                Error::IssueCertificate {
                    name: s("tls"),
                    source: Box::new(Error::GenerateCertificate {
                        what: "CA",
                        source: rcgen::Error::KeyGenerationUnavailable,
                    }),
                },
                "issue_certificate",
            ),
            (
                Error::GenerateCertificate {
                    what: "CA",
                    source: rcgen::Error::KeyGenerationUnavailable,
                },
                "generate_certificate",
            ),
            (
                Error::LeaseConflict {
                    namespace: lease().0,
                    name: lease().1,
                    action: "replacing",
                },
                "lease_conflict",
            ),
            (
                Error::LeaseNotFound {
                    namespace: lease().0,
                    name: lease().1,
                    action: "replacing",
                },
                "lease_not_found",
            ),
            (
                Error::LeaseUnconditional {
                    namespace: lease().0,
                    name: lease().1,
                },
                "lease_unconditional",
            ),
            (
                Error::LeaseCall {
                    namespace: lease().0,
                    name: lease().1,
                    action: "reading",
                    source: Box::new(refused()),
                },
                "lease_call",
            ),
            (
                Error::from(MemberError::ReadSecret {
                    cluster: cluster.clone(),
                    namespace: namespace.clone(),
                    secret: secret.clone(),
                    source: Box::new(refused()),
                }),
                "read_member_secret",
            ),
            (
                Error::from(MemberError::ReadSecretTimedOut {
                    cluster: cluster.clone(),
                    namespace: namespace.clone(),
                    secret: secret.clone(),
                    source: timed_out(),
                }),
                "read_member_secret_timeout",
            ),
            (
                Error::from(MemberError::SecretKeyMissing {
                    cluster: cluster.clone(),
                    namespace: namespace.clone(),
                    secret: secret.clone(),
                    key: s("kubeconfig"),
                }),
                "member_secret_key_missing",
            ),
            (
                Error::from(MemberError::NotKubeconfig {
                    cluster: cluster.clone(),
                    namespace: namespace.clone(),
                    secret: secret.clone(),
                    key: s("kubeconfig"),
                    why: s("not YAML"),
                }),
                "member_not_kubeconfig",
            ),
            (
                Error::from(MemberError::KubeconfigRefused {
                    cluster: cluster.clone(),
                    namespace: namespace.clone(),
                    secret: secret.clone(),
                    key: s("kubeconfig"),
                    refusals: s("exec"),
                }),
                "member_kubeconfig_refused",
            ),
            (
                Error::from(MemberError::Client {
                    cluster,
                    namespace,
                    secret,
                    why: s("no server"),
                }),
                "member_client",
            ),
            (Error::StatusNotSynced, "status_not_synced"),
            (
                Error::NoSuchGroup {
                    group: s("x"),
                    namespace: s("mimir"),
                },
                "no_such_group",
            ),
        ]
    }

    #[test]
    fn every_variant_has_its_own_stable_snake_case_label() {
        baton_shared::failures::check_labels(&every_variant(), &METRIC_LABELS);
    }

    #[test]
    fn a_gate_state_failure_reads_as_it_always_did() {
        let gate = |source| Error::GateState {
            statefulset: s("zone-a"),
            source: Box::new(source),
        };
        assert_eq!(
            gate(Error::Kube(refused())).to_string(),
            format!(
                "storing the gate state on StatefulSet zone-a: {}",
                refused()
            )
        );
        assert_eq!(
            gate(Error::TimedOut(timed_out())).to_string(),
            "a call did not answer within 1s"
        );
        let not_connected = || Error::NotConnected {
            name: s("b/zone-a"),
            cluster: s("b"),
        };
        assert_eq!(
            gate(not_connected()).to_string(),
            "storing the gate state: b/zone-a is in member cluster b, which is not connected"
        );
        assert_eq!(
            not_connected().to_string(),
            "b/zone-a is in member cluster b, which is not connected"
        );
    }
}
