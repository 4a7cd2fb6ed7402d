use serde_json::json;

use super::*;

const CA: &str = "LS0tLS1CRUdJTi1DQS0tLS0t";
const CERT: &str = "LS0tLS1CRUdJTi1DRVJULS0tLS0=";
const KEY: &str = "LS0tLS1CRUdJTi1LRVktLS0tLQ==";

/// A kubeconfig whose current context `member` names cluster `b` and user `baton`, with
/// `cluster` and `user` as their fields.
fn kubeconfig(cluster: Value, user: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "b", "cluster": cluster}],
        "users": [{"name": "baton", "user": user}],
        "contexts": [{"name": "member", "context": {"cluster": "b", "user": "baton"}}],
        "current-context": "member",
    })
}

fn server() -> Value {
    json!({"server": "https://cluster-b.example:6443", "certificate-authority-data": CA})
}

fn token() -> Value {
    json!({"token": "s3cr3t"})
}

fn accept_json(kubeconfig: &Value) -> Result<ClusterCredentials, Unusable> {
    accept(&serde_json::to_string(kubeconfig).expect("JSON"))
}

fn refusals(kubeconfig: &Value) -> Vec<Refusal> {
    match accept_json(kubeconfig) {
        Err(Unusable::Refused(refusals)) => refusals,
        other => panic!("{kubeconfig:#} refused, not {other:?}"),
    }
}

#[test]
fn each_field_that_reads_a_file_runs_a_program_proxies_or_weakens_tls_is_refused_by_name() {
    let with = |base: Value, key: &str, value: Value| {
        let mut object = base;
        object[key] = value;
        object
    };
    let cluster_fields = [
        (
            "certificate-authority",
            json!("/var/run/secrets/ca.crt"),
            "reads a file of the controller's pod",
        ),
        (
            "proxy-url",
            json!("http://127.0.0.1:3128"),
            "through a proxy",
        ),
        (
            "insecure-skip-tls-verify",
            json!(true),
            "turns off checking the server's certificate",
        ),
    ];
    for (key, value, why) in cluster_fields {
        let refused = refusals(&kubeconfig(with(server(), key, value), token()));
        assert_eq!(refused.len(), 1, "{key}: {refused:?}");
        assert_eq!(refused[0].field, format!("clusters[\"b\"].cluster.{key}"));
        assert!(refused[0].why.contains(why), "{key}: {}", refused[0].why);
    }
    let user_fields = [
        (
            "tokenFile",
            json!("/var/run/secrets/kubernetes.io/serviceaccount/token"),
            "reads a file of the controller's pod: give token",
        ),
        (
            "client-certificate",
            json!("/etc/tls/tls.crt"),
            "reads a file of the controller's pod: give client-certificate-data",
        ),
        (
            "client-key",
            json!("/etc/tls/tls.key"),
            "reads a file of the controller's pod: give client-key-data",
        ),
        (
            "exec",
            json!({"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh", "args": ["-c", "id"]}),
            "runs a program",
        ),
        (
            "auth-provider",
            json!({"name": "gcp", "config": {"cmd-path": "/bin/sh", "cmd-args": "-c id"}}),
            "cmd-path",
        ),
        (
            "auth-provider",
            json!({"name": "oidc", "config": {"idp-issuer-url": "https://idp.example"}}),
            "is an auth provider",
        ),
        ("username", json!("admin"), "basic authentication"),
        ("password", json!("admin"), "basic authentication"),
        ("as", json!("system:admin"), "impersonates"),
        ("as-uid", json!("0"), "impersonates"),
        ("as-groups", json!(["system:masters"]), "impersonates"),
        ("as-user-extra", json!({"scopes": ["all"]}), "impersonates"),
    ];
    for (key, value, why) in user_fields {
        let refused = refusals(&kubeconfig(server(), with(token(), key, value)));
        assert_eq!(refused.len(), 1, "{key}: {refused:?}");
        assert_eq!(refused[0].field, format!("users[\"baton\"].user.{key}"));
        assert!(refused[0].why.contains(why), "{key}: {}", refused[0].why);
    }
}

