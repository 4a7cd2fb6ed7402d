//! baton's image as users get it (`scripts/image.sh`): built without a registry or a Docker
//! engine, holding both binaries and nothing a process in the pod could use against its node,
//! with the SBOM of what they were built from. Running it on real nodes as deploy/ runs it:
//! tests/tests/real_pods.rs.

use std::path::Path;
use std::process::Command;

use baton_e2e::baton_image::BatonImage;

/// Unpacks the image's layers (an OCI archive) into `rootfs`, as a container runtime would.
fn unpack(archive: &Path, rootfs: &Path) {
    let blobs = tempfile::tempdir().unwrap();
    let status = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(blobs.path())
        .status()
        .expect("tar runs");
    assert!(status.success());
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(blobs.path().join(name)).unwrap()).unwrap()
    };
    let blob = |digest: &str| format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    let index = read("index.json");
    let manifest = read(&blob(index["manifests"][0]["digest"].as_str().unwrap()));
    std::fs::create_dir_all(rootfs).unwrap();
    for layer in manifest["layers"].as_array().unwrap() {
        let status = Command::new("tar")
            .arg("-xf")
            .arg(blobs.path().join(blob(layer["digest"].as_str().unwrap())))
            .arg("-C")
            .arg(rootfs)
            .status()
            .expect("tar runs");
        assert!(status.success());
    }
}

#[test]
fn the_image_holds_both_binaries_and_nothing_a_process_could_use_against_the_node() {
    // Given the image scripts/image.sh built
    let image = BatonImage::get();

    // Then it holds exactly the two binaries, the CA bundle and the user they run as: no shell,
    // no package manager, no library
    assert_eq!(
        image.files,
        [
            "etc/group",
            "etc/passwd",
            "etc/ssl/certs/ca-certificates.crt",
            "usr/local/bin/baton-controller",
            "usr/local/bin/baton-webhook",
        ]
    );
    // and runs as 65532, not root
    assert_eq!(image.user.as_deref(), Some("65532:65532"));
    assert!(image.digest.starts_with("sha256:"), "{}", image.digest);
    assert!(
        image
            .name
            .ends_with(&format!(":{}", env!("CARGO_PKG_VERSION")))
    );

    // And each binary runs from the image's files alone (a chroot of its layers: nothing of
    // the machine's libraries), reading its configuration as in a pod
    let rootfs = tempfile::tempdir().unwrap();
    unpack(&image.archive, rootfs.path());
    for binary in ["baton-controller", "baton-webhook"] {
        let output = Command::new("/usr/sbin/chroot")
            .arg("--userspec=65532:65532")
            .arg(rootfs.path())
            .arg(format!("/usr/local/bin/{binary}"))
            .arg("--print-config")
            .env_clear()
            .env("BATON_NAMESPACE", "ingesters")
            .output()
            .expect("chroot runs (as root, as the real-node tests do)");
        assert_eq!(
            output.status.code(),
            Some(0),
            "{binary}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(String::from_utf8_lossy(&output.stdout).contains("namespace: ingesters"));
    }
}

#[test]
fn the_sbom_names_what_both_binaries_were_built_from() {
    // Given the SBOM written beside the image
    let image = BatonImage::get();
    let sbom: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&image.sbom).expect("sbom.cdx.json")).unwrap();
    let components: Vec<(String, String)> = sbom["components"]
        .as_array()
        .expect("components")
        .iter()
        .map(|component| {
            (
                component["name"].as_str().unwrap_or_default().to_owned(),
                component["version"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();

    // Then it is CycloneDX, names both binaries, and the crates they link at the versions
    // Cargo.lock pins
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock"))
        .unwrap();
    let locked = |name: &str| {
        let entry = format!("name = \"{name}\"\nversion = \"");
        let start = lock
            .find(&entry)
            .unwrap_or_else(|| panic!("{name} in Cargo.lock"));
        let version = &lock[start + entry.len()..];
        version[..version.find('"').unwrap()].to_owned()
    };
    for name in [
        "baton-controller",
        "baton-webhook",
        "kube-client",
        "actix-web",
        "rustls",
    ] {
        assert!(
            components
                .iter()
                .any(|(component, version)| component == name && *version == locked(name)),
            "{name} {} missing from the SBOM",
            locked(name)
        );
    }
}
