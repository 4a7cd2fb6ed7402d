//! `/admission/state-guard`: what baton remembers is written by baton only.
//!
//! - **Its memory on StatefulSets** (`baton.dev/gate-state`, `baton.dev/check-state`,
//!   `baton.dev/hook-state`) is set by baton's controller only. Anyone else who could set it
//!   could skip what it records: a zone's `clearedAt` skips its soak and its BeforeZone hook, a
//!   future `lastRun` silences a health check, a forged count passes a step, and a new member
//!   created with forged state supplies it to the whole group. Removing it is allowed: baton
//!   then starts afresh, which makes it more careful, never less (a soak restarts, a zone is
//!   gated again, a hook is called again). And a client that replaces the whole object (a PUT
//!   from a GitOps tool) must not be refused for leaving out what it never wrote.
//! - **Its records** (ConfigMaps labelled `app.kubernetes.io/managed-by: baton`: the downscale
//!   ledgers and the eviction records) are created and changed by baton's controller and
//!   webhook only. Whoever else could edit them would remove an entry to lift a downscale's
//!   min-time, or add one to block evictions; make it `immutable` to fail every later write, so
//!   every downscale and drain; add an owner whose deletion takes it away, or a finalizer.
//!   Everything but their annotations is guarded; those stay anyone's. Deleting a whole
//!   record is not judged: a namespace being deleted must not hang on baton's webhook.

use std::collections::BTreeMap;

use baton_core::annotations::{ROLLOUT_GROUP_LABEL, STATE_ANNOTATIONS};
use baton_core::ledger::MANAGED_BY_LABEL;
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
    name: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    /// A finalizer keeps a record from going; an owner reference makes the garbage collector
    /// delete it with its owner (a pod of the attacker's, say).
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default, rename = "ownerReferences")]
    owner_references: Option<Vec<serde_json::Value>>,
}

/// A ConfigMap's parts a record is made of: every field that changes what it means or whether
/// baton can keep writing it (`immutable: true` would fail every later write, so every downscale
/// and drain).
#[derive(Debug, Default, Deserialize)]
struct Record {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    data: Option<BTreeMap<String, String>>,
    #[serde(default, rename = "binaryData")]
    binary_data: Option<BTreeMap<String, String>>,
    #[serde(default)]
    immutable: Option<bool>,
}

impl Record {
    fn read(json: Option<&str>, which: &str) -> Result<Option<Self>, Decision> {
        json.map(|json| {
            serde_json::from_str(json).map_err(|error| {
                Decision::deny(format!("the review's {which} is not a ConfigMap: {error}"))
            })
        })
        .transpose()
    }

    /// Whether `other` means the same: equal in everything but its annotations.
    fn means_the_same_as(&self, other: &Self) -> bool {
        self.data == other.data
            && self.binary_data == other.binary_data
            && self.immutable.unwrap_or(false) == other.immutable.unwrap_or(false)
            && self.metadata.labels == other.metadata.labels
            && self.metadata.finalizers.as_deref().unwrap_or_default()
                == other.metadata.finalizers.as_deref().unwrap_or_default()
            && self
                .metadata
                .owner_references
                .as_deref()
                .unwrap_or_default()
                == other
                    .metadata
                    .owner_references
                    .as_deref()
                    .unwrap_or_default()
    }

    fn is_batons(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(MANAGED_BY_LABEL))
            .is_some_and(|value| value == "baton")
    }
}

/// Who may write what baton remembers, as the API server names users.
#[derive(Debug, Clone, Default)]
pub struct Writers {
    /// baton's state annotations on StatefulSets: the controller.
    pub state: Vec<String>,
    /// baton's records: the controller and the webhook.
    pub records: Vec<String>,
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

