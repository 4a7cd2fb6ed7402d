//! What both baton binaries (and `kubectl baton`) need at run time: watches into caches,
//! records read and claimed through the API server, calls to pods, the operations server, TLS
//! and process plumbing. The concepts and decisions with no I/O live in `baton_core`; here is
//! only what reaches the API server, a pod or a socket.
//!
//! # Module map
//!
//! | module | owns |
//! |---|---|
//! | [`reflect`] | a watch into a kube-runtime store of whole objects, with what a change concerns handed to the caller |
//! | [`index`] | a watch into an index of one's own form (relists given whole, each object converted as it arrives) |
//! | [`fanout`] | one cluster-wide watch of a kind routed to each namespace served, as if each had its own |
//! | [`pod_cache`] | the namespace's pods as `baton_core::pods::CachedPod`, an [`index`] |
//! | [`zpdb_cache`] | the namespace's zone-aware disruption budgets, watched and parsed once per version, an [`index`] both binaries judge with |
//! | [`ledger`] | reading and conditionally writing a record, and the one claim loop every racing writer uses |
//! | [`downscale_history`] | reading the Go operator's zone tracker and writing one entry of it |
//! | [`pod_client`] | the bounded, measured HTTP client for calls to pods |
//! | [`kube_client`] | the instrumented Kubernetes client, bounded calls, the watch backoff |
//! | [`members`] | member clusters reached from kubeconfig Secrets, followed as the Secrets change, and who is reachable |
//! | [`failures`] | a binary's one failures counter, labelled by its error type's `metric_label()` |
//! | [`initial_list`] | how every watch fills its cache at start: streaming, or listing when the API server refuses it |
//! | `http_server`, `ops_server` | the actix servers (`server` feature): draining in order, `/metrics`, `/ready`, `/live` |
//! | [`supervisor`], [`shutdown`] | every task critical, named; the shutdown signal |
//! | [`cli`], [`telemetry`], [`crypto`] | the command line, logs and traces, the one rustls crypto provider |
//!
//! # From a watch to a decision
//!
//! A binary starts a watch per kind ([`reflect`] or [`index`], one line each); each change
//! updates its cache and tells the binary what it concerns (a group to reconcile, a counter, a
//! writer to wake). Decisions then read the caches, and what they claim goes through [`ledger`]
//! (conditional writes, judged again on conflict).

pub mod cli;
pub mod crypto;
pub mod downscale_history;
pub mod failures;
pub mod fanout;
#[cfg(feature = "server")]
pub mod http_server;
pub mod index;
pub mod initial_list;
pub mod kube_client;
pub mod ledger;
pub mod members;
#[cfg(feature = "server")]
pub mod ops_server;
pub mod pod_cache;
pub mod pod_client;
pub mod rate_limit;
pub mod reflect;
pub mod shutdown;
pub mod supervisor;
pub mod telemetry;
pub mod zpdb_cache;
