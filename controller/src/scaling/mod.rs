//! Group scaling carried out: the executor ([`execute::Scaler`]) that the group reconcile runs
//! beside the rollout. It reads the mirrored references, lets `baton_core::scaling::pass`
//! decide the pass (leader/follower zones, mirroring, delayed downscale, the zone tracker's
//! repair, the follow-up of approved downscales), and carries its effects out: `/scale`, the
//! pods' endpoints, the records, the Events.

pub mod execute;

pub use execute::Scaler;

/// A `/scale` write failed (refused by an admission webhook, or the API's error).
pub const SCALE_WRITE: &str = "scale_write";
/// Following up a downscale prepare-downscale approved failed (a conflict, a timeout).
pub const DOWNSCALE_FOLLOW_UP: &str = "downscale_follow_up";
/// Every `error` label a scaling pass reports.
pub const SCALING_ERRORS: [&str; 2] = [SCALE_WRITE, DOWNSCALE_FOLLOW_UP];
