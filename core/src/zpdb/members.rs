//! A zone-aware budget whose zones live in several member clusters: the judgement over every
//! member's pods, and the claim of an allowed eviction in the budget's records of a majority of
//! the members. Pure: the webhook reads its member caches and the records, and writes what this
//! says.
//!
//! - **Every member's pods count.** The decision is the one of a single cluster
//!   ([`super::decide`]), on the members' StatefulSets and pods named `cluster/name`
//!   ([`crate::clusters`]), so a drain in cluster-b sees a pod down in cluster-a.
//! - **A member that cannot be read counts as entirely unavailable.** Its pods are unknown, so
//!   nothing its budget allows may go meanwhile (fail closed: the budget's promise). The refusal
//!   names the member and says what lifts it: the member back, or an operator who accepts the
//!   risk removing it from the members ([`refuse_while_away`]).
//! - **No arbiter: a majority of records.** Inside one cluster, an allowed eviction is claimed in
//!   the budget's record by a resourceVersion-conditioned write, so two replicas never allow two
//!   zones at once. Across members, the claim must be in the records of a majority of them
//!   ([`Progress`]): any two majorities share a record, and that record, judged with the first
//!   claim in it, refuses the second. The records are claimed in one order for every claimant
//!   (by cluster name, [`claim_order`]), so two racing claims meet at the first record they can
//!   both reach and one of them stops there; with each claimant's own record first instead, two
//!   racing claims could take one record each and refuse each other.
//! - **A claim short of a majority is withdrawn** from the records it reached ([`withdrawn`]),
//!   so it does not hold other evictions; one that could not be withdrawn (the webhook died)
//!   holds only until its entry expires ([`super::record::RECORD_EXPIRY`]), as an eviction the
//!   API server refused after the webhook allowed it does.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::record::{RecordEntry, record_key, record_name};
use super::{DenyReason, EvictionVerdict};
use crate::clusters::majority;
use crate::ledger::Ledger;

/// A member cluster whose pods are not known now (its cache not synced: never listed, or its
/// watch failed and has not listed again), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Away {
    pub cluster: String,
    pub error: Option<String>,
}

/// The configuration key the members of the webhook are given in, named in refusals.
pub const MEMBERS_KEY: &str = "webhook.clusters";

/// `verdict` (the decision over the readable members' pods) with the members that are away
/// counted as entirely unavailable: an eviction a budget allows is refused while any member is
/// away, naming them. Every other verdict stands: a refusal is right whatever the missing
/// members hold, and a pod no budget guards may go whatever they hold.
pub fn refuse_while_away(verdict: EvictionVerdict, pod: &str, away: &[Away]) -> EvictionVerdict {
    let Some(budget) = verdict.judging_budget() else {
        return verdict;
    };
    if away.is_empty() {
        return verdict;
    }
    let mut members = String::new();
    for (index, member) in away.iter().enumerate() {
        if index > 0 {
            members.push_str(", ");
        }
        members.push_str(&member.cluster);
        match &member.error {
            Some(error) => {
                let _ = write!(members, " ({})", crate::explained::quoted(error, 300));
            }
            None => members.push_str(" (not listed yet)"),
        }
    }
    let (them, they) = if away.len() == 1 {
        ("it", "its pods count")
    } else {
        ("them", "their pods count")
    };
    EvictionVerdict::Denied {
        reason: DenyReason::MemberUnavailable,
        message: format!(
            "pod {pod} cannot be evicted: ZoneAwarePodDisruptionBudget {budget} spans the member clusters, and the pods of {members} cannot be read, so {they} as unavailable; retry once {them} {} back, or, accepting the risk that {} pods are down, remove {them} from {MEMBERS_KEY}",
            if away.len() == 1 { "is" } else { "are" },
            if away.len() == 1 { "its" } else { "their" },
        ),
    }
}

/// The order every claimant claims the members' records in: by cluster name.
pub fn claim_order<'a>(clusters: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    clusters
        .into_iter()
        .map(str::to_owned)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// A member's record that did not take the claim, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotTaken {
    pub cluster: String,
    pub why: String,
}

/// Where a claim across the members' records stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Claim the record of this member next.
    Next(String),
    /// A majority of records holds the claim: the eviction may go.
    Reached,
    /// A majority can no longer be reached: withdraw the claim from `withdraw`'s records and
    /// refuse for now.
    Short {
        withdraw: Vec<String>,
        not_taken: Vec<NotTaken>,
    },
}

