//! A group's whole scaling pass, decided in one call: from what the controller read (the
//! group's StatefulSets, the scales of the references they mirror, the pods, the downscale
//! records, `now`) to the ordered effects to carry out and when to look again.
//!
//! Why one call: the planner ([`super::plan`]), the zone tracker's repair, delayed downscale and
//! the follow-up of downscales prepare-downscale approved each decide a part of a pass, and a
//! pass is only as safe as the order they run in (one replica change, after it was told why;
//! a pod asked to prepare before it may go; a claim stored only after its records were copied).
//! Composed here once, the controller reads, runs [`ScalingPass::effects`] in order through a
//! [`Sequence`], answering each with its [`Outcome`] ([`Effect::next`] says what that outcome
//! means for the rest of the pass), and the simulation drives the very functions the leader
//! runs.
//!
//! The order of the effects is the pass's:
//! 1. what people should hear: every bad setting and every hold the planner found, and each
//!    malformed zone tracker entry of a member ([`Effect::Tell`]);
//! 2. the first malformed tracker entry written back as the downscale it counts as
//!    ([`Effect::RepairTrackerEntry`]; one per pass: the write is conditioned on the tracker's
//!    version, and its watch event brings the next pass);
//! 3. the planner's actions: a replica change ([`Effect::SetReplicas`]), the reference's status
//!    written back, delayed-downscale preparations cancelled, or a delayed downscale's pods
//!    asked to prepare ([`Effect::PrepareDelayedDownscale`]), whose answers [`conclude`] turns
//!    into the effects that follow it;
//! 4. one pending claim of the ledger followed up ([`Effect::FollowUp`]): confirmed into the Go
//!    operator's records, or voided, its pods told to cancel. A replica change that is stale or
//!    refused skips what is left of step 3, never step 4.
//!
//! The pods' prepare answers cannot be read before the pass: the POST that asks a pod when it
//! prepared is the one that prepares it, and only the plan knows which pods go. So the pass
//! names the step, the controller reads the answers, and [`conclude`] decides on them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

use crate::annotations::LAST_DOWNSCALE_ANNOTATION;
use crate::annotations::scaling::{DelayedDownscale, MirrorReference};
use crate::downscale_history::{
    ClaimFollowUp, MalformedTrackerEntry, Records, follow_up_claims, pods_to_cancel,
};
use crate::duration::prometheus as prometheus_duration;
use crate::explained::{Explanation, Severity};
use crate::ledger::Entry;
use crate::pod_address::{PodAddressing, PodEndpoint, PrepareEndpoint};
use crate::pods::CachedPod;
use crate::statefulset::PodNames;

use super::delayed_downscale::{self, DelayedDownscaleDecision};
use super::plan::{Finding, FindingKind, Member, ScalingAction, ScalingPlan, Unread, reasons};
use super::snapshot::ReferenceScales;
use super::{ScalingSnapshot, plan};

/// Event reason for a malformed entry of the Go operator's zone tracker.
pub const ZONE_TRACKER_INVALID: &str = "ZoneTrackerEntryInvalid";
/// Event reason for a downscale copied into the Go operator's records.
pub const DOWNSCALE_RECORDED: &str = "DownscaleRecorded";
/// Event reason for an approved downscale that never happened.
pub const DOWNSCALE_NOT_APPLIED: &str = "DownscaleNotApplied";

/// After a write found the cache behind: long enough for the watch to catch up.
pub const STALE_RETRY: Duration = Duration::from_millis(200);
/// After a record could not be written: soon, the next pass decides again.
pub const FAILED_RECORD_RETRY: Duration = Duration::from_secs(1);

/// How the pods of the group are called, as configured.
#[derive(Debug, Clone, Copy)]
pub struct PodCalls<'a> {
    pub addressing: PodAddressing,
    pub cluster_domain: &'a str,
    pub namespace: &'a str,
}

/// What the controller read for a group's scaling pass.
#[derive(Debug, Clone, Copy)]
pub struct Read<'a> {
    pub group: &'a str,
    /// The group's StatefulSets, as cached.
    pub statefulsets: &'a [Arc<StatefulSet>],
    /// The scale of every reference they mirror, read just before.
    pub scales: &'a ReferenceScales,
    /// The pods of the group, as cached.
    pub pods: &'a [Arc<CachedPod>],
    /// The group's ledger, the zone tracker and the claim grace.
    pub records: Records<'a>,
    /// The zone tracker ConfigMap's name, as people are told it.
    pub tracker: &'a str,
    pub calls: PodCalls<'a>,
    /// The member clusters whose part of the group could not be read: nothing is decided
    /// ([`super::plan::plan`]) and no record is written.
    pub unread: &'a [Unread],
    pub now: Timestamp,
}

