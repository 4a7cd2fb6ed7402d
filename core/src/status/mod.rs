//! A group's status as people read it, decided: the versioned JSON document ([`model`],
//! documented in docs/status.md), snapshot + plan + gate decision + history → a group's status
//! ([`view`], with what the leader remembers of a group: [`History`], [`ObservedWait`], and
//! its rollout over time: [`timeline`]). The controller keeps that memory and serves the
//! status (its status page); `kubectl baton` computes it from the same code.

pub mod model;
pub mod timeline;
pub mod view;

pub use model::{
    API_VERSION, ActionRecord, GroupStatus, GroupWarning, KIND, Replica, Role, RolloutPhase,
    RolloutStatus, Waiting, ZoneStatus,
};
pub use timeline::{Timeline, Timelines, WaitSeen};
pub use view::{History, ObservedWait, compute, group_status, groups};
