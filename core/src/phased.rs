//! The phased rollout operator's `PhasedRollout` (`sts.plus/v1alpha1`), served by baton for
//! that operator's users: a rollout of one `RollingUpdate` StatefulSet, pod by pod through its
//! partition, each step once a Prometheus query returned data `successThreshold` times in a row.
//!
//! baton does not roll it a second way: a PhasedRollout is turned into what baton already rolls
//! ([`target_patch`]): its target joins a rollout group of its own ([`group_name`]), rolled by
//! partition, gated by a `RolloutHealthCheck` made from its check ([`health_check_spec`]); and
//! its status is read back from that group ([`status`]). Pure; the controller's `phased`
//! module reads and writes.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::annotations::{PARTITION_ANNOTATION, ROLLOUT_GROUP_LABEL, UPDATE_BY_ANNOTATION};
use crate::gates::checks::CheckState;
use crate::gates::keys::HEALTH_CHECK_ANNOTATION;
use crate::rollout::StatefulSetSnapshot;

pub const GROUP: &str = "sts.plus";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "PhasedRollout";
pub const PLURAL: &str = "phasedrollouts";
/// Held on every PhasedRollout baton serves: its target is given back before it goes.
pub const FINALIZER: &str = "sts.plus/baton";

/// A `PhasedRollout` as watched: its spec kept as written, so that one baton cannot read is
/// reported on its status rather than lost in the watch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhasedRollout {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

impl PhasedRollout {
    /// The spec, or what is wrong with it (naming the field).
    pub fn parsed_spec(&self) -> Result<PhasedRolloutSpec, String> {
        serde_json::from_value(self.spec.clone()).map_err(|error| format!("spec: {error}"))
    }
}

namespaced_resource!(PhasedRollout, GROUP, VERSION, KIND, PLURAL);

/// `spec`, as the phased rollout operator documents it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhasedRolloutSpec {
    /// The StatefulSet to roll, in the PhasedRollout's namespace.
    pub target_ref: String,
    /// `true`: baton lets go and the StatefulSet controller rolls every pod (partition 0).
    #[serde(default)]
    pub standard_rolling_update: bool,
    pub check: Check,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// After a pod is rolled, runs count only this long after (so Prometheus has fresh data).
    #[serde(default)]
    pub initial_delay_seconds: i64,
    pub period_seconds: i64,
    pub success_threshold: i64,
    pub query: Query,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Query {
    /// Passes when it returns data, fails when it returns none (like an alert's expression).
    pub expr: String,
    /// Prometheus' base URL, without `/api/v1/query`; `http://` when no scheme is written.
    pub url: String,
    /// A Secret with `token` (bearer) or `username` and `password` (basic).
    #[serde(default)]
    pub secret_ref: Option<String>,
    /// Send the Secret's credentials even over plain http (baton's addition: without it they
    /// go only over verified https, as for any `RolloutHealthCheck`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure_credentials: bool,
}

/// Where a PhasedRollout writes Prometheus' address, for messages about the check made of it.
pub const URL_FIELD: &str = "spec.check.query.url";
/// Where a PhasedRollout lets its credentials go over plain http.
pub const ALLOW_INSECURE_CREDENTIALS_FIELD: &str = "spec.check.query.allowInsecureCredentials";

/// What the Secret named by `secretRef` holds, as far as the check is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    None,
    /// `token`: sent as a bearer token.
    Token,
    /// `username` and `password`: basic auth.
    Basic,
}

impl Credentials {
    /// Which credentials a Secret with these data keys gives, or why none can be used.
    pub fn of_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let keys: Vec<&str> = keys.into_iter().collect();
        if keys.contains(&"token") {
            Ok(Self::Token)
        } else if keys.contains(&"username") && keys.contains(&"password") {
            Ok(Self::Basic)
        } else {
            Err("it has neither `token` nor `username` and `password`".to_owned())
        }
    }
}

/// The rollout group (and the `RolloutHealthCheck`) baton rolls PhasedRollout `name` with. A
/// label value holds at most 63 characters: a longer name keeps its start and a hash of the
/// whole, so two PhasedRollouts never share a group.
pub fn group_name(name: &str) -> String {
    let group = format!("phasedrollout-{name}");
    if group.len() <= 63 {
        return group;
    }
    let hash = name.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    let kept: String = group.chars().take(54).collect();
    format!("{}-{hash:08x}", kept.trim_end_matches(['-', '.']))
}

