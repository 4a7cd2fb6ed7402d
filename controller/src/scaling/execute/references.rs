//! The resources StatefulSets mirror their replicas from: a reference's kind is resolved through
//! API discovery (cached per kind), its `scale` is read before each scaling plan — all of a
//! group's references at once, so the snapshot is built whole — and `status.replicas` is
//! written back when the reference asks for it.

use std::collections::HashMap;
use std::time::Duration;

use baton_core::annotations::scaling::{MirrorReference, mirror_reference};
use baton_shared::kube_client::bounded;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::Scope;
use serde_json::json;
use std::sync::Arc;

use super::{Pass, Scaler};
use crate::error::Error;
use baton_core::scaling::pass::{Outcome, write_back_failed};
use baton_core::scaling::plan::ReferenceScale;
use baton_core::scaling::snapshot::ReferenceScales;

impl Scaler {
    /// The scale of every reference the group's StatefulSets mirror, read concurrently (each
    /// bounded by the request timeout), or why it could not be read.
    pub(super) async fn read_references(&self, members: &[Arc<StatefulSet>]) -> ReferenceScales {
        let mut references: Vec<MirrorReference> = Vec::new();
        for statefulset in members {
            let Some(annotations) = statefulset.metadata.annotations.as_ref() else {
                continue;
            };
            if let Ok(Some(parsed)) = mirror_reference(annotations)
                && !references.contains(&parsed.value)
            {
                references.push(parsed.value);
            }
        }
        let reads = references.into_iter().map(|reference| async move {
            let scale = self
                .read_reference(&reference)
                .await
                .map_err(|error| error.to_string());
            (reference, scale)
        });
        futures::future::join_all(reads).await
    }

    /// The resource of a reference's kind, through discovery; only kinds with a scale
    /// subresource in a namespace qualify. Found kinds are cached (a missing kind is looked up
    /// again next time: its CRD may be installed meanwhile).
    async fn resolve(&self, reference: &MirrorReference) -> Result<ApiResource, Error> {
        let key = (reference.api_version.clone(), reference.kind.clone());
        if let Some(found) = self.lock_discovered().get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = reference
            .api_version
            .split_once('/')
            .unwrap_or(("", reference.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &reference.kind);
        let (resource, capabilities) = bounded(
            self.request_timeout,
            format!("discovering {} {}", reference.api_version, reference.kind),
            kube::discovery::pinned_kind(&self.client, &gvk),
        )
        .await??;
        if capabilities.scope != Scope::Namespaced {
            return Err(Error::UnsupportedReference(format!(
                "{} is not a namespaced kind",
                reference.kind
            )));
        }
        if !capabilities
            .subresources
            .iter()
            .any(|(subresource, _)| subresource.plural == "scale")
        {
            return Err(Error::UnsupportedReference(format!(
                "{} ({}) has no scale subresource",
                reference.kind, resource.plural
            )));
        }
        self.lock_discovered().insert(key, resource.clone());
        Ok(resource)
    }

    fn lock_discovered(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ApiResource>> {
        self.discovered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn reference_api(
        &self,
        reference: &MirrorReference,
    ) -> Result<Api<DynamicObject>, Error> {
        let resource = self.resolve(reference).await?;
        Ok(Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &resource,
        ))
    }

    async fn read_reference(&self, reference: &MirrorReference) -> Result<ReferenceScale, Error> {
        let api = self.reference_api(reference).await?;
        let scale = bounded(
            self.request_timeout,
            format!("reading the scale of {} {}", reference.kind, reference.name),
            api.get_scale(&reference.name),
        )
        .await??;
        Ok(ReferenceScale {
            spec_replicas: scale.spec.and_then(|spec| spec.replicas).unwrap_or(0),
            status_replicas: scale.status.map(|status| status.replicas),
        })
    }
}

impl Pass<'_> {
    /// Sets the reference's `status.replicas`; a failure is told (the next pass repeats it).
    pub(super) async fn write_back(
        &self,
        name: &str,
        reference: &MirrorReference,
        replicas: i32,
        timeout: Duration,
    ) -> Outcome {
        let result = async {
            let api = self.scaler.reference_api(reference).await?;
            bounded(
                timeout,
                format!(
                    "writing back the status of {} {}",
                    reference.kind, reference.name
                ),
                api.patch_status(
                    &reference.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"replicas": replicas}})),
                ),
            )
            .await??;
            Ok::<_, Error>(())
        }
        .await;
        match result {
            Ok(()) => {
                tracing::info!(
                    statefulset = name,
                    reference = %reference.name,
                    kind = %reference.kind,
                    replicas,
                    "wrote status.replicas back to the reference"
                );
                Outcome::Done
            }
            Err(error) => {
                let told = write_back_failed(reference, replicas, &error.to_string());
                self.say(name, told).await;
                Outcome::Failed
            }
        }
    }
}
