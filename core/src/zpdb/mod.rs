//! Zone-aware pod disruption budgets (`ZoneAwarePodDisruptionBudget`, the Go operator's CRD):
//! the resource, its validation, the eviction decision, a rollout deletion judged against the
//! budgets, and the record of allowed evictions.
//! Both binaries judge with it: the webhook answers the Eviction API with it, and the rollout
//! controller consults the same decision before it deletes a pod.
//!
//! Pure: nothing here calls the API.

pub mod decide;
pub mod members;
pub mod record;
pub mod rollout_deletion;
pub mod spec;

pub use decide::{
    AllowReason, AllowedEviction, DenyReason, EvictionSnapshot, EvictionVerdict, RecentlyAllowed,
    Unavailable, decide, decide_rollout_deletion,
};
pub use rollout_deletion::{Deletion, Judgement, Known, View, judge};
pub use spec::{
    Budget, FieldError, InvalidBudget, MaxUnavailable, Observed, Partition,
    ZoneAwarePodDisruptionBudget, ZpdbSpec,
};

#[cfg(test)]
mod tests;
