//! Stores the gate's annotation writes on the StatefulSets: one JSON merge patch per
//! StatefulSet, carrying the resourceVersion the decision was made from, so that a write based
//! on a stale read (another leader's, or before a person resumed the group) fails with 409
//! instead of overwriting. Thin: [`patch_body`] is the pure part.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Patch, PatchParams};

use crate::clusters::Clusters;
use crate::error::Error;
use crate::runner::Runner;
use serde_json::{Map, Value, json};

use baton_core::gates::AnnotationWrite;

/// What storing the gate state came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Every write is in the cluster: the decision may be acted on.
    Done,
    /// A StatefulSet changed (or went away) since it was read: act on nothing; its watch event
    /// brings the group back with the fresh object.
    Stale,
}

/// The merge patch for the writes on one StatefulSet read at `resource_version`: `null`
/// removes an annotation.
pub fn patch_body<'a>(
    resource_version: Option<&str>,
    writes: impl IntoIterator<Item = &'a AnnotationWrite>,
) -> Value {
    let annotations: Map<String, Value> = writes
        .into_iter()
        .map(|write| {
            let value = write.value.clone().map_or(Value::Null, Value::String);
            (write.key.to_owned(), value)
        })
        .collect();
    match resource_version {
        Some(resource_version) => json!({
            "metadata": {
                "resourceVersion": resource_version,
                "annotations": annotations,
            }
        }),
        None => json!({ "metadata": { "annotations": annotations } }),
    }
}

/// Where the StatefulSets written are: their cluster (by name) and namespace.
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub clusters: &'a Clusters,
    pub namespace: &'a str,
}

/// Writes `writes`, each StatefulSet as read in `members`, in one patch per StatefulSet.
pub async fn store(
    at: At<'_>,
    members: &[&StatefulSet],
    writes: &[AnnotationWrite],
    runner: &Runner,
) -> Result<Stored, Error> {
    store_at(at, Some(members), writes, runner).await
}

/// Writes facts that must not be lost to a concurrent change, whatever was read: what a hook
/// answered (it was called; calling it again because the record lost a race would be worse).
pub async fn store_unconditionally(
    at: At<'_>,
    writes: &[AnnotationWrite],
    runner: &Runner,
) -> Result<Stored, Error> {
    store_at(at, None, writes, runner).await
}

async fn store_at(
    at: At<'_>,
    members: Option<&[&StatefulSet]>,
    writes: &[AnnotationWrite],
    runner: &Runner,
) -> Result<Stored, Error> {
    let mut by_statefulset: BTreeMap<&str, Vec<&AnnotationWrite>> = BTreeMap::new();
    for write in writes {
        by_statefulset
            .entry(write.statefulset.as_str())
            .or_default()
            .push(write);
    }
    let params = PatchParams::default();
    for (name, writes) in by_statefulset {
        let resource_version = match members {
            None => None,
            Some(members) => {
                let Some(read) = members
                    .iter()
                    .find(|member| member.metadata.name.as_deref() == Some(name))
                else {
                    return Ok(Stored::Stale);
                };
                read.metadata.resource_version.as_deref()
            }
        };
        let body = patch_body(resource_version, writes);
        let patch = Patch::Merge(&body);
        let failed = |source: Error| Error::GateState {
            statefulset: name.to_owned(),
            source: Box::new(source),
        };
        let (api, local) = at
            .clusters
            .api::<StatefulSet>(at.namespace, name)
            .map_err(failed)?;
        let call = api.patch(local, &params, &patch);
        // Each StatefulSet's patch asks the term afresh: one ending between two patches
        // stops the second.
        let patched = runner
            .step(format!("storing the gate state on {name}"), call)
            .await?
            .map_err(|timed_out| failed(timed_out.into()))?;
        match patched {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                return Ok(Stored::Stale);
            }
            Err(source) => return Err(failed(source.into())),
        }
    }
    Ok(Stored::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::gates::{HALTED_ANNOTATION, STATE_ANNOTATION};

    #[test]
    fn the_patch_sets_and_removes_annotations_at_the_read_resource_version() {
        let writes = [
            AnnotationWrite {
                statefulset: "a".to_owned(),
                key: STATE_ANNOTATION,
                value: Some(r#"{"revision":"r"}"#.to_owned()),
            },
            AnnotationWrite {
                statefulset: "a".to_owned(),
                key: HALTED_ANNOTATION,
                value: None,
            },
        ];
        assert_eq!(
            patch_body(Some("42"), &writes),
            json!({
                "metadata": {
                    "resourceVersion": "42",
                    "annotations": {
                        "baton.dev/gate-state": "{\"revision\":\"r\"}",
                        "baton.dev/halted": null,
                    }
                }
            })
        );
        assert_eq!(
            patch_body(None, &writes[1..]),
            json!({ "metadata": { "annotations": { "baton.dev/halted": null } } })
        );
    }

    /// Two StatefulSets' gate state written within a term that answers `calls` times, on an
    /// API server that accepts every patch: what was sent, and what the store came to.
    async fn store_two(calls: usize) -> (Result<Stored, Error>, Vec<String>) {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;

        use crate::runner::recorded::{self, Reply};

        baton_shared::crypto::install_default_provider();
        let (client, recorded) = recorded::api("ns", |_, path| {
            let name = path.rsplit('/').next().unwrap_or_default();
            Reply::Object(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": "9"}}))
        });
        let clusters = Clusters::single(client);
        let members: Vec<StatefulSet> = ["a", "b"]
            .map(|name| {
                serde_json::from_value(json!({"metadata": {"name": name, "resourceVersion": "1"}}))
                    .expect("a StatefulSet")
            })
            .into();
        let read: Vec<&StatefulSet> = members.iter().collect();
        let writes = ["a", "b"].map(|statefulset| AnnotationWrite {
            statefulset: statefulset.to_owned(),
            key: STATE_ANNOTATION,
            value: Some("{}".to_owned()),
        });
        let asked = Arc::new(AtomicUsize::new(0));
        let may_act: crate::runner::MayAct = Arc::new(move || {
            (asked.fetch_add(1, Ordering::SeqCst) < calls).then_some(Duration::MAX)
        });
        let runner = Runner::new(may_act, Duration::from_secs(600));
        let at = At {
            clusters: &clusters,
            namespace: "ns",
        };
        let stored = store(at, &read, &writes, &runner).await;
        (stored, recorded.requests())
    }

    const PATCH_A: &str = "PATCH /apis/apps/v1/namespaces/ns/statefulsets/a";
    const PATCH_B: &str = "PATCH /apis/apps/v1/namespaces/ns/statefulsets/b";

    #[tokio::test]
    async fn each_statefulsets_patch_asks_the_term_afresh_and_one_ending_between_stops_the_next() {
        // Given a term that lasts: both patches, in order
        let (stored, requests) = store_two(usize::MAX).await;
        assert_eq!(stored.expect("stored"), Stored::Done);
        assert_eq!(requests, [PATCH_A, PATCH_B]);
        // When it ends after the first patch: the second is never sent, and the pass is told
        let (stored, requests) = store_two(1).await;
        assert!(matches!(stored, Err(Error::TermLost)), "{stored:?}");
        assert_eq!(requests, [PATCH_A]);
        // And a term already over sends nothing
        let (stored, requests) = store_two(0).await;
        assert!(matches!(stored, Err(Error::TermLost)), "{stored:?}");
        assert_eq!(requests, Vec::<String>::new());
    }
}
