//! baton's pure core: the concepts its decisions read, with no I/O. Cargo keeps it pure: this
//! crate cannot reach a kube client, tokio, HTTP or TLS, because it does not depend on them.
//!
//! | module | what |
//! |---|---|
//! | [`clock`] | how far apart clocks may be before a recorded time is not believed |
//! | [`annotations`] | the labels and annotations of the contract with the Go operator's users, and their parsing |
//! | [`duration`] | the two duration syntaxes users write (Go's and Prometheus') |
//! | [`pods`] | a pod as decisions read it ([`pods::CachedPod`]), readiness, ownership |
//! | [`statefulset`] | a StatefulSet's replicas and ordinals as decisions read them |
//! | [`budgets`] | zone-aware disruption budgets: the CRD, its validation, the eviction decision, the record of allowed evictions |
//! | [`ledger`] | records replicas claim things in (the downscale ledger, the budgets' eviction records) as decisions read and change them |
//! | [`downscale_history`] | when each StatefulSet was last downscaled, from the ledger, the Go operator's zone tracker and the annotation |
//! | [`lease`] | leader election: what a candidate does next from what it has seen of the Lease, on its own clock |
//! | [`certificates`] | the webhook's serving certificate and CA: what to write next and when, rotation included |
//! | [`pod_address`] | how baton addresses a pod it calls (DNS name or IP) and builds the URL |
//! | [`scaling`] | leader/follower zones, replica mirroring and delayed downscale: the snapshot and the plan |
//! | [`rollout`] | the rollout snapshot and the planner: which pods may go now |
//! | [`gates`] | soak, ramp, halt, health checks and hooks as gates on the plan: whether they may go now |
//! | [`status`] | a group's status as people read it, from the snapshot, the plan and the gates |

pub mod annotations;
pub mod budgets;
pub mod certificates;
pub mod clock;
pub mod downscale_history;
pub mod duration;
pub mod gates;
pub mod lease;
pub mod ledger;
pub mod pod_address;
pub mod pods;
pub mod rollout;
pub mod scaling;
pub mod statefulset;
pub mod status;
