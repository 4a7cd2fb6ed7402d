//! baton-webhook as a library: the pure admission decisions, the thin Kubernetes and HTTP
//! layers around them. The binary in `main.rs` only wires them together; tests and benches use
//! the pieces directly.

pub mod admission;
pub mod evictions;
pub mod metrics;
pub mod parents;
pub mod server;
pub mod tls_reload;
