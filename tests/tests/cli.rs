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
        // When the binary loads it with the namespaces the Deployments give it: the groups' from
        // the ConfigMap's groups-namespace, baton's own from the pod's
        let groups = config_map["data"]["groups-namespace"]
            .as_str()
            .expect("data.groups-namespace");
        let (code, printed, stderr) = run(
            binary,
            &["--config", file.to_str().unwrap(), "--print-config"],
            &[
                ("BATON_NAMESPACE", groups),
                ("BATON_SYSTEM_NAMESPACE", "baton-system"),
            ],
        );
        // Then it is valid and means what it says
        assert_eq!(code, Some(0), "{binary}: {stderr}");
        assert!(printed.contains("format: json"), "{printed}");
        assert!(
            printed
                .lines()
                .any(|line| line == format!("namespace: {groups}")),
            "{printed}"
        );
        assert!(
            printed.contains("system_namespace: baton-system"),
            "{printed}"
        );
    }
}

/// The variables the kubelet gives every container for `service` (`enableServiceLinks`, on by
/// default): `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` and one per named port, and the
/// Docker-link forms `<NAME>_PORT`, `<NAME>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT`, `_ADDR`.
fn service_link_variables(service: &serde_json::Value, cluster_ip: &str) -> Vec<(String, String)> {
    let name = service["metadata"]["name"]
        .as_str()
        .expect("a Service has a name")
        .to_uppercase()
        .replace('-', "_");
    let ports = service["spec"]["ports"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut variables = vec![(format!("{name}_SERVICE_HOST"), cluster_ip.to_owned())];
    for (index, port) in ports.iter().enumerate() {
        let number = port["port"].as_u64().expect("a port number").to_string();
        let protocol = port["protocol"].as_str().unwrap_or("TCP");
        let url = format!("{}://{cluster_ip}:{number}", protocol.to_lowercase());
        let link = format!("{name}_PORT_{number}_{protocol}");
        if index == 0 {
            variables.push((format!("{name}_SERVICE_PORT"), number.clone()));
            variables.push((format!("{name}_PORT"), url.clone()));
        }
        if let Some(port_name) = port["name"].as_str() {
            let port_name = port_name.to_uppercase().replace('-', "_");
            variables.push((format!("{name}_SERVICE_PORT_{port_name}"), number.clone()));
        }
        variables.extend([
            (link.clone(), url),
            (format!("{link}_PROTO"), protocol.to_lowercase()),
            (format!("{link}_PORT"), number),
            (format!("{link}_ADDR"), cluster_ip.to_owned()),
        ]);
    }
    variables
}

#[test]
fn both_binaries_start_beside_the_link_variables_of_deploys_services() {
    // Given the variables Kubernetes gives a pod of deploy/ for every Service deploy/ creates
    // (baton-webhook's are BATON_WEBHOOK_SERVICE_HOST, BATON_WEBHOOK_PORT=tcp://…, …)
    let services = baton_e2e::manifests::deploy_objects("Service");
    assert!(
        services
            .iter()
            .any(|service| service["metadata"]["name"] == "baton-webhook"),
        "deploy/ has the webhook's Service"
    );
    let variables: Vec<(String, String)> = services
        .iter()
        .flat_map(|service| service_link_variables(service, "10.96.0.10"))
        .collect();
    assert!(
        variables
            .iter()
            .any(|(name, value)| name == "BATON_WEBHOOK_PORT" && value == "tcp://10.96.0.10:443"),
        "{variables:?}"
    );
    let env: Vec<(&str, &str)> = variables
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .chain([("BATON_NAMESPACE", "ingesters")])
        .collect();
    for binary in BINARIES {
        // When the binary loads its configuration with them
        let (code, printed, stderr) = run(binary, &["--print-config"], &env);
        // Then it starts with baton's own keys and says nothing of the Service's links
        assert_eq!(code, Some(0), "{binary}: {stderr}");
        assert!(printed.contains("namespace: ingesters"), "{printed}");
        assert!(stderr.is_empty(), "{binary}: {stderr}");
    }
}

#[test]
fn a_variable_that_names_no_key_is_told_not_read_and_does_not_stop_the_binary() {
    for binary in BINARIES {
        // Given a misspelt top-level key beside a good one
        let (code, printed, stderr) = run(
            binary,
            &["--print-config"],
            &[("BATON_NAMESPCE", "typo"), ("BATON_NAMESPACE", "ingesters")],
        );
        // Then the binary runs with what it could read and names the variable it did not
        assert_eq!(code, Some(0), "{binary}: {stderr}");
        assert!(printed.contains("namespace: ingesters"), "{printed}");
        assert!(
            stderr.contains("BATON_NAMESPCE") && stderr.contains("not read"),
            "{binary}: {stderr}"
        );
    }
}
