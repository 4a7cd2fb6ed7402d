//! The labels and annotations of the contract with users of Grafana's rollout-operator
//! (`docs/compatibility.md`), spelled out here rather than imported from baton-shared: a key
//! changed by mistake in baton then fails the end-to-end tests instead of changing with them.

pub const NO_DOWNSCALE: &str = "grafana.com/no-downscale";
pub const PREPARE_DOWNSCALE: &str = "grafana.com/prepare-downscale";
pub const PREPARE_DOWNSCALE_PATH: &str = "grafana.com/prepare-downscale-http-path";
pub const PREPARE_DOWNSCALE_PORT: &str = "grafana.com/prepare-downscale-http-port";
pub const MIN_TIME_BETWEEN_ZONES_DOWNSCALE: &str = "grafana.com/min-time-between-zones-downscale";
pub const LAST_DOWNSCALE: &str = "grafana.com/last-downscale";
pub const DOWNSCALE_LEADER: &str = "grafana.com/rollout-downscale-leader";
pub const MIRROR_NAME: &str = "grafana.com/rollout-mirror-replicas-from-resource-name";
pub const MIRROR_KIND: &str = "grafana.com/rollout-mirror-replicas-from-resource-kind";
pub const MIRROR_API_VERSION: &str =
    "grafana.com/rollout-mirror-replicas-from-resource-api-version";
pub const DELAYED_DOWNSCALE: &str = "grafana.com/rollout-delayed-downscale";
pub const DELAYED_DOWNSCALE_URL: &str = "grafana.com/rollout-prepare-delayed-downscale-url";
pub const INJECT_CA: &str = "grafana.com/inject-rollout-operator-ca";
pub const INJECT_CA_NAMESPACE: &str = "grafana.com/namespace";
