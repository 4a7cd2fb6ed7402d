//! `/admission/state-guard`: what baton remembers is written by baton only. Who may change
//! what, and why, is `baton_core::admission::state`; here the review's objects are decoded
//! into the changes it judges.

use baton_core::admission::Verdict;
pub use baton_core::admission::state::Writers;
use baton_core::admission::state::{
    Annotated, RecordConfigMap, StateChange, judge, not_a_record, not_an_object,
};

use super::review::AdmissionRequest;

/// Judges a CREATE or UPDATE of a StatefulSet (its state annotations) or a ConfigMap (baton's
/// records) by who asks; nothing else is the guard's.
pub fn validate(request: &AdmissionRequest<'_>, writers: &Writers) -> Verdict {
    if request.operation != "CREATE" && request.operation != "UPDATE" {
        return Verdict::allow();
    }
    let requester = &request.user_info.username;
    match request.resource.resource.as_ref() {
        "statefulsets" => judge(requester, writers, true, || {
            let read = |json: Option<&str>, which: &str| match json {
                None => Ok(Annotated::default()),
                Some(json) => {
                    serde_json::from_str(json).map_err(|error| not_an_object(which, error))
                }
            };
            let new = read(request.object(), "object")?;
            let old = read(request.old_object(), "oldObject")?;
            Ok(StateChange::StatefulSet { old, new })
        }),
        "configmaps" => judge(requester, writers, false, || {
            let read = |json: Option<&str>, which: &str| {
                json.map(|json| {
                    serde_json::from_str::<RecordConfigMap>(json)
                        .map_err(|error| not_a_record(which, error))
                })
                .transpose()
            };
            let new = read(request.object(), "object")?;
            let old = read(request.old_object(), "oldObject")?;
            Ok(StateChange::ConfigMap {
                name: request.name.to_string(),
                old,
                new,
            })
        }),
        _ => Verdict::allow(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Decision;
    use crate::admission::review;
    use baton_core::annotations::{ROLLOUT_GROUP_LABEL, STATE_ANNOTATIONS};

    const CONTROLLER: &str = "system:serviceaccount:baton-system:baton-controller";
    const WEBHOOK: &str = "system:serviceaccount:baton-system:baton-webhook";

    fn review(operation: &str, resource: &str, user: &str, object: &str, old: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u1",
            "resource":{{"group":"","version":"v1","resource":"{resource}"}},
            "name":"ingester-zone-a","namespace":"mimir","operation":"{operation}",
            "userInfo":{{"username":"{user}"}},"object":{object},"oldObject":{old}}}}}"#
        )
        .into_bytes()
    }

    fn with(annotations: &str) -> String {
        format!(r#"{{"metadata":{{"name":"ingester-zone-a","annotations":{annotations}}}}}"#)
    }

    fn writers() -> Writers {
        Writers {
            state: vec![CONTROLLER.to_owned()],
            records: vec![CONTROLLER.to_owned(), WEBHOOK.to_owned()],
        }
    }

    fn judge(operation: &str, user: &str, object: &str, old: &str) -> Decision {
        let body = review(operation, "statefulsets", user, object, old);
        let request = review::decode(&body).expect("a review").request;
        Decision::of(validate(&request, &writers()), false)
    }

    fn judge_record(operation: &str, user: &str, object: &str, old: &str) -> Decision {
        let body = review(operation, "configmaps", user, object, old);
        let request = review::decode(&body).expect("a review").request;
        Decision::of(validate(&request, &writers()), false)
    }

    fn record(labels: &str, data: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"baton-downscale-ingester","labels":{labels},
            "annotations":{{"note":"x"}}}},"data":{data}}}"#
        )
    }

    const BATONS: &str = r#"{"app.kubernetes.io/managed-by":"baton"}"#;
    const CLEARED: &str = r#"{"baton.dev/gate-state":"{\"revision\":\"r2\",\"clearedAt\":\"2026-11-25T12:00:00Z\"}"}"#;

    #[test]
    fn state_written_through_the_status_subresource_is_judged_the_same() {
        let body = review(
            "UPDATE",
            "statefulsets",
            "alice",
            &with(CLEARED),
            &with("{}"),
        );
        let body = String::from_utf8(body)
            .expect("text")
            .replace(r#""operation""#, r#""subResource":"status","operation""#);
        let request = review::decode(body.as_bytes()).expect("a review").request;
        let decided = validate(&request, &writers());
        let decided = Decision::of(decided, false);
        assert!(!decided.allowed, "{decided:?}");
    }

    #[test]
    fn the_shipped_match_condition_names_every_state_annotation_and_the_group_label() {
        // The API server sends only what deploy/'s matchConditions let through: a state key
        // missing there would never be judged.
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/webhooks.yaml");
        let shipped = std::fs::read_to_string(&path).expect("deploy/base/webhooks.yaml");
        let start = shipped
            .find("name: may-set-batons-state")
            .expect("the state guard's match condition");
        let expression = &shipped[start
            ..shipped[start..]
                .find("rules:")
                .map_or(shipped.len(), |end| start + end)];
        for key in STATE_ANNOTATIONS {
            assert!(
                expression.contains(&format!("'{key}'")),
                "{key} missing: {expression}"
            );
        }
        assert_eq!(
            expression.matches("'baton.dev/").count(),
            STATE_ANNOTATIONS.len(),
            "{expression}"
        );
        for object in ["object", "oldObject"] {
            let value = format!("{object}.metadata.labels['{ROLLOUT_GROUP_LABEL}']");
            assert!(expression.contains(&value), "{value} missing: {expression}");
        }
    }

    /// The state writer deploy/member-cluster sets on a member cluster's webhook
    /// (`BATON_WEBHOOK__STATE_WRITERS` in deploy/member-cluster/system/kustomization.yaml).
    fn members_state_writer() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/member-cluster/system/kustomization.yaml");
        let shipped = std::fs::read_to_string(&path).expect("deploy/member-cluster's system part");
        let after = shipped
            .split_once("name: BATON_WEBHOOK__STATE_WRITERS")
            .expect("deploy/member-cluster sets the state writers")
            .1;
        let line = after
            .lines()
            .map(str::trim)
            .find(|line| line.starts_with("value:"))
            .expect("its value");
        line["value:".len()..].trim().to_owned()
    }

    #[test]
    fn in_a_member_cluster_the_hubs_identity_writes_batons_memory_and_nothing_of_its_records() {
        // A member's webhook as deploy/member-cluster configures it: its state writer set, its
        // records left to the default (baton's own accounts in baton-system)
        let member = members_state_writer();
        assert_eq!(member, "system:serviceaccount:baton-system:baton-member");
        let mut config = baton_config::Config {
            system_namespace: "baton-system".to_owned(),
            ..Default::default()
        };
        config.webhook.state_writers = vec![member.clone()];
        let writers = Writers {
            state: config.state_writers(),
            records: config.record_writers(),
        };
        let judge_as = |resource: &str, user: &str, object: &str, old: &str| {
            let body = review("UPDATE", resource, user, object, old);
            let request = review::decode(&body).expect("a review").request;
            Decision::of(validate(&request, &writers), false)
        };
        // The hub's identity sets each state annotation the hub writes
        for key in STATE_ANNOTATIONS {
            let state = format!(r#"{{"{key}":"{{}}"}}"#);
            assert!(
                judge_as("statefulsets", &member, &with(&state), &with("{}")).allowed,
                "{key}"
            );
        }
        // but not a record: a downscale ledger's entry lifted is refused
        let written = record(BATONS, r#"{"a":"b"}"#);
        let lifted = judge_as("configmaps", &member, &record(BATONS, "{}"), &written);
        assert!(!lifted.allowed, "{lifted:?}");
        assert_eq!(lifted.kind, Some("record-changed"));
        // nor does baton-controller's account, which runs in the hub only
        let cleared = judge_as("statefulsets", CONTROLLER, &with(CLEARED), &with("{}"));
        assert!(!cleared.allowed, "{cleared:?}");
        // nor a ServiceAccount of the same name in another namespace (the groups', whose users
        // may create one and ask for its token)
        let lookalike = "system:serviceaccount:mimir:baton-member";
        let forged = judge_as("statefulsets", lookalike, &with(CLEARED), &with("{}"));
        assert!(!forged.allowed, "{forged:?}");
        assert!(
            forged
                .message
                .as_deref()
                .is_some_and(|message| message.contains(&format!("({lookalike} may not)"))),
            "{forged:?}"
        );
    }

    #[test]
    fn reviews_decode_into_the_changes_judged_by_who_asks() {
        // A StatefulSet's state (an absent old object is one with no state), a record (named
        // by the review when its object is not), and who asks, from userInfo
        let before = with(r#"{"baton.dev/gate-state":"{}"}"#);
        let denied = judge("UPDATE", "alice", &with(CLEARED), &before);
        assert_eq!(
            denied.message.as_deref(),
            Some(
                "baton.dev/gate-state is baton's memory of the rollout, which only baton's \
                 controller sets (alice may not); remove the annotation to make baton start \
                 afresh, or leave it as it is"
            )
        );
        assert_eq!(denied.kind, Some("state-set"));
        assert!(!judge("CREATE", "alice", &with(CLEARED), "null").allowed);
        assert!(judge("UPDATE", CONTROLLER, &with(CLEARED), &before).allowed);
        let written = record(BATONS, r#"{"a":"b"}"#);
        let unnamed = |text: &str| text.replace(r#""name":"baton-downscale-ingester","#, "");
        let lifted = judge_record("UPDATE", "", &unnamed(&record(BATONS, "{}")), &written);
        assert_eq!(
            lifted.message.as_deref(),
            Some(
                "ConfigMap ingester-zone-a is one of baton's records \
                 (app.kubernetes.io/managed-by=baton), which only baton writes, all but its \
                 annotations (data, labels, immutable, finalizers, owners; an unnamed user may \
                 not); its annotations are yours"
            )
        );
        assert!(judge_record("UPDATE", WEBHOOK, &record(BATONS, "{}"), &written).allowed);
    }

    #[test]
    fn deletions_and_other_resources_are_not_the_guards() {
        assert!(judge("DELETE", "alice", "null", &with(CLEARED)).allowed);
        let body = review("UPDATE", "pods", "alice", &with(CLEARED), &with("{}"));
        let request = review::decode(&body).expect("a review").request;
        assert_eq!(validate(&request, &writers()), Verdict::allow());
    }

    #[test]
    fn an_unreadable_object_is_refused() {
        let denied = judge(
            "UPDATE",
            "alice",
            r#"{"metadata":{"annotations":{"baton.dev/gate-state":5}}}"#,
            &with("{}"),
        );
        assert!(!denied.allowed);
        assert!(
            denied
                .message
                .as_deref()
                .is_some_and(|message| message.starts_with("the review's object is not")),
            "{denied:?}"
        );
    }
}
