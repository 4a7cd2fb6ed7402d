//! Group rollouts, carried out: the pass over a group ([`reconcile`]: read, decide with one
//! call of `baton_core::pass::decide`, run the effects), the Kubernetes calls behind its actions
//! ([`execute`]), the deletions asked for that the pod cache has not shown yet ([`pending`]),
//! a rollback's own writes ([`rollback`]: starting it, writing templates back) and the zones
//! seen rolling ([`completion`]).

pub mod completion;
pub mod execute;
pub mod pending;
pub mod reconcile;
pub mod rollback;

#[cfg(test)]
mod tests;
