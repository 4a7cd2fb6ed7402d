//! `kubectl baton cluster add NAME --from-context CONTEXT`: hands the hub's controller a member
//! cluster, as the kubeconfig Secret it reads (`controller.clusters[].kubeconfig_secret`).
//!
//! Written by hand, that Secret is the step of a multi-cluster setup most likely to go wrong:
//! the kubeconfig must be self-contained (the hub's controller accepts inline server, CA and
//! token alone, [`baton_core::cluster_kubeconfig`], and a person's kubeconfig usually names files
//! or runs a program), its identity must be deploy/member-cluster's `baton-member` (the one the member's
//! state guard lets write baton's memory), and that identity must reach the groups' namespace.
//! So this command, from the person's own context for the member:
//! 1. asks the member for a token of that ServiceAccount (a TokenRequest: a bound token with the
//!    lifetime `--duration` asks for, which dies with the ServiceAccount);
//! 2. builds the kubeconfig from the context's cluster (its server, or `--server`, and its CA,
//!    read from a file if the context names one) and the token, and reads it with the
//!    controller's own allow-list ([`baton_core::cluster_kubeconfig::accept`]) before anything
//!    is written;
//! 3. checks it as the controller will use it: it lists the StatefulSets of the groups'
//!    namespace with it (the member's Role);
//! 4. writes the Secret in the hub's system namespace by server-side apply, so that running the
//!    command again rotates the token.
//!
//! The pure steps ([`endpoint`], [`kubeconfig_for`], [`secret`]) are unit tested; the whole
//! command runs against three control planes in tests/tests/clusters.rs, which sets its members
//! up with it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use baton_core::cluster_kubeconfig::{self, ClusterCredentials};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

use crate::access::{Access, Target};
use crate::clusters::error_chain;

/// Where deploy/ installs baton, and so where the hub's controller reads the Secret and where
/// deploy/member-cluster puts the member's ServiceAccount.
pub const SYSTEM_NAMESPACE: &str = "baton-system";

/// deploy/member-cluster's ServiceAccount (deploy/member-cluster/system/member-account.yaml), as
/// `NAMESPACE/NAME`.
pub const MEMBER_ACCOUNT: &str = "baton-system/baton-member";

/// The key the controller reads by default (`controller.clusters[].kubeconfig_key`).
pub const DEFAULT_KEY: &str = "kubeconfig";

/// Who wrote the Secret, as server-side apply records it: a second run takes its fields over.
const FIELD_MANAGER: &str = "kubectl-baton";

/// On the Secret: the member cluster it is for, and when its token expires (to see which
/// Secret needs rotating: `kubectl get secrets -L baton.dev/cluster`).
pub const CLUSTER_LABEL: &str = "baton.dev/cluster";
pub const TOKEN_EXPIRES_ANNOTATION: &str = "baton.dev/token-expires";

/// The shortest token an API server issues (TokenRequest's `expirationSeconds`).
const SHORTEST_TOKEN: Duration = Duration::from_secs(600);

/// `kubectl baton cluster add`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Add {
    /// The member cluster's name, as the controller names it (controller.clusters[].name): its
    /// StatefulSets read NAME/STATEFULSET.
    #[arg(value_parser = parse_name)]
    pub name: String,
    /// The kubeconfig context that reaches the member cluster (yours; the hub gets a token of
    /// its own). --context is the hub's.
    #[arg(long, value_name = "CONTEXT")]
    pub from_context: String,
    /// The member's API server as the hub's controller reaches it (default: the context's
    /// server), https:// only. The CA is the context's either way.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// How long the token lives: a duration such as 720h (at least 10m). The API server may
    /// grant less (its --service-account-max-token-expiration): the expiry granted is printed
    /// and annotated on the Secret. Run the command again before then to rotate it.
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub duration: Duration,
    /// The ServiceAccount in the member whose token the hub is given: deploy/member-cluster's.
    #[arg(long, value_name = "NAMESPACE/NAME", default_value = MEMBER_ACCOUNT, value_parser = parse_account)]
    pub service_account: Account,
    /// The Secret written in the hub (default: member-NAME).
    #[arg(long, value_name = "NAME")]
    pub secret: Option<String>,
    /// The Secret's key holding the kubeconfig (controller.clusters[].kubeconfig_key).
    #[arg(long, default_value = DEFAULT_KEY)]
    pub key: String,
    /// baton's namespace in the hub, where the controller reads the Secret (its
    /// system_namespace).
    #[arg(long, value_name = "NAMESPACE", default_value = SYSTEM_NAMESPACE)]
    pub system_namespace: String,
    /// Do not check the kubeconfig from here by listing the groups' StatefulSets with it (for a
    /// --server only the hub can reach).
    #[arg(long)]
    pub no_check: bool,
}

