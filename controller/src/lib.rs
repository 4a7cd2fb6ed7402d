//! baton-controller as a library: the pure rollout planner and the thin Kubernetes layer
//! around it. The binary in `main.rs` only wires them together.

pub mod app;
pub mod cache;
pub mod certificates;
pub mod explain;
pub mod gates;
pub mod leader;
pub mod metrics;
pub mod queue;
pub mod rollout;
pub mod scaling;