/// When to look at the group again without a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// After the configured scaling poll interval (a reference's changes are not watched).
    Poll,
    After(Duration),
    At(Timestamp),
}

/// One thing a pass does, in order ([`ScalingPass::effects`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Tell people (an Event on the StatefulSet).
    Tell {
        statefulset: String,
        explanation: Explanation,
    },
    /// Write the malformed tracker entry of `statefulset` back as a downscale at `at`,
    /// conditioned on the tracker's version.
    RepairTrackerEntry { statefulset: String, at: Timestamp },
    /// Patch the StatefulSet's `/scale` to `to`, conditioned on the cached version (the
    /// admission webhooks judge it); once done, tell `told`.
    SetReplicas {
        statefulset: String,
        from: i32,
        to: i32,
        told: Explanation,
    },
    /// Set the reference's `status.replicas` to `replicas`.
    WriteBack {
        statefulset: String,
        reference: MirrorReference,
        replicas: i32,
    },
    /// DELETE to the delayed-downscale endpoint of each pod that stays: any preparation is
    /// cancelled. Failures are only logged (the next pass repeats it); 409 means nothing to
    /// cancel.
    CancelDelayedDownscale {
        statefulset: String,
        pods: Vec<PodEndpoint>,
    },
    /// POST to the delayed-downscale endpoint of each pod that would go; their answers go to
    /// [`conclude`], whose effects follow this one.
    PrepareDelayedDownscale(DelayedStep),
    /// One step of following up a claim; any failure ends the pass.
    FollowUp(FollowUp),
}

/// A delayed downscale whose pods are asked to prepare.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayedStep {
    pub statefulset: String,
    pub from: i32,
    pub to: i32,
    pub delay: Duration,
    /// `spec.ordinals.start`, to name the pods of the indexes.
    pub ordinals_start: i32,
    /// The endpoint of each going pod that exists, by index, or why it cannot be called.
    pub going: Vec<(i32, Result<PodEndpoint, String>)>,
    /// The reference to write the new count back to, after a downscale (`None`: it mirrors
    /// none, or its `-write-back` switch is off).
    pub write_back: Option<MirrorReference>,
}

/// One step of following up a claim prepare-downscale made ([`follow_up_claims`]).
#[derive(Debug, Clone, PartialEq)]
pub enum FollowUp {
    /// Record a downscale at `at` in the zone tracker, conditioned on its version.
    RecordInTracker { statefulset: String, at: Timestamp },
    /// Set the `grafana.com/last-downscale` annotation (metadata only: no new generation).
    AnnotateLastDownscale { statefulset: String, at: Timestamp },
    /// Tell these pods to undo their preparation (DELETE), unless they were told for this
    /// `request` already. A pod that cannot be told is logged: the claim is followed up all
    /// the same, as the webhook's undo does.
    CancelPreparation {
        request: String,
        pods: Vec<PodEndpoint>,
        /// Why each pod that cannot be called cannot (logged).
        unreachable: Vec<String>,
    },
    /// Store the follow-up of claim `followed`: `entry` replaces it (none: removed),
    /// conditioned on the ledger's version.
    StoreInLedger {
        statefulset: String,
        followed: Entry,
        entry: Option<Entry>,
    },
    /// The claim cannot be followed up (the message says why); the group comes back soon.
    Unreadable { statefulset: String, why: String },
}

/// How an effect went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// A conditioned write found a newer object than the one decided on (or it is gone).
    Stale,
    /// The write was refused or failed.
    Failed,
}

/// What is left of the pass after an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    Continue,
    /// Skip the rest of the replica changes; claims are still followed up.
    SkipToFollowUp,
    End,
}

/// What an effect's outcome means: when to come back, and what is left of the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    pub again: Option<Again>,
    pub then: Then,
}

impl Effect {
    /// Whether the effect changes the cluster or calls pods for the leader: carried out only
    /// within the term the pass started in.
    pub fn needs_term(&self) -> bool {
        !matches!(self, Self::Tell { .. })
    }

