//! baton's own annotations for gates, and their parsing.
//!
//! One prefix, `baton.dev/`, for every key baton owns (the keys shared with the Go operator
//! keep theirs; see `crate::annotations`). Any member of a group may carry a gate key:
//! a group is one rollout, so its gates are the group's.
//!
//! A bad value **holds the group** (no deletion anywhere) until it is fixed, with a Warning
//! naming key, value and StatefulSet. Why not roll as if the key were absent: whoever wrote
//! `baton.dev/soak: 10 minutes` asked for a soak; rolling every zone without one is the very
//! outcome the key exists to prevent, and it cannot be undone. Holding costs time only, and
//! fixing the annotation resumes the rollout by itself (no person needs to resume it).

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;

use crate::explained::Explained;

use crate::annotations::InvalidAnnotation;
use crate::annotations::group::{
    Combined, GroupKey, larger_is_safer, named_is_safer, smaller_is_safer,
};
use crate::duration::go as go_duration;
use jiff::{SignedDuration, Timestamp};

use crate::rollout::{GroupSnapshot, StatefulSetSnapshot};

/// Annotation: how long to wait after a zone is fully updated and available before the next
/// zone starts (Go duration syntax: `30s`, `5m`, `1h30m`; `0` for none).
pub const SOAK_ANNOTATION: &str = "baton.dev/soak";
/// Annotation: the group is halted; no pod of any member is deleted while any member carries
/// it. baton sets it (the value says why); a person removes it to resume.
pub const HALTED_ANNOTATION: &str = "baton.dev/halted";
/// Annotation written by baton only: the gate state of one zone (JSON, see
/// [`super::ZoneState`]). Its two siblings below are guarded the same way: the webhook lets
/// only baton's controller set them (`crate::annotations::STATE_ANNOTATIONS`).
pub use crate::annotations::GATE_STATE_ANNOTATION as STATE_ANNOTATION;

/// Annotation: the name of the `RolloutHealthCheck` (same namespace) that gates every step.
pub const HEALTH_CHECK_ANNOTATION: &str = "baton.dev/health-check";
/// Annotation written by baton only, on the group's first member: the health check's counts
/// (JSON, see [`super::checks::CheckState`]).
pub use crate::annotations::CHECK_STATE_ANNOTATION;
/// What [`HEALTH_CHECK_ANNOTATION`] accepts.
pub const HEALTH_CHECK_ACCEPTED: &str =
    "the name of a RolloutHealthCheck: lower-case letters, digits, '-' and '.'";

/// Annotation: the URL baton POSTs to before each zone starts and after it completes.
pub const HOOK_ANNOTATION: &str = "baton.dev/hook";
/// Annotation written by baton only: the state of a zone's hooks (JSON, see
/// [`super::hooks::ZoneHooks`]).
pub use crate::annotations::HOOK_STATE_ANNOTATION;
/// What [`HOOK_ANNOTATION`] accepts.
pub const HOOK_ACCEPTED: &str = "an http:// or https:// URL";
pub use crate::annotations::group::{AGREEING_ACCEPTED, EVERY_MEMBER_ACCEPTED};

/// Annotation: `exponential` ramps each zone in steps of 1, 2, 4, … pods (capped by
/// max-unavailable), each step gated; `none` (or absent) does not.
pub const RAMP_ANNOTATION: &str = "baton.dev/ramp";
/// What [`RAMP_ANNOTATION`] accepts.
pub const RAMP_ACCEPTED: &str = "exponential, or none";

/// Annotation: the steps each zone rolls in, as cumulative sizes (`1, 10%, 50%, 100%`: pods or
/// percentages of the zone's replicas) or a count of equal batches (`4`). Each batch goes
/// whole once the zone is available again, and is a gate step. Exclusive with
/// [`RAMP_ANNOTATION`].
pub const BATCHES_ANNOTATION: &str = "baton.dev/batches";
/// What [`BATCHES_ANNOTATION`] accepts.
pub const BATCHES_ACCEPTED: &str = "cumulative sizes such as \"1, 10%, 50%, 100%\" (pods or \
     percentages of the zone, not decreasing) or a count of equal batches such as \"4\"";
/// What a group carrying both [`BATCHES_ANNOTATION`] and an exponential ramp is told.
pub const BATCHES_OR_RAMP: &str = "either baton.dev/batches or baton.dev/ramp, not both";

/// Annotation: which steps wait for a person's approval: `canary` (every step after the
/// rollout's first), `zone` (each zone's first step), `batch` (every step), or a
/// comma-separated list of them.
pub const APPROVAL_ANNOTATION: &str = "baton.dev/approval";
/// What [`APPROVAL_ANNOTATION`] accepts.
pub const APPROVAL_ACCEPTED: &str = "canary, zone or batch, or a comma-separated list of them";
/// Annotation written by a person (`kubectl baton approve`): the step approved, as the gate
/// names it ([`super::approval`]). An approval names the zone, its revision and the step, so
/// it never lets another step or a later revision go.
pub const APPROVED_ANNOTATION: &str = "baton.dev/approved";
/// Annotation written by `kubectl baton approve` beside [`APPROVED_ANNOTATION`]: who approved,
/// as the API server authenticated them. For people reading the group; the gate reads only the
/// approval.
pub const APPROVED_BY_ANNOTATION: &str = "baton.dev/approved-by";

