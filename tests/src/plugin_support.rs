//! Running `kubectl baton` (the kubectl-baton binary, built from the workspace) as a person or
//! a deploy pipeline does, and reading what it said.

use std::path::Path;
use std::time::Duration;

use crate::process::workspace_binary;

/// What one run of the plugin gave.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Panics with everything the run printed unless it exited with `code`.
    pub fn exited(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "{self:#?}");
        self
    }

    /// Panics unless stdout contains every one of `expected`.
    pub fn says(&self, expected: &[&str]) -> &Self {
        for text in expected {
            assert!(
                self.stdout.contains(text),
                "stdout lacks {text:?}: {self:#?}"
            );
        }
        self
    }

    /// Panics unless stderr contains every one of `expected`.
    pub fn complains(&self, expected: &[&str]) -> &Self {
        for text in expected {
            assert!(
                self.stderr.contains(text),
                "stderr lacks {text:?}: {self:#?}"
            );
        }
        self
    }
}

/// The kubectl-baton binary, built from the workspace if it is not yet.
pub async fn binary() -> std::path::PathBuf {
    tokio::task::spawn_blocking(|| workspace_binary("kubectl-baton"))
        .await
        .expect("the build task")
        .expect("kubectl-baton builds")
}

/// Runs `kubectl-baton args…` with `KUBECONFIG=kubeconfig`, off a terminal (as in a pipeline).
/// `USER` names nobody the API server knows: who the plugin says acted must come from the API
/// server, not from a variable anyone sets.
pub async fn kubectl_baton(kubeconfig: &Path, args: &[&str]) -> Run {
    let mut run = tokio::process::Command::new(binary().await);
    run.args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("USER", "not-the-api-servers-user")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null());
    run_bounded(run, args).await
}

/// Runs `command` (kubectl-baton `args`, possibly through a terminal) to its end and says what
/// it printed. No command here waits longer than its own --timeout (2 minutes at most).
pub async fn run_bounded(mut command: tokio::process::Command, args: &[&str]) -> Run {
    let run = command.kill_on_drop(true).output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .unwrap_or_else(|_| panic!("kubectl-baton {args:?} still running after 180s"))
        .unwrap_or_else(|error| panic!("kubectl-baton {args:?} runs: {error}"));
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
