//! baton installed as its users install it, on real nodes: the image `scripts/image.sh` builds,
//! pinned by digest in the overlay README's install section gives, applied with
//! `kubectl apply -k`; both binaries run as pods of `baton-system`, the API server calls the
//! webhooks through their Service (kube-proxy's rules), and baton issues and injects its own
//! certificate. Then what a user does with it, and what happens to it: a rollout, a downscale
//! and an eviction through that path; its leader killed, its node drained and baton upgraded,
//! each under a load of admissions that must all be answered.
//!
//! The install is cluster-wide (`baton-system`, the webhook configurations): one scenario at a
//! time per test process, each removing it before the next.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use baton_e2e::admission_load::{AdmissionLoad, Tally};
use baton_e2e::baton_image::{BatonImage, NEXT_REVISION};
use baton_e2e::control_plane::ControlPlane;
use baton_e2e::controller_support::{wait_group_ready, wait_rollout_complete};
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::install_docs::DocumentedInstall;
use baton_e2e::keys::{PREPARE_DOWNSCALE, PREPARE_DOWNSCALE_PATH, PREPARE_DOWNSCALE_PORT};
use baton_e2e::real_nodes::{
    APP_PORT, Behaviour, RealNodes, RealPodsFixture, Uncordon, app_calls, pod_ip, roll_out,
};
use baton_e2e::timeline::{Zone, check_rollout_guarantees};
use baton_e2e::webhook_support::scale;
use baton_e2e::zpdb_support::{budget, client_without_retries, zpdb_resource};
use baton_e2e::{PodEvent, PodSimulator, PodTransition, TestNamespace, wait_for, wait_until};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TIMEOUT: Duration = Duration::from_secs(180);
const SYSTEM: &str = "baton-system";
/// The overlay's extra patch for these nodes: they run no cluster DNS, so baton reaches pods
/// by IP (`pods.address_by`) where a cluster would resolve `<pod>.<service>.<namespace>.svc`.
const ADDRESS_PODS_BY_IP: &str = "  - target: {kind: Deployment}
    patch: |-
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: BATON_PODS__ADDRESS_BY, value: ip}}
";

/// One install at a time in this process.
static INSTALL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// baton installed as README's install section says, for the groups' namespace; removed
/// when dropped as `kubectl delete -k` would (waiting until `baton-system` is gone, so the next
/// scenario installs afresh, with kustomize or Helm), the CRDs aside: other scenarios' objects
/// of this process use them.
struct Installed {
    control_plane: &'static ControlPlane,
    /// The folder standing for the checkout README's install runs from.
    checkout: std::path::PathBuf,
    groups: String,
}

impl Installed {
    /// Writes README's overlay for `groups` with `image` (`repository@sha256:…`) and applies
    /// it as README says.
    fn apply(control_plane: &'static ControlPlane, groups: &str, image: &str) -> Self {
        let installed = Self {
            control_plane,
            checkout: std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("install-{groups}")),
            groups: groups.to_owned(),
        };
        installed.apply_image(image);
        installed
    }

    /// Sets `image` in the overlay and applies it again, as a user upgrades (or a GitOps tool
    /// re-applies): README's files written again, its `kubectl apply` run as written.
    fn apply_image(&self, image: &str) {
        self.documented(image).apply(self.control_plane);
    }

    /// README's install laid out for the groups' namespace and `image`.
    fn documented(&self, image: &str) -> DocumentedInstall {
        DocumentedInstall::lay_out(
            "README.md",
            &self.checkout,
            &self.groups,
            image,
            &[ADDRESS_PODS_BY_IP],
        )
    }

    fn kubectl(&self, args: &[&str]) -> (bool, String) {
        kubectl(self.control_plane, args)
    }

    /// kubectl on a blocking thread, for a command that lasts (a drain) while the test watches.
    fn kubectl_in_background(&self, args: &[&str]) -> tokio::task::JoinHandle<(bool, String)> {
        let control_plane = self.control_plane;
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl(control_plane, &args)
        })
    }
}

/// kubectl against the control plane: its success and output.
fn kubectl(control_plane: &ControlPlane, args: &[&str]) -> (bool, String) {
    baton_e2e::renders::run("kubectl", args, Some(control_plane))
}

