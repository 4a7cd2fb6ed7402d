//! What a gate decides, as every gate and its callers read it: why deletions wait
//! ([`GateWait`]), whether they may go ([`GateVerdict`]), the annotations to store
//! ([`AnnotationWrite`]), what people should hear ([`GateNotice`]), the hook call due
//! ([`HookCall`]) and the whole of it ([`GateDecision`]). Apart from the zone gate
//! ([`super::decide()`]) because the gates it composes (steps, approvals, hooks, checks) build
//! and narrow decisions too: they depend on this, and `decide` on them, never the other way.

use std::collections::BTreeSet;
use std::fmt;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::keys::{self, GateWarning, format_countdown};
use crate::commands::Reach;
use crate::explained::Explained;
use crate::rollout::{GroupSnapshot, Plan};

/// Why deletions of the plan wait; `Display` explains it, [`Explained::kind`] names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateWait {
    /// `statefulset` carries `baton.dev/halted`; `why` is its value. `reach`: how the command
    /// that resumes it reaches the group (boxed, as in the other waits that print a command:
    /// most waits print none, and every decision carries one wait).
    Halted {
        statefulset: String,
        why: String,
        reach: Box<Reach>,
    },
    /// A gate key of `statefulset` cannot be read (or disagrees with another member's): the
    /// group's configuration is invalid, and it holds until a person fixes the annotation.
    InvalidGate {
        statefulset: String,
        key: &'static str,
        /// As written (user-written: the message quotes and bounds it).
        value: String,
        /// What the key accepts.
        accepted: &'static str,
        reach: Box<Reach>,
    },
    /// `zone` waits for the group's hook, which the operator's bounds do not let baton call.
    RefusedHook { zone: String, why: String },
    /// `zone` is next, but `unfinished`, already rolling, is not finished.
    ZoneUnfinished { zone: String, unfinished: String },
    /// Deletions in `zone` wait for the health check `check` to pass `needed` times in a row
    /// (it has `passes`); `last` is its last outcome.
    HealthCheck {
        zone: String,
        check: String,
        passes: u32,
        needed: u32,
        last: Option<String>,
    },
    /// `zone` waits for its hook of `phase` to answer 2xx (`attempts` failed so far).
    Hook {
        zone: String,
        phase: String,
        attempts: u32,
        last: Option<String>,
    },
    /// `zone` ramps: its last step is not available yet (`updated` of `total` pods updated).
    Ramp {
        zone: String,
        updated: u32,
        total: u32,
    },
    /// `zone` rolls in batches: batch `batch` (1-based, of `batches`) goes once the last one is
    /// available (`updated` of `total` pods updated).
    Batch {
        zone: String,
        batch: u32,
        batches: u32,
        updated: u32,
        total: u32,
    },
    /// A rollback is under way and holds the rest: templates are being written back, or a
    /// rollback was asked for (`why`) and is about to start.
    RollingBack { zone: String, why: String },
    /// `zone`'s template went back to the revision baton rolled it back from (`from`, instead
    /// of `to`): a GitOps tool re-applying it? The group holds until the template changes.
    TemplateReverted {
        zone: String,
        from: String,
        to: String,
    },
    /// `zone`'s next step waits for a person: `kubectl baton approve` records `step`.
    AwaitingApproval {
        zone: String,
        group: String,
        /// What is approved, as people read it.
        what: String,
        /// The value `baton.dev/approved` must hold (on any member).
        step: String,
        reach: Box<Reach>,
    },
    /// `zone` is next and soaks until `until` after the zones before it finished.
    Soak {
        zone: String,
        after: Vec<String>,
        remaining: SignedDuration,
        until: Timestamp,
    },
}

