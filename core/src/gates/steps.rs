//! Steps inside a zone: an exponential ramp (`baton.dev/ramp`) or batches (`baton.dev/batches`).
//! Both cut the gated plan to the next step's size, and let it go only once the zone is
//! available again: a step goes whole or not at all.
//!
//! Stateless, on purpose: the next step follows from the pods already updated (the first
//! cumulative size above them), so a new leader, a failover or a lost write continue at the
//! same step, and a pod replaced by someone else counts like one baton replaced. A step larger
//! than the zone's max-unavailable goes in parts of max-unavailable pods, each once the zone is
//! available; the planner's guarantees are never loosened. Only ever takes deletions away.

use std::collections::BTreeSet;

use crate::annotations::max_unavailable;
use crate::rollout::{GroupSnapshot, Plan};

use super::decision::{GateDecision, GateVerdict, GateWait, deleted_in};
use super::keys::GateConfig;

/// How a zone's steps are sized.
enum Sizing {
    /// 1, 2, 4, … pods: cumulative 1, 3, 7, …
    Ramp,
    /// Cumulative targets, the last one the zone's replicas.
    Batches(Vec<u32>),
}

impl Sizing {
    /// The cumulative number of updated pods this step ends at, and (for batches) its number.
    fn next(&self, updated: u32) -> (u32, Option<(u32, u32)>) {
        match self {
            Self::Ramp => {
                let mut size = 1u32;
                while size.saturating_sub(1) <= updated && size < u32::MAX / 2 {
                    size *= 2;
                }
                (size - 1, None)
            }
            Self::Batches(targets) => {
                let count = u32::try_from(targets.len()).unwrap_or(u32::MAX);
                let (index, target) = targets
                    .iter()
                    .enumerate()
                    .find(|(_, target)| **target > updated)
                    .map_or(
                        (targets.len().saturating_sub(1), updated),
                        |(index, target)| (index, *target),
                    );
                let batch = u32::try_from(index + 1).unwrap_or(u32::MAX);
                (target, Some((batch, count)))
            }
        }
    }
}

/// Cuts the gated plan to the step the group's ramp or batches allow (see the module header).
pub fn apply(
    group: &GroupSnapshot,
    config: &GateConfig,
    (mut plan, mut decision): (Plan, GateDecision),
) -> (Plan, GateDecision) {
    let Some(zone) = deleted_in(group, &plan).into_iter().next() else {
        return (plan, decision);
    };
    let Some(member) = group.statefulsets.iter().find(|member| member.name == zone) else {
        return (plan, decision);
    };
    let sizing = match &config.batches {
        Some(batches) => Sizing::Batches(batches.targets(member.spec_replicas)),
        None if config.ramp => Sizing::Ramp,
        None => return (plan, decision),
    };
    let Some(progress) = plan
        .progress
        .iter()
        .find(|progress| progress.statefulset == zone)
        .cloned()
    else {
        return (plan, decision);
    };
    let (target, batch) = sizing.next(progress.updated);
    let max_unavailable = max_unavailable(&member.annotations, member.spec_replicas).value;
    let step = target
        .saturating_sub(progress.updated)
        .min(max_unavailable)
        .min(progress.total.saturating_sub(progress.updated))
        .max(1);
    // A step goes whole, once the zone is available and the planner allows all of it (its
    // budget is short while the StatefulSet's status lags the pods).
    let offered = u32::try_from(plan.pods_taken()).unwrap_or(u32::MAX);
    let available = progress.ready >= progress.total && offered >= step;
    plan.take_at_most(if available {
        usize::try_from(step).unwrap_or(usize::MAX)
    } else {
        0
    });
    if !available && decision.wait().is_none() {
        let wait = match batch {
            None => GateWait::Ramp {
                zone,
                updated: progress.updated,
                total: progress.total,
            },
            Some((batch, batches)) => GateWait::Batch {
                zone,
                batch,
                batches,
                updated: progress.updated,
                total: progress.total,
            },
        };
        decision.verdict = GateVerdict::Hold {
            wait,
            pass: BTreeSet::new(),
        };
    }
    (plan, decision)
}
