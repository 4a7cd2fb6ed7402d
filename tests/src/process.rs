//! Workspace binaries started by tests: built once per test process, all in one cargo build (so
//! a test never runs a stale binary, and every build compiles the same units), stopped when
//! dropped, their output kept in a file and shown when a test fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// What this process built already: `BUILD_ARGS`' binaries (all), or in a release build the
/// binaries built one by one.
static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Binaries started from their release build whatever this process's profile
/// ([`use_release_build_of`]).
static RELEASE_BUILDS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// From now on `binary` is started from its release build (`target/release`, built as the
/// release benchmarks build it: its package alone), even from a debug build of this process:
/// a benchmark that only drives what it measures need not be built with the release profile
/// itself (fat LTO of its own, its control plane's and every bench's dependencies).
pub fn use_release_build_of(binary: &str) {
    let mut release = RELEASE_BUILDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !release.iter().any(|name| name == binary) {
        release.push(binary.to_owned());
    }
}

/// Whether `binary` is started from its release build: this process is one, or it was asked.
fn release_build_of(binary: &str) -> anyhow::Result<bool> {
    Ok(profile_dir()?
        .file_name()
        .is_some_and(|name| name == "release")
        || RELEASE_BUILDS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .any(|name| name == binary))
}

/// How tests and the demo (scripts/demo.sh runs the same command) build the workspace's
/// binaries: every one of them in one `cargo build`, the whole workspace selected. Cargo unifies
/// features over the packages a build selects, so a build of one package (`-p kubectl-baton`)
/// compiles its dependencies with other features than `cargo test --workspace` does, and
/// `target/debug/deps` gets another copy of kube, tokio and the rest for each such build. (What
/// dev-dependencies add is turned on in the normal build too: tests/Cargo.toml, "One feature
/// set".)
pub const BUILD_ARGS: [&str; 3] = ["build", "--workspace", "--bins"];

/// Runs [`BUILD_ARGS`] quietly (a no-op when nothing changed) once in this process (the demo's
/// first build, with cargo's progress shown, is scripts/demo.sh's). A release build (this
/// process runs from target/release: the benchmarks) builds `binary`'s package alone instead,
/// as scripts/image.sh builds what ships: measured as shipped, and the fat LTO of every binary
/// would take half an hour.
fn build_workspace_binaries(binary: &str) -> anyhow::Result<()> {
    let release = release_build_of(binary)?;
    let done = if release { binary } else { "all" };
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if built.iter().any(|built| built == done) {
        return Ok(());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    if release {
        command.args([
            "build",
            "--release",
            "-p",
            package_of(binary),
            "--bin",
            binary,
        ]);
    } else {
        command.args(BUILD_ARGS);
    }
    command
        .arg("--quiet")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    // Not the variables cargo sets for this test process: build scripts watching them
    // (ring's watches CARGO_MANIFEST_DIR) would rebuild half the dependency tree here, and
    // again in the next plain `cargo build`.
    without_cargo_test_variables(&mut command);
    let args: Vec<_> = command
        .get_args()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let status = command
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    built.push(done.to_owned());
    Ok(())
}

/// The package of each binary tests start (for a release build of one).
fn package_of(binary: &str) -> &str {
    match binary {
        "baton-control-plane" | "baton-real-nodes" | "baton-demo" | "baton-bench" => "baton-e2e",
        other => other,
    }
}

/// The path of a binary of this workspace, after the workspace's binaries were built once in
/// this process ([`BUILD_ARGS`], quietly), so a test never runs a stale one.
pub fn workspace_binary(name: &str) -> anyhow::Result<PathBuf> {
    build_workspace_binaries(name)?;
    let profile = profile_dir()?;
    let binary = if release_build_of(name)? {
        profile
            .parent()
            .context("target/<profile> has a parent")?
            .join("release")
            .join(name)
    } else {
        profile.join(name)
    };
    if !binary.is_file() {
        bail!(
            "{} does not exist after building the workspace's binaries (no binary of that name?)",
            binary.display()
        );
    }
    Ok(binary)
}

/// Removes from `command` the variables cargo set for this test process, for a `cargo` (or a
/// script running it) that must build as a plain `cargo build` would.
pub fn without_cargo_test_variables(command: &mut std::process::Command) {
    for (variable, _) in std::env::vars_os() {
        if variable.to_str().is_some_and(is_set_by_cargo_for_the_test) {
            command.env_remove(variable);
        }
    }
}

/// Environment variables cargo sets for a test process (not the user's CARGO_HOME,
/// CARGO_TARGET_DIR, CARGO_BUILD_* and the like).
pub(crate) fn is_set_by_cargo_for_the_test(variable: &str) -> bool {
    const EXACT: [&str; 8] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    EXACT.contains(&variable)
        || variable.starts_with("CARGO_PKG_")
        || variable.starts_with("CARGO_BIN_EXE_")
}

/// `target/<profile>`, found from the running test binary (`target/<profile>/deps/<test>`).
pub(crate) fn profile_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let deps = exe.parent().context("test binary has no folder")?;
    let profile = if deps.file_name().is_some_and(|name| name == "deps") {
        deps.parent().context("deps has no parent")?
    } else {
        deps
    };
    Ok(profile.to_path_buf())
}

