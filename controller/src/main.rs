//! baton-controller: the leader-elected controller that rolls StatefulSets of a rollout group
//! zone by zone.

use std::process::ExitCode;

use baton_shared::cli::{ConfigArgs, Startup};
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
    let config = match cli.config.startup() {
        Ok(Startup::Run(config)) => config,
        Ok(Startup::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("baton-controller: {error}");
            return ExitCode::from(2);
        }
    };
    baton_shared::telemetry::init(&config.log);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("baton-controller: starting the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let shutdown = baton_shared::shutdown::on_signal()?;
        baton_controller::app::run(*config, shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "baton-controller stopped");
            ExitCode::FAILURE
        }
    }
}
