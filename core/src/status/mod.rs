//! A group's status as people read it, decided: the versioned JSON document ([`model`],
//! documented in docs/status.md), snapshot + plan + gate decision + history → a group's status
//! ([`view`]), and the leader's per-group history ([`board`]). The controller serves it (its
//! status page) and `kubectl baton` computes it from the same code.

pub mod board;
pub mod model;
pub mod view;

pub use board::StatusBoard;
pub use model::{
    API_VERSION, ActionRecord, GroupStatus, KIND, Replica, Role, RolloutPhase, RolloutStatus,
    Waiting, ZoneStatus,
};
pub use view::{History, ObservedWait, compute, group_status, groups};
