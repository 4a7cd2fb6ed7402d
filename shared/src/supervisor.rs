//! The critical tasks of a binary, supervised alike in both. Each task is spawned under a name
//! of the binary's own (an enum, not a string), and every task is critical: one that ends
//! before shutdown — with an error, a panic, or at all — is a failure that stops the process
//! (Kubernetes restarts it) rather than letting it run with a part missing. At shutdown the
//! tasks get a grace period, then are aborted. A binary that must drain one task before the
//! others (the webhook's server) waits for it by name.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use anyhow::anyhow;
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

/// The critical tasks of one process.
pub struct Supervisor<T> {
    tasks: JoinSet<anyhow::Result<()>>,
    names: HashMap<Id, T>,
}

impl<T: Copy + Eq + fmt::Display> Default for Supervisor<T> {
    fn default() -> Self {
        Self {
            tasks: JoinSet::new(),
            names: HashMap::new(),
        }
    }
}

impl<T: Copy + Eq + fmt::Display> Supervisor<T> {
    /// Runs `work` as the task `name`.
    pub fn spawn<F>(&mut self, name: T, work: F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let handle = self.tasks.spawn(work);
        self.names.insert(handle.id(), name);
    }

    /// Waits until `shutdown` is cancelled (`None`) or a task ends first, which is a failure
    /// (`Some`, naming the task). The caller decides how to stop; nothing is cancelled here.
    pub async fn until_failure(&mut self, shutdown: &CancellationToken) -> Option<anyhow::Error> {
        tokio::select! {
            // Shutdown first: once it is cancelled, tasks end because of it (the group queue
            // the moment its senders go), and a random pick would call that a failure (exit 1
            // on a clean SIGTERM).
            biased;
            () = shutdown.cancelled() => None,
            ended = self.tasks.join_next_with_id() => Some(match ended {
                Some(ended) => {
                    let (_, label, result) = self.name(ended);
                    match result {
                        Ok(()) => anyhow!("{label} stopped unexpectedly"),
                        Err(error) => error,
                    }
                }
                None => anyhow!("no task was started"),
            }),
        }
    }

    /// Waits at most `timeout` for the task `name` to end; returns whether it did. Other tasks
    /// ending meanwhile are joined; their errors are logged.
    pub async fn wait_for(&mut self, name: T, timeout: Duration) -> bool {
        let found = async {
            while let Some(ended) = self.tasks.join_next_with_id().await {
                let (task, label, result) = self.name(ended);
                if let Err(error) = result {
                    tracing::error!(task = %label, error = format!("{error:#}"), "task failed while stopping");
                }
                if task == Some(name) {
                    return true;
                }
            }
            false
        };
        tokio::time::timeout(timeout, found).await.unwrap_or(false)
    }

