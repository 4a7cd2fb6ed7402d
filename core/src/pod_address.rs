//! Addressing a pod baton calls (its prepare-shutdown endpoint, the delayed-downscale
//! endpoint): by cluster DNS name or by pod IP, as the operator configures, and the URL built
//! so that nothing a user writes in a path or port annotation can change where the call goes.
//! The calls themselves are `baton_shared::pod_client`.

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::apps::v1::StatefulSet;

use crate::annotations::{PREPARE_DOWNSCALE_PATH_ANNOTATION, PREPARE_DOWNSCALE_PORT_ANNOTATION};

/// How pods are addressed (`pods.address_by` in baton's configuration, which converts into this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodAddressing {
    /// The pod's cluster DNS name through the StatefulSet's governing Service.
    Dns,
    /// The pod's IP address.
    Ip,
}

/// What is needed to address one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// The StatefulSet's governing Service (`spec.serviceName`), for DNS addressing.
    pub service_name: &'a str,
    /// `status.podIP`, for IP addressing.
    pub pod_ip: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodAddressError {
    #[error("pod {pod} cannot be addressed by DNS name: its StatefulSet has no spec.serviceName")]
    NoServiceName { pod: String },
    #[error(
        "pod {pod} cannot be addressed by DNS name: its StatefulSet's spec.serviceName {service:?} is not a Service name (a DNS label: lowercase letters, digits and '-')"
    )]
    InvalidServiceName { pod: String, service: String },
    #[error(
        "pod {pod} of a member cluster cannot be addressed by DNS name: the controller resolves names in its own cluster, where the name may be another pod's; address pods by IP (pods.address_by: ip) across clusters"
    )]
    OtherCluster { pod: String },
    #[error("pod {pod} cannot be addressed by IP: it has no status.podIP yet")]
    NoPodIp { pod: String },
    #[error("pod {pod} has an invalid status.podIP {ip:?}")]
    InvalidPodIp { pod: String, ip: String },
}

/// The host part of a URL reaching `pod`: `<pod>.<service>.<namespace>.svc.<cluster_domain>`
/// or its IP (IPv6 in brackets).
pub fn pod_host(
    addressing: PodAddressing,
    cluster_domain: &str,
    pod: &PodRef<'_>,
) -> Result<String, PodAddressError> {
    match addressing {
        PodAddressing::Dns => {
            // A member's pod (`cluster/pod`): its DNS name resolves in its own cluster only.
            if crate::clusters::split(pod.name).0.is_some() {
                return Err(PodAddressError::OtherCluster {
                    pod: pod.name.to_owned(),
                });
            }
            if pod.service_name.is_empty() {
                return Err(PodAddressError::NoServiceName {
                    pod: pod.name.to_owned(),
                });
            }
            // Older API servers take any serviceName: one with a '/', '#' or '@' would make
            // the host of the URL built below someone else's.
            if !crate::names::is_dns_label(pod.service_name) {
                return Err(PodAddressError::InvalidServiceName {
                    pod: pod.name.to_owned(),
                    service: pod.service_name.to_owned(),
                });
            }
            Ok(format!(
                "{}.{}.{}.svc.{}",
                pod.name, pod.service_name, pod.namespace, cluster_domain
            ))
        }
        PodAddressing::Ip => {
            let ip =
                pod.pod_ip
                    .filter(|ip| !ip.is_empty())
                    .ok_or_else(|| PodAddressError::NoPodIp {
                        pod: pod.name.to_owned(),
                    })?;
            match ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(v4)) => Ok(v4.to_string()),
                Ok(IpAddr::V6(v6)) => Ok(format!("[{v6}]")),
                Err(_) => Err(PodAddressError::InvalidPodIp {
                    pod: pod.name.to_owned(),
                    ip: ip.to_owned(),
                }),
            }
        }
    }
}

/// `http://<host>:<port>/<path>`, built with the URL type so that nothing in the path can
/// change where the call goes (the port is a number; a `?`, `#` or `@` in the path is only
/// path). The path annotation is written with or without its leading slash by users of the Go
/// operator (`ingester/prepare-shutdown`); both mean the same.
pub fn pod_url(host: &str, port: u16, path: &str) -> Result<String, String> {
    let mut url = url::Url::parse(&format!("http://{host}/"))
        .map_err(|error| format!("{host:?} is not a host: {error}"))?;
    url.set_port(Some(port))
        .map_err(|()| format!("cannot set port {port} on {url}"))?;
    url.set_path(&format!("/{}", path.trim_start_matches('/')));
    Ok(url.to_string())
}