/// Every problem of `spec`, each naming its field; empty when baton can serve it.
/// `clusters`: the controller's member clusters (`controller.clusters`), none without.
pub fn problems(spec: &PhasedRolloutSpec, clusters: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    problems.extend(target_name_problem(&spec.target_ref, clusters));
    let check = &spec.check;
    if check.initial_delay_seconds < 0 {
        problems.push(format!(
            "spec.check.initialDelaySeconds is {}: it must be 0 or more",
            check.initial_delay_seconds
        ));
    }
    if check.period_seconds < 1 {
        problems.push(format!(
            "spec.check.periodSeconds is {}: it must be at least 1",
            check.period_seconds
        ));
    }
    if !(1..=i64::from(u32::MAX)).contains(&check.success_threshold) {
        problems.push(format!(
            "spec.check.successThreshold is {}: it must be at least 1",
            check.success_threshold
        ));
    }
    if check.query.expr.trim().is_empty() {
        problems.push("spec.check.query.expr is empty".to_owned());
    }
    if let Err(why) = prometheus_address(&check.query.url) {
        problems.push(format!("{URL_FIELD} {why}"));
    }
    problems
}

/// What is wrong with `target_ref` as a target's name, if anything. Without member clusters it
/// is a StatefulSet of the PhasedRollout's namespace (`web`); with them (`clusters`, the
/// controller's `controller.clusters`), a member, named as baton names members
/// (`cluster-b/web`): the cluster is one of `clusters` and the StatefulSet is in the groups'
/// namespace there. Every other form is refused, naming what is wrong: a name is the user's
/// to write, and routes the target's writes to a cluster.
pub fn target_name_problem(target_ref: &str, clusters: &[String]) -> Option<String> {
    const FIELD: &str = "spec.targetRef";
    let statefulset_name = |name: &str| -> Option<String> {
        (!crate::names::is_dns_subdomain(name)).then(|| {
            format!(
                "{FIELD} {target_ref:?}: {name:?} is not a StatefulSet name (lowercase letters, \
                 digits, '-' and '.')"
            )
        })
    };
    if target_ref.is_empty() {
        return Some(format!("{FIELD} is empty"));
    }
    let known = || clusters.join(", ");
    match (
        clusters.is_empty(),
        target_ref.split_once(crate::clusters::SEPARATOR),
    ) {
        (true, None) => statefulset_name(target_ref),
        (true, Some((cluster, _))) => Some(format!(
            "{FIELD} {target_ref:?} names the member cluster {cluster:?}, but this controller has \
             no member clusters (controller.clusters): name a StatefulSet of this namespace"
        )),
        (false, None) => Some(format!(
            "{FIELD} {target_ref:?} names no member cluster: with member clusters \
             (controller.clusters) a target is named cluster/statefulset, its cluster one of {}",
            known()
        )),
        (false, Some((cluster, name))) => {
            if !clusters.iter().any(|known| known == cluster) {
                return Some(format!(
                    "{FIELD} {target_ref:?} names the cluster {cluster:?}, which is not a member \
                     cluster of this controller (controller.clusters: {})",
                    known()
                ));
            }
            statefulset_name(name)
        }
    }
}

/// The Prometheus base URL of `url` as the phased rollout operator's users write it (`prom:9090`
/// or `http://prom:9090/prefix`).
pub fn prometheus_address(url: &str) -> Result<String, String> {
    let written = url.trim();
    if written.is_empty() {
        return Err("is empty".to_owned());
    }
    let address = if written.contains("://") {
        written.to_owned()
    } else {
        format!("http://{written}")
    };
    match url::Url::parse(&address) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => {
            Ok(address)
        }
        Ok(_) => Err(format!("{url:?} is not an http or https URL")),
        Err(error) => Err(format!("{url:?} is not a URL: {error}")),
    }
}

/// The `RolloutHealthCheck` spec baton makes of `spec`'s check. The query passes when it returns
/// samples (the phased rollout operator's rule); failures never halt, they only hold the next
/// step, as in that operator. `allowInsecureCredentials` is carried as written: the gate still
/// sends credentials only to an address the operator listed.
pub fn health_check_spec(
    spec: &PhasedRolloutSpec,
    credentials: Credentials,
) -> Result<serde_json::Value, String> {
    let check = &spec.check;
    let address = prometheus_address(&check.query.url)?;
    let mut prometheus = serde_json::json!({"address": address});
    if let Some(secret) = &check.query.secret_ref {
        match credentials {
            Credentials::Token => {
                prometheus["bearerTokenSecret"] =
                    serde_json::json!({"name": secret, "key": "token"});
            }
            Credentials::Basic => {
                prometheus["basicAuthSecret"] = serde_json::json!({"name": secret});
            }
            Credentials::None => {}
        }
    }
    if check.query.allow_insecure_credentials {
        prometheus["allowInsecureCredentials"] = serde_json::json!(true);
    }
    Ok(serde_json::json!({
        "prometheus": prometheus,
        "queries": [{"name": "query", "query": check.query.expr, "passWhen": "Samples"}],
        "initialDelay": format!("{}s", check.initial_delay_seconds.max(0)),
        "interval": format!("{}s", check.period_seconds.max(1)),
        "successThreshold": check.success_threshold.clamp(1, i64::from(u32::MAX)),
        "failureThreshold": u32::MAX,
    }))
}

