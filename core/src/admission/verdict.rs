//! What an admission decision concludes, as a type: allowed (with a note or warnings), refused
//! (with a reason whose [`Reason::kind`] stays the same whatever the message says), or not
//! judged because judging failed. The last is not an allow: whether such a change goes
//! through is the operator's policy (`webhook.allow_on_error`), which the webhook applies when
//! it answers; the decision only says what failed, so both answers are worded from it.

use std::fmt;
use std::time::Duration;

/// What an admission decision concludes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow(Allowed),
    Refuse(Refusal),
    /// Judging failed: allowed with [`JudgingFailed::warning`] or refused with
    /// [`JudgingFailed::refusal`], as the policy says.
    Unjudged(JudgingFailed),
}

/// An allowed change, and what the user is told of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed {
    /// A note on the allowed change.
    pub message: Option<String>,
    /// Warnings the API server passes on to the client (kubectl prints them).
    pub warnings: Vec<String>,
}

/// A refused change: why, as a kind that stays and as the message users read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
    /// Refused for now: the client is to retry later (HTTP 429; a drain retries evictions
    /// answered so, as for a PodDisruptionBudget).
    pub retry_later: bool,
}

/// Why a change is refused. Its [`kind`](Reason::kind) is stable: logs and tests may match on
/// it where the message is worded for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The object is labelled `grafana.com/no-downscale=true`.
    NoDownscaleLabel,
    /// A StatefulSet labelled for preparation lacks what its pods are called with.
    PrepareSettings,
    /// Another zone was downscaled less than the min-time ago.
    MinTime,
    /// When a zone was last downscaled, or its min-time, cannot be read.
    DownscaleHistoryUnreadable,
    /// Another zone has pods not ready or not updated.
    OtherZoneNotReady,
    /// A pod going away cannot be addressed.
    PodAddress,
    /// A pod failed to prepare for shutdown.
    PodsFailedToPrepare,
    /// A review for a namespace this replica does not serve.
    ForeignNamespace,
    /// A review that is not of the object as stored (stale or forged).
    NotAsStored,
    /// Something the decision needs could not be read or written.
    ReadFailed,
    /// The group's downscale ledger kept changing under the claim.
    LedgerContended,
    /// A downscale's claim did not reach a majority of the member clusters' ledgers (others
    /// held it back, or could not be reached).
    NoMajority,
    /// No decision within the request deadline, where letting the change through could break
    /// what the decision guards (an eviction): refused for now.
    TimedOut,
    /// The webhook failed itself.
    Internal,
    /// One of baton's state annotations set by someone else than baton's controller.
    StateSet,
    /// One of baton's records changed by someone else than baton.
    RecordChanged,
    /// The review's objects cannot be read.
    Unreadable,
    /// A zone-aware disruption budget forbids the eviction (now).
    Budget,
    /// A zone-aware disruption budget that could not be used.
    InvalidBudget,
    /// No judgement, and the policy refuses such changes.
    Unjudged,
}

impl Reason {
    pub fn kind(self) -> &'static str {
        match self {
            Reason::NoDownscaleLabel => "no-downscale-label",
            Reason::PrepareSettings => "prepare-settings",
            Reason::MinTime => "min-time",
            Reason::DownscaleHistoryUnreadable => "downscale-history-unreadable",
            Reason::OtherZoneNotReady => "other-zone-not-ready",
            Reason::PodAddress => "pod-address",
            Reason::PodsFailedToPrepare => "pods-failed-to-prepare",
            Reason::ForeignNamespace => "foreign-namespace",
            Reason::NotAsStored => "not-as-stored",
            Reason::ReadFailed => "read-failed",
            Reason::LedgerContended => "ledger-contended",
            Reason::NoMajority => "no-majority",
            Reason::TimedOut => "timed-out",
            Reason::Internal => "internal",
            Reason::StateSet => "state-set",
            Reason::RecordChanged => "record-changed",
            Reason::Unreadable => "unreadable",
            Reason::Budget => "budget",
            Reason::InvalidBudget => "invalid-budget",
            Reason::Unjudged => "unjudged",
        }
    }
}

impl Refusal {
    pub fn kind(&self) -> &'static str {
        self.reason.kind()
    }
}

