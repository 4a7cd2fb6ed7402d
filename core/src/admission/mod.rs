//! Admission decisions on domain types: what an admission judges (a [`downscale`] of a
//! workload or of its `/scale`, an [`eviction`] of a pod, a change to baton's stored
//! [`state`]) and what was read for it (objects, records, `now`), to a typed [`Verdict`].
//!
//! They live in the core rather than in the webhook because they are decisions like the
//! planners': pure, tested on plain data, and one of them (min-time between zones, through
//! [`crate::min_time`]) is the scaling plan's too. The webhook decodes an AdmissionReview into
//! these types, reads what they need from its caches and the API, calls them, and maps the
//! verdict to an answer, applying `webhook.allow_on_error` to [`Verdict::Unjudged`].
//!
//! | module | judges |
//! |---|---|
//! | [`verdict`] | what a decision concludes: allowed, refused (with a stable [`Reason::kind`]), or not judged |
//! | [`downscale`] | a downscale, and the no-downscale label |
//! | [`prepare`] | prepare-downscale: its settings, min-time, the other zones' readiness, the pods to call, and their order with the reads and writes between them ([`prepare::flow`]) |
//! | [`eviction`] | an eviction under zone-aware disruption budgets, and a budget as written |
//! | [`state`] | a change to baton's memory on StatefulSets and to its records |

pub mod downscale;
pub mod eviction;
pub mod prepare;
pub mod state;
pub mod verdict;

pub use verdict::{Allowed, JudgingFailed, Reason, Refusal, Verdict};
