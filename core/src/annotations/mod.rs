//! Labels and annotations baton shares with Grafana's rollout-operator (see docs/compatibility.md).
//! The keys are the contract with existing users: never rename one.

/// Label selecting a StatefulSet into a rollout group; its value names the group.
pub const ROLLOUT_GROUP_LABEL: &str = "rollout-group";
/// Annotation (no prefix): how many pods of a StatefulSet may be not ready during a rollout.
pub const MAX_UNAVAILABLE_ANNOTATION: &str = "rollout-max-unavailable";
/// Annotation `"true"`: no pod of this StatefulSet is deleted by a rollout.
pub const ROLLOUT_PAUSED_ANNOTATION: &str = "grafana.com/rollout-paused";
/// Annotation: the StatefulSet this one follows when scaling.
pub const DOWNSCALE_LEADER_ANNOTATION: &str = "grafana.com/rollout-downscale-leader";
/// Annotation `"true"`: a follower scales up only once its leader is ready.
pub const UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION: &str =
    "grafana.com/rollout-upscale-only-when-leader-ready";
/// Label: minimum time between downscales of two zones of a group (Go duration syntax).
pub const MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL: &str =
    "grafana.com/min-time-between-zones-downscale";
/// Annotation: RFC 3339 time of the last approved downscale.
pub const LAST_DOWNSCALE_ANNOTATION: &str = "grafana.com/last-downscale";
/// Label `"true"`: opts in to the prepare-downscale webhook.
pub const PREPARE_DOWNSCALE_LABEL: &str = "grafana.com/prepare-downscale";
/// Annotation: HTTP path called on each pod going away.
pub const PREPARE_DOWNSCALE_PATH_ANNOTATION: &str = "grafana.com/prepare-downscale-http-path";
/// Annotation: HTTP port called on each pod going away.
pub const PREPARE_DOWNSCALE_PORT_ANNOTATION: &str = "grafana.com/prepare-downscale-http-port";
/// Label `"true"`: downscales are denied.
pub const NO_DOWNSCALE_LABEL: &str = "grafana.com/no-downscale";
/// Annotations naming the reference resource replicas are mirrored from.
pub const MIRROR_REPLICAS_NAME_ANNOTATION: &str =
    "grafana.com/rollout-mirror-replicas-from-resource-name";
pub const MIRROR_REPLICAS_KIND_ANNOTATION: &str =
    "grafana.com/rollout-mirror-replicas-from-resource-kind";
pub const MIRROR_REPLICAS_API_VERSION_ANNOTATION: &str =
    "grafana.com/rollout-mirror-replicas-from-resource-api-version";
pub const MIRROR_REPLICAS_WRITE_BACK_ANNOTATION: &str =
    "grafana.com/rollout-mirror-replicas-from-resource-write-back";
/// Annotation: how long pods must have prepared before a delayed downscale removes them.
pub const DELAYED_DOWNSCALE_ANNOTATION: &str = "grafana.com/rollout-delayed-downscale";
/// Annotation: URL (host replaced by the pod's address) for delayed-downscale preparation.
pub const PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION: &str =
    "grafana.com/rollout-prepare-delayed-downscale-url";
/// Annotation: replicas that override the leader's or the reference's.
pub const FORCE_REPLICAS_ANNOTATION: &str = "grafana.com/rollout-force-replicas";
/// Annotation written by baton's controller only: the gate state of one zone (JSON).
pub const GATE_STATE_ANNOTATION: &str = "baton.dev/gate-state";
/// Annotation written by baton's controller only, on a group's first member: a health check's
/// counts (JSON).
pub const CHECK_STATE_ANNOTATION: &str = "baton.dev/check-state";
/// Annotation written by baton's controller only: the state of a zone's hooks (JSON).
pub const HOOK_STATE_ANNOTATION: &str = "baton.dev/hook-state";
/// baton's memory on the StatefulSets: whoever else wrote it could skip what it records (a
/// soak, a hook, a health check), so the webhook lets only baton's controller set it.
pub const STATE_ANNOTATIONS: [&str; 5] = [
    GATE_STATE_ANNOTATION,
    CHECK_STATE_ANNOTATION,
    HOOK_STATE_ANNOTATION,
    PARTITION_ANNOTATION,
    ROLLBACK_STATE_ANNOTATION,
];
/// Annotation written by baton's controller only: a member's rollback, from which revision to
/// which, why and in what turn (JSON). Whoever else wrote it could have baton roll a template
/// back to any revision.
pub const ROLLBACK_STATE_ANNOTATION: &str = "baton.dev/rollback-state";
/// Annotation (baton's own): how a StatefulSet's pods are replaced in a rollout, `delete` (the
/// default: baton deletes them, the StatefulSet is `OnDelete`) or `partition` (a `RollingUpdate`
/// StatefulSet whose partition baton lowers; the StatefulSet controller replaces the pods).
pub const UPDATE_BY_ANNOTATION: &str = "baton.dev/update-by";
/// Annotation written by baton's controller only, with the partition it sets: a different
/// partition in the spec was set by someone else.
pub const PARTITION_ANNOTATION: &str = "baton.dev/partition";
/// How many members of a group may be not ready at once: Fleet's `maxUnavailable` clusters, for
/// groups whose members are whole clusters. More than 1 only when every member says so (then
/// the smallest holds): [`group::MAX_ROLLING_MEMBERS`].
pub const MAX_ROLLING_MEMBERS_ANNOTATION: &str = "baton.dev/max-rolling-members";
/// Labels on webhook configurations that ask for the CA bundle to be injected.
pub const INJECT_CA_LABEL: &str = "grafana.com/inject-rollout-operator-ca";
pub const INJECT_CA_NAMESPACE_LABEL: &str = "grafana.com/namespace";
/// Pod label set by the StatefulSet controller: the revision a pod was created from.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";

pub mod group;
pub mod rollout;
pub mod scaling;

pub use rollout::{InvalidAnnotation, Parsed, max_unavailable, paused};
