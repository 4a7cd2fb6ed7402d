//! The scaling pass composed: the order of its effects, what an outcome means for the rest of
//! the pass, and what the pods' answers to a delayed downscale decide.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::json;

use super::*;
use crate::downscale_history::{Records, ZoneTracker};
use crate::ledger::Ledger;
use crate::scaling::plan::ReferenceScale;

const NOW: i64 = 1_700_000_000;

fn now() -> Timestamp {
    Timestamp::from_second(NOW).unwrap()
}

fn statefulset(name: &str, replicas: i32, annotations: serde_json::Value) -> Arc<StatefulSet> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "mimir", "uid": format!("uid-{name}"),
                         "generation": 1, "annotations": annotations,
                         "labels": {"grafana.com/min-time-between-zones-downscale": "1h"}},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"z": name}},
                     "template": {"metadata": {"labels": {"z": name}}, "spec": {"containers": []}}},
            "status": {"replicas": replicas, "readyReplicas": replicas},
        }))
        .unwrap(),
    )
}

fn pass_over(statefulsets: &[Arc<StatefulSet>], tracker: &ZoneTracker) -> ScalingPass {
    pass_with_scales(statefulsets, &Vec::new(), tracker)
}

/// [`pass_over`], with the mirrored references' scales as read.
fn pass_with_scales(
    statefulsets: &[Arc<StatefulSet>],
    scales: &ReferenceScales,
    tracker: &ZoneTracker,
) -> ScalingPass {
    pass_with_unread(statefulsets, scales, tracker, &[])
}

/// [`pass_with_scales`], with member clusters that could not be read.
fn pass_with_unread(
    statefulsets: &[Arc<StatefulSet>],
    scales: &ReferenceScales,
    tracker: &ZoneTracker,
    unread: &[Unread],
) -> ScalingPass {
    let ledger = Ledger::default();
    let read = Read {
        group: "ingester",
        statefulsets,
        scales,
        pods: &[],
        records: Records {
            ledger: &ledger,
            tracker,
            claim_grace: Duration::from_secs(300),
        },
        tracker: "rollout-operator-zone-tracker",
        calls: PodCalls {
            addressing: PodAddressing::Dns,
            cluster_domain: "cluster.local",
            namespace: "mimir",
        },
        unread,
        now: now(),
    };
    decide(&read)
}

