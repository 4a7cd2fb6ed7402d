//! One typed configuration for both baton binaries.
//!
//! Layers, later ones winning: built-in defaults, then a YAML file (`--config PATH` or
//! `BATON_CONFIG`), then environment variables (`BATON_` prefix, `__` between nested keys:
//! `BATON_LOG__FORMAT=json`; a list as `a,b` or `[a, b]`). Unknown keys are an error, so a typo
//! never silently falls back to a default; in the environment, shared with the platform (a
//! pod's Service link variables start with `BATON_` too), only variables whose first part names
//! a top-level key are read (`environment`). Every error names the key, the bad value and what
//! is accepted.

mod environment;
mod error;
mod reference;
mod values;

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_saphyr::figment::Yaml;

pub use environment::{IgnoredVariable, ignored_variables, is_service_link};
pub use error::{ConfigError, InvalidValue};
pub use reference::reference_markdown;
pub use values::{ByteSize, Destination, Duration, ListenAddress};

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_FILE_ENV: &str = "BATON_CONFIG";
/// Prefix of every environment variable that sets a key.
pub const ENV_PREFIX: &str = "BATON_";

/// The whole configuration of baton-controller and baton-webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Namespace of the rollout groups baton coordinates (StatefulSets, pods, budgets, records).
    pub namespace: String,
    /// The namespaces of the rollout groups, when baton serves more than `namespace`: names, or
    /// `["*"]` for every namespace of the cluster. Empty: `namespace` alone, as the Go operator
    /// serves. More than one namespace (or a selector) needs the cluster-wide install
    /// (deploy/cluster-wide), whose ClusterRoles let baton watch every namespace.
    #[serde(deserialize_with = "values::list")]
    pub namespaces: Vec<String>,
    /// Narrows the namespaces served to those whose labels match, as Kubernetes matches a
    /// namespaceSelector (`match_labels`, `match_expressions` with `In`, `NotIn`, `Exists`,
    /// `DoesNotExist`). A namespace whose labels start or stop matching is taken up or let go
    /// while baton runs. Empty: every namespace named by `namespaces`.
    pub namespace_selector: NamespaceSelector,
    /// Namespace of baton's own objects: the controller's Lease, the certificate Secret (with
    /// its CA key) and, unless `certificates.service_namespace` says otherwise, the webhook's
    /// Service. Empty: `namespace`, as the Go operator runs. A namespace of its own keeps the
    /// Secret out of reach of whoever may create pods beside the groups (a pod can mount any
    /// Secret of its namespace).
    pub system_namespace: String,
    /// DNS suffix of the cluster, used to build pod addresses
    /// (`<pod>.<service>.<namespace>.svc.<cluster_domain>`) and certificate names.
    pub cluster_domain: String,
    /// Logging.
    pub log: LogConfig,
    /// The plain-HTTP operations server (`/healthz`, `/ready`, `/metrics`).
    pub ops: OpsConfig,
    /// The admission webhook server.
    pub webhook: WebhookConfig,
    /// The rollout controller.
    pub controller: ControllerConfig,
    /// Calls baton makes to the Kubernetes API server.
    pub kubernetes: KubernetesConfig,
    /// Calls baton makes to pods (prepare-downscale and delayed-downscale endpoints).
    pub pods: PodsConfig,
    /// The webhook's TLS certificate: issued and renewed by the leader controller, its CA
    /// injected into labelled webhook configurations.
    pub certificates: CertificatesConfig,
    /// The records of approved downscales that min-time is judged on.
    pub downscale: DownscaleConfig,
    /// Where the leader's calls for rollout gates (health checks' Prometheus queries, rollout
    /// hooks) may go, and how much they may cost.
    pub gates: GatesConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: "default".to_owned(),
            namespaces: Vec::new(),
            namespace_selector: NamespaceSelector::default(),
            system_namespace: String::new(),
            cluster_domain: "cluster.local".to_owned(),
            log: LogConfig::default(),
            ops: OpsConfig::default(),
            webhook: WebhookConfig::default(),
            controller: ControllerConfig::default(),
            kubernetes: KubernetesConfig::default(),
            pods: PodsConfig::default(),
            certificates: CertificatesConfig::default(),
            downscale: DownscaleConfig::default(),
            gates: GatesConfig::default(),
        }
    }
}

