//! A member cluster's kubeconfig, as the hub's controller accepts it.
//!
//! Whoever writes the kubeconfig Secret writes what the controller does with it, and a
//! kubeconfig can ask for much more than a server and a credential: a file of the controller's
//! pod read and sent (`tokenFile`: its own ServiceAccount token is mounted), a program run in
//! the pod (`exec`, an auth provider's `cmd-path`), the traffic sent through a proxy, the
//! server's certificate left unchecked. So a member's kubeconfig is read against an allow-list
//! ([`accept`]): only what a member needs, inline, is taken, every other field is refused by
//! name, and the client is built from what was taken alone ([`ClusterCredentials::kubeconfig`]), so
//! a field kube learns to honour later never reaches it.
//!
//! Only the current context, its cluster and its user matter (and are read); the other
//! entries are never used. A name the current context needs that appears twice is refused as
//! ambiguous.

use std::fmt;

use serde_json::{Map, Value};

/// What a member's kubeconfig may say, all of it inline: where the member's API server is, how
/// to check its certificate, and who the controller is there.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterCredentials {
    /// `https://…`.
    pub server: String,
    /// PEM, base64-encoded (as the kubeconfig has it); none: the system's roots.
    pub certificate_authority_data: Option<String>,
    /// The name the server's certificate is checked against, instead of the server's host.
    pub tls_server_name: Option<String>,
    pub disable_compression: Option<bool>,
    /// A bearer token.
    pub token: Option<String>,
    /// A client certificate and its key, PEM, base64-encoded; both or neither.
    pub client_certificate_data: Option<String>,
    pub client_key_data: Option<String>,
}

impl fmt::Debug for ClusterCredentials {
    /// Without the credentials.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ClusterCredentials")
            .field("server", &self.server)
            .field(
                "certificate_authority_data",
                &self.certificate_authority_data.is_some(),
            )
            .field("tls_server_name", &self.tls_server_name)
            .field("disable_compression", &self.disable_compression)
            .field("token", &self.token.is_some())
            .field(
                "client_certificate_data",
                &self.client_certificate_data.is_some(),
            )
            .finish_non_exhaustive()
    }
}

/// The name of the one context, cluster and user of [`ClusterCredentials::kubeconfig`].
const MEMBER: &str = "member";

impl ClusterCredentials {
    /// A kubeconfig (as JSON) of this alone: one cluster, one user, one context, current.
    pub fn kubeconfig(&self) -> Value {
        let mut cluster = Map::new();
        cluster.insert("server".into(), self.server.clone().into());
        let optional = [
            (
                "certificate-authority-data",
                self.certificate_authority_data.clone().map(Value::from),
            ),
            (
                "tls-server-name",
                self.tls_server_name.clone().map(Value::from),
            ),
            (
                "disable-compression",
                self.disable_compression.map(Value::from),
            ),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                cluster.insert(key.into(), value);
            }
        }
        let mut user = Map::new();
        let credentials = [
            ("token", &self.token),
            ("client-certificate-data", &self.client_certificate_data),
            ("client-key-data", &self.client_key_data),
        ];
        for (key, value) in credentials {
            if let Some(value) = value {
                user.insert(key.into(), value.clone().into());
            }
        }
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": MEMBER, "cluster": cluster}],
            "users": [{"name": MEMBER, "user": user}],
            "contexts": [{"name": MEMBER, "context": {"cluster": MEMBER, "user": MEMBER}}],
            "current-context": MEMBER,
        })
    }
}

/// Why a member's kubeconfig is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// Not one YAML (or JSON) document.
    #[error("{0}")]
    Unreadable(String),
    /// Fields baton does not accept, each named.
    #[error("{}", refused_text(.0))]
    Refused(Vec<Refusal>),
}

fn refused_text(refusals: &[Refusal]) -> String {
    refusals
        .iter()
        .map(Refusal::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A field of a member's kubeconfig baton does not accept, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Where it is: `users["admin"].user.tokenFile`.
    pub field: String,
    pub why: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} {}", self.field, self.why)
    }
}

const READS_A_FILE: &str = "reads a file of the controller's pod";
const INLINE_CREDENTIALS: &str = "give a token, or client-certificate-data and client-key-data";

/// Each field baton refuses in the current context's cluster, and why.
fn refused_cluster_field(key: &str, value: &Value) -> Option<String> {
    Some(match key {
        "certificate-authority" => {
            format!("{READS_A_FILE}: give certificate-authority-data instead")
        }
        "proxy-url" => {
            "sends the member's traffic through a proxy: baton connects to the server itself".into()
        }
        // `false` is what checking means anyway.
        "insecure-skip-tls-verify" if value != &Value::Bool(false) => {
            "turns off checking the server's certificate: give certificate-authority-data".into()
        }
        _ => return None,
    })
}

