//! prepare-downscale's order as a pure sequence: which read, write or pod call comes next, given
//! what the earlier ones answered. The webhook drives it ([`Flow::start`], then
//! [`Flow::advance`] with each answer until [`Step::Answer`]) and does only the I/O; every
//! decision and its place in the order is here, where it is tested step by step.
//!
//! The order: read the StatefulSet as stored (a review's copy is only what its sender says) →
//! in a rollout group, list the group, read its ledger and the Go operator's zone tracker and
//! judge min-time → list the other members' pods and judge their readiness → claim the
//! downscale in the ledger (a write conditioned on the version judged; after a conflict, read
//! again and judge again, at most [`CLAIM_ATTEMPTS`] writes) → list the StatefulSet's pods and
//! POST to those going away. A failure after the claim undoes both: DELETE to every pod that
//! may have been told, and the claim released ([`Release`]), at the same time so a hanging pod
//! cannot keep the claim held.
//!
//! Bounded by construction: one read of the StatefulSet, one list of the group, one read of
//! each record, one pod list a member, at most [`CLAIM_ATTEMPTS`] ledger writes (and as many
//! re-reads) forward and as many to release. No step writes a StatefulSet: the API server is
//! still admitting an update of the one judged, which any write would fail with a conflict.
//! The claim is the record; the controller copies it into the `last-downscale` annotation and
//! the zone tracker once it sees the update land, and voids it when the update never lands.
//!
//! With member clusters ([`Settings::members`]), the claim in a group is also a claim across
//! them ([`crate::member_claims`]): the write to the own ledger carries it too (judged there
//! first: a claim the own ledger holds back is refused without a write), and once that write
//! is in, [`Io::ClaimMembers`] has the driver claim in the other members' ledgers, all at once,
//! until a majority accepted (the approval warns of the members that did not) or every member
//! answered without one: then the downscale is refused, retryably, and the own ledger's claim
//! released with the rest. Without members, nothing of this runs.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube_core::Selector;

use crate::annotations::ROLLOUT_GROUP_LABEL;
use crate::annotations::scaling::min_time_between_zones_downscale;
use crate::downscale_history::{MalformedTrackerEntry, Records, ZoneTracker};
use crate::ledger::{CLAIM_ATTEMPTS, Entry, Ledger, Written, ledger_name};
use crate::member_claims::{self, MemberClaim};
use crate::pod_address::{PodAddressing, PodEndpoint};
use crate::pods::{CachedPod, is_controlled_by};
use crate::statefulset::StatefulSetState;

use super::super::downscale::{Downscale, StoredAs};
use super::super::verdict::{Reason, Verdict};
use super::{
    MemberReadiness, Target, allowed, check_statefulset, endpoints, failed, foreign_namespace,
    judge_min_time, judge_readiness, ledger_contended, not_as_stored, pods_failed,
};

/// A downscale that needs the StatefulSet's preparation, as the review gives it.
#[derive(Debug, Clone)]
pub struct PrepareRequest {
    pub uid: String,
    pub downscale: Downscale,
    /// Which stored StatefulSet, at which version, the review says it updates: acted on only
    /// if the live read is that one (a forged review must guess both).
    pub stored_as: StoredAs,
}

/// The replica's settings the flow decides with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The namespace this replica serves.
    pub namespace: String,
    /// The Go operator's zone tracker ConfigMap.
    pub zone_tracker: String,
    /// How long an approved downscale may take to land ([`Entry::judge`]).
    pub claim_grace: Duration,
    pub addressing: PodAddressing,
    pub cluster_domain: String,
    /// With member clusters (`webhook.clusters`): a group's downscale is claimed across them.
    /// `None`: this cluster alone.
    pub members: Option<MemberSettings>,
}

/// How a downscale is claimed across member clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSettings {
    /// This webhook's own cluster: its ledger is the one the flow writes.
    pub cluster: String,
    /// A claim's lifetime: the request's deadline ([`member_claims::judge`]).
    pub lifetime: Duration,
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Do this, and give its answer to [`Flow::advance`].
    Do(Io),
    /// Undo within what is left of the request's time, both at once: DELETE to each of `pods`
    /// (every one, whatever the others answer) and drive `release` to its end; then give
    /// [`Reply::Undone`].
    Undo {
        pods: Vec<PodEndpoint>,
        release: Option<Release>,
    },
    /// The end: answer the review with this.
    Answer(Verdict),
}