/// The value of a port annotation as a port number, or what is wrong with it.
pub fn parse_port(value: &str) -> Result<u16, String> {
    value
        .parse::<u16>()
        .ok()
        .filter(|port| *port > 0)
        .ok_or_else(|| format!("{value:?} is not a port number (1-65535)"))
}

/// The two calls the prepare endpoints understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodMethod {
    /// Prepare for shutdown.
    Post,
    /// Undo a preparation.
    Delete,
}

impl PodMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            PodMethod::Post => "POST",
            PodMethod::Delete => "DELETE",
        }
    }
}

impl fmt::Display for PodMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One pod endpoint to call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEndpoint {
    pub pod: String,
    pub url: String,
}

/// Where a StatefulSet's pods answer the prepare-shutdown calls of a downscale: the port and
/// path annotations and the governing Service (empty when unset; only DNS addressing needs it).
/// Read the same way by the webhook that prepares pods and the controller that tells them to
/// undo it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareEndpoint {
    pub port: u16,
    pub path: String,
    pub service_name: String,
}

/// Why a StatefulSet's pods cannot be called to prepare; worded to follow "because".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoPrepareEndpoint {
    #[error("the {PREPARE_DOWNSCALE_PORT_ANNOTATION} annotation is not set or empty")]
    NoPort,
    #[error("the {PREPARE_DOWNSCALE_PORT_ANNOTATION} annotation is {0}")]
    BadPort(String),
    #[error("the {PREPARE_DOWNSCALE_PATH_ANNOTATION} annotation is not set or empty")]
    NoPath,
}

