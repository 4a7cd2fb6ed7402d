//! Every parser of what a namespace user writes, fed generated input: the annotation and label
//! values of the contract, both duration syntaxes, the downscale ledger and the Go operator's
//! zone tracker, the eviction records, and zone-aware budget specs with their regex. Inputs are
//! arbitrary strings and mutations of the corpus in `tests/corpus/` (values users write and
//! values attackers would). Nothing may panic; what parses keeps its invariants (round trips
//! included), and each target counts how many cases parsed far enough to reach each check and
//! asserts a minimum share: a check that no input reaches proves nothing.
//!
//! `FUZZ_CASES=N` runs N cases per target instead of the default (the figures of a long run are
//! in docs/security.md).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Duration;

use baton_core::annotations::rollout::{max_unavailable, paused};
use baton_core::annotations::scaling::{
    delayed_downscale, force_replicas, min_time_between_zones_downscale, mirror_reference,
    upscale_only_when_leader_ready,
};
use baton_core::annotations::{
    DELAYED_DOWNSCALE_ANNOTATION, FORCE_REPLICAS_ANNOTATION, LAST_DOWNSCALE_ANNOTATION,
    MAX_UNAVAILABLE_ANNOTATION, MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL,
    MIRROR_REPLICAS_KIND_ANNOTATION, MIRROR_REPLICAS_NAME_ANNOTATION,
    PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION, ROLLOUT_PAUSED_ANNOTATION,
    UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION,
};
use baton_core::clock::MAX_CLOCK_SKEW;
use baton_core::downscale_history::{Records, ZoneTracker, follow_up_claims, last_downscale};
use baton_core::duration::{go, prometheus};
use baton_core::ledger::Ledger;
use baton_core::zpdb::record::{recently_allowed, with_eviction};
use baton_core::zpdb::spec::{Budget, ZoneAwarePodDisruptionBudget};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use proptest::prelude::*;
use serde_json::{Value, json};

#[path = "support/fuzz.rs"]
mod fuzz;
use fuzz::{corpus, runner, value_from};

const ANNOTATION_VALUES: &str = include_str!("corpus/annotation-values.txt");
const RECORD_VALUES: &str = include_str!("corpus/record-values.txt");
const BUDGET_SPECS: &str = include_str!("corpus/budget-specs.json");
/// The share of a target's cases each of its checks must be reached by: about half the
/// smallest measured with the default case counts (6 % of the annotation values reach the
/// force-replicas and delayed-downscale checks, 7 % the Prometheus round trip).
const PERCENT: u32 = 3;
/// Fewer cases than this (a quick `FUZZ_CASES` run) say little of a share: counted only.
const CASES_FOR_A_SHARE: u32 = 500;

/// How many cases reached each check of a target: a round trip (or an invariant of what
/// parses) that too few inputs reach checks next to nothing, so each target asserts a share.
#[derive(Default)]
struct Reached {
    cases: Cell<u32>,
    checks: RefCell<BTreeMap<&'static str, u32>>,
}

impl Reached {
    fn case(&self) {
        self.cases.set(self.cases.get() + 1);
    }

    fn reached(&self, check: &'static str) {
        *self.checks.borrow_mut().entry(check).or_default() += 1;
    }

    /// Each of `checks` was reached by at least `percent` % of the cases run.
    fn assert_at_least(&self, percent: u32, checks: &[&'static str]) {
        let cases = self.cases.get();
        let counts = self.checks.borrow();
        println!("{cases} cases reached {counts:?}");
        if cases < CASES_FOR_A_SHARE {
            return;
        }
        for check in checks {
            let count = counts.get(check).copied().unwrap_or(0);
            assert!(
                u64::from(count) * 100 >= u64::from(cases) * u64::from(percent),
                "{check}: reached by {count} of {cases} cases, fewer than {percent} %: \
                 the corpus no longer exercises it"
            );
        }
    }
}

/// The corpus's URLs, for the prepare-downscale URL beside a delay: both must parse for the
/// check of what parses to run.
fn urls() -> Vec<&'static str> {
    corpus(ANNOTATION_VALUES)
        .into_iter()
        .filter(|value| value.contains("://"))
        .collect()
}