/// A program installed on the machine (tests/control-plane/install.sh installs them): its path
/// on PATH; panics naming it when it is missing.
pub fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{program} not found: run tests/control-plane/install.sh (Debian's {program})")
        })
}

/// A running baton binary (or any workspace binary) owned by a test.
#[derive(Debug)]
pub struct BatonProcess {
    name: String,
    child: Child,
    log: ProcessLog,
}

/// Where a process's output goes: `<name>.log` in a folder of its own, removed with this
/// unless kept.
#[derive(Debug)]
pub struct ProcessLog {
    path: PathBuf,
    /// None once kept.
    dir: Option<tempfile::TempDir>,
}

impl ProcessLog {
    /// A new empty folder (in the system's temporary folder, named after `name`) for the log.
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{name}-"))
            .tempdir()
            .with_context(|| format!("creating a folder for the log of {name}"))?;
        Ok(Self {
            path: dir.path().join(format!("{name}.log")),
            dir: Some(dir),
        })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the file and its folder once this is dropped: the demo's reader may read the
    /// controller's log after the demo ended.
    pub fn keep(&mut self) {
        if let Some(dir) = self.dir.take() {
            let _kept = dir.keep();
        }
    }
}

impl BatonProcess {
    /// Starts workspace binary `name` with `KUBECONFIG` set to `kubeconfig` and the given
    /// environment (typically `BATON_*` configuration keys).
    pub async fn spawn(
        name: &str,
        kubeconfig: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::spawn_workspace_binary(name, kubeconfig, env, false, ProcessLog::new(name)?).await
    }

    /// As [`BatonProcess::spawn`], and killed by the kernel (`setpriv --pdeathsig KILL`) when
    /// the thread that started it ends: for a process kept for the whole test binary in a
    /// static, which nothing drops (libtest exits without running destructors), started from
    /// a thread that lives as long as the test process (a worker of a runtime kept in a
    /// static, as `crate::cluster_support` does).
    pub async fn spawn_dying_with_parent(
        name: &str,
        kubeconfig: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::spawn_workspace_binary(name, kubeconfig, env, true, ProcessLog::new(name)?).await
    }

