//! Scenarios for the planner: one rule or edge of docs/compatibility.md's rollout algorithm each.

use crate::annotations::{
    InvalidAnnotation, MAX_ROLLING_MEMBERS_ANNOTATION, MAX_UNAVAILABLE_ANNOTATION,
    ROLLOUT_PAUSED_ANNOTATION,
};
use crate::explained::Explained;
use jiff::SignedDuration;

use super::*;
use crate::rollout::model::replacement_note;
use crate::rollout::snapshot::PodPhase;
use crate::testing::{NEW, OLD, Zone, group, now, zone};

/// Three zones of three pods after a template change: nothing updated yet.
fn fresh_rollout() -> [Zone; 3] {
    ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"]
        .map(|name| zone(name, 3).template_changed())
}

fn deleted(plan: &Plan) -> Vec<&str> {
    plan.actions
        .iter()
        .filter_map(|action| match action {
            Action::DeletePod { pod, .. } => Some(pod.as_str()),
            Action::SetCurrentRevision { .. } | Action::SetPartition { .. } => None,
        })
        .collect()
}

fn revisions_set(plan: &Plan) -> Vec<(&str, &str)> {
    plan.actions
        .iter()
        .filter_map(|action| match action {
            Action::SetCurrentRevision {
                statefulset,
                revision,
            } => Some((statefulset.as_str(), revision.as_str())),
            Action::DeletePod { .. } | Action::SetPartition { .. } => None,
        })
        .collect()
}

fn waiting(plan: &Plan) -> String {
    plan.waiting
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// The deletions of a plan with why each is free (None: it takes budget).
fn deletions(plan: &Plan) -> Vec<(&str, Option<Unavailable>)> {
    plan.actions
        .iter()
        .filter_map(|action| match action {
            Action::DeletePod {
                pod, unavailable, ..
            } => Some((pod.as_str(), unavailable.clone())),
            Action::SetCurrentRevision { .. } | Action::SetPartition { .. } => None,
        })
        .collect()
}

fn crash_loop() -> Option<Unavailable> {
    Some(Unavailable::Container("CrashLoopBackOff".to_owned()))
}

/// The pod a wait reason names.
fn named(pod: &str, updated: bool, why: Unavailable) -> Option<UnavailablePod> {
    Some(UnavailablePod {
        pod: pod.to_owned(),
        revision: if updated {
            PodRevision::New
        } else {
            PodRevision::Old
        },
        why,
    })
}

fn progress_of<'a>(plan: &'a Plan, statefulset: &str) -> &'a Progress {
    plan.progress
        .iter()
        .find(|progress| progress.statefulset == statefulset)
        .unwrap_or_else(|| panic!("no progress for {statefulset}"))
}

// --- Settled groups ---

#[test]
fn settled_group_needs_nothing() {
    let plan = plan(
        &group([zone("ingester-zone-a", 3), zone("ingester-zone-b", 3)]),
        now(),
    );
    assert_eq!(plan.actions, []);
    assert_eq!(plan.waiting, None);
    assert_eq!(plan.warnings, []);
    assert_eq!(plan.recheck_after, None);
    assert!(plan.progress.iter().all(|progress| progress.done));
}

#[test]
fn empty_group_needs_nothing() {
    let plan = plan(&group(Vec::<Zone>::new()), now());
    assert_eq!(
        plan,
        Plan {
            actions: vec![],
            waiting: None,
            warnings: vec![],
            progress: vec![],
            recheck_after: None,
        }
    );
}

// --- Which pods, how many ---

#[test]
fn template_change_deletes_the_lowest_ordinal_of_the_first_zone_only() {
    let plan = plan(&group(fresh_rollout()), now());
    assert_eq!(
        plan.actions,
        [Action::DeletePod {
            statefulset: "ingester-zone-a".to_owned(),
            pod: "ingester-zone-a-0".to_owned(),
            uid: "uid-ingester-zone-a-0".to_owned(),
            unavailable: None,
        }]
    );
    assert_eq!(plan.waiting, None);
}

#[test]
fn a_zone_whose_status_has_not_caught_up_with_its_template_holds_the_group() {
    // Given one template change applied to every zone at once, where the StatefulSet controller
    // has caught up with zones b and c but not yet with zone a (its status still shows the old
    // revision, so zone a looks complete)
    let [_, b, c] = fresh_rollout();
    let a = zone("ingester-zone-a", 3).status_behind_spec();
    // When baton plans
    let held = plan(&group([a, b, c]), now());
    // Then nothing happens anywhere (zone b is not taken for the canary), and it says why
    assert_eq!(held.actions, []);
    let waiting = held.waiting.expect("waits");
    assert_eq!(waiting.kind(), "StatusBehindSpec");
    assert_eq!(waiting.statefulset(), Some("ingester-zone-a"));
    assert_eq!(
        waiting.to_string(),
        "the status of ingester-zone-a describes generation 1 of its spec, not yet 2: waiting \
         for the StatefulSet controller"
    );

    // When the StatefulSet controller catches up with zone a, then zone a goes first
    let caught_up = plan(&group(fresh_rollout()), now());
    assert_eq!(deleted(&caught_up), ["ingester-zone-a-0"]);
}

