//! Group rollouts, decided: the snapshot a decision reads ([`GroupSnapshot`], built from the
//! caches by [`GroupSnapshot::from_kubernetes`]), the planner's walk ([`plan()`]), what its
//! answer is and how it reads ([`model`]: [`Plan`], [`WaitReason`], [`Warning`]), and how
//! deletions still in flight count in a snapshot ([`pending`]). The controller carries out
//! [`Plan::actions`].

pub mod completion;
pub mod model;
pub mod pending;
pub mod plan;
pub mod snapshot;

pub use model::{
    Action, Order, Plan, PodRevision, Progress, Told, Unavailable, UnavailablePod, WaitReason,
    Warning, replacement_note,
};
pub use plan::{plan, plan_in_order, unavailable};
pub use snapshot::{
    GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, StatusLag, Unreachable,
    UpdateStrategy, selector_matches,
};
