//! Group scaling decided: leader/follower zones, replica mirroring from a reference resource,
//! delayed downscale. [`snapshot`] builds the whole input, [`plan::plan`] decides the one replica
//! change of a pass, [`delayed_downscale::decide`] whether a delayed downscale may go on. The
//! controller's `scaling` module reads the references, carries the plan out and tells people.

pub mod delayed_downscale;
pub mod plan;
pub mod snapshot;

pub use plan::{Finding, FindingKind, ScalingAction, ScalingPlan, ScalingSnapshot, plan};