impl Drop for Installed {
    fn drop(&mut self) {
        self.kubectl(&[
            "delete",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations,validatingadmissionpolicies,validatingadmissionpolicybindings,clusterroles,clusterrolebindings,priorityclasses",
            "-l",
            "app.kubernetes.io/part-of=baton",
            "--ignore-not-found",
        ]);
        self.kubectl(&[
            "delete",
            "namespace",
            SYSTEM,
            "--ignore-not-found",
            "--timeout=120s",
        ]);
    }
}

/// Waits until every replica of the Deployment `name` of baton-system runs its current
/// template and is Ready, and no other pod of it is left.
async fn wait_deployment_rolled_out(client: &kube::Client, name: &str) {
    let deployments = Api::<Deployment>::namespaced(client.clone(), SYSTEM);
    wait_until(TIMEOUT, &format!("{name} rolled out"), || async {
        let Some(deployment) = deployments.get_opt(name).await.ok().flatten() else {
            return false;
        };
        let wanted = deployment.spec.as_ref().and_then(|spec| spec.replicas);
        let generation = deployment.metadata.generation;
        deployment.status.is_some_and(|status| {
            status.observed_generation == generation
                && status.replicas == wanted
                && status.updated_replicas == wanted
                && status.ready_replicas == wanted
        })
    })
    .await;
}

/// Waits until the API server reaches the webhooks through their Service: the Deployments
/// may be Ready before kube-proxy has programmed the Service's new address (a call then
/// meets "connection refused"). Asks with a dry-run budget, which baton's validation judges.
async fn wait_webhooks_reachable(client: &kube::Client, namespace: &str) {
    let budgets =
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &zpdb_resource());
    let probe = budget(
        "reachable",
        json!({"maxUnavailable": 1, "selector": {"matchLabels": {"rollout-group": "reachable"}}}),
    );
    wait_until(
        TIMEOUT,
        "the webhooks answer through their Service",
        || async {
            match budgets
                .create(
                    &PostParams {
                        dry_run: true,
                        ..Default::default()
                    },
                    &probe,
                )
                .await
            {
                Ok(_) => true,
                Err(kube::Error::Api(status)) => !status.message.contains("failed calling webhook"),
                Err(_) => false,
            }
        },
    )
    .await;
}

/// baton-system's pods of `name` (`baton-controller` or `baton-webhook`).
async fn baton_pods(client: &kube::Client, name: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), SYSTEM)
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={name}")))
        .await
        .expect("listing baton's pods")
        .items
}

/// Who holds the controller's Lease (`<pod>-<suffix>`), if anyone.
async fn leader(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), SYSTEM)
        .get_opt("baton-controller")
        .await
        .ok()
        .flatten()
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
        .filter(|holder| !holder.is_empty())
}

/// The leader's pod, once there is one.
async fn leader_pod(client: &kube::Client) -> Pod {
    wait_for(TIMEOUT, "a controller leads", || async {
        let holder = leader(client).await?;
        baton_pods(client, "baton-controller")
            .await
            .into_iter()
            .find(|pod| {
                pod.metadata
                    .name
                    .as_deref()
                    .is_some_and(|name| holder.starts_with(&format!("{name}-")))
            })
    })
    .await
}

/// Waits until the Lease is held by another identity than `before`; who, and how long that
/// took from `since`.
async fn takeover(client: &kube::Client, before: &str, since: Instant) -> (String, Duration) {
    let holder = wait_for(TIMEOUT, "another controller leads", || async {
        leader(client).await.filter(|holder| holder != before)
    })
    .await;
    (holder, since.elapsed())
}