    /// Whether it follows up a claim.
    pub fn is_follow_up(&self) -> bool {
        matches!(self, Self::FollowUp(_))
    }

    /// What `outcome` means for the rest of the pass. A replica change that is stale comes
    /// back soon (the cache is behind), one refused comes back at the next poll; a tracker
    /// entry that could not be repaired is tried again soon while the pass goes on (one written
    /// meanwhile brings the group back by its watch event); a claim not followed up
    /// ends the pass and comes back soon. Whatever else fails was told or logged, and the next
    /// pass does it again.
    pub fn next(&self, outcome: Outcome) -> Next {
        let (again, then) = match (self, outcome) {
            (_, Outcome::Done) => (None, Then::Continue),
            (Self::SetReplicas { .. }, Outcome::Stale) => {
                (Some(Again::After(STALE_RETRY)), Then::SkipToFollowUp)
            }
            (Self::SetReplicas { .. }, Outcome::Failed) => {
                (Some(Again::Poll), Then::SkipToFollowUp)
            }
            // Someone wrote the tracker meanwhile: its watch event brings the group back.
            (Self::RepairTrackerEntry { .. }, Outcome::Stale) => (None, Then::Continue),
            (Self::RepairTrackerEntry { .. }, Outcome::Failed) => {
                (Some(Again::After(FAILED_RECORD_RETRY)), Then::Continue)
            }
            (Self::FollowUp(_), _) => (Some(Again::After(FAILED_RECORD_RETRY)), Then::End),
            (
                Self::Tell { .. }
                | Self::WriteBack { .. }
                | Self::CancelDelayedDownscale { .. }
                | Self::PrepareDelayedDownscale(_),
                _,
            ) => (None, Then::Continue),
        };
        Next { again, then }
    }
}

/// A scaling pass, decided.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingPass {
    /// To carry out in order.
    pub effects: Vec<Effect>,
    /// When to look again whatever the effects do (a held downscale becomes possible, a
    /// claim's fate becomes known, a reference is polled).
    pub again: Vec<Again>,
}

/// A pass being carried out: which effect comes next, and what each outcome leaves of the
/// pass ([`Effect::next`]). The controller and the simulation both run a pass through it, so
/// the sequence simulated is the one the leader runs.
#[derive(Debug, Clone)]
pub struct Sequence {
    effects: VecDeque<Effect>,
    skipping: bool,
    again: Vec<Again>,
}

impl Sequence {
    pub fn new(pass: ScalingPass) -> Self {
        Self {
            effects: pass.effects.into(),
            skipping: false,
            again: pass.again,
        }
    }

    /// The next effect to carry out, if any is left.
    pub fn next_effect(&mut self) -> Option<Effect> {
        while let Some(effect) = self.effects.pop_front() {
            if self.skipping && !effect.is_follow_up() {
                continue;
            }
            self.skipping = false;
            return Some(effect);
        }
        None
    }

    /// `effect` went `outcome`.
    pub fn answer(&mut self, effect: &Effect, outcome: Outcome) {
        let next = effect.next(outcome);
        self.again.extend(next.again);
        match next.then {
            Then::Continue => {}
            Then::SkipToFollowUp => self.skipping = true,
            Then::End => self.effects.clear(),
        }
    }

    /// What the pods' answers to a [`Effect::PrepareDelayedDownscale`] decided: its effects
    /// come next.
    pub fn concluded(&mut self, concluded: Concluded) {
        self.again.extend(concluded.again);
        for effect in concluded.effects.into_iter().rev() {
            self.effects.push_front(effect);
        }
    }

    /// When to look at the group again: every reason the pass and its outcomes gave.
    pub fn again(&self) -> &[Again] {
        &self.again
    }
}

/// The planner a pass runs ([`plan()`]); a seam for the simulation's broken planners.
pub type Planner<'a> = dyn Fn(&ScalingSnapshot, Timestamp) -> ScalingPlan + 'a;

/// The whole pass over `read`, with the real planner.
pub fn decide(read: &Read<'_>) -> ScalingPass {
    decide_planned_by(read, &plan)
}

