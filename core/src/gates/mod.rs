//! Rollout gates: what must hold, besides readiness, before baton deletes the next pod — a soak
//! between zones, a ramp inside a zone, a health check after every step, hooks before and after
//! each zone, and a halt that only a person lifts.
//!
//! Why a separate module: the planner ([`crate::rollout::plan()`]) decides *which* pods may go
//! by availability alone; a gate decides *whether they may go now*. Composing pure functions
//! keeps each small and testable, and the planner's guarantees untouched: a gate can only take
//! deletions away from a plan, never add one (a rollback plans with the planner itself, in
//! reverse order, under the same guarantees).
//!
//! The pure decision, in the order a pass applies it:
//! - [`keys`]: baton's own annotations (prefix `baton.dev/`), parsed with errors that name key
//!   and value; members that disagree on a check or hook hold the group;
//! - [`decision`]: what a gate decides ([`GateDecision`]: the verdict, why it waits, what to
//!   store and tell), the one type every gate below builds or narrows;
//! - [`state`]: what the gate remembers across reconciles *and leaders*, stored on the
//!   StatefulSets themselves (only baton may set it: the webhook's state guard);
//! - [`decide()`]: soak, halt and the zone order, from the snapshot, the plan, the stored
//!   state and `now`; then [`steps`] (a ramp or batches inside a zone) and [`approval`] (steps
//!   that wait for a person); a bypass that expires lifts soaks and checks;
//! - [`rollback`]: taking a bad version back out, zone by zone, newest pods first; while one is
//!   under way it alone decides (with the planner's guarantees, pods in reverse order);
//! - [`checks`]: a health check's passes and failures as a gate; [`health_check`]: a
//!   `RolloutHealthCheck`'s spec and the verdict on Prometheus' answers ([`answers`]) or, for a
//!   web check, on an HTTP endpoint's ([`web_check`]), or, for a Job check, on the Job made
//!   for the step ([`job_check`]);
//! - [`hooks`]: the calls due before and after each zone, and what their answers store.
//!
//! [`crate::pass`] composes them all into a group's pass, with what to tell people; the
//! controller does the I/O around it: it reads the checks and their Secrets, runs the queries,
//! calls the hooks and stores the state ([`redact`]: what its messages may show of a URL).
//!
//! Dependencies point one way: [`keys`] reads annotations and depends on no other gate;
//! [`decision`] on [`keys`]; each gate ([`steps`], [`approval`], [`rollback`], [`hooks`],
//! [`checks`]) on those two, and the hooks and checks on [`rollback`] to ask for one;
//! [`decide()`] composes the gates, and [`crate::pass`] composes [`decide()`] with the checks
//! and hooks. Nothing a gate uses depends on the gate.
//!
//! All of it is opt-in: a group none of whose members carries a gate key rolls exactly as
//! without this module (docs/compatibility.md). The one exception is
//! [`keys::HALTED_ANNOTATION`], which a person may set on any group to stop it.

pub mod answers;
pub mod approval;
pub mod checks;
pub mod decide;
pub mod decision;
pub mod health_check;
pub mod hooks;
pub mod job_check;
pub mod keys;
pub mod redact;
pub mod rollback;
pub mod state;
pub mod steps;
pub mod web_check;

pub use decide::{decide, decide_planned, decide_read};
pub use decision::{AnnotationWrite, GateDecision, GateNotice, GateVerdict, GateWait};
pub use keys::{
    APPROVAL_ANNOTATION, APPROVED_ANNOTATION, APPROVED_BY_ANNOTATION, BATCHES_ANNOTATION,
    BYPASS_ANNOTATION, CHECK_STATE_ANNOTATION, GateConfig, GateWarning, HALTED_ANNOTATION,
    HEALTH_CHECK_ANNOTATION, HOOK_ANNOTATION, HOOK_STATE_ANNOTATION, RAMP_ANNOTATION,
    ROLLBACK_ON_FAILURE_ANNOTATION, SOAK_ANNOTATION, STATE_ANNOTATION,
};
pub use state::{GateState, ZoneState};