/// A read, a write or pod calls. Every read and list is in the namespace served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// Read the StatefulSet `name`; answer [`Reply::StatefulSet`].
    ReadStatefulSet { name: String },
    /// List the StatefulSets matching `selector` (the group); answer [`Reply::Group`].
    ListGroup { selector: String },
    /// Read the ledger and the zone tracker, both ConfigMaps by name (together: neither needs
    /// the other); answer [`Reply::Records`].
    ReadRecords { ledger: String, tracker: String },
    /// List the pods matching `selector`; answer [`Reply::Pods`]. Only those the StatefulSet
    /// controls are counted or called, whatever else the list holds.
    ListPods { selector: String },
    /// Write `ledger` as ConfigMap `name` labelled with `group`, conditioned on its version
    /// (created when it has none); answer [`Reply::Written`].
    WriteLedger {
        name: String,
        group: String,
        ledger: Ledger,
    },
    /// Read the ledger `name` again; answer [`Reply::Ledger`].
    ReadLedger { name: String },
    /// POST to every pod going away, stopping at the first failure; answer [`Reply::Prepared`].
    Prepare { pods: Vec<PodEndpoint> },
    /// Claim `claim` under `key` in the ledger `ledger` (labelled with `group`) of the other
    /// member clusters, all asked at once, as [`member_claims::next`] decides from their
    /// answers (`cluster`'s accepted already), each claim judged by [`member_claims::judge`]
    /// and written conditioned on the version judged; withdraw it from those that accepted
    /// when every member answered without a majority; answer [`Reply::Members`].
    ClaimMembers {
        cluster: String,
        ledger: String,
        group: String,
        key: String,
        claim: MemberClaim,
        /// Names the change in the refusal.
        downscale: String,
    },
}

/// What a step gave; an error is its text, named in the denial.
#[derive(Debug, Clone)]
pub enum Reply {
    StatefulSet(Result<Box<StatefulSet>, String>),
    Group(Result<Vec<StatefulSet>, String>),
    Records {
        ledger: Result<Ledger, String>,
        tracker: Result<ZoneTracker, String>,
    },
    Pods(Result<Vec<CachedPod>, String>),
    Ledger(Result<Ledger, String>),
    Written(Result<Written, String>),
    Prepared(Result<(), String>),
    /// Approved across the members (with a warning for each member that did not accept), or
    /// the refusal's message.
    Members(Result<Vec<String>, String>),
    Undone,
}

/// What happened on the way that operators should read in the log (the answer says what the
/// review's sender may know, this says the rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// A review for a namespace this replica does not serve: the webhook configuration's
    /// namespaceSelector must select only the served one.
    ForeignNamespace { served: String, review: String },
    /// The review does not describe the StatefulSet as stored; nothing prepared.
    NotAsStored {
        stored_replicas: i32,
        stored: StoredAs,
        review: StoredAs,
    },
    /// A read or write the decision needs failed: `what` names it.
    StepFailed { what: String, error: String },
    /// Entries of the group's members in the zone tracker that are malformed (each counted as
    /// a downscale now), with the tracker's version: the same version need be logged once.
    MalformedTracker {
        version: Option<String>,
        entries: Vec<MalformedTrackerEntry>,
    },
    /// Another replica wrote the ledger first; judging again.
    LedgerChanged,
    /// The downscale is claimed in `ledger`.
    Claimed { ledger: String },
    /// The same downscale was prepared moments ago (the API server admits it again): its pods
    /// are not told twice.
    PreparedAlready,
    /// A pod failed to prepare; undoing.
    PodFailed { error: String },
    /// Every pod going away was told.
    Prepared,
}

