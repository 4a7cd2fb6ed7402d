//! baton-webhook as a library: the Kubernetes and HTTP layers around the admission decisions
//! of `baton_core::admission`. The binary in `main.rs` only wires them together; tests and benches use
//! the pieces directly.
//!
//! # Module map
//!
//! | module | owns |
//! |---|---|
//! | [`server`] | the TLS server: routes, request limits, decoding a review and encoding its answer (handlers only map) |
//! | [`budget`] | the bytes of request bodies held at once, and each client address's share of them |
//! | [`admission`] | decoding reviews into what `baton_core::admission` judges (no-downscale, prepare-downscale with its flow and the per-group ledger, the zone-aware disruption budget webhooks, the state guard), and mapping its verdicts to answers |
//! | [`statefulsets`] | the one watch of the namespace's StatefulSets, decoded slim, that [`parents`] and [`evictions`] both read |
//! | [`parents`] | watch caches answering a `/scale` request's parent labels without an API call |
//! | [`evictions`] | the watch caches of budgets and (from the first budget on) pods behind `/admission/pod-eviction`, the pods by StatefulSet the decision counts, and claiming an eviction in the budget's record |
//! | [`member_pods`] | the pods and StatefulSets of the other member clusters (`webhook.clusters`), watched for the eviction decision across members, with whether each member can be trusted now |
//! | [`members`] | the member clusters (`webhook.clusters`): a client per member from its kubeconfig Secret, or why it cannot be reached |
//! | [`tls_reload`] | the serving certificate, reloaded when its files change |
//! | [`metrics`] | the webhook's metrics |
//! | [`error`] | the webhook's one error type ([`error::Error`], each variant named after the failing step, with its `metric_label()`) and `baton_webhook_failures_total`, counted by it |
//!
//! # From a request to an answer
//!
//! The API server POSTs an AdmissionReview → [`server`] checks and decodes it
//! ([`admission::review`]) into a downscale, an eviction or a state change → the core's
//! decision of its path judges it with what the watch caches say ([`parents`],
//! [`evictions`]); prepare-downscale also calls the pods going away and records the downscale
//! in the group's ledger, and an allowed eviction is claimed in the budget's record, both with
//! resourceVersion-conditioned writes so that replicas never approve together what only one
//! may → the verdict becomes an answer ([`admission::Decision::of`], where
//! `webhook.allow_on_error` decides what could not be judged) and goes back in the review's
//! version. Shutdown turns `/ready` false first and keeps serving for
//! `webhook.shutdown_delay`.

pub mod admission;
pub mod budget;
pub mod error;
pub mod evictions;
pub mod member_pods;
pub mod members;
pub mod metrics;
pub mod parents;
pub mod server;
pub mod statefulsets;
pub mod tls_reload;
