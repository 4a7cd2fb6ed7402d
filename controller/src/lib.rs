//! baton-controller as a library: the pure rollout planner and the thin Kubernetes layer
//! around it. The binary in `main.rs` only wires them together.

pub mod leader;
pub mod rollout;
