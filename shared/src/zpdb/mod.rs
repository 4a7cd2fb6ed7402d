//! Zone-aware pod disruption budgets (`ZoneAwarePodDisruptionBudget`, the Go operator's CRD):
//! the resource, its validation, and the eviction decision. Here because both binaries judge
//! with it: the webhook answers the Eviction API with it, and the rollout controller is to
//! consult the same decision before it deletes a pod.
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
