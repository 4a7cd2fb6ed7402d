//! Table-driven scenarios of the spec validation and the eviction decision, and a simulation
//! that random drains never leave two zones (or two zones of a partition) unavailable.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use proptest::prelude::*;

use super::*;
use crate::pods::{CachedPod, PodsByStatefulSet};
use crate::testing::objects::{NAMESPACE, labels, match_labels, zone_pod, zone_statefulset};

const NS: &str = NAMESPACE;
const NOW: i64 = 1_800_000_000;
const EXPIRY: SignedDuration = SignedDuration::from_secs(60);

fn now() -> Timestamp {
    Timestamp::from_second(NOW).unwrap()
}

/// A StatefulSet `name` of the `ingester` rollout group with `replicas`.
fn statefulset(name: &str, replicas: i32) -> StatefulSet {
    zone_statefulset(name, replicas)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Running and Ready since an hour ago.
    Ready,
    /// Running and Ready since this many seconds before NOW.
    ReadyFor(i64),
    /// Running and Ready, its Ready condition with no transition time.
    ReadySinceUnknown,
    NotReady,
    Pending,
    Terminating,
}

fn pod(statefulset: &str, ordinal: u32, state: State) -> Pod {
    let ago = |seconds: i64| Timestamp::from_second(NOW - seconds).unwrap();
    let pod = |ready_for: i64| zone_pod(statefulset, ordinal, ago(ready_for)).without_uid();
    match state {
        State::Ready => pod(3600),
        State::ReadyFor(seconds) => pod(seconds),
        State::ReadySinceUnknown => {
            let mut built = pod(3600).build();
            for condition in built
                .status
                .iter_mut()
                .flat_map(|status| status.conditions.iter_mut().flatten())
            {
                condition.last_transition_time = None;
            }
            return built;
        }
        State::NotReady => pod(3600).not_ready(ago(10)),
        State::Pending => pod(3600).pending(ago(10)),
        State::Terminating => pod(3600).terminating(now()),
    }
    .build()
}

fn zpdb(name: &str, spec: ZpdbSpec) -> ZoneAwarePodDisruptionBudget {
    ZoneAwarePodDisruptionBudget::new(name, NS, spec)
}

fn ingester_spec() -> ZpdbSpec {
    ZpdbSpec {
        selector: Some(match_labels(&[("rollout-group", "ingester")])),
        ..ZpdbSpec::default()
    }
}

fn partition_spec() -> ZpdbSpec {
    ZpdbSpec {
        pod_name_partition_regex: Some("ingester-zone-[a-z]-([0-9]+)".into()),
        ..ingester_spec()
    }
}

/// Three zones of `replicas` ready pods each.
struct World {
    statefulsets: Vec<StatefulSet>,
    pods: Vec<Pod>,
    budgets: Vec<ZoneAwarePodDisruptionBudget>,
    recently_allowed: RecentlyAllowed,
}

const ZONES: [&str; 3] = ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"];

impl World {
    fn new(replicas: u32, spec: ZpdbSpec) -> Self {
        let statefulsets = ZONES
            .iter()
            .map(|zone| statefulset(zone, i32::try_from(replicas).unwrap()))
            .collect();
        let pods = ZONES
            .iter()
            .flat_map(|zone| (0..replicas).map(move |ordinal| pod(zone, ordinal, State::Ready)))
            .collect();
        Self {
            statefulsets,
            pods,
            budgets: vec![zpdb("ingester", spec)],
            recently_allowed: RecentlyAllowed::default(),
        }
    }

    fn set(mut self, name: &str, state: State) -> Self {
        let index = self.index(name);
        let (statefulset, ordinal) = name.rsplit_once('-').unwrap();
        self.pods[index] = pod(statefulset, ordinal.parse().unwrap(), state);
        self
    }

    fn remove(mut self, name: &str) -> Self {
        let index = self.index(name);
        self.pods.remove(index);
        self
    }

