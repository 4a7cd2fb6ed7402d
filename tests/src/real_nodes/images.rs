//! The real pods' images, made here with no registry: the test application
//! (`tests/testapp`), built statically so it is the image's only file, packed as the only layer
//! of a docker-archive tarball that `ctr images import` reads. The pause image is the same
//! binary in its `pause` mode. Rebuilt only when the binary changes.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::json;

use super::supervisor::PAUSE_IMAGE;
use crate::process::{profile_dir, without_cargo_test_variables};

/// The application image's repository; each version a scenario rolls out is one of its tags.
pub const APP_IMAGE: &str = "baton.test/app";
/// The tags the application image is imported under (every one the same image: behaviour
/// comes from the environment).
pub const APP_VERSIONS: [&str; 9] = ["v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9"];

/// Builds (or finds up to date) the application and pause image archives; returns their paths.
pub fn build() -> anyhow::Result<Vec<PathBuf>> {
    let target = profile_dir()?
        .parent()
        .context("the profile folder has no parent")?
        .to_path_buf();
    let binary = build_static_app(&target)?;
    let out = target.join("real-node-images");
    std::fs::create_dir_all(&out)?;
    let app_tags: Vec<String> = APP_VERSIONS
        .iter()
        .map(|version| format!("{APP_IMAGE}:{version}"))
        .collect();
    let app = archive(&binary, &out, "app", &app_tags, &["/testapp"])?;
    let pause = archive(
        &binary,
        &out,
        "pause",
        &[PAUSE_IMAGE.to_owned()],
        &["/testapp", "pause"],
    )?;
    Ok(vec![pause, app])
}

/// `cargo build -p baton-testapp` linked statically (glibc's static libraries with
/// `crt-static`: no musl target needed), in a target folder of its own so the flag does not
/// rebuild the workspace.
fn build_static_app(target: &Path) -> anyhow::Result<PathBuf> {
    let triple = "x86_64-unknown-linux-gnu";
    let static_target = target.join("testapp-static");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--quiet",
            "-p",
            "baton-testapp",
            "--target",
            triple,
        ])
        .env("CARGO_TARGET_DIR", &static_target)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    without_cargo_test_variables(&mut command);
    let status = command
        .status()
        .context("running cargo build for the static test application")?;
    if !status.success() {
        bail!("cargo build -p baton-testapp (static, {triple}) failed ({status})");
    }
    let binary = static_target.join(triple).join("debug/baton-testapp");
    if !binary.is_file() {
        bail!("{} missing after its build", binary.display());
    }
    Ok(binary)
}

/// Writes `<out>/<name>.tar`: a docker archive of one layer holding `binary` as `/testapp`,
/// tagged `tags`, running `entrypoint`. Skipped when the archive is newer than the binary.
fn archive(
    binary: &Path,
    out: &Path,
    name: &str,
    tags: &[String],
    entrypoint: &[&str],
) -> anyhow::Result<PathBuf> {
    let path = out.join(format!("{name}.tar"));
    let modified = |path: &Path| {
        std::fs::metadata(path)
            .and_then(|meta| meta.modified())
            .ok()
    };
    if let (Some(archive), Some(built)) = (modified(&path), modified(binary))
        && archive > built
    {
        return Ok(path);
    }
    let work = out.join(format!("{name}.work"));
    let _ = std::fs::remove_dir_all(&work);
    let rootfs = work.join("rootfs");
    let layout = work.join("archive");
    std::fs::create_dir_all(&rootfs)?;
    std::fs::create_dir_all(&layout)?;
    std::fs::copy(binary, rootfs.join("testapp"))
        .context("copying the test application into the image")?;

    let layer = work.join("layer.tar");
    run(Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "--mtime=@0"])
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&layer)
        .arg("testapp"))?;
    let layer_digest = sha256(&layer)?;
    std::fs::create_dir_all(layout.join(&layer_digest))?;
    std::fs::rename(&layer, layout.join(&layer_digest).join("layer.tar"))?;

    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
        "history": [{"created_by": "baton-e2e real_nodes::images"}],
    });
    let config_bytes = serde_json::to_vec(&config)?;
    let config_file = work.join("config.json");
    std::fs::write(&config_file, &config_bytes)?;
    let config_name = format!("{}.json", sha256(&config_file)?);
    std::fs::rename(&config_file, layout.join(&config_name))?;
    let manifest = json!([{
        "Config": config_name,
        "RepoTags": tags,
        "Layers": [format!("{layer_digest}/layer.tar")],
    }]);
    std::fs::write(layout.join("manifest.json"), serde_json::to_vec(&manifest)?)?;

    let partial = out.join(format!("{name}.tar.partial"));
    run(Command::new("tar")
        .arg("-C")
        .arg(&layout)
        .arg("-cf")
        .arg(&partial)
        .args(["manifest.json", &config_name, &layer_digest]))?;
    std::fs::rename(&partial, &path)?;
    std::fs::remove_dir_all(&work)?;
    Ok(path)
}

fn sha256(path: &Path) -> anyhow::Result<String> {
    let output = Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum")?;
    if !output.status.success() {
        bail!("sha256sum {} failed", path.display());
    }
    let text = String::from_utf8(output.stdout)?;
    text.split_whitespace()
        .next()
        .map(str::to_owned)
        .context("sha256sum printed nothing")
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}