/// The leader's own calls for rollout gates. Their addresses are written by namespace users (a
/// `RolloutHealthCheck`'s `spec.prometheus.address` or web query URLs, the `baton.dev/hook`
/// annotation), and the
/// calls leave from the leader's network position, some with Secrets it read: these keys bound
/// where they go and what they cost. Loopback, link-local and unspecified addresses (the
/// leader's own ports, a cloud's metadata service) are refused unless an entry names them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GatesConfig {
    /// Prometheus addresses health checks may query, as URL prefixes
    /// (`https://prometheus.monitoring.svc:9090`). Empty: any address but loopback, link-local
    /// and unspecified ones, without credentials: a check's bearer token or basic auth is only
    /// ever sent to an address listed here.
    #[serde(deserialize_with = "values::list")]
    pub prometheus_addresses: Vec<Destination>,
    /// Addresses rollout hooks may call, as URL prefixes (`https://deploys.example.com/hooks`).
    /// Empty: any address but loopback, link-local and unspecified ones (which an entry may
    /// name).
    #[serde(deserialize_with = "values::list")]
    pub hook_addresses: Vec<Destination>,
    /// Addresses web health checks (`spec.web` of a `RolloutHealthCheck`) may call, as URL
    /// prefixes (`https://app.example.com/health`). Empty: any address but loopback,
    /// link-local and unspecified ones, without Secrets: a header read from a Secret is only
    /// ever sent to an address listed here. Apart from `prometheus_addresses`: an endpoint a
    /// check may call is not one Prometheus credentials may go to.
    #[serde(deserialize_with = "values::list")]
    pub web_check_addresses: Vec<Destination>,
    /// Longest `spec.prometheus.timeout` (or `spec.web.timeout`) honoured; a longer one is cut
    /// to this.
    pub max_query_timeout: Duration,
    /// Largest Prometheus or web check answer read; a larger one makes the run inconclusive.
    pub max_answer_bytes: ByteSize,
    /// Health check runs in flight at once, over all groups, and as many hook calls. Both
    /// happen beside the groups' reconciles, so a slow or dead Prometheus or hook receiver
    /// delays only the groups that call it.
    pub max_concurrent_checks: usize,
}

impl Default for GatesConfig {
    fn default() -> Self {
        Self {
            prometheus_addresses: Vec::new(),
            hook_addresses: Vec::new(),
            web_check_addresses: Vec::new(),
            max_query_timeout: Duration::from_secs(30),
            max_answer_bytes: ByteSize(4 * 1024 * 1024),
            max_concurrent_checks: 16,
        }
    }
}

/// Records of approved downscales. baton's own ledger (`baton-downscale-<group>`) is the source
/// of truth; the Go operator's zone tracker is read beside it and kept up to date, so a switch
/// either way loses no history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DownscaleConfig {
    /// Name of the Go operator's zone tracker ConfigMap (its `-zone-tracker.config-map-name`),
    /// in each group's namespace: one more record of each StatefulSet's last downscale, which
    /// the controller updates after every downscale it sees happen.
    pub zone_tracker_config_map: String,
    /// How long an update that prepare-downscale approved may take to land. Past it, a
    /// StatefulSet whose spec is unchanged did not downscale (a conflict, another webhook's
    /// denial, a timeout): the approval stops holding other zones and its pods are told to
    /// cancel. At least the API server's `--request-timeout` (60s by default).
    pub claim_grace: Duration,
}

impl Default for DownscaleConfig {
    fn default() -> Self {
        Self {
            zone_tracker_config_map: "rollout-operator-zone-tracker".to_owned(),
            claim_grace: Duration::from_secs(60),
        }
    }
}

/// Logging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Minimum level (`trace`, `debug`, `info`, `warn`, `error`) or a full tracing filter such
    /// as `info,baton_controller=debug`.
    pub level: String,
    /// `text` for people, `json` for log pipelines.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The plain-HTTP operations server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OpsConfig {
    /// Address serving `/healthz`, `/ready` and `/metrics` (the Go operator's port 8001); the
    /// controller's also serves its status page, `/ui/status` and `/api/v1/status`.
    pub address: ListenAddress,
}

impl Default for OpsConfig {
    fn default() -> Self {
        Self {
            address: ListenAddress::all_interfaces(8001),
        }
    }
}

