// figment's Jail fixes the closures' error type to figment::Error, which clippy finds large.
#![allow(clippy::result_large_err)]

use std::path::Path;

use figment::Jail;

use super::*;

#[test]
fn defaults_match_the_go_operator_ports_and_are_valid() {
    let config = Config::default();
    config.validate().expect("defaults are valid");
    assert_eq!(config.ops.address.to_string(), "0.0.0.0:8001");
    assert_eq!(config.webhook.address.to_string(), "0.0.0.0:8443");
    assert_eq!(config.cluster_domain, "cluster.local");
    assert_eq!(config.pods.address_by, PodAddressing::Dns);
    assert_eq!(config.webhook.request_timeout, Duration::from_secs(9));
}

#[test]
fn environment_overrides_file_overrides_defaults() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "baton.yaml",
            "namespace: from-file\nlog:\n  format: json\n  level: debug\ncontroller:\n  resync_interval: 90s\n",
        )?;
        jail.set_env("BATON_NAMESPACE", "from-env");
        jail.set_env("BATON_PODS__ADDRESS_BY", "ip");
        jail.set_env("BATON_KUBERNETES__INITIAL_LIST", "list");
        let config = Config::load(Some(Path::new("baton.yaml"))).expect("loads");
        assert_eq!(config.namespace, "from-env");
        assert_eq!(config.log.format, LogFormat::Json);
        assert_eq!(config.log.level, "debug");
        assert_eq!(config.controller.resync_interval, Duration::from_secs(90));
        assert_eq!(config.pods.address_by, PodAddressing::Ip);
        assert_eq!(config.kubernetes.initial_list, InitialList::List);
        Ok(())
    });
}

#[test]
fn the_config_file_path_variable_is_not_taken_for_a_key() {
    Jail::expect_with(|jail| {
        jail.create_file("baton.yaml", "namespace: ns-a\n")?;
        jail.set_env("BATON_CONFIG", "baton.yaml");
        let config =
            Config::load(Some(Path::new("baton.yaml"))).expect("BATON_CONFIG is not a key");
        assert_eq!(config.namespace, "ns-a");
        Ok(())
    });
}

#[test]
fn a_bad_enum_value_names_the_key_the_value_and_the_variable() {
    Jail::expect_with(|jail| {
        jail.set_env("BATON_LOG__FORMAT", "xml");
        let message = Config::load(None).unwrap_err().to_string();
        assert!(!message.contains('\n'), "one line: {message}");
        assert!(message.contains("log.format"), "{message}");
        assert!(message.contains("xml"), "{message}");
        assert!(
            message.contains("text") && message.contains("json"),
            "{message}"
        );
        assert!(message.contains("BATON_LOG__FORMAT"), "{message}");
        Ok(())
    });
}

#[test]
fn a_bad_duration_names_the_key_and_the_value() {
    Jail::expect_with(|jail| {
        jail.set_env("BATON_CONTROLLER__RESYNC_INTERVAL", "soon");
        let message = Config::load(None).unwrap_err().to_string();
        assert!(message.contains("controller.resync_interval"), "{message}");
        assert!(message.contains("\"soon\""), "{message}");
        assert!(message.contains("30s"), "says what is accepted: {message}");
        Ok(())
    });
}

#[test]
fn the_webhook_shutdown_delay_defaults_to_five_seconds_and_may_be_zero() {
    assert_eq!(
        Config::default().webhook.shutdown_delay,
        Duration::from_secs(5)
    );
    Jail::expect_with(|jail| {
        jail.set_env("BATON_WEBHOOK__SHUTDOWN_DELAY", "0s");
        let config = Config::load(None).expect("0s stops at once, as with a preStop sleep");
        assert_eq!(config.webhook.shutdown_delay, Duration::from_secs(0));
        jail.set_env("BATON_WEBHOOK__SHUTDOWN_DELAY", "a while");
        let message = Config::load(None).unwrap_err().to_string();
        assert!(message.contains("webhook.shutdown_delay"), "{message}");
        assert!(message.contains("\"a while\""), "{message}");
        Ok(())
    });
}

#[test]
fn a_bad_address_in_the_file_names_the_key_the_value_and_the_file() {
    Jail::expect_with(|jail| {
        jail.create_file("baton.yaml", "ops:\n  address: localhost-8001\n")?;
        let message = Config::load(Some(Path::new("baton.yaml")))
            .unwrap_err()
            .to_string();
        assert!(message.contains("ops.address"), "{message}");
        assert!(message.contains("localhost-8001"), "{message}");
        assert!(message.contains("baton.yaml"), "{message}");
        Ok(())
    });
}