    fn index(&self, name: &str) -> usize {
        self.pods
            .iter()
            .position(|pod| pod.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no pod {name}"))
    }

    fn decide(&self, name: &str) -> EvictionVerdict {
        self.decide_as(name, None)
    }

    /// As a rollout about to delete the pod, with its own max-unavailable.
    fn decide_rollout(&self, name: &str, max_unavailable: u32) -> EvictionVerdict {
        self.decide_as(name, Some(max_unavailable))
    }

    fn decide_as(&self, name: &str, rollout_max_unavailable: Option<u32>) -> EvictionVerdict {
        let parsed: Vec<Observed> = self.budgets.iter().map(Budget::parse).collect();
        let budgets: Vec<&Observed> = parsed.iter().collect();
        let statefulsets: Vec<&StatefulSet> = self.statefulsets.iter().collect();
        let cached: Vec<Arc<CachedPod>> = self
            .pods
            .iter()
            .map(|pod| Arc::new(CachedPod::of(pod)))
            .collect();
        let pods = PodsByStatefulSet::of(self.statefulsets.iter(), &cached);
        let evicted = &cached[self.index(name)];
        let snapshot = EvictionSnapshot {
            pod: evicted,
            budgets: &budgets,
            statefulsets: &statefulsets,
            pods: &pods,
            now: now(),
            recently_allowed: &self.recently_allowed,
            record_expiry: EXPIRY,
        };
        match rollout_max_unavailable {
            None => decide(&snapshot),
            Some(max) => decide_rollout_deletion(&snapshot, max),
        }
    }
}

/// (scenario, world, pod to evict, expected reason label, words the message must hold)
type Case = (
    &'static str,
    World,
    &'static str,
    &'static str,
    &'static [&'static str],
);

fn check(cases: Vec<Case>) {
    for (scenario, world, evicted, reason, words) in cases {
        let verdict = world.decide(evicted);
        assert_eq!(verdict.reason_label(), reason, "{scenario}: {verdict:?}");
        for word in words {
            assert!(
                verdict.message().contains(word),
                "{scenario}: {word:?} not in {:?}",
                verdict.message()
            );
        }
    }
}

#[test]
fn zone_mode() {
    check(vec![
        (
            "all ready: allowed",
            World::new(3, ingester_spec()),
            "ingester-zone-a-0",
            "zpdb_met",
            &["1 of 1"],
        ),
        (
            "another zone has a not-ready pod: denied, naming it",
            World::new(3, ingester_spec()).set("ingester-zone-b-1", State::NotReady),
            "ingester-zone-a-0",
            "other_zone_unavailable",
            &[
                "ingester-zone-b",
                "ingester-zone-b-1 not ready",
                "1 unavailable pod",
            ],
        ),
        (
            "another zone is missing a pod: denied",
            World::new(3, ingester_spec()).remove("ingester-zone-c-2"),
            "ingester-zone-a-0",
            "other_zone_unavailable",
            &["ingester-zone-c", "1 missing"],
        ),
        (
            "another zone has a terminating pod: denied",
            World::new(3, ingester_spec()).set("ingester-zone-b-0", State::Terminating),
            "ingester-zone-a-0",
            "other_zone_unavailable",
            &["ingester-zone-b-0 terminating"],
        ),
        (
            "another zone has a Pending pod: denied",
            World::new(3, ingester_spec()).set("ingester-zone-b-0", State::Pending),
            "ingester-zone-a-0",
            "other_zone_unavailable",
            &["Pending"],
        ),
        (
            "own zone at max 1 already: denied",
            World::new(3, ingester_spec()).set("ingester-zone-a-1", State::NotReady),
            "ingester-zone-a-0",
            "zone_at_max_unavailable",
            &[
                "allows 1 unavailable pod in StatefulSet ingester-zone-a",
                "already has 1",
                "ingester-zone-a-1",
            ],
        ),
        (
            "own zone: the evicted pod itself not ready does not count against it",
            World::new(3, ingester_spec()).set("ingester-zone-a-0", State::NotReady),
            "ingester-zone-a-0",
            "zpdb_met",
            &[],
        ),
        (
            "own zone missing a pod counts as unavailable",
            World::new(3, ingester_spec()).remove("ingester-zone-a-2"),
            "ingester-zone-a-0",
            "zone_at_max_unavailable",
            &["1 missing"],
        ),
        (
            "maxUnavailable 2 with one down: allowed",
            World::new(
                3,
                ZpdbSpec {
                    max_unavailable: Some(2),
                    ..ingester_spec()
                },
            )
            .set("ingester-zone-a-1", State::NotReady),
            "ingester-zone-a-0",
            "zpdb_met",
            &["2 of 2"],
        ),
        (
            "maxUnavailable 0: every eviction denied",
            World::new(
                3,
                ZpdbSpec {
                    max_unavailable: Some(0),
                    ..ingester_spec()
                },
            ),
            "ingester-zone-a-0",
            "zone_at_max_unavailable",
            &["allows 0 unavailable pods"],
        ),
        (
            "a recently allowed eviction in another zone counts as unavailable",
            {
                let mut world = World::new(3, ingester_spec());
                world.recently_allowed.pods.insert(
                    "ingester-zone-b-0".into(),
                    AllowedEviction {
                        at: now() - SignedDuration::from_secs(5),
                        uid: None,
                    },
                );
                world
            },
            "ingester-zone-a-0",
            "other_zone_unavailable",
            &["ingester-zone-b-0 eviction allowed at"],
        ),
        (
            "an expired record counts no more",
            {
                let mut world = World::new(3, ingester_spec());
                world.recently_allowed.pods.insert(
                    "ingester-zone-b-0".into(),
                    AllowedEviction {
                        at: now() - SignedDuration::from_secs(61),
                        uid: None,
                    },
                );
                world
            },
            "ingester-zone-a-0",
            "zpdb_met",
            &[],
        ),
        (
            "a retried eviction of the recorded pod itself is allowed again",
            {
                let mut world = World::new(3, ingester_spec());
                world.recently_allowed.pods.insert(
                    "ingester-zone-a-0".into(),
                    AllowedEviction {
                        at: now(),
                        uid: None,
                    },
                );
                world
            },
            "ingester-zone-a-0",
            "zpdb_met",
            &[],
        ),
    ]);
}

