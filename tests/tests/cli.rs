//! Both binaries start the same way: a bad configuration stops them with one line naming the
//! key, and `--print-config` shows what they would run with.

use std::process::Command;

use baton_e2e::process::workspace_binary;

const BINARIES: [&str; 2] = ["baton-controller", "baton-webhook"];

fn run(binary: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let path = workspace_binary(binary).unwrap();
    let mut command = Command::new(path);
    command.args(args).env_remove("BATON_CONFIG");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_bad_value_stops_the_binary_with_one_line_naming_the_key() {
    for binary in BINARIES {
        let (code, _, stderr) = run(binary, &[], &[("BATON_LOG__FORMAT", "xml")]);
        assert_eq!(code, Some(2), "{binary}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{binary}: {stderr}");
        for expected in ["log.format", "\"xml\"", "text, json", "BATON_LOG__FORMAT"] {
            assert!(
                stderr.contains(expected),
                "{binary} should mention {expected}: {stderr}"
            );
        }
    }
}

#[test]
fn an_unknown_key_is_an_error_not_a_silent_default() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("baton.yaml");
    std::fs::write(&file, "namespace: prod\nops:\n  adress: 0.0.0.0:9000\n").unwrap();
    for binary in BINARIES {
        let (code, _, stderr) = run(binary, &["--config", file.to_str().unwrap()], &[]);
        assert_eq!(code, Some(2), "{binary}: {stderr}");
        assert!(
            stderr.contains("ops.adress") && stderr.contains("unknown key"),
            "{stderr}"
        );
        assert!(stderr.contains("baton.yaml"), "names the file: {stderr}");
    }
}

#[test]
fn print_config_shows_the_layers_merged_and_loads_back() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("baton.yaml");
    std::fs::write(
        &file,
        "namespace: from-file\ncontroller:\n  resync_interval: 90s\n",
    )
    .unwrap();
    for binary in BINARIES {
        let (code, printed, stderr) = run(
            binary,
            &["--config", file.to_str().unwrap(), "--print-config"],
            &[("BATON_NAMESPACE", "from-env")],
        );
        assert_eq!(code, Some(0), "{binary}: {stderr}");
        assert!(
            printed.contains("namespace: from-env"),
            "environment wins: {printed}"
        );
        assert!(
            printed.contains("resync_interval: 90s"),
            "file over defaults, printed as written: {printed}"
        );
        let reprinted_file = directory.path().join("printed.yaml");
        std::fs::write(&reprinted_file, &printed).unwrap();
        let (code, reprinted, stderr) = run(
            binary,
            &[
                "--config",
                reprinted_file.to_str().unwrap(),
                "--print-config",
            ],
            &[],
        );
        assert_eq!(code, Some(0), "{binary} loads its own output: {stderr}");
        assert_eq!(reprinted, printed);
    }
}

#[test]
fn the_config_file_shipped_in_deploy_is_accepted_by_both_binaries() {
    // Given the config.yaml of deploy/'s ConfigMap, as the Deployments mount it
    let manifest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/config.yaml");
    let config_map: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("config.yaml");
    std::fs::write(
        &file,
        config_map["data"]["config.yaml"]
            .as_str()
            .expect("data.config.yaml"),
    )
    .unwrap();
    for binary in BINARIES {
        // When the binary loads it (BATON_NAMESPACE comes from the pod, as in the Deployments)
        let (code, printed, stderr) = run(
            binary,
            &["--config", file.to_str().unwrap(), "--print-config"],
            &[("BATON_NAMESPACE", "ingesters")],
        );
        // Then it is valid and means what it says
        assert_eq!(code, Some(0), "{binary}: {stderr}");
        assert!(printed.contains("format: json"), "{printed}");
        assert!(printed.contains("namespace: ingesters"), "{printed}");
    }
}