#[test]
fn unknown_keys_are_rejected_in_files_and_environment() {
    Jail::expect_with(|jail| {
        jail.create_file("baton.yaml", "log:\n  formt: json\n")?;
        let message = Config::load(Some(Path::new("baton.yaml")))
            .unwrap_err()
            .to_string();
        assert!(message.contains("log.formt"), "{message}");
        assert!(message.contains("unknown key"), "{message}");
        Ok(())
    });
    // Below a top-level key, as in a file; a misspelt top-level key itself is not baton's
    // (`unread_variables_are_told_apart_from_service_links`).
    Jail::expect_with(|jail| {
        jail.set_env("BATON_LOG__FORMT", "json");
        let error = Config::load(None).unwrap_err();
        assert_eq!(error.keys(), vec!["log.formt".to_owned()], "{error}");
        Ok(())
    });
}

#[test]
fn a_missing_config_file_is_an_error_naming_it() {
    Jail::expect_with(|_jail| {
        let message = Config::load(Some(Path::new("nowhere.yaml")))
            .unwrap_err()
            .to_string();
        assert!(message.contains("nowhere.yaml"), "{message}");
        Ok(())
    });
}

#[test]
fn semantic_checks_report_every_problem_with_its_key() {
    let mut config = Config {
        namespace: "Not_A_Namespace".into(),
        ..Config::default()
    };
    config.controller.lease.renew_deadline = Duration::from_secs(20);
    config.pods.request_timeout = Duration::from_secs(0);
    config.log.level = "baton=loud".into();
    // Receiving a request may not take as long as answering it.
    config.webhook.read_timeout = Duration::from_secs(9);
    let error = config.validate().unwrap_err();
    assert_eq!(
        error.keys(),
        vec![
            "namespace",
            "log.level",
            "webhook.read_timeout",
            "pods.request_timeout",
            "controller.lease.renew_deadline",
        ],
        "{error}"
    );
    assert!(error.to_string().contains("Not_A_Namespace"));
    assert!(
        error
            .to_string()
            .contains("below webhook.request_timeout (9s)"),
        "{error}"
    );
}

#[test]
fn the_shard_count_is_from_one_to_the_most_a_round_can_read() {
    for good in [1, 6, MAX_SHARDS] {
        let mut config = Config::default();
        config.controller.shards = good;
        assert!(config.validate().is_ok(), "{good}");
    }
    assert_eq!(Config::default().controller.shards, 1, "the single leader");
    for bad in [0, MAX_SHARDS + 1] {
        let mut config = Config::default();
        config.controller.shards = bad;
        let error = config.validate().unwrap_err();
        assert_eq!(error.keys(), vec!["controller.shards"], "{bad}: {error}");
    }
}

#[test]
fn the_groups_reconciled_at_once_are_from_one_to_the_most_the_client_should_carry() {
    for good in [1, 8, 32, MAX_CONCURRENT_GROUPS] {
        let mut config = Config::default();
        config.controller.concurrent_groups = good;
        assert!(config.validate().is_ok(), "{good}");
    }
    assert_eq!(Config::default().controller.concurrent_groups, 32);
    for bad in [0, MAX_CONCURRENT_GROUPS + 1] {
        let mut config = Config::default();
        config.controller.concurrent_groups = bad;
        let error = config.validate().unwrap_err();
        assert_eq!(
            error.keys(),
            vec!["controller.concurrent_groups"],
            "{bad}: {error}"
        );
    }
}

#[test]
fn log_filters_accept_levels_and_directives() {
    for good in [
        "info",
        "WARN",
        "info,baton_controller=debug",
        "kube=off",
        "baton_webhook",
    ] {
        assert!(values::is_log_filter(good), "{good}");
    }
    for bad in ["", "info,=debug", "x=loud", "a b"] {
        assert!(!values::is_log_filter(bad), "{bad}");
    }
}

#[test]
fn printed_configuration_loads_back_to_the_same_value() {
    Jail::expect_with(|jail| {
        let mut config = Config {
            namespace: "roundtrip".into(),
            ..Config::default()
        };
        config.controller.lease.duration = Duration::from_millis(15_500);
        config.webhook.max_request_bytes = ByteSize(512 * 1024);
        jail.create_file("printed.yaml", &config.to_yaml())?;
        let loaded = Config::load(Some(Path::new("printed.yaml"))).expect("loads");
        assert_eq!(loaded, config);
        Ok(())
    });
}

