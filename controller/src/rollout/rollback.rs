//! A rollback's I/O (the decisions are `baton_core::gates::rollback`): starting one that was
//! asked for (reading the members' ControllerRevisions, storing the records, removing the
//! request) and writing each member's pod template back from the revision it returns to. The
//! pods are then rolled back by the gate, like any rollout.
//!
//! Each step is one conditional write and ends the pass: its watch event brings the group back
//! with what it wrote, so a pass never acts on a group it just changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use baton_core::gates::rollback::{self, ROLLBACK_STATE_ANNOTATION, Revision, RollbackRecord};
use baton_core::rollout::GroupSnapshot;
use baton_shared::kube_client::bounded;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::Selector;
use kube::{Resource, ResourceExt};

use crate::error::Error;
use crate::explain::{Explainer, Explanation, Severity};
use crate::gates::store;
use crate::runner::Runner;

/// The rollback side of a group's pass, run by the leader before the gate.
pub struct Rollbacks<'a> {
    /// Where each member is: a rollback writes a member in its own cluster.
    pub clusters: &'a crate::clusters::Clusters,
    pub namespace: &'a str,
    /// The pass's hold on its term: each read is bounded by the request timeout, each write
    /// by what is left of the term, asked afresh.
    pub runner: &'a Runner,
    pub explainer: &'a Explainer,
}

impl Rollbacks<'_> {
    fn at(&self) -> store::At<'_> {
        store::At {
            clusters: self.clusters,
            namespace: self.namespace,
        }
    }

    /// Starts the rollback every member asks for (`why`, told on `carrier` when refused), or
    /// when `refused` says why not, removes the request and says so: reads the members'
    /// history, and writes and tells what the core decides on it ([`rollback::starting`]).
    /// Returns the zone the rollback starts with once its records are stored (`None`: refused,
    /// or a member changed meanwhile and the next pass starts it).
    pub async fn start(
        &self,
        group: &str,
        snapshot: &GroupSnapshot,
        members: &[Arc<StatefulSet>],
        carrier: &str,
        why: &str,
        refused: Option<&str>,
    ) -> Result<Option<String>, Error> {
        let history = match refused {
            Some(_) => BTreeMap::new(),
            None => self.history(members).await?,
        };
        let history = refused.map_or(Ok(&history), Err);
        let starting = rollback::starting(
            group,
            snapshot,
            history,
            carrier,
            why,
            jiff::Timestamp::now(),
        );
        let read: Vec<&StatefulSet> = members.iter().map(Arc::as_ref).collect();
        if starting.first.is_some()
            && store::store(self.at(), &read, &starting.records, self.runner).await?
                != store::Stored::Done
        {
            return Ok(None);
        }
        if store::store_unconditionally(self.at(), &starting.remove_request, self.runner).await?
            == store::Stored::Done
            && let Some(member) = members
                .iter()
                .find(|member| member.name_any() == starting.told_on)
        {
            self.explainer
                .tell(&member.object_ref(&()), starting.explanation)
                .await;
        }
        Ok(starting.first)
    }

    /// Every member's ControllerRevisions (the ones it controls), by member name: listed by each
    /// member's own selector (the StatefulSet controller labels its revisions with the pods'
    /// labels), never the whole namespace, whose revisions anyone may fill.
    async fn history(
        &self,
        members: &[Arc<StatefulSet>],
    ) -> Result<BTreeMap<String, Vec<Revision>>, Error> {
        let mut revisions = Vec::new();
        for member in members {
            let name = member.name_any();
            let (api, _) = self
                .clusters
                .api::<ControllerRevision>(self.namespace, &name)?;
            // An empty or unreadable selector selects everything: such a member has no history
            // worth the namespace's.
            let Some(selector) = member
                .spec
                .as_ref()
                .and_then(|spec| Selector::try_from(spec.selector.clone()).ok())
                .map(|selector| selector.to_string())
                .filter(|selector| !selector.is_empty())
            else {
                continue;
            };
            let listing = format!("listing the ControllerRevisions of {name}");
            let listed = bounded(
                self.runner.bound(false)?,
                listing,
                api.list(&ListParams::default().labels(&selector)),
            )
            .await?
            .map_err(|source| Error::Rollback {
                statefulset: name.clone(),
                step: "listing ControllerRevisions",
                source,
            })?;
            revisions.extend(listed.items);
        }
        let read: Vec<&StatefulSet> = members.iter().map(Arc::as_ref).collect();
        Ok(rollback::history(&read, &revisions))
    }

    /// Writes `name`'s pod template back from the ControllerRevision `record.to`, marking the
    /// record restored in the same conditional patch (never twice: a template that comes back
    /// to `from` afterwards is someone else's doing).
    pub async fn restore(
        &self,
        members: &[Arc<StatefulSet>],
        name: &str,
        record: &RollbackRecord,
    ) -> Result<(), Error> {
        let failed = |step, source| Error::Rollback {
            statefulset: name.to_owned(),
            step,
            source,
        };
        let Some(member) = members.iter().find(|member| member.name_any() == name) else {
            return Ok(());
        };
        let (revisions, local) = self
            .clusters
            .api::<ControllerRevision>(self.namespace, name)?;
        let reading = format!("reading ControllerRevision {}", record.to);
        let revision = bounded(
            self.runner.bound(false)?,
            reading,
            revisions.get(&record.to),
        )
        .await?
        .map_err(|source| failed("reading the revision to go back to", source))?;
        // The record names the revision; only one of this member's own is copied into it.
        if !rollback::is_revision_of(&revision, member) {
            let explanation = Explanation {
                severity: Severity::Warning,
                reason: "RollbackRefused".to_owned(),
                action: "Rollback".to_owned(),
                note: format!(
                    "ControllerRevision {} is not one of {name}'s own (no controller owner \
                     reference to it): its template is not written into {name}",
                    record.to
                ),
            };
            self.explainer
                .tell(&member.object_ref(&()), explanation)
                .await;
            return Ok(());
        }
        let restored = RollbackRecord {
            restored: true,
            ..record.clone()
        };
        let body = restore_patch(
            revision.data.map(|data| data.0),
            member.metadata.resource_version.as_deref(),
            &restored,
        );
        let (api, _) = self.clusters.api::<StatefulSet>(self.namespace, name)?;
        let writing = format!("writing the template of {name} back to {}", record.to);
        let patch = Patch::Strategic(&body);
        match self
            .runner
            .step(writing, api.patch(local, &PatchParams::default(), &patch))
            .await??
        {
            Ok(_) => {}
            // Someone wrote meanwhile: the watch event brings the group back.
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                return Ok(());
            }
            Err(source) => return Err(failed("writing the template back", source)),
        }
        let explanation = Explanation {
            severity: Severity::Normal,
            reason: "TemplateRestored".to_owned(),
            action: "Rollback".to_owned(),
            note: format!(
                "pod template written back from ControllerRevision {} (was {})",
                record.to, record.from
            ),
        };
        self.explainer
            .tell(&member.object_ref(&()), explanation)
            .await;
        Ok(())
    }
}

