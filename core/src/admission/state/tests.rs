//! Who may change baton's memory and records, judged on the changes as decoded.

use super::judge as judge_change;
use super::*;

const CONTROLLER: &str = "system:serviceaccount:baton-system:baton-controller";
const WEBHOOK: &str = "system:serviceaccount:baton-system:baton-webhook";

fn with(annotations: &str) -> String {
    format!(r#"{{"metadata":{{"name":"ingester-zone-a","annotations":{annotations}}}}}"#)
}

fn judge(operation: &str, user: &str, object: &str, old: &str) -> Verdict {
    decide(operation, user, true, object, old)
}

fn judge_record(operation: &str, user: &str, object: &str, old: &str) -> Verdict {
    decide(operation, user, false, object, old)
}

/// The change as the webhook decodes it from a review's objects (`null`: absent); only
/// CREATE and UPDATE reach the guard.
fn decide(operation: &str, user: &str, statefulset: bool, object: &str, old: &str) -> Verdict {
    assert!(["CREATE", "UPDATE"].contains(&operation), "{operation}");
    let change = || {
        Ok(if statefulset {
            let read = |json: &str| {
                serde_json::from_str::<Option<Annotated>>(json)
                    .unwrap()
                    .unwrap_or_default()
            };
            StateChange::StatefulSet {
                old: read(old),
                new: read(object),
            }
        } else {
            let read = |json: &str| serde_json::from_str::<Option<RecordConfigMap>>(json).unwrap();
            StateChange::ConfigMap {
                name: "ingester-zone-a".into(),
                old: read(old),
                new: read(object),
            }
        })
    };
    judge_change(user, &writers(), statefulset, change)
}

fn writers() -> Writers {
    Writers {
        state: vec![CONTROLLER.to_owned()],
        records: vec![CONTROLLER.to_owned(), WEBHOOK.to_owned()],
    }
}

fn record(labels: &str, data: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"baton-downscale-ingester","labels":{labels},
        "annotations":{{"note":"x"}}}},"data":{data}}}"#
    )
}

const BATONS: &str = r#"{"app.kubernetes.io/managed-by":"baton"}"#;