/// prepare-downscale for one request: where it is in the order, and what it has read.
#[derive(Debug)]
pub struct Flow {
    settings: Settings,
    request: PrepareRequest,
    stage: Stage,
    notes: Vec<Note>,
    /// What the allowance warns of (the members that did not take the claim).
    warnings: Vec<String>,
}

#[derive(Debug)]
enum Stage {
    ReadingStatefulSet,
    /// In group `.1`.
    ListingGroup(Admitted, String),
    ReadingRecords(Admitted, String, Vec<StatefulSet>),
    CheckingReadiness(Box<Grouped>, Ledger, Vec<MemberReadiness>),
    /// A claim write is out; `writes` counts those made, this one included.
    Claiming(Box<Grouped>, Claim, usize),
    /// The claim is in the own ledger, and out to the other members'.
    ClaimingMembers(Box<Grouped>, Claim),
    /// The ledger is being read again after `writes` lost races.
    Rereading(Box<Grouped>, usize),
    ListingPods(Admitted, Option<Claim>),
    Preparing(Vec<PodEndpoint>, Option<Claim>),
    Undoing(Verdict),
    Done,
}

/// The StatefulSet being downscaled, as stored, and what its pods are told.
#[derive(Debug)]
struct Admitted {
    statefulset: StatefulSet,
    target: Target,
}

/// What a group's judgement is made on besides the ledger.
#[derive(Debug)]
struct Grouped {
    admitted: Admitted,
    group: String,
    ledger: String,
    members: Vec<StatefulSet>,
    tracker: ZoneTracker,
}

/// A claim written (or being written) in a group's ledger, and what it replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    ledger: String,
    group: String,
    previous: Option<Entry>,
    /// It replaced a claim of the same downscale whose pods were told moments ago.
    prepared: bool,
    /// Its claim across member clusters, under this key (boxed: most claims have none).
    member: Option<Box<(String, MemberClaim)>>,
}

impl Flow {
    /// The flow for `request`, and its first step.
    pub fn start(settings: Settings, request: PrepareRequest) -> (Self, Step) {
        let mut flow = Self {
            settings,
            request,
            stage: Stage::ReadingStatefulSet,
            notes: Vec::new(),
            warnings: Vec::new(),
        };
        let downscale = &flow.request.downscale;
        let step = if downscale.namespace == flow.settings.namespace {
            Step::Do(Io::ReadStatefulSet {
                name: downscale.name.clone(),
            })
        } else {
            // The answer does not tell a sender which namespace to forge reviews for; the
            // note tells whoever fixes the configuration.
            flow.notes.push(Note::ForeignNamespace {
                served: flow.settings.namespace.clone(),
                review: downscale.namespace.clone(),
            });
            flow.answer(foreign_namespace(downscale))
        };
        (flow, step)
    }

    /// What happened since the last call, for the log.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    /// The step after `reply`, the answer to the last step, given at `now`.
    pub fn advance(&mut self, reply: Reply, now: Timestamp) -> Step {
        match (std::mem::replace(&mut self.stage, Stage::Done), reply) {
            (Stage::ReadingStatefulSet, Reply::StatefulSet(read)) => self.judge_stored(read),
            (Stage::ListingGroup(admitted, group), Reply::Group(listed)) => match listed {
                Ok(members) => self.read_records(admitted, group, members),
                Err(error) => self.fail("finding other statefulsets", &error, None),
            },
            (
                Stage::ReadingRecords(admitted, group, members),
                Reply::Records { ledger, tracker },
            ) => {
                let members = (group, members);
                self.judge_records(admitted, members, ledger, tracker, now)
            }
            (Stage::CheckingReadiness(grouped, ledger, readiness), Reply::Pods(listed)) => {
                self.count_ready(grouped, ledger, readiness, listed, now)
            }
            (Stage::Claiming(grouped, claim, writes), Reply::Written(written)) => {
                self.claim_written(grouped, claim, writes, written)
            }
            (Stage::ClaimingMembers(grouped, claim), Reply::Members(claimed)) => match claimed {
                Ok(warnings) => {
                    self.warnings = warnings;
                    self.claimed(grouped, claim)
                }
                Err(message) => {
                    let verdict = Verdict::refuse_for_now(Reason::NoMajority, message);
                    self.undo(verdict, Vec::new(), Some(claim))
                }
            },
            (Stage::Rereading(grouped, writes), Reply::Ledger(read)) => match read {
                Ok(ledger) => self.claim(*grouped, &ledger, writes, now),
                Err(error) => self.fail("reading the group's downscale ledger", &error, None),
            },
            (Stage::ListingPods(admitted, claim), Reply::Pods(listed)) => {
                self.call_pods(&admitted, claim, listed)
            }
            (Stage::Preparing(pods, claim), Reply::Prepared(called)) => match called {
                Ok(()) => self.prepared(),
                Err(error) => {
                    self.notes.push(Note::PodFailed {
                        error: error.clone(),
                    });
                    let verdict = pods_failed(&self.request.downscale, &error);
                    self.undo(verdict, pods, claim)
                }
            },
            (Stage::Undoing(verdict), Reply::Undone) => self.answer(verdict),
            (stage, reply) => self.out_of_order(&stage, &reply),
        }
    }