/// The corpus's values that end in a unit, for the delay beside a URL.
fn durations() -> Vec<&'static str> {
    corpus(ANNOTATION_VALUES)
        .into_iter()
        .filter(|value| value.ends_with(['s', 'm', 'h', 'd', 'w']))
        .collect()
}

fn one(key: &str, value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(key.to_owned(), value.to_owned())])
}

#[test]
fn annotation_values_never_panic_and_what_parses_keeps_its_bounds() {
    let reached = Reached::default();
    runner(2000)
        .run(
            &(
                value_from(corpus(ANNOTATION_VALUES)),
                value_from(durations()),
                value_from(urls()),
                any::<u32>(),
            ),
            |(value, delay, url, replicas)| {
                reached.case();
                let parsed = max_unavailable(&one(MAX_UNAVAILABLE_ANNOTATION, &value), replicas);
                prop_assert!(parsed.value >= 1);
                paused(&one(ROLLOUT_PAUSED_ANNOTATION, &value));
                upscale_only_when_leader_ready(&one(
                    UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION,
                    &value,
                ));
                if let Some(forced) = force_replicas(&one(FORCE_REPLICAS_ANNOTATION, &value)).value
                {
                    reached.reached("force-replicas");
                    prop_assert!(forced >= 0);
                }
                let min_time = one(MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, &value);
                let empty = BTreeMap::new();
                for (labels, annotations) in [(&min_time, &empty), (&empty, &min_time)] {
                    if let Ok(parsed) = min_time_between_zones_downscale(labels, annotations)
                        && let Some(wait) = parsed.value
                    {
                        reached.reached("min-time round trip");
                        let nanos = i64::try_from(wait.as_nanos()).unwrap_or(i64::MAX);
                        prop_assert_eq!(go::parse(&go::format(nanos)), Ok(nanos));
                    }
                }
                // (a delay and a URL of their own: no one value is both)
                let mut delayed = one(DELAYED_DOWNSCALE_ANNOTATION, &delay);
                delayed.insert(PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION.to_owned(), url);
                if let Ok(Some(settings)) = delayed_downscale(&delayed) {
                    reached.reached("delayed downscale");
                    prop_assert!(!settings.delay.is_zero());
                    let _ = settings.url_for_host("pod.svc");
                }
                let mut mirror = one(MIRROR_REPLICAS_NAME_ANNOTATION, &value);
                mirror.insert(MIRROR_REPLICAS_KIND_ANNOTATION.to_owned(), value.clone());
                let _ = mirror_reference(&mirror);
                Ok(())
            },
        )
        .unwrap();
    reached.assert_at_least(
        PERCENT,
        &["force-replicas", "min-time round trip", "delayed downscale"],
    );
}

#[test]
fn durations_in_both_syntaxes_round_trip_what_parses() {
    let reached = Reached::default();
    runner(2000)
        .run(&value_from(corpus(ANNOTATION_VALUES)), |text| {
            reached.case();
            if let Ok(nanos) = go::parse(&text) {
                reached.reached("Go round trip");
                prop_assert_eq!(go::parse(&go::format(nanos)), Ok(nanos));
            }
            if let Ok(duration) = prometheus::parse(&text) {
                reached.reached("Prometheus round trip");
                prop_assert_eq!(
                    prometheus::parse(&prometheus::format(duration)),
                    Ok(duration)
                );
            }
            Ok(())
        })
        .unwrap();
    reached.assert_at_least(PERCENT, &["Go round trip", "Prometheus round trip"]);
}

/// A StatefulSet named `zone-a` at `generation`, with `annotation` as its last-downscale.
fn member(generation: i64, annotation: Option<&str>) -> StatefulSet {
    let annotations = match annotation {
        Some(annotation) => json!({LAST_DOWNSCALE_ANNOTATION: annotation}),
        None => json!({}),
    };
    serde_json::from_value(json!({
        "metadata": {"name": "zone-a", "generation": generation, "annotations": annotations},
    }))
    .expect("a StatefulSet")
}

/// `key: value` when there is a value, else nothing.
fn maybe(key: &str, value: Option<&str>) -> BTreeMap<String, String> {
    value.map(|value| one(key, value)).unwrap_or_default()
}