/// Prints what each of baton's running containers has used, as its node's cgroups count it,
/// and for how long it has run: the figures deploy/'s requests and limits come from.
async fn print_usage(client: &kube::Client, when: &str) {
    let nodes = RealNodes::shared().await;
    for name in ["baton-controller", "baton-webhook"] {
        for pod in baton_pods(client, name).await {
            let running_since = pod
                .status
                .as_ref()
                .and_then(|status| status.container_statuses.as_ref())
                .and_then(|statuses| statuses.first())
                .and_then(|status| status.state.as_ref()?.running.as_ref()?.started_at.clone());
            let seconds = running_since.map_or(0, |since| {
                jiff::Timestamp::now().as_second() - since.0.as_second()
            });
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            match nodes.container_usage(&pod, name) {
                Ok(usage) => eprintln!(
                    "{when}: {pod_name}: peak memory {:.1} MiB charged to its cgroup, {:.1} MiB \
                     resident, CPU {:.2}s in {seconds}s",
                    usage.peak_memory_bytes as f64 / (1 << 20) as f64,
                    usage.peak_rss_bytes as f64 / (1 << 20) as f64,
                    usage.cpu.as_secs_f64()
                ),
                Err(error) => eprintln!("{when}: {pod_name}: no usage: {error:#}"),
            }
        }
    }
}

/// The fewest Ready endpoints of the webhook's Service seen until stopped.
struct FewestReadyEndpoints {
    fewest: Arc<AtomicUsize>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl FewestReadyEndpoints {
    fn watch(client: &kube::Client) -> Self {
        let slices = Api::<EndpointSlice>::namespaced(client.clone(), SYSTEM);
        let fewest = Arc::new(AtomicUsize::new(usize::MAX));
        let stop = CancellationToken::new();
        let (seen, stopped) = (fewest.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(100));
            while !stopped.is_cancelled() {
                ticks.tick().await;
                let Ok(list) = slices
                    .list(&ListParams::default().labels("kubernetes.io/service-name=baton-webhook"))
                    .await
                else {
                    continue;
                };
                let ready = list
                    .items
                    .iter()
                    .flat_map(|slice| &slice.endpoints)
                    .filter(|endpoint| {
                        endpoint
                            .conditions
                            .as_ref()
                            .and_then(|conditions| conditions.ready)
                            == Some(true)
                    })
                    .count();
                seen.fetch_min(ready, Ordering::Relaxed);
            }
        });
        Self { fewest, stop, task }
    }

    async fn stop(self) -> usize {
        self.stop.cancel();
        self.task.await.unwrap();
        self.fewest.load(Ordering::Relaxed)
    }
}