/// [`decide`] with `planner`.
pub fn decide_planned_by(read: &Read<'_>, planner: &Planner<'_>) -> ScalingPass {
    let snapshot = ScalingSnapshot::from_kubernetes(
        read.group,
        read.statefulsets.iter().map(Arc::as_ref),
        read.scales,
        read.records,
        read.unread,
        read.now,
    );
    let plan = planner(&snapshot, read.now);
    let mut pass = ScalingPass {
        effects: Vec::new(),
        again: Vec::new(),
    };
    if plan.poll {
        pass.again.push(Again::Poll);
    }
    if let Some(at) = plan.recheck_at {
        pass.again.push(Again::At(at));
    }
    for finding in plan
        .findings
        .iter()
        .filter(|f| f.kind != FindingKind::Scale)
    {
        pass.effects.push(tell_finding(finding));
    }
    // A malformed entry of a member is told on it: it counts as a downscale now, holding the
    // group's downscales. Left alone it would hold them for as long as it stays, so the leader
    // writes it back as the downscale it is taken for: the hold ends one min-time later
    // whoever wrote it.
    let names = read
        .statefulsets
        .iter()
        .filter_map(|statefulset| statefulset.metadata.name.as_deref());
    let malformed = read.records.tracker.malformed(names);
    for entry in &malformed {
        pass.effects.push(malformed_told(entry, read.tracker));
    }
    // A part of the group unread: no record is written either (a claim is judged on its
    // StatefulSet, which may be in the part unread, as may the tracker's other entries).
    if !read.unread.is_empty() {
        pass.effects.extend(acting(read, &snapshot, &plan));
        return pass;
    }
    if let Some(entry) = malformed.first() {
        pass.effects.push(Effect::RepairTrackerEntry {
            statefulset: entry.key.clone(),
            at: read.now,
        });
    }
    pass.effects.extend(acting(read, &snapshot, &plan));
    follow_up(read, &mut pass);
    pass
}

/// How a finding is told.
fn tell_finding(finding: &Finding) -> Effect {
    Effect::Tell {
        statefulset: finding.statefulset.clone(),
        explanation: finding_explained(finding),
    }
}

fn finding_explained(finding: &Finding) -> Explanation {
    let (severity, action) = match finding.kind {
        FindingKind::Scale => (Severity::Normal, "Scale"),
        FindingKind::Hold => (Severity::Normal, "Wait"),
        FindingKind::Problem => (Severity::Warning, "Validate"),
    };
    explained(severity, finding.reason, action, finding.note.clone())
}

fn explained(severity: Severity, reason: &str, action: &str, note: String) -> Explanation {
    Explanation {
        severity,
        reason: reason.to_owned(),
        action: action.to_owned(),
        note,
    }
}

fn malformed_told(entry: &MalformedTrackerEntry, tracker: &str) -> Effect {
    Effect::Tell {
        statefulset: entry.key.clone(),
        explanation: explained(
            Severity::Warning,
            ZONE_TRACKER_INVALID,
            "Validate",
            format!(
                "{entry} in ConfigMap {tracker}: it counts as a downscale now, and is written back \
                 as one, so other zones' downscales wait their min-time from now"
            ),
        ),
    }
}

/// The plan's actions as effects, each replica change with what it tells once done.
fn acting(read: &Read<'_>, snapshot: &ScalingSnapshot, plan: &ScalingPlan) -> Vec<Effect> {
    let member = |name: &str| snapshot.members.iter().find(|member| member.name == name);
    let statefulset = |name: &str| {
        read.statefulsets
            .iter()
            .map(Arc::as_ref)
            .find(|statefulset| statefulset.metadata.name.as_deref() == Some(name))
    };
    let delayed = |name: &str| -> Option<(&StatefulSet, &DelayedDownscale)> {
        let settings = member(name)?.delayed_downscale.as_ref().ok()?.as_ref()?;
        Some((statefulset(name)?, settings))
    };
    let mut effects = Vec::new();
    for action in &plan.actions {
        match action {
            ScalingAction::SetReplicas {
                statefulset,
                from,
                to,
            } => {
                let Some(finding) = plan
                    .findings
                    .iter()
                    .find(|f| f.kind == FindingKind::Scale && &f.statefulset == statefulset)
                else {
                    continue;
                };
                effects.push(Effect::SetReplicas {
                    statefulset: statefulset.clone(),
                    from: *from,
                    to: *to,
                    told: finding_explained(finding),
                });
            }
            ScalingAction::WriteBack {
                statefulset,
                replicas,
            } => {
                if let Some(reference) = member(statefulset).and_then(mirrored) {
                    effects.push(Effect::WriteBack {
                        statefulset: statefulset.clone(),
                        reference,
                        replicas: *replicas,
                    });
                }
            }
            ScalingAction::CancelDelayedDownscale { statefulset, keep } => {
                if let Some((object, settings)) = delayed(statefulset) {
                    effects.push(cancel_delayed(read, object, settings, *keep));
                }
            }
            ScalingAction::DelayedDownscale {
                statefulset,
                from,
                to,
            } => {
                let Some((object, settings)) = delayed(statefulset) else {
                    continue;
                };
                effects.push(cancel_delayed(read, object, settings, *to));
                let going = endpoints(read, object, settings, *to..*from);
                effects.push(Effect::PrepareDelayedDownscale(DelayedStep {
                    statefulset: statefulset.clone(),
                    from: *from,
                    to: *to,
                    delay: settings.delay,
                    ordinals_start: crate::statefulset::StatefulSetState::of(object).ordinals_start,
                    going,
                    write_back: member(statefulset).and_then(mirrored),
                }));
            }
        }
    }
    effects
}