#[test]
fn a_later_zone_whose_status_lags_holds_the_group_too() {
    // Zone a rolling, zone c's spec just changed (a replica count, a template): its counts and
    // readiness in the status are not yet about its spec, so no availability judgement holds.
    let [a, b, _] = fresh_rollout();
    let c = zone("ingester-zone-c", 3)
        .template_changed()
        .status_behind_spec();
    let plan = plan(&group([a.updated(&[0]), b, c]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        plan.waiting.as_ref().map(WaitReason::kind),
        Some("StatusBehindSpec")
    );
}

#[test]
fn max_unavailable_two_deletes_two_pods() {
    let [a, b, c] = fresh_rollout();
    let plan = plan(&group([a.max_unavailable("2"), b, c]), now());
    assert_eq!(deleted(&plan), ["ingester-zone-a-0", "ingester-zone-a-1"]);
}

#[test]
fn max_unavailable_two_with_one_pod_already_not_ready_deletes_one() {
    let [a, b, c] = fresh_rollout();
    let a = a.max_unavailable("2").updated(&[0]).not_ready(&[0]);
    let plan = plan(&group([a, b, c]), now());
    assert_eq!(deleted(&plan), ["ingester-zone-a-1"]);
}

#[test]
fn max_unavailable_reached_waits_and_says_so() {
    let [a, b, c] = fresh_rollout();
    let a = a.updated(&[0]).not_ready(&[0]);
    let plan = plan(&group([a, b, c]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        plan.waiting,
        Some(WaitReason::MaxUnavailable {
            statefulset: "ingester-zone-a".to_owned(),
            not_ready: 1,
            max_unavailable: 1,
            waiting_for: named("ingester-zone-a-0", true, Unavailable::NotReady),
        })
    );
    assert_eq!(
        waiting(&plan),
        "max-unavailable reached in ingester-zone-a (1/1); \
         waiting for ingester-zone-a-0 (new revision) to become ready: not ready"
    );
}

#[test]
fn never_deletes_more_than_are_left_to_update() {
    let a = zone("ingester-zone-a", 4)
        .template_changed()
        .updated(&[0, 1, 2])
        .max_unavailable("3");
    assert_eq!(deleted(&plan(&group([a]), now())), ["ingester-zone-a-3"]);
}

#[test]
fn pods_are_taken_in_natural_ordinal_order() {
    let a = || {
        zone("ingester-zone-a", 12)
            .template_changed()
            .all_updated()
            .revision_label(10, Some(OLD))
            .revision_label(2, Some(OLD))
            .revision_label(11, Some(OLD))
    };
    assert_eq!(deleted(&plan(&group([a()]), now())), ["ingester-zone-a-2"]);
    assert_eq!(
        deleted(&plan(&group([a().max_unavailable("2")]), now())),
        ["ingester-zone-a-2", "ingester-zone-a-10"]
    );
}

#[test]
fn percentage_max_unavailable_scales_with_spec_replicas() {
    let a = zone("ingester-zone-a", 4)
        .template_changed()
        .max_unavailable("50%");
    assert_eq!(
        deleted(&plan(&group([a]), now())),
        ["ingester-zone-a-0", "ingester-zone-a-1"]
    );
    let small = zone("ingester-zone-a", 3)
        .template_changed()
        .max_unavailable("10%");
    assert_eq!(
        deleted(&plan(&group([small]), now())),
        ["ingester-zone-a-0"]
    );
}

#[test]
fn percentage_of_zero_replicas_is_one_and_the_empty_zone_is_done() {
    let empty = zone("ingester-zone-a", 0)
        .template_changed()
        .max_unavailable("50%");
    let b = zone("ingester-zone-b", 2).template_changed();
    let plan = plan(&group([empty, b]), now());
    assert_eq!(plan.warnings, []);
    assert_eq!(revisions_set(&plan), [("ingester-zone-a", NEW)]);
    assert_eq!(deleted(&plan), ["ingester-zone-b-0"]);
}

#[test]
fn pod_without_revision_label_needs_an_update() {
    let a = zone("ingester-zone-a", 2)
        .template_changed()
        .all_updated()
        .revision_label(1, None);
    assert_eq!(deleted(&plan(&group([a]), now())), ["ingester-zone-a-1"]);
}

// --- Terminating pods ---

#[test]
fn terminating_pod_counts_as_not_ready_and_is_not_deleted_again() {
    // Still reported Ready by the status, as happens while a pod shuts down.
    let a = zone("ingester-zone-a", 3)
        .template_changed()
        .max_unavailable("2")
        .terminating(&[0]);
    let plan = plan(&group([a]), now());
    assert_eq!(deleted(&plan), ["ingester-zone-a-1"]);
}

#[test]
fn terminating_pod_uses_up_max_unavailable_of_one() {
    let [a, b, c] = fresh_rollout();
    let plan = plan(&group([a.terminating(&[0]), b, c]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "max-unavailable reached in ingester-zone-a (1/1); \
         waiting for ingester-zone-a-0 (old revision) to terminate"
    );
}

#[test]
fn only_terminating_pods_left_to_update_means_waiting_for_them() {
    let a = zone("ingester-zone-a", 3)
        .template_changed()
        .updated(&[1, 2])
        .max_unavailable("2")
        .terminating(&[0]);
    let plan = plan(
        &group([a, zone("ingester-zone-b", 3).template_changed()]),
        now(),
    );
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "zone ingester-zone-a has 1 not-ready pod; \
         waiting for ingester-zone-a-0 (old revision) to terminate"
    );
}

// --- Free replacement of unavailable outdated pods (a crash-looping old pod never holds the group) ---

#[test]
fn crash_looping_old_pod_of_the_not_ready_zone_is_replaced_at_no_cost() {
    // Given 3 zones (max-unavailable 1) where the old pod ingester-zone-b-2 crash-loops
    fn b_with(change: impl FnOnce(Zone) -> Zone) -> Zone {
        change(zone("ingester-zone-b", 3).template_changed())
    }
    let [a, _, c] = fresh_rollout();
    // When the fixed version is deployed
    let first = plan(&group([a, b_with(|b| b.crash_looping(&[2])), c]), now());
    // Then the crash-looping pod is replaced, although the budget is spent, and nothing else
    assert_eq!(deletions(&first), [("ingester-zone-b-2", crash_loop())]);
    assert_eq!(first.waiting, None);
    assert_eq!(
        first.actions[0].to_string(),
        "delete pod ingester-zone-b-2 of ingester-zone-b (CrashLoopBackOff, costs no availability)"
    );

    // While it terminates, zone b still has one pod down: nobody else goes
    let [a, _, c] = fresh_rollout();
    let terminating = plan(
        &group([a, b_with(|b| b.crash_looping(&[2]).terminating(&[2])), c]),
        now(),
    );
    assert_eq!(terminating.actions, []);
    assert_eq!(
        waiting(&terminating),
        "max-unavailable reached in ingester-zone-b (1/1); \
         waiting for ingester-zone-b-2 (old revision) to terminate"
    );

    // Once recreated at the fixed revision and ready, the rollout goes on with the budget
    let [a, _, c] = fresh_rollout();
    let fixed = plan(&group([a, b_with(|b| b.updated(&[2])), c]), now());
    assert_eq!(deletions(&fixed), [("ingester-zone-a-0", None)]);
}

#[test]
fn unavailable_old_pods_of_the_zone_being_rolled_go_first_and_outside_the_budget() {
    let a = || {
        zone("ingester-zone-a", 4)
            .template_changed()
            .updated(&[0])
            .crash_looping(&[3])
    };
    let b = || zone("ingester-zone-b", 4).template_changed();
    // max-unavailable 1 is spent by ingester-zone-a-3 itself: it alone is replaced.
    let spent = plan(&group([a(), b()]), now());
    assert_eq!(deletions(&spent), [("ingester-zone-a-3", crash_loop())]);
    // max-unavailable 2: it goes first, then one available pod, not two: its replacement
    // will be unavailable too until ready, so it does not give its place in the budget back.
    let two = plan(&group([a().max_unavailable("2"), b()]), now());
    assert_eq!(
        deletions(&two),
        [
            ("ingester-zone-a-3", crash_loop()),
            ("ingester-zone-a-1", None)
        ]
    );
}

#[test]
fn several_unavailable_old_pods_are_all_replaced_and_no_available_one() {
    let b = zone("ingester-zone-b", 5)
        .template_changed()
        .crash_looping(&[0, 3])
        .image_pull_failing(&[4]);
    let plan = plan(
        &group([zone("ingester-zone-a", 5).template_changed(), b]),
        now(),
    );
    // Three pods down for max-unavailable 1: replacing them keeps three down, no more.
    assert_eq!(
        deletions(&plan),
        [
            ("ingester-zone-b-0", crash_loop()),
            ("ingester-zone-b-3", crash_loop()),
            (
                "ingester-zone-b-4",
                Some(Unavailable::Container("ImagePullBackOff".to_owned()))
            ),
        ]
    );
}

#[test]
fn pending_failed_and_not_ready_old_pods_are_replaced_saying_why() {
    let cases = [
        (
            zone("ingester-zone-a", 3).phase(&[1], PodPhase::Pending),
            Unavailable::Phase(PodPhase::Pending),
            "replacing ingester-zone-a-1: Pending at the old revision, costs no availability",
        ),
        (
            zone("ingester-zone-a", 3).phase(&[1], PodPhase::Failed),
            Unavailable::Phase(PodPhase::Failed),
            "replacing ingester-zone-a-1: Failed at the old revision, costs no availability",
        ),
        (
            zone("ingester-zone-a", 3).image_pull_failing(&[1]),
            Unavailable::Container("ImagePullBackOff".to_owned()),
            "replacing ingester-zone-a-1: ImagePullBackOff at the old revision, costs no availability",
        ),
        (
            zone("ingester-zone-a", 3).not_ready(&[1]),
            Unavailable::NotReady,
            "replacing ingester-zone-a-1: not ready at the old revision, costs no availability",
        ),
        (
            zone("ingester-zone-a", 3).crash_looping(&[1]),
            Unavailable::Container("CrashLoopBackOff".to_owned()),
            "replacing ingester-zone-a-1: CrashLoopBackOff at the old revision, costs no availability",
        ),
    ];
    for (a, why, note) in cases {
        let plan = plan(&group([a.template_changed()]), now());
        assert_eq!(
            deletions(&plan),
            [("ingester-zone-a-1", Some(why.clone()))],
            "{why}"
        );
        assert_eq!(replacement_note("ingester-zone-a-1", &why), note);
    }
}

#[test]
fn each_action_is_told_with_its_reason_and_how_far_its_statefulset_is() {
    use crate::rollout::model::{Released, Told};
    // Given a plan that deletes ingester-zone-a-0, whose zone has 1 of 3 pods updated
    let plan = plan(
        &group([zone("ingester-zone-a", 3).template_changed().updated(&[2])]),
        now(),
    );
    let delete = plan.actions.first().expect("a deletion");
    // Then its deletion is told as a rollout step, with the zone's progress
    assert_eq!(
        delete.told(&plan.progress),
        Some(Told {
            reason: "RolloutPodDeleted",
            action: "DeletePod",
            note: "deleted pod ingester-zone-a-0 to roll it to the update revision (1 of 3 pods updated)"
                .to_owned(),
        })
    );
    // And without the zone's progress, without the count
    assert_eq!(
        delete.told(&[]).map(|told| told.note),
        Some("deleted pod ingester-zone-a-0 to roll it to the update revision".to_owned())
    );
    // A free replacement says why the pod was unavailable and that it costs nothing
    let replaced = Action::DeletePod {
        statefulset: "ingester-zone-a".to_owned(),
        pod: "ingester-zone-a-1".to_owned(),
        uid: "uid".to_owned(),
        unavailable: Some(Unavailable::NotReady),
    };
    let told = replaced.told(&plan.progress).expect("told");
    assert_eq!(told.reason, "UnavailablePodReplaced");
    assert_eq!(
        told.note,
        replacement_note("ingester-zone-a-1", &Unavailable::NotReady)
    );
    // A partition lowered past pods, and one raised back, each have their reason
    let lowered = Action::SetPartition {
        statefulset: "web".to_owned(),
        partition: 4,
        releases: vec![Released {
            pod: "web-4".to_owned(),
            index: 4,
        }],
    };
    let told = lowered.told(&[]).expect("told");
    assert_eq!(
        (told.reason, told.action),
        ("PartitionLowered", "SetPartition")
    );
    assert_eq!(told.note, lowered.to_string());
    let held = Action::SetPartition {
        statefulset: "web".to_owned(),
        partition: 5,
        releases: Vec::new(),
    };
    assert_eq!(
        held.told(&[]).map(|told| told.reason),
        Some("PartitionHeld")
    );
    // And recording a finished rollout's revision tells nothing
    let recorded = Action::SetCurrentRevision {
        statefulset: "web".to_owned(),
        revision: "rev-2".to_owned(),
    };
    assert_eq!(recorded.told(&[]), None);
}

#[test]
fn old_pod_ready_for_less_than_min_ready_seconds_is_waited_for_not_replaced() {
    // Restarted a moment ago: it does not count as available yet, by the same rule, but it
    // serves: deleting it would take a serving pod out. It is waited for, with a recheck when
    // it becomes available.
    let a = zone("ingester-zone-a", 3)
        .template_changed()
        .min_ready_seconds(60)
        .ready_for(2, 10);
    let plan = plan(&group([a]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        plan.recheck_after,
        Some(now() + SignedDuration::from_secs(50))
    );
}

#[test]
fn a_group_whose_template_changed_right_after_its_pods_became_ready_waits_for_them() {
    // Every pod of every zone Ready for 1 s of minReadySeconds 3 (a group just created, or a
    // deploy right after the previous rollout): none is down, so none goes for free; the
    // group waits until they count as available, then rolls one pod of one zone at a time.
    let zone_of = |name: &str| {
        (0..3).fold(
            zone(name, 3).template_changed().min_ready_seconds(3),
            |zone, ordinal| zone.ready_for(ordinal, 1),
        )
    };
    let members = || {
        group([
            zone_of("ingester-zone-a"),
            zone_of("ingester-zone-b"),
            zone_of("ingester-zone-c"),
        ])
    };
    let early = plan(&members(), now());
    assert_eq!(early.actions, []);
    let available_at = now() + SignedDuration::from_secs(2);
    assert_eq!(early.recheck_after, Some(available_at));

    let later = plan(&members(), available_at);
    assert_eq!(deletions(&later), [("ingester-zone-a-0", None)]);
}

#[test]
fn no_free_replacement_in_a_second_not_ready_zone() {
    // Zone a is mid-rollout (its new pod is starting) when b's old pod starts crash-looping:
    // b's pod would cost nothing, but the new revision does not reach a second zone before the
    // first is ready with it, and a transiently down pod is not restarted while another zone
    // is down. The group waits as before.
    let [a, b, c] = fresh_rollout();
    let a = a
        .updated(&[0])
        .phase(&[0], PodPhase::Pending)
        .not_ready(&[0]);
    let plan = plan(&group([a, b.crash_looping(&[2]), c]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "2 StatefulSets are not ready: ingester-zone-a, ingester-zone-b"
    );
}

#[test]
fn a_broken_version_down_in_several_zones_is_replaced_in_each() {
    // The old version crash-loops in zones a and c (it broke after it was rolled out), no new
    // pod is in flight: waiting would never end, and replacing them costs nothing.
    let a = || {
        zone("ingester-zone-a", 3)
            .template_changed()
            .crash_looping(&[1])
    };
    let [_, b, c] = fresh_rollout();
    let c = c.crash_looping(&[0, 2]).max_unavailable("2");
    let plan_fix = plan(&group([a(), b, c]), now());
    assert_eq!(
        deletions(&plan_fix),
        [
            ("ingester-zone-a-1", crash_loop()),
            ("ingester-zone-c-0", crash_loop()),
            ("ingester-zone-c-2", crash_loop()),
        ]
    );
    // No available pod moves, in any zone: that still waits for the zones to be ready.
    assert!(plan_fix.actions.iter().all(|action| matches!(
        action,
        Action::DeletePod {
            unavailable: Some(_),
            ..
        }
    )));

    // Once the replacements run the new version and are starting, nothing more moves until
    // they are ready: a new version unproven in one zone does not spread.
    let [_, b, c] = fresh_rollout();
    let starting = plan(
        &group([a().updated(&[1]).not_ready(&[1]), b, c.crash_looping(&[0])]),
        now(),
    );
    assert_eq!(starting.actions, []);
    assert_eq!(
        starting.waiting.as_ref().map(WaitReason::kind),
        Some("MultipleNotReady")
    );
}

#[test]
fn no_free_replacement_in_a_paused_zone() {
    let [a, b, c] = fresh_rollout();
    let plan = plan(&group([a, b.paused().crash_looping(&[1]), c]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "zone ingester-zone-b has 1 not-ready pod; \
         waiting for ingester-zone-b-1 (old revision) to become ready: CrashLoopBackOff"
    );
}

#[test]
fn terminating_or_unwanted_unavailable_old_pods_are_not_replaced_for_free() {
    // Terminating: on its way out already.
    let terminating = zone("ingester-zone-a", 3)
        .template_changed()
        .crash_looping(&[1])
        .terminating(&[1]);
    let plan_terminating = plan(&group([terminating]), now());
    assert_eq!(plan_terminating.actions, []);
    // Beyond spec.replicas (a scale-down under way): nothing would recreate it, so deleting it
    // is no replacement; it follows the budget like any other pod (here: 2 - 1 down = 1, which
    // the lowest ordinal takes).
    let scaling_down = zone("ingester-zone-a", 3)
        .template_changed()
        .spec_replicas(2)
        .max_unavailable("2")
        .crash_looping(&[2]);
    let plan_scaling = plan(&group([scaling_down]), now());
    assert_eq!(deletions(&plan_scaling), [("ingester-zone-a-0", None)]);
}

#[test]
fn a_new_revision_pod_that_never_becomes_ready_halts_the_group_and_is_named() {
    // The new version itself crash-loops in zone a.
    let [a, b, c] = fresh_rollout();
    let plan_rolling = plan(&group([a.updated(&[0]).crash_looping(&[0]), b, c]), now());
    assert_eq!(plan_rolling.actions, []);
    assert_eq!(
        plan_rolling.waiting,
        Some(WaitReason::MaxUnavailable {
            statefulset: "ingester-zone-a".to_owned(),
            not_ready: 1,
            max_unavailable: 1,
            waiting_for: named("ingester-zone-a-0", true, crash_loop().unwrap()),
        })
    );
    assert_eq!(
        waiting(&plan_rolling),
        "max-unavailable reached in ingester-zone-a (1/1); \
         waiting for ingester-zone-a-0 (new revision) to become ready: CrashLoopBackOff"
    );
    // Every pod of zone a updated, the last one crash-looping: zones b and c wait.
    let [a, b, c] = fresh_rollout();
    let plan_done = plan(&group([a.all_updated().crash_looping(&[2]), b, c]), now());
    assert_eq!(plan_done.actions, []);
    assert_eq!(
        waiting(&plan_done),
        "zone ingester-zone-a has 1 not-ready pod; \
         waiting for ingester-zone-a-2 (new revision) to become ready: CrashLoopBackOff"
    );
}

#[test]
fn without_a_rollout_the_pod_named_has_no_revision_label() {
    let a = zone("ingester-zone-a", 3).crash_looping(&[1]);
    let plan = plan(&group([a]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "zone ingester-zone-a has 1 not-ready pod; \
         waiting for ingester-zone-a-1 to become ready: CrashLoopBackOff"
    );
}

#[test]
fn the_pod_named_is_a_new_revision_one_first_then_the_lowest_ordinal() {
    let a = zone("ingester-zone-a", 5)
        .template_changed()
        .updated(&[3, 4])
        .crash_looping(&[0])
        .terminating(&[0])
        .not_ready(&[1])
        .terminating(&[1])
        .image_pull_failing(&[4])
        .not_ready(&[3]);
    let plan = plan(&group([a]), now());
    assert_eq!(
        plan.waiting
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        "max-unavailable reached in ingester-zone-a (4/1); \
         waiting for ingester-zone-a-3 (new revision) to become ready: not ready"
    );
}

// --- Zone by zone ---

#[test]
fn finished_zone_gets_its_current_revision_and_the_next_zone_starts() {
    let [a, b, c] = fresh_rollout();
    let plan = plan(&group([a.all_updated(), b, c]), now());
    assert_eq!(
        plan.actions,
        [
            Action::SetCurrentRevision {
                statefulset: "ingester-zone-a".to_owned(),
                revision: NEW.to_owned(),
            },
            Action::DeletePod {
                statefulset: "ingester-zone-b".to_owned(),
                pod: "ingester-zone-b-0".to_owned(),
                uid: "uid-ingester-zone-b-0".to_owned(),
                unavailable: None,
            },
        ]
    );
}

#[test]
fn updated_zone_with_a_pod_not_yet_ready_holds_the_group() {
    let [a, b, c] = fresh_rollout();
    let a = a.all_updated().not_ready(&[2]);
    let plan = plan(&group([a, b, c]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        plan.waiting,
        Some(WaitReason::NotReady {
            statefulset: "ingester-zone-a".to_owned(),
            pods: 1,
            waiting_for: named("ingester-zone-a-2", true, Unavailable::NotReady),
        })
    );
}

#[test]
fn the_one_not_ready_zone_goes_first() {
    let [a, b, c] = fresh_rollout();
    let b = b.max_unavailable("2").updated(&[2]).not_ready(&[2]);
    let plan = plan(&group([a, b, c]), now());
    assert_eq!(deleted(&plan), ["ingester-zone-b-0"]);
}

#[test]
fn the_one_not_ready_zone_at_max_unavailable_blocks_the_others() {
    let [a, b, c] = fresh_rollout();
    let plan = plan(&group([a, b.updated(&[1]).not_ready(&[1]), c]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "max-unavailable reached in ingester-zone-b (1/1); \
         waiting for ingester-zone-b-1 (new revision) to become ready: not ready"
    );
}

#[test]
fn two_not_ready_zones_wait() {
    // Zone a's new pod is starting; zone b's is Pending.
    let [a, b, c] = fresh_rollout();
    let plan = plan(
        &group([
            a.updated(&[0]).not_ready(&[0]),
            b.updated(&[1]).phase(&[1], PodPhase::Pending),
            c,
        ]),
        now(),
    );
    assert_eq!(plan.actions, []);
    assert_eq!(
        plan.waiting,
        Some(WaitReason::MultipleNotReady {
            statefulsets: vec!["ingester-zone-a".to_owned(), "ingester-zone-b".to_owned()],
        })
    );
    assert_eq!(
        waiting(&plan),
        "2 StatefulSets are not ready: ingester-zone-a, ingester-zone-b"
    );
}

#[test]
fn not_running_pods_are_not_ready() {
    for phase in [
        PodPhase::Pending,
        PodPhase::Failed,
        PodPhase::Succeeded,
        PodPhase::Unknown,
    ] {
        let a = zone("ingester-zone-a", 2).template_changed().all_updated();
        let a = a.phase(&[1], phase);
        let plan = plan(&group([a]), now());
        assert_eq!(plan.actions, [], "{phase:?}");
        assert_eq!(
            waiting(&plan),
            format!(
                "zone ingester-zone-a has 1 not-ready pod; \
                 waiting for ingester-zone-a-1 (new revision) to become ready: {phase:?}"
            )
        );
    }
}

#[test]
fn rollback_updates_pods_even_when_current_equals_update_revision() {
    // The template went back to rev-1 before zone-a's rollout to rev-2 finished.
    let a = zone("ingester-zone-a", 3)
        .revision_label(0, Some(NEW))
        .revision_label(1, Some(NEW));
    let plan = plan(&group([a, zone("ingester-zone-b", 3)]), now());
    assert_eq!(deleted(&plan), ["ingester-zone-a-0"]);
    assert_eq!(revisions_set(&plan), []);
}

#[test]
fn group_of_one_statefulset_rolls_and_finishes() {
    let rolling = zone("ingester-zone-a", 2).template_changed().updated(&[0]);
    assert_eq!(
        deleted(&plan(&group([rolling]), now())),
        ["ingester-zone-a-1"]
    );

    let finished = zone("ingester-zone-a", 2).template_changed().all_updated();
    let plan = plan(&group([finished]), now());
    assert_eq!(revisions_set(&plan), [("ingester-zone-a", NEW)]);
    assert_eq!(plan.waiting, None);
}

#[test]
fn current_revision_already_set_is_left_alone() {
    let a = zone("ingester-zone-a", 2)
        .template_changed()
        .all_updated()
        .current_revision(NEW);
    assert_eq!(plan(&group([a]), now()).actions, []);
}

// --- baton: missing pods, status, scaling ---

#[test]
fn missing_pods_block_the_group() {
    let a = zone("ingester-zone-a", 5).all_updated().missing(&[3, 4]);
    let b = zone("ingester-zone-b", 5).template_changed();
    let plan = plan(&group([a, b]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        plan.waiting,
        Some(WaitReason::MissingPods {
            statefulset: "ingester-zone-a".to_owned(),
            present: 3,
            expected: 5,
        })
    );
    assert_eq!(
        waiting(&plan),
        "ingester-zone-a has 3 of 5 pods (2 missing)"
    );
}

#[test]
fn missing_pods_count_against_max_unavailable() {
    let a = || zone("ingester-zone-a", 4).template_changed().missing(&[3]);
    let at_limit = plan(&group([a()]), now());
    assert_eq!(at_limit.actions, []);
    assert_eq!(
        waiting(&at_limit),
        "max-unavailable reached in ingester-zone-a (1/1)"
    );
    assert_eq!(
        deleted(&plan(&group([a().max_unavailable("2")]), now())),
        ["ingester-zone-a-0"]
    );
}

#[test]
fn status_disagreeing_with_the_pods_counts_as_not_ready() {
    let a = || zone("ingester-zone-a", 3).template_changed();
    let b = || zone("ingester-zone-b", 3).template_changed();
    let plan_lagging = plan(&group([a().all_updated().status(3, 2), b()]), now());
    assert_eq!(plan_lagging.actions, []);
    assert_eq!(
        plan_lagging.waiting.as_ref().map(WaitReason::kind),
        Some("StatusNotReady")
    );
    // The status view counts against max-unavailable too.
    let plan_limited = plan(&group([a().status(3, 2), b()]), now());
    assert_eq!(plan_limited.actions, []);
    assert_eq!(
        waiting(&plan_limited),
        "max-unavailable reached in ingester-zone-a (1/1)"
    );
    // spec.replicas is compared as well: pods that could not be created (quota).
    let plan_quota = plan(&group([a().all_updated().status(2, 2), b()]), now());
    assert_eq!(plan_quota.actions, []);
    assert_eq!(
        waiting(&plan_quota),
        "ingester-zone-a status reports 2 ready of 2 replicas (3 wanted)"
    );
}

#[test]
fn scale_down_in_progress_holds_the_group() {
    let a = zone("ingester-zone-a", 3).all_updated().spec_replicas(2);
    let plan = plan(
        &group([a, zone("ingester-zone-b", 3).template_changed()]),
        now(),
    );
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "ingester-zone-a has 3 pods for 2 replicas (scaling down)"
    );
}

// --- Paused ---

#[test]
fn paused_zone_is_treated_as_done_and_the_group_moves_on() {
    let [a, b, c] = fresh_rollout();
    let plan = plan(&group([a.paused(), b, c]), now());
    assert_eq!(deleted(&plan), ["ingester-zone-b-0"]);
    assert_eq!(plan.warnings, []);
}

#[test]
fn paused_zone_that_is_not_ready_still_holds_the_group() {
    let [a, b, c] = fresh_rollout();
    let plan = plan(&group([a.paused().not_ready(&[1]), b, c]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "zone ingester-zone-a has 1 not-ready pod; \
         waiting for ingester-zone-a-1 (old revision) to become ready: not ready"
    );
}

#[test]
fn paused_zone_with_pods_left_is_reported_once_the_rest_is_done() {
    let a = zone("ingester-zone-a", 2).template_changed().paused();
    let b = zone("ingester-zone-b", 2)
        .template_changed()
        .all_updated()
        .current_revision(NEW);
    let plan = plan(&group([a, b]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(
        plan.waiting,
        Some(WaitReason::Paused {
            statefulsets: vec!["ingester-zone-a".to_owned()],
        })
    );
    assert_eq!(
        waiting(&plan),
        "rollout paused with pods left to update in ingester-zone-a"
    );
    assert!(!progress_of(&plan, "ingester-zone-a").done);
}

#[test]
fn paused_zone_gets_no_current_revision_either() {
    let a = zone("ingester-zone-a", 2)
        .template_changed()
        .all_updated()
        .paused();
    let plan = plan(&group([a]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(plan.waiting, None);
}

// --- Strategy ---

#[test]
fn a_member_that_is_not_on_delete_leaves_the_whole_group_untouched() {
    let [a, b, c] = fresh_rollout();
    let a = a.all_updated();
    let plan = plan(
        &group([a, b, c.strategy(UpdateStrategy::RollingUpdate)]),
        now(),
    );
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "ingester-zone-c uses RollingUpdate, group skipped"
    );
    assert_eq!(
        plan.waiting.as_ref().map(WaitReason::kind),
        Some("NonOnDeleteMember")
    );
    assert_eq!(plan.progress.len(), 3);
}

#[test]
fn unknown_update_strategy_is_not_on_delete() {
    let a = zone("ingester-zone-a", 1)
        .template_changed()
        .strategy(UpdateStrategy::Other("Canary".to_owned()));
    let plan = plan(&group([a]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(waiting(&plan), "ingester-zone-a uses Canary, group skipped");
}

// --- Missing updateRevision; members coming and going ---

#[test]
fn missing_update_revision_waits_with_a_reason() {
    let a = zone("ingester-zone-a", 2).no_update_revision();
    let plan = plan(
        &group([a, zone("ingester-zone-b", 2).template_changed()]),
        now(),
    );
    assert_eq!(plan.actions, []);
    assert_eq!(waiting(&plan), "ingester-zone-a has no updateRevision yet");
    assert!(!progress_of(&plan, "ingester-zone-a").done);
}

#[test]
fn missing_update_revision_further_down_does_not_stop_earlier_zones() {
    let a = zone("ingester-zone-a", 2).template_changed();
    let plan = plan(
        &group([a, zone("ingester-zone-b", 2).no_update_revision()]),
        now(),
    );
    assert_eq!(deleted(&plan), ["ingester-zone-a-0"]);
}

#[test]
fn statefulsets_added_and_removed_between_calls() {
    // zone-a is mid-rollout: its first pod is being recreated.
    let rolling_a = || {
        zone("ingester-zone-a", 3)
            .template_changed()
            .updated(&[0])
            .phase(&[0], PodPhase::Pending)
            .not_ready(&[0])
    };
    let b = || zone("ingester-zone-b", 3).template_changed();
    // A brand-new zone: no revision yet, no pod yet.
    let new_c = || {
        zone("ingester-zone-c", 3)
            .no_update_revision()
            .missing(&[0, 1, 2])
    };

    let before = plan(&group([rolling_a(), b()]), now());
    assert_eq!(
        waiting(&before),
        "max-unavailable reached in ingester-zone-a (1/1); \
         waiting for ingester-zone-a-0 (new revision) to become ready: Pending"
    );

    let b_removed = plan(&group([rolling_a()]), now());
    assert_eq!(b_removed.actions, []);

    let c_added = plan(&group([rolling_a(), b(), new_c()]), now());
    assert_eq!(c_added.actions, []);
    assert_eq!(
        waiting(&c_added),
        "2 StatefulSets are not ready: ingester-zone-a, ingester-zone-c"
    );

    let a_removed = plan(&group([b(), new_c()]), now());
    assert_eq!(a_removed.actions, []);
    assert_eq!(
        waiting(&a_removed),
        "ingester-zone-c has no updateRevision yet"
    );
}

// --- minReadySeconds ---

#[test]
fn pod_ready_for_less_than_min_ready_seconds_is_not_available_yet() {
    let a = || {
        zone("ingester-zone-a", 2)
            .template_changed()
            .updated(&[0])
            .ready_for(0, 5)
            .min_ready_seconds(30)
    };
    let early = plan(&group([a()]), now());
    assert_eq!(early.actions, []);
    assert_eq!(
        early.waiting,
        Some(WaitReason::MaxUnavailable {
            statefulset: "ingester-zone-a".to_owned(),
            not_ready: 1,
            max_unavailable: 1,
            waiting_for: named("ingester-zone-a-0", true, Unavailable::ReadyTooRecently),
        })
    );
    assert_eq!(
        waiting(&early),
        "max-unavailable reached in ingester-zone-a (1/1); \
         waiting for ingester-zone-a-0 (new revision) to be Ready for minReadySeconds"
    );
    let available_at = now() + SignedDuration::from_secs(25);
    assert_eq!(early.recheck_after, Some(available_at));

    let later = plan(&group([a()]), available_at);
    assert_eq!(deleted(&later), ["ingester-zone-a-1"]);
    assert_eq!(later.recheck_after, None);
}

#[test]
fn zone_waiting_only_for_min_ready_seconds_says_so() {
    let a = zone("ingester-zone-a", 2)
        .template_changed()
        .all_updated()
        .ready_for(1, 3)
        .min_ready_seconds(10);
    let plan = plan(
        &group([a, zone("ingester-zone-b", 2).template_changed()]),
        now(),
    );
    assert_eq!(plan.actions, []);
    assert_eq!(
        waiting(&plan),
        "zone ingester-zone-a has 1 pod Ready for less than minReadySeconds (10s)"
    );
    assert_eq!(
        plan.recheck_after,
        Some(now() + SignedDuration::from_secs(7))
    );
}

#[test]
fn min_ready_seconds_without_transition_time_trusts_the_ready_condition() {
    let a = zone("ingester-zone-a", 2)
        .template_changed()
        .min_ready_seconds(30)
        .each_pod(&[0, 1], |pod| pod.ready_since = None);
    assert_eq!(deleted(&plan(&group([a]), now())), ["ingester-zone-a-0"]);
}

// --- Warnings ---

#[test]
fn bad_annotations_warn_and_fall_back_to_safe_defaults() {
    let a = zone("ingester-zone-a", 3)
        .template_changed()
        .max_unavailable("lots")
        .annotation(ROLLOUT_PAUSED_ANNOTATION, "yes");
    let plan = plan(&group([a]), now());
    // Not paused, max-unavailable 1.
    assert_eq!(deleted(&plan), ["ingester-zone-a-0"]);
    assert_eq!(
        plan.warnings,
        [
            Warning::InvalidAnnotation {
                statefulset: "ingester-zone-a".to_owned(),
                problem: InvalidAnnotation {
                    key: MAX_UNAVAILABLE_ANNOTATION,
                    value: "lots".to_owned(),
                    accepted: "a positive integer or a percentage from 1% to 100%",
                    fallback: "using 1".to_owned(),
                },
            },
            Warning::InvalidAnnotation {
                statefulset: "ingester-zone-a".to_owned(),
                problem: InvalidAnnotation {
                    key: ROLLOUT_PAUSED_ANNOTATION,
                    value: "yes".to_owned(),
                    accepted: "\"true\" to pause, \"false\" or nothing otherwise",
                    fallback: "using not paused".to_owned(),
                },
            },
        ]
    );
    assert_eq!(plan.warnings[0].kind(), "InvalidAnnotation");
    assert_eq!(plan.warnings[0].statefulset(), "ingester-zone-a");
    assert_eq!(
        plan.warnings[0].to_string(),
        "StatefulSet ingester-zone-a: annotation rollout-max-unavailable has the invalid value \
         \"lots\" (accepted: a positive integer or a percentage from 1% to 100%); using 1"
    );
}

#[test]
fn warnings_are_reported_even_when_the_group_is_skipped() {
    let a = zone("ingester-zone-a", 3).max_unavailable("0");
    let b = zone("ingester-zone-b", 3).strategy(UpdateStrategy::RollingUpdate);
    let plan = plan(&group([a, b]), now());
    assert_eq!(plan.actions, []);
    assert_eq!(plan.warnings.len(), 1);
}

// --- Progress ---

#[test]
fn progress_counts_updated_and_ready_pods_per_statefulset() {
    let a = zone("ingester-zone-a", 4)
        .template_changed()
        .updated(&[0, 1])
        .not_ready(&[1])
        .terminating(&[2]);
    let b = zone("ingester-zone-b", 2).template_changed().all_updated();
    let plan = plan(&group([a, b]), now());
    assert_eq!(
        plan.progress,
        [
            Progress {
                statefulset: "ingester-zone-a".to_owned(),
                updated: 2,
                total: 4,
                ready: 2,
                done: false,
            },
            Progress {
                statefulset: "ingester-zone-b".to_owned(),
                updated: 2,
                total: 2,
                ready: 2,
                done: true,
            },
        ]
    );
}

// --- Messages ---

#[test]
fn every_wait_reason_explains_itself_and_has_a_stable_kind() {
    let name = || "ingester-zone-a".to_owned();
    let table = [
        (
            WaitReason::NonOnDeleteMember {
                statefulset: name(),
                strategy: UpdateStrategy::RollingUpdate,
            },
            "NonOnDeleteMember",
            "ingester-zone-a uses RollingUpdate, group skipped",
        ),
        (
            WaitReason::MultipleNotReady {
                statefulsets: vec!["a".to_owned(), "b".to_owned()],
            },
            "MultipleNotReady",
            "2 StatefulSets are not ready: a, b",
        ),
        (
            WaitReason::MissingPods {
                statefulset: name(),
                present: 3,
                expected: 5,
            },
            "MissingPods",
            "ingester-zone-a has 3 of 5 pods (2 missing)",
        ),
        (
            WaitReason::NotReady {
                statefulset: "ingester-zone-b".to_owned(),
                pods: 2,
                waiting_for: None,
            },
            "NotReady",
            "zone ingester-zone-b has 2 not-ready pods",
        ),
        (
            WaitReason::NotReady {
                statefulset: "ingester-zone-b".to_owned(),
                pods: 2,
                waiting_for: named(
                    "ingester-zone-b-3",
                    true,
                    Unavailable::Container("CrashLoopBackOff".to_owned()),
                ),
            },
            "NotReady",
            "zone ingester-zone-b has 2 not-ready pods; \
             waiting for ingester-zone-b-3 (new revision) to become ready: CrashLoopBackOff",
        ),
        (
            WaitReason::MinReadySeconds {
                statefulset: name(),
                pods: 2,
                min_ready_seconds: 30,
            },
            "MinReadySeconds",
            "zone ingester-zone-a has 2 pods Ready for less than minReadySeconds (30s)",
        ),
        (
            WaitReason::ExtraPods {
                statefulset: name(),
                present: 4,
                expected: 3,
            },
            "ExtraPods",
            "ingester-zone-a has 4 pods for 3 replicas (scaling down)",
        ),
        (
            WaitReason::StatusNotReady {
                statefulset: name(),
                replicas: 3,
                ready_replicas: 2,
                expected: 3,
            },
            "StatusNotReady",
            "ingester-zone-a status reports 2 ready of 3 replicas (3 wanted)",
        ),
        (
            WaitReason::MaxUnavailable {
                statefulset: name(),
                not_ready: 1,
                max_unavailable: 1,
                waiting_for: None,
            },
            "MaxUnavailable",
            "max-unavailable reached in ingester-zone-a (1/1)",
        ),
        (
            WaitReason::MaxUnavailable {
                statefulset: name(),
                not_ready: 2,
                max_unavailable: 1,
                waiting_for: named("ingester-zone-a-4", false, Unavailable::Terminating),
            },
            "MaxUnavailable",
            "max-unavailable reached in ingester-zone-a (2/1); \
             waiting for ingester-zone-a-4 (old revision) to terminate",
        ),
        (
            WaitReason::NoUpdateRevision {
                statefulset: name(),
            },
            "NoUpdateRevision",
            "ingester-zone-a has no updateRevision yet",
        ),
        (
            WaitReason::StatusBehindSpec {
                statefulset: name(),
                generation: 7,
                observed_generation: None,
            },
            "StatusBehindSpec",
            "the status of ingester-zone-a has observed no generation of its spec, not yet 7: \
             waiting for the StatefulSet controller",
        ),
        (
            WaitReason::Paused {
                statefulsets: vec![name(), "ingester-zone-b".to_owned()],
            },
            "Paused",
            "rollout paused with pods left to update in ingester-zone-a, ingester-zone-b",
        ),
    ];
    for (reason, kind, message) in table {
        assert_eq!(reason.kind(), kind);
        assert_eq!(reason.to_string(), message);
    }
}

#[test]
fn wait_reason_names_the_statefulset_it_waits_for() {
    let missing = WaitReason::NoUpdateRevision {
        statefulset: "ingester-zone-a".to_owned(),
    };
    assert_eq!(missing.statefulset(), Some("ingester-zone-a"));
    let several = WaitReason::MultipleNotReady {
        statefulsets: vec!["a".to_owned(), "b".to_owned()],
    };
    assert_eq!(several.statefulset(), None);
}

#[test]
fn actions_explain_themselves() {
    let delete = Action::DeletePod {
        statefulset: "ingester-zone-a".to_owned(),
        pod: "ingester-zone-a-0".to_owned(),
        uid: "u".to_owned(),
        unavailable: None,
    };
    let mark = Action::SetCurrentRevision {
        statefulset: "ingester-zone-a".to_owned(),
        revision: NEW.to_owned(),
    };
    assert_eq!(
        delete.to_string(),
        "delete pod ingester-zone-a-0 of ingester-zone-a"
    );
    assert_eq!(
        mark.to_string(),
        "set the current revision of ingester-zone-a to rev-2"
    );
}

#[test]
fn one_pod_message_is_singular() {
    let reason = WaitReason::NotReady {
        statefulset: "ingester-zone-b".to_owned(),
        pods: 1,
        waiting_for: None,
    };
    assert_eq!(
        reason.to_string(),
        "zone ingester-zone-b has 1 not-ready pod"
    );
}

// ---- Rolled by partition: RollingUpdate StatefulSets whose partition baton lowers ----

fn partitions(plan: &Plan) -> Vec<(&str, u32, Vec<&str>)> {
    plan.actions
        .iter()
        .filter_map(|action| match action {
            Action::SetPartition {
                statefulset,
                partition,
                releases,
            } => Some((
                statefulset.as_str(),
                *partition,
                releases
                    .iter()
                    .map(|release| release.pod.as_str())
                    .collect(),
            )),
            _ => None,
        })
        .collect()
}

/// Three zones of three pods rolled by partition, held at 3, after a template change.
fn partition_rollout() -> [Zone; 3] {
    ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"].map(|name| {
        zone(name, 3)
            .by_partition(3)
            .partition_set(3)
            .template_changed()
    })
}

#[test]
fn a_settled_member_rolled_by_partition_is_held_at_its_replicas_once() {
    let opted_in = zone("ingester-zone-a", 3).by_partition(0);
    let plan = super::plan(&group([opted_in]), now());
    assert_eq!(partitions(&plan), [("ingester-zone-a", 3, vec![])]);
    assert_eq!(plan.waiting, None);
    let held = zone("ingester-zone-a", 3).by_partition(3).partition_set(3);
    assert!(plan_is_empty(&group([held])));
    // More than the replicas (scaled down since): nothing to hold either.
    let above = zone("ingester-zone-a", 3).by_partition(5).partition_set(5);
    assert!(plan_is_empty(&group([above])));
}

fn plan_is_empty(group: &GroupSnapshot) -> bool {
    let plan = super::plan(group, now());
    plan.actions.is_empty() && plan.waiting.is_none()
}

#[test]
fn a_template_change_lowers_the_first_zones_partition_past_its_highest_pod_only() {
    let plan = super::plan(&group(partition_rollout()), now());
    assert_eq!(
        partitions(&plan),
        [("ingester-zone-a", 2, vec!["ingester-zone-a-2"])]
    );
    assert!(
        deleted(&plan).is_empty(),
        "the StatefulSet controller replaces the pod"
    );
    assert_eq!(plan.waiting, None);
}

#[test]
fn released_pods_the_controller_has_not_replaced_yet_are_waited_for() {
    let [a, b, c] = partition_rollout();
    let plan = super::plan(&group([a.by_partition(2).partition_set(2), b, c]), now());
    assert!(plan.actions.is_empty());
    assert_eq!(
        plan.waiting,
        Some(WaitReason::PartitionRolling {
            statefulset: "ingester-zone-a".into(),
            partition: 2,
            pods: 1
        })
    );
    // Replaced and starting: max-unavailable is reached, as when baton deletes, naming it.
    let [a, b, c] = partition_rollout();
    let starting = a
        .by_partition(2)
        .partition_set(2)
        .updated(&[2])
        .not_ready(&[2]);
    let plan = super::plan(&group([starting, b, c]), now());
    assert!(plan.actions.is_empty());
    assert_eq!(
        plan.waiting.as_ref().map(WaitReason::kind),
        Some("MaxUnavailable")
    );
}

#[test]
fn once_a_released_pod_is_updated_and_ready_the_next_one_is_released() {
    let [a, b, c] = partition_rollout();
    let a = a.by_partition(2).partition_set(2).updated(&[2]);
    let plan = super::plan(&group([a, b, c]), now());
    assert_eq!(
        partitions(&plan),
        [("ingester-zone-a", 1, vec!["ingester-zone-a-1"])]
    );
}

#[test]
fn max_unavailable_releases_as_many_pods_at_once() {
    let [a, b, c] = partition_rollout();
    let plan = super::plan(&group([a.max_unavailable("2"), b, c]), now());
    assert_eq!(
        partitions(&plan),
        [(
            "ingester-zone-a",
            1,
            vec!["ingester-zone-a-2", "ingester-zone-a-1"]
        )]
    );
}

#[test]
fn a_finished_zone_is_held_again_and_the_next_zone_starts() {
    let [a, b, c] = partition_rollout();
    let a = a.by_partition(0).partition_set(0).all_updated();
    let plan = super::plan(&group([a, b, c]), now());
    assert_eq!(
        partitions(&plan),
        [
            ("ingester-zone-a", 3, vec![]),
            ("ingester-zone-b", 2, vec!["ingester-zone-b-2"])
        ]
    );
    assert!(
        revisions_set(&plan).is_empty(),
        "the StatefulSet controller sets it"
    );
}

#[test]
fn another_zone_not_ready_holds_a_zone_rolled_by_partition() {
    let [a, b, c] = partition_rollout();
    let plan = super::plan(&group([a, b.all_updated().not_ready(&[0]), c]), now());
    assert!(partitions(&plan).is_empty());
    assert_eq!(
        plan.waiting.as_ref().map(WaitReason::kind),
        Some("NotReady")
    );
}

#[test]
fn a_partition_someone_else_moved_holds_the_group_and_is_reported() {
    let [a, b, c] = partition_rollout();
    // baton set 2; a GitOps re-apply put the manifest's 0 back.
    let a = a.by_partition(0).partition_set(2).updated(&[2]);
    let plan = super::plan(&group([a, b, c]), now());
    assert!(plan.actions.is_empty(), "no fight: {:?}", plan.actions);
    assert_eq!(
        plan.waiting,
        Some(WaitReason::PartitionMoved {
            statefulset: "ingester-zone-a".into(),
            set: 2,
            found: 0
        })
    );
    assert!(
        plan.warnings
            .iter()
            .any(|warning| warning.kind() == "PartitionMoved")
    );
    let said = plan.waiting.unwrap().to_string();
    assert!(said.contains("from 2") && said.contains("to 0"), "{said}");
}

#[test]
fn a_crash_looping_old_pod_below_the_partition_is_released_and_replaced_for_the_fix() {
    let [a, b, c] = partition_rollout();
    let b = b.crash_looping(&[0]);
    let plan = super::plan(&group([a, b, c]), now());
    // The controller neither replaces it (it is below the partition) nor goes on while it is
    // down (OrderedReady): lowered to it and deleted, it comes back at the update revision.
    assert_eq!(
        partitions(&plan),
        [(
            "ingester-zone-b",
            0,
            vec![
                "ingester-zone-b-2",
                "ingester-zone-b-1",
                "ingester-zone-b-0"
            ]
        )]
    );
    assert_eq!(deletions(&plan), [("ingester-zone-b-0", crash_loop())]);
}

#[test]
fn with_parallel_pod_management_a_fix_never_releases_available_pods_with_it() {
    let [a, b, c] = partition_rollout();
    // Parallel: the controller would take b-2 down while b-0 is down, past max-unavailable.
    let plan = super::plan(&group([a, b.parallel().crash_looping(&[0]), c]), now());
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert_eq!(
        plan.waiting.as_ref().map(WaitReason::kind),
        Some("MaxUnavailable")
    );
    // Only unavailable pods released: allowed whatever the policy.
    let [a, b, c] = partition_rollout();
    let plan = super::plan(&group([a, b.parallel().crash_looping(&[1, 2]), c]), now());
    assert_eq!(
        partitions(&plan),
        [(
            "ingester-zone-b",
            1,
            vec!["ingester-zone-b-2", "ingester-zone-b-1"]
        )]
    );
    assert_eq!(
        deletions(&plan),
        [
            ("ingester-zone-b-1", crash_loop()),
            ("ingester-zone-b-2", crash_loop())
        ]
    );
}

#[test]
fn a_rolling_update_member_without_the_opt_in_still_skips_the_group() {
    let [a, b, c] = fresh_rollout();
    let plan = plan(
        &group([a, b.strategy(UpdateStrategy::RollingUpdate), c]),
        now(),
    );
    assert!(plan.actions.is_empty());
    assert_eq!(
        plan.waiting.as_ref().map(WaitReason::kind),
        Some("NonOnDeleteMember")
    );
}

#[test]
fn update_by_partition_on_an_on_delete_member_is_a_warning_and_it_rolls_by_deletion() {
    let [a, b, c] = fresh_rollout();
    let a = a.annotation(crate::annotations::UPDATE_BY_ANNOTATION, "partition");
    let plan = super::plan(&group([a, b, c]), now());
    assert_eq!(deleted(&plan), ["ingester-zone-a-0"]);
    assert!(
        plan.warnings
            .iter()
            .any(|warning| warning.to_string().contains("RollingUpdate"))
    );
    // A value that is neither: a warning, and the default.
    let [a, b, c] = fresh_rollout();
    let a = a.annotation(crate::annotations::UPDATE_BY_ANNOTATION, "Partition");
    let plan = super::plan(&group([a, b, c]), now());
    assert_eq!(deleted(&plan), ["ingester-zone-a-0"]);
    assert_eq!(plan.warnings.len(), 1);
}

#[test]
fn a_ramp_step_lowers_the_partition_past_fewer_pods() {
    let [a, b, c] = partition_rollout();
    let mut plan = super::plan(&group([a.max_unavailable("3"), b, c]), now());
    assert_eq!(plan.pods_taken(), 3);
    plan.take_at_most(1);
    assert_eq!(
        partitions(&plan),
        [("ingester-zone-a", 2, vec!["ingester-zone-a-2"])]
    );
    plan.take_at_most(0);
    assert!(plan.actions.is_empty());
}

#[test]
fn a_member_whose_cluster_cannot_be_read_holds_the_group_by_name() {
    // Given a rollout whose third zone lives in a cluster that cannot be read now
    let [a, b, c] = fresh_rollout();
    let mut held = group([a, b, c]);
    held.statefulsets[2].unreachable = Some(crate::rollout::Unreachable {
        cluster: "cluster-c".to_owned(),
        error: "connection refused".to_owned(),
    });
    // Then nothing goes, not even in the first zone, and the wait names the member and why
    let plan = super::plan(&held, now());
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    let waiting = plan.waiting.expect("a wait");
    assert_eq!(waiting.kind(), "MemberUnreachable");
    assert_eq!(waiting.statefulset(), Some("ingester-zone-c"));
    assert!(
        waiting.to_string().contains("cluster-c") && waiting.to_string().contains("refused"),
        "{waiting}"
    );
    // And the member's last known progress is still shown
    assert_eq!(plan.progress.len(), 3);
    // When its cluster is read again, the first zone starts
    held.statefulsets[2].unreachable = None;
    assert_eq!(deleted(&super::plan(&held, now())), ["ingester-zone-a-0"]);
}

/// Three zones after a template change, with `baton.dev/max-rolling-members` on each.
fn rolling_at_most(value: &str) -> [Zone; 3] {
    fresh_rollout().map(|zone| zone.annotation(MAX_ROLLING_MEMBERS_ANNOTATION, value))
}

#[test]
fn with_two_rolling_members_a_second_zone_starts_while_the_first_still_rolls() {
    // Given zone a rolling (its pod 0 replaced, not ready yet) and two members allowed
    let [a, b, c] = rolling_at_most("2");
    let a = a.updated(&[0]).not_ready(&[0]);
    let plan = plan(&group([a, b, c]), now());
    // Then zone b starts: its lowest pod goes, within its own max-unavailable
    assert_eq!(deleted(&plan), ["ingester-zone-b-0"]);
    assert_eq!(plan.waiting, None);
}

#[test]
fn with_two_rolling_members_a_third_waits_for_one_of_them() {
    let [a, b, c] = rolling_at_most("2");
    let a = a.updated(&[0]).not_ready(&[0]);
    let b = b.updated(&[0]).not_ready(&[0]);
    let plan = plan(&group([a, b, c]), now());
    // Both places are taken: zone c is untouched, and the wait names the first zone's pod
    assert!(deleted(&plan).is_empty(), "{:?}", plan.actions);
    let waiting = plan.waiting.expect("a wait");
    assert_eq!(waiting.statefulset(), Some("ingester-zone-a"));
}

#[test]
fn more_members_not_ready_than_allowed_wait_as_several_not_ready() {
    let [a, b, c] = rolling_at_most("2");
    let [a, b, c] = [a, b, c].map(|zone| zone.updated(&[0]).not_ready(&[0]));
    let plan = plan(&group([a, b, c]), now());
    assert!(deleted(&plan).is_empty());
    assert_eq!(
        plan.waiting.map(|wait| wait.kind()),
        Some("MultipleNotReady")
    );
}

#[test]
fn the_smallest_max_rolling_members_holds_and_a_bad_one_is_one_with_a_warning() {
    // Every member says one, 3 and 2 and 2: at most two, and the member that said 3 is told.
    let [a, b, c] = rolling_at_most("2");
    let a = a
        .updated(&[0])
        .not_ready(&[0])
        .annotation(MAX_ROLLING_MEMBERS_ANNOTATION, "3");
    let b = b.updated(&[0]).not_ready(&[0]);
    let two = plan(&group([a, b, c]), now());
    assert!(deleted(&two).is_empty(), "{:?}", two.actions);
    let [
        Warning::InvalidAnnotation {
            statefulset,
            problem,
        },
    ] = two.warnings.as_slice()
    else {
        panic!("one warning: {:?}", two.warnings);
    };
    assert_eq!(statefulset, "ingester-zone-a");
    assert_eq!(problem.value, "3");
    assert_eq!(
        problem.fallback,
        "using 2, held there by ingester-zone-b, ingester-zone-c"
    );

    // A value that is not a positive integer: the zone rule, and the person told.
    let [a, b, c] = rolling_at_most("two");
    let a = a.updated(&[0]).not_ready(&[0]);
    let invalid = plan(&group([a, b, c]), now());
    assert!(deleted(&invalid).is_empty(), "{:?}", invalid.actions);
    assert_eq!(
        invalid.warnings.len(),
        3,
        "one per member: {:?}",
        invalid.warnings
    );
    let Warning::InvalidAnnotation { problem, .. } = &invalid.warnings[0] else {
        panic!("{:?}", invalid.warnings[0]);
    };
    assert_eq!(problem.key, MAX_ROLLING_MEMBERS_ANNOTATION);
    assert_eq!(problem.value, "two");
}

#[test]
fn a_max_rolling_members_some_members_carry_counts_for_nothing_and_they_are_told() {
    // Given zone a rolling, and a newcomer with the group's label, 0 replicas and "3"
    let [a, b, c] = fresh_rollout();
    let a = a.updated(&[0]).not_ready(&[0]);
    let newcomer = zone("ingester-newcomer", 0).annotation(MAX_ROLLING_MEMBERS_ANNOTATION, "3");
    let plan = plan(&group([a, b, c, newcomer]), now());
    // Then the zone rule holds: no other zone starts
    assert!(deleted(&plan).is_empty(), "{:?}", plan.actions);
    // And the newcomer is told, naming the members that hold the group to one
    let [warning] = plan.warnings.as_slice() else {
        panic!("one warning: {:?}", plan.warnings);
    };
    assert_eq!(warning.statefulset(), "ingester-newcomer");
    assert_eq!(warning.kind(), "InvalidAnnotation");
    assert_eq!(
        warning.to_string(),
        "StatefulSet ingester-newcomer: annotation baton.dev/max-rolling-members has the invalid \
         value \"3\" (accepted: the same on every member of the group: one member alone speaks \
         for nobody); using 1, held there by ingester-zone-a, ingester-zone-b, ingester-zone-c"
    );

    // And honest members carrying 2 with one member without it: one at a time too, each told
    let [a, b, c] = rolling_at_most("2");
    let a = a.updated(&[0]).not_ready(&[0]);
    let plan = super::plan(&group([a, b, c, zone("ingester-newcomer", 0)]), now());
    assert!(deleted(&plan).is_empty(), "{:?}", plan.actions);
    let told: Vec<&str> = plan.warnings.iter().map(Warning::statefulset).collect();
    assert_eq!(
        told,
        ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"]
    );
    assert!(
        plan.warnings[0]
            .to_string()
            .ends_with("using 1, held there by ingester-newcomer"),
        "{}",
        plan.warnings[0]
    );
}
