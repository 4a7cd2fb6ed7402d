//! Group scaling carried out: the executor ([`execute::Scaler`]) that the group reconcile runs
//! beside the rollout. It reads the mirrored references, plans with `baton_core::scaling`
//! (leader/follower zones, mirroring, delayed downscale), writes `/scale`, calls pods and
//! tells people.

pub mod execute;

pub use execute::Scaler;

/// A `/scale` write failed (refused by an admission webhook, or the API's error).
pub const SCALE_WRITE: &str = "scale_write";
/// Following up a downscale prepare-downscale approved failed (a conflict, a timeout).
pub const DOWNSCALE_FOLLOW_UP: &str = "downscale_follow_up";
/// Every `error` label a scaling pass reports.
pub const SCALING_ERRORS: [&str; 2] = [SCALE_WRITE, DOWNSCALE_FOLLOW_UP];