#[test]
fn only_baton_creates_or_changes_its_records() {
    let entries = r#"{"ingester-zone-a":"{\"at\":\"2026-11-25T12:00:00Z\"}"}"#;
    let written = record(BATONS, entries);
    assert!(judge_record("CREATE", WEBHOOK, &written, "null").is_allowed());
    assert!(judge_record("UPDATE", CONTROLLER, &record(BATONS, "{}"), &written).is_allowed());
    // Removing an entry (lifting min-time), forging a record, dropping the label
    let lifted = judge_record("UPDATE", "alice", &record(BATONS, "{}"), &written);
    assert_eq!(
        lifted.message().as_deref(),
        Some(
            "ConfigMap baton-downscale-ingester is one of baton's records \
             (app.kubernetes.io/managed-by=baton), which only baton writes, all but its \
             annotations (data, labels, immutable, finalizers, owners; alice may not); its \
             annotations are yours"
        )
    );
    assert!(!judge_record("CREATE", "alice", &written, "null").is_allowed());
    assert!(!judge_record("UPDATE", "alice", &record("{}", entries), &written).is_allowed());
    // Freezing it (every later write fails), tying it to an owner the garbage collector
    // deletes it with, holding it with a finalizer, or hiding entries in binaryData
    for (what, field) in [
        ("frozen", r#""immutable":true,"#),
        ("binary data", r#""binaryData":{"x":"eA=="},"#),
    ] {
        let changed = written.replacen(r#""data""#, &format!(r#"{field}"data""#), 1);
        let refused = judge_record("UPDATE", "alice", &changed, &written);
        assert!(!refused.is_allowed(), "{what}: {changed}");
    }
    for (what, field) in [
        (
            "owned",
            r#""ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"u"}],"#,
        ),
        ("finalized", r#""finalizers":["example.com/keep"],"#),
    ] {
        let changed = written.replacen(r#""labels""#, &format!(r#"{field}"labels""#), 1);
        let refused = judge_record("UPDATE", "alice", &changed, &written);
        assert!(!refused.is_allowed(), "{what}: {changed}");
    }
    // `immutable: false` written out is what its absence means
    let spelled_out = written.replacen(r#""data""#, r#""immutable":false,"data""#, 1);
    assert!(judge_record("UPDATE", "alice", &spelled_out, &written).is_allowed());
    // Annotations are anyone's, and other ConfigMaps are not judged
    let annotated = written.replace(r#""note":"x""#, r#""note":"y""#);
    assert!(judge_record("UPDATE", "alice", &annotated, &written).is_allowed());
    let other = record(r#"{"app":"x"}"#, "{}");
    assert!(
        judge_record(
            "UPDATE",
            "alice",
            &other,
            &record(r#"{"app":"x"}"#, entries)
        )
        .is_allowed()
    );
}

const CLEARED: &str =
    r#"{"baton.dev/gate-state":"{\"revision\":\"r2\",\"clearedAt\":\"2026-11-25T12:00:00Z\"}"}"#;

#[test]
fn only_the_controller_sets_or_changes_batons_state() {
    let before = with(r#"{"baton.dev/gate-state":"{}"}"#);
    let denied = judge("UPDATE", "alice", &with(CLEARED), &before);
    assert!(!denied.is_allowed(), "{denied:?}");
    assert_eq!(
        denied.message().as_deref(),
        Some(
            "baton.dev/gate-state is baton's memory of the rollout, which only baton's \
             controller sets (alice may not); remove the annotation to make baton start \
             afresh, or leave it as it is"
        )
    );
    assert!(judge("UPDATE", CONTROLLER, &with(CLEARED), &before).is_allowed());
    // A new member may not bring forged state into the group either
    let created = judge("CREATE", "alice", &with(CLEARED), "null");
    assert!(!created.is_allowed());
    let forged = with(r#"{"baton.dev/check-state":"{\"passes\":9}","baton.dev/hook-state":"{}"}"#);
    let both = judge("UPDATE", "alice", &forged, &with("{}"));
    assert!(
        both.message().as_deref().is_some_and(
            |message| message.starts_with("baton.dev/check-state and baton.dev/hook-state are")
        ),
        "{both:?}"
    );
}

fn labelled(group: Option<&str>, annotations: &str) -> String {
    let labels = group.map_or_else(
        || "{}".to_owned(),
        |group| format!(r#"{{"rollout-group":"{group}"}}"#),
    );
    format!(
        r#"{{"metadata":{{"name":"ingester-zone-a","labels":{labels},"annotations":{annotations}}}}}"#
    )
}

#[test]
fn state_forged_outside_a_group_is_refused_as_the_statefulset_joins_one() {
    // Given state written while the StatefulSet was in no group (nothing guards it there)
    let outside = labelled(None, CLEARED);
    // When it is labelled into a group with that state unchanged, then that is setting it
    let joined = judge(
        "UPDATE",
        "alice",
        &labelled(Some("ingester"), CLEARED),
        &outside,
    );
    assert!(!joined.is_allowed(), "{joined:?}");
    assert!(
        joined
            .message()
            .as_deref()
            .is_some_and(|message| message.starts_with("baton.dev/gate-state is")),
        "{joined:?}"
    );
    // Joining without state, staying in the group with the state baton wrote, and
    // baton's controller doing either, are fine
    assert!(
        judge(
            "UPDATE",
            "alice",
            &labelled(Some("ingester"), "{}"),
            &outside
        )
        .is_allowed()
    );
    let member = labelled(Some("ingester"), CLEARED);
    assert!(judge("UPDATE", "alice", &member, &member).is_allowed());
    // Moved from another group with its state, it joins this one: refused too
    let elsewhere = labelled(Some("distributor"), CLEARED);
    assert!(!judge("UPDATE", "alice", &member, &elsewhere).is_allowed());
    assert!(judge("UPDATE", CONTROLLER, &member, &outside).is_allowed());
}

#[test]
fn a_rollback_record_is_batons_own_too() {
    // Forged, it would have baton write the template back to any revision.
    let forged = with(
        r#"{"baton.dev/rollback-state":"{\"from\":\"r2\",\"to\":\"r0\",\"why\":\"x\",\"at\":\"2026-11-25T00:00:00Z\",\"turn\":0}"}"#,
    );
    let denied = judge("UPDATE", "alice", &forged, &with("{}"));
    assert!(!denied.is_allowed(), "{denied:?}");
    assert!(
        denied
            .message()
            .as_deref()
            .is_some_and(|message| message.starts_with("baton.dev/rollback-state is")),
        "{denied:?}"
    );
    assert!(judge("UPDATE", CONTROLLER, &forged, &with("{}")).is_allowed());
    // Asking for a rollback is a person's.
    let asked = with(r#"{"baton.dev/rollback":"alice: errors"}"#);
    assert!(judge("UPDATE", "alice", &asked, &with("{}")).is_allowed());
}

#[test]
fn leaving_it_as_it_is_or_removing_it_is_anyones() {
    // A person editing something else, a GitOps PUT without it, a removal
    assert!(judge("UPDATE", "alice", &with(CLEARED), &with(CLEARED)).is_allowed());
    assert!(judge("UPDATE", "argocd", &with("{}"), &with(CLEARED)).is_allowed());
    assert!(judge("UPDATE", "alice", r#"{"metadata":{}}"#, &with(CLEARED)).is_allowed());
    assert!(
        judge(
            "CREATE",
            "alice",
            &with(r#"{"baton.dev/soak":"5m"}"#),
            "null"
        )
        .is_allowed()
    );
}
