//! A rollout deletion judged on hand-made caches: what the rollout may delete with and without a
//! budget, with the record's claims, and the cases it must never hold (free replacements, a
//! namespace without the CRD, a budget of maxUnavailable 0).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::annotations::MAX_UNAVAILABLE_ANNOTATION;
use crate::pods::CachedPod;
use crate::testing::objects::{NAMESPACE, labels, match_labels, zone_pod, zone_statefulset};
use crate::zpdb::{AllowedEviction, Budget, ZoneAwarePodDisruptionBudget, ZpdbSpec};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;

use super::*;

const NS: &str = NAMESPACE;
const ZONES: [&str; 3] = ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"];

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

fn statefulset(name: &str, replicas: i32, max_unavailable: Option<&str>) -> StatefulSet {
    let mut statefulset = zone_statefulset(name, replicas);
    statefulset.metadata.annotations =
        max_unavailable.map(|value| labels(&[(MAX_UNAVAILABLE_ANNOTATION, value)]));
    statefulset
}

fn pod(statefulset: &str, ordinal: u32, ready: bool) -> Pod {
    let an_hour_ago = now() - jiff::SignedDuration::from_hours(1);
    let pod = zone_pod(statefulset, ordinal, an_hour_ago);
    if ready {
        pod
    } else {
        pod.not_ready(an_hour_ago)
    }
    .build()
}

fn budget(name: &str, max_unavailable: Option<i64>) -> (String, Arc<Observed>) {
    let spec = ZpdbSpec {
        selector: Some(match_labels(&[("rollout-group", "ingester")])),
        max_unavailable,
        ..ZpdbSpec::default()
    };
    let zpdb = ZoneAwarePodDisruptionBudget::new(name, NS, spec);
    (name.to_owned(), Arc::new(Budget::parse(&zpdb)))
}

/// Three zones of 3 ready pods (`not_ready` names the exceptions) and `known`.
struct Cluster {
    statefulsets: Vec<StatefulSet>,
    pods: Vec<Pod>,
    known: Known,
}

impl Cluster {
    fn new(known: Known, not_ready: &[&str]) -> Self {
        let statefulsets = ZONES
            .iter()
            .map(|zone| statefulset(zone, 3, None))
            .collect();
        let pods = ZONES
            .iter()
            .flat_map(|zone| (0..3).map(move |ordinal| pod(zone, ordinal, true)))
            .map(|mut pod| {
                let name = pod.metadata.name.clone().unwrap();
                if not_ready.contains(&name.as_str()) {
                    pod = pod_named(&name, false);
                }
                pod
            })
            .collect();
        Self {
            statefulsets,
            pods,
            known,
        }
    }

    fn judge(&self, statefulset: &str, pod: &str, claims: &RecentlyAllowed) -> Judgement {
        self.with_view(|view| {
            let deletion = Deletion {
                statefulset,
                pod,
                free_replacement: false,
            };
            judge(view, &deletion, claims)
        })
    }