/// The reference a member mirrors, when it does and its `-write-back` switch lets it be written.
fn mirrored(member: &Member) -> Option<MirrorReference> {
    match &member.mirror {
        // Only where its `-write-back` switch lets it be written, as every other write-back.
        Ok(Some(mirror)) if mirror.reference.write_back => Some(mirror.reference.clone()),
        _ => None,
    }
}

fn endpoints(
    read: &Read<'_>,
    statefulset: &StatefulSet,
    settings: &DelayedDownscale,
    indexes: std::ops::Range<i32>,
) -> Vec<(i32, Result<PodEndpoint, String>)> {
    delayed_downscale::endpoints(
        statefulset,
        read.pods,
        settings,
        indexes,
        read.calls.addressing,
        read.calls.cluster_domain,
        read.calls.namespace,
    )
}

/// DELETE to the pods `[0, keep)` that can be called.
fn cancel_delayed(
    read: &Read<'_>,
    statefulset: &StatefulSet,
    settings: &DelayedDownscale,
    keep: i32,
) -> Effect {
    Effect::CancelDelayedDownscale {
        statefulset: statefulset.metadata.name.clone().unwrap_or_default(),
        pods: endpoints(read, statefulset, settings, 0..keep)
            .into_iter()
            .filter_map(|(_, endpoint)| endpoint.ok())
            .collect(),
    }
}

/// What the pods' answers to [`Effect::PrepareDelayedDownscale`] decide.
#[derive(Debug, Clone, PartialEq)]
pub struct Concluded {
    /// To carry out next, in order.
    pub effects: Vec<Effect>,
    pub again: Option<Again>,
}

/// The decision [`conclude`] runs ([`delayed_downscale::decide`]); a seam for the simulation's
/// broken deciders.
pub type DelayedDecider<'a> = dyn Fn(
        PodNames<'_>,
        i32,
        i32,
        Duration,
        &BTreeMap<i32, Result<Timestamp, String>>,
        Timestamp,
    ) -> DelayedDownscaleDecision
    + 'a;

/// Decides on the going pods' `answers` (when each started preparing, by index, or why it
/// could not be asked) at `now`: scale down as far as they allow, or wait, or hold.
pub fn conclude(
    step: &DelayedStep,
    answers: &BTreeMap<i32, Result<Timestamp, String>>,
    now: Timestamp,
) -> Concluded {
    conclude_with(step, answers, now, &delayed_downscale::decide)
}

