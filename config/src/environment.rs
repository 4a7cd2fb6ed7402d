//! Which `BATON_` variables are configuration.
//!
//! The environment is shared with the platform: Kubernetes gives every pod the Docker-link
//! variables of each Service in its namespace (`enableServiceLinks`, on by default), and for a
//! Service named `baton-webhook` those are `BATON_WEBHOOK_SERVICE_HOST`,
//! `BATON_WEBHOOK_PORT=tcp://…` and the like. A variable is read as a key only when its first
//! part (before any `__`) names a top-level key: there, every problem is an error, as in a file,
//! so `BATON_WEBHOOK__ADRESS` still stops the binary. Any other `BATON_` variable is not baton's
//! and is left alone; [`ignored_variables`] lists them so a binary can warn about those that do
//! not look like a Service's link (a misspelt top-level key).

use std::collections::BTreeSet;

use figment::providers::{Env, Serialized};
use figment::{Profile, Provider};

use crate::{CONFIG_FILE_ENV, Config, ENV_PREFIX};

/// The top-level keys of the configuration, lowercase.
fn top_level_keys() -> BTreeSet<String> {
    Serialized::defaults(Config::default())
        .data()
        .ok()
        .and_then(|mut profiles| profiles.remove(&Profile::Default))
        .map(|dict| dict.into_keys().collect())
        .unwrap_or_default()
}

/// Whether `key` (a variable's name without the prefix) sets a configuration key.
fn names_a_key(key: &str, keys: &BTreeSet<String>) -> bool {
    let first = key.split("__").next().unwrap_or_default();
    keys.contains(&first.to_ascii_lowercase())
}

/// The environment layer: `BATON_` variables whose first part names a top-level key, `__`
/// between nested keys (`BATON_CONFIG` names the file; `config` is no key).
pub(crate) fn provider(env: Env) -> Env {
    let keys = top_level_keys();
    env.filter(move |key| names_a_key(key.as_str(), &keys))
        .split("__")
}

/// A `BATON_` variable that is not read as configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredVariable {
    /// The variable's full name.
    pub name: String,
    /// Whether it has the form Kubernetes gives a Service's link (`<SERVICE>_SERVICE_HOST`,
    /// `<SERVICE>_PORT_443_TCP_ADDR`, …): expected in a pod, nothing to warn about.
    pub service_link: bool,
}

/// The `BATON_` variables of `variables` that are not configuration (and not `BATON_CONFIG`).
pub fn ignored_variables<I, K>(variables: I) -> Vec<IgnoredVariable>
where
    I: IntoIterator<Item = K>,
    K: AsRef<str>,
{
    let keys = top_level_keys();
    let mut ignored: Vec<IgnoredVariable> = variables
        .into_iter()
        .filter_map(|name| {
            let name = name.as_ref();
            let key = name.strip_prefix(ENV_PREFIX)?;
            (name != CONFIG_FILE_ENV && !names_a_key(key, &keys)).then(|| IgnoredVariable {
                name: name.to_owned(),
                service_link: is_service_link(name),
            })
        })
        .collect();
    ignored.sort_by(|a, b| a.name.cmp(&b.name));
    ignored
}

/// Whether `name` has one of the forms of a Service's link variables, as the kubelet writes them
/// (`<SVC>_SERVICE_HOST`, `<SVC>_SERVICE_PORT`, `<SVC>_SERVICE_PORT_<PORT NAME>`, `<SVC>_PORT`,
/// `<SVC>_PORT_<n>_<PROTO>` and its `_PROTO`, `_PORT` and `_ADDR`).
pub fn is_service_link(name: &str) -> bool {
    if name.ends_with("_SERVICE_HOST")
        || name.ends_with("_SERVICE_PORT")
        || name.contains("_SERVICE_PORT_")
        || name.ends_with("_PORT")
    {
        return true;
    }
    // `<SVC>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]`: find a `_PORT_<digits>_<proto>` run.
    let parts: Vec<&str> = name.split('_').collect();
    parts.windows(3).enumerate().any(|(at, window)| {
        let [port, number, protocol] = window else {
            return false;
        };
        let rest = &parts[at + 3..];
        *port == "PORT"
            && !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit())
            && matches!(*protocol, "TCP" | "UDP" | "SCTP")
            && (rest.is_empty() || matches!(rest, ["PROTO"] | ["PORT"] | ["ADDR"]))
    })
}
