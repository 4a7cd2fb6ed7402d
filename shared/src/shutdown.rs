//! One shutdown signal for the whole process: SIGTERM or SIGINT cancel a token that every task
//! watches. A second signal ends the process at once: whoever sends it (a person pressing
//! Ctrl-C again, a supervisor out of patience) does not want to wait for the graceful stop.

use tokio_util::sync::CancellationToken;

/// Exit code of a process stopped by a second signal before its graceful stop finished.
pub const FORCED_EXIT_CODE: i32 = 1;

/// A token cancelled on the first SIGTERM or SIGINT; the second one exits the process with
/// [`FORCED_EXIT_CODE`].
pub fn on_signal() -> std::io::Result<CancellationToken> {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let cancel = token.clone();
    tokio::spawn(async move {
        let mut received = async || {
            tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            }
        };
        let name = received().await;
        tracing::info!(
            signal = name,
            "shutting down; a second signal stops at once"
        );
        cancel.cancel();
        let name = received().await;
        tracing::warn!(
            signal = name,
            "second signal: exiting without finishing the graceful stop"
        );
        std::process::exit(FORCED_EXIT_CODE);
    });
    Ok(token)
}