#[test]
fn downscale_records_never_panic_and_never_date_a_downscale_in_the_future() {
    let now: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
    let record = || value_from(corpus(RECORD_VALUES));
    let reached = Reached::default();
    runner(2000)
        .run(
            // (each record sometimes absent: one unreadable record makes the whole read fail,
            // and the check is of what reads)
            &(
                prop::option::of(record()),
                prop::option::of(record()),
                prop::option::of(value_from(corpus(ANNOTATION_VALUES))),
                any::<i64>(),
                0u64..120,
            ),
            |(ledger_value, tracker_value, annotation, generation, grace)| {
                reached.case();
                let ledger = Ledger {
                    resource_version: Some("1".into()),
                    data: maybe("zone-a", ledger_value.as_deref()),
                };
                let tracker = ZoneTracker {
                    resource_version: Some("1".into()),
                    data: maybe("zone-a", tracker_value.as_deref()),
                };
                let records = Records {
                    ledger: &ledger,
                    tracker: &tracker,
                    claim_grace: Duration::from_secs(grace),
                };
                let statefulset = member(generation, annotation.as_deref());
                if let Ok(Some(last)) = last_downscale(&statefulset, records, now) {
                    reached.reached("last downscale");
                    prop_assert!(last.at <= now + MAX_CLOCK_SKEW);
                }
                let _ = tracker.malformed(["zone-a"]);
                let _ = follow_up_claims(&ledger, [&statefulset], now, Duration::from_secs(grace));
                Ok(())
            },
        )
        .unwrap();
    reached.assert_at_least(PERCENT, &["last downscale"]);
}

#[test]
fn eviction_records_never_panic_and_a_write_keeps_only_readable_entries() {
    let now: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
    runner(2000)
        .run(
            &prop::collection::btree_map("[a-c]-[0-2]", value_from(corpus(RECORD_VALUES)), 0..6),
            |data| {
                let ledger = Ledger {
                    resource_version: Some("1".into()),
                    data,
                };
                let _ = recently_allowed(&ledger);
                let written = with_eviction(&ledger, "z-9", None, "r", now);
                prop_assert!(written.data.contains_key("z-9"));
                let read = recently_allowed(&written);
                prop_assert_eq!(read.pods.len(), written.data.len());
                Ok(())
            },
        )
        .unwrap();
}

/// A JSON value shaped like a budget spec, with arbitrary values where users write them.
fn budget_spec() -> impl Strategy<Value = Value> {
    let seeds: Vec<Value> = serde_json::from_str(BUDGET_SPECS).expect("the corpus is JSON");
    let text = || value_from(corpus(ANNOTATION_VALUES));
    let number = prop_oneof![any::<i64>().prop_map(|n| json!(n)), Just(json!(null))];
    (
        prop::sample::select(seeds),
        text(),
        text(),
        number.clone(),
        number,
        0u8..6,
    )
        .prop_map(|(mut spec, regex, delay, max, group, which)| {
            match which {
                0 => spec["podNamePartitionRegex"] = json!(regex),
                1 => spec["crossZoneEvictionDelay"] = json!(delay),
                2 => spec["maxUnavailable"] = max,
                3 => spec["podNameRegexGroup"] = group,
                4 => spec["maxUnavailablePercentage"] = max,
                _ => {}
            }
            spec
        })
}

#[test]
fn budget_specs_never_panic() {
    let reached = Reached::default();
    runner(1000)
        .run(&budget_spec(), |spec| {
            reached.case();
            let object = json!({
                "apiVersion": "rollout-operator.grafana.com/v1",
                "kind": "ZoneAwarePodDisruptionBudget",
                "metadata": {"name": "b", "uid": "u"},
                "spec": spec,
            });
            // What does not even decode is refused by the API's schema and the watch.
            if let Ok(budget) = serde_json::from_value::<ZoneAwarePodDisruptionBudget>(object) {
                reached.reached("decoded");
                if Budget::parse(&budget).is_ok() {
                    reached.reached("parsed");
                }
            }
            Ok(())
        })
        .unwrap();
    reached.assert_at_least(PERCENT, &["decoded", "parsed"]);
}