/// A ServiceAccount, `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Account {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}/{}", self.namespace, self.name)
    }
}

fn parse_name(text: &str) -> Result<String, String> {
    baton_core::clusters::valid_cluster_name(text)?;
    Ok(text.to_owned())
}

fn parse_account(text: &str) -> Result<Account, String> {
    match text.split_once('/') {
        Some((namespace, name))
            if baton_core::names::is_dns_label(namespace)
                && baton_core::names::is_dns_subdomain(name) =>
        {
            Ok(Account {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
        }
        _ => Err(format!(
            "{text:?} is not NAMESPACE/NAME of a ServiceAccount (e.g. {MEMBER_ACCOUNT})"
        )),
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let accepted = "expected a duration such as 720h or 8760h, at least 10m";
    let nanos = baton_core::duration::go::parse(text.trim())
        .map_err(|error| format!("{error}: {accepted}"))?;
    let duration = u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("{text:?} is negative: {accepted}"))?;
    if duration < SHORTEST_TOKEN {
        return Err(format!(
            "{text:?} is shorter than an API server issues a token for: {accepted}"
        ));
    }
    Ok(duration)
}

/// What went wrong, worded for the person at the terminal: which cluster, which context, and
/// what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot load the kubeconfig{}: {why}", shown(.path.as_deref()))]
    Kubeconfig { path: Option<PathBuf>, why: String },
    #[error(
        "no context {context} in the kubeconfig{}; its contexts: {}",
        shown(.path.as_deref()),
        if .known.is_empty() { "none".to_owned() } else { .known.join(", ") }
    )]
    UnknownContext {
        context: String,
        path: Option<PathBuf>,
        known: Vec<String>,
    },
    #[error(
        "context {context} is the hub's (--context, else the current context): the hub needs no Secret, list it in controller.clusters without kubeconfig_secret"
    )]
    HubContext { context: String },
    #[error("context {context}: {why}")]
    Context { context: String, why: String },
    #[error("the kubeconfig for cluster {name} would be refused by the hub's controller: {why}")]
    Refused { name: String, why: String },
    #[error("cannot reach cluster {name} (context {context}, {server}): {error}")]
    Unreachable {
        name: String,
        context: String,
        server: String,
        error: String,
    },
    #[error(
        "no ServiceAccount {account} in cluster {name} (context {context}): apply deploy/member-cluster there first (docs/multi-cluster.md, \"Setting it up\")"
    )]
    NoServiceAccount {
        name: String,
        context: String,
        account: Account,
    },
    #[error("{doing} in cluster {name} (context {context}): {why}")]
    Cluster {
        name: String,
        context: String,
        doing: String,
        why: String,
    },
    #[error(
        "the kubeconfig for cluster {name} ({account} at {server}) cannot list StatefulSets in namespace {namespace}: {why}"
    )]
    Check {
        name: String,
        /// `namespace/name` of the ServiceAccount.
        account: String,
        server: String,
        namespace: String,
        why: String,
    },
    #[error("the hub (context {context}): {why}")]
    Hub { context: String, why: String },
}

fn shown(path: Option<&Path>) -> String {
    path.map(|path| format!(" {}", path.display()))
        .unwrap_or_default()
}

/// Where the member's API server is and how to check its certificate, from a context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub server: String,
    /// Base64 of the PEM, as a kubeconfig carries it; none: the system's roots.
    pub certificate_authority_data: Option<String>,
    pub tls_server_name: Option<String>,
}