#[test]
fn byte_sizes_parse_units() {
    assert_eq!("3MiB".parse::<ByteSize>(), Ok(ByteSize(3 << 20)));
    assert_eq!("4096".parse::<ByteSize>(), Ok(ByteSize(4096)));
    assert!("3MB".parse::<ByteSize>().is_err());
    assert_eq!(ByteSize(3 << 20).to_string(), "3MiB");
}

#[test]
fn the_reference_documents_every_key_and_is_current() {
    let generated = reference_markdown();
    for key in [
        "namespace",
        "cluster_domain",
        "log.level",
        "log.format",
        "ops.address",
        "webhook.address",
        "controller.resync_interval",
        "controller.lease.duration",
        "controller.shards",
        "controller.concurrent_groups",
        "pods.address_by",
        "pods.request_timeout",
    ] {
        assert!(generated.contains(&format!("| `{key}` |")), "missing {key}");
    }
    assert!(
        !generated.contains("|  |"),
        "a key without documentation:\n{generated}"
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    if std::env::var_os("UPDATE_CONFIG_REFERENCE").is_some() {
        std::fs::write(&path, &generated).expect("write docs/configuration.md");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        committed, generated,
        "docs/configuration.md is stale: run UPDATE_CONFIG_REFERENCE=1 cargo test -p baton-config"
    );
}

#[test]
fn certificate_lists_and_lifetimes_come_from_the_environment() {
    Jail::expect_with(|jail| {
        jail.set_env("BATON_CERTIFICATES__EXTRA_IPS", "[127.0.0.1, \"::1\"]");
        jail.set_env(
            "BATON_CERTIFICATES__EXTRA_DNS_NAMES",
            "[webhook.example.com]",
        );
        jail.set_env("BATON_CERTIFICATES__CA_LIFETIME", "30s");
        jail.set_env("BATON_CERTIFICATES__SERVING_LIFETIME", "12s");
        jail.set_env("BATON_CERTIFICATES__CA_OVERLAP", "2s");
        jail.set_env("BATON_CERTIFICATES__GENERATE", "false");
        let config = Config::load(None).expect("loads");
        let certificates = &config.certificates;
        assert_eq!(
            certificates.extra_ips,
            vec![
                "127.0.0.1".parse::<std::net::IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert_eq!(certificates.extra_dns_names, vec!["webhook.example.com"]);
        assert_eq!(certificates.serving_lifetime, Duration::from_secs(12));
        assert!(!certificates.generate);
        assert!(certificates.inject_ca_bundle);
        Ok(())
    });
}

#[test]
fn bad_certificate_settings_name_the_key_and_the_value() {
    let mut config = Config::default();
    config.certificates.renew_before_fraction = 0.9;
    config.certificates.serving_lifetime = Duration::from_secs(400 * 24 * 3600);
    config.certificates.extra_dns_names = vec!["Not A Name".to_owned()];
    config.certificates.ca_overlap = Duration::from_secs(365 * 24 * 3600);
    let message = config.validate().unwrap_err().to_string();
    for expected in [
        "certificates.renew_before_fraction",
        "0.9",
        "certificates.serving_lifetime",
        "certificates.extra_dns_names",
        "Not A Name",
        "certificates.ca_overlap",
    ] {
        assert!(message.contains(expected), "{expected} in {message}");
    }
}

#[test]
fn durations_print_in_the_largest_exact_unit_and_parse_back() {
    for (duration, printed) in [
        (Duration::from_secs(90 * 24 * 3600), "90d"),
        (Duration::from_secs(5400), "90m"),
        (Duration::from_secs(3600), "1h"),
        (Duration::from_secs(31_557_600), "1year"),
        (Duration::from_millis(1500), "1500ms"),
        (Duration::from_secs(0), "0s"),
        (
            Duration(std::time::Duration::from_nanos(1_000_001)),
            "1000001ns",
        ),
    ] {
        assert_eq!(duration.to_string(), printed);
        assert_eq!(
            printed.parse::<Duration>(),
            Ok(duration),
            "{printed} parses back"
        );
    }
}

#[test]
fn print_config_shows_the_default_serving_lifetime_as_days() {
    let printed = serde_saphyr::to_string(&Config::default()).unwrap();
    assert!(
        printed.contains("serving_lifetime: 90d"),
        "a 90-day lifetime printed as humantime's calendar split:\n{printed}"
    );
}

#[test]
fn gate_destinations_come_from_the_environment_as_a_list_and_bad_ones_are_named() {
    Jail::expect_with(|jail| {
        jail.set_env(
            "BATON_GATES__HOOK_ADDRESSES",
            r#"["https://deploys.example.com/hooks", "http://127.0.0.1:8080"]"#,
        );
        let config = Config::load(None).expect("loads");
        let hooks: Vec<String> = config
            .gates
            .hook_addresses
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            hooks,
            [
                "https://deploys.example.com/hooks",
                "http://127.0.0.1:8080/"
            ]
        );
        jail.set_env(
            "BATON_GATES__WEB_CHECK_ADDRESSES",
            "https://app.example.com/health",
        );
        let config = Config::load(None).expect("loads");
        assert_eq!(
            config.gates.web_check_addresses[0].to_string(),
            "https://app.example.com/health"
        );
        jail.set_env(
            "BATON_GATES__WEB_CHECK_ADDRESSES",
            "file:///var/run/secrets/token",
        );
        let message = Config::load(None).unwrap_err().to_string();
        assert!(message.contains("gates.web_check_addresses"), "{message}");
        jail.set_env("BATON_GATES__WEB_CHECK_ADDRESSES", "");
        jail.set_env(
            "BATON_GATES__PROMETHEUS_ADDRESSES",
            r#"["https://user:secret@prometheus:9090"]"#,
        );
        let message = Config::load(None).unwrap_err().to_string();
        assert!(message.contains("gates.prometheus_addresses"), "{message}");
        assert!(message.contains("names a user"), "{message}");
        Ok(())
    });
}

#[test]
fn a_destination_covers_its_origin_and_the_paths_below_it_only() {
    let prefix: Destination = "https://deploys.example.com/hooks"
        .parse()
        .expect("a prefix");
    let covers = |url: &str| prefix.covers(&url::Url::parse(url).expect("a URL"));
    assert!(covers("https://deploys.example.com/hooks"));
    assert!(covers(
        "https://deploys.example.com:443/hooks/ingester?token=x"
    ));
    assert!(!covers("https://deploys.example.com/hooksmith"));
    assert!(!covers("https://deploys.example.com/"));
    assert!(!covers("http://deploys.example.com/hooks"));
    assert!(!covers("https://deploys.example.com:8443/hooks"));
    assert!(!covers("https://deploys.example.com.evil.example/hooks"));
    assert!(!covers("https://evil.example/hooks"));
    for bad in [
        "ftp://deploys.example.com",
        "https://deploys.example.com/?token=1",
        "deploys.example.com",
    ] {
        assert!(bad.parse::<Destination>().is_err(), "{bad}");
    }
}

#[test]
fn a_services_link_variables_are_not_taken_for_keys() {
    Jail::expect_with(|jail| {
        // Given the variables the kubelet gives a pod for the Service baton-webhook
        for (name, value) in [
            ("BATON_WEBHOOK_SERVICE_HOST", "10.96.0.10"),
            ("BATON_WEBHOOK_SERVICE_PORT", "443"),
            ("BATON_WEBHOOK_SERVICE_PORT_HTTPS", "443"),
            ("BATON_WEBHOOK_PORT", "tcp://10.96.0.10:443"),
            ("BATON_WEBHOOK_PORT_443_TCP", "tcp://10.96.0.10:443"),
            ("BATON_WEBHOOK_PORT_443_TCP_PROTO", "tcp"),
            ("BATON_WEBHOOK_PORT_443_TCP_PORT", "443"),
            ("BATON_WEBHOOK_PORT_443_TCP_ADDR", "10.96.0.10"),
        ] {
            jail.set_env(name, value);
        }
        jail.set_env("BATON_NAMESPACE", "ingesters");
        // When the configuration loads, then they are not read, and baton's own keys are
        let config = Config::load(None).expect("a Service's links are not configuration");
        assert_eq!(config.namespace, "ingesters");
        Ok(())
    });
}

#[test]
fn a_misspelt_nested_key_in_the_environment_is_still_an_error() {
    Jail::expect_with(|jail| {
        // The first part names a key, so the variable is baton's, and its typo is refused
        jail.set_env("BATON_WEBHOOK__ADRESS", "0.0.0.0:9443");
        let message = Config::load(None).unwrap_err().to_string();
        assert!(message.contains("webhook.adress"), "{message}");
        assert!(message.contains("unknown key"), "{message}");
        assert!(message.contains("BATON_WEBHOOK__ADRESS"), "{message}");
        Ok(())
    });
}

#[test]
fn unread_variables_are_told_apart_from_service_links() {
    let ignored = ignored_variables([
        "BATON_CONFIG",
        "BATON_NAMESPACE",
        "BATON_LOG__FORMAT",
        "BATON_NAMESPCE",
        "BATON_WEBHOOK_PORT",
        "BATON_CONTROLLER_SERVICE_HOST",
        "BATON_WEBHOOK_PORT_443_TCP_ADDR",
        "BATON_METRICS_PORT_8001_SCTP",
        "PATH",
    ]);
    let described: Vec<(&str, bool)> = ignored
        .iter()
        .map(|variable| (variable.name.as_str(), variable.service_link))
        .collect();
    assert_eq!(
        described,
        [
            ("BATON_CONTROLLER_SERVICE_HOST", true),
            ("BATON_METRICS_PORT_8001_SCTP", true),
            ("BATON_NAMESPCE", false),
            ("BATON_WEBHOOK_PORT", true),
            ("BATON_WEBHOOK_PORT_443_TCP_ADDR", true),
        ]
    );
    for not_a_link in [
        "BATON_PORT_X_TCP",
        "BATON_WEBHOOK_PORT_443_TCP_HOST",
        "BATON_PORTS",
    ] {
        assert!(!is_service_link(not_a_link), "{not_a_link}");
    }
}

#[test]
fn lists_come_from_the_environment_comma_separated_or_as_a_sequence() {
    Jail::expect_with(|jail| {
        // A single address, as people write it
        jail.set_env(
            "BATON_GATES__PROMETHEUS_ADDRESSES",
            "http://prometheus.monitoring.svc:9090",
        );
        // Several, comma-separated, with spaces
        jail.set_env(
            "BATON_WEBHOOK__STATE_WRITERS",
            "system:serviceaccount:baton:a, system:serviceaccount:baton:b",
        );
        // The sequence form still works
        jail.set_env("BATON_CERTIFICATES__EXTRA_IPS", "[127.0.0.1, \"::1\"]");
        jail.set_env("BATON_CERTIFICATES__EXTRA_DNS_NAMES", "");
        let config = Config::load(None).expect("loads");
        assert_eq!(
            config
                .gates
                .prometheus_addresses
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["http://prometheus.monitoring.svc:9090/"]
        );
        assert_eq!(
            config.webhook.state_writers,
            [
                "system:serviceaccount:baton:a",
                "system:serviceaccount:baton:b"
            ]
        );
        assert_eq!(
            config.certificates.extra_ips,
            [
                "127.0.0.1".parse::<std::net::IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert!(config.certificates.extra_dns_names.is_empty());
        Ok(())
    });
}

#[test]
fn a_bad_item_of_a_comma_separated_list_is_named() {
    Jail::expect_with(|jail| {
        jail.set_env(
            "BATON_GATES__HOOK_ADDRESSES",
            "https://deploys.example.com,ftp://files.example.com",
        );
        let message = Config::load(None).unwrap_err().to_string();
        assert!(message.contains("gates.hook_addresses"), "{message}");
        assert!(message.contains("ftp://files.example.com"), "{message}");
        assert!(message.contains("BATON_GATES__HOOK_ADDRESSES"), "{message}");
        Ok(())
    });
}

#[test]
fn member_clusters_are_read_from_the_file_and_each_bad_one_is_named() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "baton.yaml",
            "controller:\n  clusters:\n    - name: cluster-a\n    - name: cluster-b\n      kubeconfig_secret: member-b\n",
        )?;
        let config = Config::load(Some(Path::new("baton.yaml"))).expect("valid members");
        let members = &config.controller.clusters;
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].kubeconfig_secret, "", "the hub needs no Secret");
        assert_eq!(members[1].kubeconfig_secret, "member-b");
        assert_eq!(members[1].kubeconfig_key, "kubeconfig", "the default key");
        Ok(())
    });
    Jail::expect_with(|jail| {
        jail.create_file(
            "baton.yaml",
            "controller:\n  clusters:\n    - name: Cluster/A\n    - name: b\n    - name: b\n      kubeconfig_secret: s\n    - name: c\n",
        )?;
        let error = Config::load(Some(Path::new("baton.yaml"))).unwrap_err();
        let keys = error.keys();
        let message = error.to_string();
        assert!(
            keys.contains(&"controller.clusters[0].name".to_owned()),
            "{message}"
        );
        assert!(message.contains("Cluster/A"), "{message}");
        assert!(
            keys.contains(&"controller.clusters[2].name".to_owned()),
            "{message}"
        );
        // Three members without a Secret: at most one may be the controller's own cluster.
        assert!(
            keys.contains(&"controller.clusters".to_owned()),
            "{message}"
        );
        Ok(())
    });
}