/// A claim's progress over the members' records, in [`claim_order`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    order: Vec<String>,
    /// Index of the next record in `order`.
    next: usize,
    claimed: Vec<String>,
    not_taken: Vec<NotTaken>,
}

impl Progress {
    pub fn new<'a>(clusters: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            order: claim_order(clusters),
            next: 0,
            claimed: Vec::new(),
            not_taken: Vec::new(),
        }
    }

    /// How many records hold the claim so far.
    pub fn claimed(&self) -> &[String] {
        &self.claimed
    }

    /// How many records make a majority.
    pub fn needed(&self) -> usize {
        majority(self.order.len())
    }

    /// What to do now.
    pub fn standing(&self) -> Standing {
        let needed = self.needed();
        if self.claimed.len() >= needed {
            return Standing::Reached;
        }
        let left = self.order.len() - self.next;
        if self.claimed.len() + left < needed {
            return Standing::Short {
                withdraw: self.claimed.clone(),
                not_taken: self.not_taken.clone(),
            };
        }
        Standing::Next(self.order[self.next].clone())
    }

    /// The record of the member [`Standing::Next`] named took the claim.
    pub fn took(&mut self) {
        if let Some(cluster) = self.order.get(self.next) {
            self.claimed.push(cluster.clone());
            self.next += 1;
        }
    }

    /// The record of the member [`Standing::Next`] named could not be claimed (read or written),
    /// for `why`.
    pub fn missed(&mut self, why: String) {
        if let Some(cluster) = self.order.get(self.next) {
            self.not_taken.push(NotTaken {
                cluster: cluster.clone(),
                why,
            });
            self.next += 1;
        }
    }
}

/// The refusal of an eviction whose claim fell short of a majority of the members' records.
pub fn short_of_majority(
    pod: &str,
    budget: &str,
    members: usize,
    claimed: &[String],
    not_taken: &[NotTaken],
) -> String {
    let missed: Vec<String> = not_taken
        .iter()
        .map(|miss| {
            format!(
                "{}: {}",
                miss.cluster,
                crate::explained::quoted(&miss.why, 300)
            )
        })
        .collect();
    format!(
        "pod {pod} cannot be evicted now: its claim in ConfigMap {} (the record of ZoneAwarePodDisruptionBudget {budget}) must be in {} of the {members} member clusters' records, and only {} took it ({}); not taken by {}; retry",
        record_name(budget),
        majority(members),
        claimed.len(),
        if claimed.is_empty() {
            "none".to_owned()
        } else {
            claimed.join(", ")
        },
        missed.join("; ")
    )
}

