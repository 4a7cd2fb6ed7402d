//! Zone-aware budgets across the trio's clusters (docs/multi-cluster.md, "Evictions across
//! clusters"): a baton-webhook replica in each cluster with the three as its
//! `webhook.clusters`, its own cluster without a Secret and the others by a kubeconfig Secret
//! in its namespace, registered as its cluster's eviction webhook; a budget selecting the
//! group in each cluster.
//!
//! The Secrets are those the hub was given for cluster-b and cluster-c (`kubectl baton cluster
//! add`: deploy/member-cluster's `baton-member`, with exactly its permissions), copied into the
//! other clusters; the hub, which has no `baton-member`, is reached with its admin kubeconfig.

use std::path::PathBuf;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use serde_json::json;

use crate::cluster_support::{CLUSTERS, ClusterTrio, HUB, KUBECONFIG_KEY, kubeconfig_secret};
use crate::webhook_support::{TestTls, ValidatingWebhooks, WebhookReplica, eviction_webhook};
use crate::zpdb_support::{create_group_budget, evict_dry_run};

/// One cluster's eviction webhook.
pub struct ClusterWebhook {
    pub cluster: &'static str,
    /// Dropped before the replica: a configuration left calling a stopped replica would refuse
    /// every eviction in the cluster.
    _configuration: ValidatingWebhooks,
    pub replica: WebhookReplica,
}

/// The three clusters' eviction webhooks, each judging budgets over the pods of all three.
pub struct EvictionWebhooks {
    pub webhooks: Vec<ClusterWebhook>,
    _files: tempfile::TempDir,
}

/// The configuration of `own`'s webhook: the three members, `own` without a Secret.
pub fn webhook_config(namespace: &str, own: &str) -> String {
    let mut yaml = format!("namespace: {namespace}\nwebhook:\n  clusters:\n");
    for cluster in CLUSTERS {
        yaml.push_str(&format!("    - name: {cluster}\n"));
        if cluster != own {
            yaml.push_str(&format!(
                "      kubeconfig_secret: {}\n      kubeconfig_key: {KUBECONFIG_KEY}\n",
                kubeconfig_secret(cluster)
            ));
        }
    }
    yaml
}

impl EvictionWebhooks {
    /// Installs the budget CRD and a budget for `group` (one pod unavailable at most) in each
    /// cluster, hands each cluster the others' kubeconfig Secrets, starts a webhook replica per
    /// cluster and registers it; returns once each replica allows a dry-run eviction of the
    /// group's pod 0 in its cluster (every member listed).
    pub async fn start(trio: &ClusterTrio, group: &str) -> Self {
        let namespace = trio.namespace();
        let files = tempfile::tempdir().expect("a folder for the webhooks' configurations");
        let hub_secrets = Api::<Secret>::namespaced(trio.cluster(HUB).client(), namespace);
        let mut secrets = Vec::new();
        for cluster in CLUSTERS {
            let kubeconfig = if cluster == HUB {
                std::fs::read_to_string(trio.cluster(HUB).kubeconfig_path())
                    .expect("the hub's admin kubeconfig")
            } else {
                let secret = hub_secrets
                    .get(&kubeconfig_secret(cluster))
                    .await
                    .unwrap_or_else(|error| panic!("the hub's Secret of {cluster}: {error}"));
                let bytes = secret
                    .data
                    .and_then(|data| data.get(KUBECONFIG_KEY).cloned())
                    .unwrap_or_else(|| panic!("the hub's Secret of {cluster} has no kubeconfig"));
                String::from_utf8(bytes.0).expect("a UTF-8 kubeconfig")
            };
            secrets.push((cluster, kubeconfig));
        }
        let tls = TestTls::generate().expect("a test CA");
        let mut webhooks = Vec::new();
        for member in &trio.clusters {
            crate::crds::install(
                &member.client(),
                crate::crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
            )
            .await;
            create_group_budget(&member.client(), namespace, group).await;
            // (the hub has its members' Secrets: the controller's)
            let api = Api::<Secret>::namespaced(member.client(), namespace);
            for (cluster, kubeconfig) in &secrets {
                if *cluster == member.name || member.name == HUB {
                    continue;
                }
                let name = kubeconfig_secret(cluster);
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..ObjectMeta::default()
                    },
                    data: Some(
                        [(
                            KUBECONFIG_KEY.to_owned(),
                            ByteString(kubeconfig.clone().into_bytes()),
                        )]
                        .into(),
                    ),
                    ..Secret::default()
                };
                let mut applied = serde_json::to_value(&secret).expect("JSON");
                applied["apiVersion"] = json!("v1");
                applied["kind"] = json!("Secret");
                api.patch(
                    &name,
                    &PatchParams::apply("baton-e2e").force(),
                    &Patch::Apply(applied),
                )
                .await
                .unwrap_or_else(|error| panic!("writing {name} in {}: {error}", member.name));
            }
            let config: PathBuf = files.path().join(format!("{}.yaml", member.name));
            std::fs::write(&config, webhook_config(namespace, member.name))
                .expect("writing a webhook's configuration");
            let replica = WebhookReplica::start_with(
                &member.control_plane,
                &tls,
                namespace,
                &[("BATON_CONFIG", config.to_str().expect("a UTF-8 path"))],
            )
            .await
            .unwrap_or_else(|error| panic!("baton-webhook in {}: {error:#}", member.name));
            let configuration = ValidatingWebhooks::register(
                &member.control_plane,
                &format!("{namespace}-evictions-{group}"),
                json!([eviction_webhook(
                    "pod-eviction.baton.dev",
                    &tls,
                    &replica,
                    namespace
                )]),
            )
            .await;
            webhooks.push(ClusterWebhook {
                cluster: member.name,
                _configuration: configuration,
                replica,
            });
        }
        for member in &trio.clusters {
            let pod = format!("{group}-0");
            crate::wait_until(
                crate::controller_support::GROUP_TIMEOUT,
                &format!(
                    "{}'s webhook allows a dry-run eviction of {pod} (every member listed)",
                    member.name
                ),
                || async {
                    evict_dry_run(&member.client(), namespace, &pod)
                        .await
                        .is_ok()
                },
            )
            .await;
        }
        Self {
            webhooks,
            _files: files,
        }
    }

    /// What `cluster`'s webhook wrote so far.
    pub fn output(&self, cluster: &str) -> String {
        self.webhooks
            .iter()
            .find(|webhook| webhook.cluster == cluster)
            .map(|webhook| webhook.replica.process.output())
            .unwrap_or_default()
    }
}