impl Explained for GateWait {
    fn kind(&self) -> &'static str {
        match self {
            Self::Halted { .. } => "Halted",
            Self::InvalidGate { .. } => "InvalidGate",
            Self::ZoneUnfinished { .. } => "ZoneUnfinished",
            Self::Soak { .. } => "Soak",
            Self::HealthCheck { .. } => "HealthCheck",
            Self::Ramp { .. } => "Ramp",
            Self::Batch { .. } => "Batch",
            Self::AwaitingApproval { .. } => "AwaitingApproval",
            Self::RollingBack { .. } => "RollingBack",
            Self::TemplateReverted { .. } => "TemplateReverted",
            Self::Hook { .. } => "Hook",
            Self::RefusedHook { .. } => "RefusedHook",
        }
    }

    fn statefulset(&self) -> Option<&str> {
        Some(GateWait::statefulset(self))
    }
}

impl GateWait {
    /// Whether the wait halts the group: nothing moves until a person acts (the group's
    /// phase is `halted`). An invalid gate key holds the group too, but as a configuration to
    /// fix (phase `invalidConfiguration`), not a halt.
    pub fn halts(&self) -> bool {
        matches!(
            self,
            Self::Halted { .. } | Self::RefusedHook { .. } | Self::TemplateReverted { .. }
        )
    }

    /// The StatefulSet the wait is about.
    pub fn statefulset(&self) -> &str {
        match self {
            Self::Halted { statefulset, .. } | Self::InvalidGate { statefulset, .. } => statefulset,
            Self::ZoneUnfinished { zone, .. }
            | Self::Soak { zone, .. }
            | Self::HealthCheck { zone, .. }
            | Self::Ramp { zone, .. }
            | Self::Batch { zone, .. }
            | Self::AwaitingApproval { zone, .. }
            | Self::RollingBack { zone, .. }
            | Self::TemplateReverted { zone, .. }
            | Self::Hook { zone, .. }
            | Self::RefusedHook { zone, .. } => zone,
        }
    }
}

impl fmt::Display for GateWait {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Halted {
                statefulset,
                why,
                reach,
            } => write!(
                formatter,
                "halted at {statefulset}: {why}; resume with {} (or {})",
                reach.baton(&format!("resume {statefulset}")),
                reach.annotate(statefulset, &format!("{}-", keys::HALTED_ANNOTATION))
            ),
            Self::InvalidGate {
                statefulset,
                key,
                value,
                accepted,
                reach,
            } => write!(
                formatter,
                "invalid configuration: annotation {key} on StatefulSet {statefulset} has the \
                 invalid value {} (accepted: {accepted}); {}: set it to an accepted value, or \
                 remove it with {}",
                shown_value(value),
                keys::HOLDING,
                reach.annotate(statefulset, &format!("{key}-"))
            ),
            Self::ZoneUnfinished { zone, unfinished } => write!(
                formatter,
                "{zone} starts only once {unfinished} is updated and available"
            ),
            Self::Hook {
                zone,
                phase,
                attempts,
                last,
            } => {
                write!(formatter, "{zone} waits for its {phase} hook")?;
                match last {
                    Some(last) if *attempts > 0 => {
                        write!(formatter, " ({attempts} failed so far, last: {last})")
                    }
                    _ => Ok(()),
                }
            }
            Self::RefusedHook { zone, why } => write!(
                formatter,
                "{zone} waits for its hook, which baton may not call: {why}; {}",
                keys::HOLDING
            ),
            Self::Ramp {
                zone,
                updated,
                total,
            } => write!(
                formatter,
                "{zone} ramps: its last step must be available first ({updated} of {total} pods updated)"
            ),
            Self::Batch {
                zone,
                batch,
                batches,
                updated,
                total,
            } => write!(
                formatter,
                "{zone} rolls in batches: batch {batch} of {batches} goes once the last one is \
                 available ({updated} of {total} pods updated)"
            ),
            Self::AwaitingApproval {
                zone,
                group,
                what,
                step,
                reach,
            } => {
                // The step, so that the person approves what they read (`--step`); across
                // clusters the approval goes on every member, so every member is named.
                write!(
                    formatter,
                    "{zone} awaits approval of {what}; approve with {}",
                    reach.baton(&format!("approve {group} --step {step}"))
                )
            }
            Self::RollingBack { why, .. } => write!(formatter, "rolling back: {why}"),
            Self::TemplateReverted { zone, from, to } => write!(
                formatter,
                "the template of {zone} went back to {from} after baton rolled it back to {to} \
                 (a GitOps tool re-applying it?); baton will not write it again: put the \
                 previous version in Git to finish the rollback, or a new version to roll \
                 forward"
            ),
            Self::HealthCheck {
                zone,
                check,
                passes,
                needed,
                last,
            } => {
                write!(
                    formatter,
                    "{zone} waits for health check {check}: {passes} of {needed} passes in a row"
                )?;
                match last {
                    Some(last) => write!(formatter, "; last run {last}"),
                    None => Ok(()),
                }
            }
            Self::Soak {
                zone,
                after,
                remaining,
                ..
            } => write!(
                formatter,
                "soaking after {}: {zone} starts in {}",
                after.join(", "),
                format_countdown(*remaining)
            ),
        }
    }
}