/// Each field baton refuses in the current context's user, and why.
fn refused_user_field(key: &str) -> Option<String> {
    Some(match key {
        "tokenFile" => format!("{READS_A_FILE}: give token instead"),
        "client-certificate" => format!("{READS_A_FILE}: give client-certificate-data instead"),
        "client-key" => format!("{READS_A_FILE}: give client-key-data instead"),
        "exec" => format!("runs a program in the controller's pod: {INLINE_CREDENTIALS}"),
        "auth-provider" => format!(
            "is an auth provider, which may run a program in the controller's pod (cmd-path) or call another server: {INLINE_CREDENTIALS}"
        ),
        "username" | "password" => {
            format!("is basic authentication, which Kubernetes no longer has: {INLINE_CREDENTIALS}")
        }
        "as" | "as-uid" | "as-groups" | "as-user-extra" => "impersonates another identity: the kubeconfig's own identity must hold the member Role (deploy/member-cluster)".into(),
        _ => return None,
    })
}

const TOP_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "clusters",
    "contexts",
    "users",
    "current-context",
    // Read by kubectl alone.
    "preferences",
    // Opaque data for other tools; kube reads none of it.
    "extensions",
];
const CONTEXT_FIELDS: &[&str] = &["cluster", "user", "namespace", "extensions"];
const CLUSTER_FIELDS: &[&str] = &[
    "server",
    "certificate-authority-data",
    "tls-server-name",
    "disable-compression",
    "insecure-skip-tls-verify",
    "extensions",
];
const USER_FIELDS: &[&str] = &[
    "token",
    "client-certificate-data",
    "client-key-data",
    "extensions",
];

/// `text`, a member's kubeconfig, as baton uses it; or every field it refuses, each named with
/// why (all of them at once: the person fixing the Secret fixes them in one go).
pub fn accept(text: &str) -> Result<ClusterCredentials, Unusable> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|error| {
        Unusable::Unreadable(format!(
            "not YAML: {}",
            location_of(&error.to_string()).unwrap_or("the text cannot be parsed")
        ))
    })?;
    let [document] = documents.as_slice() else {
        return Err(Unusable::Unreadable(format!(
            "{} YAML documents; a member's kubeconfig is one",
            documents.len()
        )));
    };
    let Value::Object(top) = document else {
        return Err(Unusable::Unreadable("not a mapping".into()));
    };
    let mut refusals = Refusals::default();
    refusals.fields("", top, TOP_FIELDS, |_, _| None);

    let Some(current) = refusals.string("current-context", top.get("current-context")) else {
        refusals.refuse(
            "current-context",
            "is missing: baton uses the current context",
        );
        return Err(refusals.into_error());
    };
    let Some(context) = refusals.entry(top, "contexts", "context", &current) else {
        return Err(refusals.into_error());
    };
    let context_field = format!("contexts[{current:?}].context");
    refusals.fields(&context_field, context, CONTEXT_FIELDS, |_, _| None);
    let cluster_name = refusals.string(&format!("{context_field}.cluster"), context.get("cluster"));
    let user_name = refusals.string(&format!("{context_field}.user"), context.get("user"));

    let mut access = ClusterCredentials {
        server: String::new(),
        certificate_authority_data: None,
        tls_server_name: None,
        disable_compression: None,
        token: None,
        client_certificate_data: None,
        client_key_data: None,
    };
    match &cluster_name {
        None => refusals.refuse(
            &format!("{context_field}.cluster"),
            "is missing: the context names no cluster",
        ),
        Some(name) => {
            if let Some(cluster) = refusals.entry(top, "clusters", "cluster", name) {
                let at = format!("clusters[{name:?}].cluster");
                refusals.cluster(&at, cluster, &mut access);
            }
        }
    }
    // A context without a user connects anonymously: nothing to refuse.
    if let Some(name) = &user_name
        && let Some(user) = refusals.entry(top, "users", "user", name)
    {
        let at = format!("users[{name:?}].user");
        refusals.user(&at, user, &mut access);
    }
    if refusals.0.is_empty() {
        Ok(access)
    } else {
        Err(refusals.into_error())
    }
}

/// Where a YAML error is, without the text around it: the kubeconfig holds credentials, and
/// the error lands on the status page and in Events.
fn location_of(error: &str) -> Option<&str> {
    let start = error.find("line ")?;
    let rest = &error[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == ' ' || c == ','))
        .unwrap_or(rest.len());
    Some(rest[..end].trim_end_matches([' ', ',']))
}

#[derive(Default)]
struct Refusals(Vec<Refusal>);

impl Refusals {
    fn refuse(&mut self, field: &str, why: &str) {
        self.0.push(Refusal {
            field: field.to_owned(),
            why: why.to_owned(),
        });
    }

    fn into_error(self) -> Unusable {
        Unusable::Refused(self.0)
    }

