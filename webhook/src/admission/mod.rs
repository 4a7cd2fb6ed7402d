//! The admission webhooks' reviews, decoded into what `baton_core::admission` judges, and its
//! verdicts mapped to answers. The decisions are the core's; what a review needs from the
//! cluster is elsewhere: [`crate::server`] routes each review to its webhook and encodes the
//! answer, [`crate::parents`] and [`crate::evictions`] hold the watch caches (and the eviction's
//! claim), and prepare-downscale's reads, claims and pod calls are its `flow`.
//!
//! - [`review`]: an AdmissionReview decoded (both versions), the answer encoded;
//! - [`object`]: the few fields of a workload or its `Scale` that the webhooks read;
//! - one module a webhook path: [`no_downscale`], [`prepare_downscale`], [`zpdb_reviews`]
//!   (pod-eviction and zpdb-validation), [`state_guard`];
//! - [`decision`]: a verdict as an answer ([`Decision`]), `webhook.allow_on_error` applied.

pub mod decision;
pub mod no_downscale;
pub mod object;
pub mod prepare_downscale;
pub mod review;
pub mod state_guard;
pub mod zpdb_reviews;

pub use decision::{Decision, Outcome};