/// An annotation's value as a message shows it: quoted, its control characters escaped, and
/// bounded (whoever may write the annotation must not flood an Event or the page with it).
pub fn shown_value(value: &str) -> String {
    const MOST_CHARS: usize = 200;
    let bounded: String = value.chars().take(MOST_CHARS).collect();
    if bounded.len() < value.len() {
        format!("{bounded:?}…")
    } else {
        format!("{bounded:?}")
    }
}

/// One annotation to set (`Some`) or remove (`None`) on a member, by the leader, with the
/// resourceVersion it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationWrite {
    pub statefulset: String,
    pub key: &'static str,
    pub value: Option<String>,
}

/// Whether the plan's deletions may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateVerdict {
    /// Every deletion of the plan may go.
    Proceed,
    /// Only the deletions in `pass` may go (possibly none); the others wait for `wait`.
    Hold {
        wait: GateWait,
        pass: BTreeSet<String>,
    },
}

/// What the gate decided for one plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateDecision {
    pub verdict: GateVerdict,
    /// Store these before acting; if they fail, act on nothing (the next pass retries).
    /// Writing them is what makes the gate survive a failover.
    pub writes: Vec<AnnotationWrite>,
    pub warnings: Vec<GateWarning>,
    /// When the decision changes without any watch event (a soak ends).
    pub recheck_after: Option<Timestamp>,
    /// A hook call to make now; its answer gives more writes ([`super::hooks::record`]).
    pub hook: Option<HookCall>,
    /// What people should hear about this pass besides a wait (each an Event).
    pub notices: Vec<GateNotice>,
    /// A rollback holds the other gates off (the checks and hooks composed after [`super::decide()`]
    /// leave the decision as it is).
    pub rolling_back: bool,
    /// The group's bypass (`baton.dev/bypass-gates-until`), for the check composed after: read
    /// once, with the rest of the configuration.
    pub(super) bypass: Option<Timestamp>,
    /// The group asks for a rollback where a gate would halt it.
    pub(super) rollback_on_failure: bool,
    /// The zone state to store instead of the one in `writes` should no step go this pass:
    /// a zone cleared only because a bypass skipped its soak stays uncleared unless it steps
    /// while the bypass is in force (an expired bypass bypasses nothing).
    pub(super) unstepped: Option<AnnotationWrite>,
}

/// Something a gate did that people should hear about, though nothing waits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateNotice {
    /// A step in `zone` went without waiting for `gate`: `baton.dev/bypass-gates-until`.
    Bypassed {
        zone: String,
        gate: String,
        until: Timestamp,
    },
    /// The health check `check`, whose `onFailure` is `Warn`, failed: nothing waits for it.
    CheckFailed {
        zone: String,
        check: String,
        outcome: String,
    },
}