    /// Judged on the StatefulSet as stored, whatever the review says of it; it cannot be
    /// judged without it (failurePolicy Fail: refused, never let through unprepared).
    fn judge_stored(&mut self, read: Result<Box<StatefulSet>, String>) -> Step {
        let downscale = &self.request.downscale;
        let statefulset = match read {
            Ok(statefulset) => *statefulset,
            Err(error) => {
                let what = format!(
                    "reading statefulsets/{} in namespace {}",
                    downscale.name, downscale.namespace
                );
                return self.fail(&what, &error, None);
            }
        };
        let stored_replicas = StatefulSetState::of(&statefulset).replicas;
        if stored_replicas != downscale.from
            || !self.request.stored_as.matches(&statefulset.metadata)
        {
            // What differs goes to the log (operators read it), not into the answer.
            self.notes.push(Note::NotAsStored {
                stored_replicas,
                stored: StoredAs {
                    uid: statefulset.metadata.uid.clone(),
                    resource_version: statefulset.metadata.resource_version.clone(),
                },
                review: self.request.stored_as.clone(),
            });
            return self.answer(not_as_stored(downscale));
        }
        let target = match check_statefulset(downscale, &statefulset) {
            Ok(target) => target,
            Err(verdict) => return self.answer(verdict),
        };
        let admitted = Admitted {
            statefulset,
            target,
        };
        match admitted.target.group.clone() {
            Some(group) => {
                let selector = format!("{ROLLOUT_GROUP_LABEL}={group}");
                self.stage = Stage::ListingGroup(admitted, group);
                Step::Do(Io::ListGroup { selector })
            }
            None => self.list_pods(admitted, None),
        }
    }

    fn read_records(
        &mut self,
        admitted: Admitted,
        group: String,
        members: Vec<StatefulSet>,
    ) -> Step {
        let step = Step::Do(Io::ReadRecords {
            ledger: ledger_name(&group),
            tracker: self.settings.zone_tracker.clone(),
        });
        self.stage = Stage::ReadingRecords(admitted, group, members);
        step
    }

    /// min-time, on the ledger and the tracker as read; `members` of the group named.
    fn judge_records(
        &mut self,
        admitted: Admitted,
        (group, members): (String, Vec<StatefulSet>),
        ledger: Result<Ledger, String>,
        tracker: Result<ZoneTracker, String>,
        now: Timestamp,
    ) -> Step {
        let ledger = match ledger {
            Ok(ledger) => ledger,
            Err(error) => return self.fail("reading the group's downscale ledger", &error, None),
        };
        let tracker = match tracker {
            Ok(tracker) => tracker,
            Err(error) => {
                let what = format!("reading the zone tracker {}", self.settings.zone_tracker);
                return self.fail(&what, &error, None);
            }
        };
        let names = members
            .iter()
            .filter_map(|member| member.metadata.name.as_deref());
        let malformed = tracker.malformed(names);
        if !malformed.is_empty() {
            self.notes.push(Note::MalformedTracker {
                version: tracker.resource_version.clone(),
                entries: malformed,
            });
        }
        let grouped = Box::new(Grouped {
            admitted,
            ledger: ledger_name(&group),
            group,
            members,
            tracker,
        });
        if let Err(denied) = self.judge_min_time(&grouped, &ledger, now) {
            return self.answer(denied);
        }
        self.next_readiness(grouped, ledger, Vec::new(), now)
    }

