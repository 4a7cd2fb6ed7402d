//! End-to-end test support for baton: a real local Kubernetes control plane, a pod simulator
//! standing in for the kubelet (fast, any size) or real nodes (kubelets, containerd and a
//! scheduler, for what only real pods show), fixtures and process helpers. Nothing here mocks
//! what the API server can do for real.

pub mod admission_load;
pub mod baton_image;
pub mod bench_support;
pub mod browser;
pub mod certificate_support;
pub mod cluster_evictions;
pub mod cluster_setup;
pub mod cluster_support;
pub mod control_plane;
pub mod controller_support;
pub mod crds;
pub mod downscale_support;
pub mod fixtures;
pub mod go_operator;
pub mod http_support;
pub mod install_docs;
pub mod keys;
pub mod load_balancer;
pub mod manifests;
pub mod namespace;
pub mod plugin_support;
pub mod pod_simulator;
pub mod process;
pub mod prometheus_support;
pub mod rbac_support;
pub mod real_nodes;
pub mod recording_tls;
pub mod renders;
pub mod reviews;
pub mod scaling_support;
pub mod scene;
pub mod shard_support;
pub mod slow_clients;
pub mod timeline;
pub mod wait;
pub mod webhook_support;
pub mod zpdb_support;

pub use control_plane::ControlPlane;
pub use namespace::TestNamespace;
pub use pod_simulator::{PodEvent, PodSimulator, PodTransition, SimulatorOptions};
pub use process::BatonProcess;
pub use scene::Scene;
pub use wait::{wait_for, wait_until};