/// The admission webhook server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// TLS address serving `/admission/no-downscale` and `/admission/prepare-downscale`.
    pub address: ListenAddress,
    /// PEM certificate chain served by the webhook (a mounted `kubernetes.io/tls` Secret).
    pub cert_file: PathBuf,
    /// PEM private key matching `cert_file`.
    pub key_file: PathBuf,
    /// PEM CA certificate(s) that sign the API server's client certificate for webhooks (its
    /// `--admission-control-config-file`; docs/operations.md, "Authenticating the API
    /// server"). Set: every connection must present a certificate chaining to one of them,
    /// and any other fails its TLS handshake before a review is read. Use a CA that signs
    /// nothing else: every holder of a certificate it signs can send reviews. Empty: any
    /// client is served, as the Go operator does. Reloaded when it changes, as the serving
    /// certificate is (`cert_reload_interval`).
    pub client_ca_file: PathBuf,
    /// How often the certificate files (and `client_ca_file`) are compared with what is
    /// served, to pick up a renewed Secret or ConfigMap without a restart.
    pub cert_reload_interval: Duration,
    /// Deadline for answering one admission request, including every API and pod call it makes.
    /// Keep it below the webhook configuration's `timeoutSeconds`.
    pub request_timeout: Duration,
    /// Deadline for receiving a request: its TLS handshake and the head of a connection's first
    /// request each within it (else the connection is closed; a late head gets HTTP 408), and
    /// then its share of `max_inflight_request_bytes` and its whole body within it (else HTTP
    /// 429, or 408 closing the connection). The API server sends a review at once, in
    /// milliseconds; this bounds how long a client sending slowly holds the body budget. Below
    /// `request_timeout`.
    pub read_timeout: Duration,
    /// Largest AdmissionReview body accepted; larger requests get HTTP 400.
    pub max_request_bytes: ByteSize,
    /// What to answer when a change cannot be judged (a failed or timed-out read, an object
    /// that does not decode). `false` (the default): refuse it, as the webhook configurations'
    /// `failurePolicy: Fail` asks, saying why. `true`: allow it with a warning, as the Go
    /// operator does.
    pub allow_on_error: bool,
    /// Most bytes of request bodies held at once, over all requests: a request whose body does
    /// not fit waits for others to finish (up to `read_timeout`), then gets HTTP 429. Bounds
    /// the memory many large concurrent requests can take. A request holds its declared length
    /// (or `max_request_bytes`) until answered. Without `client_ca_file`, one client address
    /// holds at most a quarter of it (never less than `max_request_bytes`), so that a client
    /// stalling its bodies cannot hold it all; with it, every client is the API server.
    pub max_inflight_request_bytes: ByteSize,
    /// On SIGTERM the webhook first reports not ready and keeps serving this long, each answer
    /// asking its client to close the connection, so that the Service's endpoints (or any load
    /// balancer checking `/ready`) drop the replica before it stops accepting; then idle
    /// connections are closed and in-flight requests get up to `request_timeout` to finish.
    /// `0s` stops at once (only sensible with a `preStop` sleep doing the same). Keep the pod's
    /// `terminationGracePeriodSeconds` above `shutdown_delay` + `request_timeout` + a few seconds.
    pub shutdown_delay: Duration,
    /// Who may set baton's state annotations on StatefulSets (`baton.dev/gate-state`,
    /// `check-state`, `hook-state`, `partition`), as the API server names users. Empty:
    /// baton-controller's service account in the system namespace
    /// (`system:serviceaccount:<system_namespace>:baton-controller`). In a member cluster the
    /// hub's controller writes them: deploy/member-cluster sets
    /// `system:serviceaccount:baton-system:baton-member` (docs/multi-cluster.md).
    #[serde(deserialize_with = "values::list")]
    pub state_writers: Vec<String>,
    /// Who may create and change baton's records (ConfigMaps labelled
    /// `app.kubernetes.io/managed-by: baton`: downscale ledgers, eviction records). Empty:
    /// baton-controller's and baton-webhook's service accounts in the system namespace.
    #[serde(deserialize_with = "values::list")]
    pub record_writers: Vec<String>,
    /// The member clusters of cross-cluster rollout groups, as the webhook reaches them: the
    /// same list as `controller.clusters`, with this webhook's own cluster the one without a
    /// `kubeconfig_secret` (exactly one). Set: a downscale is approved only once its claim is
    /// in the downscale ledgers of a majority of them (docs/multi-cluster.md, "Downscales across
    /// clusters"), and a zone-aware budget spans them: an eviction is judged over every member's
    /// pods and claimed in the budget's records of a majority of them. Empty: this cluster
    /// alone, as the Go operator.
    pub clusters: Vec<ClusterConfig>,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            address: ListenAddress::all_interfaces(8443),
            cert_file: PathBuf::from("/var/run/baton/tls/tls.crt"),
            key_file: PathBuf::from("/var/run/baton/tls/tls.key"),
            client_ca_file: PathBuf::new(),
            cert_reload_interval: Duration::from_secs(10),
            request_timeout: Duration::from_secs(9),
            read_timeout: Duration::from_secs(2),
            max_request_bytes: ByteSize(3 * 1024 * 1024),
            allow_on_error: false,
            max_inflight_request_bytes: ByteSize(24 * 1024 * 1024),
            shutdown_delay: Duration::from_secs(5),
            state_writers: Vec::new(),
            record_writers: Vec::new(),
            clusters: Vec::new(),
        }
    }
}

/// The rollout controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ControllerConfig {
    /// Every group is reconciled at least this often, as a safety net behind the watches.
    pub resync_interval: Duration,
    /// Groups that mirror replicas from a reference resource are re-read this often: changes of
    /// the reference (e.g. by an HPA) produce no event baton watches.
    pub scaling_poll_interval: Duration,
    /// Leader election between controller replicas.
    pub lease: LeaseConfig,
    /// How many shards the namespaces are shared in among controller replicas, each shard led
    /// through its own Lease (`baton-shard-<i>-of-<n>`) with `lease`'s timings. 1: one leader
    /// for everything, as without sharding. The cluster shares by the count in its shard map
    /// (`baton-shard-map`, written by the first replica): a replica configured otherwise warns
    /// and follows the map.
    pub shards: u32,
    /// How many groups are reconciled at once, whichever their namespace (one group never twice
    /// at once). A pass mostly waits on the API server, so more groups rolling at once than this
    /// wait their turn for each step (`baton_group_queue_wait_seconds`); each one more is one
    /// more request in flight at a time.
    pub concurrent_groups: u32,
    /// The clusters of cross-cluster rollout groups: when set, a rollout group is the
    /// StatefulSets with the same rollout-group label in `namespace` across all of them, each
    /// named `cluster/statefulset` (docs/multi-cluster.md). Empty: the controller's own cluster
    /// alone, as the Go operator.
    pub clusters: Vec<ClusterConfig>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(300),
            scaling_poll_interval: Duration::from_secs(5),
            lease: LeaseConfig::default(),
            shards: 1,
            concurrent_groups: 32,
            clusters: Vec::new(),
        }
    }
}

