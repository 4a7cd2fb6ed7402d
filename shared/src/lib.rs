//! What both baton binaries need at run time: watches into caches and indexes, records in
//! ConfigMaps, the pod client, the operations server, TLS and process plumbing. The concepts
//! and decisions with no I/O live in `baton_core`.

pub mod budgets;
pub mod cli;
pub mod crypto;
pub mod downscale_history;
#[cfg(feature = "server")]
pub mod http_server;
pub mod index;
pub mod kube_client;
pub mod ledger;
#[cfg(feature = "server")]
pub mod ops_server;
pub mod pod_cache;
pub mod pod_client;
pub mod reflect;
pub mod shutdown;
pub mod supervisor;
pub mod telemetry;
