//! The admission webhooks: each review decoded into what `baton_core::admission` judges, and
//! its verdict mapped to an answer ([`Decision`]); the HTTP handlers in `server.rs` only
//! decode, call and encode.

pub mod decision;
pub mod no_downscale;
pub mod object;
pub mod prepare_downscale;
pub mod review;
pub mod state_guard;
pub mod zpdb_reviews;

pub use decision::{Decision, Outcome};