    fn judge_min_time(
        &self,
        grouped: &Grouped,
        ledger: &Ledger,
        now: Timestamp,
    ) -> Result<(), Verdict> {
        let records = Records {
            ledger,
            tracker: &grouped.tracker,
            claim_grace: self.settings.claim_grace,
        };
        judge_min_time(&self.request.downscale, &grouped.members, records, now)
    }

    /// The other members, in the group's order: the one whose pods are listed next is the
    /// first not yet counted.
    fn others<'a>(&self, grouped: &'a Grouped) -> impl Iterator<Item = &'a StatefulSet> {
        let name = self.request.downscale.name.clone();
        grouped
            .members
            .iter()
            .filter(move |member| member.metadata.name.as_deref() != Some(&name))
    }

    /// Lists the next other member's pods, or judges readiness once all are counted and then
    /// claims, at `now`.
    fn next_readiness(
        &mut self,
        grouped: Box<Grouped>,
        ledger: Ledger,
        readiness: Vec<MemberReadiness>,
        now: Timestamp,
    ) -> Step {
        let Some(member) = self.others(&grouped).nth(readiness.len()) else {
            if let Err(denied) = judge_readiness(&self.request.downscale, &readiness) {
                return self.answer(denied);
            }
            return self.claim(*grouped, &ledger, 0, now);
        };
        let selector = pod_selector(member);
        self.stage = Stage::CheckingReadiness(grouped, ledger, readiness);
        Step::Do(Io::ListPods { selector })
    }

    fn count_ready(
        &mut self,
        grouped: Box<Grouped>,
        ledger: Ledger,
        mut readiness: Vec<MemberReadiness>,
        listed: Result<Vec<CachedPod>, String>,
        now: Timestamp,
    ) -> Step {
        let pods = match listed {
            Ok(pods) => pods,
            Err(error) => {
                let what = "checking whether StatefulSets have non-updated replicas";
                return self.fail(what, &error, None);
            }
        };
        if let Some(member) = self.others(&grouped).nth(readiness.len()) {
            readiness.push(MemberReadiness::of(member, &pods, now));
        }
        self.next_readiness(grouped, ledger, readiness, now)
    }

    /// Judges min-time again on `ledger` (the one judged first, or a fresh read after another
    /// replica wrote) and writes the claim conditioned on its version; `writes` were made
    /// before.
    fn claim(&mut self, grouped: Grouped, ledger: &Ledger, writes: usize, now: Timestamp) -> Step {
        if let Err(denied) = self.judge_min_time(&grouped, ledger, now) {
            return self.answer(denied);
        }
        let downscale = &self.request.downscale;
        let generation = grouped.admitted.statefulset.metadata.generation;
        let previous = ledger.entry(&downscale.name).ok().flatten();
        // What a void of this claim puts back: the last downscale before it.
        let replaced = previous
            .as_ref()
            .and_then(|entry| entry.history(generation, now, self.settings.claim_grace));
        let prepared = previous.as_ref().is_some_and(|entry| {
            entry.prepared_the_same(
                (downscale.from, downscale.to),
                generation,
                now,
                self.settings.claim_grace,
            )
        });
        let entry = Entry::claim(
            now,
            &self.request.uid,
            (downscale.from, downscale.to),
            generation.unwrap_or_default(),
            replaced,
        );
        let mut written = ledger.with_entry(&downscale.name, Some(&entry));
        let member = match self.member_claim(&grouped, &written, now) {
            Ok(None) => None,
            Ok(Some((key, claim, accepted))) => {
                written = accepted;
                Some(Box::new((key, claim)))
            }
            Err(denied) => return self.answer(denied),
        };
        let step = Step::Do(Io::WriteLedger {
            name: grouped.ledger.clone(),
            group: grouped.group.clone(),
            ledger: written,
        });
        let claim = Claim {
            ledger: grouped.ledger.clone(),
            group: grouped.group.clone(),
            previous,
            prepared,
            member,
        };
        self.stage = Stage::Claiming(Box::new(grouped), claim, writes + 1);
        step
    }

    /// With members, the claim across them as the own ledger (`ledger`, with the entry
    /// written) judges it: its key, the claim, and the ledger that carries it; a refusal when
    /// the own ledger holds it back, or the StatefulSet's min-time cannot be read.
    fn member_claim(
        &self,
        grouped: &Grouped,
        ledger: &Ledger,
        now: Timestamp,
    ) -> Result<Option<(String, MemberClaim, Ledger)>, Verdict> {
        let Some(members) = &self.settings.members else {
            return Ok(None);
        };
        let downscale = &self.request.downscale;
        let metadata = &grouped.admitted.statefulset.metadata;
        let empty = std::collections::BTreeMap::new();
        let min_time = min_time_between_zones_downscale(
            metadata.labels.as_ref().unwrap_or(&empty),
            metadata.annotations.as_ref().unwrap_or(&empty),
        )
        .map_err(|invalid| {
            Verdict::refuse(
                Reason::DownscaleHistoryUnreadable,
                format!(
                    "{downscale} is not allowed because parsing downscale annotations failed: can't parse {} of {}: {:?} is not {}",
                    invalid.key, downscale.name, invalid.value, invalid.accepted
                ),
            )
        })?
        .value
        .unwrap_or_default();
        let uid = &self.request.uid;
        let key = member_claims::key(&members.cluster, &downscale.name, uid);
        let claim = MemberClaim::new(now, min_time, uid);
        let judged = member_claims::judge(ledger, &key, &claim, now, members.lifetime);
        match (&judged, member_claims::Reached::of(&judged)) {
            (member_claims::Judged::Accepts(accepted), _) => {
                Ok(Some((key, claim, accepted.clone())))
            }
            (
                _,
                member_claims::Reached::Refused(why) | member_claims::Reached::Unreachable(why),
            ) => Err(Verdict::refuse_for_now(
                Reason::NoMajority,
                format!(
                    "{downscale} is not allowed yet: member cluster {} (this one) {why}; retry later",
                    members.cluster
                ),
            )),
            (_, member_claims::Reached::Accepted) => Ok(None),
        }
    }

    fn claim_written(
        &mut self,
        grouped: Box<Grouped>,
        claim: Claim,
        writes: usize,
        written: Result<Written, String>,
    ) -> Step {
        match written {
            Ok(Written::Done(_)) => {
                self.notes.push(Note::Claimed {
                    ledger: claim.ledger.clone(),
                });
                match (&self.settings.members, claim.member.as_deref()) {
                    (Some(members), Some((key, member))) => {
                        let step = Step::Do(Io::ClaimMembers {
                            cluster: members.cluster.clone(),
                            ledger: claim.ledger.clone(),
                            group: claim.group.clone(),
                            key: key.clone(),
                            claim: member.clone(),
                            downscale: self.request.downscale.to_string(),
                        });
                        self.stage = Stage::ClaimingMembers(grouped, claim);
                        step
                    }
                    _ => self.claimed(grouped, claim),
                }
            }
            Ok(Written::Conflict) if writes < CLAIM_ATTEMPTS => {
                self.notes.push(Note::LedgerChanged);
                let step = Step::Do(Io::ReadLedger {
                    name: grouped.ledger.clone(),
                });
                self.stage = Stage::Rereading(grouped, writes);
                step
            }
            // Nothing of ours was written: nothing to undo.
            Ok(Written::Conflict) => {
                self.answer(ledger_contended(&self.request.downscale, &grouped.ledger))
            }
            Err(error) => self.fail(
                "recording the downscale in the group's ledger",
                &error,
                None,
            ),
        }
    }

    /// The claim is in (in a majority of the members' ledgers, with members): the pods are
    /// told, unless they were moments ago.
    fn claimed(&mut self, grouped: Box<Grouped>, claim: Claim) -> Step {
        if claim.prepared {
            self.notes.push(Note::PreparedAlready);
            return self.allow();
        }
        self.list_pods(grouped.admitted, Some(claim))
    }

    /// Lists the pods of the StatefulSet: only those that exist are told (see [`endpoints`]).
    fn list_pods(&mut self, admitted: Admitted, claim: Option<Claim>) -> Step {
        let selector = pod_selector(&admitted.statefulset);
        self.stage = Stage::ListingPods(admitted, claim);
        Step::Do(Io::ListPods { selector })
    }

    fn call_pods(
        &mut self,
        admitted: &Admitted,
        claim: Option<Claim>,
        listed: Result<Vec<CachedPod>, String>,
    ) -> Step {
        let downscale = &self.request.downscale;
        let existing = match listed {
            Ok(pods) => pods
                .into_iter()
                .filter(|pod| is_controlled_by(pod, &admitted.statefulset))
                .map(|pod| (pod.name, pod.ip))
                .collect(),
            Err(error) => return self.fail("listing its pods", &error, claim),
        };
        let settings = &self.settings;
        match endpoints(
            downscale,
            &admitted.target,
            settings.addressing,
            &settings.cluster_domain,
            &existing,
        ) {
            Ok(pods) => {
                self.stage = Stage::Preparing(pods.clone(), claim);
                Step::Do(Io::Prepare { pods })
            }
            Err(verdict) => self.undo(verdict, Vec::new(), claim),
        }
    }

    fn prepared(&mut self) -> Step {
        self.notes.push(Note::Prepared);
        self.allow()
    }

    /// Refuses because `what` failed, undoing `claim` if one is held.
    fn fail(&mut self, what: &str, error: &str, claim: Option<Claim>) -> Step {
        self.notes.push(Note::StepFailed {
            what: what.to_owned(),
            error: error.to_owned(),
        });
        let verdict = failed(&self.request.downscale, what, &error);
        self.undo(verdict, Vec::new(), claim)
    }

    /// Undoes what was done (`pods` told, `claim` held), then answers `verdict`; answers at
    /// once when nothing was done.
    fn undo(&mut self, verdict: Verdict, pods: Vec<PodEndpoint>, claim: Option<Claim>) -> Step {
        if pods.is_empty() && claim.is_none() {
            return self.answer(verdict);
        }
        let release = claim.map(|claim| Release {
            uid: self.request.uid.clone(),
            statefulset: self.request.downscale.name.clone(),
            ledger: claim.ledger,
            group: claim.group,
            previous: claim.previous,
            member: claim.member.map(|member| member.0),
            writes: 0,
        });
        self.stage = Stage::Undoing(verdict);
        Step::Undo { pods, release }
    }

    /// Allowed, warning of what was noted on the way.
    fn allow(&mut self) -> Step {
        let mut verdict = allowed(&self.request.downscale);
        if let Verdict::Allow(allowed) = &mut verdict {
            allowed.warnings.append(&mut self.warnings);
        }
        self.answer(verdict)
    }

    fn answer(&mut self, verdict: Verdict) -> Step {
        self.stage = Stage::Done;
        Step::Answer(verdict)
    }

    /// A reply that is not the answer to the last step: the driver's mistake. Refused (the
    /// controller voids a claim whose update never lands).
    fn out_of_order(&mut self, stage: &Stage, reply: &Reply) -> Step {
        let message = format!(
            "the downscale could not be prepared: internal error: {} answered while {}",
            reply.name(),
            stage.name()
        );
        self.answer(Verdict::refuse(Reason::Internal, message))
    }
}