/// Annotation: a request to roll the group back (on every member; the value says who and why).
/// Set by `kubectl baton rollback`, by a person, or by a health check with `onFailure:
/// Rollback`; removed by baton once the rollback started.
pub const ROLLBACK_ANNOTATION: &str = "baton.dev/rollback";
/// Annotation: `true` rolls the group back ([`super::rollback`]) where a gate would halt it: a
/// health check's failures (whatever its `onFailure` says, but `Warn`) and a hook failing past
/// its attempts. `false` (or absent): they halt.
pub const ROLLBACK_ON_FAILURE_ANNOTATION: &str = "baton.dev/rollback-on-failure";
/// What [`ROLLBACK_ON_FAILURE_ANNOTATION`] accepts.
pub const ROLLBACK_ON_FAILURE_ACCEPTED: &str = "true or false";

/// Annotation: until this time (RFC 3339, e.g. `2026-11-25T18:00:00Z`), steps go without
/// waiting for the soak or the health check (never past the availability guarantees, a halt,
/// an approval, hooks, batches or the ramp); each step that did is told in an Event. An
/// expired or unreadable value bypasses nothing.
pub const BYPASS_ANNOTATION: &str = "baton.dev/bypass-gates-until";
/// What [`BYPASS_ANNOTATION`] accepts.
pub const BYPASS_ACCEPTED: &str = "an RFC 3339 time such as 2026-11-25T18:00:00Z";

/// What [`SOAK_ANNOTATION`] accepts, as told to the person who wrote something else.
pub const SOAK_ACCEPTED: &str = "a duration such as 30s, 5m or 1h30m (0 for no soak)";
/// What baton does while a gate key is invalid.
pub const HOLDING: &str = "holding the group until it is fixed";

/// The group's gates, read from its members' annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateConfig {
    /// The soak between zones; `None` without one (or `0`).
    pub soak: Option<SignedDuration>,
    /// The hook URL named by a member (the first one, by member order).
    pub hook: Option<String>,
    /// Some member asks for an exponential ramp inside each zone.
    pub ramp: bool,
    /// The batches each zone rolls in, if a member names them.
    pub batches: Option<Batches>,
    /// Which steps wait for a person's approval.
    pub approval: Approval,
    /// Steps bypass the soak and the health check until then (the earliest a member names),
    /// when every member carries a bypass.
    pub bypass_until: Option<Timestamp>,
    /// A failing check or hook rolls the group back instead of halting it: every member says
    /// `true`.
    pub rollback_on_failure: bool,
    /// The `RolloutHealthCheck` named by a member (the first one, by member order).
    pub health_check: Option<String>,
    /// Some member carries a gate key (valid or not): the gate keeps its state.
    pub enabled: bool,
    /// The first invalid gate key, if any: the group is held (module header).
    pub invalid: Option<InvalidKey>,
}

/// A gate key whose value could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidKey {
    pub statefulset: String,
    pub key: &'static str,
    pub value: String,
    /// What the key accepts.
    pub accepted: &'static str,
}

/// Something a person should fix about the gates; each becomes a Warning Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateWarning {
    /// A gate key with a value baton cannot read (the group is held meanwhile).
    InvalidAnnotation {
        statefulset: String,
        problem: InvalidAnnotation,
    },
    /// Members disagree on the soak: the longest is used.
    ConflictingSoak {
        /// (StatefulSet, value as written), in member order.
        values: Vec<(String, String)>,
        used: String,
    },
    /// The `RolloutHealthCheck` a member names cannot be read or used: every step waits
    /// (the check is inconclusive) until it is fixed.
    UnusableHealthCheck { statefulset: String, why: String },
    /// baton's own state annotation could not be read: the zone's state starts afresh (a
    /// soak restarts from zero, a cleared zone is gated again — never the other way round).
    UnreadableState {
        statefulset: String,
        value: String,
        error: String,
    },
}

impl Explained for GateWarning {
    fn kind(&self) -> &'static str {
        match self {
            Self::InvalidAnnotation { .. } => "InvalidAnnotation",
            Self::ConflictingSoak { .. } => "ConflictingSoak",
            Self::UnreadableState { .. } => "UnreadableGateState",
            Self::UnusableHealthCheck { .. } => "UnusableHealthCheck",
        }
    }

    /// The StatefulSet the Event is about.
    fn statefulset(&self) -> Option<&str> {
        match self {
            Self::InvalidAnnotation { statefulset, .. }
            | Self::UnreadableState { statefulset, .. }
            | Self::UnusableHealthCheck { statefulset, .. } => Some(statefulset),
            Self::ConflictingSoak { values, .. } => values.first().map(|(name, _)| name.as_str()),
        }
    }
}

