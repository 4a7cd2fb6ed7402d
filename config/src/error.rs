use std::fmt;

use figment::error::Kind;

/// One rejected value: which key, what it was, what would have been accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidValue {
    pub key: String,
    pub value: String,
    pub expected: String,
}

impl InvalidValue {
    pub fn new(key: &str, value: impl Into<String>, expected: &str) -> Self {
        Self {
            key: key.to_owned(),
            value: value.into(),
            expected: expected.to_owned(),
        }
    }
}

impl fmt::Display for InvalidValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {:?} is not accepted; expected {}",
            self.key, self.value, self.expected
        )
    }
}

/// Why a configuration could not be loaded. Displays as one line per problem, each naming the
/// key and where the value came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {}", .0.join("; "))]
    Source(Vec<String>),
    #[error("invalid configuration: {}", join(.0))]
    Invalid(Vec<InvalidValue>),
}

fn join(problems: &[InvalidValue]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ConfigError {
    pub(crate) fn from_problems(problems: Vec<InvalidValue>) -> Result<(), Self> {
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Self::Invalid(problems))
        }
    }

    pub(crate) fn from_figment(error: figment::Error) -> Self {
        Self::Source(error.into_iter().map(|e| describe(&e)).collect())
    }

    /// The keys this error is about, for tests and tooling.
    pub fn keys(&self) -> Vec<String> {
        match self {
            Self::Source(lines) => lines
                .iter()
                .map(|line| line.split(':').next().unwrap_or_default().to_owned())
                .collect(),
            Self::Invalid(problems) => problems.iter().map(|p| p.key.clone()).collect(),
        }
    }
}

/// `log.format: unknown variant `xml`, expected `text` or `json` (from BATON_LOG__FORMAT)`.
fn describe(error: &figment::Error) -> String {
    let key = if error.path.is_empty() {
        "(top level)".to_owned()
    } else {
        error.path.join(".")
    };
    let message = match &error.kind {
        Kind::UnknownField(field, expected) => {
            let key = if error.path.last() == Some(field) {
                key
            } else if error.path.is_empty() {
                field.clone()
            } else {
                format!("{key}.{field}")
            };
            return format!(
                "{key}: unknown key; known keys here: {}{}",
                expected.join(", "),
                origin(error, &key)
            );
        }
        Kind::UnknownVariant(actual, expected) => {
            format!(
                "{actual:?} is not accepted; expected one of: {}",
                expected.join(", ")
            )
        }
        Kind::InvalidType(actual, expected) => format!("got {actual}, expected {expected}"),
        Kind::InvalidValue(actual, expected) => format!("{actual} is not {expected}"),
        other => other.to_string(),
    };
    format!("{key}: {message}{}", origin(error, &key))
}

fn origin(error: &figment::Error, key: &str) -> String {
    let Some(metadata) = &error.metadata else {
        return String::new();
    };
    if metadata.name.contains("environment") {
        let variable = format!(
            "{}{}",
            crate::ENV_PREFIX,
            key.replace('.', "__").to_uppercase()
        );
        return format!(" (from environment variable {variable})");
    }
    match &metadata.source {
        Some(source) => format!(" (from {source})"),
        None => format!(" (from {})", metadata.name),
    }
}