/// The sum of the API server's `metric` samples about baton's webhooks whose labels contain
/// one of `any_of` (every sample of baton's when empty), from its metrics.
async fn api_server_webhook_metric(client: &kube::Client, metric: &str, any_of: &[&str]) -> u64 {
    let metrics = client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .expect("the API server's metrics");
    metrics
        .lines()
        .filter(|line| {
            line.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{'))
                && line.contains("baton.grafana.com")
                && (any_of.is_empty() || any_of.iter().any(|label| line.contains(label)))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The API server's own count of calls to baton's webhooks that failed (it could not reach
/// one, or no answer came in time).
async fn api_server_webhook_failures(client: &kube::Client) -> u64 {
    api_server_webhook_metric(
        client,
        "apiserver_admission_webhook_rejection_count",
        &[
            "error_type=\"calling_webhook_error\"",
            "error_type=\"apiserver_internal_error\"",
        ],
    )
    .await
}

/// The API server's count of its calls to baton's webhooks, whatever their outcome.
async fn api_server_webhook_calls(client: &kube::Client) -> u64 {
    api_server_webhook_metric(client, "apiserver_admission_webhook_request_total", &[]).await
}

/// How many times each pod of `statefulsets` was deleted (went Terminating) from `from` on.
fn deletions(
    timeline: &[PodTransition],
    statefulsets: &[String],
    from: Instant,
) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for transition in timeline {
        if transition.at >= from
            && transition.event == PodEvent::Terminating
            && transition
                .statefulset
                .as_ref()
                .is_some_and(|name| statefulsets.contains(name))
        {
            *counts.entry(transition.pod.clone()).or_default() += 1;
        }
    }
    counts
}

/// A group of 3 zones × 2 real pods (`ingester`), pods labelled with it and taking `stop` to
/// stop, a zone-aware budget of `budget_unavailable` per zone; returns its StatefulSets once
/// Ready.
async fn create_group(
    client: &kube::Client,
    namespace: &str,
    stop: Duration,
    budget_unavailable: i32,
) -> Vec<String> {
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &zpdb_resource())
        .create(
            &PostParams::default(),
            &budget(
                "ingester",
                json!({"maxUnavailable": budget_unavailable, "selector": {"matchLabels": {"rollout-group": "ingester"}}}),
            ),
        )
        .await
        .expect("creating the group's budget");
    let mut names = Vec::new();
    for zone in ["a", "b", "c"] {
        let fixture = RealPodsFixture::new(
            StatefulSetFixture::new(&format!("ingester-zone-{zone}"))
                .group("ingester")
                .pod_label("rollout-group", "ingester")
                .replicas(2),
            zone,
        )
        .stop_delay(stop);
        let created = fixture.create(client, namespace).await;
        names.push(created.metadata.name.unwrap_or_default());
    }
    wait_group_ready(client, namespace, &names).await;
    names
}

/// Waits until the group's rollout that began at `from` completes, then checks it kept the
/// zone-by-zone guarantees (max-unavailable 1) and deleted each of its 6 pods exactly once,
/// whatever happened to baton on the way (`across`).
async fn wait_completed_once(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
    observer: &PodSimulator,
    from: Instant,
    across: &str,
) {
    wait_rollout_complete(client, namespace, names).await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    check_rollout_guarantees(&observer.timeline(), &zones, from).unwrap();
    let counts = deletions(&observer.timeline(), names, from);
    assert!(
        counts.len() == 6 && counts.values().all(|count| *count == 1),
        "pods deleted by the rollout across {across}: {counts:?}"
    );
}

/// Checks that every pod of both Deployments runs `image`, by digest.
async fn assert_every_pod_runs(client: &kube::Client, image: &BatonImage) {
    for name in ["baton-controller", "baton-webhook"] {
        for pod in baton_pods(client, name).await {
            let running = pod.spec.as_ref().unwrap().containers[0].image.clone();
            assert_eq!(running.as_deref(), Some(image.by_digest().as_str()));
        }
    }
}

/// Waits until a pod of the group has been deleted from `from` on: the rollout is in flight.
async fn wait_in_flight(observer: &PodSimulator, names: &[String], from: Instant) {
    wait_until(TIMEOUT, "the rollout is in flight", || async {
        !deletions(&observer.timeline(), names, from).is_empty()
    })
    .await;
}

/// The groups' namespace on the real nodes, and baton installed for it from its image.
async fn install(prefix: &str) -> (TestNamespace, Installed) {
    let image = BatonImage::get();
    let (control_plane, groups) = baton_e2e::real_nodes::namespace_on_real_nodes(prefix).await;
    let installed = Installed::apply(control_plane, groups.name(), &image.by_digest());
    // Then README's waits, as a user runs them (bounded here), see both Deployments rolled out
    for mut wait in installed.documented(&image.by_digest()).waits() {
        wait.push("--timeout=180s".to_owned());
        let wait: Vec<&str> = wait.iter().map(String::as_str).collect();
        let (ok, output) = installed.kubectl_in_background(&wait).await.unwrap();
        assert!(
            ok,
            "README's `kubectl {}` failed:\n{output}",
            wait.join(" ")
        );
    }
    // and what the API server holds is what the overlay set: the image, and the groups'
    // namespace wherever baton names it
    let documented = installed.documented(&image.by_digest());
    for overlay in documented.applied_kustomizations() {
        let (ok, live) =
            documented.kubectl(Some(control_plane), &["get", "-k", overlay, "-o", "json"]);
        assert!(ok, "kubectl get -k {overlay}:\n{live}");
        let live: serde_json::Value = serde_json::from_str(&live).unwrap();
        baton_e2e::install_docs::assert_installed_as_set(
            live["items"].as_array().expect("a List"),
            groups.name(),
            &image.by_digest(),
        );
    }
    (groups, installed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_applied_with_kubectl_runs_on_the_real_nodes_and_the_api_server_calls_its_webhooks()
{
    let _alone = INSTALL.lock().await;
    // Given the real nodes (all three: the webhook's replicas each need one of their own),
    // baton's image on them, and a namespace of groups; when README's overlay for it is
    // applied, the image pinned by digest
    let started = Instant::now();
    let (groups, installed) = install("install").await;
    let client = groups.client();

    // Then both controllers and the three webhook replicas run on the nodes and are Ready
    wait_deployment_rolled_out(&client, "baton-controller").await;
    wait_deployment_rolled_out(&client, "baton-webhook").await;
    wait_webhooks_reachable(&client, groups.name()).await;
    eprintln!(
        "baton installed and Ready on the real nodes in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    // with the certificate baton issued itself, its CA injected into every webhook
    // configuration
    let secret = Api::<Secret>::namespaced(client.clone(), SYSTEM)
        .get("baton-webhook-tls")
        .await
        .expect("baton issued baton-webhook-tls");
    let ca = secret
        .data
        .as_ref()
        .and_then(|data| data.get("ca.crt"))
        .expect("the Secret holds its CA")
        .0
        .clone();
    let configurations = Api::<
        k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    >::all(client.clone());
    let no_downscale = configurations.get("baton-no-downscale").await.unwrap();
    let injected = no_downscale.webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .as_ref()
        .map(|bundle| bundle.0.clone());
    assert_eq!(injected, Some(ca), "baton-no-downscale's caBundle");

    // And the API server calls the webhook through its Service: a labelled StatefulSet's
    // downscale is refused with baton's answer
    let fixture = RealPodsFixture::new(
        StatefulSetFixture::new("guarded")
            .label(baton_e2e::keys::NO_DOWNSCALE, "true")
            .replicas(1),
        "a",
    );
    fixture.create(&client, groups.name()).await;
    wait_group_ready(&client, groups.name(), &["guarded".to_owned()]).await;
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), groups.name());
    let refused = scale(&statefulsets, "guarded", 0, false)
        .await
        .expect_err("the downscale of a no-downscale StatefulSet is refused");
    assert!(
        refused.contains("no-downscale.baton.grafana.com")
            && refused.contains(
                "is not allowed because it has the label 'grafana.com/no-downscale=true'"
            ),
        "{refused}"
    );

    // And a downscale of a group opted in to prepare-downscale: the webhook in its pod tells
    // the real pod going away, over its IP, exactly once, and not the pods staying
    for (zone, replicas) in [("a", 2), ("b", 1)] {
        RealPodsFixture::new(
            StatefulSetFixture::new(&format!("prepared-zone-{zone}"))
                .group("prepared")
                .replicas(replicas)
                .label(PREPARE_DOWNSCALE, "true")
                .annotation(PREPARE_DOWNSCALE_PATH, "ingester/prepare-shutdown")
                .annotation(PREPARE_DOWNSCALE_PORT, &APP_PORT.to_string()),
            zone,
        )
        .create(&client, groups.name())
        .await;
    }
    let prepared = ["prepared-zone-a".to_owned(), "prepared-zone-b".to_owned()];
    wait_group_ready(&client, groups.name(), &prepared).await;
    let mut ips = Vec::new();
    for ordinal in 0..2 {
        let pod = format!("prepared-zone-a-{ordinal}");
        ips.push(
            pod_ip(&client, groups.name(), &pod)
                .await
                .expect("a pod IP"),
        );
    }
    scale(&statefulsets, "prepared-zone-a", 1, false)
        .await
        .expect("the downscale of a prepared group is allowed");
    let (going, staying) = (
        app_calls(ips[1]).await.unwrap(),
        app_calls(ips[0]).await.unwrap(),
    );
    assert_eq!(
        going.count("POST", "/ingester/prepare-shutdown"),
        1,
        "{going:?}"
    );
    assert_eq!(
        staying.count("POST", "/ingester/prepare-shutdown"),
        0,
        "{staying:?}"
    );

    // And the controller in its pod rolls a real-pods group out zone by zone: every zone
    // completes, never two zones or two pods of a zone down at once. Its pods take 3s to stop,
    // and a zone-aware budget allows one of them unavailable.
    let observer = PodSimulator::observe(client.clone(), groups.name());
    let names = create_group(&client, groups.name(), Duration::from_secs(3), 1).await;
    let from = Instant::now();
    roll_out(&client, groups.name(), &names, "v2", Behaviour::Healthy).await;
    wait_rollout_complete(&client, groups.name(), &names).await;
    eprintln!(
        "a 3 zones x 2 real pods rollout through the installed baton took {:.1}s",
        from.elapsed().as_secs_f64()
    );
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    check_rollout_guarantees(&observer.timeline(), &zones, from).unwrap();

    // And evictions go through the API server to the eviction webhook behind the Service: one
    // pod of zone a may go, and while it is still stopping, a pod of zone b may not
    let pods = Api::<Pod>::namespaced(client.clone(), groups.name());
    pods.evict("ingester-zone-a-0", &Default::default())
        .await
        .expect("evicting a pod of a healthy group");
    // Without kube's retries, which would retry the refusal (429) until zone a's pod is back.
    let refusal = pods_without_retries(installed.control_plane, groups.name())
        .await
        .evict("ingester-zone-b-0", &Default::default())
        .await
        .expect_err("a second zone's eviction while zone a's pod stops was allowed");
    let refusal = refusal.to_string();
    assert!(
        refusal.contains("pod-eviction.baton.grafana.com")
            && refusal.contains("allows evictions in one zone at a time"),
        "{refusal}"
    );
}

async fn pods_without_retries(control_plane: &ControlPlane, namespace: &str) -> Api<Pod> {
    Api::namespaced(client_without_retries(control_plane).await, namespace)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_survives_its_node_drained_its_leader_killed_and_its_own_upgrade_without_a_failed_admission()
 {
    let _alone = INSTALL.lock().await;
    // Given baton installed from its image, Ready, and a group of 3 zones × 2 real pods taking
    // 5s to stop, with a zone-aware budget of 2 per zone (a drained zone's two pods may go)
    let (groups, installed) = install("survives").await;
    let (client, namespace) = (groups.client(), groups.name().to_owned());
    wait_deployment_rolled_out(&client, "baton-controller").await;
    wait_deployment_rolled_out(&client, "baton-webhook").await;
    wait_webhooks_reachable(&client, &namespace).await;
    let first_leader = leader_pod(&client).await;
    let drained_node = first_leader
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.clone())
        .expect("the leader runs on a node");
    let observer = PodSimulator::observe(client.clone(), &namespace);
    let names = create_group(&client, &namespace, Duration::from_secs(5), 2).await;
    // and a load of admissions running throughout, about a StatefulSet and a pod of a zone
    // whose node is not drained
    let zone = ["a", "b", "c"]
        .into_iter()
        .find(|zone| !drained_node.ends_with(&format!("-{zone}")))
        .unwrap();
    RealPodsFixture::new(
        StatefulSetFixture::new("guarded")
            .label(baton_e2e::keys::NO_DOWNSCALE, "true")
            .replicas(1),
        zone,
    )
    .create(&client, &namespace)
    .await;
    wait_group_ready(&client, &namespace, &["guarded".to_owned()]).await;
    let failures_before = api_server_webhook_failures(&client).await;
    let calls_before = api_server_webhook_calls(&client).await;
    let load = AdmissionLoad::start(
        client_without_retries(installed.control_plane).await,
        &namespace,
        "guarded",
        "guarded-0",
    );
    let mut phases: Vec<(&str, Tally)> = Vec::new();
    let mut mark = load.tally();

    // When the node of the leader (and of a webhook replica) is drained, with everything on
    // it: the group's pods of that zone, the leader, the webhook replica
    let leader_before = leader(&client).await.unwrap();
    let fewest = FewestReadyEndpoints::watch(&client);
    let _uncordon = Uncordon {
        node: drained_node.clone(),
        kubeconfig: installed.control_plane.kubeconfig_path().to_path_buf(),
    };
    let drain_started = Instant::now();
    let standby = tokio::spawn({
        let client = client.clone();
        async move { takeover(&client, &leader_before, drain_started).await }
    });
    let drain = installed.kubectl_in_background(&[
        "drain",
        &drained_node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=180s",
    ]);
    let (drained, output) = drain.await.unwrap();
    // Then it completes, a standby leads, and the webhook's budget kept two replicas answering
    assert!(drained, "kubectl drain failed:\n{output}");
    let drain_took = drain_started.elapsed();
    let (_, drain_takeover) = standby.await.unwrap();
    let fewest_during_drain = fewest.stop().await;
    assert!(
        fewest_during_drain >= 2,
        "{fewest_during_drain} webhook replicas were Ready during the drain"
    );
    let (uncordoned, output) = installed.kubectl(&["uncordon", &drained_node]);
    assert!(uncordoned, "{output}");
    wait_deployment_rolled_out(&client, "baton-webhook").await;
    wait_group_ready(&client, &namespace, &names).await;
    let now = load.tally();
    phases.push(("drain", now.since(&mark)));
    mark = now;

    // When a rollout is in flight and the leader's container is killed (SIGKILL: nothing
    // released, as a crash or the OOM killer ends it)
    let rollout_from = Instant::now();
    roll_out(&client, &namespace, &names, "v2", Behaviour::Healthy).await;
    wait_in_flight(&observer, &names, rollout_from).await;
    let leader_before = leader(&client).await.unwrap();
    let killed = leader_pod(&client).await;
    let kill_started = Instant::now();
    RealNodes::shared()
        .await
        .kill_container(&killed, "baton-controller")
        .expect("killing the leader");
    // Then another identity leads (the standby, or the restarted container), the rollout
    // completes keeping the guarantees, and no pod was deleted twice
    let (new_leader, kill_takeover) = takeover(&client, &leader_before, kill_started).await;
    wait_completed_once(
        &client,
        &namespace,
        &names,
        &observer,
        rollout_from,
        "the crash",
    )
    .await;
    print_usage(&client, "after the drain, a crash and a rollout").await;
    let now = load.tally();
    phases.push(("leader killed", now.since(&mark)));
    mark = now;

    // When another rollout is in flight and baton is upgraded to its next image by applying
    // the overlay with the new digest
    let next = BatonImage::get()
        .next(NEXT_REVISION)
        .expect("the next image");
    let rollout_from = Instant::now();
    roll_out(&client, &namespace, &names, "v3", Behaviour::Healthy).await;
    wait_in_flight(&observer, &names, rollout_from).await;
    let fewest = FewestReadyEndpoints::watch(&client);
    let upgrade_started = Instant::now();
    installed.apply_image(&next.by_digest());
    // Then every pod of both Deployments runs the next image
    wait_deployment_rolled_out(&client, "baton-webhook").await;
    wait_deployment_rolled_out(&client, "baton-controller").await;
    let upgrade_took = upgrade_started.elapsed();
    assert_every_pod_runs(&client, &next).await;
    let fewest_during_upgrade = fewest.stop().await;
    assert!(
        fewest_during_upgrade >= 2,
        "{fewest_during_upgrade} webhook replicas were Ready during the upgrade"
    );
    // and the rollout completes, keeping the guarantees, each pod deleted once
    wait_completed_once(
        &client,
        &namespace,
        &names,
        &observer,
        rollout_from,
        "the upgrade",
    )
    .await;
    print_usage(&client, "after the upgrade and a rollout").await;
    let now = load.tally();
    phases.push(("upgrade", now.since(&mark)));

    // And throughout, every admission was answered by baton: none failed, as the load saw it
    // and as the API server counted its calls
    let total = load.stop().await;
    let failures_after = api_server_webhook_failures(&client).await;
    // (the count read is the API server's calls to baton: every answered request was one)
    let calls = api_server_webhook_calls(&client).await - calls_before;
    assert!(
        calls >= total.answered,
        "the API server counted {calls} calls to baton's webhooks for {} answered requests",
        total.answered
    );
    for (phase, tally) in &phases {
        eprintln!(
            "{phase}: {} admissions answered, {} failed",
            tally.answered,
            tally.failed.len()
        );
        assert!(
            tally.answered > 0,
            "the load asked nothing during the {phase}"
        );
    }
    eprintln!(
        "drain: {:.1}s, a standby led {:.2}s after the drain began (the evicted leader released \
         its Lease), fewest Ready webhook endpoints {fewest_during_drain}",
        drain_took.as_secs_f64(),
        drain_takeover.as_secs_f64()
    );
    eprintln!(
        "leader killed: {new_leader} led {:.2}s after SIGKILL",
        kill_takeover.as_secs_f64()
    );
    eprintln!(
        "upgrade: both Deployments on the next image in {:.1}s, fewest Ready webhook endpoints \
         {fewest_during_upgrade}",
        upgrade_took.as_secs_f64()
    );
    assert!(
        total.failed.is_empty(),
        "failed admissions: {:?}",
        total.failed
    );
    assert_eq!(
        failures_after - failures_before,
        0,
        "the API server counted failed calls to baton's webhooks"
    );
}

/// baton installed by `helm install` of charts/baton into `baton-system`; uninstalled when
/// dropped, the namespace removed (waiting until it is gone).
struct HelmRelease {
    control_plane: &'static ControlPlane,
}

impl HelmRelease {
    fn helm(&self, args: &[&str]) -> (bool, String) {
        baton_e2e::renders::run("helm", args, Some(self.control_plane))
    }

    /// `helm <verb>` (install or upgrade) of the chart for `groups` with `image`'s digest.
    fn install_or_upgrade(&self, verb: &str, groups: &str, image: &BatonImage) {
        let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/baton");
        let (ok, output) = self.helm(&[
            verb,
            "baton",
            chart.to_str().unwrap(),
            "--namespace",
            SYSTEM,
            "--create-namespace",
            "--set",
            &format!("groupsNamespace={groups}"),
            "--set",
            &format!("image.digest={}", image.digest),
        ]);
        assert!(ok, "helm {verb} failed:\n{output}");
    }
}

impl Drop for HelmRelease {
    fn drop(&mut self) {
        self.helm(&["uninstall", "baton", "--namespace", SYSTEM, "--wait"]);
        kubectl(
            self.control_plane,
            &[
                "delete",
                "namespace",
                SYSTEM,
                "--ignore-not-found",
                "--timeout=120s",
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_baton_on_the_real_nodes_and_upgrades_it_without_a_failed_admission() {
    let _alone = INSTALL.lock().await;
    // Given the real nodes with baton's image, and a namespace of groups
    let image = BatonImage::get();
    let (control_plane, groups) = baton_e2e::real_nodes::namespace_on_real_nodes("helm").await;
    let client = groups.client();

    // When baton is installed with helm, its image pinned by digest
    let started = Instant::now();
    let release = HelmRelease { control_plane };
    release.install_or_upgrade("install", groups.name(), image);

    // Then both Deployments run on the nodes and are Ready, and the API server calls the
    // webhooks through the Service with the CA baton injected: a no-downscale StatefulSet's
    // downscale is refused, and a pod no budget covers may be evicted (dry run)
    wait_deployment_rolled_out(&client, "baton-controller").await;
    wait_deployment_rolled_out(&client, "baton-webhook").await;
    wait_webhooks_reachable(&client, groups.name()).await;
    eprintln!(
        "helm: baton installed and Ready on the real nodes in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    RealPodsFixture::new(
        StatefulSetFixture::new("guarded")
            .label(baton_e2e::keys::NO_DOWNSCALE, "true")
            .replicas(1),
        "a",
    )
    .create(&client, groups.name())
    .await;
    wait_group_ready(&client, groups.name(), &["guarded".to_owned()]).await;
    let load = AdmissionLoad::start(
        client_without_retries(control_plane).await,
        groups.name(),
        "guarded",
        "guarded-0",
    );
    wait_until(TIMEOUT, "the webhooks answer", || async {
        load.tally().answered >= 2
    })
    .await;
    let before_upgrade = load.tally();
    assert!(
        before_upgrade.failed.is_empty(),
        "{:?}",
        before_upgrade.failed
    );

    // When the release is upgraded to the next image while the load runs
    let next = image.next(NEXT_REVISION).expect("the next image");
    let upgrade_started = Instant::now();
    release.install_or_upgrade("upgrade", groups.name(), &next);
    wait_deployment_rolled_out(&client, "baton-webhook").await;
    wait_deployment_rolled_out(&client, "baton-controller").await;
    let upgrade_took = upgrade_started.elapsed();

    // Then every pod runs the next image and no admission failed
    assert_every_pod_runs(&client, &next).await;
    let during = load.stop().await.since(&before_upgrade);
    eprintln!(
        "helm upgrade: both Deployments on the next image in {:.1}s; {} admissions answered, {} failed",
        upgrade_took.as_secs_f64(),
        during.answered,
        during.failed.len()
    );
    assert!(during.answered > 0, "the load asked nothing");
    assert!(
        during.failed.is_empty(),
        "failed admissions: {:?}",
        during.failed
    );
}
