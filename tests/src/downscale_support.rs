//! prepare-downscale across member clusters on the [`ClusterTrio`]: a baton-webhook replica
//! per cluster, against its own control plane, told the three members (`webhook.clusters`)
//! in a YAML file (`BATON_CONFIG`), each other member by a kubeconfig Secret in its own
//! namespace (`peer-<member>`), written as docs/multi-cluster.md writes it: the page's
//! `kubectl baton cluster add --service-account baton-system/baton-peer`, a token of
//! deploy/member-cluster's least-privilege `baton-peer` (the hub given it by the page's two
//! `kubectl apply`). Reviews are sent to each replica as its API server would send them
//! ([`DownscaleWebhooks::ask`]), so that two clusters' webhooks can be asked at the same
//! instant. A member may be reached at a [`SilentServer`] instead, which takes connections and
//! never answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{Value, json};

use crate::cluster_support::{CLUSTERS, ClusterTrio, HUB};
use crate::wait_until;
use crate::webhook_support::{TestTls, WebhookReplica};

/// The Secret, in each cluster's namespace, holding `member`'s kubeconfig for its webhook.
pub fn downscale_secret(member: &str) -> String {
    format!("peer-{member}")
}

/// A listener that accepts TCP connections and never answers (not even a TLS handshake),
/// holding each open: a member whose API server hangs.
pub struct SilentServer {
    pub port: u16,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl SilentServer {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a listener on loopback");
        let port = listener.local_addr().expect("its address").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(connection);
            }
        });
        Self {
            port,
            accepted,
            task,
        }
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Secret of `member` for a webhook that reaches it at a [`SilentServer`]: its own name,
/// since the scenarios sharing the trio write [`downscale_secret`] meanwhile.
pub fn silent_secret(member: &str) -> String {
    format!("silent-peer-{member}")
}

/// The webhook's configuration in `own`: every member, the others by their Secret
/// (`secret_of`).
pub fn webhook_config(own: &str, secret_of: impl Fn(&str) -> String) -> String {
    let mut config = String::from("webhook:\n  clusters:\n");
    for member in CLUSTERS {
        config.push_str(&format!("    - name: {member}\n"));
        if member != own {
            config.push_str(&format!("      kubeconfig_secret: {}\n", secret_of(member)));
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
    /// The admission warnings (kubectl prints them).
    pub warnings: Vec<String>,
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
        Self::start_reaching(trio, None).await
    }

    /// As [`start`](Self::start), but the webhook of `silent.0` reaches the member `silent.1`
    /// at `https://127.0.0.1:<silent.2>` (its token and CA as the others'), with a connect
    /// timeout beyond its request's deadline.
    pub async fn start_reaching(trio: &ClusterTrio, silent: Option<(&str, &str, u16)>) -> Self {
        let tls = TestTls::generate().expect("a test CA");
        let files = tempfile::tempdir().expect("a folder for the webhooks' configurations");
        install_peer_in_hub(trio).await;
        let mut replicas = Vec::new();
        for own in CLUSTERS {
            let cluster = trio.cluster(own);
            let silent_here = |member: &str| {
                silent.filter(|(asking, asked, _)| *asking == own && *asked == member)
            };
            for member in CLUSTERS.into_iter().filter(|member| *member != own) {
                let server = silent_here(member).map(|(_, _, port)| port);
                add_peer(trio, member, own, server).await;
            }
            let secret_of = |member: &str| match silent_here(member) {
                Some(_) => silent_secret(member),
                None => downscale_secret(member),
            };
            let config = files.path().join(format!("{own}.yaml"));
            let mut text = webhook_config(own, secret_of);
            if silent.is_some_and(|(asking, _, _)| asking == own) {
                // A connection outliving the request's deadline, as one whose handshake
                // completed and whose server then hangs: the silent member's ask can only
                // end at the deadline, not at the connect timeout (5 s, within it).
                text.push_str("kubernetes:\n  connect_timeout: 60s\n");
            }
            std::fs::write(&config, text).expect("the webhook's configuration");
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
            warnings: response["warnings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|warning| warning.as_str().map(str::to_owned))
                .collect(),
        }
    }

    /// A client of `member` as `own`'s webhook reaches it: the kubeconfig of its Secret.
    pub async fn peer_client(trio: &ClusterTrio, own: &str, member: &str) -> kube::Client {
        let secret = Api::<Secret>::namespaced(trio.cluster(own).client(), trio.namespace())
            .get(&downscale_secret(member))
            .await
            .expect("the peer's Secret");
        let data = secret.data.expect("its data");
        let text = String::from_utf8(data["kubeconfig"].0.clone()).expect("UTF-8");
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).expect("a kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a client configuration");
        kube::Client::try_from(config).expect("a client")
    }
}

/// Gives the hub the peer identity with the page's two `kubectl apply` (the members have it
/// from the member overlay).
async fn install_peer_in_hub(trio: &ClusterTrio) {
    let kubeconfig = trio.cluster(HUB).kubeconfig_path().to_owned();
    let namespace = trio.namespace().to_owned();
    tokio::task::spawn_blocking(move || {
        crate::cluster_setup::install_peer(&kubeconfig, &namespace)
    })
    .await
    .expect("the install task")
    .unwrap_or_else(|error| panic!("the peer identity in the hub: {error:#}"));
}

/// Runs the page's `kubectl baton cluster add` giving `own`'s webhook a token of `member`'s
/// `baton-peer` (reached at a [`SilentServer`]'s `silent` port instead, unchecked, in the
/// Secret [`silent_secret`], when given).
async fn add_peer(trio: &ClusterTrio, member: &str, own: &str, silent: Option<u16>) {
    let page = crate::cluster_setup::read_docs();
    let mut args = crate::cluster_setup::peer_add_args(&page, member, own, trio.namespace())
        .unwrap_or_else(|error| panic!("{error:#}"));
    let mut secret = downscale_secret(member);
    if let Some(port) = silent {
        secret = silent_secret(member);
        let named = args
            .iter()
            .position(|arg| arg == "--secret")
            .expect("the page names the Secret");
        args[named + 1] = secret.clone();
        let server = format!("https://127.0.0.1:{port}");
        args.extend(["--server".to_owned(), server, "--no-check".to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = crate::plugin_support::kubectl_baton(&trio.clusters_kubeconfig(), &args).await;
    run.exited(0).says(&[&format!(
        "cluster {member}: Secret {}/{secret} (key kubeconfig) written in the cluster of context {own}",
        trio.namespace(),
    )]);
}