impl fmt::Display for GateWarning {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidAnnotation {
                statefulset,
                problem,
            } => write!(formatter, "StatefulSet {statefulset}: {problem}"),
            Self::ConflictingSoak { values, used } => {
                let listed: Vec<String> = values
                    .iter()
                    .map(|(name, value)| format!("{name}={value:?}"))
                    .collect();
                write!(
                    formatter,
                    "members disagree on {SOAK_ANNOTATION} ({}); using the longest, {used}",
                    listed.join(", ")
                )
            }
            Self::UnusableHealthCheck { statefulset, why } => write!(
                formatter,
                "StatefulSet {statefulset}: {HEALTH_CHECK_ANNOTATION}: {why}; every step waits \
                 until it is fixed"
            ),
            Self::UnreadableState {
                statefulset,
                value,
                error,
            } => write!(
                formatter,
                "StatefulSet {statefulset}: annotation {STATE_ANNOTATION} has the unreadable \
                 value {value:?} ({error}); the zone's gate starts afresh"
            ),
        }
    }
}

/// `baton.dev/soak`: the longest wins; a member without one does not shorten it.
pub const SOAK: GroupKey<SignedDuration> = GroupKey {
    key: SOAK_ANNOTATION,
    absent: SignedDuration::ZERO,
    safer: larger_is_safer,
};
/// `baton.dev/ramp`: any member ramps (`true`: exponential).
pub const RAMP: GroupKey<bool> = GroupKey {
    key: RAMP_ANNOTATION,
    absent: false,
    safer: larger_is_safer,
};
/// `baton.dev/health-check`: any member names one; members naming different ones hold.
pub const HEALTH_CHECK: GroupKey<Option<String>> = GroupKey {
    key: HEALTH_CHECK_ANNOTATION,
    absent: None,
    safer: named_is_safer,
};
/// `baton.dev/hook`: any member names one; members naming different ones hold.
pub const HOOK: GroupKey<Option<String>> = GroupKey {
    key: HOOK_ANNOTATION,
    absent: None,
    safer: named_is_safer,
};
/// `baton.dev/batches`: any member names them; members naming different ones hold.
pub const BATCHES: GroupKey<Option<Batches>> = GroupKey {
    key: BATCHES_ANNOTATION,
    absent: None,
    safer: named_is_safer,
};
/// `baton.dev/approval`: any member names the steps that wait; members naming different ones
/// hold.
pub const APPROVAL: GroupKey<Option<Approval>> = GroupKey {
    key: APPROVAL_ANNOTATION,
    absent: None,
    safer: named_is_safer,
};
/// `baton.dev/rollback-on-failure`: `true` only when every member says so (absent: halt).
pub const ROLLBACK_ON_FAILURE: GroupKey<bool> = GroupKey {
    key: ROLLBACK_ON_FAILURE_ANNOTATION,
    absent: false,
    safer: smaller_is_safer,
};
/// `baton.dev/bypass-gates-until`: only when every member carries one, until the earliest (a
/// value that cannot be read bypasses nothing).
pub const BYPASS: GroupKey<Option<Timestamp>> = GroupKey {
    key: BYPASS_ANNOTATION,
    absent: None,
    safer: no_bypass_is_safer,
};
/// `baton.dev/rollback`, a request: it asks for a rollback only when every member carries one
/// (`true`: carried).
pub const ROLLBACK_REQUEST: GroupKey<bool> = GroupKey {
    key: ROLLBACK_ANNOTATION,
    absent: false,
    safer: smaller_is_safer,
};

/// No bypass is safer than any; of two, the one that ends first.
fn no_bypass_is_safer(first: &Option<Timestamp>, second: &Option<Timestamp>) -> Option<Ordering> {
    Some(match (first, second) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(first), Some(second)) => first.cmp(second),
    })
}

