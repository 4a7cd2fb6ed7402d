//! Runs a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) for
//! baton's tests and demo. Prints one JSON line describing it, then runs until SIGINT/SIGTERM
//! (or, with `--until-stdin-closes`, until its parent goes away).

use std::process::ExitCode;

use baton_e2e::control_plane::supervisor::{self, Assets, Audience, StopWhen};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "baton-control-plane",
    about = "A local Kubernetes control plane for baton's tests"
)]
struct Cli {
    /// Stop when stdin closes, so the control plane never outlives the test process that started it.
    #[arg(long)]
    until_stdin_closes: bool,
    /// Folder of the etcd, kube-apiserver and kube-controller-manager to run (what
    /// tests/control-plane/install.sh prints); default: KUBEBUILDER_ASSETS, else its cache.
    #[arg(long)]
    assets: Option<std::path::PathBuf>,
    /// Serve the pods of real nodes too: listen on every address, advertise this machine's,
    /// give pods their service account's token (tests/control-plane/README.md).
    #[arg(long)]
    for_real_nodes: bool,
}

fn main() -> ExitCode {
    baton_shared::crypto::install_default_provider();
    let cli = Cli::parse();
    let stop_when = if cli.until_stdin_closes {
        StopWhen::StdinClosesOrSignal
    } else {
        StopWhen::Signal
    };
    // One thread: children are started with a parent-death signal tied to the starting
    // thread, which must live as long as they do.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("baton-control-plane: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let assets = match &cli.assets {
            Some(dir) => Assets::in_dir(dir)?,
            None => Assets::locate()?,
        };
        let audience = if cli.for_real_nodes {
            Audience::Pods
        } else {
            Audience::Host
        };
        supervisor::run(assets, stop_when, audience).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("baton-control-plane: {error:#}");
            ExitCode::FAILURE
        }
    }
}