    /// Refuses each field of `object` (at `at`) that `refused` gives a reason for, and each
    /// that is not `accepted`. A field set to null says nothing (kube reads it as absent).
    fn fields(
        &mut self,
        at: &str,
        object: &Map<String, Value>,
        accepted: &[&str],
        refused: impl Fn(&str, &Value) -> Option<String>,
    ) {
        for (key, value) in object {
            if value.is_null() {
                continue;
            }
            if let Some(why) = refused(key, value) {
                self.refuse(&join(at, key), &why);
            } else if !accepted.contains(&key.as_str()) {
                self.refuse(
                    &join(at, key),
                    &format!(
                        "is not a field baton accepts there (accepted: {})",
                        accepted.join(", ")
                    ),
                );
            }
        }
    }

    /// A string, if `value` is one; refuses any other value but a missing one.
    fn string(&mut self, field: &str, value: Option<&Value>) -> Option<String> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(_) => {
                self.refuse(field, "is not a string");
                None
            }
        }
    }

    /// The one entry of the list `list` (`clusters`, …) named `name`, its `inner` mapping.
    fn entry<'v>(
        &mut self,
        top: &'v Map<String, Value>,
        list: &str,
        inner: &str,
        name: &str,
    ) -> Option<&'v Map<String, Value>> {
        let at = format!("{list}[{name:?}]");
        let entries = match top.get(list) {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(entries)) => entries.as_slice(),
            Some(_) => {
                self.refuse(list, "is not a list");
                return None;
            }
        };
        let named: Vec<&Value> = entries
            .iter()
            .filter(|entry| entry.get("name").and_then(Value::as_str) == Some(name))
            .collect();
        let entry = match named.as_slice() {
            [] => {
                self.refuse(
                    &at,
                    &format!("is missing: no entry of {list} is named {name:?}"),
                );
                return None;
            }
            [entry] => *entry,
            several => {
                self.refuse(
                    &at,
                    &format!(
                        "is ambiguous: {} entries of {list} have that name",
                        several.len()
                    ),
                );
                return None;
            }
        };
        let Value::Object(entry) = entry else {
            unreachable!("an entry with a name is a mapping");
        };
        self.fields(&at, entry, &["name", inner], |_, _| None);
        match entry.get(inner) {
            Some(Value::Object(fields)) => Some(fields),
            // An empty entry (`user: {}` written as `user:`) says nothing.
            None | Some(Value::Null) => Some(empty()),
            Some(_) => {
                self.refuse(&join(&at, inner), "is not a mapping");
                None
            }
        }
    }

    fn cluster(&mut self, at: &str, cluster: &Map<String, Value>, access: &mut ClusterCredentials) {
        self.fields(at, cluster, CLUSTER_FIELDS, refused_cluster_field);
        let field = |key: &str| join(at, key);
        match self.string(&field("server"), cluster.get("server")) {
            None => self.refuse(&field("server"), "is missing"),
            Some(server) => match https(&server) {
                Ok(()) => access.server = server,
                Err(why) => self.refuse(&field("server"), &why),
            },
        }
        access.certificate_authority_data = self.string(
            &field("certificate-authority-data"),
            cluster.get("certificate-authority-data"),
        );
        access.tls_server_name =
            self.string(&field("tls-server-name"), cluster.get("tls-server-name"));
        access.disable_compression = match cluster.get("disable-compression") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(disable)) => Some(*disable),
            Some(_) => {
                self.refuse(&field("disable-compression"), "is not true or false");
                None
            }
        };
    }

    fn user(&mut self, at: &str, user: &Map<String, Value>, access: &mut ClusterCredentials) {
        self.fields(at, user, USER_FIELDS, |key, _| refused_user_field(key));
        let field = |key: &str| join(at, key);
        access.token = self.string(&field("token"), user.get("token"));
        access.client_certificate_data = self.string(
            &field("client-certificate-data"),
            user.get("client-certificate-data"),
        );
        access.client_key_data =
            self.string(&field("client-key-data"), user.get("client-key-data"));
        match (&access.client_certificate_data, &access.client_key_data) {
            (Some(_), None) => self.refuse(
                &field("client-key-data"),
                "is missing: a client certificate needs its key",
            ),
            (None, Some(_)) => self.refuse(
                &field("client-certificate-data"),
                "is missing: a client key needs its certificate",
            ),
            _ => {}
        }
    }
}

fn empty() -> &'static Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(Map::new)
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

/// Whether `server` is an `https://` URL with a host: over plain HTTP the credential would
/// cross the network in the clear, and nothing would check whom it reaches.
fn https(server: &str) -> Result<(), String> {
    match url::Url::parse(server) {
        Ok(url) if url.scheme() == "https" && url.host().is_some() => Ok(()),
        Ok(url) if url.scheme() != "https" => Err(format!(
            "is not https ({}): the credential would cross the network in the clear",
            url.scheme()
        )),
        _ => Err("is not an https URL with a host".into()),
    }
}

#[cfg(test)]
mod tests;