#[test]
fn the_webhooks_member_clusters_name_its_own_cluster_exactly_once() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "baton.yaml",
            "webhook:\n  clusters:\n    - name: cluster-a\n      kubeconfig_secret: member-a\n    - name: cluster-b\n",
        )?;
        let config = Config::load(Some(Path::new("baton.yaml"))).expect("valid members");
        let members = &config.webhook.clusters;
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].kubeconfig_secret, "member-a");
        assert_eq!(members[0].kubeconfig_key, "kubeconfig", "the default key");
        assert_eq!(
            members[1].kubeconfig_secret, "",
            "its own cluster needs no Secret"
        );
        Ok(())
    });
    Jail::expect_with(|jail| {
        // No own cluster: the webhook could not tell which ledger is its own.
        jail.create_file(
            "baton.yaml",
            "webhook:\n  clusters:\n    - name: cluster-a\n      kubeconfig_secret: member-a\n    - name: cluster-a\n      kubeconfig_secret: x/y\n",
        )?;
        let error = Config::load(Some(Path::new("baton.yaml"))).unwrap_err();
        let keys = error.keys();
        let message = error.to_string();
        assert!(keys.contains(&"webhook.clusters".to_owned()), "{message}");
        assert!(
            keys.contains(&"webhook.clusters[1].name".to_owned()),
            "{message}"
        );
        assert!(
            keys.contains(&"webhook.clusters[1].kubeconfig_secret".to_owned()),
            "{message}"
        );
        assert!(message.contains("x/y"), "{message}");
        Ok(())
    });
}