impl Explained for GateNotice {
    fn kind(&self) -> &'static str {
        match self {
            Self::Bypassed { .. } => "GateBypassed",
            Self::CheckFailed { .. } => "HealthCheckWarning",
        }
    }

    fn statefulset(&self) -> Option<&str> {
        Some(GateNotice::statefulset(self))
    }
}

impl GateNotice {
    /// The StatefulSet the Event is about.
    pub fn statefulset(&self) -> &str {
        match self {
            Self::Bypassed { zone, .. } | Self::CheckFailed { zone, .. } => zone,
        }
    }

    /// Whether a person should look (a Warning Event) rather than just know (Normal).
    pub fn is_warning(&self) -> bool {
        matches!(self, Self::CheckFailed { .. })
    }
}

impl fmt::Display for GateNotice {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bypassed { zone, gate, until } => write!(
                formatter,
                "{zone} steps without waiting for {gate}: {} is {until}",
                keys::BYPASS_ANNOTATION
            ),
            Self::CheckFailed {
                zone,
                check,
                outcome,
            } => write!(
                formatter,
                "health check {check} failed while {zone} rolled ({outcome}); its onFailure is \
                 Warn, so nothing waits for it"
            ),
        }
    }
}

impl GateDecision {
    pub(super) fn proceed() -> Self {
        Self {
            verdict: GateVerdict::Proceed,
            writes: Vec::new(),
            warnings: Vec::new(),
            recheck_after: None,
            hook: None,
            notices: Vec::new(),
            rolling_back: false,
            bypass: None,
            rollback_on_failure: false,
            unstepped: None,
        }
    }

    pub(super) fn hold(wait: GateWait, pass: BTreeSet<String>) -> Self {
        Self {
            verdict: GateVerdict::Hold { wait, pass },
            ..Self::proceed()
        }
    }

    /// Once a later gate took every deletion away: a bypass is told for the steps it let go,
    /// not for those something else holds, and clears a zone only for a step it let go. Every
    /// gate composed after [`super::decide()`] settles its decision (idempotent).
    pub(crate) fn settle(&mut self, plan: &Plan) {
        if plan.deletions().next().is_some() {
            return;
        }
        self.notices
            .retain(|notice| !matches!(notice, GateNotice::Bypassed { .. }));
        if let Some(unstepped) = &self.unstepped {
            for write in &mut self.writes {
                if write.key == unstepped.key && write.statefulset == unstepped.statefulset {
                    write.value.clone_from(&unstepped.value);
                }
            }
        }
    }

    /// Why (some) deletions wait, if they do.
    pub fn wait(&self) -> Option<&GateWait> {
        match &self.verdict {
            GateVerdict::Proceed => None,
            GateVerdict::Hold { wait, .. } => Some(wait),
        }
    }

    /// The plan as gated: deletions the gate holds are taken out (nothing is added); the
    /// plan's recheck time becomes the earlier of both.
    pub(super) fn apply(self, mut plan: Plan) -> (Plan, Self) {
        if let GateVerdict::Hold { pass, .. } = &self.verdict {
            plan.actions.retain(|action| match action.rolls() {
                Some(statefulset) => pass.contains(statefulset),
                None => true,
            });
        }
        plan.recheck_after = match (plan.recheck_after, self.recheck_after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (plan, self)
    }
}

/// When in a zone's rollout a hook is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HookPhase {
    BeforeZone,
    AfterZone,
}

/// A hook call to make now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCall {
    pub url: String,
    /// The StatefulSet (the zone) the hook is called for.
    pub statefulset: String,
    pub phase: HookPhase,
    pub from_revision: Option<String>,
    pub to_revision: String,
}