/// One cluster of cross-cluster rollout groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The cluster's name as people read it (a DNS label): its StatefulSets are
    /// `name/statefulset`.
    pub name: String,
    /// The Secret in the system namespace holding the cluster's kubeconfig. Empty: the cluster
    /// the controller runs in, with its own credentials.
    #[serde(default)]
    pub kubeconfig_secret: String,
    /// The key of that Secret holding the kubeconfig.
    #[serde(default = "ClusterConfig::default_key")]
    pub kubeconfig_key: String,
}

impl ClusterConfig {
    fn default_key() -> String {
        "kubeconfig".to_owned()
    }
}

/// The most groups `controller.concurrent_groups` may reconcile at once: each is a request in
/// flight to the API server, under the client's rate limit.
pub const MAX_CONCURRENT_GROUPS: u32 = 256;

/// The most shards `controller.shards` may ask for: every replica reads every shard Lease each
/// retry period, so the count bounds the API calls of a round.
pub const MAX_SHARDS: u32 = 1024;

/// Leader election on a `coordination.k8s.io/v1` Lease in `namespace`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseConfig {
    /// Name of the Lease.
    pub name: String,
    /// How long a lease is valid after its last renewal; a standby takes over after this when
    /// the leader dies without releasing it.
    pub duration: Duration,
    /// The leader stops acting when it could not renew for this long; must be shorter than
    /// `duration` so it stops before anyone else can start.
    pub renew_deadline: Duration,
    /// How often the leader renews and standbys try to acquire.
    pub retry_period: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            name: "baton-controller".to_owned(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseConfig {
    /// The election's timing as the core's leader election reads it.
    pub fn timing(&self) -> baton_core::lease::decide::LeaseTiming {
        baton_core::lease::decide::LeaseTiming {
            duration: self.duration.get(),
            renew_deadline: self.renew_deadline.get(),
            retry_period: self.retry_period.get(),
        }
    }
}

/// Calls to the Kubernetes API server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Connect timeout for the API server.
    pub connect_timeout: Duration,
    /// Bound on a single API call outside watches (lease renewals, pod deletions, status and
    /// scale writes, Events, the certificate Secret and caBundles).
    pub request_timeout: Duration,
    /// How a watch fills its cache when it starts, and again when it has to start over:
    /// `streaming` (a watch asking for the objects there are first, `sendInitialEvents`: the
    /// WatchList feature, on by default since Kubernetes 1.32) or `list` (a paginated list, 500
    /// objects a page, then a watch). When the API server refuses `streaming` (WatchList turned
    /// off), every watch of the process lists instead, with one warning.
    pub initial_list: InitialList,
    /// Requests per second to each API group (`core/v1`, `apps/v1`, `policy/v1`…), a token
    /// bucket per group as the Go operator's `-kubernetes.client-qps` (its default is 5). `0`:
    /// no limit, the default (baton's calls are bounded by its events, and the API server's
    /// priority and fairness shares it out). A request that waits for a token counts in
    /// `rollout_operator_kubernetes_api_client_rate_limited_requests_total{api_group}`.
    pub client_qps: f64,
    /// Requests each API group may make at once above `client_qps` (the bucket's size), as the
    /// Go operator's `-kubernetes.client-burst` (10).
    pub client_burst: u32,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            initial_list: InitialList::default(),
            client_qps: 0.0,
            client_burst: 10,
        }
    }
}

/// How watches fill their caches (`kubernetes.initial_list`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InitialList {
    /// A watch sending every object there is first; lists if refused.
    #[default]
    Streaming,
    /// A paginated list, then a watch.
    List,
}

/// Calls to pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PodsConfig {
    /// How a pod is reached: `dns` (`<pod>.<service>.<namespace>.svc.<cluster_domain>`, needs
    /// the StatefulSet's headless Service) or `ip` (the pod's `status.podIP`).
    pub address_by: PodAddressing,
    /// Connect timeout of one call to a pod.
    pub connect_timeout: Duration,
    /// Timeout of one whole call to a pod.
    pub request_timeout: Duration,
    /// How many pods are called at once.
    pub max_concurrent_calls: usize,
}

impl Default for PodsConfig {
    fn default() -> Self {
        Self {
            address_by: PodAddressing::Dns,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            max_concurrent_calls: 16,
        }
    }
}

/// How pods are addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PodAddressing {
    /// The pod's cluster DNS name through the StatefulSet's governing Service.
    Dns,
    /// The pod's IP address.
    Ip,
}

/// The file's spelling of addressing, into the core's, which the calls to pods are built from.
impl From<PodAddressing> for baton_core::pod_address::PodAddressing {
    fn from(addressing: PodAddressing) -> Self {
        match addressing {
            PodAddressing::Dns => Self::Dns,
            PodAddressing::Ip => Self::Ip,
        }
    }
}