/// The merge patch of the target StatefulSet for PhasedRollout `name`: while baton serves it
/// (`serving`), its group label and the annotations that roll it by partition through the
/// check; when it hands the target back (`standardRollingUpdate`, or the PhasedRollout is
/// deleted), those keys and baton's record of the partition removed, and with
/// `standardRollingUpdate` the partition set to 0 so that the StatefulSet controller rolls
/// every pod by itself.
pub fn target_patch(name: &str, serving: bool, standard: bool) -> serde_json::Value {
    let group = group_name(name);
    let mut patch = if serving {
        serde_json::json!({"metadata": {
            "labels": {ROLLOUT_GROUP_LABEL: group},
            "annotations": {UPDATE_BY_ANNOTATION: "partition", HEALTH_CHECK_ANNOTATION: group},
        }})
    } else {
        serde_json::json!({"metadata": {
            "labels": {ROLLOUT_GROUP_LABEL: null},
            "annotations": {
                UPDATE_BY_ANNOTATION: null,
                HEALTH_CHECK_ANNOTATION: null,
                PARTITION_ANNOTATION: null,
            },
        }})
    };
    if standard {
        patch["spec"] = serde_json::json!({"updateStrategy": {"rollingUpdate": {"partition": 0}}});
    }
    patch
}

/// Why PhasedRollout `name` cannot serve its target `target` (its labels and
/// `spec.updateStrategy.type` as read), if it cannot: a target of another rollout group is that
/// group's, and only a `RollingUpdate` StatefulSet has a partition to roll through.
pub fn target_problem(
    name: &str,
    target: &str,
    labels: &BTreeMap<String, String>,
    strategy: Option<&str>,
) -> Option<String> {
    if let Some(other) = labels.get(ROLLOUT_GROUP_LABEL)
        && *other != group_name(name)
    {
        return Some(format!(
            "StatefulSet {target} is in rollout group {other}: baton rolls it with that group, not with this PhasedRollout"
        ));
    }
    // Kubernetes defaults a missing type to RollingUpdate.
    let strategy = strategy.unwrap_or("RollingUpdate");
    (strategy != "RollingUpdate").then(|| {
        format!(
            "StatefulSet {target} uses {strategy}: a PhasedRollout rolls a RollingUpdate StatefulSet through its partition"
        )
    })
}

