//! The status page (`GET /ui/status`) and its JSON (`GET /api/v1/status`): where each group
//! stands, why it waits and since when, what was done — what Events tell one at a time, in one
//! place.
//!
//! Why it looks like this: every replica runs the watches, so every replica can answer from its
//! own caches with the planner's own code (`baton_core::status::view`, pure) — the page never
//! disagrees with what the controller would do, and a standby answers too. What the caches
//! cannot tell (since when a group waits, which pods were deleted) the leader records as it
//! reconciles ([`board`]); a standby says it is one and names the leader.
//!
//! - [`board`]: the leader's per-group memory (since when a group waits, its last actions);
//! - [`html`]: the page, server-rendered, every cluster string escaped;
//! - [`warnings`]: a group's warnings on the page (bad annotation values);
//! - [`routes`]: the two routes on the ops server, the only I/O (the caches, the Lease).

pub mod board;
pub mod html;
pub mod routes;
pub mod warnings;

pub use board::StatusBoard;
pub use routes::{Source, StatusRoutes};