/// The webhook's certificate, kept by the leader controller in one `kubernetes.io/tls` Secret
/// (`tls.crt`, `tls.key`, `ca.crt`, plus `ca.key` so the CA can sign renewals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CertificatesConfig {
    /// Issue and renew the CA and serving certificate. Off when something else (cert-manager)
    /// writes the Secret; the webhook then just serves the mounted files.
    pub generate: bool,
    /// Set `caBundle` on webhook configurations labelled
    /// `grafana.com/inject-rollout-operator-ca=true` and `grafana.com/namespace=<namespace>`,
    /// from the Secret's `ca.crt`.
    pub inject_ca_bundle: bool,
    /// Name of the Secret in the system namespace (`system_namespace`, else `namespace`)
    /// holding the certificate.
    pub secret_name: String,
    /// Name of the webhook's Service: the certificate is valid for `<service>`,
    /// `<service>.<ns>`, `<service>.<ns>.svc` and `<service>.<ns>.svc.<cluster_domain>`.
    pub service_name: String,
    /// Namespace of the webhook's Service; empty means the system namespace
    /// (`system_namespace`, else `namespace`).
    pub service_namespace: String,
    /// More DNS names the serving certificate is valid for.
    #[serde(deserialize_with = "values::list")]
    pub extra_dns_names: Vec<String>,
    /// IP addresses the serving certificate is valid for (e.g. `127.0.0.1` for a local test).
    #[serde(deserialize_with = "values::list")]
    pub extra_ips: Vec<std::net::IpAddr>,
    /// Validity of a new CA.
    pub ca_lifetime: Duration,
    /// Validity of a new serving certificate (never beyond its CA's).
    pub serving_lifetime: Duration,
    /// A certificate is renewed when less than this fraction of its life is left; for the CA
    /// that starts a rotation with overlap.
    pub renew_before_fraction: f64,
    /// During a CA rotation: how long the new CA is published in every `caBundle` before the
    /// serving certificate switches to it, and how long the old CA stays after the switch.
    /// Covers the time kubelet takes to update a mounted Secret.
    pub ca_overlap: Duration,
}

impl Default for CertificatesConfig {
    fn default() -> Self {
        Self {
            generate: true,
            inject_ca_bundle: true,
            secret_name: "baton-webhook-tls".to_owned(),
            service_name: "baton-webhook".to_owned(),
            service_namespace: String::new(),
            extra_dns_names: Vec::new(),
            extra_ips: Vec::new(),
            // humantime's year (365.25 days), so it prints as `1year`.
            ca_lifetime: Duration::from_secs(31_557_600),
            serving_lifetime: Duration::from_secs(90 * 24 * 3600),
            renew_before_fraction: 1.0 / 3.0,
            ca_overlap: Duration::from_secs(5 * 60),
        }
    }
}

