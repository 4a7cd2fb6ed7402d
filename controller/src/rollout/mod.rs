//! Group rollouts: a pure planner and the Kubernetes calls that carry out its actions.
//!
//! The controller builds a [`GroupSnapshot`] per group from its caches
//! ([`GroupSnapshot::from_kubernetes`]), calls [`plan()`] and carries out [`Plan::actions`].

pub mod plan;
pub mod snapshot;

pub use plan::{
    Action, Plan, PodRevision, Progress, Unavailable, UnavailablePod, WaitReason, Warning, plan,
    replacement_note,
};
pub use snapshot::{
    GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy, selector_matches,
};

pub mod execute;
pub mod pending;
pub mod reconcile;