/// The zones `plan` deletes in, in member order.
pub(super) fn deleted_in(group: &GroupSnapshot, plan: &Plan) -> Vec<String> {
    group
        .statefulsets
        .iter()
        .map(|member| &member.name)
        .filter(|name| {
            plan.deletions()
                .any(|action| action.rolls() == Some(name.as_str()))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(namespace: &str, members: &[&str]) -> Box<Reach> {
        Box::new(Reach::of(namespace, members.iter().copied()))
    }

    fn halted(statefulset: &str) -> String {
        GateWait::Halted {
            statefulset: statefulset.to_owned(),
            why: "error rate 0.3".to_owned(),
            reach: reach("mimir", &[statefulset]),
        }
        .to_string()
    }

    fn awaiting(zone: &str) -> String {
        GateWait::AwaitingApproval {
            zone: zone.to_owned(),
            group: "querier".to_owned(),
            what: "its first step to querier-new".to_owned(),
            step: format!("{zone}/querier-new/0"),
            reach: reach("mimir", &[zone, &zone.replace("cluster-b", "cluster-a")]),
        }
        .to_string()
    }

    #[test]
    fn a_halt_says_the_commands_that_lift_it_in_its_namespace_and_the_members_own_cluster() {
        assert_eq!(
            halted("querier"),
            "halted at querier: error rate 0.3; resume with \
             kubectl baton resume querier -n mimir \
             (or kubectl -n mimir annotate statefulset querier baton.dev/halted-)"
        );
        // kubectl takes no qualified name: the member's own name, in its cluster's context
        assert_eq!(
            halted("cluster-b/querier"),
            "halted at cluster-b/querier: error rate 0.3; resume with \
             kubectl baton resume cluster-b/querier -n mimir --cluster cluster-b \
             (or kubectl --context cluster-b -n mimir annotate statefulset querier \
             baton.dev/halted-)"
        );
    }

    #[test]
    fn an_approval_names_its_step_and_across_clusters_every_member_cluster() {
        assert_eq!(
            awaiting("querier"),
            "querier awaits approval of its first step to querier-new; \
             approve with kubectl baton approve querier --step querier/querier-new/0 -n mimir"
        );
        assert_eq!(
            awaiting("cluster-b/querier"),
            "cluster-b/querier awaits approval of its first step to querier-new; \
             approve with kubectl baton approve querier --step \
             cluster-b/querier/querier-new/0 -n mimir --cluster cluster-a --cluster cluster-b"
        );
    }

    #[test]
    fn invalid_configuration_names_annotation_value_and_statefulset_and_how_to_fix_it() {
        let wait = GateWait::InvalidGate {
            statefulset: "ingester-zone-b".to_owned(),
            key: keys::SOAK_ANNOTATION,
            value: "5 minutes".to_owned(),
            accepted: keys::SOAK_ACCEPTED,
            reach: reach("baton-demo", &["ingester-zone-a", "ingester-zone-b"]),
        };
        // Its own kind, not a halt's: a pipeline tells a typo from a person's halt
        assert_eq!(wait.kind(), "InvalidGate");
        assert_eq!(wait.statefulset(), "ingester-zone-b");
        assert_eq!(
            wait.to_string(),
            "invalid configuration: annotation baton.dev/soak on StatefulSet ingester-zone-b \
             has the invalid value \"5 minutes\" (accepted: a duration such as 30s, 5m or \
             1h30m (0 for no soak)); holding the group until it is fixed: set it to an accepted \
             value, or remove it with kubectl -n baton-demo annotate statefulset \
             ingester-zone-b baton.dev/soak-"
        );
    }

    #[test]
    fn a_user_written_value_is_shown_quoted_escaped_and_bounded() {
        assert_eq!(shown_value("5 minutes"), "\"5 minutes\"");
        assert_eq!(
            shown_value("a\"b\nc\u{1b}[31m"),
            "\"a\\\"b\\nc\\u{1b}[31m\""
        );
        let long = shown_value(&"x".repeat(100_000));
        assert!(long.ends_with('…'), "{long}");
        assert!(long.chars().count() < 210, "{}", long.len());
    }
}
