//! The one failures counter of a binary (`baton_controller_failures_total`,
//! `baton_webhook_failures_total`): `{error}` is the failure's [`MetricLabel`], which each
//! binary's one error type gives, one stable label per variant.

use std::marker::PhantomData;

use prometheus::{IntCounterVec, Opts, Registry};

/// An error that names its kind for metrics: a stable snake_case label, one per variant.
pub trait MetricLabel {
    fn metric_label(&self) -> &'static str;
}

/// Counts a binary's failures of error type `E` by their label; cheap to clone.
pub struct Failures<E> {
    counter: IntCounterVec,
    counts: PhantomData<fn(&E)>,
}

impl<E> Clone for Failures<E> {
    fn clone(&self) -> Self {
        Self {
            counter: self.counter.clone(),
            counts: PhantomData,
        }
    }
}

impl<E> std::fmt::Debug for Failures<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failures").finish_non_exhaustive()
    }
}

impl<E: MetricLabel> Failures<E> {
    /// The counter `name{error}`, registered in `registry`.
    pub fn register(registry: &Registry, name: &str, help: &str) -> prometheus::Result<Self> {
        let counter = IntCounterVec::new(Opts::new(name, help), &["error"])?;
        registry.register(Box::new(counter.clone()))?;
        Ok(Self {
            counter,
            counts: PhantomData,
        })
    }

    /// Counts one failure under its label.
    pub fn count(&self, error: &E) {
        self.counter
            .with_label_values(&[error.metric_label()])
            .inc();
    }

    /// The counter, for reading its name and labels (and what it counted, in tests).
    pub fn counter(&self) -> &IntCounterVec {
        &self.counter
    }
}

/// Checks a binary's table of its error's labels (for its tests): each error of `cases` has the
/// label beside it, every label is snake_case, no two are the same, and `listed` (the binary's
/// list of every label) names them all, in the order of `cases`.
pub fn check_labels<E: MetricLabel + std::fmt::Debug>(
    cases: &[(E, &'static str)],
    listed: &[&str],
) {
    for (error, label) in cases {
        assert_eq!(error.metric_label(), *label, "{error:?}");
        assert!(
            label.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{label} is not snake_case"
        );
    }
    let labels: Vec<&str> = cases.iter().map(|(_, label)| *label).collect();
    assert_eq!(
        labels, listed,
        "the list names every variant's label, in order"
    );
    let distinct: std::collections::BTreeSet<&str> = labels.iter().copied().collect();
    assert_eq!(distinct.len(), labels.len(), "two variants share a label");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    enum Failed {
        Read,
        Write,
    }

    impl MetricLabel for Failed {
        fn metric_label(&self) -> &'static str {
            match self {
                Failed::Read => "read",
                Failed::Write => "write",
            }
        }
    }

    #[test]
    fn a_failure_is_counted_under_its_label_only() {
        let registry = Registry::new();
        let failures = Failures::<Failed>::register(&registry, "test_failures_total", "Failures.")
            .expect("registers");
        failures.count(&Failed::Read);
        failures.clone().count(&Failed::Read);
        let counted = |label: &str| failures.counter().with_label_values(&[label]).get();
        assert_eq!((counted("read"), counted("write")), (2, 0));
        let families = registry.gather();
        assert_eq!(families.len(), 1);
        assert_eq!(families[0].name(), "test_failures_total");
    }

    #[test]
    fn a_table_of_labels_is_checked_whole() {
        check_labels(
            &[(Failed::Read, "read"), (Failed::Write, "write")],
            &["read", "write"],
        );
        let twice = std::panic::catch_unwind(|| {
            check_labels(
                &[(Failed::Read, "read"), (Failed::Read, "read")],
                &["read", "read"],
            )
        });
        assert!(twice.is_err(), "a label given twice is caught");
    }
}
