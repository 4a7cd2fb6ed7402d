//! Group scaling: leader/follower zones, replica mirroring from a reference resource, delayed
//! downscale. A pure planner ([`plan::plan`], [`delayed_downscale::decide`]) and a thin
//! executor ([`execute::Scaler`]) that the group reconcile runs beside the rollout.

pub mod delayed_downscale;
pub mod execute;
pub mod plan;
pub mod snapshot;

pub use execute::Scaler;
pub use plan::{Action, Finding, FindingKind, ScalingPlan, ScalingSnapshot, plan};