/// Whether `labels` and `annotations` already say what [`target_patch`] would while serving.
pub fn target_served(
    name: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> bool {
    let group = group_name(name);
    labels.get(ROLLOUT_GROUP_LABEL) == Some(&group)
        && annotations.get(UPDATE_BY_ANNOTATION).map(String::as_str) == Some("partition")
        && annotations.get(HEALTH_CHECK_ANNOTATION) == Some(&group)
}

/// `status`, so that `kubectl get phasedrollout -o yaml -w` follows the rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhasedRolloutStatus {
    /// `Updated`, `Rolling`, `Checking`, `Waiting`, `StandardRollingUpdate`, `TargetNotFound`
    /// or `Invalid`.
    pub phase: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_pod: Option<String>,
    pub consecutive_successes: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check: Option<LastCheck>,
    #[serde(default)]
    pub observed_generation: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastCheck {
    pub time: String,
    pub result: String,
}

impl PhasedRolloutStatus {
    /// The status with the last check `before` (the one served so far) when it has none of
    /// its own: the check's state goes with a finished rollout, and the last check it made is
    /// still shown until the next one, as the phased rollout operator shows it.
    pub fn keeping_last_check(mut self, before: Option<&serde_json::Value>) -> Self {
        if self.last_check.is_none() {
            self.last_check = before
                .and_then(|status| status.get("lastCheck").cloned())
                .and_then(|last| serde_json::from_value(last).ok());
        }
        self
    }

    /// A status that only says `phase` and why.
    pub fn says(phase: &str, message: impl Into<String>, generation: i64) -> Self {
        Self {
            phase: phase.to_owned(),
            message: message.into(),
            observed_generation: generation,
            ..Self::default()
        }
    }
}

/// The status of a PhasedRollout served by baton, from its target as last seen at `now`, the
/// check's stored state and the group's wait (`waiting`: its kind and words, if it waits).
///
/// `partition` is the target's partition as the StatefulSet controller applies it (0 while
/// unset), so every phase says where the rollout stands. The phase is `Rolling` while baton's
/// own replacement is in flight ([`rolling_pod`]); any other wait (a pod down below the
/// partition, say) is `Waiting`, or `Checking` when it is the check's.
pub fn status(
    target: &StatefulSetSnapshot,
    check: &CheckState,
    success_threshold: i64,
    waiting: Option<(&str, &str)>,
    generation: i64,
    now: Timestamp,
) -> PhasedRolloutStatus {
    let update = target.update_revision.clone();
    let outdated = target.pods.iter().any(|pod| pod.revision != update);
    let ready = target.ready_replicas == target.spec_replicas
        && target.pods.iter().all(|pod| pod.ready && !pod.terminating);
    let rolling = rolling_pod(target, now);
    let (phase, message) = if !outdated && ready {
        ("Updated", "every pod runs the update revision".to_owned())
    } else if let Some((pod, state)) = &rolling {
        (
            "Rolling",
            format!(
                "the StatefulSet controller is replacing {pod}, released by partition {}: {state}",
                target.partition
            ),
        )
    } else if let Some((_, why)) = waiting.filter(|(kind, _)| *kind == "HealthCheck") {
        ("Checking", why.to_owned())
    } else {
        let why = waiting.map_or("waiting for the pods to be ready", |(_, why)| why);
        ("Waiting", why.to_owned())
    };
    PhasedRolloutStatus {
        phase: phase.to_owned(),
        message,
        partition: Some(i32::try_from(target.partition).unwrap_or(i32::MAX)),
        update_revision: update,
        rolling_pod: rolling.map(|(pod, _)| pod),
        consecutive_successes: check.passes,
        last_check: check.last_run.as_ref().map(|time| LastCheck {
            time: time.clone(),
            result: check.last_outcome.clone().unwrap_or_default(),
        }),
        observed_generation: generation,
    }
    .with_threshold(success_threshold)
}

/// The pod the StatefulSet controller is replacing for baton, and its state in words: while a
/// rollout is in progress (the current revision is not the update revision yet), the
/// highest-index pod the partition released (index at least the partition, below the
/// replicas) that is not yet available at the update revision — still at the old one, going
/// away, not recreated yet, or recreated and not available yet. The highest, because the
/// StatefulSet controller replaces from the top. A pod down below the partition is not baton's
/// replacement, nor is one down once the rollout is complete: those are waits.
pub fn rolling_pod(target: &StatefulSetSnapshot, now: Timestamp) -> Option<(String, String)> {
    let update = target.update_revision.as_deref()?;
    if target.current_revision.as_deref() == Some(update) {
        return None;
    }
    (target.partition..target.spec_replicas)
        .rev()
        .find_map(|index| {
            let name = format!(
                "{}-{}",
                target.name,
                target.ordinals_start.checked_add(index)?
            );
            let Some(pod) = target.pods.iter().find(|pod| pod.name == name) else {
                return Some((name, "not created yet".to_owned()));
            };
            let state = if pod.terminating {
                "terminating".to_owned()
            } else if pod.revision.as_deref() != Some(update) {
                "still at the old revision".to_owned()
            } else {
                crate::rollout::unavailable(pod, target.min_ready_seconds, now)?.to_string()
            };
            Some((name, state))
        })
}

impl PhasedRolloutStatus {
    fn with_threshold(mut self, success_threshold: i64) -> Self {
        if self.phase == "Checking" {
            self.message = format!(
                "{} ({} of {success_threshold} successes in a row)",
                self.message, self.consecutive_successes
            );
        }
        self
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_last_check_served_stays_until_a_check_of_its_own() {
        let served = serde_json::json!({"phase": "Rolling", "lastCheck": {"time": "t1", "result": "passed"}});
        // Without a check state (the rollout finished), the last check served stays
        let settled =
            PhasedRolloutStatus::says("Updated", "done", 1).keeping_last_check(Some(&served));
        assert_eq!(
            settled.last_check,
            Some(LastCheck {
                time: "t1".to_owned(),
                result: "passed".to_owned()
            })
        );
        // A check of its own wins, and nothing served keeps nothing
        let mut own = PhasedRolloutStatus::says("Checking", "…", 1);
        own.last_check = Some(LastCheck {
            time: "t2".to_owned(),
            result: "failed".to_owned(),
        });
        assert_eq!(
            own.clone().keeping_last_check(Some(&served)).last_check,
            own.last_check
        );
        assert_eq!(
            PhasedRolloutStatus::says("Updated", "done", 1)
                .keeping_last_check(None)
                .last_check,
            None
        );
    }

    use super::*;
    use crate::testing::{now, zone};

    fn spec(url: &str) -> PhasedRolloutSpec {
        serde_json::from_value(serde_json::json!({
            "targetRef": "web",
            "standardRollingUpdate": false,
            "check": {
                "initialDelaySeconds": 30,
                "periodSeconds": 30,
                "successThreshold": 3,
                "query": {"expr": "up{}", "url": url, "secretRef": "prom-secret"},
            },
        }))
        .expect("the seed's example")
    }

    #[test]
    fn the_seeds_example_becomes_a_health_check_that_never_halts() {
        let check = health_check_spec(&spec("prom:9000/xx"), Credentials::Token).unwrap();
        assert_eq!(check["prometheus"]["address"], "http://prom:9000/xx");
        assert_eq!(check["prometheus"]["bearerTokenSecret"]["key"], "token");
        assert_eq!(check["queries"][0]["query"], "up{}");
        assert_eq!(check["queries"][0]["passWhen"], "Samples");
        assert_eq!(
            (
                &check["initialDelay"],
                &check["interval"],
                &check["successThreshold"]
            ),
            (
                &serde_json::json!("30s"),
                &serde_json::json!("30s"),
                &serde_json::json!(3)
            )
        );
        assert_eq!(check["failureThreshold"], u32::MAX);
        // It is a RolloutHealthCheck baton can use.
        let read: crate::gates::health_check::Spec = serde_json::from_value(check).unwrap();
        let policy = read.policy("phasedrollout-web").unwrap();
        assert_eq!(policy.success_threshold, 3);
        let basic = health_check_spec(&spec("https://prom"), Credentials::Basic).unwrap();
        assert_eq!(
            basic["prometheus"]["basicAuthSecret"]["name"],
            "prom-secret"
        );
        assert_eq!(basic["prometheus"]["address"], "https://prom");
        assert!(
            basic["prometheus"]
                .get("allowInsecureCredentials")
                .is_none()
        );
    }

    #[test]
    fn allowing_insecure_credentials_is_carried_to_the_generated_check() {
        // Given the seed's example on plain http, its author allowing the Secret over it
        let mut allowed = spec("prom:9000/xx");
        allowed.check.query.allow_insecure_credentials = true;
        // Then the check baton makes of it says so, and baton reads it as allowed
        let check = health_check_spec(&allowed, Credentials::Basic).unwrap();
        assert_eq!(check["prometheus"]["allowInsecureCredentials"], true);
        let read: crate::gates::health_check::Spec = serde_json::from_value(check).unwrap();
        let address = url::Url::parse(&read.prometheus.as_ref().unwrap().address).unwrap();
        let author = crate::gates::health_check::Author::PhasedRollout("sample".into());
        assert_eq!(
            read.prometheus
                .as_ref()
                .unwrap()
                .refuse_credentials(&address, true, None, &author),
            None
        );
        // And without it, the refusal names this field of this PhasedRollout
        let check = health_check_spec(&spec("prom:9000/xx"), Credentials::Basic).unwrap();
        let read: crate::gates::health_check::Spec = serde_json::from_value(check).unwrap();
        let refused = read
            .prometheus
            .as_ref()
            .unwrap()
            .refuse_credentials(&address, true, None, &author)
            .unwrap();
        assert!(
            refused.contains("spec.check.query.allowInsecureCredentials of PhasedRollout sample"),
            "{refused}"
        );
        // And it is still sent only to an address the operator listed
        assert!(
            read.prometheus
                .as_ref()
                .unwrap()
                .refuse_credentials(&address, false, None, &author)
                .is_some_and(|why| why.contains("gates.prometheus_addresses"))
        );
    }

    #[test]
    fn bad_values_are_named_by_field() {
        let mut bad = spec("ftp://prom");
        bad.target_ref.clear();
        bad.check.period_seconds = 0;
        bad.check.success_threshold = -1;
        bad.check.initial_delay_seconds = -5;
        bad.check.query.expr = " ".into();
        let found = problems(&bad, &[]);
        for field in [
            "spec.targetRef",
            "spec.check.periodSeconds",
            "spec.check.successThreshold",
            "spec.check.initialDelaySeconds",
            "spec.check.query.expr",
            "spec.check.query.url",
        ] {
            assert!(
                found.iter().any(|problem| problem.starts_with(field)),
                "{field} not named in {found:?}"
            );
        }
        assert!(problems(&spec("prom:9090"), &[]).is_empty());
    }

    #[test]
    fn a_target_is_a_statefulset_here_or_a_member_of_a_known_cluster_and_anything_else_is_named() {
        let members = ["cluster-a".to_owned(), "cluster-b".to_owned()];
        // Without member clusters: a StatefulSet of the namespace.
        assert_eq!(target_name_problem("web", &[]), None);
        // With them: a member of one of them.
        assert_eq!(target_name_problem("cluster-b/web", &members), None);
        for (target, clusters, says) in [
            ("", &members[..], "spec.targetRef is empty"),
            ("Web", &[][..], "\"Web\" is not a StatefulSet name"),
            (
                "cluster-b/web",
                &[][..],
                "names the member cluster \"cluster-b\", but this controller has no member clusters",
            ),
            (
                "web",
                &members[..],
                "names no member cluster: with member clusters (controller.clusters) a target is named cluster/statefulset, its cluster one of cluster-a, cluster-b",
            ),
            (
                "cluster-x/web",
                &members[..],
                "names the cluster \"cluster-x\", which is not a member cluster of this controller (controller.clusters: cluster-a, cluster-b)",
            ),
            (
                "cluster-b/a/web",
                &members[..],
                "\"a/web\" is not a StatefulSet name",
            ),
            ("cluster-b/", &members[..], "\"\" is not a StatefulSet name"),
        ] {
            let problem = target_name_problem(target, clusters)
                .unwrap_or_else(|| panic!("{target:?} with {clusters:?} is refused"));
            assert!(problem.starts_with("spec.targetRef"), "{problem}");
            assert!(problem.contains(says), "{target:?}: {problem}");
        }
    }

    #[test]
    fn secrets_give_a_token_or_basic_auth_or_nothing_usable() {
        assert_eq!(Credentials::of_keys(["token"]), Ok(Credentials::Token));
        assert_eq!(
            Credentials::of_keys(["username", "password"]),
            Ok(Credentials::Basic)
        );
        assert!(Credentials::of_keys(["username"]).is_err());
    }

    #[test]
    fn the_target_joins_its_own_group_and_is_handed_back_whole() {
        let served = target_patch("web", true, false);
        let labels: BTreeMap<String, String> =
            serde_json::from_value(served["metadata"]["labels"].clone()).unwrap();
        let annotations: BTreeMap<String, String> =
            serde_json::from_value(served["metadata"]["annotations"].clone()).unwrap();
        assert!(target_served("web", &labels, &annotations));
        assert!(!target_served("other", &labels, &annotations));
        let back = target_patch("web", false, true);
        assert!(back["metadata"]["labels"][ROLLOUT_GROUP_LABEL].is_null());
        assert!(back["metadata"]["annotations"][PARTITION_ANNOTATION].is_null());
        assert_eq!(
            back["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
            0
        );
    }

    #[test]
    fn a_target_of_another_group_or_not_rolling_update_is_refused_naming_why() {
        let none = BTreeMap::new();
        assert_eq!(target_problem("web", "web", &none, None), None);
        assert_eq!(
            target_problem("web", "web", &none, Some("RollingUpdate")),
            None
        );
        let ours = BTreeMap::from([(ROLLOUT_GROUP_LABEL.to_owned(), group_name("web"))]);
        assert_eq!(target_problem("web", "web", &ours, None), None);
        let other = BTreeMap::from([(ROLLOUT_GROUP_LABEL.to_owned(), "ingester".to_owned())]);
        let why = target_problem("web", "web", &other, None).unwrap();
        assert!(why.contains("rollout group ingester"), "{why}");
        let why = target_problem("web", "web", &none, Some("OnDelete")).unwrap();
        assert!(why.contains("uses OnDelete"), "{why}");
    }

    #[test]
    fn group_names_are_label_values_and_distinct() {
        assert_eq!(group_name("web"), "phasedrollout-web");
        let long_a = format!("{}-a", "x".repeat(100));
        let long_b = format!("{}-b", "x".repeat(100));
        assert!(group_name(&long_a).len() <= 63);
        assert_ne!(group_name(&long_a), group_name(&long_b));
    }

    fn checked_twice() -> CheckState {
        CheckState {
            passes: 2,
            last_run: Some("2026-11-25T10:00:00Z".into()),
            last_outcome: Some("pass".into()),
            ..CheckState::default()
        }
    }

    #[test]
    fn the_status_follows_the_rollout() {
        let check = checked_twice();
        let settled = zone("web", 5).by_partition(5).build();
        let updated = status(&settled, &check, 3, None, 7, now());
        assert_eq!(
            (updated.phase.as_str(), updated.observed_generation),
            ("Updated", 7)
        );
        // Partition 4: web-4 released and not yet replaced.
        let rolling = zone("web", 5).template_changed().by_partition(4).build();
        let seen = status(&rolling, &check, 3, None, 7, now());
        assert_eq!(seen.phase, "Rolling");
        assert_eq!(seen.rolling_pod.as_deref(), Some("web-4"));
        // web-4 replaced; the next step waits for the check.
        let checking = zone("web", 5)
            .template_changed()
            .by_partition(4)
            .updated(&[4])
            .build();
        let seen = status(
            &checking,
            &check,
            3,
            Some(("HealthCheck", "health check phasedrollout-web passes 2/3")),
            7,
            now(),
        );
        assert_eq!(seen.phase, "Checking");
        assert_eq!(seen.rolling_pod, None);
        assert!(seen.message.contains("2 of 3"), "{}", seen.message);
        assert_eq!(seen.consecutive_successes, 2);
        assert_eq!(seen.last_check.unwrap().result, "pass");
    }

    /// What the planner says while the StatefulSet controller brings web-3 back: it counts
    /// the pod against max-unavailable.
    const MAX_UNAVAILABLE: (&str, &str) = (
        "MaxUnavailable",
        "max-unavailable reached in web (1/1); waiting for web-3 (new revision) to become ready: Pending",
    );

    #[test]
    fn a_released_pod_is_rolling_through_its_whole_replacement() {
        // Given web-4 replaced and partition 3 releasing web-3
        let released = || {
            zone("web", 5)
                .template_changed()
                .by_partition(3)
                .updated(&[4])
        };
        let check = checked_twice();
        // When the StatefulSet controller takes web-3 down, recreates it, and it starts
        let stages = [
            ("terminating", released().terminating(&[3]).build()),
            ("not created yet", released().missing(&[3]).build()),
            (
                "Pending",
                released()
                    .updated(&[3])
                    .not_ready(&[3])
                    .phase(&[3], crate::rollout::PodPhase::Pending)
                    .build(),
            ),
            (
                "not ready",
                released().updated(&[3]).not_ready(&[3]).build(),
            ),
            (
                "Ready for less than minReadySeconds",
                released()
                    .updated(&[3])
                    .min_ready_seconds(30)
                    .ready_for(3, 5)
                    .build(),
            ),
        ];
        // Then each time the status says Rolling, naming web-3 and how far it is, even though
        // the planner waits on max-unavailable
        for (state, target) in stages {
            let seen = status(&target, &check, 3, Some(MAX_UNAVAILABLE), 7, now());
            assert_eq!(
                (seen.phase.as_str(), seen.rolling_pod.as_deref()),
                ("Rolling", Some("web-3")),
                "{state}: {seen:?}"
            );
            assert!(seen.message.ends_with(state), "{state}: {}", seen.message);
            assert!(seen.message.contains("partition 3"), "{}", seen.message);
            assert_eq!(seen.partition, Some(3));
        }
        // And once web-3 is available at the new revision, it is no longer rolling
        let replaced = released().updated(&[3]).build();
        let seen = status(
            &replaced,
            &check,
            3,
            Some(("HealthCheck", "health check phasedrollout-web passes 0/3")),
            7,
            now(),
        );
        assert_eq!((seen.phase.as_str(), seen.rolling_pod), ("Checking", None));
    }

    #[test]
    fn a_pod_down_that_baton_did_not_release_is_a_wait_not_a_rollout() {
        let check = CheckState::default();
        let not_ready = (
            "MaxUnavailable",
            "max-unavailable reached in web (1/1); waiting for web-0 to become ready: not ready",
        );
        // Given a rollout at partition 4, web-4 replaced, when web-0 (below it) goes down
        let below = zone("web", 5)
            .template_changed()
            .by_partition(4)
            .updated(&[4])
            .not_ready(&[0])
            .build();
        // And before baton released anything (held at the replicas)
        let held = zone("web", 5)
            .template_changed()
            .by_partition(5)
            .not_ready(&[0])
            .build();
        // And after the rollout completed (the update revision is current)
        let done = zone("web", 5)
            .template_changed()
            .all_updated()
            .current_revision(crate::testing::NEW)
            .by_partition(0)
            .not_ready(&[4])
            .build();
        // Then it is Waiting, with no rolling pod, saying the planner's words
        for (case, target) in [("below", below), ("held", held), ("done", done)] {
            let seen = status(&target, &check, 3, Some(not_ready), 7, now());
            assert_eq!(
                (seen.phase.as_str(), seen.rolling_pod.as_deref()),
                ("Waiting", None),
                "{case}"
            );
            assert_eq!(seen.message, not_ready.1, "{case}");
        }
    }

    #[test]
    fn every_phase_of_a_served_target_says_its_partition() {
        let check = CheckState::default();
        // Given a StatefulSet whose manifest left the partition unset, before baton held it:
        // the StatefulSet controller applies 0
        let unset = zone("web", 5).by_partition(0).build();
        let seen = status(&unset, &check, 3, None, 1, now());
        assert_eq!((seen.phase.as_str(), seen.partition), ("Updated", Some(0)));
        // And while waiting, checking and rolling
        let waiting = zone("web", 5).by_partition(5).not_ready(&[1]).build();
        let checking = zone("web", 5)
            .template_changed()
            .by_partition(4)
            .updated(&[4])
            .build();
        let rolling = zone("web", 5).template_changed().by_partition(4).build();
        for (target, wait, partition) in [
            (waiting, None, 5),
            (checking, Some(("HealthCheck", "health check")), 4),
            (rolling, None, 4),
        ] {
            let seen = status(&target, &check, 3, wait, 1, now());
            assert_eq!(seen.partition, Some(partition), "{seen:?}");
        }
    }

    /// The spec schema of deploy/crds/phased-rollout.yaml, as users install it.
    fn crd_spec_schema() -> serde_json::Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/crds/phased-rollout.yaml"
        );
        let text = std::fs::read_to_string(path).expect("the PhasedRollout CRD");
        let crd: serde_json::Value = serde_saphyr::from_str(&text).expect("a YAML CRD");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
    }

    /// Every property path of a schema (`check.query.url`), each with whether it is required.
    fn schema_fields(schema: &serde_json::Value, prefix: &str, into: &mut Vec<(String, bool)>) {
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .collect();
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            let path = format!("{prefix}{name}");
            into.push((path.clone(), required.contains(&name.as_str())));
            schema_fields(property, &format!("{path}."), into);
        }
    }

    fn value_fields(value: &serde_json::Value, prefix: &str, into: &mut Vec<String>) {
        for (name, field) in value.as_object().into_iter().flatten() {
            let path = format!("{prefix}{name}");
            into.push(path.clone());
            value_fields(field, &format!("{path}."), into);
        }
    }

    fn without(value: &serde_json::Value, path: &str) -> serde_json::Value {
        let mut value = value.clone();
        let (parent, name) = path.rsplit_once('.').unwrap_or(("", path));
        let object = parent
            .split('.')
            .filter(|part| !part.is_empty())
            .fold(&mut value, |value, part| &mut value[part]);
        object.as_object_mut().expect("an object").remove(name);
        value
    }

    #[test]
    fn the_crd_schema_and_the_spec_type_name_the_same_fields_and_require_the_same() {
        // Given every field of the type set (a new field fails to build here until added)
        let full = PhasedRolloutSpec {
            target_ref: "web".into(),
            standard_rolling_update: true,
            check: Check {
                initial_delay_seconds: 30,
                period_seconds: 30,
                success_threshold: 3,
                query: Query {
                    expr: "up{}".into(),
                    url: "prom:9000/xx".into(),
                    secret_ref: Some("prom-secret".into()),
                    allow_insecure_credentials: true,
                },
            },
        };
        let written = serde_json::to_value(&full).unwrap();
        let mut typed = Vec::new();
        value_fields(&written, "", &mut typed);
        let mut schema = Vec::new();
        schema_fields(&crd_spec_schema(), "", &mut schema);
        // Then the schema has exactly the type's fields
        let mut named: Vec<String> = schema.iter().map(|(path, _)| path.clone()).collect();
        named.sort();
        typed.sort();
        assert_eq!(
            named, typed,
            "deploy/crds/phased-rollout.yaml and PhasedRolloutSpec"
        );
        // And a field the schema requires is one the type cannot do without, and the other way
        for (path, required) in schema {
            let read = serde_json::from_value::<PhasedRolloutSpec>(without(&written, &path));
            assert_eq!(
                read.is_err(),
                required,
                "{path}: required by the schema: {required}"
            );
        }
    }
}
