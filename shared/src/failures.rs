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
