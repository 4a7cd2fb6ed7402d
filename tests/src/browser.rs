//! A real browser for the status page: Debian's `chromium` (tests/control-plane/install.sh
//! installs it), headless, one fresh profile per run so that runs never share state or lock
//! each other out. `--dump-dom` gives the DOM after the page loaded; `--screenshot` a PNG.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

/// How long one browser run may take (starting Chromium takes a few seconds on a busy machine).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Headless Chromium.
#[derive(Debug, Clone)]
pub struct Chromium {
    program: PathBuf,
}

impl Chromium {
    /// `chromium` on PATH; panics naming the installer when it is missing.
    pub fn installed() -> Self {
        Self {
            program: crate::process::which("chromium"),
        }
    }

    /// The DOM of `url` once loaded, serialised as HTML.
    pub async fn dump_dom(&self, url: &str) -> anyhow::Result<String> {
        self.run(&["--dump-dom", url]).await
    }

    /// Saves a `width`×`height` screenshot of `url` as PNG at `path`.
    pub async fn screenshot(
        &self,
        url: &str,
        path: &Path,
        (width, height): (u32, u32),
    ) -> anyhow::Result<()> {
        let screenshot = format!("--screenshot={}", path.display());
        let size = format!("--window-size={width},{height}");
        self.run(&[&screenshot, &size, "--hide-scrollbars", url])
            .await?;
        if !path.is_file() {
            bail!("chromium wrote no screenshot at {}", path.display());
        }
        Ok(())
    }

    async fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let profile = tempfile::tempdir().context("creating a chromium profile directory")?;
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-dev-shm-usage",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(args)
            .kill_on_drop(true);
        let output = tokio::time::timeout(RUN_TIMEOUT, command.output())
            .await
            .with_context(|| format!("chromium {args:?} did not finish in {RUN_TIMEOUT:?}"))?
            .with_context(|| format!("starting {}", self.program.display()))?;
        if !output.status.success() {
            bail!(
                "chromium {args:?} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        String::from_utf8(output.stdout).context("chromium's output is not UTF-8")
    }
}
