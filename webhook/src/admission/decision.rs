//! What a webhook answers, and how the answer is counted.

use std::fmt;

/// What a webhook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Shown to the user: the reason of a denial, or a note on an allowed change.
    pub message: Option<String>,
    /// Warnings the API server passes on to the client (kubectl prints them).
    pub warnings: Vec<String>,
    pub outcome: Outcome,
    /// The HTTP code of a denial's status: 403 unless set (429 for "retry later").
    pub code: Option<u16>,
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
    pub fn allow() -> Self {
        Self {
            allowed: true,
            message: None,
            warnings: Vec::new(),
            outcome: Outcome::Allowed,
            code: None,
        }
    }
    pub fn allow_with_message(message: impl Into<String>) -> Self {
        Self {
            message: Some(message.into()),
            ..Self::allow()
        }
    }
    /// Allowed with a warning, because the change is fine but unusual (replicas to or from null).
    pub fn allow_with_warning(warning: impl Into<String>) -> Self {
        Self {
            warnings: vec![warning.into()],
            ..Self::allow()
        }
    }
    /// Allowed because judging failed; the warning says why.
    pub fn allow_on_error(warning: impl Into<String>) -> Self {
        Self {
            warnings: vec![warning.into()],
            outcome: Outcome::AllowedOnError,
            ..Self::allow()
        }
    }
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            message: Some(message.into()),
            warnings: Vec::new(),
            outcome: Outcome::Denied,
            code: None,
        }
    }
    /// Denied for now, with HTTP 429: the client is to retry later (a drain retries evictions
    /// answered 429, as for a PodDisruptionBudget).
    pub fn deny_for_now(message: impl Into<String>) -> Self {
        Self {
            code: Some(429),
            ..Self::deny(message)
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