/// [`conclude`] with `decider`.
pub fn conclude_with(
    step: &DelayedStep,
    answers: &BTreeMap<i32, Result<Timestamp, String>>,
    now: Timestamp,
    decider: &DelayedDecider<'_>,
) -> Concluded {
    let DelayedStep {
        statefulset: name,
        from,
        to,
        delay,
        ..
    } = step;
    let (from, to) = (*from, *to);
    let names = PodNames::new(name, step.ordinals_start);
    let shown = prometheus_duration::format(*delay);
    match decider(names, from, to, *delay, answers, now) {
        DelayedDownscaleDecision::ScaleTo { replicas } => {
            let partial = if replicas > to {
                format!(" (of the wanted {to}; the others prepared less than {shown} ago)")
            } else {
                String::new()
            };
            let told = explained(
                Severity::Normal,
                reasons::SCALE_DOWN,
                "Scale",
                format!(
                    "{name} scales down from {from} to {replicas}{partial}: its pods prepared for delayed downscale at least {shown} ago"
                ),
            );
            let mut effects = vec![Effect::SetReplicas {
                statefulset: name.clone(),
                from,
                to: replicas,
                told,
            }];
            // `write_back` is there only when the reference's switch lets it be written.
            if let Some(reference) = &step.write_back {
                effects.push(Effect::WriteBack {
                    statefulset: name.clone(),
                    reference: reference.clone(),
                    replicas,
                });
            }
            Concluded {
                effects,
                again: None,
            }
        }
        DelayedDownscaleDecision::Wait { until } => {
            let last = names.at(from - 1);
            Concluded {
                effects: vec![Effect::Tell {
                    statefulset: name.clone(),
                    explanation: explained(
                        Severity::Normal,
                        reasons::DELAYED_DOWNSCALE_WAITING,
                        "Wait",
                        format!(
                            "{name} stays at {from} (wanted {to}): delayed downscale of {shown}; {last} may go at {until}"
                        ),
                    ),
                }],
                again: Some(Again::At(until)),
            }
        }
        DelayedDownscaleDecision::Blocked { failures } => {
            let detail: Vec<String> = failures
                .iter()
                .map(|(pod, error)| format!("{pod}: {error}"))
                .collect();
            Concluded {
                effects: vec![Effect::Tell {
                    statefulset: name.clone(),
                    explanation: explained(
                        Severity::Warning,
                        reasons::DELAYED_DOWNSCALE_FAILED,
                        "Prepare",
                        format!(
                            "{name} stays at {from} (wanted {to}): pods could not be prepared for delayed downscale: {}",
                            detail.join("; ")
                        ),
                    ),
                }],
                again: Some(Again::Poll),
            }
        }
    }
}

/// How a refused or failed `/scale` call is told, with the API server's words.
pub fn scale_failed(statefulset: &str, from: i32, to: i32, error: &str) -> Explanation {
    explained(
        Severity::Warning,
        reasons::DENIED,
        "Scale",
        format!("{statefulset} stays at {from}: scaling it to {to} failed: {error}"),
    )
}

/// How a reference whose status could not be written is told.
pub fn write_back_failed(reference: &MirrorReference, replicas: i32, error: &str) -> Explanation {
    explained(
        Severity::Warning,
        reasons::REFERENCE_UNAVAILABLE,
        "WriteBack",
        format!(
            "could not write status.replicas={replicas} back to {} {}: {error}",
            reference.kind, reference.name
        ),
    )
}

/// Follows up the first pending claim whose fate is known (one ledger write per pass: the next
/// needs the version the first produced, and its watch event brings the group back); claims
/// still in flight before it say when to look again.
fn follow_up(read: &Read<'_>, pass: &mut ScalingPass) {
    let records = read.records;
    let claims = follow_up_claims(
        records.ledger,
        read.statefulsets.iter().map(Arc::as_ref),
        read.now,
        records.claim_grace,
    );
    for claim in claims {
        match claim {
            ClaimFollowUp::Recheck { at } => pass.again.push(Again::At(at)),
            ClaimFollowUp::Confirm { statefulset, entry } => {
                confirm(read, &statefulset, &entry, pass);
                return;
            }
            ClaimFollowUp::Void { statefulset, entry } => {
                void(read, &statefulset, &entry, pass);
                return;
            }
        }
    }
}

fn statefulset<'r>(read: &Read<'r>, name: &str) -> Option<&'r StatefulSet> {
    read.statefulsets
        .iter()
        .map(Arc::as_ref)
        .find(|statefulset| statefulset.metadata.name.as_deref() == Some(name))
}