/// The strategic merge patch that writes a StatefulSet's template back: the ControllerRevision's
/// data (the StatefulSet controller stores it as `{"spec": {"template": {…, "$patch":
/// "replace"}}}`, what `kubectl rollout undo` applies), the record marked restored, and the
/// resourceVersion read as a precondition.
pub fn restore_patch(
    data: Option<serde_json::Value>,
    resource_version: Option<&str>,
    restored: &RollbackRecord,
) -> serde_json::Value {
    let mut body = match data {
        Some(serde_json::Value::Object(data)) => serde_json::Value::Object(data),
        _ => serde_json::json!({}),
    };
    body["metadata"] = serde_json::json!({
        "resourceVersion": resource_version,
        "annotations": { ROLLBACK_STATE_ANNOTATION: restored.to_annotation() },
    });
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restore_patch_is_the_revisions_template_and_the_record_at_the_read_version() {
        let data = serde_json::json!({"spec": {"template": {
            "$patch": "replace",
            "spec": {"containers": [{"name": "app", "image": "app:v1"}]},
        }}});
        let record = RollbackRecord {
            from: "zone-a-new".to_owned(),
            to: "zone-a-old".to_owned(),
            why: "errors".to_owned(),
            at: "2026-11-25T00:00:00Z".to_owned(),
            turn: 0,
            restored: true,
            settled: false,
        };
        let body = restore_patch(Some(data.clone()), Some("42"), &record);
        assert_eq!(body["spec"], data["spec"]);
        assert_eq!(body["metadata"]["resourceVersion"], "42");
        let stored: RollbackRecord = serde_json::from_str(
            body["metadata"]["annotations"][ROLLBACK_STATE_ANNOTATION]
                .as_str()
                .expect("a string"),
        )
        .expect("a record");
        assert_eq!(stored, record);
    }
}
