//! The demo across three clusters (`scripts/demo.sh --clusters 3`): three local control planes,
//! `cluster-a` (the hub, where baton-controller runs), `cluster-b` and `cluster-c`, each set up
//! as docs/multi-cluster.md sets up a member, and one rollout group whose zones are whole
//! clusters: the StatefulSet `ingester` in each, named `cluster-a/ingester`… by baton.
//!
//! The controller runs from the start (the hub lists its members before anything rolls), so the
//! group is paused across the clusters before the new version is deployed, followed with
//! `kubectl baton wait --cluster …`, and then resumed: the reader sees the first cluster roll
//! from its first pod, and learns the commands a Fleet user runs across clusters.

use anyhow::Context;
use baton_e2e::cluster_support::{CLUSTERS, ClusterTrio, Group};
use baton_e2e::process::workspace_binary;

use super::{Follower, Interrupt, SOAK_ANNOTATION, SOAK_SECONDS, show};

const GROUP: &str = "ingester";
const REPLICAS: u32 = 5;

pub async fn three_clusters(interrupt: &mut Interrupt) -> anyhow::Result<()> {
    println!(
        "Starting three local Kubernetes control planes (cluster-a, the hub, where \
         baton-controller runs; cluster-b and cluster-c, its members), each with the pod \
         simulator, and baton-controller in cluster-a told its members by kubeconfig Secrets \
         (the steps of docs/multi-cluster.md)…"
    );
    let Some(mut trio) = interrupt
        .during(ClusterTrio::start("baton-demo", &[]))
        .await
    else {
        println!("\nStopping the three control planes…");
        return Ok(());
    };
    let namespace = trio.namespace().to_owned();
    let kubeconfig = trio.clusters_kubeconfig().display().to_string();
    let log = trio.controller.process.keep_log().display().to_string();
    let address = trio.controller.ops_address.clone();
    let plugin = workspace_binary("kubectl-baton").context("building kubectl-baton")?;
    let across: Vec<String> = CLUSTERS
        .iter()
        .flat_map(|cluster| ["--cluster".to_owned(), (*cluster).to_owned()])
        .collect();
    let baton = |command: &[&str]| -> Vec<String> {
        command
            .iter()
            .map(|word| (*word).to_owned())
            .chain(["-n".to_owned(), namespace.clone()])
            .chain(across.iter().cloned())
            .collect()
    };
    println!(
        "  (kubectl works now, a context per cluster: export KUBECONFIG={kubeconfig})\n\
         baton-controller's log: {log} (kept after the demo stops); its status page: \
         http://{address}/ui/status (JSON at /api/v1/status)"
    );

    println!(
        "Creating rollout group `{GROUP}` in namespace {namespace}: the StatefulSet {GROUP} in \
         each cluster, {REPLICAS} pods, OnDelete, max-unavailable 1 (cluster-c: 2), a \
         {SOAK_SECONDS}s soak before every cluster after the first (baton.dev/soak)…"
    );
    // What follows, until the rollout is followed and resumed, is stopped by Ctrl-C as well.
    let follow = async {
        let group = Group::new(GROUP, REPLICAS, 1);
        trio.create_group(&group, |cluster, fixture| match cluster {
            "cluster-a" => fixture.annotation(SOAK_ANNOTATION, &format!("{SOAK_SECONDS}s")),
            "cluster-c" => fixture.annotation("rollout-max-unavailable", "2"),
            _ => fixture,
        })
        .await;
        println!(
            "All clusters are ready. Pausing the group across them, so that nothing moves before \
             the rollout is followed:\n  kubectl baton {}",
            baton(&["pause", GROUP]).join(" ")
        );
        show(&plugin, &kubeconfig, &as_str(&baton(&["pause", GROUP]))).await?;
        println!("Deploying version v2 to every cluster…");
        trio.roll_out(&group, "v2").await;

        let wait = baton(&["wait", GROUP, "--timeout", "10m"]);
        println!(
            "\nFollowing the rollout as a pipeline would: kubectl baton {}\n",
            wait.join(" ")
        );
        let mut follower = Follower::start(&plugin, &kubeconfig, &as_str(&wait))?;
        follower.first_line().await;
        println!(
            "\nResuming it: kubectl baton {}",
            baton(&["resume", GROUP]).join(" ")
        );
        show(&plugin, &kubeconfig, &as_str(&baton(&["resume", GROUP]))).await?;
        anyhow::Ok(follower)
    };
    let followed = match interrupt.during(follow).await {
        Some(follower) => Some(follower?),
        None => None,
    };
    if let Some(mut follower) = followed
        && let Some(status) = interrupt.during(follower.finished()).await
    {
        if status.context("waiting for kubectl-baton wait")?.success() {
            show(&plugin, &kubeconfig, &as_str(&baton(&["status", GROUP]))).await?;
            println!(
                "{}",
                instructions(
                    &kubeconfig,
                    &plugin.display().to_string(),
                    &namespace,
                    &address,
                    &log
                )
            );
        } else {
            println!("\nthe rollout did not complete. baton-controller's log: {log}");
        }
        interrupt.received().await;
    }
    println!("\nStopping baton-controller and the three control planes…");
    drop(trio);
    println!("baton-controller's log is kept: {log}");
    Ok(())
}

fn as_str(words: &[String]) -> Vec<&str> {
    words.iter().map(String::as_str).collect()
}

fn instructions(
    kubeconfig: &str,
    plugin: &str,
    namespace: &str,
    address: &str,
    log: &str,
) -> String {
    let across = "--cluster cluster-a --cluster cluster-b --cluster cluster-c";
    format!(
        "\nThe rollout is complete. Poke it from another terminal:\n\n\
         \x20 export KUBECONFIG={kubeconfig}   # contexts cluster-a, cluster-b, cluster-c\n\
         \x20 alias kubectl-baton={plugin}   # or put it on PATH as kubectl-baton: `kubectl baton …`\n\
         \x20 kubectl-baton status {GROUP} -n {namespace} {across}\n\
         \x20 kubectl --context cluster-b -n {namespace} set image statefulset/{GROUP} app=baton.test/app:v3   # a new version in cluster-b\n\
         \x20 kubectl-baton plan {GROUP} -n {namespace} {across}   # what baton does next, and why\n\
         \x20 kubectl-baton pause cluster-c/{GROUP} -n {namespace} {across}   # and resume\n\
         \x20 kubectl-baton wait {GROUP} -n {namespace} {across}\n\
         \x20 kubectl --context cluster-b -n {namespace} get events --sort-by=.eventTime   # baton's Events about cluster-b/{GROUP}, written in cluster-b\n\n\
         The controller's status page: http://{address}/ui/status (JSON at /api/v1/status)\n\
         Its log: {log} (kept after the demo stops)\n\n\
         Ctrl-C stops everything.\n"
    )
}