impl Config {
    /// Loads defaults, then `file` (if any), then `BATON_*` variables from the process
    /// environment, and validates the result.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::from_figment(Self::figment(file, Env::prefixed(ENV_PREFIX)))
    }

    /// The layered sources, exposed so tests can substitute the environment.
    pub fn figment(file: Option<&Path>, env: Env) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(Yaml::file_exact(file));
        }
        figment.merge(environment::provider(env))
    }

    /// Extracts and validates a configuration from already layered sources.
    pub fn from_figment(figment: Figment) -> Result<Self, ConfigError> {
        let config: Config = figment.extract().map_err(ConfigError::from_figment)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what types alone cannot: every problem is reported, not only the first, each
    /// naming its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, key: &str, value: String, expected: &str| {
            if !ok {
                problems.push(InvalidValue::new(key, value, expected));
            }
        };
        self.validate_names(&mut check);
        self.validate_client(&mut check);
        self.validate_timeouts(&mut check);
        self.validate_clusters(&mut check);
        self.validate_lease(&mut check);
        self.validate_shards(&mut check);
        self.validate_limits(&mut check);
        self.validate_downscale_and_gates(&mut check);
        self.certificates.validate(&mut check);
        ConfigError::from_problems(problems)
    }

    /// The namespaces and the cluster domain.
    fn validate_names(&self, check: &mut Check<'_>) {
        check(
            is_dns_label(&self.namespace),
            "namespace",
            self.namespace.clone(),
            "a Kubernetes namespace name (lowercase letters, digits and '-', at most 63)",
        );
        self.validate_namespaces(check);
        check(
            self.system_namespace.is_empty() || is_dns_label(&self.system_namespace),
            "system_namespace",
            self.system_namespace.clone(),
            "empty (same as namespace) or a Kubernetes namespace name",
        );
        check(
            !self.cluster_domain.is_empty() && self.cluster_domain.split('.').all(is_dns_label),
            "cluster_domain",
            self.cluster_domain.clone(),
            "a DNS domain such as cluster.local",
        );
    }

    /// The namespaces served: names (or `*` alone), and a selector Kubernetes would accept.
    fn validate_namespaces(&self, check: &mut Check<'_>) {
        let all = self.namespaces.iter().any(|name| name == "*");
        check(
            !all || self.namespaces.len() == 1,
            "namespaces",
            format!("{:?}", self.namespaces),
            "namespace names, or [\"*\"] alone for every namespace",
        );
        for (index, name) in self.namespaces.iter().enumerate() {
            check(
                name == "*" || is_dns_label(name),
                &format!("namespaces[{index}]"),
                name.clone(),
                "a Kubernetes namespace name (lowercase letters, digits and '-', at most 63), or *",
            );
        }
        self.namespace_selector.validate(check);
        let several = self.namespaces.len() > 1
            || all
            || self
                .namespaces
                .first()
                .is_some_and(|name| name != &self.namespace)
            || self.namespace_selector != NamespaceSelector::default();
        check(
            !several || self.controller.clusters.is_empty(),
            "namespaces",
            format!("{:?}", self.namespaces),
            "one namespace while controller.clusters spans member clusters (serving several namespaces across clusters is not built)",
        );
    }

    /// The namespaces one baton serves ([`baton_core::namespaces::Scope`]), from `namespaces`,
    /// `namespace` and `namespace_selector`. Call on a validated config: a selector that
    /// validation passed is one the core accepts.
    pub fn scope(
        &self,
    ) -> Result<baton_core::namespaces::Scope, baton_core::namespaces::SelectorError> {
        use baton_core::namespaces::{Names, Scope};
        let names = if self.namespaces.iter().any(|name| name == "*") {
            Names::All
        } else if self.namespaces.is_empty() {
            Names::Listed([self.namespace.clone()].into())
        } else {
            Names::Listed(self.namespaces.iter().cloned().collect())
        };
        Scope::new(names, self.namespace_selector.label_selector())
    }

    /// The Kubernetes client's rate limit, and the log filter.
    fn validate_client(&self, check: &mut Check<'_>) {
        check(
            self.kubernetes.client_qps.is_finite() && self.kubernetes.client_qps >= 0.0,
            "kubernetes.client_qps",
            self.kubernetes.client_qps.to_string(),
            "requests per second, 0 (no limit) or more, e.g. 5",
        );
        check(
            self.kubernetes.client_qps == 0.0 || self.kubernetes.client_burst >= 1,
            "kubernetes.client_burst",
            self.kubernetes.client_burst.to_string(),
            "1 or more while kubernetes.client_qps limits",
        );
        check(
            values::is_log_filter(&self.log.level),
            "log.level",
            self.log.level.clone(),
            "trace, debug, info, warn, error, or a filter such as info,baton_controller=debug",
        );
    }

    /// The intervals and timeouts: each above zero, the webhook's read within its request.
    fn validate_timeouts(&self, check: &mut Check<'_>) {
        let webhook = &self.webhook;
        positive(
            check,
            "webhook.cert_reload_interval",
            webhook.cert_reload_interval,
        );
        positive(check, "webhook.request_timeout", webhook.request_timeout);
        check(
            !webhook.read_timeout.is_zero() && webhook.read_timeout < webhook.request_timeout,
            "webhook.read_timeout",
            webhook.read_timeout.to_string(),
            &format!(
                "a duration above zero and below webhook.request_timeout ({})",
                webhook.request_timeout
            ),
        );
        let controller = &self.controller;
        positive(
            check,
            "controller.resync_interval",
            controller.resync_interval,
        );
        positive(
            check,
            "controller.scaling_poll_interval",
            controller.scaling_poll_interval,
        );
        positive(
            check,
            "controller.lease.duration",
            controller.lease.duration,
        );
        positive(
            check,
            "controller.lease.retry_period",
            controller.lease.retry_period,
        );
        let kubernetes = &self.kubernetes;
        positive(
            check,
            "kubernetes.connect_timeout",
            kubernetes.connect_timeout,
        );
        positive(
            check,
            "kubernetes.request_timeout",
            kubernetes.request_timeout,
        );
        positive(check, "pods.connect_timeout", self.pods.connect_timeout);
        positive(check, "pods.request_timeout", self.pods.request_timeout);
    }

    /// The clusters (the controller's and the webhook's): each named once, with where its
    /// kubeconfig is; one at most is the controller's own, and exactly one the webhook's.
    fn validate_clusters(&self, check: &mut Check<'_>) {
        validate_cluster_list(check, "controller.clusters", &self.controller.clusters);
        let clusters = &self.webhook.clusters;
        validate_cluster_list(check, "webhook.clusters", clusters);
        let own = clusters
            .iter()
            .filter(|cluster| cluster.kubeconfig_secret.is_empty())
            .count();
        check(
            clusters.is_empty() || own == 1,
            "webhook.clusters",
            format!("{own} clusters without a kubeconfig_secret"),
            "exactly one cluster without a kubeconfig_secret (the webhook's own cluster)",
        );
    }

    /// The lease's timings, in their order, and its name.
    fn validate_lease(&self, check: &mut Check<'_>) {
        let lease = &self.controller.lease;
        check(
            !lease.renew_deadline.is_zero() && lease.renew_deadline < lease.duration,
            "controller.lease.renew_deadline",
            lease.renew_deadline.to_string(),
            &format!(
                "a duration above zero and below controller.lease.duration ({})",
                lease.duration
            ),
        );
        check(
            lease.retry_period < lease.renew_deadline,
            "controller.lease.retry_period",
            lease.retry_period.to_string(),
            &format!(
                "a duration below controller.lease.renew_deadline ({})",
                lease.renew_deadline
            ),
        );
        check(
            is_dns_subdomain(&lease.name),
            "controller.lease.name",
            lease.name.clone(),
            "a Kubernetes object name",
        );
    }

    /// The shard count: at least the single leader, at most what the replicas can read every
    /// retry period (one Lease each).
    fn validate_shards(&self, check: &mut Check<'_>) {
        check(
            (1..=MAX_SHARDS).contains(&self.controller.shards),
            "controller.shards",
            self.controller.shards.to_string(),
            &format!("a whole number from 1 to {MAX_SHARDS}"),
        );
        check(
            (1..=MAX_CONCURRENT_GROUPS).contains(&self.controller.concurrent_groups),
            "controller.concurrent_groups",
            self.controller.concurrent_groups.to_string(),
            &format!("a whole number from 1 to {MAX_CONCURRENT_GROUPS}"),
        );
    }

    /// What bounds the webhook's requests and the pod calls.
    fn validate_limits(&self, check: &mut Check<'_>) {
        check(
            self.webhook.max_request_bytes.0 >= 1024,
            "webhook.max_request_bytes",
            self.webhook.max_request_bytes.to_string(),
            "at least 1KiB",
        );
        check(
            self.webhook.max_inflight_request_bytes.0 >= self.webhook.max_request_bytes.0,
            "webhook.max_inflight_request_bytes",
            self.webhook.max_inflight_request_bytes.to_string(),
            &format!(
                "at least webhook.max_request_bytes ({})",
                self.webhook.max_request_bytes
            ),
        );
        check(
            self.pods.max_concurrent_calls > 0,
            "pods.max_concurrent_calls",
            self.pods.max_concurrent_calls.to_string(),
            "a whole number above zero",
        );
    }

    /// prepare-downscale's claims and tracker, and the gates' health checks.
    fn validate_downscale_and_gates(&self, check: &mut Check<'_>) {
        positive(check, "downscale.claim_grace", self.downscale.claim_grace);
        check(
            is_dns_subdomain(&self.downscale.zone_tracker_config_map),
            "downscale.zone_tracker_config_map",
            self.downscale.zone_tracker_config_map.clone(),
            "a Kubernetes object name",
        );
        positive(
            check,
            "gates.max_query_timeout",
            self.gates.max_query_timeout,
        );
        check(
            self.gates.max_answer_bytes.0 >= 1024,
            "gates.max_answer_bytes",
            self.gates.max_answer_bytes.to_string(),
            "at least 1KiB",
        );
        check(
            self.gates.max_concurrent_checks > 0,
            "gates.max_concurrent_checks",
            self.gates.max_concurrent_checks.to_string(),
            "a whole number above zero",
        );
    }

    /// Where baton's own objects live: `system_namespace`, else `namespace`.
    pub fn system_namespace(&self) -> &str {
        if self.system_namespace.is_empty() {
            &self.namespace
        } else {
            &self.system_namespace
        }
    }

    /// Who may set baton's state annotations: `webhook.state_writers`, else baton-controller's
    /// service account (in the system namespace).
    pub fn state_writers(&self) -> Vec<String> {
        if self.webhook.state_writers.is_empty() {
            vec![format!(
                "system:serviceaccount:{}:baton-controller",
                self.system_namespace()
            )]
        } else {
            self.webhook.state_writers.clone()
        }
    }

    /// Who may write baton's records: `webhook.record_writers`, else baton-controller's and
    /// baton-webhook's service accounts (in the system namespace).
    pub fn record_writers(&self) -> Vec<String> {
        if self.webhook.record_writers.is_empty() {
            ["baton-controller", "baton-webhook"]
                .iter()
                .map(|account| {
                    format!(
                        "system:serviceaccount:{}:{account}",
                        self.system_namespace()
                    )
                })
                .collect()
        } else {
            self.webhook.record_writers.clone()
        }
    }

    /// The effective configuration as YAML, in the format the config file accepts.
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(self).expect("the configuration always serializes")
    }
}