#[test]
fn percentage() {
    let spec = |percent| ZpdbSpec {
        max_unavailable_percentage: Some(percent),
        ..ingester_spec()
    };
    check(vec![
        (
            "50% of 4 is 2: a second pod may go",
            World::new(4, spec(50)).set("ingester-zone-a-1", State::NotReady),
            "ingester-zone-a-0",
            "zpdb_met",
            &["2 of 2"],
        ),
        (
            "50% of 4 is 2: a third may not",
            World::new(4, spec(50))
                .set("ingester-zone-a-1", State::NotReady)
                .set("ingester-zone-a-2", State::NotReady),
            "ingester-zone-a-0",
            "zone_at_max_unavailable",
            &["allows 2", "maxUnavailablePercentage 50"],
        ),
        (
            "10% of 3 rounds to at least 1",
            World::new(3, spec(10)),
            "ingester-zone-a-0",
            "zpdb_met",
            &["1 of 1"],
        ),
        (
            "0% denies every eviction",
            World::new(3, spec(0)),
            "ingester-zone-a-0",
            "zone_at_max_unavailable",
            &["allows 0"],
        ),
    ]);
    assert_eq!(MaxUnavailable::Percentage(100).of(7), 7);
    assert_eq!(MaxUnavailable::Percentage(34).of(3), 1);
    assert_eq!(MaxUnavailable::Percentage(67).of(3), 2);
    assert_eq!(MaxUnavailable::Percentage(50).of(0), 1);
}

#[test]
fn partition_mode() {
    check(vec![
        (
            "all ready: allowed",
            World::new(3, partition_spec()),
            "ingester-zone-a-1",
            "zpdb_met",
            &["partition 1"],
        ),
        (
            "another zone's pod of another partition down: allowed",
            World::new(3, partition_spec()).set("ingester-zone-b-2", State::NotReady),
            "ingester-zone-a-1",
            "zpdb_met",
            &[],
        ),
        (
            "another zone's pod of the same partition down: denied",
            World::new(3, partition_spec()).set("ingester-zone-b-1", State::NotReady),
            "ingester-zone-a-1",
            "partition_at_max_unavailable",
            &["partition 1", "ingester-zone-b-1 not ready", "allows 1"],
        ),
        (
            "a zone without a pod of the partition counts as missing",
            World::new(3, partition_spec()).remove("ingester-zone-c-1"),
            "ingester-zone-a-1",
            "partition_at_max_unavailable",
            &["ingester-zone-c: 1 missing"],
        ),
        (
            "own zone's other pods down do not matter",
            World::new(3, partition_spec())
                .set("ingester-zone-a-0", State::NotReady)
                .set("ingester-zone-a-2", State::NotReady),
            "ingester-zone-a-1",
            "zpdb_met",
            &[],
        ),
        (
            "maxUnavailable 2: one zone of the partition down, a second may go",
            World::new(
                3,
                ZpdbSpec {
                    max_unavailable: Some(2),
                    ..partition_spec()
                },
            )
            .set("ingester-zone-b-1", State::NotReady),
            "ingester-zone-a-1",
            "zpdb_met",
            &["2 of 2"],
        ),
        (
            "maxUnavailable 0: denied",
            World::new(
                3,
                ZpdbSpec {
                    max_unavailable: Some(0),
                    ..partition_spec()
                },
            ),
            "ingester-zone-a-1",
            "partition_at_max_unavailable",
            &["allows 0"],
        ),
        (
            "a name the regex does not match: denied, naming the regex",
            World::new(
                3,
                ZpdbSpec {
                    pod_name_partition_regex: Some("ingester-zone-[a-z]-(1[0-9])".into()),
                    ..ingester_spec()
                },
            ),
            "ingester-zone-a-1",
            "partition_unknown",
            &["podNamePartitionRegex", "partition is unknown"],
        ),
        (
            "regex group 2 names the partition",
            World::new(
                3,
                ZpdbSpec {
                    pod_name_partition_regex: Some("(ingester)-zone-[a-z]-([0-9]+)".into()),
                    pod_name_regex_group: Some(2),
                    ..ingester_spec()
                },
            )
            .set("ingester-zone-c-1", State::NotReady),
            "ingester-zone-a-1",
            "partition_at_max_unavailable",
            &["partition 1", "ingester-zone-c-1"],
        ),
    ]);
}

