//! What both baton binaries need: annotation keys and their parsing, Kubernetes helpers, the
//! operations server, TLS and process plumbing.

pub mod annotations;
pub mod cli;
pub mod crypto;
pub mod downscale_history;
pub mod duration;
pub mod http_server;
pub mod index;
pub mod kube_client;
pub mod ledger;
pub mod ops_server;
pub mod pod_cache;
pub mod pod_client;
pub mod pods;
pub mod reflect;
pub mod shutdown;
pub mod statefulset;
pub mod supervisor;
pub mod telemetry;
pub mod zpdb;
