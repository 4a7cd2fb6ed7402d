//! The resources StatefulSets mirror their replicas from: a reference's kind is resolved through
//! API discovery (cached per kind), its `scale` is read before each scaling plan — all of a
//! group's references at once, so the snapshot is built whole — and `status.replicas` is
//! written back when the reference asks for it.

use std::collections::HashMap;
use std::time::Duration;

use baton_core::annotations::scaling::MirrorReference;
use baton_core::scaling::snapshot::member_reference;
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
            // Named as the snapshot names it: `cluster/name` across clusters.
            if let Ok(Some(parsed)) = member_reference(statefulset)
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

    /// The resource of a reference's kind, through discovery in the cluster of `client` (named
    /// `cluster`, empty for the hub); only kinds with a scale subresource in a namespace
    /// qualify. Found kinds are cached (a missing kind is looked up again next time: its CRD
    /// may be installed meanwhile).
    async fn resolve(
        &self,
        client: &kube::Client,
        cluster: &str,
        reference: &MirrorReference,
    ) -> Result<ApiResource, Error> {
        let key = (
            cluster.to_owned(),
            reference.api_version.clone(),
            reference.kind.clone(),
        );
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
            kube::discovery::pinned_kind(client, &gvk),
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

    fn lock_discovered(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, String, String), ApiResource>> {
        self.discovered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The API of the reference's kind in its cluster, and its name there.
    async fn reference_api<'r>(
        &self,
        reference: &'r MirrorReference,
    ) -> Result<(Api<DynamicObject>, &'r str), Error> {
        let (client, local) = self.clusters.client_for(&reference.name)?;
        let cluster = baton_core::clusters::split(&reference.name)
            .0
            .unwrap_or_default();
        let resource = self.resolve(&client, cluster, reference).await?;
        Ok((
            Api::namespaced_with(client, &self.namespace, &resource),
            local,
        ))
    }

    async fn read_reference(&self, reference: &MirrorReference) -> Result<ReferenceScale, Error> {
        let (api, local) = self.reference_api(reference).await?;
        let scale = bounded(
            self.request_timeout,
            format!("reading the scale of {} {}", reference.kind, reference.name),
            api.get_scale(local),
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
            let (api, local) = self.scaler.reference_api(reference).await?;
            bounded(
                timeout,
                format!(
                    "writing back the status of {} {}",
                    reference.kind, reference.name
                ),
                api.patch_status(
                    local,
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
