//! Group rollouts, carried out: the pass over a group ([`reconcile`]: plan with
//! `baton_core::rollout`, gate, explain, act), the Kubernetes calls behind its actions
//! ([`execute`]), and a rollback's own writes ([`rollback`]: starting it, writing templates
//! back).

pub mod completion;
pub mod execute;
pub mod reconcile;
pub mod rollback;