impl Reply {
    fn name(&self) -> &'static str {
        match self {
            Reply::StatefulSet(_) => "a StatefulSet read",
            Reply::Group(_) => "a group list",
            Reply::Records { .. } => "a records read",
            Reply::Pods(_) => "a pod list",
            Reply::Ledger(_) => "a ledger read",
            Reply::Written(_) => "a ledger write",
            Reply::Prepared(_) => "the pod calls",
            Reply::Members(_) => "the claim across members",
            Reply::Undone => "the undo",
        }
    }
}

impl Stage {
    fn name(&self) -> &'static str {
        match self {
            Stage::ReadingStatefulSet => "reading the StatefulSet",
            Stage::ListingGroup(..) => "listing the group",
            Stage::ReadingRecords(..) => "reading the records",
            Stage::CheckingReadiness(..) => "checking the other members' readiness",
            Stage::Claiming(..) => "writing the claim",
            Stage::ClaimingMembers(..) => "claiming across the members",
            Stage::Rereading(..) => "reading the ledger again",
            Stage::ListingPods(..) => "listing the pods",
            Stage::Preparing(..) => "calling the pods",
            Stage::Undoing(..) => "undoing",
            Stage::Done => "done",
        }
    }
}

/// Releasing a claim after a failure: puts back the entry the claim replaced, if the claim is
/// still ours (a later one is someone else's to follow up). Driven like the flow: [`start`],
/// then [`advance`] with each answer until [`ReleaseStep::Done`].
///
/// [`start`]: Release::start
/// [`advance`]: Release::advance
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    uid: String,
    statefulset: String,
    ledger: String,
    group: String,
    previous: Option<Entry>,
    /// The key of its claim across member clusters in this ledger, withdrawn with it.
    member: Option<String>,
    /// Writes made so far.
    writes: usize,
}

