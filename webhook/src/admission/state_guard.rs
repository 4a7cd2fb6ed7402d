//! `/admission/state-guard`: baton's memory on StatefulSets (`baton.dev/gate-state`,
//! `baton.dev/check-state`, `baton.dev/hook-state`) is set by baton's controller only.
//!
//! Anyone else who could set it could skip what it records: a zone's `clearedAt` skips its
//! soak and its BeforeZone hook, a future `lastRun` silences a health check, a forged count
//! passes a step, and a new member created with forged state supplies it to the whole group.
//! Removing it is allowed: baton then starts afresh, which makes it more careful, never less
//! (a soak restarts, a zone is gated again, a hook is called again). And a client that
//! replaces the whole object (a PUT from a GitOps tool) must not be refused for leaving out
//! what it never wrote.

use std::collections::BTreeMap;

use baton_shared::annotations::STATE_ANNOTATIONS;
use serde::Deserialize;

use super::decision::Decision;
use super::review::AdmissionRequest;

#[derive(Debug, Default, Deserialize)]
struct Annotated {
    #[serde(default)]
    metadata: Metadata,
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

impl Annotated {
    fn read(json: Option<&str>, which: &str) -> Result<Self, Decision> {
        match json {
            None => Ok(Self::default()),
            Some(json) => serde_json::from_str(json).map_err(|error| {
                Decision::deny(format!(
                    "the review's {which} is not an object with metadata: {error}"
                ))
            }),
        }
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

/// Refuses a CREATE or UPDATE that sets or changes one of baton's state annotations, unless
/// the requester is one of `writers` (baton's controller).
pub fn validate(request: &AdmissionRequest<'_>, writers: &[String]) -> Decision {
    if request.operation != "CREATE" && request.operation != "UPDATE" {
        return Decision::allow();
    }
    if writers
        .iter()
        .any(|writer| *writer == request.user_info.username)
    {
        return Decision::allow();
    }
    let new = match Annotated::read(request.object(), "object") {
        Ok(new) => new,
        Err(denied) => return denied,
    };
    let old = match Annotated::read(request.old_object(), "oldObject") {
        Ok(old) => old,
        Err(denied) => return denied,
    };
    let changed: Vec<&str> = STATE_ANNOTATIONS
        .into_iter()
        .filter(|key| {
            let value = new.annotation(key);
            value.is_some() && value != old.annotation(key)
        })
        .collect();
    if changed.is_empty() {
        return Decision::allow();
    }
    Decision::deny(format!(
        "{} {} baton's memory of the rollout, which only baton's controller sets ({} may not); \
         remove the annotation to make baton start afresh, or leave it as it is",
        changed.join(" and "),
        if changed.len() == 1 { "is" } else { "are" },
        if request.user_info.username.is_empty() {
            "an unnamed user"
        } else {
            &request.user_info.username
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review;

    const CONTROLLER: &str = "system:serviceaccount:baton-system:baton-controller";

    fn review(operation: &str, user: &str, object: &str, old: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u1",
            "resource":{{"group":"apps","version":"v1","resource":"statefulsets"}},
            "name":"ingester-zone-a","namespace":"mimir","operation":"{operation}",
            "userInfo":{{"username":"{user}"}},"object":{object},"oldObject":{old}}}}}"#
        )
        .into_bytes()
    }

    fn with(annotations: &str) -> String {
        format!(r#"{{"metadata":{{"name":"ingester-zone-a","annotations":{annotations}}}}}"#)
    }

    fn judge(operation: &str, user: &str, object: &str, old: &str) -> Decision {
        let body = review(operation, user, object, old);
        let request = review::decode(&body).expect("a review").request;
        validate(&request, &[CONTROLLER.to_owned()])
    }

    const CLEARED: &str = r#"{"baton.dev/gate-state":"{\"revision\":\"r2\",\"clearedAt\":\"2026-11-25T12:00:00Z\"}"}"#;

    #[test]
    fn only_the_controller_sets_or_changes_batons_state() {
        let before = with(r#"{"baton.dev/gate-state":"{}"}"#);
        let denied = judge("UPDATE", "alice", &with(CLEARED), &before);
        assert!(!denied.allowed, "{denied:?}");
        assert_eq!(
            denied.message.as_deref(),
            Some(
                "baton.dev/gate-state is baton's memory of the rollout, which only baton's \
                 controller sets (alice may not); remove the annotation to make baton start \
                 afresh, or leave it as it is"
            )
        );
        assert!(judge("UPDATE", CONTROLLER, &with(CLEARED), &before).allowed);
        // A new member may not bring forged state into the group either
        let created = judge("CREATE", "alice", &with(CLEARED), "null");
        assert!(!created.allowed);
        let forged =
            with(r#"{"baton.dev/check-state":"{\"passes\":9}","baton.dev/hook-state":"{}"}"#);
        let both = judge("UPDATE", "alice", &forged, &with("{}"));
        assert!(
            both.message
                .as_deref()
                .is_some_and(|message| message
                    .starts_with("baton.dev/check-state and baton.dev/hook-state are")),
            "{both:?}"
        );
    }

    #[test]
    fn leaving_it_as_it_is_or_removing_it_is_anyones() {
        // A person editing something else, a GitOps PUT without it, a removal
        assert!(judge("UPDATE", "alice", &with(CLEARED), &with(CLEARED)).allowed);
        assert!(judge("UPDATE", "argocd", &with("{}"), &with(CLEARED)).allowed);
        assert!(judge("UPDATE", "alice", r#"{"metadata":{}}"#, &with(CLEARED)).allowed);
        assert!(
            judge(
                "CREATE",
                "alice",
                &with(r#"{"baton.dev/soak":"5m"}"#),
                "null"
            )
            .allowed
        );
        assert!(judge("DELETE", "alice", "null", &with(CLEARED)).allowed);
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
