//! Group rollouts, carried out: the pass over a group ([`reconcile`]: plan with
//! `baton_core::rollout`, gate, explain, act) and the Kubernetes calls behind its actions
//! ([`execute`]).

pub mod execute;
pub mod reconcile;