    /// [`BatonProcess::spawn`] or, `dies_with_parent`, [`BatonProcess::spawn_dying_with_parent`],
    /// the output written to `log`.
    pub(crate) async fn spawn_workspace_binary(
        name: &str,
        kubeconfig: &Path,
        env: &[(&str, &str)],
        dies_with_parent: bool,
        log: ProcessLog,
    ) -> anyhow::Result<Self> {
        let binary = tokio::task::spawn_blocking({
            let name = name.to_owned();
            move || workspace_binary(&name)
        })
        .await??;
        // An allocation profile of a benchmark's controller: heaptrack runs it, writing
        // DIR/baton-controller.PID.zst (heaptrack_print reads it). The pid measured is then
        // heaptrack's, so the run's RSS figures are not the binary's.
        let profiled =
            std::env::var_os("BATON_BENCH_HEAPTRACK").filter(|_| name == "baton-controller");
        let mut command = if let Some(folder) = profiled {
            let mut command = Command::new("heaptrack");
            command
                .arg("-o")
                .arg(Path::new(&folder).join(format!("{name}.%p")))
                .arg(&binary);
            command
        } else if dies_with_parent {
            // setpriv execs the binary: the process (and its pid) is the binary's.
            let mut command = Command::new("setpriv");
            command
                .arg("--pdeathsig")
                .arg("KILL")
                .arg("--")
                .arg(&binary);
            command
        } else {
            Command::new(&binary)
        };
        command.env("KUBECONFIG", kubeconfig).env("NO_COLOR", "1");
        for (key, value) in env {
            command.env(key, value);
        }
        Self::start(name, command, log)
    }

    /// Starts `program`, which is not part of the workspace (e.g. haproxy), with `args`; its
    /// output is kept and shown as a baton binary's is.
    pub fn spawn_program(name: &str, program: &Path, args: &[&str]) -> anyhow::Result<Self> {
        Self::spawn_program_with(name, program, args, &[])
    }

    /// As [`BatonProcess::spawn_program`], with `env` added to its environment.
    pub fn spawn_program_with(
        name: &str,
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(program);
        command.args(args).envs(env.iter().copied());
        Self::start(name, command, ProcessLog::new(name)?)
    }

    fn start(name: &str, mut command: Command, log: ProcessLog) -> anyhow::Result<Self> {
        let log_file = std::fs::File::create(log.path())
            .with_context(|| format!("creating {}", log.path().display()))?;
        command
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", command.as_std().get_program().display()))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log,
        })
    }

    /// Keeps its log file once the process is dropped (as [`ProcessLog::keep`]) and says where
    /// it is: for the demo, whose reader may read the controller's log after it stopped.
    pub fn keep_log(&mut self) -> &Path {
        self.log.keep();
        self.log.path()
    }

    /// Everything the process wrote so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// The process id, for signals.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends a signal (`"TERM"`, `"KILL"`, …) with `kill(1)`.
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid().context("process already reaped")?;
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()?;
        if !status.success() {
            bail!("kill -{signal} {pid} failed");
        }
        Ok(())
    }

    /// Waits for the process to exit and returns its exit code (None when killed by a signal).
    pub async fn wait(&mut self) -> anyhow::Result<Option<i32>> {
        Ok(self.child.wait().await?.code())
    }

    /// Whether it exited already.
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for BatonProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            eprintln!(
                "----- output of {} -----\n{}\n----- end of {} -----",
                self.name,
                self.output(),
                self.name
            );
        }
    }
}

/// A supervisor process (`baton-control-plane`, `baton-real-nodes`) that said it is ready: it
/// prints one line, a JSON handshake, once what it runs is up, and stops it all when its stdin
/// closes (so keep `stdin` for as long as it should run).
pub struct Handshaken<T> {
    pub handshake: T,
    pub child: std::process::Child,
    pub stdin: std::process::ChildStdin,
    pub stdout: std::io::BufReader<std::process::ChildStdout>,
}

/// Spawns `command` (stdin and stdout piped, stderr inherited) and reads its handshake; `what`
/// names it in errors.
pub fn spawn_handshaken<T: serde::de::DeserializeOwned>(
    mut command: std::process::Command,
    what: &str,
) -> anyhow::Result<Handshaken<T>> {
    use std::io::BufRead;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    if line.trim().is_empty() {
        let status = child.wait()?;
        bail!("{what} exited ({status}) before it was ready; see its error above");
    }
    let handshake = serde_json::from_str(&line)
        .with_context(|| format!("reading the handshake of {what}: {line:?}"))?;
    Ok(Handshaken {
        handshake,
        child,
        stdin,
        stdout,
    })
}
