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

/// What the real nodes' upgrade scenario upgrades baton to ([`BatonImage::next`]).
pub const NEXT_REVISION: &str = "next";

impl BatonImage {
    /// The image a user upgrades to: this one as the next commit would build it (the same
    /// files, its `org.opencontainers.image.revision` label set to `revision`), named
    /// `baton:<version>-<revision>`, so it has a digest of its own. Written beside this
    /// image's archive once per `revision`.
    pub fn next(&self, revision: &str) -> anyhow::Result<BatonImage> {
        let name = format!("{}-{revision}", self.name);
        let archive = self
            .archive
            .with_file_name(format!("{}.tar", name.replace(':', "-")));
        let digest = relabel(&self.archive, &archive, &name, revision)
            .with_context(|| format!("deriving {name} from {}", self.archive.display()))?;
        Ok(BatonImage {
            name,
            digest,
            archive,
            ..self.clone()
        })
    }
}

fn sha256(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Copies the OCI archive `from` to `to` with the image's revision label set to `revision`
/// and its reference named `name`: a new config, so a new manifest and index; the layers are
/// the same blobs. Returns the new manifest's digest.
fn relabel(from: &Path, to: &Path, name: &str, revision: &str) -> anyhow::Result<String> {
    use std::collections::BTreeMap;
    use std::io::Read;
    let mut blobs = BTreeMap::<String, Vec<u8>>::new();
    let mut index: Option<serde_json::Value> = None;
    let mut layout = Vec::new();
    for entry in tar::Archive::new(std::fs::File::open(from)?).entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        match path.as_str() {
            "index.json" => index = Some(serde_json::from_slice(&bytes)?),
            "oci-layout" => layout = bytes,
            _ => {
                if let Some(digest) = path.strip_prefix("blobs/sha256/") {
                    blobs.insert(format!("sha256:{digest}"), bytes);
                }
            }
        }
    }
    let mut index = index.context("the archive has no index.json")?;
    let manifest_digest = index["manifests"][0]["digest"]
        .as_str()
        .context("the index names no manifest")?
        .to_owned();
    let mut manifest: serde_json::Value = serde_json::from_slice(
        blobs
            .get(&manifest_digest)
            .context("the manifest's blob is missing")?,
    )?;
    let config_digest = manifest["config"]["digest"]
        .as_str()
        .context("the manifest names no config")?
        .to_owned();
    let mut config: serde_json::Value =
        serde_json::from_slice(blobs.get(&config_digest).context("the config is missing")?)?;
    config["config"]["Labels"]["org.opencontainers.image.revision"] = revision.into();
    let config = serde_json::to_vec(&config)?;
    blobs.remove(&config_digest);
    blobs.remove(&manifest_digest);
    manifest["config"]["digest"] = sha256(&config).into();
    manifest["config"]["size"] = config.len().into();
    blobs.insert(sha256(&config), config);
    let manifest = serde_json::to_vec(&manifest)?;
    let digest = sha256(&manifest);
    index["manifests"][0]["digest"] = digest.clone().into();
    index["manifests"][0]["size"] = manifest.len().into();
    index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] =
        format!("docker.io/library/{name}").into();
    blobs.insert(digest.clone(), manifest);

    let mut out = tar::Builder::new(std::fs::File::create(to)?);
    let mut append = |path: &str, bytes: &[u8]| -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        out.append_data(&mut header, path, bytes)
    };
    append("oci-layout", &layout)?;
    append("index.json", &serde_json::to_vec(&index)?)?;
    for (digest, bytes) in &blobs {
        let hex = digest.trim_start_matches("sha256:");
        append(&format!("blobs/sha256/{hex}"), bytes)?;
    }
    out.finish()?;
    Ok(digest)
}
