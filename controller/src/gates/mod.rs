//! The rollout gates' I/O (the decisions are `baton_core::gates`, composed into a pass by
//! `baton_core::pass`): [`calls`] runs health check queries beside the reconciles and makes hook
//! calls, within the operator's bounds ([`egress`]); [`health`] reads a `RolloutHealthCheck` for
//! a pass and runs the checks a pass starts; [`prometheus`] is the Prometheus client, [`web`]
//! a web check's calls and [`job`] a Job check's Job; [`store`] writes the
//! gate's state; [`metrics`] counts what gates hold groups for.

pub mod calls;
pub mod egress;
pub mod health;
pub mod job;
pub mod metrics;
pub mod prometheus;
pub mod store;
pub mod web;
