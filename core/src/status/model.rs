//! The status document: what `GET /api/v1/status` returns and what the page and
//! `kubectl baton status` render. Versioned (`apiVersion: baton.dev/v1alpha1`, `kind:
//! RolloutStatus`), camelCase, documented field by field in docs/status.md: scripts may read it,
//! so a field is only ever added, never renamed or retyped, within one apiVersion.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The `apiVersion` of [`RolloutStatus`].
pub const API_VERSION: &str = "baton.dev/v1alpha1";
/// The `kind` of [`RolloutStatus`].
pub const KIND: &str = "RolloutStatus";

/// Every rollout group of a namespace, as one replica sees it at `generated_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    pub namespace: String,
    pub generated_at: Timestamp,
    /// The replica that answered.
    pub replica: Replica,
    /// The identity holding the Lease (`holderIdentity`), if known: the replica that acts.
    pub leader: Option<String>,
    /// Groups by name.
    pub groups: Vec<GroupStatus>,
}

impl RolloutStatus {
    /// A document with the version and kind set.
    pub fn new(
        namespace: impl Into<String>,
        generated_at: Timestamp,
        replica: Replica,
        leader: Option<String>,
        groups: Vec<GroupStatus>,
    ) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            namespace: namespace.into(),
            generated_at,
            replica,
            leader,
            groups,
        }
    }
}

/// Which replica answered, and whether it leads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replica {
    pub identity: String,
    pub role: Role,
}

/// A replica's part in the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// Holds the Lease and acts; its history (waiting since, last actions) is complete.
    Leader,
    /// Watches only: its view is computed from its own caches, without the leader's history.
    Standby,
}

/// Where a group or a zone stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RolloutPhase {
    /// Every pod at the update revision and available.
    Complete,
    /// Pods are being replaced here (or the new ones are starting).
    Rolling,
    /// Pods left to update, but not now: not its turn, or something holds it (see `waiting`).
    Waiting,
    /// `grafana.com/rollout-paused` with pods left to update.
    Paused,
    /// Stopped until a person acts: `baton.dev/halted`, a hook baton may not call, a template
    /// re-applied after a rollback.
    Halted,
    /// Held until a person fixes an annotation: a gate key that cannot be read (`waiting` names
    /// the annotation, its value and the StatefulSet). Not a halt: nothing is to be resumed.
    InvalidConfiguration,
    /// A member is not `OnDelete`: baton leaves the whole group alone.
    Skipped,
    /// The next step waits for a person's approval (`kubectl baton approve`).
    AwaitingApproval,
    /// A rollback is under way: templates written back, pods rolled back zone by zone.
    RollingBack,
    /// Every pod runs the revision from before the rollout that was rolled back.
    RolledBack,
}

impl RolloutPhase {
    /// Every phase, in the order docs/status.md lists a group's (the first that holds).
    pub const ALL: [Self; 10] = [
        Self::Skipped,
        Self::Halted,
        Self::InvalidConfiguration,
        Self::RollingBack,
        Self::RolledBack,
        Self::Complete,
        Self::AwaitingApproval,
        Self::Paused,
        Self::Rolling,
        Self::Waiting,
    ];

    /// The lowercase word of the JSON document, for the page and the plugin.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Rolling => "rolling",
            Self::Waiting => "waiting",
            Self::Paused => "paused",
            Self::Halted => "halted",
            Self::InvalidConfiguration => "invalidConfiguration",
            Self::Skipped => "skipped",
            Self::AwaitingApproval => "awaitingApproval",
            Self::RollingBack => "rollingBack",
            Self::RolledBack => "rolledBack",
        }
    }
}

impl std::fmt::Display for RolloutPhase {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// One rollout group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupStatus {
    pub name: String,
    /// The group's namespace, where one baton serves several (absent where it serves one: the
    /// document's `namespace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub phase: RolloutPhase,
    /// The members in rollout order (the planner's: by name).
    pub zones: Vec<ZoneStatus>,
    /// Why the group does not progress right now; absent while pods are being replaced or
    /// once it is complete.
    pub waiting: Option<Waiting>,
    /// The latest actions the leader took for this group, newest first (empty on a standby).
    pub last_actions: Vec<ActionRecord>,
    /// The group's rollback, while one is under way or once it rolled back: who asked and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<String>,
    /// What a person should fix about the group's annotations (a value baton could not read
    /// and what it does instead), as the Warning Events say it; empty when nothing is wrong.
    #[serde(default)]
    pub warnings: Vec<GroupWarning>,
    /// The group's rollout over time as the leader recorded it (absent on a standby, and
    /// before the leader recorded anything of the group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<super::timeline::Timeline>,
    /// The health check the group names (`baton.dev/health-check`) and what its last run saw,
    /// as stored on the members: the same on the leader's page and for any reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckStatus>,
}

/// A group's health check as stored: its last run, what it saw, and the counts that decide.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckStatus {
    /// The `RolloutHealthCheck`'s name.
    pub name: String,
    /// When it last ran (RFC 3339); absent before its first run of this rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// What the last run came to and the value it saw (`passed (error-rate: 0.01)`, a failed
    /// query and its value, `inconclusive: …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<String>,
    /// Passes in a row (of the current revisions) and failures in a row.
    pub passes: u32,
    pub failures: u32,
}

impl CheckStatus {
    /// One line for people: `error-rate: passed (…) at … (2 passes, 0 failures)`.
    pub fn line(&self) -> String {
        match (&self.last_result, &self.last_run) {
            (Some(result), Some(at)) => format!(
                "{}: {result} at {at} ({} in a row passed, {} failed)",
                self.name, self.passes, self.failures
            ),
            _ => format!("{}: not run yet", self.name),
        }
    }
}

/// Something a person should fix about a group: the planner's or a gate's warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupWarning {
    /// The stable identifier (`InvalidAnnotation`, `ConflictingSoak`, …), as the Warning
    /// Event's reason.
    pub kind: String,
    /// The StatefulSet it is about, if one.
    pub statefulset: Option<String>,
    /// The warning in words, as in the Event.
    pub message: String,
}

/// One member StatefulSet (a zone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneStatus {
    pub statefulset: String,
    pub phase: RolloutPhase,
    /// Pods (of spec.replicas) at the update revision and not terminating.
    pub updated: u32,
    /// Pods (of spec.replicas) available.
    pub ready: u32,
    /// spec.replicas.
    pub total: u32,
    pub current_revision: Option<String>,
    pub update_revision: Option<String>,
    /// `grafana.com/rollout-paused` is true.
    pub paused: bool,
}

/// Why a group waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// The stable identifier of the reason (the planner's `WaitReason::kind()` or the gates'
    /// `GateWait::kind()`), as in metrics labels and Event reasons.
    pub kind: String,
    /// The reason in words, as in the Events.
    pub message: String,
    /// Since when the group has waited for this kind of reason, when the leader recorded it.
    pub since: Option<Timestamp>,
}

/// One action the leader took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionRecord {
    pub at: Timestamp,
    /// What was done, as the Event action: `DeletePod`, `UpdateStatus`, ….
    pub action: String,
    pub statefulset: String,
    /// The pod concerned, if any.
    pub pod: Option<String>,
    /// The sentence a person reads (the Event note).
    pub note: String,
}
