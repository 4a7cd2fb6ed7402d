//! The answer a webhook sends, mapped from a core verdict, and how it is counted. The mapping
//! is the one place `webhook.allow_on_error` is applied: a verdict that could not be judged
//! is allowed with its warning, or refused saying what failed.

use std::fmt;

use baton_core::admission::{Allowed, Reason, Refusal, Verdict};

/// What a webhook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Shown to the user: the reason of a denial, or a note on an allowed change.
    pub message: Option<String>,
    /// Warnings the API server passes on to the client (kubectl prints them).
    pub warnings: Vec<String>,
    pub outcome: Outcome,
    /// The HTTP code of a denial's status: 403 unless set (429 for "retry later", 400 for an
    /// invalid budget).
    pub code: Option<u16>,
    /// The refusal's stable kind, for the log.
    pub kind: Option<&'static str>,
}

/// How a decision is counted in `baton_admission_decisions_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Allowed,
    Denied,
    /// Something went wrong while judging and the change was let through (no-downscale must
    /// never block a cluster because of its own trouble).
    AllowedOnError,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::AllowedOnError => "allowed_on_error",
        }
    }
}

impl Decision {
    /// The answer to `verdict`. One that could not be judged is allowed with a warning under
    /// `allow_on_error` (the Go operator's behaviour), else refused, saying why.
    pub fn of(verdict: Verdict, allow_on_error: bool) -> Self {
        match verdict {
            Verdict::Allow(Allowed { message, warnings }) => Self {
                allowed: true,
                message,
                warnings,
                outcome: Outcome::Allowed,
                code: None,
                kind: None,
            },
            Verdict::Refuse(refusal) => Self::refused(refusal),
            Verdict::Unjudged(failed) if allow_on_error => Self {
                allowed: true,
                message: None,
                warnings: vec![failed.warning()],
                outcome: Outcome::AllowedOnError,
                code: None,
                kind: None,
            },
            Verdict::Unjudged(failed) => Self::refused(failed.refusal()),
        }
    }

    fn refused(refusal: Refusal) -> Self {
        Self {
            allowed: false,
            kind: Some(refusal.kind()),
            message: Some(refusal.message),
            warnings: Vec::new(),
            outcome: Outcome::Denied,
            code: if refusal.retry_later {
                // A drain retries evictions answered 429, as for a PodDisruptionBudget.
                Some(429)
            } else if refusal.reason == Reason::InvalidBudget {
                // A budget that cannot be used is a bad request, as the Go operator answers it
                // (clients and scripts written against it read the code).
                Some(400)
            } else {
                None
            },
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.allowed { "allowed" } else { "denied" })?;
        if let Some(message) = &self.message {
            write!(f, ": {message}")?;
        }
        for warning in &self.warnings {
            write!(f, " (warning: {warning})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use baton_core::admission::JudgingFailed;

    use super::*;

    #[test]
    fn verdicts_map_to_answers_and_the_policy_decides_what_was_not_judged() {
        let failed = || {
            Verdict::Unjudged(JudgingFailed::TimedOut {
                after: Duration::from_secs(5),
            })
        };
        let cases = [
            (Verdict::allow(), true, true, None, Outcome::Allowed, None),
            (
                Verdict::refuse(Reason::MinTime, "wait"),
                true,
                false,
                Some("wait".to_owned()),
                Outcome::Denied,
                None,
            ),
            (
                Verdict::refuse_for_now(Reason::Budget, "later"),
                true,
                false,
                Some("later".to_owned()),
                Outcome::Denied,
                Some(429),
            ),
            (
                Verdict::refuse(Reason::InvalidBudget, "bad"),
                true,
                false,
                Some("bad".to_owned()),
                Outcome::Denied,
                Some(400),
            ),
            (failed(), true, true, None, Outcome::AllowedOnError, None),
            (
                failed(),
                false,
                false,
                Some("the change could not be judged, so it is refused (webhook.allow_on_error: true allows it instead): no decision within webhook.request_timeout (5s)".to_owned()),
                Outcome::Denied,
                None,
            ),
        ];
        for (verdict, allow_on_error, allowed, message, outcome, code) in cases {
            let described = verdict.to_string();
            let decision = Decision::of(verdict, allow_on_error);
            assert_eq!(
                (
                    decision.allowed,
                    decision.message,
                    decision.outcome,
                    decision.code
                ),
                (allowed, message, outcome, code),
                "{described} (allow_on_error: {allow_on_error})"
            );
        }
        let allowed = Decision::of(failed(), true);
        assert_eq!(
            allowed.warnings,
            vec!["no decision within webhook.request_timeout (5s), allowing the change".to_owned()]
        );
        assert_eq!(Decision::of(failed(), false).kind, Some("unjudged"));
    }
}