#[test]
fn cross_zone_eviction_delay() {
    let spec = ZpdbSpec {
        cross_zone_eviction_delay: Some("10m".into()),
        ..partition_spec()
    };
    check(vec![
        (
            "the partition's pod in another zone ready for 5 of 10 minutes: denied",
            World::new(3, spec.clone()).set("ingester-zone-b-1", State::ReadyFor(300)),
            "ingester-zone-a-1",
            "partition_at_max_unavailable",
            &["ingester-zone-b-1 ready too recently, counts from 2027-01-15T08:05:00Z"],
        ),
        (
            "ready for 11 minutes: allowed",
            World::new(3, spec.clone()).set("ingester-zone-b-1", State::ReadyFor(660)),
            "ingester-zone-a-1",
            "zpdb_met",
            &[],
        ),
        (
            "ready since a time Kubernetes does not say: held (fail closed, as the Go operator since v0.40)",
            World::new(3, spec.clone()).set("ingester-zone-b-1", State::ReadySinceUnknown),
            "ingester-zone-a-1",
            "partition_at_max_unavailable",
            &["ingester-zone-b-1 ready since an unknown time"],
        ),
        (
            "the delay does not hold other partitions",
            World::new(3, spec).set("ingester-zone-b-2", State::ReadyFor(10)),
            "ingester-zone-a-1",
            "zpdb_met",
            &[],
        ),
    ]);
}

#[test]
fn what_is_allowed_before_any_budget_is_consulted() {
    check(vec![
        (
            "a terminating pod",
            World::new(3, ingester_spec())
                .set("ingester-zone-b-0", State::NotReady)
                .set("ingester-zone-a-0", State::Terminating),
            "ingester-zone-a-0",
            "pod_terminating",
            &[],
        ),
        (
            "a pod that is not running",
            World::new(3, ingester_spec())
                .set("ingester-zone-b-0", State::NotReady)
                .set("ingester-zone-a-0", State::Pending),
            "ingester-zone-a-0",
            "pod_not_running",
            &["Pending"],
        ),
        (
            "no budget selects the pod",
            World::new(
                3,
                ZpdbSpec {
                    selector: Some(match_labels(&[("rollout-group", "store-gateway")])),
                    ..ZpdbSpec::default()
                },
            )
            .set("ingester-zone-b-0", State::NotReady),
            "ingester-zone-a-0",
            "no_zpdb",
            &[],
        ),
    ]);
}