/// A member's reading of one key: `None` without it, else the value as written and as read.
type Carried<'a, T> = (&'a str, Option<(&'a str, T)>);

/// What [`read`] gathers: the configuration, the warnings, the first invalid key.
struct Reader {
    config: GateConfig,
    warnings: Vec<GateWarning>,
}

impl Reader {
    /// A gate key whose value cannot be read, or that disagrees with another member's: a
    /// Warning, and the group is held (module header).
    fn reject(&mut self, statefulset: &str, key: &'static str, raw: &str, accepted: &'static str) {
        self.warnings.push(GateWarning::InvalidAnnotation {
            statefulset: statefulset.to_owned(),
            problem: InvalidAnnotation {
                key,
                value: raw.to_owned(),
                accepted,
                fallback: HOLDING.to_owned(),
            },
        });
        self.config.invalid.get_or_insert_with(|| InvalidKey {
            statefulset: statefulset.to_owned(),
            key,
            value: raw.to_owned(),
            accepted,
        });
    }

    /// Every member's reading of `key`, parsed by `parse`; a value it cannot read holds the
    /// group and reads as absent (the group holds anyway). A carried key enables the gates
    /// when `enables`.
    fn carried<'a, T>(
        &mut self,
        group: &'a GroupSnapshot,
        key: &'static str,
        accepted: &'static str,
        enables: bool,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Vec<Carried<'a, T>> {
        // No member carrying it reads as none at all (what absence means), without allocating.
        if !group
            .statefulsets
            .iter()
            .any(|member| member.annotations.contains_key(key))
        {
            return Vec::new();
        }
        group
            .statefulsets
            .iter()
            .map(|member| {
                let name = member.name.as_str();
                let Some(raw) = member.annotations.get(key) else {
                    return (name, None);
                };
                self.config.enabled |= enables;
                match parse(raw) {
                    Some(value) => (name, Some((raw.as_str(), value))),
                    None => {
                        self.reject(name, key, &shown(key, raw), accepted);
                        (name, None)
                    }
                }
            })
            .collect()
    }

    /// The group's name for `key` (a check, a hook, batches, approvals): members naming
    /// another hold the group until they agree.
    fn agreed<T: Clone>(
        &mut self,
        key: &'static str,
        combined: Combined<'_, Option<T>>,
    ) -> Option<T> {
        for reading in &combined.disagreeing {
            let raw = reading.raw.unwrap_or_default();
            self.reject(
                reading.statefulset,
                key,
                &shown(key, raw),
                AGREEING_ACCEPTED,
            );
        }
        combined.value
    }

    /// Tells each member whose `key` does not count alone (a value that relaxes the group needs
    /// every member's word), with what the group does instead.
    fn alone<T>(&mut self, key: &'static str, combined: &Combined<'_, T>, instead: &str) {
        if combined.overruled.is_empty() {
            return;
        }
        let instead = combined.instead(instead);
        self.warnings
            .extend(
                combined
                    .overruled
                    .iter()
                    .map(|reading| GateWarning::InvalidAnnotation {
                        statefulset: reading.statefulset.to_owned(),
                        problem: InvalidAnnotation {
                            key,
                            value: reading.raw.unwrap_or_default().to_owned(),
                            accepted: EVERY_MEMBER_ACCEPTED,
                            fallback: instead.clone(),
                        },
                    }),
            );
    }
}
/// Reads the group's gate keys, each by the group rule ([`crate::annotations::group`]). Pure.
///
/// Every key is parsed first, in this order, then combined: the first invalid key named
/// ([`GateConfig::invalid`]) is the first met in that order, whatever the combination finds.
pub fn read(group: &GroupSnapshot) -> (GateConfig, Vec<GateWarning>) {
    let mut reader = Reader {
        config: GateConfig::default(),
        warnings: Vec::new(),
    };
    let readings = reader.readings(group);
    // What may only tighten the group: any member's word counts.
    reader.soak(readings.soaks);
    reader.config.ramp = RAMP.combine(readings.ramps).value;
    reader.named(
        group,
        readings.checks,
        readings.batches,
        readings.approvals,
        readings.hooks,
    );
    // What relaxes or overrides the gates: only every member's word counts.
    reader.rollback(group, readings.rolling_back);
    reader.approvals_agreed(group);
    let bypass = BYPASS.combine(readings.bypasses);
    reader.alone(BYPASS_ANNOTATION, &bypass, "bypassing nothing");
    reader.config.bypass_until = bypass.value;
    (reader.config, reader.warnings)
}

/// Every member's reading of each gate key, before they are combined.
struct Readings<'a> {
    soaks: Vec<Carried<'a, SignedDuration>>,
    checks: Vec<Carried<'a, Option<String>>>,
    ramps: Vec<Carried<'a, bool>>,
    batches: Vec<Carried<'a, Option<Batches>>>,
    approvals: Vec<Carried<'a, Option<Approval>>>,
    rolling_back: Vec<Carried<'a, bool>>,
    hooks: Vec<Carried<'a, Option<String>>>,
    bypasses: Vec<Carried<'a, Option<Timestamp>>>,
}