    /// The rollout group it is in, by its label (an absent object, a CREATE's old one, is in
    /// none).
    fn group(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(ROLLOUT_GROUP_LABEL)
            .map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

/// Judges a CREATE or UPDATE of a StatefulSet (its state annotations) or a ConfigMap (baton's
/// records) by who asks.
pub fn validate(request: &AdmissionRequest<'_>, writers: &Writers) -> Decision {
    if request.operation != "CREATE" && request.operation != "UPDATE" {
        return Decision::allow();
    }
    match request.resource.resource.as_ref() {
        "statefulsets" => state(request, &writers.state),
        "configmaps" => records(request, &writers.records),
        _ => Decision::allow(),
    }
}

fn is_one_of(request: &AdmissionRequest<'_>, writers: &[String]) -> bool {
    writers
        .iter()
        .any(|writer| *writer == request.user_info.username)
}

fn requester(request: &AdmissionRequest<'_>) -> String {
    if request.user_info.username.is_empty() {
        "an unnamed user".to_owned()
    } else {
        request.user_info.username.to_string()
    }
}

/// Refuses creating or changing a record's data or labels, unless one of `writers` asks.
fn records(request: &AdmissionRequest<'_>, writers: &[String]) -> Decision {
    if is_one_of(request, writers) {
        return Decision::allow();
    }
    let new = match Record::read(request.object(), "object") {
        Ok(new) => new,
        Err(denied) => return denied,
    };
    let old = match Record::read(request.old_object(), "oldObject") {
        Ok(old) => old,
        Err(denied) => return denied,
    };
    let batons =
        new.as_ref().is_some_and(Record::is_batons) || old.as_ref().is_some_and(Record::is_batons);
    let changed = match (&old, &new) {
        (Some(old), Some(new)) => !old.means_the_same_as(new),
        _ => true,
    };
    if !batons || !changed {
        return Decision::allow();
    }
    let name = new
        .as_ref()
        .and_then(|record| record.metadata.name.clone())
        .unwrap_or_else(|| request.name.to_string());
    Decision::deny(format!(
        "ConfigMap {name} is one of baton's records ({MANAGED_BY_LABEL}=baton), which only baton \
         writes, all but its annotations (data, labels, immutable, finalizers, owners; {} may \
         not); its annotations are yours",
        requester(request)
    ))
}

/// Refuses setting or changing one of baton's state annotations, unless one of `writers` asks.
fn state(request: &AdmissionRequest<'_>, writers: &[String]) -> Decision {
    if is_one_of(request, writers) {
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
    // State carried into a group is set as it joins: written while the StatefulSet was
    // outside every group (where nothing guards it), or kept from another group, then labelled
    // in unchanged, it would otherwise pass as "left as it was".
    let joining = new.group().is_some() && new.group() != old.group();
    let changed: Vec<&str> = STATE_ANNOTATIONS
        .into_iter()
        .filter(|key| {
            let value = new.annotation(key);
            value.is_some() && (joining || value != old.annotation(key))
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
        requester(request)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review;

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
        validate(&request, &writers())
    }

    fn judge_record(operation: &str, user: &str, object: &str, old: &str) -> Decision {
        let body = review(operation, "configmaps", user, object, old);
        let request = review::decode(&body).expect("a review").request;
        validate(&request, &writers())
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
        assert!(judge_record("CREATE", WEBHOOK, &written, "null").allowed);
        assert!(judge_record("UPDATE", CONTROLLER, &record(BATONS, "{}"), &written).allowed);
        // Removing an entry (lifting min-time), forging a record, dropping the label
        let lifted = judge_record("UPDATE", "alice", &record(BATONS, "{}"), &written);
        assert_eq!(
            lifted.message.as_deref(),
            Some(
                "ConfigMap baton-downscale-ingester is one of baton's records \
                 (app.kubernetes.io/managed-by=baton), which only baton writes, all but its \
                 annotations (data, labels, immutable, finalizers, owners; alice may not); its \
                 annotations are yours"
            )
        );
        assert!(!judge_record("CREATE", "alice", &written, "null").allowed);
        assert!(!judge_record("UPDATE", "alice", &record("{}", entries), &written).allowed);
        // Freezing it (every later write fails), tying it to an owner the garbage collector
        // deletes it with, holding it with a finalizer, or hiding entries in binaryData
        for (what, field) in [
            ("frozen", r#""immutable":true,"#),
            ("binary data", r#""binaryData":{"x":"eA=="},"#),
        ] {
            let changed = written.replacen(r#""data""#, &format!(r#"{field}"data""#), 1);
            let refused = judge_record("UPDATE", "alice", &changed, &written);
            assert!(!refused.allowed, "{what}: {changed}");
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
            assert!(!refused.allowed, "{what}: {changed}");
        }
        // `immutable: false` written out is what its absence means
        let spelled_out = written.replacen(r#""data""#, r#""immutable":false,"data""#, 1);
        assert!(judge_record("UPDATE", "alice", &spelled_out, &written).allowed);
        // Annotations are anyone's, and other ConfigMaps are not judged
        let annotated = written.replace(r#""note":"x""#, r#""note":"y""#);
        assert!(judge_record("UPDATE", "alice", &annotated, &written).allowed);
        let other = record(r#"{"app":"x"}"#, "{}");
        assert!(
            judge_record(
                "UPDATE",
                "alice",
                &other,
                &record(r#"{"app":"x"}"#, entries)
            )
            .allowed
        );
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
        assert!(!joined.allowed, "{joined:?}");
        assert!(
            joined
                .message
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
            .allowed
        );
        let member = labelled(Some("ingester"), CLEARED);
        assert!(judge("UPDATE", "alice", &member, &member).allowed);
        // Moved from another group with its state, it joins this one: refused too
        let elsewhere = labelled(Some("distributor"), CLEARED);
        assert!(!judge("UPDATE", "alice", &member, &elsewhere).allowed);
        assert!(judge("UPDATE", CONTROLLER, &member, &outside).allowed);
    }

    #[test]
    fn state_written_through_the_status_subresource_is_judged_the_same() {
        let body = review(
            "UPDATE",
            "statefulsets",
            "alice",
            &labelled(Some("ingester"), CLEARED),
            &labelled(Some("ingester"), "{}"),
        );
        let body = String::from_utf8(body)
            .expect("text")
            .replace(r#""operation""#, r#""subResource":"status","operation""#);
        let request = review::decode(body.as_bytes()).expect("a review").request;
        let decided = validate(&request, &writers());
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

    #[test]
    fn a_rollback_record_is_batons_own_too() {
        // Forged, it would have baton write the template back to any revision.
        let forged = with(
            r#"{"baton.dev/rollback-state":"{\"from\":\"r2\",\"to\":\"r0\",\"why\":\"x\",\"at\":\"2026-11-25T00:00:00Z\",\"turn\":0}"}"#,
        );
        let denied = judge("UPDATE", "alice", &forged, &with("{}"));
        assert!(!denied.allowed, "{denied:?}");
        assert!(
            denied
                .message
                .as_deref()
                .is_some_and(|message| message.starts_with("baton.dev/rollback-state is")),
            "{denied:?}"
        );
        assert!(judge("UPDATE", CONTROLLER, &forged, &with("{}")).allowed);
        // Asking for a rollback is a person's.
        let asked = with(r#"{"baton.dev/rollback":"alice: errors"}"#);
        assert!(judge("UPDATE", "alice", &asked, &with("{}")).allowed);
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
