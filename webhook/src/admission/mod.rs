//! The admission webhooks. Each decision is a plain function of what was read; the HTTP
//! handlers in `server.rs` only decode, call and encode.

pub mod budgets;
pub mod decision;
pub mod no_downscale;
pub mod object;
pub mod prepare_downscale;
pub mod review;
pub mod state_guard;

pub use decision::{Decision, Outcome};