impl Reader {
    fn readings<'a>(&mut self, group: &'a GroupSnapshot) -> Readings<'a> {
        Readings {
            soaks: self.carried(group, SOAK_ANNOTATION, SOAK_ACCEPTED, true, parse_soak),
            checks: self.carried(
                group,
                HEALTH_CHECK_ANNOTATION,
                HEALTH_CHECK_ACCEPTED,
                true,
                parse_health_check,
            ),
            ramps: self.carried(group, RAMP_ANNOTATION, RAMP_ACCEPTED, true, parse_ramp),
            batches: self.carried(group, BATCHES_ANNOTATION, BATCHES_ACCEPTED, true, |raw| {
                Batches::parse(raw).map(Some)
            }),
            approvals: self.carried(group, APPROVAL_ANNOTATION, APPROVAL_ACCEPTED, true, |raw| {
                Approval::parse(raw).map(Some)
            }),
            rolling_back: self.carried(
                group,
                ROLLBACK_ON_FAILURE_ANNOTATION,
                ROLLBACK_ON_FAILURE_ACCEPTED,
                true,
                parse_rollback_on_failure,
            ),
            hooks: self.carried(group, HOOK_ANNOTATION, HOOK_ACCEPTED, true, parse_hook),
            bypasses: self.bypasses(group),
        }
    }

    /// Every member's bypass. Not a gate of its own: a bypass neither enables the gates nor
    /// holds the group when unreadable (it then bypasses nothing, the safest reading).
    fn bypasses<'a>(&mut self, group: &'a GroupSnapshot) -> Vec<Carried<'a, Option<Timestamp>>> {
        if !BYPASS.carried_in(group) {
            return Vec::new();
        }
        group
            .statefulsets
            .iter()
            .map(|member| {
                let carried = member.annotations.get(BYPASS_ANNOTATION).map(|raw| {
                    let until = raw.trim().parse::<Timestamp>().ok();
                    if until.is_none() {
                        self.warnings.push(GateWarning::InvalidAnnotation {
                            statefulset: member.name.clone(),
                            problem: InvalidAnnotation {
                                key: BYPASS_ANNOTATION,
                                value: raw.to_owned(),
                                accepted: BYPASS_ACCEPTED,
                                fallback: "bypassing nothing".to_owned(),
                            },
                        });
                    }
                    (raw.as_str(), until)
                });
                (member.name.as_str(), carried)
            })
            .collect()
    }

    /// The longest soak any member names; members naming different ones are told which.
    fn soak(&mut self, soaks: Vec<Carried<'_, SignedDuration>>) {
        let carried_soaks: Vec<(String, String)> = soaks
            .iter()
            .filter_map(|(name, carried)| {
                Some(((*name).to_owned(), carried.as_ref()?.0.to_owned()))
            })
            .collect();
        let soak = SOAK.combine(soaks);
        if !soak.overruled.is_empty() {
            self.warnings.push(GateWarning::ConflictingSoak {
                values: carried_soaks,
                used: format_duration(soak.value),
            });
        }
        self.config.soak = Some(soak.value).filter(|soak| !soak.is_zero());
    }

    /// What members name (a check, batches, approvals, a hook): they must agree. Batches
    /// exclude a ramp.
    fn named(
        &mut self,
        group: &GroupSnapshot,
        checks: Vec<Carried<'_, Option<String>>>,
        batches: Vec<Carried<'_, Option<Batches>>>,
        approvals: Vec<Carried<'_, Option<Approval>>>,
        hooks: Vec<Carried<'_, Option<String>>>,
    ) {
        self.config.health_check =
            self.agreed(HEALTH_CHECK_ANNOTATION, HEALTH_CHECK.combine(checks));
        self.config.batches = self.agreed(BATCHES_ANNOTATION, BATCHES.combine(batches));
        self.config.approval = self
            .agreed(APPROVAL_ANNOTATION, APPROVAL.combine(approvals))
            .unwrap_or_default();
        self.config.hook = self.agreed(HOOK_ANNOTATION, HOOK.combine(hooks));
        if self.config.ramp
            && self.config.batches.is_some()
            && let Some(member) = group
                .statefulsets
                .iter()
                .find(|member| member.annotations.contains_key(BATCHES_ANNOTATION))
        {
            let raw = member.annotations[BATCHES_ANNOTATION].clone();
            self.reject(&member.name, BATCHES_ANNOTATION, &raw, BATCHES_OR_RAMP);
        }
    }

    /// Rolling back on failure, and a rollback request: each only on every member's word.
    fn rollback(&mut self, group: &GroupSnapshot, rolling_back: Vec<Carried<'_, bool>>) {
        let rolling_back = ROLLBACK_ON_FAILURE.combine(rolling_back);
        self.alone(
            ROLLBACK_ON_FAILURE_ANNOTATION,
            &rolling_back,
            "a failure halts the group instead",
        );
        self.config.rollback_on_failure = rolling_back.value;
        // A rollback asked by some members only (none rolling back yet: baton removes a
        // request member by member once it started one) asks for nothing.
        let started = group.statefulsets.iter().any(|member| {
            member
                .annotations
                .contains_key(crate::annotations::ROLLBACK_STATE_ANNOTATION)
        });
        if !started {
            let request = ROLLBACK_REQUEST.of_group(group, |_| true);
            self.alone(
                ROLLBACK_ANNOTATION,
                &request,
                "nothing rolls back (kubectl baton rollback writes it on every member)",
            );
        }
    }

    /// An approval some members carry and others not (a newcomer's, or one still being
    /// written) approves nothing it alone names: the first such member is told.
    fn approvals_agreed(&mut self, group: &GroupSnapshot) {
        let agreed = approved(group);
        if let Some(member) = group
            .statefulsets
            .iter()
            .find(|member| steps_of(member).iter().any(|step| !agreed.contains(step)))
        {
            self.warnings.push(GateWarning::InvalidAnnotation {
                statefulset: member.name.clone(),
                problem: InvalidAnnotation {
                    key: APPROVED_ANNOTATION,
                    value: member.annotations[APPROVED_ANNOTATION].clone(),
                    accepted: EVERY_MEMBER_ACCEPTED,
                    fallback: "approving nothing that not every member carries".to_owned(),
                },
            });
        }
    }
}

