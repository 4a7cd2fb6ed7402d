//! baton-controller: the leader-elected controller that rolls StatefulSets of a rollout group
//! zone by zone.

use std::process::ExitCode;

use baton_shared::cli::ConfigArgs;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "baton-controller",
    version,
    about = "Zone-by-zone rollouts for StatefulSets"
)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
}

fn main() -> ExitCode {
    baton_shared::crypto::install_default_provider();
    let cli = Cli::parse();
    baton_shared::cli::run_binary("baton-controller", &cli.config, |config| async move {
        let shutdown = baton_shared::shutdown::on_signal()?;
        baton_controller::app::run(config, shutdown).await
    })
}