    /// Gives the remaining tasks `grace` to end (the caller has told them to), then aborts the
    /// rest. Returns the first failure among them: an error or a panic while stopping.
    pub async fn stop(mut self, grace: Duration) -> Option<anyhow::Error> {
        let mut first_failure = None;
        let deadline = tokio::time::sleep(grace);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                ended = self.tasks.join_next_with_id() => {
                    let Some(ended) = ended else { break };
                    let (_, label, result) = self.name(ended);
                    if let Err(error) = result {
                        tracing::error!(task = %label, error = format!("{error:#}"), "task failed while stopping");
                        first_failure.get_or_insert(error);
                    }
                }
                () = &mut deadline => {
                    let remaining: Vec<String> =
                        self.names.values().map(ToString::to_string).collect();
                    tracing::warn!(?remaining, "tasks did not stop in time; aborting them");
                    self.tasks.abort_all();
                    while self.tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
        first_failure
    }

    /// Which task ended (if it was spawned here), how to call it in a message, and its outcome
    /// with a panic or a cancellation as an error.
    fn name(
        &mut self,
        ended: Result<(Id, anyhow::Result<()>), JoinError>,
    ) -> (Option<T>, String, anyhow::Result<()>) {
        let id = match &ended {
            Ok((id, _)) => *id,
            Err(error) => error.id(),
        };
        let task = self.names.remove(&id);
        let label = task.map_or_else(|| "a task".to_owned(), |task| task.to_string());
        let result = match ended {
            Ok((_, result)) => result.map_err(|error| error.context(label.clone())),
            Err(error) => {
                let what = if error.is_panic() {
                    "panicked"
                } else {
                    "was cancelled"
                };
                Err(anyhow!("{label} {what}: {error}"))
            }
        };
        (task, label, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Task {
        Server,
        Cache,
        Reloader,
    }

    impl fmt::Display for Task {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(match self {
                Task::Server => "server",
                Task::Cache => "cache",
                Task::Reloader => "reloader",
            })
        }
    }

    fn until(token: &CancellationToken) -> impl Future<Output = anyhow::Result<()>> + use<> {
        let token = token.clone();
        async move {
            token.cancelled().await;
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_task_ending_before_shutdown_is_a_failure_naming_it() {
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Task::Server, until(&shutdown));
        supervisor.spawn(Task::Cache, async { Ok(()) });

        let failure = supervisor
            .until_failure(&shutdown)
            .await
            .expect("a failure");

        assert_eq!(failure.to_string(), "cache stopped unexpectedly");
        shutdown.cancel();
        assert!(supervisor.stop(Duration::from_secs(1)).await.is_none());
    }

    /// A task that ends because of the shutdown is no failure, however the two are polled
    /// (the unbiased select picked the task about half of the time).
    #[tokio::test]
    async fn a_task_ending_with_the_shutdown_is_not_a_failure() {
        for _ in 0..200 {
            let shutdown = CancellationToken::new();
            let mut supervisor = Supervisor::default();
            supervisor.spawn(Task::Cache, until(&shutdown));
            shutdown.cancel();
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            assert!(supervisor.until_failure(&shutdown).await.is_none());
        }
    }

    #[tokio::test]
    async fn errors_and_panics_name_their_task() {
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Task::Reloader, async { Err(anyhow!("the file is gone")) });
        let failure = supervisor.until_failure(&shutdown).await.unwrap();
        assert_eq!(format!("{failure:#}"), "reloader: the file is gone");

        let mut supervisor = Supervisor::default();
        supervisor.spawn(Task::Cache, async { panic!("bug") });
        let failure = supervisor.until_failure(&shutdown).await.unwrap();
        assert!(
            failure.to_string().starts_with("cache panicked"),
            "{failure}"
        );
    }

    #[tokio::test]
    async fn shutdown_waits_for_one_task_by_name_then_stops_the_rest() {
        let (shutdown, serving, background) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Task::Server, until(&serving));
        supervisor.spawn(Task::Cache, until(&background));
        supervisor.spawn(Task::Reloader, std::future::pending());
        shutdown.cancel();
        assert!(supervisor.until_failure(&shutdown).await.is_none());

        assert!(
            !supervisor
                .wait_for(Task::Server, Duration::from_millis(50))
                .await,
            "the server has not been told to stop"
        );
        serving.cancel();
        assert!(
            supervisor
                .wait_for(Task::Server, Duration::from_secs(1))
                .await
        );
        background.cancel();
        // The reloader never ends: aborted after the grace period, which is no failure.
        assert!(supervisor.stop(Duration::from_millis(50)).await.is_none());
    }

    #[tokio::test]
    async fn an_error_while_stopping_is_reported() {
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::default();
        let token = shutdown.clone();
        supervisor.spawn(Task::Server, async move {
            token.cancelled().await;
            Err(anyhow!("could not release the lease"))
        });
        shutdown.cancel();
        assert!(supervisor.until_failure(&shutdown).await.is_none());
        let failure = supervisor.stop(Duration::from_secs(1)).await.unwrap();
        assert_eq!(
            format!("{failure:#}"),
            "server: could not release the lease"
        );
    }
}