/// What kept a change from being judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JudgingFailed {
    /// The review's `which` ("old" or "new") object cannot be decoded.
    Undecodable { which: &'static str, error: String },
    /// The parent of a `/scale` cannot be read.
    ParentUnreadable {
        resource: String,
        name: String,
        namespace: String,
        error: String,
    },
    /// No decision within the request deadline (`webhook.request_timeout`).
    TimedOut { after: Duration },
    /// The webhook runs without the zone-aware disruption budgets' caches; `what` is allowed
    /// ("the eviction", "the change").
    BudgetsNotWatched { what: &'static str },
}

impl JudgingFailed {
    /// The warning of the change allowed anyway.
    pub fn warning(&self) -> String {
        match self {
            JudgingFailed::Undecodable { which, error } => {
                format!("can't decode {which} object, allowing the change, err: {error}")
            }
            JudgingFailed::ParentUnreadable {
                resource,
                name,
                namespace,
                error,
            } => format!(
                "can't get {resource}/{name} in namespace {namespace}, allowing the change: {error}"
            ),
            JudgingFailed::TimedOut { after } => {
                format!(
                    "no decision within webhook.request_timeout ({after:?}), allowing the change"
                )
            }
            JudgingFailed::BudgetsNotWatched { what } => {
                format!("zone-aware disruption budgets are not being watched; allowing {what}")
            }
        }
    }

    /// What failed, as a refusal says it.
    fn what_failed(&self) -> String {
        match self {
            JudgingFailed::Undecodable { which, error } => {
                format!("can't decode {which} object, err: {error}")
            }
            JudgingFailed::ParentUnreadable {
                resource,
                name,
                namespace,
                error,
            } => format!("can't get {resource}/{name} in namespace {namespace}: {error}"),
            JudgingFailed::TimedOut { after } => {
                format!("no decision within webhook.request_timeout ({after:?})")
            }
            // Worded as it always was refused (users match on these words), though it says
            // what an allow would do.
            JudgingFailed::BudgetsNotWatched { .. } => self.warning(),
        }
    }

    /// The refusal of the change, when the policy refuses what could not be judged.
    pub fn refusal(&self) -> Refusal {
        Refusal {
            reason: Reason::Unjudged,
            message: format!(
                "the change could not be judged, so it is refused (webhook.allow_on_error: true allows it instead): {}",
                self.what_failed()
            ),
            retry_later: false,
        }
    }
}

impl Verdict {
    pub fn allow() -> Self {
        Verdict::Allow(Allowed::default())
    }
    pub fn allow_with_message(message: impl Into<String>) -> Self {
        Verdict::Allow(Allowed {
            message: Some(message.into()),
            warnings: Vec::new(),
        })
    }
    /// Allowed with a warning, because the change is fine but unusual (replicas to or from
    /// null, a kind the webhook does not guard).
    pub fn allow_with_warning(warning: impl Into<String>) -> Self {
        Verdict::Allow(Allowed {
            message: None,
            warnings: vec![warning.into()],
        })
    }
    pub fn refuse(reason: Reason, message: impl Into<String>) -> Self {
        Verdict::Refuse(Refusal {
            reason,
            message: message.into(),
            retry_later: false,
        })
    }
    /// Refused for now: to be retried later.
    pub fn refuse_for_now(reason: Reason, message: impl Into<String>) -> Self {
        Verdict::Refuse(Refusal {
            reason,
            message: message.into(),
            retry_later: true,
        })
    }

    /// Whether the change goes through without asking the policy.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Verdict::Allow(_))
    }

    /// The refusal, if refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Verdict::Refuse(refusal) => Some(refusal),
            Verdict::Allow(_) | Verdict::Unjudged(_) => None,
        }
    }

    /// The text a user reads: the refusal's message, the allowed change's note, or what failed.
    pub fn message(&self) -> Option<String> {
        match self {
            Verdict::Allow(allowed) => allowed.message.clone(),
            Verdict::Refuse(refusal) => Some(refusal.message.clone()),
            Verdict::Unjudged(failed) => Some(failed.warning()),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Allow(allowed) => {
                f.write_str("allowed")?;
                if let Some(message) = &allowed.message {
                    write!(f, ": {message}")?;
                }
                for warning in &allowed.warnings {
                    write!(f, " (warning: {warning})")?;
                }
                Ok(())
            }
            Verdict::Refuse(refusal) => {
                write!(f, "refused ({}): {}", refusal.kind(), refusal.message)
            }
            Verdict::Unjudged(failed) => write!(f, "not judged: {}", failed.warning()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_could_not_be_judged_is_worded_for_an_allow_and_for_a_refusal() {
        const REFUSED: &str = "the change could not be judged, so it is refused (webhook.allow_on_error: true allows it instead): ";
        let cases = [
            (
                JudgingFailed::Undecodable {
                    which: "old",
                    error: "it is missing".into(),
                },
                "can't decode old object, allowing the change, err: it is missing",
                "can't decode old object, err: it is missing",
            ),
            (
                JudgingFailed::ParentUnreadable {
                    resource: "statefulsets".into(),
                    name: "web".into(),
                    namespace: "ns".into(),
                    error: "timed out".into(),
                },
                "can't get statefulsets/web in namespace ns, allowing the change: timed out",
                "can't get statefulsets/web in namespace ns: timed out",
            ),
            (
                JudgingFailed::TimedOut {
                    after: Duration::from_secs(5),
                },
                "no decision within webhook.request_timeout (5s), allowing the change",
                "no decision within webhook.request_timeout (5s)",
            ),
            (
                JudgingFailed::BudgetsNotWatched {
                    what: "the eviction",
                },
                "zone-aware disruption budgets are not being watched; allowing the eviction",
                "zone-aware disruption budgets are not being watched; allowing the eviction",
            ),
        ];
        for (failed, warning, refused) in cases {
            assert_eq!(failed.warning(), warning);
            let refusal = failed.refusal();
            assert_eq!(refusal.message, format!("{REFUSED}{refused}"));
            assert_eq!(refusal.kind(), "unjudged");
            assert!(!refusal.retry_later);
        }
    }

    #[test]
    fn kinds_are_distinct() {
        let reasons = [
            Reason::NoDownscaleLabel,
            Reason::PrepareSettings,
            Reason::MinTime,
            Reason::DownscaleHistoryUnreadable,
            Reason::OtherZoneNotReady,
            Reason::PodAddress,
            Reason::PodsFailedToPrepare,
            Reason::ForeignNamespace,
            Reason::NotAsStored,
            Reason::ReadFailed,
            Reason::LedgerContended,
            Reason::NoMajority,
            Reason::TimedOut,
            Reason::Internal,
            Reason::StateSet,
            Reason::RecordChanged,
            Reason::Unreadable,
            Reason::Budget,
            Reason::InvalidBudget,
            Reason::Unjudged,
        ];
        let kinds: std::collections::BTreeSet<_> =
            reasons.iter().map(|reason| reason.kind()).collect();
        assert_eq!(kinds.len(), reasons.len());
    }
}