/// The member's endpoint from `context` of `kubeconfig`: its cluster's server (or `server`),
/// its CA inline (a `certificate-authority` file is read with `read`) and TLS server name. A
/// context that does not check the server's certificate is refused: the hub will.
pub fn endpoint(
    kubeconfig: &Kubeconfig,
    context: &str,
    server: Option<&str>,
    read: impl Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<Endpoint, ClusterError> {
    let problem = |why: String| ClusterError::Context {
        context: context.to_owned(),
        why,
    };
    let named = kubeconfig
        .contexts
        .iter()
        .find(|named| named.name == context)
        .ok_or_else(|| ClusterError::UnknownContext {
            context: context.to_owned(),
            path: None,
            known: kubeconfig
                .contexts
                .iter()
                .map(|named| named.name.clone())
                .collect(),
        })?;
    let cluster_name = named
        .context
        .as_ref()
        .map(|context| context.cluster.clone())
        .filter(|cluster| !cluster.is_empty())
        .ok_or_else(|| problem("names no cluster".into()))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|named| named.name == cluster_name)
        .and_then(|named| named.cluster.as_ref())
        .ok_or_else(|| {
            problem(format!(
                "its cluster {cluster_name} is not in the kubeconfig"
            ))
        })?;
    let server = match server {
        Some(server) => server.to_owned(),
        None => cluster
            .server
            .clone()
            .ok_or_else(|| problem(format!("its cluster {cluster_name} has no server")))?,
    };
    let certificate_authority_data = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(data.clone()),
        (None, Some(file)) => {
            let pem = read(Path::new(file)).map_err(|error| {
                problem(format!(
                    "reading certificate-authority {file} of its cluster {cluster_name}: {error}"
                ))
            })?;
            Some(base64::engine::general_purpose::STANDARD.encode(pem))
        }
        (None, None) => None,
    };
    if cluster.insecure_skip_tls_verify == Some(true) && certificate_authority_data.is_none() {
        return Err(problem(format!(
            "its cluster {cluster_name} skips checking the server's certificate (insecure-skip-tls-verify) and names no CA; the hub's controller checks it: give the cluster's certificate-authority-data in the context"
        )));
    }
    Ok(Endpoint {
        server,
        certificate_authority_data,
        tls_server_name: cluster.tls_server_name.clone(),
    })
}

/// The kubeconfig the hub's controller is given for cluster `name`: `endpoint` and `token`,
/// inline, as YAML; read back with the controller's own allow-list, so that what is written is
/// what it accepts (an `http://` `--server`, say, is refused here, by field).
pub fn kubeconfig_for(
    name: &str,
    endpoint: &Endpoint,
    token: &str,
) -> Result<String, ClusterError> {
    let access = ClusterCredentials {
        server: endpoint.server.clone(),
        certificate_authority_data: endpoint.certificate_authority_data.clone(),
        tls_server_name: endpoint.tls_server_name.clone(),
        disable_compression: None,
        token: Some(token.to_owned()),
        client_certificate_data: None,
        client_key_data: None,
    };
    let refused = |why: String| ClusterError::Refused {
        name: name.to_owned(),
        why,
    };
    let text = serde_saphyr::to_string(&access.kubeconfig())
        .map_err(|error| refused(format!("it cannot be written as YAML: {error}")))?;
    let accepted = cluster_kubeconfig::accept(&text).map_err(|error| refused(error.to_string()))?;
    // What was built is what the controller reads: nothing lost, nothing added.
    if accepted != access {
        return Err(refused(format!(
            "it reads back as {accepted:?}, not {access:?}"
        )));
    }
    Ok(text)
}

/// The Secret of cluster `name` (`secret`, in the hub's system namespace): `kubeconfig` under
/// `key`, labelled with the cluster, annotated with when its token `expires`.
pub fn secret(name: &str, secret: &str, key: &str, kubeconfig: &str, expires: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret,
            "labels": {
                "app.kubernetes.io/part-of": "baton",
                CLUSTER_LABEL: name,
            },
            "annotations": {TOKEN_EXPIRES_ANNOTATION: expires},
        },
        "type": "Opaque",
        "stringData": {key: kubeconfig},
    })
}

