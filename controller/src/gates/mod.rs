//! Rollout gates: what must hold, besides readiness, before baton deletes the next
//! pod — a soak between zones, and a halt that only a person lifts.
//!
//! Why a separate module: the planner ([`crate::rollout::plan()`]) decides *which* pods may go
//! by availability alone; a gate decides *whether they may go now*. Composing two pure
//! functions keeps both small and testable, and the planner's guarantees untouched: a gate can
//! only take deletions away from a plan, never add one (`GateDecision::apply`).
//!
//! - [`keys`]: baton's own annotations (prefix `baton.dev/`, never `grafana.com/`), parsed
//!   with errors that name key and value.
//! - [`state`]: what the gate must remember across reconciles *and leaders* (when a soak
//!   started, which zone is cleared to roll), stored on the StatefulSets themselves, one
//!   annotation per zone, so a new leader neither restarts a soak nor skips it.
//! - [`decide()`]: the pure decision, from the group snapshot, the plan, the stored state and
//!   `now`.
//!
//! All of it is opt-in: a group none of whose members carries a gate key rolls exactly as
//! without this module (docs/compatibility.md). The one exception is
//! [`keys::HALTED_ANNOTATION`], which a person may set on any group to stop it.

pub mod calls;
pub mod checks;
pub mod decide;
pub mod egress;
pub mod health;
pub mod hooks;
pub mod keys;
pub mod metrics;
pub mod prometheus;
pub mod report;
pub mod state;
pub mod store;

pub use decide::{AnnotationWrite, GateDecision, GateVerdict, GateWait, decide, decide_with};
pub use keys::{
    CHECK_STATE_ANNOTATION, GateConfig, GateWarning, HALTED_ANNOTATION, HEALTH_CHECK_ANNOTATION,
    HOOK_ANNOTATION, HOOK_STATE_ANNOTATION, RAMP_ANNOTATION, SOAK_ANNOTATION, STATE_ANNOTATION,
};
pub use state::{GateState, ZoneState};