/// A downscale that happened: into the tracker and the annotation, its staying pods told to
/// cancel, then confirmed. These writes wait until now because the webhook must not write the
/// object it is admitting (the update would fail on its own resourceVersion).
fn confirm(read: &Read<'_>, name: &str, entry: &Entry, pass: &mut ScalingPass) {
    let Some(object) = statefulset(read, name) else {
        return;
    };
    let at = match entry.at() {
        Ok(at) => at,
        Err(why) => {
            pass.effects.push(Effect::FollowUp(FollowUp::Unreadable {
                statefulset: name.to_owned(),
                why: format!("the entry changed meanwhile: {why}"),
            }));
            return;
        }
    };
    // Both copies hold whole seconds, as the Go operator writes them.
    let at = Timestamp::from_second(at.as_second()).unwrap_or(at);
    if !matches!(read.records.tracker.last_downscaled(name), Ok(Some(tracked)) if tracked >= at) {
        pass.effects
            .push(Effect::FollowUp(FollowUp::RecordInTracker {
                statefulset: name.to_owned(),
                at,
            }));
    }
    let annotated = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(LAST_DOWNSCALE_ANNOTATION))
        .and_then(|text| text.parse::<Timestamp>().ok());
    if annotated.is_none_or(|annotated| annotated < at) {
        pass.effects
            .push(Effect::FollowUp(FollowUp::AnnotateLastDownscale {
                statefulset: name.to_owned(),
                at,
            }));
    }
    // Pods the downscale no longer removes (scaled up again since, or another change moved the
    // generation while this update failed) must not stay prepared.
    let cancelled = cancel_preparation(read, object, entry, pass);
    pass.effects.push(Effect::FollowUp(FollowUp::StoreInLedger {
        statefulset: name.to_owned(),
        followed: entry.clone(),
        entry: Some(entry.confirmed()),
    }));
    let (from, to) = (
        entry.from_replicas.unwrap_or(0),
        entry.to_replicas.unwrap_or(0),
    );
    let mut note = format!(
        "{name} was downscaled from {from} to {to} at {at}; recorded in the zone tracker {} and the {LAST_DOWNSCALE_ANNOTATION} annotation",
        read.tracker
    );
    if !cancelled.is_empty() {
        note.push_str(&format!(
            "; {} stay and were told to cancel their preparation",
            cancelled.join(", ")
        ));
    }
    pass.effects.push(Effect::Tell {
        statefulset: name.to_owned(),
        explanation: explained(Severity::Normal, DOWNSCALE_RECORDED, "Record", note),
    });
}

/// A downscale that never landed (the update failed after admission): its pods told to cancel,
/// the downscale before it put back, so it no longer holds the other zones.
fn void(read: &Read<'_>, name: &str, entry: &Entry, pass: &mut ScalingPass) {
    let Some(object) = statefulset(read, name) else {
        return;
    };
    let cancelled = cancel_preparation(read, object, entry, pass);
    let previous = entry
        .previous
        .as_deref()
        .and_then(|text| text.parse::<Timestamp>().ok())
        .map(|at| Entry::new(at, &entry.request));
    pass.effects.push(Effect::FollowUp(FollowUp::StoreInLedger {
        statefulset: name.to_owned(),
        followed: entry.clone(),
        entry: previous,
    }));
    let (from, to) = (
        entry.from_replicas.unwrap_or(0),
        entry.to_replicas.unwrap_or(0),
    );
    let told = if cancelled.is_empty() {
        String::new()
    } else {
        format!(
            "; {} were told to cancel their preparation",
            cancelled.join(", ")
        )
    };
    pass.effects.push(Effect::Tell {
        statefulset: name.to_owned(),
        explanation: explained(
            Severity::Warning,
            DOWNSCALE_NOT_APPLIED,
            "Release",
            format!(
                "the downscale of {name} from {from} to {to} approved at {} never happened (its spec is unchanged {} later): it no longer holds other zones' downscales{told}",
                entry.last_downscale,
                prometheus_duration::format(read.records.claim_grace),
            ),
        ),
    });
}

/// The pods [`pods_to_cancel`] names that can be called, told to undo their preparation;
/// returns their names.
fn cancel_preparation(
    read: &Read<'_>,
    statefulset: &StatefulSet,
    entry: &Entry,
    pass: &mut ScalingPass,
) -> Vec<String> {
    let Ok(prepare) = PrepareEndpoint::of(statefulset) else {
        return Vec::new();
    };
    let calls = read.calls;
    let (mut pods, mut unreachable) = (Vec::new(), Vec::new());
    for pod in pods_to_cancel(entry, statefulset, read.pods.iter().map(AsRef::as_ref)) {
        match prepare.of_pod(
            calls.addressing,
            calls.cluster_domain,
            &pod.name,
            &pod.namespace,
            pod.ip.as_deref(),
        ) {
            Ok(endpoint) => pods.push(endpoint),
            Err(error) => unreachable.push(error),
        }
    }
    let names = pods.iter().map(|endpoint| endpoint.pod.clone()).collect();
    pass.effects
        .push(Effect::FollowUp(FollowUp::CancelPreparation {
            request: entry.request.clone(),
            pods,
            unreachable,
        }));
    names
}

#[cfg(test)]
mod tests;