impl CertificatesConfig {
    fn validate(&self, check: &mut Check<'_>) {
        check(
            is_dns_subdomain(&self.secret_name),
            "certificates.secret_name",
            self.secret_name.clone(),
            "a Kubernetes object name",
        );
        check(
            is_dns_label(&self.service_name),
            "certificates.service_name",
            self.service_name.clone(),
            "a Service name (lowercase letters, digits and '-', at most 63)",
        );
        check(
            self.service_namespace.is_empty() || is_dns_label(&self.service_namespace),
            "certificates.service_namespace",
            self.service_namespace.clone(),
            "empty (same as namespace) or a Kubernetes namespace name",
        );
        for name in &self.extra_dns_names {
            let wildcard = name.strip_prefix("*.").unwrap_or(name);
            check(
                !wildcard.is_empty() && is_dns_subdomain(wildcard),
                "certificates.extra_dns_names",
                name.clone(),
                "DNS names such as webhook.example.com",
            );
        }
        let fraction = self.renew_before_fraction;
        check(
            fraction > 0.0 && fraction < 0.5,
            "certificates.renew_before_fraction",
            fraction.to_string(),
            "a number above 0 and below 0.5, e.g. 0.33",
        );
        check(
            !self.serving_lifetime.is_zero() && self.serving_lifetime <= self.ca_lifetime,
            "certificates.serving_lifetime",
            self.serving_lifetime.to_string(),
            &format!(
                "a duration above zero, at most certificates.ca_lifetime ({})",
                self.ca_lifetime
            ),
        );
        // Rotation publishes the new CA for one overlap, then keeps the old one for another:
        // both must fit in the CA's renewal window.
        let window = self.ca_lifetime.get().mul_f64(fraction.clamp(0.0, 1.0));
        check(
            !self.ca_overlap.is_zero() && self.ca_overlap.get() * 2 < window,
            "certificates.ca_overlap",
            self.ca_overlap.to_string(),
            &format!(
                "a duration above zero and below half of ca_lifetime × renew_before_fraction ({})",
                Duration(window / 2)
            ),
        );
        check(
            !self.ca_lifetime.is_zero(),
            "certificates.ca_lifetime",
            self.ca_lifetime.to_string(),
            "a duration above zero, e.g. 365d",
        );
    }
}