/// `record` without the entry `request` wrote for `pod`; `None` when it holds none (another
/// request's entry for the pod stays: it is that request's claim).
pub fn withdrawn(record: &Ledger, pod: &str, request: &str) -> Option<Ledger> {
    let key = record_key(pod);
    let raw = record.data.get(&key)?;
    let entry: RecordEntry = serde_json::from_str(raw).ok()?;
    if entry.request != request {
        return None;
    }
    let mut data = record.data.clone();
    data.remove(&key);
    Some(Ledger {
        resource_version: record.resource_version.clone(),
        data,
    })
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use crate::zpdb::AllowReason;
    use crate::zpdb::record::with_eviction;

    fn met() -> EvictionVerdict {
        EvictionVerdict::Allowed {
            reason: AllowReason::BudgetMet,
            message: "met".into(),
            budget: Some("ingester".into()),
        }
    }

    #[test]
    fn a_member_away_refuses_what_a_budget_allows_naming_it_and_the_way_out() {
        let away = [Away {
            cluster: "cluster-c".into(),
            error: Some("connection refused".into()),
        }];
        let verdict = refuse_while_away(met(), "cluster-b/ingester-0", &away);
        let EvictionVerdict::Denied { reason, message } = &verdict else {
            panic!("allowed while cluster-c is away: {verdict:?}");
        };
        assert_eq!(*reason, DenyReason::MemberUnavailable);
        assert_eq!(reason.label(), "member_unavailable");
        for words in [
            "pod cluster-b/ingester-0 cannot be evicted",
            "ZoneAwarePodDisruptionBudget ingester",
            "cluster-c",
            "connection refused",
            "remove it from webhook.clusters",
        ] {
            assert!(message.contains(words), "{words:?} not in {message:?}");
        }
    }

    #[test]
    fn with_no_member_away_or_no_budget_judging_the_verdict_stands() {
        assert_eq!(refuse_while_away(met(), "p", &[]), met());
        let no_budget = EvictionVerdict::Allowed {
            reason: AllowReason::NoBudget,
            message: "none".into(),
            budget: None,
        };
        let away = [Away {
            cluster: "cluster-c".into(),
            error: None,
        }];
        assert_eq!(refuse_while_away(no_budget.clone(), "p", &away), no_budget);
    }

    #[test]
    fn a_claim_goes_by_cluster_name_and_stops_at_a_majority() {
        // Given three members, the claimant being cluster-b
        let mut progress = Progress::new(["cluster-b", "cluster-c", "cluster-a"]);
        assert_eq!(progress.needed(), 2);
        // Then cluster-a's record comes first, whoever claims
        assert_eq!(progress.standing(), Standing::Next("cluster-a".into()));
        progress.took();
        assert_eq!(progress.standing(), Standing::Next("cluster-b".into()));
        progress.took();
        assert_eq!(progress.standing(), Standing::Reached);
        assert_eq!(progress.claimed(), ["cluster-a", "cluster-b"]);
    }

    #[test]
    fn a_claim_that_can_no_longer_reach_a_majority_is_short_and_withdrawn() {
        let mut progress = Progress::new(["cluster-a", "cluster-b", "cluster-c"]);
        progress.took();
        progress.missed("connection refused".into());
        assert_eq!(progress.standing(), Standing::Next("cluster-c".into()));
        progress.missed("timed out".into());
        let Standing::Short {
            withdraw,
            not_taken,
        } = progress.standing()
        else {
            panic!("not short: {:?}", progress.standing());
        };
        assert_eq!(withdraw, ["cluster-a"]);
        assert_eq!(not_taken.len(), 2);
        let message =
            short_of_majority("cluster-a/ingester-0", "ingester", 3, &withdraw, &not_taken);
        for words in [
            "must be in 2 of the 3",
            "only 1 took it (cluster-a)",
            "cluster-b: ",
            "connection refused",
            "cluster-c: ",
            "baton-zpdb-ingester",
        ] {
            assert!(message.contains(words), "{words:?} not in {message:?}");
        }
    }

    #[test]
    fn two_members_need_both_and_one_miss_is_short_at_once() {
        let mut progress = Progress::new(["cluster-a", "cluster-b"]);
        assert_eq!(progress.needed(), 2);
        progress.missed("down".into());
        assert!(
            matches!(progress.standing(), Standing::Short { withdraw, .. } if withdraw.is_empty())
        );
    }

    /// A budget's partition regex means the same for a member cluster's pod (`cluster/pod`) as
    /// for a pod of one cluster alone.
    #[test]
    fn a_member_clusters_pod_is_in_the_partition_its_own_name_says() {
        let budget = crate::zpdb::Budget::parse(&crate::zpdb::ZoneAwarePodDisruptionBudget::new(
            "ingester",
            "mimir",
            crate::zpdb::ZpdbSpec {
                selector: Some(crate::testing::objects::match_labels(&[(
                    "rollout-group",
                    "ingester",
                )])),
                pod_name_partition_regex: Some("^ingester-zone-[a-z]-([0-9]+)$".into()),
                ..crate::zpdb::ZpdbSpec::default()
            },
        ))
        .expect("a valid budget");
        let partition = budget.partition.expect("a partition");
        assert_eq!(partition.of("ingester-zone-a-3"), Some("3"));
        assert_eq!(partition.of("cluster-b/ingester-zone-a-3"), Some("3"));
        assert_eq!(partition.of("cluster-b/other-3"), None);
    }

    #[test]
    fn a_withdrawal_removes_only_its_own_request_entry() {
        let now: Timestamp = "2026-11-28T20:00:00Z".parse().unwrap();
        let record = with_eviction(&Ledger::default(), "cluster-a/web-0", None, "r1", now);
        let record = with_eviction(&record, "cluster-b/web-0", None, "r2", now);
        let without = withdrawn(&record, "cluster-a/web-0", "r1").expect("r1's entry");
        assert_eq!(without.data.keys().collect::<Vec<_>>(), ["cluster-b_web-0"]);
        assert_eq!(withdrawn(&record, "cluster-b/web-0", "r1"), None);
        assert_eq!(withdrawn(&record, "cluster-c/web-0", "r1"), None);
    }
}