#[test]
fn budgets_that_cannot_judge() {
    let two_budgets = {
        let mut world = World::new(3, ingester_spec());
        world.budgets.push(zpdb(
            "by-expression",
            ZpdbSpec {
                selector: Some(LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "zone".into(),
                        operator: "In".into(),
                        values: Some(vec!["ingester-zone-a".into()]),
                    }]),
                }),
                ..ZpdbSpec::default()
            },
        ));
        world
    };
    let invalid = World::new(
        3,
        ZpdbSpec {
            max_unavailable: Some(-1),
            ..ingester_spec()
        },
    );
    let not_owned = {
        let mut world = World::new(3, ingester_spec());
        world.statefulsets[0].metadata.labels = Some(labels(&[("rollout-group", "other")]));
        world
    };
    let one_zone = {
        let mut world = World::new(3, ingester_spec());
        for statefulset in &mut world.statefulsets[1..] {
            statefulset.metadata.labels = None;
        }
        world
    };
    check(vec![
        (
            "two budgets select the pod",
            two_budgets,
            "ingester-zone-a-0",
            "multiple_zpdbs",
            &["by-expression", "ingester", "exactly one"],
        ),
        (
            "the selecting budget is invalid",
            invalid,
            "ingester-zone-a-0",
            "invalid_zpdb",
            &["spec.maxUnavailable", "ingester"],
        ),
        (
            "the pod's owner is not among the budget's StatefulSets",
            not_owned,
            "ingester-zone-a-0",
            "owner_not_selected",
            &[
                "owner StatefulSet ingester-zone-a",
                "[ingester-zone-b, ingester-zone-c]",
            ],
        ),
        (
            "fewer than two StatefulSets",
            one_zone,
            "ingester-zone-a-0",
            "too_few_statefulsets",
            &["selects 1 StatefulSet", "at least two"],
        ),
    ]);
}

#[test]
fn validation_names_the_field() {
    let cases: Vec<(&str, ZpdbSpec, &[&str])> = vec![
        (
            "no selector",
            ZpdbSpec::default(),
            &["spec.selector: is required"],
        ),
        (
            "empty selector",
            ZpdbSpec {
                selector: Some(LabelSelector::default()),
                ..ZpdbSpec::default()
            },
            &["spec.selector: must have"],
        ),
        (
            "unknown selector operator",
            ZpdbSpec {
                selector: Some(LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "zone".into(),
                        operator: "Near".into(),
                        values: None,
                    }]),
                }),
                ..ZpdbSpec::default()
            },
            &["spec.selector: is not a valid label selector"],
        ),
        (
            "negative maxUnavailable",
            ZpdbSpec {
                max_unavailable: Some(-1),
                ..ingester_spec()
            },
            &["spec.maxUnavailable: must be an integer from 0", "got -1"],
        ),
        (
            "both forms",
            ZpdbSpec {
                max_unavailable: Some(1),
                max_unavailable_percentage: Some(50),
                ..ingester_spec()
            },
            &["spec.maxUnavailable: only one of maxUnavailable and maxUnavailablePercentage"],
        ),
        (
            "percentage over 100",
            ZpdbSpec {
                max_unavailable_percentage: Some(101),
                ..ingester_spec()
            },
            &["spec.maxUnavailablePercentage: must be an integer from 0 to 100, got 101"],
        ),
        (
            "negative percentage",
            ZpdbSpec {
                max_unavailable_percentage: Some(-5),
                ..ingester_spec()
            },
            &["got -5"],
        ),
        (
            "percentage with a partition regex",
            ZpdbSpec {
                max_unavailable_percentage: Some(50),
                ..partition_spec()
            },
            &["spec.maxUnavailablePercentage: cannot be used with podNamePartitionRegex"],
        ),
        (
            "a bad regex",
            ZpdbSpec {
                pod_name_partition_regex: Some("ingester-([0-9]+".into()),
                ..ingester_spec()
            },
            &["spec.podNamePartitionRegex: \"ingester-([0-9]+\" is not a valid regular expression"],
        ),
        (
            "a regex without a group",
            ZpdbSpec {
                pod_name_partition_regex: Some("ingester-[0-9]+".into()),
                ..ingester_spec()
            },
            &["spec.podNamePartitionRegex: \"ingester-[0-9]+\" has no capture group"],
        ),
        (
            "a group index out of range",
            ZpdbSpec {
                pod_name_regex_group: Some(2),
                ..partition_spec()
            },
            &[
                "spec.podNameRegexGroup: is 2, out of range",
                "has 1 capture group ",
            ],
        ),
        (
            "group 0",
            ZpdbSpec {
                pod_name_regex_group: Some(0),
                ..partition_spec()
            },
            &["spec.podNameRegexGroup: is 0, out of range"],
        ),
        (
            "two groups, index not set",
            ZpdbSpec {
                pod_name_partition_regex: Some("(a)-(b)".into()),
                ..ingester_spec()
            },
            &["spec.podNameRegexGroup: must be set", "2 capture groups"],
        ),
        (
            "a group without a regex",
            ZpdbSpec {
                pod_name_regex_group: Some(1),
                ..ingester_spec()
            },
            &["spec.podNameRegexGroup: is 1 but podNamePartitionRegex is not set"],
        ),
        (
            "a delay without a regex",
            ZpdbSpec {
                cross_zone_eviction_delay: Some("5m".into()),
                ..ingester_spec()
            },
            &["spec.crossZoneEvictionDelay: needs podNamePartitionRegex"],
        ),
        (
            "a delay that is not a duration",
            ZpdbSpec {
                cross_zone_eviction_delay: Some("5 minutes".into()),
                ..partition_spec()
            },
            &["spec.crossZoneEvictionDelay:", "Go duration"],
        ),
        (
            "a negative delay",
            ZpdbSpec {
                cross_zone_eviction_delay: Some("-5m".into()),
                ..partition_spec()
            },
            &["spec.crossZoneEvictionDelay: must not be negative"],
        ),
        (
            "every problem at once",
            ZpdbSpec {
                max_unavailable: Some(-1),
                pod_name_partition_regex: Some("x".into()),
                ..ZpdbSpec::default()
            },
            &[
                "spec.selector",
                "spec.maxUnavailable",
                "spec.podNamePartitionRegex",
            ],
        ),
    ];
    for (scenario, spec, words) in cases {
        let invalid = Budget::parse(&zpdb("bad", spec)).expect_err(scenario);
        let message = invalid.to_string();
        assert!(
            message.starts_with("ZoneAwarePodDisruptionBudget bad is invalid: "),
            "{message}"
        );
        for word in words {
            assert!(
                message.contains(word),
                "{scenario}: {word:?} not in {message:?}"
            );
        }
    }
}