    fn with_view<T>(&self, then: impl FnOnce(&View<'_>) -> T) -> T {
        let statefulsets: Vec<&StatefulSet> = self.statefulsets.iter().collect();
        let pods: Vec<Arc<CachedPod>> = self
            .pods
            .iter()
            .map(|pod| Arc::new(CachedPod::of(pod)))
            .collect();
        let view = View {
            namespace: NS,
            known: &self.known,
            statefulsets: &statefulsets,
            pods: &pods,
            now: now(),
        };
        then(&view)
    }
}

fn pod_named(name: &str, ready: bool) -> Pod {
    let (statefulset, ordinal) = name.rsplit_once('-').unwrap();
    pod(statefulset, ordinal.parse().unwrap(), ready)
}

fn listed(budgets: &[(String, Arc<Observed>)]) -> Known {
    Known::Listed(budgets.iter().cloned().collect())
}

fn waits(judgement: &Judgement, words: &[&str]) {
    let Judgement::Wait(message) = judgement else {
        panic!("expected a wait, got {judgement:?}");
    };
    for word in words {
        assert!(message.contains(word), "{word:?} not in {message:?}");
    }
}

fn claim(budget: &str) -> Judgement {
    Judgement::Claim {
        budget: budget.to_owned(),
    }
}

const A0: &str = "ingester-zone-a-0";
const A: &str = "ingester-zone-a";
const NONE: &RecentlyAllowed = &RecentlyAllowed {
    pods: BTreeMap::new(),
};

#[test]
fn a_budget_met_is_claimed_in_its_record() {
    let cluster = Cluster::new(listed(&[budget("ingester", None)]), &[]);
    assert_eq!(cluster.judge(A, A0, NONE), claim("ingester"));
}

#[test]
fn without_a_budget_or_the_crd_the_rollout_deletes_unconsulted() {
    for known in [Known::NotInstalled, Known::Listed(BTreeMap::new())] {
        let cluster = Cluster::new(known, &["ingester-zone-b-1"]);
        assert_eq!(cluster.judge(A, A0, NONE), Judgement::Go);
    }
}

#[test]
fn before_the_budgets_are_listed_the_rollout_waits() {
    let cluster = Cluster::new(Known::NotListed { error: None }, &[]);
    waits(
        &cluster.judge(A, A0, NONE),
        &[A0, "not listed yet", "namespace mimir"],
    );
    // Naming why, when the listing failed
    let forbidden = "zoneawarepoddisruptionbudgets.rollout-operator.grafana.com is forbidden";
    let error = Some(forbidden.to_owned());
    let cluster = Cluster::new(Known::NotListed { error }, &[]);
    waits(
        &cluster.judge(A, A0, NONE),
        &[&format!(
            "not listed yet (listing them failed: {forbidden})"
        )],
    );
}

#[test]
fn another_zone_unavailable_holds_the_deletion_naming_it() {
    let cluster = Cluster::new(listed(&[budget("ingester", None)]), &["ingester-zone-b-1"]);
    waits(
        &cluster.judge(A, A0, NONE),
        &[
            "the rollout waits to delete pod ingester-zone-a-0",
            "ZoneAwarePodDisruptionBudget ingester",
            "ingester-zone-b has 1 unavailable pod",
            "ingester-zone-b-1 not ready",
        ],
    );
}

/// The record's claim of `pod`'s eviction, `ago` before now.
fn claimed(pod: &str, ago: jiff::SignedDuration) -> RecentlyAllowed {
    RecentlyAllowed {
        pods: BTreeMap::from([(
            pod.to_owned(),
            AllowedEviction {
                at: now() - ago,
                uid: Some(format!("uid-{pod}")),
            },
        )]),
    }
}

#[test]
fn an_eviction_just_claimed_in_another_zone_holds_the_deletion() {
    // A drain's eviction the webhook allowed, not visible as terminating in the cache yet
    let cluster = Cluster::new(listed(&[budget("ingester", None)]), &[]);
    let second = jiff::SignedDuration::from_secs(1);
    waits(
        &cluster.judge(A, A0, &claimed("ingester-zone-c-2", second)),
        &["ingester-zone-c-2 eviction allowed at"],
    );
    // The same claim in the pod's own zone counts against the rollout's max-unavailable (1)
    waits(
        &cluster.judge(A, A0, &claimed("ingester-zone-a-2", second)),
        &["allows 1 unavailable pod in StatefulSet ingester-zone-a"],
    );
    // An expired claim no longer counts
    let expired = claimed("ingester-zone-c-2", RECORD_EXPIRY);
    assert_eq!(cluster.judge(A, A0, &expired), claim("ingester"));
    // Nor one about an earlier pod of that name (the drained pod's replacement)
    let mut earlier = claimed("ingester-zone-c-2", second);
    earlier.pods.get_mut("ingester-zone-c-2").unwrap().uid = Some("uid-before".into());
    assert_eq!(cluster.judge(A, A0, &earlier), claim("ingester"));
}

#[test]
fn a_budget_of_max_unavailable_0_does_not_block_the_rollout() {
    // A budget that refuses every eviction: the rollout's own max-unavailable applies in its zone
    let cluster = Cluster::new(listed(&[budget("strict", Some(0))]), &[]);
    assert_eq!(cluster.judge(A, A0, NONE), claim("strict"));
    // But the other zones are still held
    let cluster = Cluster::new(listed(&[budget("strict", Some(0))]), &["ingester-zone-c-0"]);
    waits(&cluster.judge(A, A0, NONE), &["ingester-zone-c"]);
}

#[test]
fn within_the_zone_the_rollouts_max_unavailable_applies() {
    // Zone a already has a pod not ready: with the default max-unavailable 1 the rollout waits
    let mut cluster = Cluster::new(
        listed(&[budget("ingester", Some(5))]),
        &["ingester-zone-a-1"],
    );
    waits(
        &cluster.judge(A, A0, NONE),
        &["allows 1 unavailable pod in StatefulSet ingester-zone-a"],
    );
    // With rollout-max-unavailable 2 on the StatefulSet it may go
    cluster.statefulsets[0] = statefulset(A, 3, Some("2"));
    assert_eq!(cluster.judge(A, A0, NONE), claim("ingester"));
}

#[test]
fn free_replacements_are_never_held() {
    // Not listed, another zone down, a claim elsewhere: a pod already unavailable still goes
    let not_listed = Known::NotListed { error: None };
    for known in [not_listed, listed(&[budget("ingester", None)])] {
        let cluster = Cluster::new(known, &[A0, "ingester-zone-b-0"]);
        let statefulsets: Vec<&StatefulSet> = cluster.statefulsets.iter().collect();
        let pods: Vec<Arc<CachedPod>> = cluster
            .pods
            .iter()
            .map(|pod| Arc::new(CachedPod::of(pod)))
            .collect();
        let view = View {
            namespace: NS,
            known: &cluster.known,
            statefulsets: &statefulsets,
            pods: &pods,
            now: now(),
        };
        let free = Deletion {
            statefulset: A,
            pod: A0,
            free_replacement: true,
        };
        assert_eq!(judge(&view, &free, NONE), Judgement::Go);
        let paid = Deletion {
            free_replacement: false,
            ..free
        };
        assert!(matches!(judge(&view, &paid, NONE), Judgement::Wait(_)));
    }
}

#[test]
fn an_invalid_budget_holds_the_pods_it_selects_naming_it() {
    let zpdb = ZoneAwarePodDisruptionBudget::new(
        "broken",
        NS,
        ZpdbSpec {
            selector: Some(match_labels(&[("rollout-group", "ingester")])),
            pod_name_partition_regex: Some("no-group".into()),
            ..ZpdbSpec::default()
        },
    );
    let known = Known::Listed(BTreeMap::from([(
        "broken".to_owned(),
        Arc::new(Budget::parse(&zpdb)),
    )]));
    let cluster = Cluster::new(known, &[]);
    waits(
        &cluster.judge(A, A0, NONE),
        &["ZoneAwarePodDisruptionBudget broken is invalid"],
    );
}

#[test]
fn a_pod_gone_from_the_cache_is_not_held() {
    let cluster = Cluster::new(listed(&[budget("ingester", None)]), &[]);
    assert_eq!(cluster.judge(A, "ingester-zone-a-9", NONE), Judgement::Go);
}

const DELETE_A0: Deletion<'static> = Deletion {
    statefulset: A,
    pod: A0,
    free_replacement: false,
};