#[test]
fn a_field_baton_does_not_know_is_refused_wherever_it_is() {
    let mut top = kubeconfig(server(), token());
    top["include"] = json!("/etc/passwd");
    let mut context = kubeconfig(server(), token());
    context["contexts"][0]["context"]["proxy"] = json!("http://p");
    let mut entry = kubeconfig(server(), token());
    entry["users"][0]["file"] = json!("/x");
    let cluster = kubeconfig(
        json!({"server": "https://b:6443", "certificate-authority-file": "/ca"}),
        token(),
    );
    let user = kubeconfig(server(), json!({"token": "t", "tokenCommand": "id"}));
    for (kubeconfig, field) in [
        (top, "include"),
        (context, "contexts[\"member\"].context.proxy"),
        (entry, "users[\"baton\"].file"),
        (
            cluster,
            "clusters[\"b\"].cluster.certificate-authority-file",
        ),
        (user, "users[\"baton\"].user.tokenCommand"),
    ] {
        let refused = refusals(&kubeconfig);
        assert_eq!(
            refused.iter().map(|r| r.field.as_str()).collect::<Vec<_>>(),
            [field]
        );
        assert!(
            refused[0]
                .why
                .starts_with("is not a field baton accepts there (accepted: "),
            "{}",
            refused[0].why
        );
    }
}

#[test]
fn every_refused_field_is_named_at_once_and_the_message_names_each() {
    let refused = refusals(&kubeconfig(
        json!({"server": "https://b", "proxy-url": "http://p", "insecure-skip-tls-verify": true}),
        json!({"tokenFile": "/t", "exec": {"command": "id"}}),
    ));
    let mut fields: Vec<String> = refused.iter().map(|r| r.field.clone()).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "clusters[\"b\"].cluster.insecure-skip-tls-verify",
            "clusters[\"b\"].cluster.proxy-url",
            "users[\"baton\"].user.exec",
            "users[\"baton\"].user.tokenFile",
        ]
    );
    let message = Unusable::Refused(refused).to_string();
    for field in fields {
        assert!(message.contains(&field), "{message}");
    }
}

#[test]
fn inline_shapes_are_accepted_and_only_they_reach_the_client() {
    // A token, with the CA inline.
    let access = accept_json(&kubeconfig(server(), token())).expect("a token");
    assert_eq!(
        access,
        ClusterCredentials {
            server: "https://cluster-b.example:6443".into(),
            certificate_authority_data: Some(CA.into()),
            tls_server_name: None,
            disable_compression: None,
            token: Some("s3cr3t".into()),
            client_certificate_data: None,
            client_key_data: None,
        }
    );
    // A client certificate, with what is harmless beside it: a server name to check, no
    // compression, checking the certificate said out loud, a context namespace, extensions,
    // kubectl's preferences, and fields set to null (kube reads them as absent).
    let full = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "extensions": [{"name": "x", "extension": {"a": 1}}],
        "clusters": [{"name": "b", "cluster": {
            "server": "https://10.0.0.1:6443", "certificate-authority-data": CA,
            "tls-server-name": "cluster-b.example", "disable-compression": true,
            "insecure-skip-tls-verify": false, "proxy-url": null,
            "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {}}],
        }}],
        "users": [{"name": "baton", "user": {
            "client-certificate-data": CERT, "client-key-data": KEY, "tokenFile": null,
            "exec": null,
        }}],
        "contexts": [{"name": "member", "context": {
            "cluster": "b", "user": "baton", "namespace": "mimir", "extensions": [],
        }}],
        "current-context": "member",
    });
    let access = accept_json(&full).expect("a client certificate");
    assert_eq!(access.server, "https://10.0.0.1:6443");
    assert_eq!(access.tls_server_name.as_deref(), Some("cluster-b.example"));
    assert_eq!(access.disable_compression, Some(true));
    assert_eq!(access.client_certificate_data.as_deref(), Some(CERT));
    assert_eq!(access.client_key_data.as_deref(), Some(KEY));
    assert_eq!(access.token, None);
    // The kubeconfig the client is built from holds what was accepted, and nothing else.
    assert_eq!(
        access.kubeconfig(),
        json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "member", "cluster": {
                "server": "https://10.0.0.1:6443", "certificate-authority-data": CA,
                "tls-server-name": "cluster-b.example", "disable-compression": true,
            }}],
            "users": [{"name": "member", "user": {
                "client-certificate-data": CERT, "client-key-data": KEY,
            }}],
            "contexts": [{"name": "member", "context": {"cluster": "member", "user": "member"}}],
            "current-context": "member",
        })
    );
    // No user: anonymous; no CA: the system's roots.
    let mut anonymous = kubeconfig(json!({"server": "https://b.example"}), json!({}));
    anonymous["contexts"][0]["context"] = json!({"cluster": "b"});
    let access = accept_json(&anonymous).expect("anonymous");
    assert_eq!(
        (access.token, access.certificate_authority_data),
        (None, None)
    );
    // The credentials never show in its Debug.
    let debug = format!(
        "{:?}",
        accept_json(&kubeconfig(server(), token())).expect("a token")
    );
    assert!(!debug.contains("s3cr3t"), "{debug}");
}

