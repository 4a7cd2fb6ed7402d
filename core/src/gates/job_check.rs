//! A health check whose verdict is a Kubernetes Job's (`spec.job` of a `RolloutHealthCheck`):
//! for every step of a rollout, baton creates one Job from the check's template in the check's
//! namespace, and takes its success or failure as the check's result. What a smoke test, a
//! load test or a query no Prometheus answers can tell, as one more result source of the same
//! check: the same policy, thresholds and `onFailure`.
//!
//! Pure: the spec's validation (errors name the field), the Job made for a step (its name,
//! labels, owner, the environment it sees, its deadline) and the verdict on the Job as read.
//! The controller reads the Job, creates it when it is missing (a write: only while its replica
//! leads) and hands what it read here (`gates::job`).
//!
//! Why one Job per step, named after the group, the zone, the revision and the step (the last
//! step's time, stored in the group's check state on every member), and the check's
//! generation: a run every `interval`
//! reads the Job of the step it gates, so a new leader finds the Job its predecessor made
//! instead of making a second, and a Job made for an earlier step or an earlier revision is
//! never read for a later one. The Job is created only once `initialDelay` has passed since
//! the step (what it tests has had time to settle), and never in the pass that makes a step.
//!
//! What a Job's status means:
//! - `Complete` → a pass; `Failed` → a failure, with the Job's reason and message;
//! - `Failed` for its deadline (`DeadlineExceeded`), or still running past its deadline →
//!   inconclusive, naming the deadline: a Job that never ends is never a pass, and not a
//!   verdict on the version either (it may as well be stuck on the cluster);
//! - running → inconclusive (no verdict yet: a run resets the passes, counts towards nothing);
//! - a Job that cannot be created (a quota, RBAC, a template the API server refuses) →
//!   inconclusive naming why, never a pass;
//! - a Job of that name baton did not make for this check (not owned by it) → inconclusive:
//!   whoever may create Jobs in the namespace cannot answer for the check.
//!
//! The Job runs in the namespace of the group, with that namespace's permissions and its
//! service accounts: what it runs (privileged pods, host paths, the host network) is the
//! namespace's own business, under that namespace's admission rules. baton checks only what it
//! needs to name, own and judge the Job (docs/security.md).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{Job, JobSpec as KubeJobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;

use super::checks::CheckOutcome;
use crate::duration::go as go_duration;
use crate::ledger::MANAGED_BY_LABEL;

/// `spec.job`: the Job every step gets, and how long baton waits for it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// What a CronJob's `jobTemplate` is: the Job's labels and annotations, and its spec.
    pub template: JobTemplateSpec,
    /// How long after it started a Job may run before its result is inconclusive (Go
    /// duration). Default 10m. Also the Job's `activeDeadlineSeconds` (or the template's, if
    /// shorter), so Kubernetes stops a Job that never ends.
    #[serde(default)]
    pub deadline: Option<String>,
}

/// The label naming the check a Job was made for.
pub const CHECK_LABEL: &str = "baton.dev/health-check";
/// The label naming the group a Job was made for.
pub const GROUP_LABEL: &str = "baton.dev/group";
/// The label naming the zone (its StatefulSet) a Job was made for.
pub const ZONE_LABEL: &str = "baton.dev/zone";
/// The annotation saying which step (the last step's time, or `first`) a Job gates.
pub const STEP_ANNOTATION: &str = "baton.dev/step";
/// The annotation saying which update revision a Job was made for.
pub const REVISION_ANNOTATION: &str = "baton.dev/revision";

/// The variables every container of the Job sees (set by baton, over any of the same name in
/// the template).
pub const ENV_GROUP: &str = "BATON_GROUP";
pub const ENV_NAMESPACE: &str = "BATON_NAMESPACE";
pub const ENV_ZONE: &str = "BATON_ZONE";
pub const ENV_STATEFULSET: &str = "BATON_STATEFULSET";
pub const ENV_UPDATE_REVISION: &str = "BATON_UPDATE_REVISION";
pub const ENV_BASELINE_REVISION: &str = "BATON_BASELINE_REVISION";
pub const ENV_CHECK: &str = "BATON_CHECK";

const DEFAULT_DEADLINE: SignedDuration = SignedDuration::from_secs(600);
/// How long a finished Job stays when the template does not say: a day, so a Job that held or
/// halted a step is there to read while people look (and, as long as it is, a resumed group
/// reads the same verdict: delete the Job to run it again).
const DEFAULT_TTL_SECONDS: i32 = 86_400;
/// The longest part of a Job's own message a result shows.
const MAX_SHOWN_CHARS: usize = 160;