fn is_dns_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-')
}

/// One list of clusters (`key`): each named once, with where its kubeconfig is; one at most
/// without a Secret (the cluster the reading binary runs in).
fn validate_cluster_list(check: &mut Check<'_>, key: &str, clusters: &[ClusterConfig]) {
    for (index, cluster) in clusters.iter().enumerate() {
        let key = format!("{key}[{index}]");
        if let Err(why) = baton_core::clusters::valid_cluster_name(&cluster.name) {
            check(false, &format!("{key}.name"), cluster.name.clone(), &why);
        }
        check(
            !clusters[..index]
                .iter()
                .any(|other| other.name == cluster.name),
            &format!("{key}.name"),
            cluster.name.clone(),
            "a name no other cluster has",
        );
        check(
            cluster.kubeconfig_secret.is_empty() || is_dns_subdomain(&cluster.kubeconfig_secret),
            &format!("{key}.kubeconfig_secret"),
            cluster.kubeconfig_secret.clone(),
            "empty (the cluster this binary runs in) or a Secret name",
        );
        check(
            !cluster.kubeconfig_key.is_empty(),
            &format!("{key}.kubeconfig_key"),
            cluster.kubeconfig_key.clone(),
            "the key of the Secret holding the kubeconfig, e.g. kubeconfig",
        );
    }
    let own = clusters
        .iter()
        .filter(|cluster| cluster.kubeconfig_secret.is_empty())
        .count();
    check(
        own <= 1,
        key,
        format!("{own} clusters without a kubeconfig_secret"),
        "at most one cluster without a kubeconfig_secret (the cluster this binary runs in)",
    );
}

fn is_dns_subdomain(value: &str) -> bool {
    value.len() <= 253 && value.split('.').all(is_dns_label)
}

/// A label selector over namespaces, as a webhook's namespaceSelector is written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct NamespaceSelector {
    /// Labels a namespace must carry, each with its value.
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Requirements on a namespace's labels, all of which must hold.
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One requirement of a [`NamespaceSelector`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SelectorRequirement {
    /// The label's key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values `In` and `NotIn` compare with (at least one); none for the others.
    #[serde(default)]
    pub values: Vec<String>,
}

impl NamespaceSelector {
    /// The selector as Kubernetes writes it.
    pub fn label_selector(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            LabelSelector, LabelSelectorRequirement,
        };
        LabelSelector {
            match_labels: (!self.match_labels.is_empty()).then(|| self.match_labels.clone()),
            match_expressions: (!self.match_expressions.is_empty()).then(|| {
                self.match_expressions
                    .iter()
                    .map(|requirement| LabelSelectorRequirement {
                        key: requirement.key.clone(),
                        operator: requirement.operator.clone(),
                        values: (!requirement.values.is_empty())
                            .then(|| requirement.values.clone()),
                    })
                    .collect()
            }),
        }
    }

    fn validate(&self, check: &mut Check<'_>) {
        for (key, value) in &self.match_labels {
            check(
                baton_core::names::is_label_key(key),
                "namespace_selector.match_labels",
                key.clone(),
                "label keys such as team or example.com/team",
            );
            check(
                value.len() <= 63,
                &format!("namespace_selector.match_labels.{key}"),
                value.clone(),
                "a label value (at most 63 characters)",
            );
        }
        for (index, requirement) in self.match_expressions.iter().enumerate() {
            let at = format!("namespace_selector.match_expressions[{index}]");
            check(
                baton_core::names::is_label_key(&requirement.key),
                &format!("{at}.key"),
                requirement.key.clone(),
                "a label key such as team or example.com/team",
            );
            let takes_values = matches!(requirement.operator.as_str(), "In" | "NotIn");
            let known =
                takes_values || matches!(requirement.operator.as_str(), "Exists" | "DoesNotExist");
            check(
                known,
                &format!("{at}.operator"),
                requirement.operator.clone(),
                "In, NotIn, Exists or DoesNotExist",
            );
            // (values are judged against a known operator only: one problem per mistake)
            check(
                !known || takes_values != requirement.values.is_empty(),
                &format!("{at}.values"),
                format!("{:?}", requirement.values),
                "at least one value for In and NotIn, none for Exists and DoesNotExist",
            );
        }
    }
}

/// Reports a problem unless `ok`: the key, the value found and what it expects.
type Check<'a> = dyn FnMut(bool, &str, String, &str) + 'a;

/// Checks that the duration at `key` is above zero.
fn positive(check: &mut Check<'_>, key: &str, value: Duration) {
    check(
        !value.is_zero(),
        key,
        value.to_string(),
        "a duration above zero, e.g. 30s",
    );
}

#[cfg(test)]
mod tests;
