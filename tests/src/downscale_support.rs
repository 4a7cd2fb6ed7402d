//! prepare-downscale across member clusters on the [`ClusterTrio`]: a baton-webhook replica
//! per cluster, against its own control plane, told the three members (`webhook.clusters`)
//! in a YAML file (`BATON_CONFIG`), each other member by a kubeconfig Secret in its own
//! namespace (`downscale-<member>`, holding that member's kubeconfig). Reviews are sent to each
//! replica as its API server would send them ([`DownscaleWebhooks::ask`]), so that two
//! clusters' webhooks can be asked at the same instant.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::cluster_support::{CLUSTERS, ClusterTrio};
use crate::wait_until;
use crate::webhook_support::{TestTls, WebhookReplica};

/// The Secret, in each cluster's namespace, holding `member`'s kubeconfig for its webhook.
pub fn downscale_secret(member: &str) -> String {
    format!("downscale-{member}")
}

/// The webhook's configuration in `own`: every member, the others by their Secret.
pub fn webhook_config(own: &str) -> String {
    let mut config = String::from("webhook:\n  clusters:\n");
    for member in CLUSTERS {
        config.push_str(&format!("    - name: {member}\n"));
        if member != own {
            config.push_str(&format!(
                "      kubeconfig_secret: {}\n",
                downscale_secret(member)
            ));
        }
    }
    config
}

/// What a webhook answered a review.
#[derive(Debug, Clone)]
pub struct Answer {
    pub allowed: bool,
    /// The HTTP code of a refusal (429: retry later).
    pub code: Option<u64>,
    pub message: String,
}

/// The three webhooks, in [`CLUSTERS`] order.
pub struct DownscaleWebhooks {
    tls: TestTls,
    replicas: Vec<(&'static str, WebhookReplica)>,
    /// Each cluster's StatefulSets in the trio's namespace.
    statefulsets: Vec<Api<StatefulSet>>,
    _files: tempfile::TempDir,
}

impl DownscaleWebhooks {
    /// Writes each cluster's Secrets of the other members, starts a replica per cluster and
    /// returns once each has connected to both other members.
    pub async fn start(trio: &ClusterTrio) -> Self {
        let tls = TestTls::generate().expect("a test CA");
        let files = tempfile::tempdir().expect("a folder for the webhooks' configurations");
        let mut replicas = Vec::new();
        for own in CLUSTERS {
            let cluster = trio.cluster(own);
            let secrets = Api::<Secret>::namespaced(cluster.client(), trio.namespace());
            for member in CLUSTERS.into_iter().filter(|member| *member != own) {
                let kubeconfig = std::fs::read(trio.cluster(member).kubeconfig_path())
                    .expect("the member's kubeconfig");
                let secret: Secret = serde_json::from_value(json!({
                    "metadata": {"name": downscale_secret(member)},
                    "data": {"kubeconfig": base64_of(&kubeconfig)},
                }))
                .expect("a Secret");
                match secrets.create(&PostParams::default(), &secret).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(error) => panic!("creating the Secret of {member} in {own}: {error}"),
                }
            }
            let config = files.path().join(format!("{own}.yaml"));
            std::fs::write(&config, webhook_config(own)).expect("the webhook's configuration");
            let config = config.to_string_lossy().into_owned();
            let replica = WebhookReplica::start_with(
                &cluster.control_plane,
                &tls,
                trio.namespace(),
                &[("BATON_CONFIG", config.as_str())],
            )
            .await
            .unwrap_or_else(|error| panic!("baton-webhook starts in {own}: {error:#}"));
            replicas.push((own, replica));
        }
        let statefulsets = CLUSTERS
            .iter()
            .map(|cluster| Api::namespaced(trio.cluster(cluster).client(), trio.namespace()))
            .collect();
        let webhooks = Self {
            tls,
            replicas,
            statefulsets,
            _files: files,
        };
        for (own, replica) in &webhooks.replicas {
            wait_until(
                Duration::from_secs(60),
                &format!("{own}'s webhook connected to the two other members"),
                || async {
                    replica
                        .process
                        .output()
                        .matches("connected to member cluster")
                        .count()
                        >= 2
                },
            )
            .await;
        }
        webhooks
    }

    /// The replica in `cluster`.
    pub fn replica(&self, cluster: &str) -> &WebhookReplica {
        &self
            .replicas
            .iter()
            .find(|(name, _)| *name == cluster)
            .expect("a member cluster")
            .1
    }

    /// Every replica's output, for a failing scenario's message.
    pub fn outputs(&self) -> String {
        self.replicas
            .iter()
            .map(|(cluster, replica)| {
                format!("--- {cluster}'s webhook\n{}", replica.process.output())
            })
            .collect()
    }

    /// Asks `cluster`'s webhook about the downscale of its StatefulSet `name`, as stored now,
    /// to `to` replicas, under the review `uid`, as its API server would.
    pub async fn ask(&self, cluster: &str, name: &str, to: i32, uid: &str) -> Answer {
        let index = CLUSTERS
            .iter()
            .position(|member| *member == cluster)
            .expect("a member cluster");
        let stored = self.statefulsets[index]
            .get(name)
            .await
            .expect("the StatefulSet as stored");
        let stored = serde_json::to_value(&stored).expect("a StatefulSet as JSON");
        let mut review = crate::reviews::update_review(
            "admission.k8s.io/v1",
            &stored,
            Some(i64::from(to)),
            false,
        );
        review["request"]["uid"] = json!(uid);
        let answer: Value = self
            .tls
            .client()
            .expect("a client of the test CA")
            .post(self.replica(cluster).url("/admission/prepare-downscale"))
            .json(&review)
            .send()
            .await
            .expect("the webhook answers")
            .json()
            .await
            .expect("an AdmissionReview");
        let response = &answer["response"];
        Answer {
            allowed: response["allowed"].as_bool().expect("allowed"),
            code: response["status"]["code"].as_u64(),
            message: response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        }
    }
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