/// The next thing a release does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseStep {
    /// Do this ([`Io::ReadLedger`] or [`Io::WriteLedger`]), and give its answer to
    /// [`Release::advance`].
    Do(Io),
    Done(Released),
}

/// How a release ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The entry the claim replaced is back.
    Restored,
    /// The claim is no longer ours: nothing to put back.
    NotOurs,
    /// A read or a write failed: the claim stays, and the group waits its min-time (the
    /// controller voids it once the update is seen never to land).
    Failed(String),
    /// Others wrote first at every attempt.
    KeptChanging,
}

impl Release {
    /// The ledger it releases its claim in.
    pub fn ledger(&self) -> &str {
        &self.ledger
    }

    pub fn start(&mut self) -> ReleaseStep {
        ReleaseStep::Do(Io::ReadLedger {
            name: self.ledger.clone(),
        })
    }

    /// The step after `reply`, the answer to the last one.
    pub fn advance(&mut self, reply: Reply) -> ReleaseStep {
        match reply {
            Reply::Ledger(Ok(current)) => match current.entry(&self.statefulset) {
                Ok(Some(entry)) if entry.request == self.uid => {
                    self.writes += 1;
                    let mut ledger = current.with_entry(&self.statefulset, self.previous.as_ref());
                    if let Some(key) = &self.member
                        && let Some(without) = member_claims::withdrawn(&ledger, key, &self.uid)
                    {
                        ledger = without;
                    }
                    ReleaseStep::Do(Io::WriteLedger {
                        name: self.ledger.clone(),
                        group: self.group.clone(),
                        ledger,
                    })
                }
                _ => ReleaseStep::Done(Released::NotOurs),
            },
            Reply::Written(Ok(Written::Done(_))) => ReleaseStep::Done(Released::Restored),
            Reply::Written(Ok(Written::Conflict)) if self.writes < CLAIM_ATTEMPTS => self.start(),
            Reply::Written(Ok(Written::Conflict)) => ReleaseStep::Done(Released::KeptChanging),
            Reply::Ledger(Err(error)) | Reply::Written(Err(error)) => {
                ReleaseStep::Done(Released::Failed(error))
            }
            other => ReleaseStep::Done(Released::Failed(format!(
                "internal error: {} answered a release",
                other.name()
            ))),
        }
    }
}

/// The label selector listing `statefulset`'s pods, as the API takes it; empty (every pod,
/// none of which it then controls) when it has none usable.
fn pod_selector(statefulset: &StatefulSet) -> String {
    statefulset
        .spec
        .as_ref()
        .and_then(|spec| Selector::try_from(spec.selector.clone()).ok())
        .map(|selector| selector.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
