//! Where the leader's gate calls may go. A health check's Prometheus address and a rollout
//! hook's URL are written by namespace users, yet the calls leave from the leader's network
//! position, a check's with credentials the leader read: without a bound, anyone who may annotate
//! a StatefulSet makes the leader POST to its own ports or a cloud's metadata service, and
//! anyone who may create a `RolloutHealthCheck` has a Secret sent where they like.
//!
//! A web check's URLs (`spec.web` of a `RolloutHealthCheck`) are the same kind of destination,
//! under the same rules.
//!
//! The rules, one [`Allowlist`] per kind of call (`gates.prometheus_addresses`,
//! `gates.web_check_addresses`, `gates.hook_addresses`):
//! - `http` and `https` only;
//! - with entries, only URLs under one of them;
//! - loopback, link-local, unspecified, this-network and cloud metadata addresses ([`is_internal`],
//!   IPv4 ones hidden inside IPv6 included) are refused unless an entry names them,
//!   both as written and as a name resolves (a resolver that drops them, at connection time, so
//!   a name that resolves elsewhere later gains nothing);
//! - no redirects (a permitted destination cannot send the call on);
//! - no proxy, whatever `HTTPS_PROXY`, `HTTP_PROXY` or `ALL_PROXY` say: through a proxy the
//!   proxy resolves the name, so the resolver guard would never see the address it reaches;
//! - messages show a URL [`redact`]ed: no user, password, query or fragment.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use baton_config::Destination;
use baton_core::gates::redact::redact;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The operator's allowlist for one kind of call.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    /// The configuration key it comes from, for messages.
    key: &'static str,
    entries: Vec<Destination>,
}

impl Allowlist {
    pub fn new(key: &'static str, entries: Vec<Destination>) -> Self {
        Self { key, entries }
    }

    /// The URL `raw` parsed, if a call to it is permitted; else why not (with the URL redacted).
    pub fn permit(&self, raw: &str) -> Result<Url, String> {
        let url = Url::parse(raw.trim())
            .map_err(|error| format!("{:?} is not a URL: {error}", redact(raw)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{} is not an http or https URL", redact(raw)));
        }
        let listed = self.lists(&url);
        if !self.entries.is_empty() && !listed {
            return Err(format!(
                "{} is not under any of {} (the operator's allowlist)",
                redact(raw),
                self.key
            ));
        }
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => None,
            None => return Err(format!("{} has no host", redact(raw))),
        };
        if let Some(ip) = literal
            && is_internal(ip)
            && !listed
        {
            return Err(format!(
                "{} is a loopback, link-local, unspecified or metadata-service address; only {} \
                 can permit it",
                redact(raw),
                self.key
            ));
        }
        Ok(url)
    }

    /// Whether an entry covers `url`: the operator chose this destination.
    pub fn lists(&self, url: &Url) -> bool {
        self.entries.iter().any(|entry| entry.covers(url))
    }

    /// Whether an entry names `host`: its internal addresses are then the operator's choice.
    fn names_host(&self, host: &str) -> bool {
        self.entries.iter().any(|entry| {
            entry
                .url()
                .host_str()
                .is_some_and(|listed| listed.eq_ignore_ascii_case(host))
        })
    }

    /// An HTTP client for these calls: the resolver refuses internal addresses the allowlist
    /// does not name, no redirects, no proxy, every call bounded by `timeout`.
    pub fn client_builder(&self, timeout: Duration) -> reqwest::ClientBuilder {
        baton_shared::crypto::install_default_provider();
        reqwest::Client::builder()
            .dns_resolver(GuardedResolver {
                allowlist: self.clone(),
            })
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
    }
}

/// Cloud metadata services outside the link-local range: Alibaba Cloud's (100.100.100.200, in
/// the shared address space) and AWS's IPv6 one (fd00:ec2::254, a unique local address).
const METADATA_V4: [Ipv4Addr; 1] = [Ipv4Addr::new(100, 100, 100, 200)];
const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)];

/// Addresses the leader's own ports and a cloud's metadata service live at: loopback,
/// link-local, unspecified, "this network" (0.0.0.0/8, which Linux routes to the host itself),
/// the metadata services above; and the same inside IPv6, where an IPv4 address can hide
/// (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64's well-known prefix
/// `64:ff9b::a.b.c.d`, 6to4's `2002:aabb:ccdd::`).
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => {
            ip.is_loopback()
                || ip.is_link_local()
                || ip.octets()[0] == 0
                || METADATA_V4.contains(&ip)
        }
        IpAddr::V6(ip) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_unicast_link_local()
                || METADATA_V6.contains(&ip)
                || embedded_ipv4(ip).is_some_and(|inner| is_internal(IpAddr::V4(inner)))
        }
    }
}

