//! Group scaling carried out: the executor ([`execute::Scaler`]) that the group reconcile runs
//! beside the rollout. It reads the mirrored references, lets `baton_core::scaling::pass`
//! decide the pass (leader/follower zones, mirroring, delayed downscale, the zone tracker's
//! repair, the follow-up of approved downscales), and carries its effects out: `/scale`, the
//! pods' endpoints, the records, the Events.
//!
//! What fails in a pass (a `/scale` write, a downscale's follow-up) is told, and handed back
//! to the reconcile as [`Error`](crate::error::Error)s, which counts them.

pub mod execute;

pub use execute::Scaler;
