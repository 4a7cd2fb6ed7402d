//! Group rollouts, carried out: the pass over a group ([`reconcile`]: plan with
//! `baton_core::rollout`, gate, explain, act), the Kubernetes calls behind its actions
//! ([`execute`]), the deletions asked for that the pod cache has not shown yet ([`pending`]),
//! and a rollback's own writes ([`rollback`]: starting it, writing templates back).

pub mod completion;
pub mod execute;
pub mod pending;
pub mod reconcile;
pub mod rollback;
