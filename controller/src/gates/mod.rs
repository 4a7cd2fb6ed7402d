//! The rollout gates' I/O (the decision is `baton_core::gates`): [`calls`] runs health check
//! queries beside the reconciles and makes hook calls, within the operator's bounds
//! ([`egress`]); [`health`] reads a `RolloutHealthCheck` and its Secrets and evaluates a group's
//! gates; [`prometheus`] is the client; [`store`] writes the gate's state; [`explain`] tells
//! people; [`metrics`] counts what gates hold groups for.

pub mod calls;
pub mod egress;
pub mod explain;
pub mod health;
pub mod metrics;
pub mod prometheus;
pub mod store;
