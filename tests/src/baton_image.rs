//! baton's own image, as `scripts/image.sh` builds it for users: found where `scripts/test.sh`
//! says (`E2E_BATON_IMAGE_ARCHIVE`), else built here by that script, once per test process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};
use serde::Deserialize;

/// Set by `scripts/test.sh` to the archive `scripts/image.sh` wrote.
pub const ARCHIVE_ENV: &str = "E2E_BATON_IMAGE_ARCHIVE";

/// What `scripts/image.sh` says of the image it built (`target/image/image.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct BatonImage {
    /// `baton:<version>`, as deploy/ names it.
    pub name: String,
    /// The manifest's digest, `sha256:…`.
    pub digest: String,
    pub archive_bytes: u64,
    pub layers_bytes: u64,
    /// The image config's `User`.
    pub user: Option<String>,
    /// Every file of its layers.
    pub files: Vec<String>,
    #[serde(skip)]
    pub archive: PathBuf,
    #[serde(skip)]
    pub sbom: PathBuf,
}

impl BatonImage {
    /// The image of this test process, or why it cannot be had (built or found once).
    pub fn available() -> Result<&'static BatonImage, &'static str> {
        static IMAGE: OnceLock<Result<BatonImage, String>> = OnceLock::new();
        IMAGE
            .get_or_init(|| {
                Self::find_or_build().map_err(|error| {
                    format!(
                        "MISSING: baton's image (scripts/image.sh; it needs buildah, podman or docker): {error:#}"
                    )
                })
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// The image of this test process; panics saying why when it cannot be had.
    pub fn get() -> &'static BatonImage {
        Self::available().unwrap_or_else(|missing| panic!("{missing}"))
    }

    /// How deploy/ refers to it, pinned: `baton@sha256:…`.
    pub fn by_digest(&self) -> String {
        let repository = self.name.split(':').next().unwrap_or(&self.name);
        format!("{repository}@{}", self.digest)
    }

    fn find_or_build() -> anyhow::Result<Self> {
        let archive = match std::env::var_os(ARCHIVE_ENV) {
            Some(path) => PathBuf::from(path),
            None => build()?,
        };
        let folder = archive
            .parent()
            .context("the image archive has no folder")?;
        let described = folder.join("image.json");
        let mut image: BatonImage = serde_json::from_slice(
            &std::fs::read(&described)
                .with_context(|| format!("reading {}", described.display()))?,
        )
        .with_context(|| format!("parsing {}", described.display()))?;
        image.sbom = folder.join("sbom.cdx.json");
        image.archive = archive;
        Ok(image)
    }
}

fn build() -> anyhow::Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/image.sh");
    let mut command = Command::new(&script);
    command.arg("--print-archive");
    crate::process::without_cargo_test_variables(&mut command);
    let output = command
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let printed = String::from_utf8(output.stdout)?;
    Ok(PathBuf::from(printed.trim()))
}
