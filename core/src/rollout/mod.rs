//! Group rollouts, decided: the snapshot a decision reads ([`GroupSnapshot`], built from the
//! caches by [`GroupSnapshot::from_kubernetes`]), the planner ([`plan()`]), and how deletions
//! still in flight count in a snapshot ([`pending`]). The controller carries out
//! [`Plan::actions`].

pub mod pending;
pub mod plan;
pub mod snapshot;

pub use plan::{
    Action, Order, Plan, PodRevision, Progress, Unavailable, UnavailablePod, WaitReason, Warning,
    plan, plan_in_order, replacement_note, unavailable,
};
pub use snapshot::{
    GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, StatusLag, UpdateStrategy,
    selector_matches,
};
