//! Runs the real nodes of baton's end-to-end tests (a containerd and a kubelet per zone, and a
//! kube-scheduler) against a running control plane. Prints one JSON line describing them once
//! every node is Ready, then runs until its stdin closes (its parent, a test process, is gone)
//! or SIGINT/SIGTERM; cleans up what the pods left either way.

use std::path::PathBuf;
use std::process::ExitCode;

use baton_e2e::real_nodes::supervisor::{self, DEFAULT_ROOT, NodeAssets, NodesConfig};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "baton-real-nodes",
    about = "Real kubelets, containerd and kube-scheduler for baton's tests"
)]
struct Cli {
    /// Kubeconfig of a cluster admin of the control plane the nodes join.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// An image archive (docker-archive tarball) to import into every node; repeatable.
    #[arg(long = "image")]
    images: Vec<PathBuf>,
    /// The nodes' state folder; what an earlier run left there is removed first.
    #[arg(long, env = "E2E_REAL_NODES_DIR", default_value = DEFAULT_ROOT)]
    root: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One thread: children are started with a parent-death signal tied to the starting
    // thread, which must live as long as they do.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("baton-real-nodes: {error}");
            return ExitCode::FAILURE;
        }
    };
    baton_shared::crypto::install_default_provider();
    let result = runtime.block_on(async {
        supervisor::require_root()?;
        let assets = NodeAssets::locate()?;
        supervisor::run(
            assets,
            NodesConfig {
                kubeconfig: cli.kubeconfig,
                images: cli.images,
                root: cli.root,
            },
        )
        .await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("baton-real-nodes: {error:#}");
            ExitCode::FAILURE
        }
    }
}
