//! Group scaling: leader/follower zones, replica mirroring from a reference resource, delayed
//! downscale. A pure planner ([`plan::plan`], [`delayed_downscale::decide`]) and a thin
//! executor ([`execute::Scaler`]) that the group reconcile runs beside the rollout.

pub mod delayed_downscale;
pub mod execute;
pub mod plan;
pub mod snapshot;

pub use execute::Scaler;
pub use plan::{Finding, FindingKind, ScalingAction, ScalingPlan, ScalingSnapshot, plan};

/// A `/scale` write failed (refused by an admission webhook, or the API's error).
pub const SCALE_WRITE: &str = "scale_write";
/// Following up a downscale prepare-downscale approved failed (a conflict, a timeout).
pub const DOWNSCALE_FOLLOW_UP: &str = "downscale_follow_up";
/// Every `error` label a scaling pass reports.
pub const SCALING_ERRORS: [&str; 2] = [SCALE_WRITE, DOWNSCALE_FOLLOW_UP];