#[test]
fn valid_specs_and_defaults() {
    let budget = Budget::parse(&zpdb("ok", ingester_spec())).unwrap();
    assert_eq!(
        budget.max_unavailable,
        MaxUnavailable::Count(1),
        "default maxUnavailable is 1"
    );
    assert!(budget.partition.is_none());
    let budget = Budget::parse(&zpdb(
        "ok",
        ZpdbSpec {
            cross_zone_eviction_delay: Some("1h30m".into()),
            ..partition_spec()
        },
    ))
    .unwrap();
    assert_eq!(
        budget.cross_zone_eviction_delay,
        Some(SignedDuration::from_mins(90))
    );
    let partition = budget.partition.unwrap();
    assert_eq!(partition.group, 1, "default podNameRegexGroup is 1");
    assert_eq!(partition.of("ingester-zone-a-17"), Some("17"));
    assert_eq!(
        partition.of("xingester-zone-a-17"),
        None,
        "matched against the whole name"
    );
    assert_eq!(
        partition.of("ingester-zone-a-17x"),
        None,
        "matched against the whole name"
    );
    assert!(
        Budget::parse(&zpdb(
            "ok",
            ZpdbSpec {
                max_unavailable_percentage: Some(100),
                ..ingester_spec()
            }
        ))
        .is_ok()
    );
    // The Go operator's field names and the defaults of an object as stored.
    let json = serde_json::json!({
        "apiVersion": "rollout-operator.grafana.com/v1",
        "kind": "ZoneAwarePodDisruptionBudget",
        "metadata": {"name": "ingester", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"rollout-group": "ingester"}},
            "maxUnavailable": 2,
            "podNamePartitionRegex": "[a-z\\-]+-zone-[a-z]-([0-9]+)",
            "podNameRegexGroup": 1,
            "crossZoneEvictionDelay": "20m"
        }
    });
    let parsed: ZoneAwarePodDisruptionBudget = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(parsed.spec.max_unavailable, Some(2));
    assert_eq!(serde_json::to_value(&parsed).unwrap(), json, "round trip");
    assert!(Budget::parse(&parsed).is_ok());
}

/// A drain and recoveries, step by step, against the decision with the recently-allowed record
/// the webhook keeps: an allowed eviction is recorded at once and reaches the cache later.
#[derive(Debug, Clone)]
enum Step {
    /// Try to evict pod `index`.
    Evict(usize),
    /// An allowed eviction reaches the cache: the pod is gone (counts as missing).
    Apply(usize),
    /// The StatefulSet controller recreates a gone pod, not ready yet.
    Recreate(usize),
    /// A recreated pod turns ready.
    Ready(usize),
    /// A rollout (max-unavailable 1) deletes the pod, if the decision lets it.
    RolloutDelete(usize),
}