impl JobSpec {
    /// How long a Job may run, or what is wrong with `spec.job.deadline`.
    pub fn deadline(&self) -> Result<SignedDuration, String> {
        match &self.deadline {
            None => Ok(DEFAULT_DEADLINE),
            Some(raw) => match go_duration::parse(raw) {
                Ok(nanos) if nanos >= 1_000_000_000 => Ok(SignedDuration::from_nanos(nanos)),
                _ => Err(format!(
                    "deadline {raw:?} is not a duration of at least 1s such as 5m"
                )),
            },
        }
    }

    /// What is wrong with the spec, relative to `spec.job.`, if anything: only what baton
    /// needs to name, own and judge the Job. The rest is the API server's to refuse when the
    /// Job is created (then the run is inconclusive, naming why).
    pub fn problem(&self) -> Option<String> {
        if let Err(why) = self.deadline() {
            return Some(why);
        }
        if let Some(metadata) = &self.template.metadata {
            for (field, set) in [
                ("name", metadata.name.is_some()),
                ("generateName", metadata.generate_name.is_some()),
                ("namespace", metadata.namespace.is_some()),
                ("ownerReferences", metadata.owner_references.is_some()),
            ] {
                if set {
                    return Some(format!(
                        "template.metadata.{field} is baton's to set (the Job is named after the \
                         group, zone and step, in the check's namespace, owned by the check); \
                         leave it out"
                    ));
                }
            }
        }
        let Some(job) = &self.template.spec else {
            return Some("template.spec is needed (the Job's spec, with its pod template)".into());
        };
        if job.suspend == Some(true) {
            return Some("template.spec.suspend: a suspended Job never runs".into());
        }
        let Some(pod) = &job.template.spec else {
            return Some("template.spec.template.spec is needed (the Job's pods)".into());
        };
        if pod.containers.is_empty() {
            return Some("template.spec.template.spec.containers is empty".into());
        }
        match pod.restart_policy.as_deref() {
            None | Some("Never" | "OnFailure") => None,
            Some(other) => Some(format!(
                "template.spec.template.spec.restartPolicy {other:?} is not one of Never, \
                 OnFailure (a Job's pods end)"
            )),
        }
    }
}

/// What a Job is made for: the check, the group and its zone now, and the step it gates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    pub check: &'a str,
    /// The check's uid: the Job's owner.
    pub check_uid: &'a str,
    /// The check's generation: a Job made for an earlier spec is not read for a later one.
    pub generation: i64,
    /// The variables of [`super::health_check::variables`]: group, namespace, zone,
    /// revision, baseline_revision.
    pub variables: &'a BTreeMap<&'a str, &'a str>,
    /// The last step's time (RFC 3339), `None` before the first.
    pub step: Option<&'a str>,
}

