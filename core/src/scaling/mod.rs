//! Group scaling decided: leader/follower zones, replica mirroring from a reference resource,
//! delayed downscale, the follow-up of approved downscales. [`snapshot`] builds the whole input,
//! [`plan::plan`] decides the one replica change of a pass, [`delayed_downscale::decide`] whether
//! a delayed downscale may go on, and [`pass`] composes them into the ordered effects of a
//! pass. The controller's `scaling` module reads what a pass needs and carries its effects out.

pub mod delayed_downscale;
pub mod pass;
pub mod plan;
pub mod snapshot;

pub use plan::{Finding, FindingKind, ScalingAction, ScalingPlan, ScalingSnapshot, plan};