/// Runs `kubectl baton cluster add`: `target` names the hub (its context and kubeconfig) and
/// the groups' namespace (`-n`, else the hub context's). Returns the lines to print.
pub async fn add(target: &Target, add: &Add) -> Result<Vec<String>, ClusterError> {
    let kubeconfig = read_kubeconfig(target)?;
    let context = add.from_context.as_str();
    let hub_context = target
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .unwrap_or_default();
    if hub_context == context {
        return Err(ClusterError::HubContext {
            context: hub_context,
        });
    }
    let endpoint = endpoint(&kubeconfig, context, add.server.as_deref(), |path| {
        std::fs::read(path)
    })
    .map_err(|error| match error {
        ClusterError::UnknownContext { context, known, .. } => ClusterError::UnknownContext {
            context,
            path: target.kubeconfig.clone(),
            known,
        },
        error => error,
    })?;

    // The hub first: a hub that cannot be reached is better found before a token is issued.
    let hub = Access::connect(target)
        .await
        .map_err(|error| ClusterError::Hub {
            context: hub_context.clone(),
            why: error.to_string(),
        })?;

    let member =
        member_client(&kubeconfig, context)
            .await
            .map_err(|why| ClusterError::Cluster {
                name: add.name.clone(),
                context: context.to_owned(),
                doing: "connecting".into(),
                why,
            })?;
    let (token, expires) = issue_token(&member, add, &endpoint).await?;
    let text = kubeconfig_for(&add.name, &endpoint, &token)?;

    let checked = if add.no_check {
        "  not checked from here (--no-check)".to_owned()
    } else {
        check(&text, add, &endpoint, &hub.namespace).await?;
        format!(
            "  checked: it lists the StatefulSets of namespace {} there",
            hub.namespace
        )
    };
    let secret_name = add
        .secret
        .clone()
        .unwrap_or_else(|| format!("member-{}", add.name));
    let written = secret(&add.name, &secret_name, &add.key, &text, &expires);
    write_secret(&hub.client, add, &secret_name, written)
        .await
        .map_err(|why| ClusterError::Hub {
            context: hub_context.clone(),
            why,
        })?;
    Ok(what_was_done(
        add,
        &secret_name,
        &hub_context,
        &endpoint,
        checked,
        &expires,
    ))
}

/// The kubeconfig the person named (`--kubeconfig`), else their default one.
fn read_kubeconfig(target: &Target) -> Result<Kubeconfig, ClusterError> {
    match &target.kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    }
    .map_err(|error| ClusterError::Kubeconfig {
        path: target.kubeconfig.clone(),
        why: error_chain(&error),
    })
}

/// Applies the member's kubeconfig Secret in the hub's `--system-namespace`; what went wrong
/// says what to do about it.
async fn write_secret(
    hub: &Client,
    add: &Add,
    secret_name: &str,
    written: serde_json::Value,
) -> Result<(), String> {
    let written: Secret = serde_json::from_value(written)
        .map_err(|error| format!("the Secret cannot be built: {error}"))?;
    Api::<Secret>::namespaced(hub.clone(), &add.system_namespace)
        .patch(
            secret_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&written),
        )
        .await
        .map(drop)
        .map_err(|error| match error {
            kube::Error::Api(status) if status.is_not_found() => format!(
                "no namespace {} there: install baton in the hub first, or name its namespace with --system-namespace ({})",
                add.system_namespace, status.message
            ),
            kube::Error::Api(status) if status.is_forbidden() => format!(
                "no permission to write Secret {secret_name} in namespace {}: {}",
                add.system_namespace, status.message
            ),
            error => format!(
                "writing Secret {}/{secret_name}: {}",
                add.system_namespace,
                error_chain(&error)
            ),
        })
}

/// The lines printed once the Secret is written: where, as whom, until when, and the
/// configuration that names the cluster.
fn what_was_done(
    add: &Add,
    secret_name: &str,
    hub_context: &str,
    endpoint: &Endpoint,
    checked: String,
    expires: &str,
) -> Vec<String> {
    let mut said = vec![
        format!(
            "cluster {}: Secret {}/{secret_name} (key {}) written in the cluster of context {hub_context}",
            add.name, add.system_namespace, add.key
        ),
        format!(
            "  whoever is given it (the hub's controller, or a member's webhook for its peers) reaches {} as system:serviceaccount:{}:{}",
            endpoint.server, add.service_account.namespace, add.service_account.name
        ),
        checked,
        format!(
            "  the token expires at {expires}: run this command again before then to rotate it (the running controller reconnects with the new token)"
        ),
        "controller.clusters names it so:".to_owned(),
        format!("  - name: {}", add.name),
        format!("    kubeconfig_secret: {secret_name}"),
    ];
    if add.key != DEFAULT_KEY {
        said.push(format!("    kubeconfig_key: {}", add.key));
    }
    said
}