fn parse_health_check(raw: &str) -> Option<Option<String>> {
    crate::names::is_dns_subdomain(raw).then(|| Some(raw.to_owned()))
}

fn parse_ramp(raw: &str) -> Option<bool> {
    match raw {
        "none" => Some(false),
        "exponential" => Some(true),
        _ => None,
    }
}

fn parse_rollback_on_failure(raw: &str) -> Option<bool> {
    match raw.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

fn parse_hook(raw: &str) -> Option<Option<String>> {
    let url = raw.trim();
    ((url.starts_with("http://") || url.starts_with("https://")) && url.len() > 8)
        .then(|| Some(url.to_owned()))
}

/// A key's value as messages may show it: a hook's URL without its token.
fn shown(key: &str, raw: &str) -> String {
    let url = raw.trim();
    if key == HOOK_ANNOTATION && url::Url::parse(url).is_ok() {
        super::redact::redact(url)
    } else {
        raw.to_owned()
    }
}

/// The batches a zone rolls in ([`BATCHES_ANNOTATION`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Batches {
    /// This many batches of (nearly) equal size.
    Count(u32),
    /// Cumulative sizes, in order.
    Sizes(Vec<BatchSize>),
}

/// One cumulative batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSize {
    Pods(u32),
    /// A percentage (1 to 100) of the zone's replicas, rounded up.
    Percent(u32),
}

/// More batches than this is a typo (and a hostile value must not cost memory).
const MOST_BATCHES: usize = 100;

impl Batches {
    /// Reads [`BATCHES_ANNOTATION`]'s value; `None` when it is not one.
    pub fn parse(raw: &str) -> Option<Self> {
        let raw = raw.trim();
        if !raw.contains(',')
            && let Ok(count) = raw.parse::<u32>()
        {
            return (1..=MOST_BATCHES as u32)
                .contains(&count)
                .then_some(Self::Count(count));
        }
        let mut sizes = Vec::new();
        for item in raw.split(',') {
            let item = item.trim();
            let size = match item.strip_suffix('%') {
                Some(percent) => BatchSize::Percent(
                    percent
                        .trim()
                        .parse()
                        .ok()
                        .filter(|percent| (1..=100).contains(percent))?,
                ),
                None => BatchSize::Pods(item.parse().ok().filter(|pods| *pods > 0)?),
            };
            sizes.push(size);
            if sizes.len() > MOST_BATCHES {
                return None;
            }
        }
        // Cumulative: neither pods nor percentages may go down.
        let not_decreasing = |pick: fn(&BatchSize) -> Option<u32>| {
            let picked: Vec<u32> = sizes.iter().filter_map(pick).collect();
            picked.windows(2).all(|pair| pair[0] <= pair[1])
        };
        let pods = |size: &BatchSize| match size {
            BatchSize::Pods(pods) => Some(*pods),
            BatchSize::Percent(_) => None,
        };
        let percent = |size: &BatchSize| match size {
            BatchSize::Percent(percent) => Some(*percent),
            BatchSize::Pods(_) => None,
        };
        (not_decreasing(pods) && not_decreasing(percent)).then_some(Self::Sizes(sizes))
    }

    /// The cumulative number of updated pods after each batch of a zone of `replicas`:
    /// increasing, the last one `replicas` (a list ending short of the whole zone gets a last
    /// batch for the rest). Empty for an empty zone.
    pub fn targets(&self, replicas: u32) -> Vec<u32> {
        let ceil_share = |part: u64, whole: u64| {
            u32::try_from((u64::from(replicas) * part).div_ceil(whole)).unwrap_or(replicas)
        };
        let sizes: Vec<u32> = match self {
            Self::Count(count) => (1..=u64::from(*count))
                .map(|batch| ceil_share(batch, u64::from(*count)))
                .collect(),
            Self::Sizes(sizes) => sizes
                .iter()
                .map(|size| match size {
                    BatchSize::Pods(pods) => *pods,
                    BatchSize::Percent(percent) => ceil_share(u64::from(*percent), 100),
                })
                .collect(),
        };
        let mut targets: Vec<u32> = Vec::new();
        for size in sizes.into_iter().chain([replicas]) {
            let size = size.min(replicas);
            if size > targets.last().copied().unwrap_or(0) {
                targets.push(size);
            }
        }
        targets
    }
}