#[test]
fn a_consult_claims_in_the_record_it_read_and_goes_only_once_that_is_stored() {
    // Given a budget that allows zone a's pod to go
    let cluster = Cluster::new(listed(&[budget("ingester", None)]), &[]);
    // When the consult looks first, on the caches alone, then on the record as read
    assert_eq!(
        cluster.with_view(|view| first_look(view, &DELETE_A0)),
        Err("ingester".to_owned())
    );
    let record = Ledger {
        resource_version: Some("5".to_owned()),
        data: BTreeMap::new(),
    };
    let claimant = Claimant {
        group: "ingester",
        pod_uid: Some("uid-a0"),
    };
    let judged = cluster.with_view(|view| on_record(view, &DELETE_A0, &record, claimant));
    // Then the record to store holds this deletion, claimed by the group's rollout with its
    // pod's uid, on the version read, and the deletion goes once it is stored
    let Judged::Claim(claimed, Permit::Go) = judged else {
        panic!("expected a claim, got {judged:?}");
    };
    assert_eq!(claimed.resource_version.as_deref(), Some("5"));
    let entry = claimed.data.get(A0).expect("the pod claimed");
    assert!(
        entry.contains("baton-controller rollout of group ingester"),
        "{entry}"
    );
    let allowed = recently_allowed(&claimed);
    assert_eq!(allowed.pods[A0].uid.as_deref(), Some("uid-a0"));
    assert_eq!(allowed.pods[A0].at, now());
}

#[test]
fn a_consult_settles_without_writing_when_the_record_read_holds_another_zones_claim() {
    let cluster = Cluster::new(listed(&[budget("ingester", None)]), &[]);
    let mut record = Ledger {
        resource_version: Some("5".to_owned()),
        data: BTreeMap::new(),
    };
    // A drain's eviction in zone c, claimed a second ago by a webhook replica
    let drained = with_eviction(
        &record,
        "ingester-zone-c-2",
        Some("uid-ingester-zone-c-2"),
        "kubectl drain",
        now() - jiff::SignedDuration::from_secs(1),
    );
    record.data = drained.data;
    let claimant = Claimant {
        group: "ingester",
        pod_uid: None,
    };
    let judged = cluster.with_view(|view| on_record(view, &DELETE_A0, &record, claimant));
    let Judged::Settled(Permit::Wait(why)) = judged else {
        panic!("expected a wait, got {judged:?}");
    };
    assert!(
        why.contains("ingester-zone-c-2 eviction allowed at"),
        "{why}"
    );
    // And with no budget at all, the first look settles it: go, unconsulted
    let unbudgeted = Cluster::new(Known::NotInstalled, &[]);
    assert_eq!(
        unbudgeted.with_view(|view| first_look(view, &DELETE_A0)),
        Ok(Permit::Go)
    );
}

#[test]
fn a_consult_that_cannot_claim_waits_naming_the_record_and_why() {
    let failed = ClaimFailure::Call {
        step: "writing",
        error: "403 forbidden".to_owned(),
    };
    let Permit::Wait(why) = could_not_claim(&DELETE_A0, "ingester", &failed) else {
        panic!("a failed claim must wait");
    };
    for word in [
        A0,
        "writing ConfigMap baton-zpdb-ingester",
        "ZoneAwarePodDisruptionBudget ingester",
        "403 forbidden",
    ] {
        assert!(why.contains(word), "{word:?} not in {why:?}");
    }
    let Permit::Wait(why) = could_not_claim(&DELETE_A0, "ingester", &ClaimFailure::Contended)
    else {
        panic!("a contended claim must wait");
    };
    assert!(
        why.contains(&format!("changed under {CLAIM_ATTEMPTS} attempts")),
        "{why}"
    );
}