/// A client of the member as the person reaches it.
async fn member_client(kubeconfig: &Kubeconfig, context: &str) -> Result<Client, String> {
    let options = KubeConfigOptions {
        context: Some(context.to_owned()),
        ..KubeConfigOptions::default()
    };
    let config = Config::from_custom_kubeconfig(kubeconfig.clone(), &options)
        .await
        .map_err(|error| error_chain(&error))?;
    Client::try_from(config).map_err(|error| error_chain(&error))
}

/// A token of the member's ServiceAccount for `add.duration`, and when it expires (RFC 3339).
async fn issue_token(
    member: &Client,
    add: &Add,
    endpoint: &Endpoint,
) -> Result<(String, String), ClusterError> {
    let account = &add.service_account;
    let accounts = Api::<ServiceAccount>::namespaced(member.clone(), &account.namespace);
    let failed = |doing: &str, error: kube::Error| match error {
        kube::Error::Api(status) if status.is_forbidden() => ClusterError::Cluster {
            name: add.name.clone(),
            context: add.from_context.clone(),
            doing: doing.to_owned(),
            why: format!("no permission: {}", status.message),
        },
        kube::Error::Api(status) => ClusterError::Cluster {
            name: add.name.clone(),
            context: add.from_context.clone(),
            doing: doing.to_owned(),
            why: status.message,
        },
        error => ClusterError::Unreachable {
            name: add.name.clone(),
            context: add.from_context.clone(),
            server: endpoint.server.clone(),
            error: error_chain(&error),
        },
    };
    let found = accounts
        .get_opt(&account.name)
        .await
        .map_err(|error| failed(&format!("reading ServiceAccount {account}"), error))?;
    if found.is_none() {
        return Err(ClusterError::NoServiceAccount {
            name: add.name.clone(),
            context: add.from_context.clone(),
            account: account.clone(),
        });
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(i64::try_from(add.duration.as_secs()).unwrap_or(i64::MAX)),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(&account.name, &PostParams::default(), &request)
        .await
        .map_err(|error| failed(&format!("asking a token of {account}"), error))?;
    match issued.status {
        Some(status) if !status.token.is_empty() => {
            Ok((status.token, status.expiration_timestamp.0.to_string()))
        }
        _ => Err(ClusterError::Cluster {
            name: add.name.clone(),
            context: add.from_context.clone(),
            doing: format!("asking a token of {account}"),
            why: "the API server answered without a token".into(),
        }),
    }
}

/// Lists one StatefulSet of the groups' `namespace` with the kubeconfig `text`, built as the
/// controller builds its client: the token is valid, the member's Role lets it read the groups,
/// and the server answers at that address (from here).
async fn check(
    text: &str,
    add: &Add,
    endpoint: &Endpoint,
    namespace: &str,
) -> Result<(), ClusterError> {
    let failed = |why: String| ClusterError::Check {
        name: add.name.clone(),
        account: add.service_account.to_string(),
        server: endpoint.server.clone(),
        namespace: namespace.to_owned(),
        why,
    };
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|error| failed(error_chain(&error)))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|error| failed(error_chain(&error)))?;
    let client = Client::try_from(config).map_err(|error| failed(error_chain(&error)))?;
    let listed = tokio::time::timeout(
        Duration::from_secs(30),
        Api::<StatefulSet>::namespaced(client, namespace).list(&ListParams::default().limit(1)),
    )
    .await
    .map_err(|_| failed("no answer in 30s".into()))?;
    listed.map(|_| ()).map_err(|error| {
        failed(match error {
            kube::Error::Api(status) if status.is_forbidden() || status.code == 401 => format!(
                "{}; apply deploy/member-cluster there with the groups' namespace {namespace} (its Role {}-groups for {}), or give -n the groups' namespace",
                status.message, add.service_account.name, add.service_account
            ),
            error => format!(
                "{}; --server is where the hub's controller reaches the member: if only the hub can, give --no-check",
                error_chain(&error)
            ),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    /// A person's kubeconfig: `kind-b` with its CA inline and a client certificate from files,
    /// `files` with its CA in a file and an exec plugin, `insecure` that checks nothing, and
    /// `proxied` through a proxy with a TLS server name.
    fn persons_kubeconfig() -> Kubeconfig {
        let ca_data = base64::engine::general_purpose::STANDARD.encode(CA_PEM);
        Kubeconfig::from_yaml(&format!(
            r#"
apiVersion: v1
kind: Config
clusters:
- name: b
  cluster: {{server: "https://b.example:6443", certificate-authority-data: "{ca_data}"}}
- name: files
  cluster: {{server: "https://files.example", certificate-authority: /etc/files-ca.pem}}
- name: insecure
  cluster: {{server: "https://insecure.example", insecure-skip-tls-verify: true}}
- name: proxied
  cluster: {{server: "https://10.0.0.9", proxy-url: "http://proxy:3128", tls-server-name: api.c.example, certificate-authority-data: "{ca_data}"}}
users:
- name: alice
  user: {{client-certificate: /home/alice/cert.pem, client-key: /home/alice/key.pem}}
- name: sso
  user: {{exec: {{apiVersion: client.authentication.k8s.io/v1, command: sso-login}}}}
contexts:
- name: kind-b
  context: {{cluster: b, user: alice}}
- name: files
  context: {{cluster: files, user: sso}}
- name: insecure
  context: {{cluster: insecure, user: alice}}
- name: proxied
  context: {{cluster: proxied, user: alice}}
- name: lost
  context: {{cluster: nowhere, user: alice}}
current-context: kind-b
"#
        ))
        .expect("a kubeconfig")
    }

    fn no_files(path: &Path) -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no file {} in this test", path.display()),
        ))
    }

    fn ca_file(path: &Path) -> std::io::Result<Vec<u8>> {
        assert_eq!(path, Path::new("/etc/files-ca.pem"));
        Ok(CA_PEM.as_bytes().to_vec())
    }

    /// The kubeconfig built for `context` and `token`, read back by the controller's own
    /// allow-list.
    fn built(context: &str, server: Option<&str>, token: &str) -> (String, ClusterCredentials) {
        let endpoint = endpoint(&persons_kubeconfig(), context, server, ca_file).unwrap();
        let text = kubeconfig_for("cluster-b", &endpoint, token).unwrap();
        let accepted = cluster_kubeconfig::accept(&text).expect("the controller accepts it");
        (text, accepted)
    }

    #[test]
    fn the_kubeconfig_built_from_a_context_is_the_server_its_ca_and_the_token_inline_as_the_controller_accepts_it()
     {
        let (text, accepted) = built("kind-b", None, "token-of-baton-member");
        assert_eq!(accepted.server, "https://b.example:6443");
        let ca = base64::engine::general_purpose::STANDARD
            .decode(
                accepted
                    .certificate_authority_data
                    .as_deref()
                    .expect("a CA"),
            )
            .unwrap();
        assert_eq!(ca, CA_PEM.as_bytes());
        assert_eq!(accepted.token.as_deref(), Some("token-of-baton-member"));
        // The person's own credentials (client certificate files) never reach it
        assert_eq!(accepted.client_certificate_data, None);
        assert_eq!(accepted.client_key_data, None);
        for absent in ["alice", "client-certificate", "/home", "exec", "kind-b"] {
            assert!(!text.contains(absent), "{absent} in:\n{text}");
        }
        // and kube reads it as the controller does: one context, current
        let kubeconfig = Kubeconfig::from_yaml(&text).expect("kube reads it");
        assert_eq!(kubeconfig.contexts.len(), 1);
        assert_eq!(
            kubeconfig.current_context.as_deref(),
            Some(kubeconfig.contexts[0].name.as_str())
        );
    }

    #[test]
    fn a_ca_file_is_read_and_inlined_and_an_exec_user_is_not_carried() {
        let (text, accepted) = built("files", None, "t");
        assert_eq!(accepted.server, "https://files.example");
        let ca = base64::engine::general_purpose::STANDARD
            .decode(accepted.certificate_authority_data.expect("inlined"))
            .unwrap();
        assert_eq!(ca, CA_PEM.as_bytes());
        assert!(!text.contains("sso-login"), "{text}");
        assert!(!text.contains("/etc/files-ca.pem"), "{text}");
        // A CA file that cannot be read is named with the context
        let error = endpoint(&persons_kubeconfig(), "files", None, no_files)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("context files: reading certificate-authority /etc/files-ca.pem"),
            "{error}"
        );
    }

    #[test]
    fn the_server_the_hub_reaches_replaces_the_contexts_and_a_tls_server_name_is_kept_a_proxy_not()
    {
        let (text, accepted) = built("proxied", Some("https://10.1.2.3:443"), "t");
        assert_eq!(accepted.server, "https://10.1.2.3:443");
        assert_eq!(accepted.tls_server_name.as_deref(), Some("api.c.example"));
        assert!(!text.contains("proxy"), "{text}");
    }

    #[test]
    fn a_plain_http_server_is_refused_by_field_before_anything_is_written() {
        let endpoint = endpoint(
            &persons_kubeconfig(),
            "kind-b",
            Some("http://b.example"),
            no_files,
        )
        .unwrap();
        let error = kubeconfig_for("cluster-b", &endpoint, "t")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(
                "the kubeconfig for cluster cluster-b would be refused by the hub's controller: "
            ),
            "{error}"
        );
        assert!(error.contains(".server"), "{error}");
        assert!(error.contains("https"), "{error}");
    }

    #[test]
    fn a_context_that_checks_no_certificate_a_missing_context_and_a_missing_cluster_are_named() {
        let kubeconfig = persons_kubeconfig();
        let error = endpoint(&kubeconfig, "insecure", None, no_files)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("context insecure: its cluster insecure skips checking")
                && error.contains("certificate-authority-data"),
            "{error}"
        );
        let error = endpoint(&kubeconfig, "kind-z", None, no_files)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "no context kind-z in the kubeconfig; its contexts: kind-b, files, insecure, proxied, lost"
        );
        let error = endpoint(&kubeconfig, "lost", None, no_files)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "context lost: its cluster nowhere is not in the kubeconfig"
        );
    }

    #[test]
    fn the_secret_holds_the_kubeconfig_under_its_key_named_for_the_cluster_and_its_expiry() {
        let (text, _) = built("kind-b", None, "t");
        let value = secret(
            "cluster-b",
            "member-cluster-b",
            "kubeconfig",
            &text,
            "2027-11-28T10:00:00Z",
        );
        let written: Secret = serde_json::from_value(value).expect("a Secret");
        assert_eq!(written.metadata.name.as_deref(), Some("member-cluster-b"));
        assert_eq!(
            written.metadata.labels.unwrap_or_default()[CLUSTER_LABEL],
            "cluster-b"
        );
        assert_eq!(
            written.metadata.annotations.unwrap_or_default()[TOKEN_EXPIRES_ANNOTATION],
            "2027-11-28T10:00:00Z"
        );
        let data = written.string_data.unwrap_or_default();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["kubeconfig"]);
        cluster_kubeconfig::accept(&data["kubeconfig"]).expect("the controller accepts it");
    }

    #[test]
    fn names_accounts_and_durations_are_checked_on_the_command_line() {
        assert_eq!(parse_name("cluster-b").unwrap(), "cluster-b");
        assert!(
            parse_name("Cluster_B")
                .unwrap_err()
                .contains("not a DNS label")
        );
        assert_eq!(
            parse_account(MEMBER_ACCOUNT).unwrap(),
            Account {
                namespace: "baton-system".into(),
                name: "baton-member".into()
            }
        );
        for bad in ["baton-member", "a/b/c", "/x", "Ns/x"] {
            assert!(
                parse_account(bad).unwrap_err().contains("NAMESPACE/NAME"),
                "{bad}"
            );
        }
        assert_eq!(
            parse_duration("720h").unwrap(),
            Duration::from_secs(720 * 3600)
        );
        assert_eq!(parse_duration("10m").unwrap(), SHORTEST_TOKEN);
        for bad in ["9m", "soon", "-1h"] {
            assert!(
                parse_duration(bad).unwrap_err().contains("at least 10m"),
                "{bad}"
            );
        }
    }
}
