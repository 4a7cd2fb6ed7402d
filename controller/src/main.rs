//! baton-controller: the leader-elected controller that rolls StatefulSets of a rollout group
//! zone by zone.

use std::process::ExitCode;

fn main() -> ExitCode {
    baton_shared::cli::main(
        "baton-controller",
        "Zone-by-zone rollouts for StatefulSets",
        |config| async move {
            let shutdown = baton_shared::shutdown::on_signal()?;
            baton_controller::app::run(config, shutdown).await
        },
    )
}
