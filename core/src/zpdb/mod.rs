//! Zone-aware pod disruption budgets (`ZoneAwarePodDisruptionBudget`, the Go operator's CRD):
//! the resource, its validation, the eviction decision and the record of allowed evictions.
//! Both binaries judge with it: the webhook answers the Eviction API with it, and the rollout
//! controller consults the same decision before it deletes a pod.
//!
//! Pure: nothing here calls the API.

pub mod decide;
pub mod record;
pub mod spec;

pub use decide::{
    AllowReason, AllowedEviction, DenyReason, EvictionSnapshot, RecentlyAllowed, Unavailable,
    Verdict, decide, decide_rollout_deletion,
};
pub use spec::{
    Budget, FieldError, InvalidBudget, MaxUnavailable, Observed, Partition,
    ZoneAwarePodDisruptionBudget, ZpdbSpec,
};

#[cfg(test)]
mod tests;