/// The IPv4 address an IPv6 address carries, in the forms that reach it.
fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = ip.segments();
    let low = Ipv4Addr::new(
        ip.octets()[12],
        ip.octets()[13],
        ip.octets()[14],
        ip.octets()[15],
    );
    if let Some(inner) = ip.to_ipv4() {
        // ::ffff:a.b.c.d and ::a.b.c.d
        Some(inner)
    } else if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some(low)
    } else if segments[0] == 0x2002 {
        let [a, b] = segments[1].to_be_bytes();
        let [c, d] = segments[2].to_be_bytes();
        Some(Ipv4Addr::new(a, b, c, d))
    } else {
        None
    }
}

/// Why a call got no answer, in words that neither repeat the URL nor tell a closed port from a
/// filtered one (the halt message and Events are readable by whoever wrote the URL).
pub fn describe_failure(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "no answer in time"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "the request failed"
    }
}

/// Reads `response`'s body up to `max` bytes, as it streams in: a larger answer is refused
/// before it is held.
pub async fn read_capped(mut response: reqwest::Response, max: u64) -> Result<Vec<u8>, String> {
    if response.content_length().is_some_and(|length| length > max) {
        return Err(format!("the answer is larger than {max} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| format!("reading the answer: {}", describe_failure(&error)))?
    {
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(format!("the answer is larger than {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Resolves names as the system does, then drops internal addresses unless the allowlist names
/// the host.
#[derive(Debug)]
struct GuardedResolver {
    allowlist: Allowlist,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let listed = self.allowlist.names_host(&host);
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|address| listed || !is_internal(address.ip()))
                .collect();
            if kept.is_empty() {
                return Err(format!(
                    "{host} resolves to no address the leader may call \
                     (loopback, link-local and unspecified ones need an allowlist entry)"
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowlist(entries: &[&str]) -> Allowlist {
        Allowlist::new(
            "gates.hook_addresses",
            entries
                .iter()
                .map(|entry| entry.parse().expect("a valid entry"))
                .collect(),
        )
    }

    #[test]
    fn without_entries_any_outside_address_is_permitted_and_internal_ones_are_not() {
        let open = allowlist(&[]);
        assert!(
            open.permit("https://deploys.example.com/hook?token=1")
                .is_ok()
        );
        assert!(open.permit("http://10.0.0.7:8080/ready").is_ok());
        // Ordinary addresses in the same families stay permitted
        for outside in [
            "http://[fd00:ec2::253]/",
            "http://[64:ff9b::a00:7]/",
            "http://[2002:a00:7::1]/",
            "http://100.100.100.201/",
            "http://[2001:db8::1]/",
        ] {
            assert!(open.permit(outside).is_ok(), "{outside}");
        }
        for internal in [
            "http://127.0.0.1:8001/metrics",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]:8001/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0:8443/",
            "http://[fe80::1]/",
            // "This network": Linux routes 0.x.y.z to the host itself
            "http://0.1.2.3:8001/",
            // Metadata services outside link-local: AWS over IPv6, Alibaba Cloud
            "http://[fd00:ec2::254]/latest/meta-data/",
            "http://100.100.100.200/latest/meta-data/",
            // IPv4 inside IPv6: NAT64's well-known prefix, IPv4-compatible, 6to4
            "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
            "http://[64:ff9b::127.0.0.1]:8001/",
            "http://[::169.254.169.254]/",
            "http://[2002:a9fe:a9fe::1]/",
        ] {
            let refused = open.permit(internal).expect_err(internal);
            assert!(refused.contains("loopback, link-local"), "{refused}");
        }
        assert!(
            open.permit("file:///var/run/secrets/token")
                .unwrap_err()
                .contains("not an http or https URL")
        );
    }

    #[test]
    fn with_entries_only_their_urls_are_permitted_and_they_may_name_internal_ones() {
        let listed = allowlist(&["https://deploys.example.com/hooks", "http://127.0.0.1:9000"]);
        assert!(listed.permit("https://deploys.example.com/hooks/a").is_ok());
        assert!(listed.permit("http://127.0.0.1:9000/x").is_ok());
        let refused = listed
            .permit("https://elsewhere.example/hooks?token=secret")
            .unwrap_err();
        assert_eq!(
            refused,
            "https://elsewhere.example/hooks?… is not under any of gates.hook_addresses \
             (the operator's allowlist)"
        );
        assert!(listed.permit("http://127.0.0.1:8001/").is_err());
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_unless_listed() {
        let open = GuardedResolver {
            allowlist: allowlist(&[]),
        };
        let name: Name = "localhost".parse().expect("a name");
        let refused = open.resolve(name).await.err().expect("refused");
        assert!(
            refused
                .to_string()
                .contains("localhost resolves to no address")
        );
        let listed = GuardedResolver {
            allowlist: allowlist(&["http://localhost:9000"]),
        };
        let name: Name = "localhost".parse().expect("a name");
        let addresses: Vec<SocketAddr> = listed.resolve(name).await.expect("resolves").collect();
        assert!(addresses.iter().all(|address| address.ip().is_loopback()));
        assert!(!addresses.is_empty());
    }
}