#[test]
fn only_the_current_context_its_cluster_and_its_user_are_read() {
    let kubeconfig = json!({
        "clusters": [
            {"name": "other", "cluster": {"server": "http://x", "certificate-authority": "/ca", "proxy-url": "http://p"}},
            {"name": "b", "cluster": server()},
        ],
        "users": [
            {"name": "admin", "user": {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}},
            {"name": "baton", "user": token()},
            {"name": "plugin", "user": {"exec": {"command": "id"}}},
        ],
        "contexts": [
            {"name": "admin", "context": {"cluster": "other", "user": "admin"}},
            {"name": "member", "context": {"cluster": "b", "user": "baton"}},
        ],
        "current-context": "member",
    });
    let access = accept_json(&kubeconfig).expect("the current context is inline");
    assert_eq!(access.token.as_deref(), Some("s3cr3t"));
    assert_eq!(access.server, "https://cluster-b.example:6443");
    // The same kubeconfig, current context `admin`: its user reads a file, its cluster is
    // plain HTTP, names a file and a proxy.
    let mut admin = kubeconfig;
    admin["current-context"] = json!("admin");
    let mut fields: Vec<String> = refusals(&admin).into_iter().map(|r| r.field).collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "clusters[\"other\"].cluster.certificate-authority",
            "clusters[\"other\"].cluster.proxy-url",
            "clusters[\"other\"].cluster.server",
            "users[\"admin\"].user.tokenFile",
        ]
    );
}