fn steps(pods: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0..pods).prop_map(Step::Evict),
            1 => (0..pods).prop_map(Step::Apply),
            1 => (0..pods).prop_map(Step::Recreate),
            1 => (0..pods).prop_map(Step::Ready),
            1 => (0..pods).prop_map(Step::RolloutDelete),
        ],
        1..80,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sim {
    Ready,
    /// Eviction allowed, not yet seen by the cache.
    Allowed,
    Gone,
    NotReady,
}

/// Runs `steps` on 3 zones × `replicas`; returns, after every step, the zones with a pod not
/// Ready (or about to go) per partition key (`None`: zone mode, all pods one key).
fn simulate(
    replicas: u32,
    spec: ZpdbSpec,
    partitioned: bool,
    steps: &[Step],
) -> Result<(), String> {
    let mut world = World::new(replicas, spec);
    let names: Vec<String> = world
        .pods
        .iter()
        .map(|pod| pod.metadata.name.clone().unwrap())
        .collect();
    let mut sims = vec![Sim::Ready; names.len()];
    for step in steps {
        let rebuild = |world: &mut World, sims: &[Sim]| {
            world.pods = names
                .iter()
                .zip(sims)
                .filter(|(_, sim)| **sim != Sim::Gone)
                .map(|(name, sim)| {
                    let (statefulset, ordinal) = name.rsplit_once('-').unwrap();
                    let state = if *sim == Sim::NotReady {
                        State::NotReady
                    } else {
                        State::Ready
                    };
                    pod(statefulset, ordinal.parse().unwrap(), state)
                })
                .collect();
            world.recently_allowed.pods = names
                .iter()
                .zip(sims)
                .filter(|(_, sim)| **sim == Sim::Allowed)
                .map(|(name, _)| {
                    (
                        name.clone(),
                        AllowedEviction {
                            at: now(),
                            uid: None,
                        },
                    )
                })
                .collect();
        };
        match *step {
            Step::Evict(index) if sims[index] == Sim::Ready || sims[index] == Sim::NotReady => {
                rebuild(&mut world, &sims);
                if world.decide(&names[index]).is_allowed() {
                    sims[index] = Sim::Allowed;
                }
            }
            Step::RolloutDelete(index)
                if sims[index] == Sim::Ready || sims[index] == Sim::NotReady =>
            {
                rebuild(&mut world, &sims);
                if world.decide_rollout(&names[index], 1).is_allowed() {
                    sims[index] = Sim::Gone;
                }
            }
            Step::Apply(index) if sims[index] == Sim::Allowed => sims[index] = Sim::Gone,
            Step::Recreate(index) if sims[index] == Sim::Gone => sims[index] = Sim::NotReady,
            Step::Ready(index) if sims[index] == Sim::NotReady => sims[index] = Sim::Ready,
            _ => continue,
        }
        // The invariant: per key, at most one zone has pods that are not Ready.
        let mut zones_down: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
        for (name, sim) in names.iter().zip(&sims) {
            if *sim != Sim::Ready {
                let (zone, ordinal) = name.rsplit_once('-').unwrap();
                let key = if partitioned {
                    ordinal.to_owned()
                } else {
                    String::new()
                };
                zones_down.entry(key).or_default().insert(zone.to_owned());
            }
        }
        if let Some((key, zones)) = zones_down.iter().find(|(_, zones)| zones.len() > 1) {
            return Err(format!(
                "after {step:?}, key {key:?} has zones {zones:?} down: {sims:?}"
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_drains_never_take_out_two_zones(steps in steps(9), max in 0i64..4) {
        let spec = ZpdbSpec { max_unavailable: Some(max), ..ingester_spec() };
        prop_assert_eq!(simulate(3, spec, false, &steps), Ok(()));
    }

    #[test]
    fn random_drains_never_take_out_a_partition_in_two_zones(steps in steps(12)) {
        prop_assert_eq!(simulate(4, partition_spec(), true, &steps), Ok(()));
    }
}

#[test]
fn the_simulation_can_fail() {
    // Without the record, an allowed eviction not yet in the cache lets a second zone go.
    let mut world = World::new(3, ingester_spec());
    world.recently_allowed = RecentlyAllowed::default();
    assert!(world.decide("ingester-zone-a-0").is_allowed());
    assert!(
        world.decide("ingester-zone-b-0").is_allowed(),
        "nothing recorded: both allowed"
    );
    assert!(simulate(3, ingester_spec(), false, &[Step::Evict(0), Step::Evict(3)]).is_ok());
    // And a budget that allows 3 in a partition lets two zones go: the invariant catches it.
    let loose = ZpdbSpec {
        max_unavailable: Some(3),
        ..partition_spec()
    };
    assert!(simulate(4, loose, true, &[Step::Evict(0), Step::Evict(4)]).is_err());
}

#[test]
fn a_record_of_a_pod_since_recreated_counts_no_more() {
    let mut world = World::new(3, ingester_spec());
    let index = world.index("ingester-zone-b-0");
    world.pods[index].metadata.uid = Some("new-uid".into());
    let entry = |uid: &str| AllowedEviction {
        at: now(),
        uid: Some(uid.into()),
    };
    world
        .recently_allowed
        .pods
        .insert("ingester-zone-b-0".into(), entry("old-uid"));
    assert!(world.decide("ingester-zone-a-0").is_allowed());
    world
        .recently_allowed
        .pods
        .insert("ingester-zone-b-0".into(), entry("new-uid"));
    assert!(!world.decide("ingester-zone-a-0").is_allowed());
}

#[test]
fn a_rollout_deletion_is_held_to_the_other_zones_and_to_its_own_max_unavailable() {
    let zero = ZpdbSpec {
        max_unavailable: Some(0),
        ..ingester_spec()
    };
    // A budget of 0 refuses every eviction, but not a rollout's deletion.
    let world = World::new(3, zero.clone());
    assert_eq!(
        world.decide("ingester-zone-a-0").reason_label(),
        "zone_at_max_unavailable"
    );
    assert_eq!(
        world.decide_rollout("ingester-zone-a-0", 1).reason_label(),
        "zpdb_met"
    );
    // The rollout's own max-unavailable holds within the zone.
    let one_down = World::new(3, zero.clone()).set("ingester-zone-a-1", State::NotReady);
    assert_eq!(
        one_down
            .decide_rollout("ingester-zone-a-0", 1)
            .reason_label(),
        "zone_at_max_unavailable"
    );
    assert_eq!(
        one_down
            .decide_rollout("ingester-zone-a-0", 2)
            .reason_label(),
        "zpdb_met"
    );
    // And a drain's eviction in another zone, not yet visible as terminating, holds it.
    let mut drained = World::new(3, ingester_spec());
    drained.recently_allowed.pods.insert(
        "ingester-zone-b-2".into(),
        AllowedEviction {
            at: now(),
            uid: None,
        },
    );
    let verdict = drained.decide_rollout("ingester-zone-a-0", 1);
    assert_eq!(
        verdict.reason_label(),
        "other_zone_unavailable",
        "{verdict:?}"
    );
    assert!(
        verdict
            .message()
            .contains("ingester-zone-b-2 eviction allowed")
    );
    // Partition mode: the rollout's max counts across the partition's zones.
    let partitioned = World::new(
        3,
        ZpdbSpec {
            max_unavailable: Some(0),
            ..partition_spec()
        },
    )
    .set("ingester-zone-b-1", State::NotReady);
    assert_eq!(
        partitioned
            .decide_rollout("ingester-zone-a-0", 1)
            .reason_label(),
        "zpdb_met"
    );
    assert_eq!(
        partitioned
            .decide_rollout("ingester-zone-a-1", 1)
            .reason_label(),
        "partition_at_max_unavailable"
    );
}

#[test]
fn only_the_pods_a_zone_controls_count() {
    let mut world = World::new(2, ingester_spec()).set("ingester-zone-b-0", State::NotReady);
    assert_eq!(
        world.decide("ingester-zone-a-0").reason_label(),
        "other_zone_unavailable"
    );
    // The unready pod relabelled out of its StatefulSet's selector, or moved to another
    // namespace, is no longer that zone's: the zone counts it as missing instead.
    let index = world.index("ingester-zone-b-0");
    world.pods[index].metadata.labels = Some(labels(&[("zone", "elsewhere")]));
    let verdict = world.decide("ingester-zone-a-0");
    assert!(verdict.message().contains("1 missing"), "{verdict:?}");
    world.pods[index].metadata.labels = None;
    world.pods[index].metadata.namespace = Some("loki".into());
    let verdict = world.decide("ingester-zone-a-0");
    assert!(verdict.message().contains("1 missing"), "{verdict:?}");
}