fn kinds(pass: &ScalingPass) -> Vec<String> {
    pass.effects
        .iter()
        .map(|effect| match effect {
            Effect::Tell { explanation, .. } => format!("Tell {}", explanation.reason),
            Effect::RepairTrackerEntry { statefulset, .. } => format!("Repair {statefulset}"),
            Effect::SetReplicas {
                statefulset, to, ..
            } => format!("Set {statefulset} {to}"),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn a_pass_tells_then_repairs_one_tracker_entry_then_scales() {
    let members = [
        statefulset("zone-a", 3, json!({})),
        statefulset(
            "zone-b",
            2,
            json!({"grafana.com/rollout-downscale-leader": "zone-a", "grafana.com/rollout-force-replicas": "x"}),
        ),
        statefulset("zone-c", 3, json!({})),
    ];
    let tracker = ZoneTracker {
        resource_version: Some("7".into()),
        data: BTreeMap::from([
            ("zone-a".to_owned(), "garbage".to_owned()),
            ("zone-c".to_owned(), "{}".to_owned()),
        ]),
    };
    let pass = pass_over(&members, &tracker);
    assert_eq!(
        kinds(&pass),
        [
            "Tell ScalingInvalidSetting",
            "Tell ZoneTrackerEntryInvalid",
            "Tell ZoneTrackerEntryInvalid",
            "Repair zone-a",
            "Set zone-b 3",
        ],
        "{pass:#?}"
    );
    let Effect::SetReplicas { told, .. } = &pass.effects[4] else {
        unreachable!()
    };
    assert_eq!(told.reason, reasons::SCALE_UP);
    assert_eq!(
        told.note,
        "zone-b scales up from 2 to 3: its leader zone-a has 3 replicas"
    );
    assert_eq!(pass.again, [], "nothing mirrored, nothing held");
    assert!(pass.effects.iter().filter(|e| e.needs_term()).count() == 2);
}

#[test]
fn a_held_downscale_says_when_to_look_again() {
    let members = [
        statefulset("zone-a", 2, json!({})),
        statefulset(
            "zone-b",
            3,
            json!({"grafana.com/rollout-downscale-leader": "zone-a"}),
        ),
    ];
    let downscaled = now() - jiff::SignedDuration::from_mins(10);
    let tracker = ZoneTracker {
        resource_version: Some("7".into()),
        data: BTreeMap::from([(
            "zone-a".to_owned(),
            crate::downscale_history::tracker_value(downscaled),
        )]),
    };
    let pass = pass_over(&members, &tracker);
    assert_eq!(kinds(&pass), ["Tell ScalingHeld"]);
    assert_eq!(
        pass.again,
        [Again::At(downscaled + jiff::SignedDuration::from_hours(1))]
    );
}

#[test]
fn what_an_outcome_means_for_the_rest_of_the_pass() {
    let set = Effect::SetReplicas {
        statefulset: "a".into(),
        from: 3,
        to: 2,
        told: scale_failed("a", 3, 2, "x"),
    };
    let repair = Effect::RepairTrackerEntry {
        statefulset: "a".into(),
        at: now(),
    };
    let store = Effect::FollowUp(FollowUp::Unreadable {
        statefulset: "a".into(),
        why: "x".into(),
    });
    let next = |again, then| Next { again, then };
    for effect in [&set, &repair, &store] {
        assert_eq!(effect.next(Outcome::Done), next(None, Then::Continue));
    }
    assert_eq!(
        set.next(Outcome::Stale),
        next(Some(Again::After(STALE_RETRY)), Then::SkipToFollowUp)
    );
    assert_eq!(
        set.next(Outcome::Failed),
        next(Some(Again::Poll), Then::SkipToFollowUp)
    );
    assert_eq!(
        repair.next(Outcome::Failed),
        next(Some(Again::After(FAILED_RECORD_RETRY)), Then::Continue)
    );
    assert_eq!(repair.next(Outcome::Stale), next(None, Then::Continue));
    assert_eq!(
        store.next(Outcome::Stale),
        next(Some(Again::After(FAILED_RECORD_RETRY)), Then::End)
    );
}

fn step(write_back: bool) -> DelayedStep {
    DelayedStep {
        statefulset: "zone-a".into(),
        from: 4,
        to: 2,
        delay: Duration::from_secs(3600),
        ordinals_start: 0,
        going: Vec::new(),
        write_back: write_back.then(|| MirrorReference {
            name: "ref".into(),
            kind: "ReplicaTemplate".into(),
            api_version: "v1".into(),
            write_back: true,
        }),
    }
}

#[test]
fn the_pods_answers_conclude_a_delayed_downscale() {
    let ago = |seconds| Ok(now() - jiff::SignedDuration::from_secs(seconds));
    // Pod 3 prepared long ago, pod 2 recently: one goes, the count is written back.
    let answers = BTreeMap::from([(2, ago(60)), (3, ago(7200))]);
    let concluded = conclude(&step(true), &answers, now());
    assert_eq!(concluded.again, None);
    let [
        Effect::SetReplicas { to: 3, told, .. },
        Effect::WriteBack { replicas: 3, .. },
    ] = concluded.effects.as_slice()
    else {
        panic!("{concluded:#?}");
    };
    assert_eq!(
        told.note,
        "zone-a scales down from 4 to 3 (of the wanted 2; the others prepared less than 1h ago): its pods prepared for delayed downscale at least 1h ago"
    );
    // Pod 3 recent: wait for it.
    let answers = BTreeMap::from([(2, ago(7200)), (3, ago(60))]);
    let concluded = conclude(&step(false), &answers, now());
    assert_eq!(
        concluded.again,
        Some(Again::At(now() + jiff::SignedDuration::from_secs(3540)))
    );
    let [Effect::Tell { explanation, .. }] = concluded.effects.as_slice() else {
        panic!("{concluded:#?}");
    };
    assert_eq!(explanation.reason, reasons::DELAYED_DOWNSCALE_WAITING);
    // A pod that failed: held, polled.
    let answers = BTreeMap::from([(2, ago(7200)), (3, Err("HTTP 500".to_owned()))]);
    let concluded = conclude(&step(false), &answers, now());
    assert_eq!(concluded.again, Some(Again::Poll));
    let [Effect::Tell { explanation, .. }] = concluded.effects.as_slice() else {
        panic!("{concluded:#?}");
    };
    assert_eq!(
        explanation.note,
        "zone-a stays at 4 (wanted 2): pods could not be prepared for delayed downscale: zone-a-3: HTTP 500"
    );
}

#[test]
fn a_sequence_skips_to_the_follow_up_after_a_refused_scale_and_ends_on_a_failed_follow_up() {
    let tell = |statefulset: &str| Effect::Tell {
        statefulset: statefulset.into(),
        explanation: scale_failed("x", 1, 2, "y"),
    };
    let set = Effect::SetReplicas {
        statefulset: "a".into(),
        from: 3,
        to: 4,
        told: scale_failed("a", 3, 4, "y"),
    };
    let write_back = Effect::WriteBack {
        statefulset: "a".into(),
        reference: step(true).write_back.unwrap(),
        replicas: 4,
    };
    let unreadable = |statefulset: &str| {
        Effect::FollowUp(FollowUp::Unreadable {
            statefulset: statefulset.into(),
            why: "z".into(),
        })
    };
    let mut sequence = Sequence::new(ScalingPass {
        effects: vec![
            tell("t"),
            set.clone(),
            write_back,
            unreadable("b"),
            unreadable("c"),
        ],
        again: vec![Again::Poll],
    });
    let mut ran = Vec::new();
    while let Some(effect) = sequence.next_effect() {
        let outcome = match &effect {
            Effect::SetReplicas { .. } => Outcome::Failed,
            Effect::FollowUp(_) => Outcome::Stale,
            _ => Outcome::Done,
        };
        sequence.answer(&effect, outcome);
        ran.push(effect);
    }
    assert_eq!(ran, [tell("t"), set, unreadable("b")]);
    assert_eq!(
        sequence.again(),
        [Again::Poll, Again::Poll, Again::After(FAILED_RECORD_RETRY)]
    );
}

#[test]
fn a_delayed_downscale_concluded_comes_next() {
    let prepare = Effect::PrepareDelayedDownscale(step(false));
    let later = Effect::RepairTrackerEntry {
        statefulset: "b".into(),
        at: now(),
    };
    let mut sequence = Sequence::new(ScalingPass {
        effects: vec![prepare.clone(), later.clone()],
        again: Vec::new(),
    });
    assert_eq!(sequence.next_effect(), Some(prepare));
    let answers = BTreeMap::from([(2, Ok(now())), (3, Ok(now()))]);
    let concluded = conclude(&step(false), &answers, now());
    let waiting = concluded.effects.clone();
    sequence.concluded(concluded);
    assert_eq!(sequence.next_effect().as_ref(), waiting.first());
    assert_eq!(sequence.next_effect(), Some(later));
    assert_eq!(
        sequence.again(),
        [Again::At(now() + jiff::SignedDuration::from_hours(1))]
    );
}

/// The delayed downscale a mirroring StatefulSet of 3 prepares when its reference asks for 1,
/// with `write_back` as its `-write-back` annotation.
fn prepared_with_write_back(write_back: Option<&str>) -> DelayedStep {
    let mut annotations = json!({
        "grafana.com/rollout-mirror-replicas-from-resource-name": "ingester",
        "grafana.com/rollout-mirror-replicas-from-resource-kind": "ReplicaTemplate",
        "grafana.com/rollout-mirror-replicas-from-resource-api-version": "rollout-operator.grafana.com/v1",
        "grafana.com/rollout-delayed-downscale": "1h",
        "grafana.com/rollout-prepare-delayed-downscale-url": "http://pod/prepare",
    });
    if let Some(value) = write_back {
        annotations["grafana.com/rollout-mirror-replicas-from-resource-write-back"] = value.into();
    }
    let statefulsets = [statefulset("ingester-zone-a", 3, annotations)];
    let reference = crate::annotations::scaling::mirror_reference(
        statefulsets[0]
            .metadata
            .annotations
            .as_ref()
            .expect("annotated"),
    )
    .expect("valid")
    .expect("a reference")
    .value;
    let scales: ReferenceScales = vec![(
        reference,
        Ok(ReferenceScale {
            spec_replicas: 1,
            status_replicas: Some(3),
        }),
    )];
    let pass = pass_with_scales(&statefulsets, &scales, &ZoneTracker::default());
    pass.effects
        .into_iter()
        .find_map(|effect| match effect {
            Effect::PrepareDelayedDownscale(step) => Some(step),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no delayed downscale prepared for {write_back:?}"))
}

#[test]
fn a_delayed_downscale_writes_the_reference_back_only_where_its_switch_lets_it() {
    // Given a StatefulSet mirroring a reference that asks for fewer replicas, with a delay
    for (switch, written) in [
        (None, true),
        (Some("true"), true),
        (Some("false"), false),
        (Some("0"), false),
        (Some("not a boolean"), false),
    ] {
        // Then the downscale it prepares writes the new count back only if the switch allows
        let step = prepared_with_write_back(switch);
        assert_eq!((step.from, step.to), (3, 1), "{switch:?}");
        assert_eq!(step.write_back.is_some(), written, "{switch:?}");
    }
}

#[test]
fn a_group_across_clusters_follows_a_leader_of_another_cluster_unless_a_cluster_is_unread() {
    // Given a leader in cluster-a, its follower in cluster-b naming it by its qualified name,
    // and a malformed tracker entry of the follower;
    let members = [
        statefulset("cluster-a/zone-a", 3, json!({})),
        statefulset(
            "cluster-b/zone-b",
            2,
            json!({"grafana.com/rollout-downscale-leader": "cluster-a/zone-a"}),
        ),
    ];
    let tracker = ZoneTracker {
        resource_version: Some("7".into()),
        data: BTreeMap::from([("cluster-b/zone-b".to_owned(), "garbage".to_owned())]),
    };
    // when every cluster is read, the follower follows (and the entry is repaired);
    let whole = pass_with_unread(&members, &Vec::new(), &tracker, &[]);
    assert_eq!(
        kinds(&whole),
        [
            "Tell ZoneTrackerEntryInvalid",
            "Repair cluster-b/zone-b",
            "Set cluster-b/zone-b 3"
        ],
        "{whole:#?}"
    );
    // when cluster-c could not be read, nothing is written: each member is held, saying why.
    let unread = [Unread {
        cluster: "cluster-c".into(),
        why: "watching its pods failed: connection refused".into(),
    }];
    let partial = pass_with_unread(&members, &Vec::new(), &tracker, &unread);
    assert_eq!(
        kinds(&partial),
        [
            "Tell ScalingHeld",
            "Tell ScalingHeld",
            "Tell ZoneTrackerEntryInvalid"
        ],
        "{partial:#?}"
    );
    assert!(partial.effects.iter().all(|effect| !effect.needs_term()));
    assert_eq!(partial.again, [Again::Poll]);
}