impl Target<'_> {
    fn variable(&self, name: &str) -> &str {
        self.variables.get(name).copied().unwrap_or_default()
    }

    fn step(&self) -> &str {
        self.step.unwrap_or("first")
    }

    /// The Job's name: `<group>-<statefulset>-<hash>`, a DNS label of at most 63 characters;
    /// the hash (FNV-1a, stable across builds: replicas of two versions must agree) covers the
    /// check and its generation, group, zone, revision and step, so the name is the same for
    /// every replica that reads the same state, and differs for every step (and every change
    /// of the check).
    pub fn job_name(&self) -> String {
        let zone = self.variable("zone");
        let (_, statefulset) = crate::clusters::split(zone);
        let readable = dns_label_part(&format!("{}-{statefulset}", self.variable("group")), 52);
        let generation = self.generation.to_string();
        let hash = fnv1a(&[
            self.check,
            &generation,
            self.variable("group"),
            zone,
            self.variable("revision"),
            self.step(),
        ]);
        if readable.is_empty() {
            format!("check-{hash:010x}")
        } else {
            format!("{readable}-{hash:010x}")
        }
    }

    /// The Job to create for the step, from `spec`'s template: named, labelled, owned by the
    /// check (garbage-collected with it, in the check's namespace, where the Job is; a member
    /// StatefulSet may be in another cluster), with baton's variables in every container and
    /// init container, its deadline as `activeDeadlineSeconds` (the template's if shorter), a
    /// time to live once finished, and no retries beyond the template's `backoffLimit`.
    pub fn job(&self, spec: &JobSpec) -> Job {
        let deadline = spec.deadline().unwrap_or(DEFAULT_DEADLINE).as_secs().max(1);
        let template = &spec.template;
        let mut metadata = template.metadata.clone().unwrap_or_default();
        let zone = self.variable("zone");
        let labels = metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(MANAGED_BY_LABEL.to_owned(), "baton".to_owned());
        labels.insert(CHECK_LABEL.to_owned(), label_value(self.check));
        labels.insert(GROUP_LABEL.to_owned(), label_value(self.variable("group")));
        labels.insert(ZONE_LABEL.to_owned(), label_value(zone));
        let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(STEP_ANNOTATION.to_owned(), self.step().to_owned());
        annotations.insert(
            REVISION_ANNOTATION.to_owned(),
            self.variable("revision").to_owned(),
        );
        metadata.name = Some(self.job_name());
        metadata.owner_references = Some(vec![OwnerReference {
            api_version: format!(
                "{}/{}",
                super::health_check::GROUP,
                super::health_check::VERSION
            ),
            kind: super::health_check::KIND.to_owned(),
            name: self.check.to_owned(),
            uid: self.check_uid.to_owned(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        let mut job: KubeJobSpec = template.spec.clone().unwrap_or_default();
        job.active_deadline_seconds = Some(
            job.active_deadline_seconds
                .map_or(deadline, |own| own.min(deadline)),
        );
        job.ttl_seconds_after_finished
            .get_or_insert(DEFAULT_TTL_SECONDS);
        let pod = job.template.spec.get_or_insert_with(PodSpec::default);
        pod.restart_policy.get_or_insert_with(|| "Never".to_owned());
        let env = self.env();
        for container in pod
            .containers
            .iter_mut()
            .chain(pod.init_containers.iter_mut().flatten())
        {
            set_env(container, &env);
        }
        Job {
            metadata: ObjectMeta {
                namespace: None,
                ..metadata
            },
            spec: Some(job),
            status: None,
        }
    }

    /// The variables every container sees: the group, its namespace, the zone (as baton names
    /// the member: `cluster/name` for a member of another cluster) and its StatefulSet's own
    /// name, the update revision and the baseline (empty once nothing in the zone differs), and
    /// the check.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let zone = self.variable("zone");
        let (_, statefulset) = crate::clusters::split(zone);
        vec![
            (ENV_GROUP, self.variable("group").to_owned()),
            (ENV_NAMESPACE, self.variable("namespace").to_owned()),
            (ENV_ZONE, zone.to_owned()),
            (ENV_STATEFULSET, statefulset.to_owned()),
            (ENV_UPDATE_REVISION, self.variable("revision").to_owned()),
            (
                ENV_BASELINE_REVISION,
                self.variable("baseline_revision").to_owned(),
            ),
            (ENV_CHECK, self.check.to_owned()),
        ]
    }
}

fn set_env(container: &mut Container, env: &[(&'static str, String)]) {
    let vars = container.env.get_or_insert_with(Vec::new);
    vars.retain(|var| !env.iter().any(|(name, _)| var.name == *name));
    vars.extend(env.iter().map(|(name, value)| EnvVar {
        name: (*name).to_owned(),
        value: Some(value.clone()),
        value_from: None,
    }));
}

/// A run of a Job check: the Job for the step, how long it may run, and from when it may be
/// created (`initialDelay` after the last step).
#[derive(Debug, Clone, PartialEq)]
pub struct JobRun {
    pub job: Job,
    pub deadline: SignedDuration,
    pub create_from: Option<Timestamp>,
}

impl JobRun {
    /// The Job's name.
    pub fn name(&self) -> &str {
        self.job.metadata.name.as_deref().unwrap_or_default()
    }

    /// What a run does when the Job is missing at `now`: create it, or wait (inconclusive)
    /// until `initialDelay` has passed since the step.
    pub fn missing(&self, now: Timestamp) -> Result<(), CheckOutcome> {
        match self.create_from {
            Some(from) if now < from => Err(CheckOutcome::Inconclusive {
                why: format!(
                    "Job {} is created from {from} on (initialDelay after the last step)",
                    self.name()
                ),
            }),
            _ => Ok(()),
        }
    }

    /// What a passing run saw, for the stored last outcome.
    pub fn seen(&self) -> String {
        format!("Job {} complete", self.name())
    }

    /// The run's result once the Job was just created: none yet.
    pub fn created(&self) -> CheckOutcome {
        CheckOutcome::Inconclusive {
            why: format!(
                "Job {} was created; its result is read by the next run",
                self.name()
            ),
        }
    }

    /// The run's result when the Job could not be created (`why`: the API server's answer,
    /// a timeout, a lost leadership): inconclusive, never a pass.
    pub fn not_created(&self, why: &str) -> CheckOutcome {
        CheckOutcome::Inconclusive {
            why: format!("Job {} could not be created: {}", self.name(), shorten(why)),
        }
    }

    /// The verdict on `job` as read at `now` (module header); `check_uid` is the check's, which
    /// must own it.
    pub fn verdict(&self, job: &Job, check_uid: &str, now: Timestamp) -> CheckOutcome {
        let name = self.name();
        let inconclusive = |why: String| CheckOutcome::Inconclusive {
            why: format!("Job {name} {why}"),
        };
        let owned = job
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|owner| owner.uid == check_uid && owner.controller == Some(true));
        if !owned {
            return inconclusive(
                "exists but is not the one baton made for this check (the check does not own \
                 it): its result is not taken"
                    .to_owned(),
            );
        }
        let deadline = format!("{:#}", self.deadline);
        let status = job.status.clone().unwrap_or_default();
        let condition = |kind: &str| {
            status
                .conditions
                .iter()
                .flatten()
                .find(|condition| condition.type_ == kind && condition.status == "True")
        };
        if condition("Complete").is_some() {
            return CheckOutcome::Pass;
        }
        if let Some(failed) = condition("Failed") {
            let reason = failed.reason.as_deref().unwrap_or("Failed");
            let message = failed.message.as_deref().unwrap_or_default();
            if reason == "DeadlineExceeded" {
                return inconclusive(format!(
                    "did not finish within its deadline ({deadline}): never taken as a pass"
                ));
            }
            return CheckOutcome::Fail {
                query: format!("Job {name}"),
                value: if message.is_empty() {
                    format!("failed ({reason})")
                } else {
                    format!("failed ({reason}): {}", shorten(message))
                },
            };
        }
        let started = status.start_time.map(|time| time.0).or(job
            .metadata
            .creation_timestamp
            .clone()
            .map(|time| time.0));
        match started {
            Some(started)
                if started
                    .saturating_add(self.deadline)
                    .unwrap_or(Timestamp::MAX)
                    <= now =>
            {
                inconclusive(format!(
                    "has not finished within its deadline ({deadline}, since {started}): never \
                     taken as a pass"
                ))
            }
            Some(started) => {
                inconclusive(format!("is running (since {started}; deadline {deadline})"))
            }
            None => inconclusive(format!("has not started (deadline {deadline})")),
        }
    }
}

/// `raw` as part of a DNS label: lowercase letters, digits and '-', at most `max` characters,
/// starting and ending with a letter or digit (empty when nothing is left).
fn dns_label_part(raw: &str, max: usize) -> String {
    let cleaned: String = raw
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(max)
        .collect();
    cleaned.trim_matches('-').to_owned()
}

/// `raw` as a label value: at most 63 characters of letters, digits, '-', '_' and '.', starting
/// and ending with a letter or digit; a value that had to change keeps a hash of the original,
/// so two values never read the same.
fn label_value(raw: &str) -> String {
    let valid = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    let fits = raw.len() <= 63
        && raw.chars().all(valid)
        && raw.starts_with(|c: char| c.is_ascii_alphanumeric())
        && raw.ends_with(|c: char| c.is_ascii_alphanumeric());
    if fits || raw.is_empty() {
        return raw.to_owned();
    }
    let cleaned: String = raw
        .chars()
        .map(|c| if valid(c) { c } else { '-' })
        .take(52)
        .collect();
    let cleaned = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let hash = fnv1a(&[raw]);
    if cleaned.is_empty() {
        format!("{hash:010x}")
    } else {
        format!("{cleaned}-{hash:010x}")
    }
}

/// FNV-1a (64-bit) over `parts`, each followed by a 0 byte so ("ab", "c") and ("a", "bc")
/// differ; the low 40 bits (ten hex digits).
fn fnv1a(parts: &[&str]) -> u64 {
    let hash = parts
        .iter()
        .flat_map(|part| part.bytes().chain([0]))
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    hash & 0xff_ffff_ffff
}

fn shorten(text: &str) -> String {
    super::redact::shorten(text, MAX_SHOWN_CHARS)
}

#[cfg(test)]
mod tests;