/// Which steps wait for a person ([`APPROVAL_ANNOTATION`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Approval {
    /// Every step after the rollout's first (the canary).
    pub canary: bool,
    /// Each zone's first step.
    pub zone: bool,
    /// Every step.
    pub batch: bool,
}

impl Approval {
    fn parse(raw: &str) -> Option<Self> {
        let mut approval = Self::default();
        for item in raw.split(',') {
            match item.trim() {
                "canary" => approval.canary = true,
                "zone" => approval.zone = true,
                "batch" => approval.batch = true,
                _ => return None,
            }
        }
        Some(approval)
    }

    /// Whether any step waits for approval.
    pub fn any(self) -> bool {
        self.canary || self.zone || self.batch
    }
}

/// Go duration syntax (what users of the Go operator write for its min-time label), not
/// negative.
fn parse_soak(raw: &str) -> Option<SignedDuration> {
    let nanos = go_duration::parse(raw.trim()).ok()?;
    (nanos >= 0).then(|| SignedDuration::from_nanos(nanos))
}

/// A duration as people read it (`5s`, `1m30s`), rounded down to milliseconds.
pub fn format_duration(duration: SignedDuration) -> String {
    let nanos = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 1_000_000) * 1_000_000;
    go_duration::format(nanos)
}

/// What is left of a wait, as a countdown shows it: whole seconds, rounded up (`5.397s` is
/// `6s`; `0s` only once it is over). A view recomputed several times a second (`kubectl baton
/// wait` recomputes after every change) then reads the same until the next second, and a
/// follower printing what changed prints one line a second, not one a recomputation.
pub fn format_countdown(remaining: SignedDuration) -> String {
    let started_second = remaining.subsec_nanos() > 0;
    format_duration(SignedDuration::from_secs(
        remaining
            .as_secs()
            .saturating_add(i64::from(started_second)),
    ))
}

/// Separates step names in `baton.dev/approved` (revision names are DNS labels: never in one).
pub const SEPARATOR: char = ',';

/// The steps approved so far: the names every member's `baton.dev/approved` carries
/// (`kubectl baton approve` writes the step on each). One member's word alone approves nothing:
/// whoever may create a StatefulSet with the group's label, without any right on its members,
/// must not approve their steps.
pub fn approved(group: &GroupSnapshot) -> BTreeSet<&str> {
    let mut members = group.statefulsets.iter();
    let Some(first) = members.next() else {
        return BTreeSet::new();
    };
    members.fold(steps_of(first), |agreed, member| {
        let theirs = steps_of(member);
        agreed.intersection(&theirs).copied().collect()
    })
}

