//! Running `kubectl baton` (the kubectl-baton binary, built from the workspace) as a person or
//! a deploy pipeline does, and reading what it said.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

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

/// One kubeconfig for a cross-cluster group, written to `path`: a context per member, named for
/// the member (as `--cluster NAME` finds it), from the current context of that member's
/// kubeconfig file (`(name, kubeconfig)`, e.g. each control plane's
/// [`kubeconfig_path`](crate::ControlPlane::kubeconfig_path)). Each context's cluster and user
/// are renamed to the member's name too, since the files of several local control planes all
/// name theirs alike (`baton-test`, `admin`); file paths in them are made absolute. The current
/// context is the first member's.
pub fn write_clusters_kubeconfig(members: &[(&str, &Path)], path: &Path) -> anyhow::Result<()> {
    use serde_json::{Value, json};
    let mut clusters = Vec::new();
    let mut users = Vec::new();
    let mut contexts = Vec::new();
    for (member, kubeconfig) in members {
        let text = std::fs::read_to_string(kubeconfig)
            .with_context(|| format!("reading member {member}'s {}", kubeconfig.display()))?;
        let config: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("member {member}'s {} is YAML", kubeconfig.display()))?;
        let entries = |kind: &str| config[kind].as_array().cloned().unwrap_or_default();
        let named = |kind: &str, name: &str| {
            entries(kind)
                .into_iter()
                .find(|entry| entry["name"] == name)
                .with_context(|| {
                    format!(
                        "member {member}'s {} has no {kind} entry {name}",
                        kubeconfig.display()
                    )
                })
        };
        let current = match config["current-context"].as_str() {
            Some(current) => named("contexts", current)?,
            None => entries("contexts").into_iter().next().with_context(|| {
                format!("member {member}'s {} has no context", kubeconfig.display())
            })?,
        };
        let mut context = current["context"].clone();
        let cluster_name = context["cluster"].as_str().unwrap_or_default().to_owned();
        let mut cluster = named("clusters", &cluster_name)?["cluster"].clone();
        let directory = kubeconfig.parent().unwrap_or(Path::new("/"));
        absolute(&mut cluster, &["certificate-authority"], directory);
        context["cluster"] = json!(member);
        clusters.push(json!({"name": member, "cluster": cluster}));
        if let Some(user_name) = context["user"].as_str().map(str::to_owned) {
            let mut user = named("users", &user_name)?["user"].clone();
            absolute(
                &mut user,
                &["client-certificate", "client-key", "tokenFile"],
                directory,
            );
            context["user"] = json!(member);
            users.push(json!({"name": member, "user": user}));
        }
        contexts.push(json!({"name": member, "context": context}));
    }
    let merged = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
        "current-context": members.first().map(|(member, _)| *member),
    });
    std::fs::write(path, serde_saphyr::to_string(&merged)?)
        .with_context(|| format!("writing {}", path.display()))?;
    // It holds every member's credentials.
    std::fs::set_permissions(
        path,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
    )?;
    Ok(())
}

/// Writes to `path` a kubeconfig whose one context (`down`) reaches nothing
/// (`https://127.0.0.1:1`): a member cluster that cannot be reached.
pub fn write_unreachable_kubeconfig(path: &Path) -> anyhow::Result<()> {
    std::fs::write(
        path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: down\n  cluster:\n    server: https://127.0.0.1:1\n\
         users:\n- name: down\n  user:\n    token: none\ncontexts:\n- name: down\n  context:\n    \
         cluster: down\n    user: down\ncurrent-context: down\n",
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// Makes the relative file paths among `keys` of `entry` relative to `directory`, as kubectl
/// reads them (relative to the file they were written in).
fn absolute(entry: &mut serde_json::Value, keys: &[&str], directory: &Path) {
    for key in keys {
        if let Some(relative) = entry[*key].as_str().filter(|path| !path.starts_with('/')) {
            let path: PathBuf = directory.join(relative);
            entry[*key] = serde_json::json!(path.display().to_string());
        }
    }
}

/// Runs `kubectl-baton args… --cluster NAME…` with one kubeconfig of `members` (see
/// [`write_clusters_kubeconfig`]), as a pipeline does across clusters.
pub async fn kubectl_baton_across(members: &[(&str, &Path)], args: &[&str]) -> Run {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = directory.path().join("members.kubeconfig");
    write_clusters_kubeconfig(members, &kubeconfig).expect("the members' kubeconfig");
    let mut all: Vec<&str> = args.to_vec();
    for (member, _) in members {
        all.extend(["--cluster", member]);
    }
    kubectl_baton(&kubeconfig, &all).await
}

/// `kubectl baton wait GROUP -n NAMESPACE --timeout TIMEOUT --cluster NAME…` across `members`
/// (each `(name, admin kubeconfig)`, the name as the controller's `controller.clusters[].name`):
/// its exit code and what it printed. The zones read `NAME/statefulset`.
pub async fn wait_across(
    members: &[(&str, &Path)],
    namespace: &str,
    group: &str,
    timeout: &str,
) -> Run {
    kubectl_baton_across(
        members,
        &["wait", group, "-n", namespace, "--timeout", timeout],
    )
    .await
}