#[test]
fn a_kubeconfig_that_leaves_its_connection_unclear_is_refused() {
    let base = kubeconfig(server(), token());
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "no current context",
            {
                let mut k = base.clone();
                k.as_object_mut()
                    .expect("a mapping")
                    .remove("current-context");
                k
            },
            "current-context",
            "is missing",
        ),
        (
            "a current context no entry has",
            {
                let mut k = base.clone();
                k["current-context"] = json!("elsewhere");
                k
            },
            "contexts[\"elsewhere\"]",
            "is missing",
        ),
        (
            "two contexts of the current name",
            {
                let mut k = base.clone();
                let second =
                    json!({"name": "member", "context": {"cluster": "b", "user": "other"}});
                k["contexts"].as_array_mut().expect("a list").push(second);
                k
            },
            "contexts[\"member\"]",
            "is ambiguous: 2 entries",
        ),
        (
            "two clusters of the context's name",
            {
                let mut k = base.clone();
                let second = json!({"name": "b", "cluster": {"server": "https://elsewhere"}});
                k["clusters"].as_array_mut().expect("a list").push(second);
                k
            },
            "clusters[\"b\"]",
            "is ambiguous",
        ),
        (
            "two users of the context's name",
            {
                let mut k = base.clone();
                let second = json!({"name": "baton", "user": {"token": "other"}});
                k["users"].as_array_mut().expect("a list").push(second);
                k
            },
            "users[\"baton\"]",
            "is ambiguous",
        ),
        (
            "a user the context names and no entry has",
            {
                let mut k = base.clone();
                k["contexts"][0]["context"]["user"] = json!("nobody");
                k
            },
            "users[\"nobody\"]",
            "is missing",
        ),
        (
            "a context with no cluster",
            {
                let mut k = base.clone();
                k["contexts"][0]["context"] = json!({"user": "baton"});
                k
            },
            "contexts[\"member\"].context.cluster",
            "is missing",
        ),
        (
            "no server",
            kubeconfig(json!({"certificate-authority-data": CA}), token()),
            "clusters[\"b\"].cluster.server",
            "is missing",
        ),
        (
            "a plain HTTP server",
            kubeconfig(json!({"server": "http://b:8080"}), token()),
            "clusters[\"b\"].cluster.server",
            "is not https (http)",
        ),
        (
            "a server that is no URL",
            kubeconfig(json!({"server": "cluster-b:6443"}), token()),
            "clusters[\"b\"].cluster.server",
            "is not",
        ),
        (
            "a token that is not a string",
            kubeconfig(server(), json!({"token": 42})),
            "users[\"baton\"].user.token",
            "is not a string",
        ),
        (
            "a certificate without its key",
            kubeconfig(server(), json!({"client-certificate-data": CERT})),
            "users[\"baton\"].user.client-key-data",
            "is missing",
        ),
        (
            "a key without its certificate",
            kubeconfig(server(), json!({"client-key-data": KEY})),
            "users[\"baton\"].user.client-certificate-data",
            "is missing",
        ),
        (
            "insecure-skip-tls-verify as a string",
            kubeconfig(
                json!({"server": "https://b", "insecure-skip-tls-verify": "false"}),
                token(),
            ),
            "clusters[\"b\"].cluster.insecure-skip-tls-verify",
            "turns off checking",
        ),
    ];
    for (case, kubeconfig, field, why) in cases {
        let refused = refusals(&kubeconfig);
        assert!(
            refused
                .iter()
                .any(|r| r.field == field && r.why.contains(why)),
            "{case}: {refused:?}"
        );
    }
}

#[test]
fn only_one_yaml_document_of_a_mapping_is_read_and_its_errors_quote_nothing() {
    // kube merges a kubeconfig's documents; baton reads one, so what it checked is all there is.
    let two = "current-context: member\n---\ncurrent-context: other\n";
    assert_eq!(
        accept(two),
        Err(Unusable::Unreadable(
            "2 YAML documents; a member's kubeconfig is one".into()
        ))
    );
    assert!(matches!(accept("- a list"), Err(Unusable::Unreadable(why)) if why == "not a mapping"));
    // An error says where, not what is there: the text holds credentials.
    let Err(Unusable::Unreadable(why)) = accept("users:\n- name: x\n  user: {token: \"s3cr3t\n")
    else {
        panic!("unreadable");
    };
    assert!(why.starts_with("not YAML"), "{why}");
    assert!(!why.contains("s3cr3t"), "{why}");
    // YAML as people write it: the accepted fields, a comment, an anchor.
    let yaml = "\
apiVersion: v1
kind: Config
clusters:
- name: b
  cluster: &b
    server: https://cluster-b.example:6443
    certificate-authority-data: LS0t
users:
- name: baton
  user:
    token: s3cr3t # from `kubectl create token`
contexts:
- name: member
  context: {cluster: b, user: baton}
current-context: member
";
    let access = accept(yaml).expect("a plain kubeconfig");
    assert_eq!(access.server, "https://cluster-b.example:6443");
    assert_eq!(access.token.as_deref(), Some("s3cr3t"));
    // A tag that asks a reader to include a file includes nothing here: it is refused or
    // unreadable, never followed.
    let include = yaml.replace("token: s3cr3t", "tokenFile: !include /etc/passwd");
    assert!(accept(&include).is_err());
}