/// The steps one member's `baton.dev/approved` names.
pub(crate) fn steps_of(member: &StatefulSetSnapshot) -> BTreeSet<&str> {
    member
        .annotations
        .get(APPROVED_ANNOTATION)
        .map(|value| {
            value
                .split(SEPARATOR)
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::rollout::StatefulSetSnapshot;

    fn member(name: &str, annotations: &[(&str, &str)]) -> StatefulSetSnapshot {
        crate::testing::member_with(name, annotations)
    }

    fn group(members: Vec<StatefulSetSnapshot>) -> GroupSnapshot {
        GroupSnapshot {
            name: "ingester".to_owned(),
            statefulsets: members,
            reach: Default::default(),
        }
    }

    #[test]
    fn a_group_without_gate_keys_has_no_gates() {
        let (config, warnings) = read(&group(vec![member("a", &[]), member("b", &[])]));
        assert_eq!(config, GateConfig::default());
        assert!(warnings.is_empty());
    }

    #[test]
    fn soak_is_read_from_any_member_in_go_syntax() {
        for (raw, seconds) in [("5s", 5), ("1m30s", 90), ("1.5h", 5400), (" 10s ", 10)] {
            let (config, warnings) = read(&group(vec![
                member("a", &[]),
                member("b", &[(SOAK_ANNOTATION, raw)]),
            ]));
            assert_eq!(
                config.soak,
                Some(SignedDuration::from_secs(seconds)),
                "{raw}"
            );
            assert!(config.enabled && config.invalid.is_none(), "{raw}");
            assert!(warnings.is_empty(), "{raw}");
        }
    }

    #[test]
    fn members_naming_different_checks_or_hooks_hold_the_group_until_they_agree() {
        // A new member sorting first names its own check and hook (with a token)
        let (config, warnings) = read(&group(vec![
            member(
                "a-new",
                &[
                    (HEALTH_CHECK_ANNOTATION, "always-passes"),
                    (HOOK_ANNOTATION, "https://evil.example/hook?token=abc"),
                ],
            ),
            member(
                "b",
                &[
                    (HEALTH_CHECK_ANNOTATION, "errors"),
                    (HOOK_ANNOTATION, "https://deploys.example.com/hook"),
                ],
            ),
        ]));
        let invalid = config.invalid.expect("the group holds");
        assert_eq!(
            (
                invalid.statefulset.as_str(),
                invalid.key,
                invalid.value.as_str()
            ),
            ("b", HEALTH_CHECK_ANNOTATION, "errors")
        );
        let messages: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages
                .iter()
                .all(|message| message.contains(AGREEING_ACCEPTED))
        );
        // Agreeing members are one gate
        let (agreeing, warnings) = read(&group(vec![
            member("a", &[(HEALTH_CHECK_ANNOTATION, "errors")]),
            member("b", &[(HEALTH_CHECK_ANNOTATION, "errors")]),
        ]));
        assert_eq!(agreeing.health_check.as_deref(), Some("errors"));
        assert!(agreeing.invalid.is_none() && warnings.is_empty());
    }

    #[test]
    fn an_invalid_hook_is_shown_without_its_token() {
        let (config, _) = read(&group(vec![member(
            "a",
            &[(
                HOOK_ANNOTATION,
                "ftp://user:pw@deploys.example.com/hook?token=abc",
            )],
        )]));
        let invalid = config.invalid.expect("held");
        assert!(
            !invalid.value.contains("abc") && !invalid.value.contains("pw"),
            "{invalid:?}"
        );
    }

    #[test]
    fn a_zero_soak_enables_the_gate_without_a_soak() {
        let (config, warnings) = read(&group(vec![member("a", &[(SOAK_ANNOTATION, "0")])]));
        assert_eq!(config.soak, None);
        assert!(config.enabled);
        assert!(warnings.is_empty());
    }

    #[test]
    fn an_invalid_soak_holds_the_group_and_names_key_value_and_statefulset() {
        for raw in ["10 minutes", "5", "-5s", "", "1d", "soon"] {
            let (config, warnings) =
                read(&group(vec![member("zone-b", &[(SOAK_ANNOTATION, raw)])]));
            assert_eq!(
                config.invalid,
                Some(InvalidKey {
                    statefulset: "zone-b".to_owned(),
                    key: SOAK_ANNOTATION,
                    value: raw.to_owned(),
                    accepted: SOAK_ACCEPTED,
                }),
                "{raw:?}"
            );
            let [warning] = warnings.as_slice() else {
                panic!("one warning for {raw:?}: {warnings:?}");
            };
            let text = warning.to_string();
            assert!(text.contains("zone-b"), "{text}");
            assert!(text.contains(SOAK_ANNOTATION), "{text}");
            assert!(text.contains(&format!("{raw:?}")), "{text}");
            assert!(text.contains(HOLDING), "{text}");
            assert_eq!(warning.kind(), "InvalidAnnotation");
        }
    }

    #[test]
    fn conflicting_soaks_warn_and_the_longest_wins() {
        let (config, warnings) = read(&group(vec![
            member("a", &[(SOAK_ANNOTATION, "30s")]),
            member("b", &[(SOAK_ANNOTATION, "2m")]),
            member("c", &[]),
        ]));
        assert_eq!(config.soak, Some(SignedDuration::from_secs(120)));
        let [warning] = warnings.as_slice() else {
            panic!("one warning: {warnings:?}");
        };
        assert_eq!(warning.kind(), "ConflictingSoak");
        assert_eq!(warning.statefulset(), Some("a"));
        let text = warning.to_string();
        assert!(
            text.contains(r#"a="30s""#) && text.contains(r#"b="2m""#),
            "{text}"
        );
        assert!(text.ends_with("using the longest, 2m0s"), "{text}");
    }

    #[test]
    fn equal_soaks_written_differently_do_not_conflict() {
        let (config, warnings) = read(&group(vec![
            member("a", &[(SOAK_ANNOTATION, "60s")]),
            member("b", &[(SOAK_ANNOTATION, "1m")]),
        ]));
        assert_eq!(config.soak, Some(SignedDuration::from_secs(60)));
        assert!(warnings.is_empty());
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(format_duration(SignedDuration::from_secs(5)), "5s");
        assert_eq!(format_duration(SignedDuration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(SignedDuration::from_secs(90)), "1m30s");
    }

    #[test]
    fn a_countdown_shows_whole_seconds_rounded_up() {
        // The near-duplicates a follower printed, a few milliseconds apart, read the same
        let shown: Vec<String> = [5397, 5347, 5346, 5001]
            .map(|millis| format_countdown(SignedDuration::from_millis(millis)))
            .to_vec();
        assert_eq!(shown, ["6s"; 4]);
        // and the next second reads the next value, never milliseconds
        assert_eq!(format_countdown(SignedDuration::from_millis(5000)), "5s");
        assert_eq!(format_countdown(SignedDuration::from_millis(4999)), "5s");
        assert_eq!(format_countdown(SignedDuration::from_millis(1)), "1s");
        assert_eq!(format_countdown(SignedDuration::ZERO), "0s");
        assert_eq!(
            format_countdown(SignedDuration::from_millis(90_500)),
            "1m31s"
        );
    }
}