#[test]
fn namespaces_are_one_by_default_a_list_or_every_one_narrowed_by_a_selector() {
    let config = Config::default();
    assert_eq!(
        config.scope().unwrap().only(),
        Some("default"),
        "the Go operator's way"
    );
    Jail::expect_with(|jail| {
        jail.set_env("BATON_NAMESPACES", "mimir, loki");
        let config = Config::load(None).expect("a list from the environment");
        let scope = config.scope().unwrap();
        assert_eq!(scope.only(), None);
        assert_eq!(scope.describe(), "namespaces loki, mimir");
        Ok(())
    });
    Jail::expect_with(|jail| {
        jail.create_file(
            "baton.yaml",
            "namespaces: ['*']\nnamespace_selector:\n  match_labels:\n    baton.example.com/served: 'true'\n  match_expressions:\n    - key: tier\n      operator: NotIn\n      values: [test]\n",
        )?;
        let config =
            Config::load(Some(Path::new("baton.yaml"))).expect("every namespace, labelled");
        let scope = config.scope().unwrap();
        let labels = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert!(scope.serves("any", &labels(&[("baton.example.com/served", "true")])));
        assert!(!scope.serves(
            "any",
            &labels(&[("baton.example.com/served", "true"), ("tier", "test")])
        ));
        assert!(!scope.serves("any", &labels(&[])));
        Ok(())
    });
}

#[test]
fn bad_namespaces_and_selectors_name_the_key_and_the_value() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "baton.yaml",
            "namespaces: ['*', Mimir]\nnamespace_selector:\n  match_labels:\n    'bad key!': x\n  match_expressions:\n    - key: tier\n      operator: Like\n      values: [a]\n    - key: team\n      operator: In\n",
        )?;
        let error = Config::load(Some(Path::new("baton.yaml"))).unwrap_err();
        let keys = error.keys();
        let message = error.to_string();
        for key in [
            "namespaces",
            "namespaces[1]",
            "namespace_selector.match_labels",
            "namespace_selector.match_expressions[0].operator",
            "namespace_selector.match_expressions[1].values",
        ] {
            assert!(keys.contains(&key.to_owned()), "{key}: {message}");
        }
        assert!(
            message.contains("Mimir") && message.contains("Like"),
            "{message}"
        );
        assert!(
            !keys.contains(&"namespace_selector.match_expressions[0].values".to_owned()),
            "In with a value is fine: {message}"
        );
        Ok(())
    });
}