impl PrepareEndpoint {
    /// The endpoint `statefulset`'s annotations name. The port is parsed as a number, never
    /// pasted into the URL as written: "8080@evil.example" would move the host.
    pub fn of(statefulset: &StatefulSet) -> Result<Self, NoPrepareEndpoint> {
        let annotation = |key: &str| {
            statefulset
                .metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(key))
                .map(String::as_str)
                .filter(|value| !value.is_empty())
        };
        let port =
            annotation(PREPARE_DOWNSCALE_PORT_ANNOTATION).ok_or(NoPrepareEndpoint::NoPort)?;
        let port = parse_port(port).map_err(NoPrepareEndpoint::BadPort)?;
        let path =
            annotation(PREPARE_DOWNSCALE_PATH_ANNOTATION).ok_or(NoPrepareEndpoint::NoPath)?;
        let service_name = statefulset
            .spec
            .as_ref()
            .and_then(|spec| spec.service_name.as_deref())
            .unwrap_or("");
        Ok(Self {
            port,
            path: path.to_owned(),
            service_name: service_name.to_owned(),
        })
    }

    /// The URL of pod `name` (in `namespace`, with `pod_ip` if assigned), addressed as the
    /// operator configured; why not, worded to follow "because".
    pub fn of_pod(
        &self,
        addressing: PodAddressing,
        cluster_domain: &str,
        name: &str,
        namespace: &str,
        pod_ip: Option<&str>,
    ) -> Result<PodEndpoint, String> {
        let reference = PodRef {
            name,
            namespace,
            service_name: &self.service_name,
            pod_ip,
        };
        let host =
            pod_host(addressing, cluster_domain, &reference).map_err(|error| error.to_string())?;
        Ok(PodEndpoint {
            pod: name.to_owned(),
            url: pod_url(&host, self.port, &self.path)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod<'a>(service_name: &'a str, pod_ip: Option<&'a str>) -> PodRef<'a> {
        PodRef {
            name: "ingester-zone-a-4",
            namespace: "mimir",
            service_name,
            pod_ip,
        }
    }

    #[test]
    fn addresses_pods_by_dns_name_or_ip() {
        let member_pod = PodRef {
            name: "cluster-b/ingester-zone-a-4",
            ..pod("ingester-zone-a", Some("10.0.0.9"))
        };
        let cases: &[(PodAddressing, PodRef<'_>, Result<&str, PodAddressError>)] = &[
            // A member cluster's pod: by IP only (its DNS name may be another pod's here).
            (
                PodAddressing::Dns,
                member_pod.clone(),
                Err(PodAddressError::OtherCluster {
                    pod: "cluster-b/ingester-zone-a-4".into(),
                }),
            ),
            (PodAddressing::Ip, member_pod.clone(), Ok("10.0.0.9")),
            (
                PodAddressing::Dns,
                pod("ingester-zone-a", None),
                Ok("ingester-zone-a-4.ingester-zone-a.mimir.svc.cluster.local"),
            ),
            (
                PodAddressing::Dns,
                pod("", Some("10.0.0.1")),
                Err(PodAddressError::NoServiceName {
                    pod: "ingester-zone-a-4".into(),
                }),
            ),
            (
                PodAddressing::Dns,
                pod("evil.example/#", None),
                Err(PodAddressError::InvalidServiceName {
                    pod: "ingester-zone-a-4".into(),
                    service: "evil.example/#".into(),
                }),
            ),
            (
                PodAddressing::Dns,
                pod("ingester.evil.example", None),
                Err(PodAddressError::InvalidServiceName {
                    pod: "ingester-zone-a-4".into(),
                    service: "ingester.evil.example".into(),
                }),
            ),
            (
                PodAddressing::Ip,
                pod("", Some("127.0.3.4")),
                Ok("127.0.3.4"),
            ),
            (
                PodAddressing::Ip,
                pod("svc", Some("fd00::1")),
                Ok("[fd00::1]"),
            ),
            (
                PodAddressing::Ip,
                pod("svc", None),
                Err(PodAddressError::NoPodIp {
                    pod: "ingester-zone-a-4".into(),
                }),
            ),
            (
                PodAddressing::Ip,
                pod("svc", Some("")),
                Err(PodAddressError::NoPodIp {
                    pod: "ingester-zone-a-4".into(),
                }),
            ),
            (
                PodAddressing::Ip,
                pod("svc", Some("not-an-ip")),
                Err(PodAddressError::InvalidPodIp {
                    pod: "ingester-zone-a-4".into(),
                    ip: "not-an-ip".into(),
                }),
            ),
        ];
        for (addressing, pod, expected) in cases {
            let got = pod_host(*addressing, "cluster.local", pod);
            assert_eq!(
                got.as_deref().map_err(Clone::clone),
                expected.clone(),
                "{addressing:?} {pod:?}"
            );
        }
    }

    #[test]
    fn urls_accept_paths_with_or_without_a_leading_slash() {
        // (80 is http's own port: the URL leaves it out, the call goes to it)
        assert_eq!(pod_url("h", 80, "a/b").unwrap(), "http://h/a/b");
        assert_eq!(pod_url("h", 8080, "/a/b").unwrap(), "http://h:8080/a/b");
        assert_eq!(pod_url("[::1]", 8080, "").unwrap(), "http://[::1]:8080/");
        // Nothing in the path reaches the host, the port or the query.
        let url = pod_url("pod", 8080, "x@evil.example:1/?q#f").unwrap();
        let parsed = url::Url::parse(&url).unwrap();
        assert_eq!(
            (parsed.host_str(), parsed.port(), parsed.query()),
            (Some("pod"), Some(8080), None),
            "{url}"
        );
        assert_eq!(parse_port("8080"), Ok(8080));
        for bad in ["8080@evil.example", "0", "65536", "-1", "", "80 "] {
            assert!(parse_port(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_prepare_endpoint_is_read_from_the_annotations_and_says_what_is_missing() {
        let statefulset = |annotations: &[(&str, &str)]| {
            serde_json::from_value::<StatefulSet>(serde_json::json!({
                "metadata": {"name": "ingester-zone-a", "annotations": annotations
                    .iter()
                    .map(|(key, value)| ((*key).to_owned(), serde_json::json!(value)))
                    .collect::<serde_json::Map<_, _>>()},
                "spec": {"serviceName": "ingester", "selector": {}, "template": {}},
            }))
            .expect("a StatefulSet")
        };
        let port = PREPARE_DOWNSCALE_PORT_ANNOTATION;
        let path = PREPARE_DOWNSCALE_PATH_ANNOTATION;
        assert_eq!(
            PrepareEndpoint::of(&statefulset(&[(path, "p")])),
            Err(NoPrepareEndpoint::NoPort)
        );
        assert_eq!(
            PrepareEndpoint::of(&statefulset(&[(port, ""), (path, "p")])),
            Err(NoPrepareEndpoint::NoPort)
        );
        assert!(matches!(
            PrepareEndpoint::of(&statefulset(&[(port, "8080@evil.example"), (path, "p")])),
            Err(NoPrepareEndpoint::BadPort(_))
        ));
        assert_eq!(
            PrepareEndpoint::of(&statefulset(&[(port, "8080")])),
            Err(NoPrepareEndpoint::NoPath)
        );
        let prepare = PrepareEndpoint::of(&statefulset(&[(port, "8080"), (path, "p")])).unwrap();
        let endpoint = prepare
            .of_pod(
                PodAddressing::Dns,
                "cluster.local",
                "ingester-zone-a-1",
                "mimir",
                None,
            )
            .unwrap();
        assert_eq!(
            endpoint.url,
            "http://ingester-zone-a-1.ingester.mimir.svc.cluster.local:8080/p"
        );
        assert!(
            prepare
                .of_pod(PodAddressing::Ip, "cluster.local", "x", "mimir", None)
                .is_err()
        );
    }
}
