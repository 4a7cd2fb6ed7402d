//! Cross-cluster rollout groups on three real control planes (docs/multi-cluster.md),
//! each a scenario: given a group with one StatefulSet of the same name in each of cluster-a
//! (the hub, where baton runs), cluster-b and cluster-c, when a version is deployed to all
//! three, then baton rolls one cluster at a time, each keeping `rollout-max-unavailable`, and
//! only while the others are fully ready.
//!
//! The scenarios share one trio of control planes and one controller
//! ([`ClusterTrio::scenario`]), each with a group of its own; the one that stops an API
//! server takes the trio alone, and the one whose controller starts without a member's Secret
//! has a trio of its own ([`ClusterTrio::scenario_apart`]). Every check of the zone rule
//! runs on the merged timeline of the three simulators, members named `cluster/statefulset` as
//! baton names them. A deploy pipeline follows the groups with `kubectl baton wait --cluster
//! NAME` for each cluster, and a person approves, pauses and resumes with `kubectl baton
//! approve`, `pause` and `resume --cluster NAME`, each write landing in its member's cluster.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine;
use baton_core::annotations::{
    DELAYED_DOWNSCALE_ANNOTATION, DOWNSCALE_LEADER_ANNOTATION, MAX_ROLLING_MEMBERS_ANNOTATION,
    MIRROR_REPLICAS_API_VERSION_ANNOTATION, MIRROR_REPLICAS_KIND_ANNOTATION,
    MIRROR_REPLICAS_NAME_ANNOTATION, PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION,
    ROLLOUT_PAUSED_ANNOTATION,
};
use baton_core::gates::keys::ROLLBACK_ANNOTATION;
use baton_core::gates::{
    APPROVAL_ANNOTATION, APPROVED_ANNOTATION, HALTED_ANNOTATION, HEALTH_CHECK_ANNOTATION,
    SOAK_ANNOTATION,
};
use baton_core::status::{GroupStatus, RolloutPhase, RolloutStatus};
use baton_e2e::cluster_support::{CLUSTERS, ClusterTrio, Group, KUBECONFIG_KEY, kubeconfig_secret};
use baton_e2e::controller_support::{Controller, RolloutState, rollout_state, wait_event};
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::plugin_support::{
    kubectl_baton, kubectl_baton_across, wait_across, write_clusters_kubeconfig,
    write_unreachable_kubeconfig,
};
use baton_e2e::prometheus_support::{Metrics, Prometheus, create_health_check};
use baton_e2e::rbac_support::member_user;
use baton_e2e::recording_tls::RecordingTlsServer;
use baton_e2e::timeline::{
    WATCH_SKEW, ZoneWindow, check_rolling_at_most, check_rollout_guarantees, zone_windows,
};
use baton_e2e::webhook_support::TestTls;
use baton_e2e::{PodEvent, PodTransition, wait_for, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// Each zone's window since `from` on the merged timeline, in the order the zones began.
fn windows(timeline: &[PodTransition], group: &Group, from: Instant) -> Vec<(String, ZoneWindow)> {
    let mut windows: Vec<(String, ZoneWindow)> = zone_windows(timeline, &group.zones(), from)
        .into_iter()
        .collect();
    windows.sort_by_key(|(_, window)| window.started);
    windows
}

/// The members rolled in `group`'s rollout order, one at a time: each started only once the
/// one before it completed, and `soak` later (the timeline's watches may see a change up to
/// [`WATCH_SKEW`] apart).
fn assert_one_at_a_time(windows: &[(String, ZoneWindow)], group: &Group, soak: Duration) {
    let order: Vec<&str> = windows.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(order, group.members(), "the order the clusters rolled in");
    for pair in windows.windows(2) {
        let [(before, previous), (next, window)] = pair else {
            unreachable!("pairs");
        };
        let completed = previous
            .completed
            .unwrap_or_else(|| panic!("{before} completed"));
        let started = window.started.unwrap_or_else(|| panic!("{next} started"));
        assert!(
            started + WATCH_SKEW >= completed + soak,
            "{next} started {:?} after {before} completed (or {:?} before it); the soak is {soak:?}",
            started.saturating_duration_since(completed),
            completed.saturating_duration_since(started),
        );
    }
}

/// The group's status read over and over until `until`: what a person watching it would see
/// while the scenario holds something (a member out) for that long.
async fn statuses_until(clusters: &ClusterTrio, group: &Group, until: Instant) -> Vec<GroupStatus> {
    let mut statuses = Vec::new();
    while Instant::now() < until {
        statuses.extend(clusters.status(group).await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    statuses
}

/// Every status read while a member was out said the group waits for it
/// (`MemberUnreachable`, its message containing `saying`), and there was at least one.
fn assert_every_status_waits_on(statuses: &[GroupStatus], saying: &str) {
    assert!(
        !statuses.is_empty(),
        "the status answered while the member was out"
    );
    let silent: Vec<&GroupStatus> = statuses
        .iter()
        .filter(|status| {
            !status.waiting.as_ref().is_some_and(|waiting| {
                waiting.kind == "MemberUnreachable" && waiting.message.contains(saying)
            })
        })
        .collect();
    assert!(
        silent.is_empty(),
        "{} of {} status reads while the member was out did not wait on it (MemberUnreachable: {saying}); the first: {:#?}",
        silent.len(),
        statuses.len(),
        silent.first()
    );
}

/// The members of the group's status and their phases, in the order it lists them.
fn phases(status: &GroupStatus) -> Vec<(String, RolloutPhase)> {
    status
        .zones
        .iter()
        .map(|zone| (zone.statefulset.clone(), zone.phase))
        .collect()
}

/// `group`'s members, each with `phase`.
fn every_member(group: &Group, phases: [RolloutPhase; 3]) -> Vec<(String, RolloutPhase)> {
    group.members().into_iter().zip(phases).collect()
}

#[test]
fn each_member_cluster_is_reached_through_its_kubeconfig_secret_in_the_hub_as_baton_member_for_a_year()
 {
    use baton_core::cluster_kubeconfig;
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;

    ClusterTrio::scenario(|clusters| async move {
        let hub = clusters.cluster("cluster-a").client();

        // Given the trio, its members' Secrets written by `kubectl baton cluster add` as
        // docs/multi-cluster.md writes them: the hub holds a kubeconfig Secret for cluster-b and
        // cluster-c, as the controller's configuration names them
        let config = std::fs::read_to_string(clusters.config_path()).expect("the configuration");
        for cluster in ["cluster-b", "cluster-c"] {
            assert!(
                config.contains(&format!(
                    "- name: {cluster}\n      kubeconfig_secret: {}",
                    kubeconfig_secret(cluster)
                )),
                "{config}"
            );
            let secret = Api::<Secret>::namespaced(hub.clone(), clusters.namespace())
                .get(&kubeconfig_secret(cluster))
                .await
                .unwrap_or_else(|error| panic!("the Secret of {cluster}: {error}"));
            let expires = secret
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .remove("baton.dev/token-expires")
                .expect("the token's expiry on the Secret");
            let kubeconfig = secret
                .data
                .unwrap_or_default()
                .remove(KUBECONFIG_KEY)
                .expect("the kubeconfig key");
            let text = String::from_utf8_lossy(&kubeconfig.0).into_owned();

            // Then it is what the controller's allow-list accepts: the server, its CA and a
            // token, inline
            let accepted = cluster_kubeconfig::accept(&text)
                .unwrap_or_else(|error| panic!("{cluster}'s kubeconfig is refused: {error}"));
            assert_eq!(
                accepted.server,
                clusters.cluster(cluster).control_plane.handshake().server
            );
            assert!(
                accepted.certificate_authority_data.is_some(),
                "{accepted:?}"
            );
            assert!(accepted.token.is_some(), "{accepted:?}");

            // and the token, asked for the docs' default lifetime (8760h), lives that long
            let expires: jiff::Timestamp = expires.parse().expect("an RFC 3339 expiry");
            let lives = expires.duration_since(jiff::Timestamp::now());
            let year = jiff::SignedDuration::from_hours(8760);
            assert!(
                lives <= year && lives >= year - jiff::SignedDuration::from_hours(1),
                "{cluster}'s token expires at {expires}, in {lives:?}"
            );

            // When a client is made from the Secret's kubeconfig alone, as the controller does
            let kubeconfig = Kubeconfig::from_yaml(&text).expect("a kubeconfig");
            let config =
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .expect("a client configuration");
            let client = kube::Client::try_from(config).expect("a client");

            // Then the member's API server takes it for deploy/member-cluster'ss baton-member
            let review = Api::<SelfSubjectReview>::all(client.clone())
                .create(&PostParams::default(), &SelfSubjectReview::default())
                .await
                .expect("a SelfSubjectReview through the Secret's kubeconfig");
            let user = review
                .status
                .and_then(|status| status.user_info)
                .and_then(|user| user.username);
            assert_eq!(user, Some(member_user()));

            // And it reaches that cluster, not the hub: it sees the StatefulSet created there
            // alone
            let name = format!("probe-{cluster}");
            StatefulSetFixture::new(&name)
                .replicas(1)
                .create(&clusters.cluster(cluster).client(), clusters.namespace())
                .await;
            let seen: Vec<String> = Api::<StatefulSet>::namespaced(client, clusters.namespace())
                .list(&ListParams::default())
                .await
                .expect("listing through the Secret's kubeconfig")
                .items
                .into_iter()
                .filter_map(|statefulset| statefulset.metadata.name)
                .filter(|found| found.starts_with("probe-"))
                .collect();
            assert_eq!(seen, [name]);
        }

        // And every cluster's simulator made its pods Ready, each in its own timeline, which the
        // merged timeline names by cluster
        let probes: Vec<String> = ["cluster-b", "cluster-c"]
            .into_iter()
            .map(|cluster| format!("{cluster}/probe-{cluster}"))
            .collect();
        for probe in &probes {
            wait_until(TIMEOUT, &format!("{probe}-0 is ready"), || async {
                clusters.merged_timeline().iter().any(|transition| {
                    transition.statefulset.as_deref() == Some(probe.as_str())
                        && transition.pod == format!("{probe}-0")
                        && transition.event == PodEvent::Ready
                })
            })
            .await;
        }
    });
}

/// `kubectl baton cluster add` for a cluster-d that is not set up right: its error, and no
/// Secret written in the hub.
async fn cluster_add_refuses(
    clusters: &ClusterTrio,
    kubeconfig: &std::path::Path,
    args: &[&str],
    saying: &[&str],
) {
    let namespace = clusters.namespace();
    let mut all = vec!["cluster", "add", "cluster-d"];
    all.extend_from_slice(args);
    all.extend(["--system-namespace", namespace]);
    kubectl_baton(kubeconfig, &all)
        .await
        .exited(1)
        .complains(saying);
    let written = Api::<Secret>::namespaced(clusters.cluster("cluster-a").client(), namespace)
        .get_opt("member-cluster-d")
        .await
        .expect("reading the hub's Secrets");
    assert!(written.is_none(), "{args:?} wrote {written:#?}");
}

#[test]
fn kubectl_baton_cluster_add_writes_nothing_for_a_context_a_server_an_account_or_a_namespace_that_is_not_there_and_rotates_when_run_again_the_running_controller_reconnecting()
 {
    ClusterTrio::scenario(|clusters| async move {
        let namespace = clusters.namespace();
        let kubeconfig = clusters.clusters_kubeconfig();
        let hub = Api::<Secret>::namespaced(clusters.cluster("cluster-a").client(), namespace);
        let ns = ["-n", namespace];

        // Given the trio's kubeconfig, a context per cluster, and one more whose cluster is
        // not there (`down`, https://127.0.0.1:1)
        let directory = tempfile::tempdir().expect("a folder");
        let down = directory.path().join("down.kubeconfig");
        write_unreachable_kubeconfig(&down).expect("the unreachable kubeconfig");
        let with_down = directory.path().join("with-down.kubeconfig");
        let mut contexts = clusters.kubeconfigs();
        contexts.push(("down", &down));
        write_clusters_kubeconfig(&contexts, &with_down).expect("a kubeconfig with down");

        // When a cluster is added from a context the kubeconfig lacks, then the error lists
        // the contexts there are
        let args = [
            &["--from-context", "cluster-z", "--context", "cluster-a"][..],
            &ns,
        ]
        .concat();
        cluster_add_refuses(
            clusters,
            &kubeconfig,
            &args,
            &[
                "no context cluster-z in the kubeconfig",
                "its contexts: cluster-a, cluster-b, cluster-c",
            ],
        )
        .await;
        // from the hub's own context, then it says the hub needs no Secret
        let args = [
            &["--from-context", "cluster-a", "--context", "cluster-a"][..],
            &ns,
        ]
        .concat();
        cluster_add_refuses(clusters, &kubeconfig, &args, &[
            "context cluster-a is the hub's (--context, else the current context): the hub needs no Secret",
        ])
        .await;
        // from a context whose server does not answer, then it names the cluster and server
        let args = [
            &["--from-context", "down", "--context", "cluster-a"][..],
            &ns,
        ]
        .concat();
        cluster_add_refuses(
            clusters,
            &with_down,
            &args,
            &["cannot reach cluster cluster-d (context down, https://127.0.0.1:1)"],
        )
        .await;
        // with a ServiceAccount deploy/member-cluster did not make, then it says to apply deploy/member-cluster
        let args = [
            &["--from-context", "cluster-b", "--context", "cluster-a"][..],
            &ns,
            &["--service-account", "baton-system/nobody"],
        ]
        .concat();
        cluster_add_refuses(clusters, &kubeconfig, &args, &[
            "no ServiceAccount baton-system/nobody in cluster cluster-d (context cluster-b): apply deploy/member-cluster there first",
        ])
        .await;
        // for a groups' namespace the member overlay did not name, then it says baton-member
        // cannot read the groups there
        let args = [
            &["--from-context", "cluster-b", "--context", "cluster-a"][..],
            &["-n", "elsewhere"],
        ]
        .concat();
        cluster_add_refuses(
            clusters,
            &kubeconfig,
            &args,
            &[
                "the kubeconfig for cluster cluster-d (baton-system/baton-member at",
                "cannot list StatefulSets in namespace elsewhere",
                "apply deploy/member-cluster there with the groups' namespace elsewhere",
            ],
        )
        .await;
        // through an http:// server, then the controller's allow-list refuses it by field
        let args = [
            &["--from-context", "cluster-b", "--context", "cluster-a"][..],
            &ns,
            &["--server", "http://127.0.0.1:1"],
        ]
        .concat();
        cluster_add_refuses(
            clusters,
            &kubeconfig,
            &args,
            &[
                "the kubeconfig for cluster cluster-d would be refused by the hub's controller",
                ".server",
            ],
        )
        .await;

        // When cluster-b is added again, as the docs rotate its token
        let token = |secret: Secret| {
            let text = secret
                .data
                .unwrap_or_default()
                .remove(KUBECONFIG_KEY)
                .expect("the key");
            baton_core::cluster_kubeconfig::accept(&String::from_utf8_lossy(&text.0))
                .expect("accepted")
                .token
                .expect("a token")
        };
        let name = kubeconfig_secret("cluster-b");
        let before = token(hub.get(&name).await.expect("cluster-b's Secret"));
        clusters.write_secret("cluster-b").await;

        // Then the Secret holds a new token, which the member takes for baton-member
        let after = token(hub.get(&name).await.expect("cluster-b's Secret"));
        assert_ne!(after, before, "a new token");
        let (ok, output) = baton_e2e::renders::run(
            "kubectl",
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
                "--token",
                &after,
            ],
            Some(&clusters.cluster("cluster-b").control_plane),
        );
        assert!(ok, "{output}");
        assert_eq!(output.trim(), member_user());

        // And the running controller reconnects to cluster-b with it, and lists it again
        wait_until(
            TIMEOUT,
            "the controller reconnects to cluster-b with the new token",
            || async {
                clusters.controller.process.output().lines().any(|line| {
                    line.contains("kubeconfig Secret changed: reconnected with it")
                        && line.contains("cluster=cluster-b")
                })
            },
        )
        .await;
        wait_until(TIMEOUT, "cluster-b is listed again", || async {
            cluster_out(&clusters.controller.metrics().await, "cluster-b") == Some(0.0)
        })
        .await;
    });
}

/// docs/multi-cluster.md's Role for the hub's controller: the member Secrets by name, `get`
/// alone. The trio's controller runs as an admin, so the Role is checked here, as its
/// ServiceAccount.
#[test]
fn the_docs_hub_role_lets_baton_controller_get_and_watch_each_member_secret_and_nothing_else() {
    use baton_e2e::cluster_setup::{docs_block, read_docs};
    use baton_e2e::rbac_support::impersonating;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

    ClusterTrio::scenario(|clusters| async move {
        let namespace = clusters.namespace();
        let hub = clusters.cluster("cluster-a");

        // Given the docs' member-secrets.yaml created in the hub, in the trio's namespace
        // (where its controller reads the Secrets) instead of baton-system
        let page = read_docs();
        let block = docs_block(&page, "my-hub-overlay/member-secrets.yaml").expect("the block");
        let objects: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&block).expect("YAML documents");
        for mut object in objects {
            object["metadata"]["namespace"] = json!(namespace);
            match object["kind"].as_str() {
                Some("Role") => {
                    let role: Role = serde_json::from_value(object).expect("a Role");
                    Api::<Role>::namespaced(hub.client(), namespace)
                        .create(&PostParams::default(), &role)
                        .await
                        .expect("the docs' Role");
                }
                Some("RoleBinding") => {
                    object["subjects"][0]["namespace"] = json!(namespace);
                    let binding: RoleBinding =
                        serde_json::from_value(object).expect("a RoleBinding");
                    Api::<RoleBinding>::namespaced(hub.client(), namespace)
                        .create(&PostParams::default(), &binding)
                        .await
                        .expect("the docs' RoleBinding");
                }
                other => panic!("member-secrets.yaml holds a {other:?}"),
            }
        }
        let secrets = Api::<Secret>::namespaced(hub.client(), namespace);
        let other: Secret = serde_json::from_value(json!({"metadata": {"name": "not-a-member"}}))
            .expect("a Secret");
        secrets
            .create(&PostParams::default(), &other)
            .await
            .expect("another Secret");

        // When baton-controller reads Secrets there
        let controller = impersonating(
            &hub.control_plane,
            &format!("system:serviceaccount:{namespace}:baton-controller"),
        )
        .await
        .expect("a client as baton-controller");
        let as_controller = Api::<Secret>::namespaced(controller, namespace);

        // Then it gets each member's, and watches it by name (a list, then a watch, selecting
        // that one Secret, as its watch of the Secret does), and no other, nor a list of
        // them all, nor a write
        for cluster in ["cluster-b", "cluster-c"] {
            let name = kubeconfig_secret(cluster);
            as_controller.get(&name).await.unwrap_or_else(|error| {
                panic!("baton-controller gets {cluster}'s Secret: {error}")
            });
            let by_name = format!("metadata.name={name}");
            let listed = as_controller
                .list(&ListParams::default().fields(&by_name))
                .await
                .unwrap_or_else(|error| {
                    panic!("baton-controller lists {cluster}'s Secret by name: {error}")
                });
            assert_eq!(listed.items.len(), 1, "{cluster}'s Secret, listed by name");
            let version = listed.metadata.resource_version.clone().unwrap_or_default();
            let _events = as_controller
                .watch(
                    &kube::api::WatchParams::default()
                        .fields(&by_name)
                        .timeout(1),
                    &version,
                )
                .await
                .unwrap_or_else(|error| {
                    panic!("baton-controller watches {cluster}'s Secret by name: {error}")
                });
        }
        let forbidden = |result: Result<_, kube::Error>, what: &str| match result {
            Err(kube::Error::Api(status)) if status.code == 403 => {}
            other => panic!("{what}: {other:?}"),
        };
        forbidden(
            as_controller.get("not-a-member").await.map(|_| ()),
            "get another Secret",
        );
        forbidden(
            as_controller.list(&ListParams::default()).await.map(|_| ()),
            "list Secrets",
        );
        forbidden(
            as_controller
                .list(&ListParams::default().fields("metadata.name=not-a-member"))
                .await
                .map(|_| ()),
            "list another Secret by name",
        );
        forbidden(
            as_controller
                .delete(&kubeconfig_secret("cluster-b"), &Default::default())
                .await
                .map(|_| ()),
            "delete a member's Secret",
        );
    });
}

#[test]
fn a_three_cluster_rollout_rolls_one_cluster_at_a_time_keeping_the_zone_rule_at_every_step() {
    ClusterTrio::scenario(|clusters| async move {
        // Given a ready group `distributor` of one StatefulSet per cluster, 3 pods each, at most 1
        // not ready
        let group = Group::new("distributor", 3, 1);
        clusters.create_group(&group, |_, fixture| fixture).await;

        // When a new version is deployed to every cluster
        let from = clusters.roll_out(&group, "v2").await;

        // Then every cluster completes, and at every step of the three clusters' merged timeline
        // at most one cluster had pods not ready, never more than one pod of it, and a pod was
        // deleted only while the other clusters were fully ready
        clusters.wait_complete(&group).await;
        let timeline = clusters.merged_timeline();
        check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();

        // And the clusters rolled one at a time, cluster-a, then cluster-b, then cluster-c
        assert_one_at_a_time(&windows(&timeline, &group, from), &group, Duration::ZERO);

        // And the status names each member `cluster/statefulset`, every one complete
        let complete = [RolloutPhase::Complete; 3];
        let status = clusters
            .wait_status(&group, "every member complete", |status| {
                status.phase == RolloutPhase::Complete
                    && phases(status) == every_member(&group, complete)
            })
            .await;
        assert_eq!(status.waiting, None);
        assert!(
            status
                .zones
                .iter()
                .all(|zone| zone.updated == 3 && zone.ready == 3 && zone.total == 3),
            "{status:#?}"
        );
        // with the deletions among its last actions named in their clusters
        assert!(
            status.last_actions.iter().any(|action| {
                action.action == "DeletePod"
                    && action.statefulset == group.member("cluster-c")
                    && action
                        .pod
                        .as_deref()
                        .is_some_and(|pod| pod.starts_with("cluster-c/distributor-"))
            }),
            "a deletion in cluster-c among the last actions: {:#?}",
            status.last_actions
        );

        // And each cluster's Event saying its member completed is in that cluster, on its own
        // StatefulSet, naming the member as baton does
        for cluster in CLUSTERS {
            wait_event(
                &clusters.cluster(cluster).client(),
                clusters.namespace(),
                &group.statefulset,
                "RolloutComplete",
                &[&format!(
                    "every pod of {} runs revision",
                    group.member(cluster)
                )],
            )
            .await;
        }
    });
}

#[test]
fn two_rolling_members_let_two_clusters_roll_at_once_and_the_third_waits_for_one() {
    ClusterTrio::scenario(|clusters| async move {
        // Given a ready group `compactor` of one StatefulSet per cluster, 3 pods each, at most 1
        // not ready, that lets two members roll at once (Fleet's `maxUnavailable: 2` clusters)
        let group = Group::new("compactor", 3, 1);
        clusters
            .create_group(&group, |_, fixture| {
                fixture.annotation(MAX_ROLLING_MEMBERS_ANNOTATION, "2")
            })
            .await;

        // When a new version is deployed to every cluster
        let from = clusters.roll_out(&group, "v2").await;

        // Then every cluster completes, and at every step of the merged timeline at most two
        // clusters had pods not ready, each at most one, and a pod was deleted only while fewer
        // than two other clusters had pods not ready
        clusters.wait_complete(&group).await;
        let timeline = clusters.merged_timeline();
        let most = check_rolling_at_most(&timeline, &group.zones(), from, 2).unwrap();
        // And two clusters did roll at once
        assert_eq!(most, 2, "two clusters rolling at the same moment");

        // And cluster-a and cluster-b started together, cluster-c only once one of them was done
        let windows = windows(&timeline, &group, from);
        let window = |cluster: &str| {
            windows
                .iter()
                .find(|(name, _)| *name == group.member(cluster))
                .map(|(_, window)| *window)
                .unwrap_or_else(|| panic!("{cluster} rolled: {windows:?}"))
        };
        let (a, b, c) = (
            window("cluster-a"),
            window("cluster-b"),
            window("cluster-c"),
        );
        let a_done = a.completed.expect("cluster-a completed");
        let b_done = b.completed.expect("cluster-b completed");
        assert!(
            b.started.expect("cluster-b started") < a_done,
            "cluster-b started before cluster-a completed: {windows:?}"
        );
        assert!(
            c.started.expect("cluster-c started") + WATCH_SKEW >= a_done.min(b_done),
            "cluster-c waited for a place: {windows:?}"
        );
    });
}

/// Seed 004 (Fleet's safe rollout): `maxUnavailable: 1` cluster, and a bad image update is
/// rolled out to the first cluster only; the others wait until a good version comes. Fleet's
/// `unavailablePeriodSeconds` is baton's soak between clusters.
#[test]
fn a_bad_version_stays_in_the_first_cluster_and_a_good_one_completes_with_a_soak_between_clusters()
{
    ClusterTrio::scenario(|clusters| async move {
        const BAD: &str = "ingester-bad-image";
        const GOOD: &str = "ingester-fixed";
        let soak = Duration::from_secs(4);

        // Given a ready group `ingester` of one StatefulSet per cluster, 3 pods each, at most 1
        // not ready, with a 4 s soak after each cluster, and a version whose pods never become
        // ready (they crash-loop, as a bad image's do)
        let group = Group::new("ingester", 3, 1);
        clusters
            .create_group(&group, |_, fixture| {
                fixture.annotation(SOAK_ANNOTATION, "4s")
            })
            .await;
        for cluster in &clusters.clusters {
            cluster.simulator.break_version(BAD);
        }

        // When the bad version is deployed to every cluster
        let from = clusters.roll_out(&group, BAD).await;

        // Then the first cluster rolls: one pod is replaced by the bad version
        let first = group.member("cluster-a");
        wait_until(
            TIMEOUT,
            "a pod of cluster-a runs the bad version",
            || async { clusters.updated_pods(&group, "cluster-a").await == 1 },
        )
        .await;
        // and the group waits on it, the status naming the member in its cluster and why
        let waits_on_the_first_cluster = |status: &GroupStatus| {
            phases(status)
                == every_member(
                    &group,
                    [
                        RolloutPhase::Rolling,
                        RolloutPhase::Waiting,
                        RolloutPhase::Waiting,
                    ],
                )
                && status.waiting.as_ref().is_some_and(|waiting| {
                    waiting.kind == "MaxUnavailable"
                        && waiting.message.contains(&format!(
                            "max-unavailable reached in {first} (1/1); waiting for {first}-"
                        ))
                        && waiting.message.contains("CrashLoopBackOff")
                })
        };
        let status = clusters
            .wait_status(
                &group,
                "cluster-a rolling and crash-looping, the others waiting",
                waits_on_the_first_cluster,
            )
            .await;
        eprintln!("the group waits: {:?}", status.waiting);

        // And it keeps waiting: once the leader has seen that wait for longer than a soak, the
        // first cluster's new pod still is not ready, and nothing else moved
        let status = clusters
            .wait_status(&group, "the wait lasting longer than a soak", |status| {
                waits_on_the_first_cluster(status)
                    && status
                        .waiting
                        .as_ref()
                        .and_then(|waiting| waiting.since)
                        .is_some_and(|since| {
                            jiff::Timestamp::now().duration_since(since)
                                >= jiff::SignedDuration::try_from(soak + Duration::from_secs(1))
                                    .expect("a short duration")
                        })
            })
            .await;
        assert_eq!(status.zones[0].updated, 1, "{status:#?}");
        assert_eq!(status.zones[0].ready, 2, "{status:#?}");
        assert_eq!(
            clusters.deleted_pods(&first, from).len(),
            1,
            "cluster-a lost one pod at a time"
        );
        // and the other two clusters were never touched: not one pod deleted, none updated
        for cluster in ["cluster-b", "cluster-c"] {
            let member = group.member(cluster);
            assert_eq!(
                clusters.deleted_pods(&member, from),
                Vec::<String>::new(),
                "no pod of {member} deleted"
            );
            assert_eq!(clusters.updated_pods(&group, cluster).await, 0);
        }

        // and a deploy pipeline waiting on the group across the clusters times out, saying
        // where it stands
        wait_across(&clusters.kubeconfigs(), clusters.namespace(), &group.name, "3s")
            .await
            .exited(3)
            .complains(&[
                "timed out after 3s waiting for rollout group ingester: rolling; waits (MaxUnavailable)",
                &format!("max-unavailable reached in {first} (1/1)"),
            ]);

        // When a good version is deployed to every cluster
        let fixed = clusters.roll_out(&group, GOOD).await;

        // Then the group completes, cluster by cluster: each cluster started only a soak after
        // the one before it completed, and the zone rule held at every step since the bad version
        clusters.wait_complete(&group).await;
        let timeline = clusters.merged_timeline();
        check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
        assert_one_at_a_time(&windows(&timeline, &group, fixed), &group, soak);
        clusters
            .wait_status(&group, "the group complete", |status| {
                status.phase == RolloutPhase::Complete
            })
            .await;
    });
}

#[test]
fn a_member_cluster_whose_api_server_stops_mid_rollout_holds_the_group_until_it_is_back() {
    // (alone: every group of the trio would wait while cluster-b is away)
    ClusterTrio::scenario_alone(|clusters| async move {
        let hub = clusters.cluster("cluster-a");

        // Given a ready group `store-gateway` of one StatefulSet per cluster, 3 pods each, at
        // most 1 not ready
        let group = Group::new("store-gateway", 3, 1);
        clusters.create_group(&group, |_, fixture| fixture).await;
        // and whose pod store-gateway-0 in cluster-a is not ready until cluster-b is away: baton
        // replaces it first (it costs no availability) and its replacement waits too, so
        // cluster-b's API server stops while cluster-a rolls, not while a deletion is in flight
        hub.simulator.hold_not_ready("store-gateway-0").await;
        let from = clusters.roll_out(&group, "v2").await;
        wait_until(TIMEOUT, "cluster-a's first pod is replaced", || async {
            clusters.updated_pods(&group, "cluster-a").await == 1
        })
        .await;

        // When cluster-b's API server stops
        let outage = clusters.stop_apiserver("cluster-b").await;
        let stopped = outage.stopped;

        // Then the leader holds the group for cluster-b's member (its wait, as its metrics tell)
        let member = group.member("cluster-b");
        wait_until(
            TIMEOUT,
            "the leader holds the group for cluster-b",
            || async {
                waits_for(
                    &clusters.controller.metrics().await,
                    &group,
                    "MemberUnreachable",
                )
            },
        )
        .await;
        eprintln!(
            "the leader holds the group {:?} into the outage",
            stopped.elapsed()
        );
        let metrics = clusters.controller.metrics().await;
        let out: Vec<Option<f64>> = CLUSTERS
            .iter()
            .map(|cluster| cluster_out(&metrics, cluster))
            .collect();
        assert_eq!(
            out,
            [Some(0.0), Some(1.0), Some(0.0)],
            "cluster-b alone is out"
        );

        // And when cluster-a's new pod becomes ready meanwhile, cluster-a goes no further: for 5 s
        // (the scenario's input, not a wait for a condition) no pod is deleted in any cluster,
        // while the status says the group waits on cluster-b, naming the member and its cluster
        hub.simulator.release("store-gateway-0").await;
        let ready = wait_until_ready(clusters, &group.member("cluster-a"), stopped).await;
        let statuses = statuses_until(clusters, &group, ready + Duration::from_secs(5)).await;
        for member in group.members() {
            assert_eq!(
                clusters.deleted_pods(&member, stopped),
                Vec::<String>::new(),
                "no pod of {member} deleted while cluster-b is away"
            );
        }
        assert_eq!(clusters.updated_pods(&group, "cluster-a").await, 1);
        assert!(
            waits_for(
                &clusters.controller.metrics().await,
                &group,
                "MemberUnreachable"
            ),
            "the leader still holds the group for cluster-b"
        );

        // When cluster-b's API server is back (cluster-a's next replacement held until
        // cluster-b's simulator watches again, so that its timeline misses nothing baton does
        // there: a kubelet's watch comes back in its own time)
        let old_pods: Vec<String> = (1..group.replicas)
            .map(|ordinal| format!("{}-{ordinal}", group.statefulset))
            .collect();
        for pod in &old_pods {
            hub.simulator.hold_replacement(pod).await;
        }
        let back = outage.end().await;
        clusters.wait_watching("cluster-b").await;
        for pod in &old_pods {
            hub.simulator.release(pod).await;
        }

        // Then cluster-b is listed again, the rollout resumes and completes, one cluster at a
        // time, the zone rule held at every step, and each old pod deleted once
        wait_until(TIMEOUT, "cluster-b is listed again", || async {
            cluster_out(&clusters.controller.metrics().await, "cluster-b") == Some(0.0)
        })
        .await;
        clusters.wait_complete(&group).await;
        eprintln!(
            "the rollout completed {:?} after cluster-b was back",
            back.elapsed()
        );
        let timeline = clusters.merged_timeline();
        check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
        assert_one_at_a_time(&windows(&timeline, &group, from), &group, Duration::ZERO);
        for member in group.members() {
            assert_eq!(
                clusters.deleted_pods(&member, from).len(),
                3,
                "each old pod of {member} deleted once"
            );
        }
        let status = clusters
            .wait_status(&group, "the group complete", |status| {
                status.phase == RolloutPhase::Complete
            })
            .await;
        assert_eq!(status.waiting, None);

        // And while cluster-b was away the status said why the group waited, every time it was
        // read (checked last, so that the resumption above is checked whatever it said)
        assert_every_status_waits_on(
            &statuses,
            &format!("{member} cannot be read: cluster cluster-b is unreachable"),
        );
    });
}

#[test]
fn a_token_rotated_and_the_old_one_revoked_mid_rollout_is_used_by_the_running_controller() {
    // (alone: revoking cluster-b's token holds every group of the trio with a member there)
    ClusterTrio::scenario_alone(|clusters| async move {
        use baton_e2e::rbac_support::MEMBER_IDENTITY;
        use k8s_openapi::api::core::v1::ServiceAccount;

        let hub = clusters.cluster("cluster-a");
        let member_b = clusters.cluster("cluster-b");
        let namespace = clusters.namespace().to_owned();
        let secret = kubeconfig_secret("cluster-b");
        let controller_pid = clusters.controller.process.pid();

        // Given a ready group `query-scheduler` of one StatefulSet per cluster, 3 pods each, at
        // most 1 not ready, rolling: cluster-a's first pod replaced, its replacement held not
        // ready (so that the token goes while cluster-a rolls, not while a deletion is in
        // flight)
        let group = Group::new("query-scheduler", 3, 1);
        clusters.create_group(&group, |_, fixture| fixture).await;
        hub.simulator
            .hold_not_ready(&format!("{}-0", group.statefulset))
            .await;
        let from = clusters.roll_out(&group, "v2").await;
        wait_until(TIMEOUT, "cluster-a's first pod is replaced", || async {
            clusters.updated_pods(&group, "cluster-a").await == 1
        })
        .await;

        // When cluster-b's ServiceAccount baton-member is deleted and installed again (every
        // token it was issued, the one in the hub's Secret among them, revoked), as the docs
        // end a leaked token
        let accounts = Api::<ServiceAccount>::namespaced(member_b.client(), MEMBER_IDENTITY.0);
        accounts
            .delete(MEMBER_IDENTITY.1, &Default::default())
            .await
            .expect("deleting baton-member in cluster-b");
        wait_until(TIMEOUT, "baton-member is gone from cluster-b", || async {
            matches!(accounts.get_opt(MEMBER_IDENTITY.1).await, Ok(None))
        })
        .await;
        let (kubeconfig, groups) = (member_b.kubeconfig_path().to_owned(), namespace.clone());
        tokio::task::spawn_blocking(move || {
            baton_e2e::cluster_setup::install_member(&kubeconfig, &groups)
        })
        .await
        .expect("the install task")
        .expect("installing cluster-b's member overlay again");
        // and cluster-b's Secret in the hub is first overwritten with what is not a kubeconfig
        let secrets = Api::<Secret>::namespaced(hub.client(), &namespace);
        secrets
            .patch(
                &secret,
                &PatchParams::default(),
                &Patch::Merge(&json!({"stringData": {KUBECONFIG_KEY: "not: [a kubeconfig"}})),
            )
            .await
            .expect("overwriting cluster-b's Secret");

        // Then the running controller drops cluster-b's connection: the group is held, naming
        // the member and the Secret's problem, cluster-b alone out
        let problem = format!(
            "key {KUBECONFIG_KEY} of Secret {namespace}/{secret} (member cluster cluster-b) is not a kubeconfig"
        );
        clusters
            .wait_status(&group, "the group held for cluster-b's Secret", |status| {
                status.waiting.as_ref().is_some_and(|waiting| {
                    waiting.kind == "MemberUnreachable"
                        && waiting.message.contains(&group.member("cluster-b"))
                        && waiting.message.contains(&problem)
                })
            })
            .await;
        let metrics = clusters.controller.metrics().await;
        let out: Vec<Option<f64>> = CLUSTERS
            .iter()
            .map(|cluster| cluster_out(&metrics, cluster))
            .collect();
        assert_eq!(
            out,
            [Some(0.0), Some(1.0), Some(0.0)],
            "cluster-b alone is out"
        );
        let held = Instant::now();
        // and when cluster-a's new pod becomes ready meanwhile, cluster-a goes no further: for
        // 5 s (the scenario's input, not a wait for a condition) the status says the group
        // waits on cluster-b's Secret
        hub.simulator
            .release(&format!("{}-0", group.statefulset))
            .await;
        let ready = wait_until_ready(clusters, &group.member("cluster-a"), held).await;
        let statuses = statuses_until(clusters, &group, ready + Duration::from_secs(5)).await;
        assert_every_status_waits_on(&statuses, &problem);

        // When `kubectl baton cluster add` is run again for cluster-b, as the docs rotate a
        // token (a token of the new baton-member in the Secret)
        let rotated = Instant::now();
        clusters.write_secret("cluster-b").await;

        // Then the same controller process reconnects to cluster-b with it, and the rollout
        // completes in every cluster, one at a time, the zone rule held at every step
        clusters.wait_complete(&group).await;
        let timeline = clusters.merged_timeline();
        check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
        assert_one_at_a_time(&windows(&timeline, &group, from), &group, Duration::ZERO);
        assert_eq!(
            cluster_out(&clusters.controller.metrics().await, "cluster-b"),
            Some(0.0),
            "cluster-b listed again"
        );
        assert_eq!(
            clusters.controller.process.pid(),
            controller_pid,
            "the controller was never restarted"
        );
        // (its log: cluster-b disconnected when its Secret became unusable, then reconnected
        // with the rotated one)
        let output = clusters.controller.process.output();
        let dropped = output
            .lines()
            .position(|line| {
                line.contains("kubeconfig Secret changed and cannot be used")
                    && line.contains("cluster=cluster-b")
            })
            .unwrap_or_else(|| panic!("the controller says it dropped cluster-b: {output}"));
        assert!(
            output.lines().skip(dropped).any(|line| {
                line.contains("kubeconfig Secret can be used again: reconnected with it")
                    && line.contains("cluster=cluster-b")
            }),
            "the controller says it reconnected to cluster-b: {output}"
        );
        // And nothing was deleted in any cluster between the hold and the rotation
        let deleted_meanwhile: Vec<String> = timeline
            .into_iter()
            .filter(|transition| {
                matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted)
                    && transition.at >= held
                    && transition.at < rotated
            })
            .map(|transition| transition.pod)
            .collect();
        assert_eq!(
            deleted_meanwhile,
            Vec::<String>::new(),
            "no pod deleted while cluster-b's Secret could not be used"
        );
    });
}

#[test]
fn a_member_whose_kubeconfig_secret_is_missing_then_bad_holds_the_group_until_it_is_written() {
    ClusterTrio::scenario_apart(
        || ClusterTrio::start_without_secret("secrets", "cluster-c"),
        |clusters| async move {
            // (its controller's output is shown if it fails: the trio stops with the scenario)
            let namespace = clusters.namespace().to_owned();
            let secret = kubeconfig_secret("cluster-c");
            let secrets =
                Api::<Secret>::namespaced(clusters.cluster("cluster-a").client(), &namespace);

            // Given a trio whose controller started with no Secret for cluster-c, and a ready
            // group `ingester` of one StatefulSet per cluster, 3 pods each
            let group = Group::new("ingester", 3, 1);
            clusters.create_group(&group, |_, fixture| fixture).await;

            // Then the leader holds the group, saying which Secret of which member it cannot
            // read
            wait_until(
                TIMEOUT,
                "the leader holds the group for cluster-c",
                || async {
                    waits_for(
                        &clusters.controller.metrics().await,
                        &group,
                        "MemberUnreachable",
                    )
                },
            )
            .await;
            assert_eq!(
                cluster_out(&clusters.controller.metrics().await, "cluster-c"),
                Some(1.0),
                "cluster-c is out"
            );
            let missing =
                format!("reading Secret {namespace}/{secret} of member cluster cluster-c");
            wait_until(
                TIMEOUT,
                "the controller says the Secret is missing",
                || async { clusters.controller.process.output().contains(&missing) },
            )
            .await;

            // When a new version is deployed to every cluster, nothing is deleted anywhere
            // for 5 s (the scenario's input), the status saying meanwhile why the group waits
            let from = clusters.roll_out(&group, "v2").await;
            let mut statuses = Vec::new();
            while Instant::now() < from + Duration::from_secs(5) {
                statuses.extend(clusters.status(&group).await);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }

            // When the Secret is written without its key, the controller says so and still
            // holds the group
            let keyless: Secret = serde_json::from_value(json!({
                "metadata": {"name": secret},
                "stringData": {"config": "not under the key the configuration names"},
            }))
            .expect("a Secret");
            secrets
                .create(&PostParams::default(), &keyless)
                .await
                .expect("the keyless Secret");
            let no_key = format!(
                "Secret {namespace}/{secret} of member cluster cluster-c has no key {KUBECONFIG_KEY}"
            );
            wait_until(
                TIMEOUT,
                "the controller says the Secret has no key",
                || async { clusters.controller.process.output().contains(&no_key) },
            )
            .await;
            assert!(
                waits_for(
                    &clusters.controller.metrics().await,
                    &group,
                    "MemberUnreachable"
                ),
                "the leader still holds the group"
            );
            for member in group.members() {
                assert_eq!(
                    clusters.deleted_pods(&member, from),
                    Vec::<String>::new(),
                    "no pod of {member} deleted while cluster-c cannot be reached"
                );
            }

            // When cluster-c's kubeconfig is written under its key
            // Then cluster-c is reached and listed, and the rollout completes one cluster at a
            // time, the zone rule held at every step
            cluster_c_written_back_completes(&clusters, &group, from).await;

            // And while cluster-c could not be reached the status said why the group waited,
            // every time it was read (checked last, so that the rest is checked whatever it
            // said)
            assert_every_status_waits_on(&statuses, "cluster cluster-c is unreachable");
        },
    );
}

const ERROR_RATIO: &str = "test_error_ratio";

#[test]
fn a_health_check_failing_while_cluster_b_rolls_halts_before_cluster_c_until_a_person_resumes() {
    ClusterTrio::scenario(|clusters| async move {
        let hub = clusters.cluster("cluster-a");

        // Given a real Prometheus scraping an error ratio of 0, at the address the controller lets
        // checks query, and the RolloutHealthCheck `errors` in the hub's namespace (the ratio under
        // 0.1, every second, one pass per step, one failure halts)
        let metrics = Metrics::start().await;
        metrics.set(ERROR_RATIO, 0.0);
        let prometheus =
            Prometheus::start_at(metrics.address(), clusters.prometheus_address()).await;
        prometheus.wait_value(ERROR_RATIO, 0.0).await;
        let spec = json!({
            "prometheus": {"address": prometheus.url(), "timeout": "2s"},
            "queries": [{
                "name": "error-ratio",
                "query": ERROR_RATIO,
                "threshold": {"operator": "<", "value": 0.1},
            }],
            "interval": "1s",
            "successThreshold": 1,
            "failureThreshold": 1,
        });
        create_health_check(&hub.client(), clusters.namespace(), "errors", spec).await;
        // and a ready group `querier` of one StatefulSet per cluster, 3 pods each, opted in on
        // cluster-a's member
        let group = Group::new("querier", 3, 1);
        clusters
            .create_group(&group, |cluster, fixture| match cluster {
                "cluster-a" => fixture.annotation(HEALTH_CHECK_ANNOTATION, "errors"),
                _ => fixture,
            })
            .await;

        // When a new version is deployed to every cluster, and the error ratio rises while
        // cluster-b rolls
        let from = clusters.roll_out(&group, "v2").await;
        let rolling = group.member("cluster-b");
        wait_until(TIMEOUT, "cluster-b rolls", || async {
            !clusters.deleted_pods(&rolling, from).is_empty()
        })
        .await;
        metrics.set(ERROR_RATIO, 0.5);

        // Then the group is halted on a member, with a Warning Event in that member's cluster, on
        // its StatefulSet, naming the query, its value and the member that rolled
        let (halted_in, statefulsets) = wait_for(TIMEOUT, "the group is halted", || async {
            for cluster in CLUSTERS {
                let api = Api::<StatefulSet>::namespaced(
                    clusters.cluster(cluster).client(),
                    clusters.namespace(),
                );
                if let Ok(statefulset) = api.get(&group.statefulset).await
                    && statefulset
                        .metadata
                        .annotations
                        .unwrap_or_default()
                        .contains_key(HALTED_ANNOTATION)
                {
                    return Some((cluster, api));
                }
            }
            None
        })
        .await;
        eprintln!("the group is halted on {}", group.member(halted_in));
        wait_event(
            &clusters.cluster(halted_in).client(),
            clusters.namespace(),
            &group.statefulset,
            "Halted",
            &[
                &format!("query `{ERROR_RATIO}` returned 0.5 (must be < 0.1)"),
                &format!("while {rolling} rolled"),
            ],
        )
        .await;
        // and no pod of cluster-c was deleted
        let last = group.member("cluster-c");
        assert_eq!(clusters.deleted_pods(&last, from), Vec::<String>::new());
        assert_eq!(clusters.updated_pods(&group, "cluster-c").await, 0);
        let status = clusters
            .wait_status(&group, "the group halted", |status| {
                status.phase == RolloutPhase::Halted
            })
            .await;
        eprintln!("the group waits: {:?}", status.waiting);

        // and a deploy pipeline waiting on the group across the clusters stops: a person must act
        wait_across(
            &clusters.kubeconfigs(),
            clusters.namespace(),
            &group.name,
            "1m",
        )
        .await
        .exited(4)
        .complains(&[&format!(
            "rollout group querier is halted: halted at {}",
            group.member(halted_in)
        )]);

        // When the ratio recovers and a person resumes the group (removes the halt where it is)
        metrics.set(ERROR_RATIO, 0.0);
        prometheus.wait_value(ERROR_RATIO, 0.0).await;
        let resume = json!({"metadata": {"annotations": {HALTED_ANNOTATION: null}}});
        statefulsets
            .patch(
                &group.statefulset,
                &PatchParams::default(),
                &Patch::Merge(&resume),
            )
            .await
            .expect("removing the halt");

        // Then the rollout completes, one cluster at a time, the zone rule held at every step
        clusters.wait_complete(&group).await;
        let timeline = clusters.merged_timeline();
        check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
        assert_one_at_a_time(&windows(&timeline, &group, from), &group, Duration::ZERO);
    });
}

/// `baton_member_cluster_out{cluster="…"}`: 1 while the controller cannot trust what it
/// reads of `cluster`, 0 once listed; `None` when the series is missing.
/// Once cluster-c's kubeconfig Secret is written (as the trio writes it): cluster-c is listed,
/// and the rollout started at `from` completes one cluster at a time, the zone rule held at
/// every step of the merged timeline.
async fn cluster_c_written_back_completes(clusters: &ClusterTrio, group: &Group, from: Instant) {
    clusters.write_secret("cluster-c").await;
    wait_until(TIMEOUT, "cluster-c is listed", || async {
        cluster_out(&clusters.controller.metrics().await, "cluster-c") == Some(0.0)
    })
    .await;
    clusters.wait_complete(group).await;
    let timeline = clusters.merged_timeline();
    check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
    assert_one_at_a_time(&windows(&timeline, group, from), group, Duration::ZERO);
}

fn cluster_out(metrics: &str, cluster: &str) -> Option<f64> {
    let series = format!("baton_member_cluster_out{{cluster=\"{cluster}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.trim().parse().ok())
}

/// Whether `metrics` say the leader holds `group` for `reason`
/// (`baton_rollout_group_waiting_reason`, its labels in either order).
fn waits_for(metrics: &str, group: &Group, reason: &str) -> bool {
    metrics.lines().any(|line| {
        line.starts_with("baton_rollout_group_waiting_reason{")
            && line.contains(&format!("reason=\"{reason}\""))
            && line.contains(&format!("rollout_group=\"{}\"", group.name))
            && line.ends_with("} 1")
    })
}

/// Waits until the merged timeline shows a pod of `member` becoming Ready after `after`;
/// returns when it did.
async fn wait_until_ready(clusters: &ClusterTrio, member: &str, after: Instant) -> Instant {
    wait_for(TIMEOUT, &format!("a pod of {member} is ready"), || async {
        clusters
            .merged_timeline()
            .into_iter()
            .find(|transition| {
                transition.at >= after
                    && transition.statefulset.as_deref() == Some(member)
                    && transition.event == PodEvent::Ready
            })
            .map(|transition| transition.at)
    })
    .await
}

#[test]
fn kubectl_baton_follows_a_cross_cluster_group_with_a_member_per_cluster() {
    ClusterTrio::scenario(|clusters| async move {
        // Given a ready group `ruler` of one StatefulSet per cluster, 2 pods each, and a
        // kubeconfig with a context per cluster, named after it
        let group = Group::new("ruler", 2, 1);
        clusters.create_group(&group, |_, fixture| fixture).await;
        let members = clusters.kubeconfigs();
        let namespace = clusters.namespace();

        // Then `kubectl baton status --cluster cluster-a --cluster cluster-b --cluster cluster-c`
        // names the members as the controller does, each complete
        let run = kubectl_baton_across(
            &members,
            &["status", "ruler", "-n", namespace, "-o", "json"],
        )
        .await;
        let document: RolloutStatus =
            serde_json::from_str(&run.exited(0).stdout).expect("a RolloutStatus document");
        let complete = every_member(&group, [RolloutPhase::Complete; 3]);
        assert_eq!(phases(&document.groups[0]), complete, "{run:#?}");
        let controller = clusters
            .wait_status(&group, "every member complete", |status| {
                phases(status) == complete
            })
            .await;
        assert_eq!(
            document.groups[0].zones, controller.zones,
            "the plugin and the controller see the same members"
        );

        // When a new version is deployed to every cluster, and a deploy pipeline waits for it
        let from = clusters.roll_out(&group, "v2").await;
        let waited = wait_across(&members, namespace, "ruler", "2m").await;

        // Then wait exits 0 once every cluster completed, having followed each member by its
        // name, and never lost sight of one
        waited.exited(0).says(&[
            "rollout group ruler is complete",
            "cluster-a/ruler",
            "cluster-b/ruler",
            "cluster-c/ruler",
        ]);
        assert!(
            !waited.stdout.contains("cannot be read"),
            "every member was read throughout: {waited:#?}"
        );
        for cluster in &clusters.clusters {
            let state = rollout_state(&cluster.client(), namespace, &group.statefulset).await;
            assert!(
                state.is_complete(),
                "{} was complete when wait said so: {state:#?}\n{waited:#?}",
                cluster.name
            );
        }
        check_rollout_guarantees(&clusters.merged_timeline(), &group.zones(), from).unwrap();
    });
}

/// The step a group's approval wait names (`… --step STEP …`), if it awaits one.
fn awaited_step(status: &GroupStatus) -> Option<String> {
    let waiting = status.waiting.as_ref()?;
    let (_, after) = waiting.message.split_once("--step ")?;
    after.split_whitespace().next().map(str::to_owned)
}

/// `key` on `group`'s StatefulSet in `cluster`, as that cluster holds it.
async fn annotation(
    clusters: &ClusterTrio,
    cluster: &str,
    group: &Group,
    key: &str,
) -> Option<String> {
    Api::<StatefulSet>::namespaced(clusters.cluster(cluster).client(), clusters.namespace())
        .get(&group.statefulset)
        .await
        .unwrap_or_else(|error| panic!("{} in {cluster}: {error}", group.statefulset))
        .metadata
        .annotations
        .unwrap_or_default()
        .remove(key)
}

/// Once the controller says `group` awaits approval of the first step of its member in
/// `cluster`, approves the step `kubectl baton status --cluster …` names, with `kubectl baton
/// approve --step` across the trio; checks that every member carries it, each in its own
/// cluster, and returns it.
async fn approve_awaited(clusters: &ClusterTrio, group: &Group, cluster: &str) -> String {
    let member = group.member(cluster);
    let controller = clusters
        .wait_status(group, &format!("{member} awaiting approval"), |status| {
            status.phase == RolloutPhase::AwaitingApproval
                && awaited_step(status).is_some_and(|step| step.starts_with(&format!("{member}/")))
        })
        .await;
    let members = clusters.kubeconfigs();
    let namespace = clusters.namespace();
    let run = kubectl_baton_across(
        &members,
        &["status", &group.name, "-n", namespace, "-o", "json"],
    )
    .await;
    let document: RolloutStatus =
        serde_json::from_str(&run.exited(0).stdout).expect("a RolloutStatus document");
    let step = awaited_step(&document.groups[0])
        .unwrap_or_else(|| panic!("the plugin's status names the step: {run:#?}"));
    assert_eq!(
        Some(&step),
        awaited_step(&controller).as_ref(),
        "the plugin and the controller await the same step"
    );
    assert!(step.ends_with("/0"), "{member}'s first step: {step}");
    let on_every_member: Vec<String> = CLUSTERS
        .iter()
        .map(|cluster| format!("statefulset/{} in cluster {cluster}", group.statefulset))
        .collect();
    kubectl_baton_across(
        &members,
        &["approve", &group.name, "--step", &step, "-n", namespace],
    )
    .await
    .exited(0)
    .says(&[&format!(
        "of rollout group {}: {APPROVED_ANNOTATION}={step} on {}",
        group.name,
        on_every_member.join(", ")
    )]);
    for cluster in CLUSTERS {
        assert_eq!(
            annotation(clusters, cluster, group, APPROVED_ANNOTATION).await,
            Some(step.clone()),
            "the approval in {cluster}"
        );
    }
    step
}

#[test]
fn kubectl_baton_approves_each_step_on_every_member_and_pauses_a_member_in_its_own_cluster() {
    ClusterTrio::scenario(|clusters| async move {
        let members = clusters.kubeconfigs();
        let namespace = clusters.namespace();
        // Given a ready group `query-frontend` of one StatefulSet per cluster, 2 pods each,
        // asking for a person's approval of each zone's first step
        let group = Group::new("query-frontend", 2, 1);
        clusters
            .create_group(&group, |_, fixture| {
                fixture.annotation(APPROVAL_ANNOTATION, "zone")
            })
            .await;

        // When a new version is deployed to every cluster
        let from = clusters.roll_out(&group, "v2").await;

        // Then a deploy pipeline waiting across the clusters stops: cluster-a's first step
        // awaits a person, and the wait says how to approve it across clusters
        wait_across(&members, namespace, &group.name, "1m")
            .await
            .exited(6)
            .complains(&[
                "rollout group query-frontend awaits approval: cluster-a/query-frontend awaits approval of its first step",
                "--cluster cluster-a --cluster cluster-b --cluster cluster-c",
            ]);

        // When a person approves the step the status names, across the three clusters
        approve_awaited(clusters, &group, "cluster-a").await;

        // and pauses cluster-c's member, named as the status names it
        let last = group.member("cluster-c");
        kubectl_baton_across(&members, &["pause", &last, "-n", namespace])
            .await
            .exited(0)
            .says(&[&format!(
                "statefulset/{} in cluster cluster-c: {ROLLOUT_PAUSED_ANNOTATION} set to \"true\"",
                group.statefulset
            )]);
        // Then it is paused in cluster-c alone, on its own StatefulSet
        for cluster in CLUSTERS {
            assert_eq!(
                annotation(clusters, cluster, &group, ROLLOUT_PAUSED_ANNOTATION).await,
                (cluster == "cluster-c").then(|| "true".to_owned()),
                "paused in {cluster}"
            );
        }

        // When cluster-a is done, cluster-b's first step awaits approval: a member that cannot be
        // read refuses it, naming the member, and nothing is written anywhere
        clusters
            .wait_status(&group, "cluster-b awaiting approval", |status| {
                awaited_step(status).is_some_and(|step| {
                    step.starts_with(&format!("{}/", group.member("cluster-b")))
                })
            })
            .await;
        let directory = tempfile::tempdir().expect("a temporary directory");
        let down = directory.path().join("down.kubeconfig");
        write_unreachable_kubeconfig(&down).expect("the unreachable member's kubeconfig");
        let mut with_down = members.clone();
        with_down.push(("cluster-d", &down));
        kubectl_baton_across(&with_down, &["approve", &group.name, "-n", namespace])
            .await
            .exited(1)
            .complains(&[
                "cannot reach member cluster cluster-d (context cluster-d, https://127.0.0.1:1/)",
                "nothing written",
            ]);
        for cluster in CLUSTERS {
            let approved = annotation(clusters, cluster, &group, APPROVED_ANNOTATION).await;
            assert!(
                approved.is_some_and(
                    |step| step.starts_with(&format!("{}/", group.member("cluster-a")))
                ),
                "{cluster} still carries cluster-a's approval alone"
            );
        }
        assert_eq!(clusters.updated_pods(&group, "cluster-b").await, 0);
        // and across the trio alone the person approves it
        approve_awaited(clusters, &group, "cluster-b").await;

        // Then cluster-b rolls to the end, and the group waits on cluster-c's pause: no pod of
        // cluster-c is deleted
        clusters
            .wait_status(&group, "the group waiting on cluster-c's pause", |status| {
                status.waiting.as_ref().is_some_and(|waiting| {
                    waiting.kind == "Paused" && waiting.message.contains(&last)
                })
            })
            .await;
        assert_eq!(clusters.updated_pods(&group, "cluster-b").await, 2);
        assert_eq!(clusters.deleted_pods(&last, from), Vec::<String>::new());

        // When the person resumes cluster-c's member
        kubectl_baton_across(&members, &["resume", &last, "-n", namespace])
            .await
            .exited(0)
            .says(&[&format!(
                "statefulset/{} in cluster cluster-c: {ROLLOUT_PAUSED_ANNOTATION} removed (was \"true\")",
                group.statefulset
            )]);
        // Then its first step awaits approval too; approved, the rollout completes, one cluster
        // at a time, the zone rule held at every step of the merged timeline
        approve_awaited(clusters, &group, "cluster-c").await;
        clusters.wait_complete(&group).await;
        let timeline = clusters.merged_timeline();
        check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
        assert_one_at_a_time(&windows(&timeline, &group, from), &group, Duration::ZERO);
        assert_eq!(
            annotation(clusters, "cluster-c", &group, ROLLOUT_PAUSED_ANNOTATION).await,
            None
        );
    });
}

#[test]
fn a_new_leader_in_the_hub_finishes_the_cross_cluster_rollout_the_old_one_started() {
    ClusterTrio::scenario_apart(
        || ClusterTrio::start("failover", &[]),
        |clusters| async move {
            let _witness = clusters.witness();
            // Given a second controller in the hub, with the same members, standing by
            let config = clusters.config_path().to_string_lossy().into_owned();
            let hub = clusters.cluster(CLUSTERS[0]);
            let mut standby = Controller::start_dying_with_parent(
                &hub.control_plane,
                clusters.namespace(),
                &[("BATON_CONFIG", config.as_str())],
            )
            .await;
            wait_until(TIMEOUT, "the first controller leads", || async {
                clusters.controller.is_leader().await
            })
            .await;
            assert!(!standby.is_leader().await, "one leader");
            // and a group rolling across the three clusters
            let group = Group::new("ingester", 3, 1);
            clusters.create_group(&group, |_, fixture| fixture).await;
            let from = clusters.roll_out(&group, "v2").await;

            // When the leader dies while cluster-a rolls
            let first = group.member("cluster-a");
            wait_until(TIMEOUT, "cluster-a's rollout started", || async {
                !clusters.deleted_pods(&first, from).is_empty()
            })
            .await;
            clusters
                .controller
                .process
                .signal("KILL")
                .expect("killing the leader");

            // Then the standby leads, lists every member, and finishes the rollout: one cluster
            // at a time, the zone rule held at every step across the two leaders, each old pod
            // deleted once
            clusters.wait_complete(&group).await;
            assert!(standby.is_leader().await, "the standby took over");
            assert!(
                !standby.process.has_exited(),
                "{}",
                standby.process.output()
            );
            let timeline = clusters.merged_timeline();
            check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
            assert_one_at_a_time(&windows(&timeline, &group, from), &group, Duration::ZERO);
            for member in group.members() {
                assert_eq!(
                    clusters.deleted_pods(&member, from).len(),
                    3,
                    "each old pod of {member} deleted once"
                );
            }
        },
    );
}

#[test]
fn a_rollback_across_clusters_writes_each_template_back_in_its_cluster_and_goes_back_the_last_reached_first()
 {
    ClusterTrio::scenario(|clusters| async move {
        // Given a ready group `alertmanager`, whose rollout finished in cluster-a and is half-way
        // in cluster-b (the replacement of its first pod, at the new revision, does not start
        // yet)
        let group = Group::new("alertmanager", 3, 1);
        clusters.create_group(&group, |_, fixture| fixture).await;
        let b = clusters.cluster("cluster-b");
        let held = format!("{}-0", group.statefulset);
        b.simulator.hold_replacement(&held).await;
        let before = templates_and_revisions(clusters, &group).await;
        let from = clusters.roll_out(&group, "v2").await;
        wait_until(TIMEOUT, "cluster-a done and cluster-b half-way", || async {
            clusters.updated_pods(&group, "cluster-a").await == 3
                && !clusters
                    .deleted_pods(&group.member("cluster-b"), from)
                    .is_empty()
                && clusters.updated_pods(&group, "cluster-b").await == 1
        })
        .await;

        // When a person asks for a rollback with kubectl baton across the trio
        let asked = Instant::now();
        let sts = &group.statefulset;
        let requested = kubectl_baton_across(
            &clusters.kubeconfigs(),
            &[
                "rollback",
                &group.name,
                "--reason",
                "latency doubled",
                "-n",
                clusters.namespace(),
            ],
        )
        .await;
        // Then it decided as the controller does, cluster-b (reached last) going back first, and
        // wrote the request on every member, each in its own cluster
        requested.exited(0).says(&[
            &format!(
                "rollback of rollout group {} requested (baton.dev/rollback on statefulset/{sts} \
                 in cluster cluster-a, statefulset/{sts} in cluster cluster-b, statefulset/{sts} \
                 in cluster cluster-c): cluster-b/{sts} from ",
                group.name
            ),
            &format!("then cluster-a/{sts} from "),
            &format!(
                "follow it with: kubectl baton wait {} -n {} --cluster cluster-a \
                 --cluster cluster-b --cluster cluster-c",
                group.name,
                clusters.namespace()
            ),
        ]);
        for cluster in CLUSTERS {
            let request = Api::<StatefulSet>::namespaced(
                clusters.cluster(cluster).client(),
                clusters.namespace(),
            )
            .get(sts)
            .await
            .expect("the member")
            .metadata
            .annotations
            .unwrap_or_default()
            .remove(ROLLBACK_ANNOTATION);
            // (unless the controller started it already, which removes the request)
            assert!(
                request
                    .as_ref()
                    .is_none_or(|why| why.starts_with("kubectl baton rollback by ")
                        && why.ends_with(": latency doubled")),
                "the request in {cluster}: {request:?}"
            );
        }
        b.simulator.release(&held).await;

        // Then the group is rolled back: every template written back in its own cluster from
        // that cluster's ControllerRevisions, every pod back at the revision from before
        let status = clusters
            .wait_status(&group, "the group rolled back", |status| {
                status.phase == RolloutPhase::RolledBack
            })
            .await;
        assert!(
            status
                .rollback
                .as_deref()
                .is_some_and(|why| why.contains("latency doubled")),
            "{status:#?}"
        );
        let after = templates_and_revisions(clusters, &group).await;
        for cluster in CLUSTERS {
            let (template, revision) = (&before[cluster].0, &before[cluster].1.update_revision);
            let state = &after[cluster].1;
            assert_eq!(
                &after[cluster].0, template,
                "{cluster}: the template from before the rollout, written back"
            );
            assert_eq!(
                &state.update_revision, revision,
                "{cluster}: the update revision from before: {state:?}"
            );
            assert!(
                state.is_complete()
                    && state.pod_revisions.len() == 3
                    && state.pod_revisions.values().all(|pod| pod == revision),
                "{cluster}: every pod back at {revision}: {state:?}"
            );
        }
        // zone by zone, cluster-b (the one the rollout reached last) first, cluster-c never
        // touched, the zone rule held at every step of the three clusters' timeline
        let timeline = clusters.merged_timeline();
        check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
        let back = windows(&timeline, &group, asked);
        let order: Vec<&str> = back
            .iter()
            .filter(|(_, window)| window.started.is_some())
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(
            order,
            [group.member("cluster-b"), group.member("cluster-a")],
            "cluster-b goes back first, then cluster-a: {back:?}"
        );
        assert!(
            clusters
                .deleted_pods(&group.member("cluster-c"), from)
                .is_empty(),
            "cluster-c never rolled, so nothing there goes back"
        );
        // And the rollback's start was told in cluster-b, on its own StatefulSet
        wait_event(
            &b.client(),
            clusters.namespace(),
            &group.statefulset,
            "RollbackStarted",
            &["latency doubled"],
        )
        .await;
    });
}

/// Per cluster, the pod template of `group`'s StatefulSet and its rollout state.
async fn templates_and_revisions(
    clusters: &ClusterTrio,
    group: &Group,
) -> BTreeMap<&'static str, (serde_json::Value, RolloutState)> {
    let mut seen = BTreeMap::new();
    for cluster in CLUSTERS {
        let client = clusters.cluster(cluster).client();
        let template = Api::<StatefulSet>::namespaced(client.clone(), clusters.namespace())
            .get(&group.statefulset)
            .await
            .unwrap_or_else(|error| panic!("reading {cluster}'s {}: {error}", group.statefulset))
            .spec
            .map(|spec| spec.template);
        let template = serde_json::to_value(template).expect("a template serializes");
        let state = rollout_state(&client, clusters.namespace(), &group.statefulset).await;
        seen.insert(cluster, (template, state));
    }
    seen
}

/// deploy/member-cluster'ss guards in a member cluster: its users may write StatefulSet annotations
/// beside the groups, and the hub reads baton's memory there as its own. Without the guards a
/// past `clearedAt` written in cluster-b would skip the soak before cluster-b; with them it is
/// refused, and so is every other forgery of that memory, while the hub's own writes (as
/// deploy/member-cluster'ss `baton-member`) go through. The guard judges every group of cluster-b's
/// namespace and fails closed, so the scenario takes the trio alone.
#[test]
fn a_member_clusters_user_cannot_forge_batons_memory_there_and_each_cluster_waits_its_soak() {
    use baton_core::annotations::{
        CHECK_STATE_ANNOTATION, GATE_STATE_ANNOTATION, HOOK_STATE_ANNOTATION,
    };
    use baton_e2e::manifests::deploy_dir;
    use baton_e2e::rbac_support::{MEMBER_IDENTITY, impersonating};
    use baton_e2e::renders::{find, kustomized_member_cluster, run};
    use baton_e2e::webhook_support::{
        MatchConditions, ShippedConfigurations, TestTls, WebhookReplica,
    };
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

    ClusterTrio::scenario_alone(|clusters| async move {
        let soak = Duration::from_secs(20);
        let ns = clusters.namespace();
        let b = clusters.cluster("cluster-b");

        // Given cluster-b installed as deploy/member-cluster installs a member: its webhook lets
        // the hub's identity there (baton-member) set baton's memory, and nobody else, ...
        let members = kustomized_member_cluster();
        let webhook = find(&members, "Deployment", "baton-webhook");
        let variable = |name: &str| {
            webhook["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()
                .expect("the webhook's environment")
                .iter()
                .find(|variable| variable["name"] == name)
                .and_then(|variable| variable["value"].as_str())
                .unwrap_or_else(|| panic!("deploy/member-cluster sets {name}"))
                .to_owned()
        };
        let writers = variable("BATON_WEBHOOK__STATE_WRITERS");
        assert_eq!(writers, member_user(), "the hub's identity, alone");
        // ... and its records (the hub follows a downscale up in cluster-b's ledger) to the
        // hub's identity and the webhook itself, ...
        let record_writers = variable("BATON_WEBHOOK__RECORD_WRITERS");
        assert_eq!(
            record_writers,
            format!(
                "{},system:serviceaccount:baton-system:baton-webhook,system:serviceaccount:baton-system:baton-peer",
                member_user()
            )
        );
        let deployments: Vec<&str> = members
            .iter()
            .filter(|object| object["kind"] == "Deployment")
            .filter_map(|object| object["metadata"]["name"].as_str())
            .collect();
        assert_eq!(deployments, ["baton-webhook"], "no controller in a member");
        // (every object of it valid: cluster-b's API server takes them in a server-side dry
        // run, baton-system made first as a real apply would)
        let system: Namespace =
            serde_json::from_value(json!({"metadata": {"name": "baton-system"}}))
                .expect("a Namespace");
        let _ = Api::<Namespace>::all(b.client())
            .create(&PostParams::default(), &system)
            .await;
        let (valid, output) = run(
            "kubectl",
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-k",
                deploy_dir()
                    .join("member-cluster")
                    .to_str()
                    .expect("a UTF-8 path"),
            ],
            Some(&b.control_plane),
        );
        assert!(valid, "deploy/member-cluster in cluster-b:\n{output}");
        // ... its state and record guards fail closed ...
        let guards = ["baton-state-guard", "baton-record-guard"];
        for guard in guards {
            let configuration = find(&members, "ValidatingWebhookConfiguration", guard);
            for webhook in configuration["webhooks"].as_array().expect("webhooks") {
                assert_eq!(webhook["failurePolicy"], "Fail", "{guard}");
            }
        }
        // ... and only cluster-b's API server may send it reviews (its client certificate)
        let tls = TestTls::generate().expect("a test CA");
        let client_ca = b.control_plane.handshake().webhook_client_ca_file.clone();
        let replica = WebhookReplica::start_with(
            &b.control_plane,
            &tls,
            ns,
            &[
                ("BATON_WEBHOOK__STATE_WRITERS", &writers),
                ("BATON_WEBHOOK__RECORD_WRITERS", &record_writers),
                (
                    "BATON_WEBHOOK__CLIENT_CA_FILE",
                    client_ca.to_str().expect("a UTF-8 path"),
                ),
            ],
        )
        .await
        .expect("baton-webhook starts against cluster-b");
        // (dropped before the replica: a configuration left calling a stopped replica would
        // refuse every group's writes in cluster-b)
        let _guards = ShippedConfigurations::register_from(
            &b.control_plane,
            &members,
            ns,
            &tls,
            &replica,
            &guards,
            MatchConditions::AsShipped,
        )
        .await
        .expect("registering deploy/member-cluster'ss guards in cluster-b");
        let statefulsets = Api::<StatefulSet>::namespaced(b.client(), ns);
        wait_until(
            TIMEOUT,
            "cluster-b's API server calls the state guard",
            || async {
                let probe = StatefulSetFixture::new("guard-probe")
                    .label("rollout-group", "guard-probe")
                    .annotation(CHECK_STATE_ANNOTATION, "{}")
                    .build();
                match statefulsets.create(&PostParams::default(), &probe).await {
                    Err(refused) => refused.to_string().contains("only baton's controller sets"),
                    Ok(_) => {
                        let _ = statefulsets
                            .delete("guard-probe", &Default::default())
                            .await;
                        false
                    }
                }
            },
        )
        .await;

        // and a user of the groups' namespace in cluster-b who may edit its StatefulSets and
        // ConfigMaps
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "statefulset-editor"},
            "rules": [{"apiGroups": ["apps"], "resources": ["statefulsets", "statefulsets/status"],
                       "verbs": ["get", "list", "watch", "update", "patch"]},
                      {"apiGroups": [""], "resources": ["configmaps"],
                       "verbs": ["get", "create", "update", "patch"]}],
        }))
        .expect("a Role");
        Api::<Role>::namespaced(b.client(), ns)
            .create(&PostParams::default(), &role)
            .await
            .expect("the editor's Role");
        // (the same rights for a ServiceAccount of the groups' namespace named as the hub's
        // identity: whoever may create service accounts and tokens there can act as it)
        let lookalike = format!("system:serviceaccount:{ns}:{}", MEMBER_IDENTITY.1);
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "statefulset-editor"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "statefulset-editor"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
                {"kind": "ServiceAccount", "namespace": ns, "name": MEMBER_IDENTITY.1},
            ],
        }))
        .expect("a RoleBinding");
        Api::<RoleBinding>::namespaced(b.client(), ns)
            .create(&PostParams::default(), &binding)
            .await
            .expect("the editor's RoleBinding");
        let as_alice = Api::<StatefulSet>::namespaced(
            impersonating(&b.control_plane, "alice")
                .await
                .expect("a client as alice"),
            ns,
        );
        let as_lookalike = Api::<StatefulSet>::namespaced(
            impersonating(&b.control_plane, &lookalike)
                .await
                .expect("a client as the lookalike"),
            ns,
        );

        // and a ready group `memory` of one StatefulSet per cluster with a 20 s soak
        let group = Group::new("memory", 2, 1);
        clusters
            .create_group(&group, |_, fixture| {
                fixture.annotation(SOAK_ANNOTATION, "20s")
            })
            .await;

        // When a version is deployed, and cluster-a's member is done: the hub starts
        // cluster-b's soak, its gate state written in cluster-b as baton-member
        let from = clusters.roll_out(&group, "v2").await;
        wait_until(TIMEOUT, "the hub writes cluster-b's soak start", || async {
            annotation(clusters, "cluster-b", &group, GATE_STATE_ANNOTATION)
                .await
                .is_some_and(|state| state.contains("soakStartedAt"))
        })
        .await;
        let revision = statefulsets
            .get(&group.statefulset)
            .await
            .expect("cluster-b's member")
            .status
            .and_then(|status| status.update_revision)
            .expect("cluster-b's update revision");

        // and alice writes cluster-b's gate state as cleared long ago, to skip the soak
        let cleared = format!(r#"{{"revision":"{revision}","clearedAt":"2026-01-01T00:00:00Z"}}"#);
        let forged = |key: &str, value: &str| json!({"metadata": {"annotations": {key: value}}});
        let refused = as_alice
            .patch(
                &group.statefulset,
                &PatchParams::default(),
                &Patch::Merge(&forged(GATE_STATE_ANNOTATION, &cleared)),
            )
            .await
            .expect_err("a forged clearedAt is refused in cluster-b")
            .to_string();
        // Then it is refused, naming the annotation and the user
        assert!(
            refused.contains(
                "baton.dev/gate-state is baton's memory of the rollout, which only baton's \
                 controller sets (alice may not)"
            ),
            "{refused}"
        );
        // and so are a hook state saying cluster-b's hooks answered, and a check state with
        // passes it never made
        let hooked = format!(
            r#"{{"revision":"{revision}","before":{{"done":true,"attempts":0,"last":"HTTP 204"}}}}"#
        );
        for (key, value) in [
            (HOOK_STATE_ANNOTATION, hooked.as_str()),
            (CHECK_STATE_ANNOTATION, r#"{"passes":99,"failures":0}"#),
        ] {
            let refused = as_alice
                .patch(
                    &group.statefulset,
                    &PatchParams::default(),
                    &Patch::Merge(&forged(key, value)),
                )
                .await
                .expect_err("forged state is refused in cluster-b")
                .to_string();
            assert!(
                refused.contains(&format!("{key} is baton's memory of the rollout")),
                "{refused}"
            );
        }
        // and so is the gate state written through the status subresource: refused, or at
        // least never stored
        if let Ok(written) = as_alice
            .patch_status(
                &group.statefulset,
                &PatchParams::default(),
                &Patch::Merge(&forged(GATE_STATE_ANNOTATION, &cleared)),
            )
            .await
        {
            let stored = written.metadata.annotations.unwrap_or_default();
            assert!(
                stored
                    .get(GATE_STATE_ANNOTATION)
                    .is_none_or(|state| !state.contains("2026-01-01")),
                "a gate state forged through the status subresource was stored: {stored:?}"
            );
        }
        // and so is the same write by a ServiceAccount of the groups' namespace named as the
        // hub's identity: only baton-system's is the hub's
        let refused = as_lookalike
            .patch(
                &group.statefulset,
                &PatchParams::default(),
                &Patch::Merge(&forged(GATE_STATE_ANNOTATION, &cleared)),
            )
            .await
            .expect_err("the lookalike's clearedAt is refused")
            .to_string();
        assert!(
            refused.contains(&format!("({lookalike} may not)")),
            "{refused}"
        );
        // and a review sent to cluster-b's webhook by anyone but its API server, claiming to be
        // the hub's identity, is not even read
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "forged-member", "operation": "UPDATE", "name": group.statefulset,
                "namespace": ns,
                "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
                "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
                "userInfo": {"username": member_user()},
                "object": forged(GATE_STATE_ANNOTATION, &cleared),
                "oldObject": {"metadata": {}},
        }});
        let answered = tls
            .client()
            .expect("an HTTPS client")
            .post(replica.url("/admission/state-guard"))
            .json(&review)
            .send()
            .await;
        assert!(
            answered.is_err(),
            "a forged review was answered: {answered:?}"
        );
        // and the lookalike of the hub's identity, with the rights on ConfigMaps, writes no record
        // of baton's in cluster-b, where the hub's identity itself does (a downscale's follow-up)
        let record: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "baton-downscale-memory",
                         "labels": {"app.kubernetes.io/managed-by": "baton"}},
            "data": {"memory": r#"{"at":"2020-01-01T00:00:00Z"}"#},
        }))
        .expect("a ConfigMap");
        let lookalike_config_maps = Api::<ConfigMap>::namespaced(
            impersonating(&b.control_plane, &lookalike)
                .await
                .expect("a client as the lookalike"),
            ns,
        );
        let refused = lookalike_config_maps
            .create(&PostParams::default(), &record)
            .await
            .expect_err("the lookalike writes no records in cluster-b");
        assert!(
            refused.to_string().contains("is one of baton's records"),
            "refused by the record guard, not for want of rights: {refused}"
        );
        let as_member = baton_e2e::control_plane::supervisor::client_from(
            b.control_plane
                .service_account_kubeconfig(MEMBER_IDENTITY.0, MEMBER_IDENTITY.1)
                .expect("the member identity's kubeconfig"),
        )
        .await
        .expect("a client as the member identity");
        let member_config_maps = Api::<ConfigMap>::namespaced(as_member, ns);
        member_config_maps
            .create(&PostParams::default(), &record)
            .await
            .expect("the hub's identity writes baton's records in cluster-b");
        // (the hub's identity deletes no ConfigMap: the test's own client removes it)
        Api::<ConfigMap>::namespaced(b.client(), ns)
            .delete("baton-downscale-memory", &Default::default())
            .await
            .expect("removing the record");
        // and cluster-b is still soaking: not a pod of it updated, the forged state not stored
        assert_eq!(clusters.updated_pods(&group, "cluster-b").await, 0);
        let stored = annotation(clusters, "cluster-b", &group, GATE_STATE_ANNOTATION).await;
        assert!(
            stored
                .as_deref()
                .is_none_or(|state| !state.contains("2026-01-01")),
            "{stored:?}"
        );

        // And the hub's own writes in cluster-b go through: the group completes, cluster by
        // cluster, cluster-b a soak after cluster-a and cluster-c a soak after cluster-b, the
        // zone rule held at every step
        clusters.wait_complete(&group).await;
        let timeline = clusters.merged_timeline();
        check_rollout_guarantees(&timeline, &group.zones(), from).unwrap();
        assert_one_at_a_time(&windows(&timeline, &group, from), &group, soak);
        clusters
            .wait_status(&group, "the group complete", |status| {
                status.phase == RolloutPhase::Complete
            })
            .await;
    });
}

/// The token in a file of the controller's reach that a kubeconfig's `tokenFile` names: it
/// must never reach the recording server.
const TOKEN_IN_A_FILE: &str = "token-of-a-file-in-the-controllers-reach";

/// Writes `kubeconfig` under [`KUBECONFIG_KEY`] of the Secret `name` (server-side apply, as
/// the trio writes its Secrets, so [`ClusterTrio::write_secret`] replaces it).
async fn write_kubeconfig(secrets: &Api<Secret>, name: &str, kubeconfig: &serde_json::Value) {
    let text = serde_json::to_string_pretty(kubeconfig).expect("a kubeconfig");
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {KUBECONFIG_KEY: k8s_openapi::ByteString(text.into_bytes())},
    }))
    .expect("a Secret");
    secrets
        .patch(
            name,
            &PatchParams::apply("baton-e2e").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap_or_else(|error| panic!("writing Secret {name}: {error}"));
}

#[test]
fn a_cluster_kubeconfig_that_reads_a_file_runs_a_program_proxies_or_skips_tls_checks_is_refused_by_field_and_calls_nothing()
 {
    ClusterTrio::scenario_apart(
        || ClusterTrio::start_without_secret("kubeconfigs", "cluster-c"),
        |clusters| async move {
            let namespace = clusters.namespace().to_owned();
            let secret = kubeconfig_secret("cluster-c");
            let secrets =
                Api::<Secret>::namespaced(clusters.cluster("cluster-a").client(), &namespace);

            // Given a ready group `ingester` of one StatefulSet per cluster, 2 pods each, a
            // controller started with no Secret for cluster-c, and a TLS server of the test's
            // that records every connection and request reaching it
            let group = Group::new("ingester", 2, 1);
            clusters.create_group(&group, |_, fixture| fixture).await;
            let tls = TestTls::generate().expect("a test CA");
            let recorder = RecordingTlsServer::start(&tls).expect("the recording TLS server");
            let ca_data = base64::engine::general_purpose::STANDARD.encode(&tls.ca_pem);
            // and files in the controller's reach (it runs as a process of the test): a token,
            // the server's CA, a client certificate and key; and where a program run would
            // leave its mark
            let files = tempfile::tempdir().expect("a folder");
            let file = |name: &str, contents: &str| {
                let path = files.path().join(name);
                std::fs::write(&path, contents).expect("a file");
                path.to_string_lossy().into_owned()
            };
            let token_file = file("token", TOKEN_IN_A_FILE);
            let ca_file = file("ca.crt", &tls.ca_pem);
            let certificate_file = file("client.crt", &tls.cert_pem);
            let key_file = file("client.key", &tls.key_pem);
            let exec_ran = files.path().join("exec-ran");
            let cmd_path_ran = files.path().join("cmd-path-ran");
            let credential = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-a-program"}}"#;

            // When a new version is deployed to every cluster
            let from = clusters.roll_out(&group, "v2").await;

            let checked = json!({"server": recorder.url(), "certificate-authority-data": ca_data});
            let with = |base: &serde_json::Value, key: &str, value: serde_json::Value| {
                let mut object = base.clone();
                object[key] = value;
                object
            };
            let token = json!({"token": "inline"});
            let cluster_field = |key: &str| format!("clusters[\"cluster-c\"].cluster.{key}");
            let user_field = |key: &str| format!("users[\"baton\"].user.{key}");
            let cases = [
                (
                    vec![user_field("tokenFile")],
                    checked.clone(),
                    json!({"tokenFile": token_file}),
                ),
                (
                    vec![user_field("exec")],
                    checked.clone(),
                    json!({"exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "/bin/sh",
                        "args": ["-c", format!("touch {}; echo '{credential}'", exec_ran.display())],
                        "interactiveMode": "Never",
                    }}),
                ),
                (
                    vec![user_field("auth-provider")],
                    checked.clone(),
                    json!({"auth-provider": {"name": "gcp", "config": {
                        "cmd-path": "/bin/sh",
                        "cmd-args": format!("-c 'touch {}; echo {{\"token\":\"x\"}}'", cmd_path_ran.display()),
                        "token-key": "{.token}",
                    }}}),
                ),
                (
                    vec![user_field("client-certificate"), user_field("client-key")],
                    checked.clone(),
                    json!({"client-certificate": certificate_file, "client-key": key_file}),
                ),
                (
                    vec![cluster_field("certificate-authority")],
                    json!({"server": recorder.url(), "certificate-authority": ca_file}),
                    token.clone(),
                ),
                (
                    vec![cluster_field("proxy-url")],
                    with(
                        &checked,
                        "proxy-url",
                        json!(format!("http://{}", recorder.address)),
                    ),
                    token.clone(),
                ),
                (
                    vec![cluster_field("insecure-skip-tls-verify")],
                    json!({"server": recorder.url(), "insecure-skip-tls-verify": true}),
                    token.clone(),
                ),
                (
                    vec![user_field("username"), user_field("password")],
                    checked.clone(),
                    json!({"username": "admin", "password": "admin"}),
                ),
                (
                    vec![user_field("as")],
                    checked.clone(),
                    with(&token, "as", json!("system:admin")),
                ),
            ];
            for (fields, cluster, user) in cases {
                // When cluster-c's Secret holds a kubeconfig for the recording server that
                // uses `fields`
                let kubeconfig = json!({
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "cluster-c", "cluster": cluster}],
                    "users": [{"name": "baton", "user": user}],
                    "contexts": [{"name": "member", "context": {"cluster": "cluster-c", "user": "baton"}}],
                    "current-context": "member",
                });
                write_kubeconfig(&secrets, &secret, &kubeconfig).await;

                // Then the status holds the group on cluster-c, naming the Secret, the member
                // and each field
                let refused = format!(
                    "key {KUBECONFIG_KEY} of Secret {namespace}/{secret} (member cluster cluster-c) is refused: "
                );
                let status = clusters
                    .wait_status(
                        &group,
                        &format!("cluster-c held out for {fields:?}"),
                        |status| {
                            status.waiting.as_ref().is_some_and(|waiting| {
                                waiting.kind == "MemberUnreachable"
                                    && waiting.message.contains(&refused)
                                    && fields.iter().all(|field| waiting.message.contains(field))
                            })
                        },
                    )
                    .await;
                assert_eq!(
                    cluster_out(&clusters.controller.metrics().await, "cluster-c"),
                    Some(1.0),
                    "cluster-c is out for {fields:?}: {status:#?}"
                );
                // And nothing reached the recording server, no program ran
                assert_eq!(
                    recorder.seen(),
                    Vec::<String>::new(),
                    "what reached the recording server with {fields:?}"
                );
                assert!(!exec_ran.exists(), "exec ran its program ({fields:?})");
                assert!(!cmd_path_ran.exists(), "cmd-path ran ({fields:?})");
            }

            // And no pod was deleted in any cluster while cluster-c was out
            for member in group.members() {
                assert_eq!(
                    clusters.deleted_pods(&member, from),
                    Vec::<String>::new(),
                    "no pod of {member} deleted while cluster-c's kubeconfig was refused"
                );
            }

            // When cluster-c's Secret holds its inline kubeconfig (server, CA data, token)
            // Then cluster-c is listed and the rollout completes one cluster at a time, the
            // zone rule held at every step, and nothing ever reached the recording server
            cluster_c_written_back_completes(&clusters, &group, from).await;
            let seen = recorder.seen();
            assert!(
                seen.iter().all(|what| !what.contains(TOKEN_IN_A_FILE)),
                "{seen:?}"
            );
            assert_eq!(
                seen,
                Vec::<String>::new(),
                "what reached the recording server"
            );
        },
    );
}

#[test]
fn a_pod_in_cluster_b_naming_cluster_a_statefulset_as_its_owner_is_never_counted_nor_deleted_as_cluster_a_s()
 {
    ClusterTrio::scenario(|clusters| async move {
        let namespace = clusters.namespace();
        // Given a ready group `overrides-exporter` of one StatefulSet per cluster, 2 pods each
        // (a name no other scenario on the shared trio takes)
        let group = Group::new("overrides-exporter", 2, 1);
        clusters.create_group(&group, |_, fixture| fixture).await;
        let uid = Api::<StatefulSet>::namespaced(clusters.cluster("cluster-a").client(), namespace)
            .get(&group.statefulset)
            .await
            .expect("cluster-a's StatefulSet")
            .metadata
            .uid
            .expect("its uid");

        // When someone who may create pods in cluster-b creates one there named as
        // cluster-a's next pod would be, with its StatefulSet's labels, and an owner reference
        // naming that StatefulSet's uid as its controller (the apiVersion is one cluster-b does
        // not serve, so that its garbage collector, which deletes a pod whose owner it finds
        // gone, cannot look and leaves it: baton reads an owner by kind and uid)
        let forged = format!("{}-{}", group.statefulset, group.replicas);
        let pods = Api::<Pod>::namespaced(clusters.cluster("cluster-b").client(), namespace);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": forged,
                "labels": {"app.kubernetes.io/instance": group.statefulset},
                "ownerReferences": [{
                    "apiVersion": "apps/v1beta2", "kind": "StatefulSet",
                    "name": group.statefulset, "uid": uid, "controller": true,
                }],
            },
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:v1"}],
                     "terminationGracePeriodSeconds": 0},
        }))
        .expect("a pod");
        let created = pods
            .create(&PostParams::default(), &pod)
            .await
            .expect("the forged pod");
        let forged_uid = created.metadata.uid.clone().expect("its uid");

        // and a new version is deployed to every cluster
        let from = clusters.roll_out(&group, "v2").await;

        // Then every cluster completes (nothing of cluster-a waits on the pod), the status
        // read meanwhile counting at most 2 pods in cluster-a's member and never naming the pod
        let mut statuses = Vec::new();
        {
            let reading = async {
                loop {
                    statuses.extend(clusters.status(&group).await);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            };
            // Every cluster's StatefulSet controller took the new revision, and each of its
            // pods runs it (the forged pod, which matches cluster-b's selector too, aside:
            // `wait_complete` would count it)
            let complete = async {
                for cluster in CLUSTERS {
                    let client = clusters.cluster(cluster).client();
                    wait_until(TIMEOUT, &format!("{cluster} completes"), || async {
                        let state = rollout_state(&client, namespace, &group.statefulset).await;
                        !state.update_revision.is_empty()
                            && state.current_revision == state.update_revision
                            && state.updated() == group.replicas as usize
                            && state.ready_replicas == group.replicas as i32
                    })
                    .await;
                }
            };
            tokio::select! {
                () = complete => {}
                _ = reading => {}
            }
        }
        let complete = [RolloutPhase::Complete; 3];
        let last = clusters
            .wait_status(&group, "every member complete", |status| {
                status.phase == RolloutPhase::Complete
                    && phases(status) == every_member(&group, complete)
            })
            .await;
        assert!(
            last.zones
                .iter()
                .all(|zone| zone.total == 2 && zone.updated == 2),
            "{last:#?}"
        );
        assert!(
            !statuses.is_empty(),
            "the status answered during the rollout"
        );
        for status in &statuses {
            let cluster_a = status
                .zones
                .iter()
                .find(|zone| zone.statefulset == group.member("cluster-a"))
                .expect("cluster-a's member");
            assert!(
                cluster_a.total <= 2,
                "cluster-a's member counts its 2 pods alone: {status:#?}"
            );
            assert!(
                status
                    .waiting
                    .as_ref()
                    .is_none_or(|waiting| !waiting.message.contains(&forged)),
                "the group waits on the forged pod: {status:#?}"
            );
        }

        // And the pod is still there, never deleted nor terminating
        let still = pods
            .get(&forged)
            .await
            .expect("the forged pod is still there");
        assert_eq!(still.metadata.uid.as_deref(), Some(forged_uid.as_str()));
        assert_eq!(still.metadata.deletion_timestamp, None);
        let left: Vec<PodTransition> = clusters
            .merged_timeline()
            .into_iter()
            .filter(|transition| {
                transition.at >= from
                    && transition.uid == forged_uid
                    && matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted)
            })
            .collect();
        assert!(left.is_empty(), "the forged pod left: {left:?}");
        let _ = pods.delete(&forged, &Default::default()).await;
    });
}

mod downscales {
    //! prepare-downscale across member clusters: a webhook per cluster, each claiming a
    //! downscale in a majority of the members' downscale ledgers (docs/multi-cluster.md,
    //! "Downscales").

    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use baton_e2e::downscale_support::{Answer, DownscaleWebhooks, SilentServer, downscale_secret};
    use baton_e2e::http_support::{PodEndpoint, endpoints_on_pods};
    use baton_e2e::keys::{
        MIN_TIME_BETWEEN_ZONES_DOWNSCALE, PREPARE_DOWNSCALE, PREPARE_DOWNSCALE_PATH,
        PREPARE_DOWNSCALE_PORT,
    };
    use baton_e2e::webhook_support::free_port;
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    /// A group of 2 pods per cluster opted in to prepare-downscale with `min_time` between
    /// zones, and a prepare-shutdown endpoint on the pod of each cluster a downscale to 1
    /// removes (each cluster on its own port: the simulators give same-named pods the same
    /// loopback IP).
    async fn prepared_group(
        clusters: &ClusterTrio,
        name: &str,
        min_time: &str,
    ) -> (Group, BTreeMap<&'static str, PodEndpoint>) {
        let group = Group::new(name, 2, 1);
        let ports: BTreeMap<&str, u16> = CLUSTERS
            .iter()
            .map(|cluster| (*cluster, free_port().expect("a free port")))
            .collect();
        clusters
            .create_group(&group, |cluster, fixture| {
                fixture
                    .label(PREPARE_DOWNSCALE, "true")
                    .label(MIN_TIME_BETWEEN_ZONES_DOWNSCALE, min_time)
                    .annotation(PREPARE_DOWNSCALE_PATH, "prepare-shutdown")
                    .annotation(PREPARE_DOWNSCALE_PORT, &ports[cluster].to_string())
            })
            .await;
        let going = [format!("{}-1", group.statefulset)];
        let mut endpoints = BTreeMap::new();
        for cluster in CLUSTERS {
            let simulator = &clusters.cluster(cluster).simulator;
            let mut on = endpoints_on_pods(simulator, &going, ports[cluster]).await;
            endpoints.insert(cluster, on.remove(&going[0]).expect("its endpoint"));
        }
        (group, endpoints)
    }

    fn assert_waits(answer: &Answer, naming: &[&str], outputs: impl Fn() -> String) {
        assert!(!answer.allowed, "{answer:?}\n{}", outputs());
        assert_eq!(answer.code, Some(429), "retryable: {answer:?}");
        assert!(answer.message.contains("is not allowed yet"), "{answer:?}");
        for named in naming {
            assert!(answer.message.contains(named), "{named}: {answer:?}");
        }
    }

    /// The member claims (their keys) in `cluster`'s ledger of `group`.
    async fn member_claims(clusters: &ClusterTrio, cluster: &str, group: &Group) -> Vec<String> {
        Api::<ConfigMap>::namespaced(clusters.cluster(cluster).client(), clusters.namespace())
            .get_opt(&format!("baton-downscale-{}", group.name))
            .await
            .expect("reading the ledger")
            .and_then(|ledger| ledger.data)
            .unwrap_or_default()
            .into_keys()
            .filter(|key| key.starts_with("member_"))
            .collect()
    }

    #[test]
    fn a_downscale_in_cluster_b_is_refused_within_the_min_time_of_one_in_cluster_a_and_allowed_once_it_passed()
     {
        ClusterTrio::scenario(|clusters| async move {
            // Given a group with 20 s between zones' downscales, a member in each cluster,
            // and each cluster's webhook claiming across the three
            let min_time = Duration::from_secs(20);
            let (group, endpoints) = prepared_group(clusters, "down-order", "20s").await;
            let webhooks = DownscaleWebhooks::start(clusters).await;
            let name = group.statefulset.as_str();

            // When cluster-a's member is downscaled, Then that is allowed and its pod told
            let asked_a = Instant::now();
            let answer = webhooks.ask("cluster-a", name, 1, "order-a").await;
            assert!(answer.allowed, "{answer:?}\n{}", webhooks.outputs());
            assert_eq!(
                endpoints["cluster-a"].calls().len(),
                1,
                "cluster-a's pod told"
            );

            // When cluster-b's member is downscaled right after, Then it is refused for now,
            // naming cluster-a's member, and its pod is not told
            let answer = webhooks.ask("cluster-b", name, 1, "order-b-0").await;
            assert_waits(&answer, &["cluster-a/down-order"], || webhooks.outputs());
            assert!(endpoints["cluster-b"].calls().is_empty());

            // and so it stays until the min-time has passed, when it is allowed
            let refused = Mutex::new(0_u32);
            let attempt = Mutex::new(0_u32);
            wait_until(
                TIMEOUT,
                "cluster-b's downscale allowed once cluster-a's min-time passed",
                || async {
                    let uid = {
                        let mut attempt = attempt.lock().unwrap();
                        *attempt += 1;
                        format!("order-b-{attempt}")
                    };
                    let answer = webhooks.ask("cluster-b", name, 1, &uid).await;
                    if !answer.allowed {
                        assert_waits(&answer, &["cluster-a/down-order"], || webhooks.outputs());
                        *refused.lock().unwrap() += 1;
                    }
                    answer.allowed
                },
            )
            .await;
            let allowed_after = asked_a.elapsed();
            assert!(
                allowed_after >= min_time,
                "allowed {allowed_after:?} after cluster-a's, within its min-time"
            );
            assert!(*refused.lock().unwrap() > 0, "refused while it held");
            assert_eq!(
                endpoints["cluster-b"].calls().len(),
                1,
                "cluster-b's pod told"
            );
        });
    }

    #[test]
    fn two_clusters_webhooks_asked_at_one_instant_allow_exactly_one_downscale() {
        ClusterTrio::scenario(|clusters| async move {
            // Given a group with an hour between zones' downscales and the three webhooks
            let (group, endpoints) = prepared_group(clusters, "down-race", "1h").await;
            let webhooks = DownscaleWebhooks::start(clusters).await;
            let name = group.statefulset.as_str();

            // When cluster-a's and cluster-b's webhooks are asked at the same instant
            let (a, b) = tokio::join!(
                webhooks.ask("cluster-a", name, 1, "race-a"),
                webhooks.ask("cluster-b", name, 1, "race-b"),
            );

            // Then exactly one is allowed, and only its pod is told
            assert!(
                a.allowed != b.allowed,
                "a: {a:?}\nb: {b:?}\n{}",
                webhooks.outputs()
            );
            let (winner, loser, refused) = if a.allowed {
                ("cluster-a", "cluster-b", b)
            } else {
                ("cluster-b", "cluster-a", a)
            };
            assert_waits(&refused, &[&group.member(winner)], || webhooks.outputs());
            assert_eq!(endpoints[winner].calls().len(), 1);
            assert!(endpoints[loser].calls().is_empty());
            // and the loser's claim is withdrawn from every ledger it reached, the winner's
            // is in a majority of them
            let mut winners = 0;
            for cluster in CLUSTERS {
                let claims = member_claims(clusters, cluster, &group).await;
                let prefix = format!("member_{loser}_");
                assert!(
                    !claims.iter().any(|key| key.starts_with(&prefix)),
                    "{cluster}: {claims:?}"
                );
                let prefix = format!("member_{winner}_");
                winners += usize::from(claims.iter().any(|key| key.starts_with(&prefix)));
            }
            assert!(winners >= 2, "the winner's claim in {winners} ledgers");
            // and cluster-c, asked next, is refused too: the winner holds the hour
            let c = webhooks.ask("cluster-c", name, 1, "race-c").await;
            assert_waits(&c, &[&group.member(winner)], || webhooks.outputs());
        });
    }

    #[test]
    fn a_member_stopped_leaves_a_majority_and_two_stopped_make_downscales_wait_naming_them_never_passing()
     {
        ClusterTrio::scenario_alone(|clusters| async move {
            // Given a group with an hour between zones' downscales and the three webhooks
            let (group, _endpoints) = prepared_group(clusters, "down-outage", "1h").await;
            let webhooks = DownscaleWebhooks::start(clusters).await;
            let name = group.statefulset.as_str();

            // When cluster-b's API server is stopped, Then a downscale in cluster-a is still
            // allowed: cluster-a and cluster-c are a majority of three
            let b = clusters.stop_apiserver("cluster-b").await;
            let answer = webhooks.ask("cluster-a", name, 1, "outage-1").await;
            assert!(answer.allowed, "{answer:?}\n{}", webhooks.outputs());

            // When cluster-c's is stopped too, Then every downscale in cluster-a waits, naming
            // both members it could not reach, and none passes
            let c = clusters.stop_apiserver("cluster-c").await;
            for attempt in 2..5 {
                let uid = format!("outage-{attempt}");
                let answer = webhooks.ask("cluster-a", name, 1, &uid).await;
                assert_waits(
                    &answer,
                    &[
                        "1 of 3 member clusters, and 2 are needed",
                        "member cluster cluster-b could not be reached",
                        "member cluster cluster-c could not be reached",
                    ],
                    || webhooks.outputs(),
                );
            }

            // When both are back, Then cluster-a's downscale is allowed again
            b.end().await;
            c.end().await;
            let attempt = Mutex::new(4_u32);
            wait_until(TIMEOUT, "cluster-a's downscale allowed again", || async {
                let uid = {
                    let mut attempt = attempt.lock().unwrap();
                    *attempt += 1;
                    format!("outage-{attempt}")
                };
                webhooks.ask("cluster-a", name, 1, &uid).await.allowed
            })
            .await;
        });
    }

    #[test]
    fn a_member_that_takes_connections_and_never_answers_holds_back_no_majority_of_the_others() {
        ClusterTrio::scenario(|clusters| async move {
            // Given a group with an hour between zones' downscales, and cluster-a's webhook
            // reaching cluster-b (first of the others by name) at a listener that accepts TCP
            // connections and never answers
            let (group, endpoints) = prepared_group(clusters, "down-silent", "1h").await;
            let silent = SilentServer::start().await;
            let webhooks = DownscaleWebhooks::start_reaching(
                clusters,
                Some(("cluster-a", "cluster-b", silent.port)),
            )
            .await;
            let name = group.statefulset.as_str();

            // When cluster-a's member is downscaled
            let answer = webhooks.ask("cluster-a", name, 1, "silent-a").await;

            // Then it is allowed (cluster-a and cluster-c are a majority) without waiting for
            // cluster-b, which was asked, and the allowance names it; its pod is told
            assert!(answer.allowed, "{answer:?}\n{}", webhooks.outputs());
            assert_eq!(
                answer.warnings,
                ["member cluster cluster-b had not answered when a majority accepted"],
                "{answer:?}"
            );
            wait_until(TIMEOUT, "cluster-b's silent listener was asked", || async {
                silent.accepted() >= 1
            })
            .await;
            assert_eq!(endpoints["cluster-a"].calls().len(), 1);
            let mut holding = Vec::new();
            for cluster in CLUSTERS {
                let claims = member_claims(clusters, cluster, &group).await;
                if claims
                    .iter()
                    .any(|key| key.starts_with("member_cluster-a_"))
                {
                    holding.push(cluster);
                }
            }
            assert_eq!(holding, ["cluster-a", "cluster-c"], "the claim's majority");
            // and cluster-b's webhook, asked next, is refused: that majority holds the hour
            let b = webhooks.ask("cluster-b", name, 1, "silent-b").await;
            assert_waits(&b, &[&group.member("cluster-a")], || webhooks.outputs());
            assert!(endpoints["cluster-b"].calls().is_empty());
        });
    }

    #[test]
    fn a_peer_webhooks_identity_may_write_records_and_read_pods_and_is_refused_anything_else() {
        use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};

        ClusterTrio::scenario(|clusters| async move {
            // Given the webhooks' Secrets written by the page's `kubectl baton cluster add
            // --service-account baton-system/baton-peer` (the hub given baton-peer by the
            // page's `kubectl apply`), and a downscale allowed through them
            let (group, _endpoints) = prepared_group(clusters, "down-peer", "1h").await;
            let webhooks = DownscaleWebhooks::start(clusters).await;
            let answer = webhooks
                .ask("cluster-c", &group.statefulset, 1, "peer-c")
                .await;
            assert!(answer.allowed, "{answer:?}\n{}", webhooks.outputs());

            // When another cluster's webhook identity acts in a member and in the hub
            for (own, member) in [("cluster-a", "cluster-b"), ("cluster-b", "cluster-a")] {
                let client = DownscaleWebhooks::peer_client(clusters, own, member).await;
                let namespace = clusters.namespace();
                let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
                let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
                let at = format!("{own}'s identity in {member}");

                // Then it reads StatefulSets and pods (an eviction across members watches them)
                // and creates, reads and updates a record
                let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
                pods.list(&ListParams::default())
                    .await
                    .unwrap_or_else(|error| panic!("{at}: listing pods: {error}"));
                statefulsets
                    .get(&group.statefulset)
                    .await
                    .unwrap_or_else(|error| panic!("{at}: reading a StatefulSet: {error}"));
                statefulsets
                    .list(&ListParams::default())
                    .await
                    .unwrap_or_else(|error| panic!("{at}: listing StatefulSets: {error}"));
                let ledger: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("baton-downscale-probe-{own}")},
                    "data": {"a": "1"},
                }))
                .expect("a ConfigMap");
                let mut created = config_maps
                    .create(&PostParams::default(), &ledger)
                    .await
                    .unwrap_or_else(|error| panic!("{at}: creating a ledger: {error}"));
                created.data = Some([("a".to_owned(), "2".to_owned())].into());
                let name = created.metadata.name.clone().expect("a name");
                config_maps
                    .replace(&name, &PostParams::default(), &created)
                    .await
                    .unwrap_or_else(|error| panic!("{at}: updating a ledger: {error}"));

                // and is refused anything else
                let forbidden = |what: &str, result: Result<(), kube::Error>| match result {
                    Err(kube::Error::Api(status)) if status.code == 403 => {}
                    other => panic!("{at}: {what} is not refused: {other:?}"),
                };
                let patch = Patch::Merge(serde_json::json!({"spec": {"replicas": 1}}));
                forbidden(
                    "a StatefulSet patch",
                    statefulsets
                        .patch(&group.statefulset, &PatchParams::default(), &patch)
                        .await
                        .map(drop),
                );
                let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
                forbidden(
                    "a Secret read",
                    secrets.get(&downscale_secret(own)).await.map(drop),
                );
                forbidden(
                    "a Secret list",
                    secrets.list(&ListParams::default()).await.map(drop),
                );
                let labelled =
                    Patch::Merge(serde_json::json!({"metadata": {"labels": {"x": "y"}}}));
                forbidden(
                    "a ConfigMap patch",
                    config_maps
                        .patch(&name, &PatchParams::default(), &labelled)
                        .await
                        .map(drop),
                );
                forbidden(
                    "a ConfigMap delete",
                    config_maps
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(drop),
                );
                let pod = format!("{}-0", group.statefulset);
                forbidden(
                    "a pod delete",
                    pods.delete(&pod, &DeleteParams::default()).await.map(drop),
                );
                forbidden(
                    "a pod eviction",
                    pods.evict(&pod, &EvictParams::default()).await.map(drop),
                );
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Scaling across clusters (leader/follower zones, mirroring with delayed downscale) and
// PhasedRollouts naming a member
// ---------------------------------------------------------------------------------------------

/// `spec.replicas` of the StatefulSet `name` in `cluster`.
async fn replicas_in(clusters: &ClusterTrio, cluster: &str, name: &str) -> i32 {
    let statefulsets: Api<StatefulSet> =
        Api::namespaced(clusters.cluster(cluster).client(), clusters.namespace());
    statefulsets
        .get(name)
        .await
        .ok()
        .and_then(|statefulset| statefulset.spec?.replicas)
        .unwrap_or(-1)
}

async fn wait_replicas_in(clusters: &ClusterTrio, cluster: &str, name: &str, replicas: i32) {
    wait_until(
        TIMEOUT,
        &format!("{cluster}/{name} has spec.replicas {replicas}"),
        || async { replicas_in(clusters, cluster, name).await == replicas },
    )
    .await;
}

/// Sets `spec.replicas` of the StatefulSet `name` in `cluster`, as a person or an autoscaler.
async fn scale_in(clusters: &ClusterTrio, cluster: &str, name: &str, replicas: i32) {
    let statefulsets: Api<StatefulSet> =
        Api::namespaced(clusters.cluster(cluster).client(), clusters.namespace());
    statefulsets
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap_or_else(|error| panic!("scaling {cluster}/{name}: {error}"));
}

#[test]
fn a_leader_zone_in_cluster_a_scaled_is_followed_by_its_followers_in_cluster_b_and_cluster_c_each_in_its_own_cluster()
 {
    ClusterTrio::scenario(|clusters| async move {
        // Given a ready group `follow` of 2 pods per cluster whose members in cluster-b and
        // cluster-c follow cluster-a's, named as baton names it (`cluster-a/follow`)
        let group = Group::new("follow", 2, 1);
        let leader = group.member("cluster-a");
        clusters
            .create_group(&group, |cluster, fixture| {
                if cluster == "cluster-a" {
                    fixture
                } else {
                    fixture.annotation(DOWNSCALE_LEADER_ANNOTATION, &leader)
                }
            })
            .await;

        // When cluster-a's member is scaled up to 4
        scale_in(clusters, "cluster-a", &group.statefulset, 4).await;

        // Then each follower goes to 4 in its own cluster, and is told so there, named as
        // baton names it
        for cluster in ["cluster-b", "cluster-c"] {
            wait_replicas_in(clusters, cluster, &group.statefulset, 4).await;
            wait_event(
                &clusters.cluster(cluster).client(),
                clusters.namespace(),
                &group.statefulset,
                "ScalingUp",
                &[&format!(
                    "{} scales up from 2 to 4: its leader {leader} has 4 replicas",
                    group.member(cluster)
                )],
            )
            .await;
        }
        // and the leader stays as it was set
        assert_eq!(
            replicas_in(clusters, "cluster-a", &group.statefulset).await,
            4
        );

        // When cluster-a's member is scaled down to 1
        scale_in(clusters, "cluster-a", &group.statefulset, 1).await;

        // Then both followers follow it down, each in its own cluster (no downscale is recorded
        // in any member's ledger: no min-time to wait)
        for cluster in ["cluster-b", "cluster-c"] {
            wait_replicas_in(clusters, cluster, &group.statefulset, 1).await;
            wait_event(
                &clusters.cluster(cluster).client(),
                clusters.namespace(),
                &group.statefulset,
                "ScalingDown",
                &[&format!(
                    "{} scales down from 4 to 1: its leader {leader} has 1 replicas",
                    group.member(cluster)
                )],
            )
            .await;
        }
    });
}

#[test]
fn a_delayed_downscale_in_cluster_b_waits_for_its_pods_there_and_scales_down_only_cluster_b() {
    ClusterTrio::scenario(|clusters| async move {
        // Given cluster-b's member of the group `delayed` mirroring a ReplicaTemplate of its own
        // cluster with a 1h delayed downscale, and a prepare endpoint on each of its pods' IPs
        let cluster_b = clusters.cluster("cluster-b");
        baton_e2e::scaling_support::apply_replica_template_crd(&cluster_b.control_plane)
            .await
            .unwrap();
        let templates = baton_e2e::scaling_support::ReplicaTemplates::new(
            cluster_b.client(),
            clusters.namespace(),
        );
        templates.create("delayed", 3).await;
        let group = Group::new("delayed", 3, 1);
        let port = baton_e2e::webhook_support::free_port().unwrap();
        let mut endpoints = BTreeMap::new();
        for ordinal in 0..3 {
            let pod = format!("{}-{ordinal}", group.statefulset);
            let endpoint =
                baton_e2e::http_support::PodEndpoint::start(cluster_b.simulator.pod_ip(&pod), port)
                    .await
                    .unwrap();
            endpoints.insert(ordinal, endpoint);
        }
        clusters
            .create_group(&group, |cluster, fixture| {
                if cluster != "cluster-b" {
                    return fixture;
                }
                fixture
                    .annotation(MIRROR_REPLICAS_NAME_ANNOTATION, "delayed")
                    .annotation(MIRROR_REPLICAS_KIND_ANNOTATION, "ReplicaTemplate")
                    .annotation(
                        MIRROR_REPLICAS_API_VERSION_ANNOTATION,
                        "rollout-operator.grafana.com/v1",
                    )
                    .annotation(DELAYED_DOWNSCALE_ANNOTATION, "1h")
                    .annotation(
                        PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION,
                        &format!("http://pod:{port}/prepare-delayed-downscale"),
                    )
            })
            .await;
        let now = jiff::Timestamp::now().as_second();

        // When the template wants 1 while every pod has only just prepared
        templates.scale("delayed", 1).await;

        // Then pods 1 and 2 are asked to prepare, pod 0 is told to cancel, nothing goes yet, and
        // cluster-b's Event says why, naming the member
        wait_event(
            &cluster_b.client(),
            clusters.namespace(),
            &group.statefulset,
            "DelayedDownscaleWaiting",
            &[&format!(
                "{} stays at 3 (wanted 1): delayed downscale of 1h",
                group.member("cluster-b")
            )],
        )
        .await;
        assert!(endpoints[&1].count("POST") > 0 && endpoints[&2].count("POST") > 0);
        assert!(endpoints[&0].count("DELETE") > 0);
        assert_eq!(
            endpoints[&0].count("POST"),
            0,
            "pod 0 stays: never prepared"
        );
        assert_eq!(
            replicas_in(clusters, "cluster-b", &group.statefulset).await,
            3
        );

        // When the highest pod prepared more than the delay ago
        endpoints[&2].prepared_at(now - 2 * 3600);

        // Then cluster-b's member goes down to 2 alone, in cluster-b, the count written back to
        // its template there
        wait_replicas_in(clusters, "cluster-b", &group.statefulset, 2).await;
        wait_until(TIMEOUT, "the template's status.replicas is 2", || async {
            templates.status_replicas("delayed").await == Some(2)
        })
        .await;
        wait_event(
            &cluster_b.client(),
            clusters.namespace(),
            &group.statefulset,
            "ScalingDown",
            &[&format!(
                "{} scales down from 3 to 2 (of the wanted 1",
                group.member("cluster-b")
            )],
        )
        .await;
        // and the other clusters' members are untouched
        for cluster in ["cluster-a", "cluster-c"] {
            assert_eq!(replicas_in(clusters, cluster, &group.statefulset).await, 3);
        }
    });
}

#[test]
fn a_member_cluster_whose_api_server_stops_holds_the_groups_scaling_until_it_is_back() {
    // (alone: every group with a member in cluster-c would be held while it is away)
    ClusterTrio::scenario_alone(|clusters| async move {
        // Given a ready group `held` of 2 pods per cluster whose members in cluster-b and
        // cluster-c follow cluster-a's
        let group = Group::new("held", 2, 1);
        let leader = group.member("cluster-a");
        clusters
            .create_group(&group, |cluster, fixture| {
                if cluster == "cluster-a" {
                    fixture
                } else {
                    fixture.annotation(DOWNSCALE_LEADER_ANNOTATION, &leader)
                }
            })
            .await;

        // When cluster-c's API server stops, and cluster-a's member is scaled up to 3
        let outage = clusters.stop_apiserver("cluster-c").await;
        scale_in(clusters, "cluster-a", &group.statefulset, 3).await;

        // Then cluster-b's member is held, told in cluster-b why, naming cluster-c, and is not
        // scaled: the group is scaled only on a whole view of its members
        wait_event(
            &clusters.cluster("cluster-b").client(),
            clusters.namespace(),
            &group.statefulset,
            "ScalingHeld",
            &[&format!(
                "{} stays at 2: rollout group {} is scaled only on a whole view of its members, and cluster cluster-c cannot be read",
                group.member("cluster-b"),
                group.name
            )],
        )
        .await;
        assert_eq!(
            replicas_in(clusters, "cluster-b", &group.statefulset).await,
            2
        );

        // When cluster-c's API server is back
        outage.end().await;

        // Then both followers follow cluster-a's member up to 3, each in its own cluster
        for cluster in ["cluster-b", "cluster-c"] {
            wait_replicas_in(clusters, cluster, &group.statefulset, 3).await;
        }
    });
}

/// The PhasedRollouts of the hub's namespace.
fn phased_rollouts(clusters: &ClusterTrio) -> Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("sts.plus", "v1alpha1", "PhasedRollout"),
        "phasedrollouts",
    );
    Api::namespaced_with(
        clusters.cluster("cluster-a").client(),
        clusters.namespace(),
        &resource,
    )
}

/// Creates the PhasedRollout `name` in the hub naming `target`, checking `expr` at `url`
/// every second, one success a step.
async fn create_phased_rollout(clusters: &ClusterTrio, name: &str, target: &str, url: &str) {
    let rollout = json!({
        "apiVersion": "sts.plus/v1alpha1",
        "kind": "PhasedRollout",
        "metadata": {"name": name},
        "spec": {"targetRef": target, "check": {
            "periodSeconds": 1, "successThreshold": 1,
            "query": {"expr": "app_healthy == 1", "url": url},
        }},
    });
    phased_rollouts(clusters)
        .create(
            &PostParams::default(),
            &serde_json::from_value(rollout).expect("a PhasedRollout"),
        )
        .await
        .unwrap_or_else(|error| panic!("creating PhasedRollout {name}: {error}"));
}

/// Waits until the PhasedRollout `name`'s status `holds`, showing the last one on timeout.
async fn wait_phased_status(
    clusters: &ClusterTrio,
    name: &str,
    what: &str,
    holds: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let api = phased_rollouts(clusters);
    let last = std::sync::Mutex::new(serde_json::Value::Null);
    let found = tokio::time::timeout(TIMEOUT, async {
        loop {
            let status = api
                .get(name)
                .await
                .map(|object| object.data["status"].clone())
                .unwrap_or_default();
            if holds(&status) {
                return status;
            }
            *last.lock().expect("the last status") = status;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        panic!(
            "PhasedRollout {name}'s status {what}: last {}",
            last.lock().expect("the last status")
        )
    })
}

/// The partition of `name` in `cluster`, and the one baton recorded there.
async fn partition_in(
    clusters: &ClusterTrio,
    cluster: &str,
    name: &str,
) -> (Option<i32>, Option<String>) {
    let statefulsets: Api<StatefulSet> =
        Api::namespaced(clusters.cluster(cluster).client(), clusters.namespace());
    let Ok(statefulset) = statefulsets.get(name).await else {
        return (None, None);
    };
    let partition = statefulset
        .spec
        .and_then(|spec| spec.update_strategy?.rolling_update?.partition);
    let recorded = statefulset
        .metadata
        .annotations
        .and_then(|annotations| annotations.get("baton.dev/partition").cloned());
    (partition, recorded)
}

#[test]
fn a_phased_rollout_in_the_hub_naming_a_member_in_cluster_b_rolls_it_there_by_partition() {
    // Alone: the trio's one Prometheus address is this scenario's.
    ClusterTrio::scenario_alone(|clusters| async move {
        let hub = clusters.cluster("cluster-a").client();
        let cluster_b = clusters.cluster("cluster-b").client();
        let namespace = clusters.namespace();
        // Given a healthy metric in Prometheus at the address checks may query, the CRDs in the
        // hub, and a ready 3-replica RollingUpdate StatefulSet `phased-web` in cluster-b alone
        let metrics = Metrics::start().await;
        metrics.set("app_healthy", 1.0);
        let prometheus =
            Prometheus::start_at(metrics.address(), clusters.prometheus_address()).await;
        prometheus.wait_value("app_healthy", 1.0).await;
        baton_e2e::crds::install(&hub, baton_e2e::crds::ROLLOUT_HEALTH_CHECK).await;
        baton_e2e::crds::install(&hub, baton_e2e::crds::PHASED_ROLLOUT).await;
        let web = "phased-web".to_owned();
        StatefulSetFixture::new(&web)
            .replicas(3)
            .rolling_update()
            .create(&cluster_b, namespace)
            .await;
        baton_e2e::controller_support::wait_group_ready(&cluster_b, namespace, &[&web]).await;

        // When a PhasedRollout in the hub names it as baton names members, `cluster-b/phased-web`
        let url = prometheus.url();
        create_phased_rollout(clusters, "web-b", "cluster-b/phased-web", &url).await;

        // Then baton holds it in cluster-b at partition 3, and the status, read from cluster-b's
        // pods, says it is updated
        wait_until(
            TIMEOUT,
            "cluster-b/phased-web held at partition 3",
            || async {
                partition_in(clusters, "cluster-b", &web).await == (Some(3), Some("3".to_owned()))
            },
        )
        .await;
        wait_phased_status(clusters, "web-b", "is Updated", |status| {
            status["phase"] == "Updated"
        })
        .await;

        // When its template changes in cluster-b
        let from = Instant::now();
        baton_e2e::controller_support::roll_out(
            &cluster_b,
            namespace,
            std::slice::from_ref(&web),
            "v2",
        )
        .await;

        // Then every pod is replaced, highest first, in cluster-b, keeping one at a time, and
        // the status says it is updated again, held at partition 3
        baton_e2e::controller_support::wait_rollout_complete(
            &cluster_b,
            namespace,
            std::slice::from_ref(&web),
        )
        .await;
        let timeline = clusters.merged_timeline();
        let member = baton_core::clusters::qualified("cluster-b", &web);
        check_rollout_guarantees(
            &timeline,
            &[baton_e2e::timeline::Zone::new(&member, 3, 1)],
            from,
        )
        .unwrap();
        wait_phased_status(clusters, "web-b", "is Updated at partition 3", |status| {
            status["phase"] == "Updated" && status["partition"] == 3
        })
        .await;

        // And PhasedRollouts naming an unknown cluster, or no cluster, are Invalid, saying so,
        // and touch nothing
        create_phased_rollout(clusters, "web-x", "cluster-x/phased-web", &url).await;
        create_phased_rollout(clusters, "web-bare", "phased-web", &url).await;
        let invalid = wait_phased_status(clusters, "web-x", "is Invalid", |status| {
            status["phase"] == "Invalid"
        })
        .await;
        assert!(
            invalid["message"].as_str().is_some_and(|message| {
                message.contains(
                "names the cluster \"cluster-x\", which is not a member cluster of this controller"
            )
            }),
            "{invalid}"
        );
        let bare = wait_phased_status(clusters, "web-bare", "is Invalid", |status| {
            status["phase"] == "Invalid"
        })
        .await;
        assert!(
            bare["message"]
                .as_str()
                .is_some_and(|message| message.contains("names no member cluster")),
            "{bare}"
        );
        wait_event(
            &hub,
            namespace,
            "web-x",
            "InvalidPhasedRollout",
            &["cluster-x"],
        )
        .await;
    });
}

// ---------------------------------------------------------------------------------------------
// Evictions across clusters: a zone-aware budget spans the group's members in every cluster
// (docs/multi-cluster.md, "Evictions"). Each scenario starts an eviction webhook per cluster,
// each with the three as its `webhook.clusters`, and takes the trio alone: evictions in the
// namespace are judged by its webhooks only.
// ---------------------------------------------------------------------------------------------

/// Given group `name` of two pods in each cluster, a budget of one unavailable pod selecting
/// its pods in each, and each cluster's eviction webhook judging it over the three clusters.
async fn group_judged_across(
    clusters: &ClusterTrio,
    name: &str,
) -> (Group, baton_e2e::cluster_evictions::EvictionWebhooks) {
    let group = Group::new(name, 2, 1);
    clusters
        .create_group(&group, |_, fixture| {
            fixture.pod_label("rollout-group", &group.name)
        })
        .await;
    let webhooks =
        baton_e2e::cluster_evictions::EvictionWebhooks::start(clusters, &group.name).await;
    (group, webhooks)
}

/// The refusal's message of an eviction a webhook refused (panics if it went through).
fn refusal(evicted: Result<(), (u16, String)>, what: &str) -> String {
    match evicted {
        Ok(()) => panic!("{what} went through"),
        Err((code, message)) => {
            assert!(code == 429 || code == 403, "{what}: {code} {message}");
            message
        }
    }
}

#[test]
fn a_drain_in_cluster_b_is_refused_while_cluster_a_has_a_pod_not_ready_naming_it_and_goes_once_it_is_ready()
 {
    use baton_e2e::zpdb_support::{client_without_retries, evict, evict_dry_run};

    ClusterTrio::scenario_alone(|clusters| async move {
        let _witness = clusters.witness();
        let ns = clusters.namespace();
        // Given a group of two pods in each cluster, a budget of one unavailable pod selecting
        // it in each, and each cluster's eviction webhook judging it over the three clusters
        let (_group, webhooks) = group_judged_across(clusters, "evict-ready").await;
        let drain = client_without_retries(&clusters.cluster("cluster-b").control_plane).await;

        // When cluster-a's pod evict-ready-1 is not ready
        let a = clusters.cluster("cluster-a");
        a.simulator.hold_not_ready("evict-ready-1").await;
        wait_until(
            TIMEOUT,
            "cluster-b's webhook sees cluster-a's pod down",
            || async { evict_dry_run(&drain, ns, "evict-ready-0").await.is_err() },
        )
        .await;

        // Then a drain of cluster-b's evict-ready-0 is refused, naming cluster-a's pod
        let message = refusal(
            evict(&drain, ns, "evict-ready-0").await,
            "evicting cluster-b's evict-ready-0 while cluster-a has a pod down",
        );
        for words in [
            "pod cluster-b/evict-ready-0 cannot be evicted",
            "one zone at a time",
            "StatefulSet cluster-a/evict-ready",
            "cluster-a/evict-ready-1 not ready",
        ] {
            assert!(
                message.contains(words),
                "{words:?} not in {message:?}\n{}",
                webhooks.output("cluster-b")
            );
        }
        // and the pod is still there, not terminating
        let pods = Api::<Pod>::namespaced(clusters.cluster("cluster-b").client(), ns);
        let pod = pods.get("evict-ready-0").await.expect("evict-ready-0");
        assert_eq!(pod.metadata.deletion_timestamp, None);

        // And once cluster-a's pod is ready again, the drain goes
        a.simulator.release("evict-ready-1").await;
        wait_until(
            TIMEOUT,
            "cluster-b's webhook sees cluster-a whole",
            || async { evict_dry_run(&drain, ns, "evict-ready-0").await.is_ok() },
        )
        .await;
        evict(&drain, ns, "evict-ready-0")
            .await
            .unwrap_or_else(|refused| panic!("the drain after cluster-a recovered: {refused:?}"));
        let uid = pod.metadata.uid.expect("a uid");
        wait_until(TIMEOUT, "evict-ready-0 leaves cluster-b", || async {
            pods.get_opt("evict-ready-0")
                .await
                .ok()
                .flatten()
                .is_none_or(|now| {
                    now.metadata.uid.as_ref() != Some(&uid)
                        || now.metadata.deletion_timestamp.is_some()
                })
        })
        .await;
    });
}

#[test]
fn two_drains_racing_in_cluster_b_and_cluster_c_let_exactly_one_eviction_through() {
    use baton_e2e::zpdb_support::{client_without_retries, evict};

    ClusterTrio::scenario_alone(|clusters| async move {
        let _witness = clusters.witness();
        let ns = clusters.namespace();
        // Given the group's pods all ready in the three clusters and a budget of one
        // unavailable pod, judged by each cluster's webhook over the three
        let (_group, webhooks) = group_judged_across(clusters, "evict-race").await;
        let drain_b = client_without_retries(&clusters.cluster("cluster-b").control_plane).await;
        let drain_c = client_without_retries(&clusters.cluster("cluster-c").control_plane).await;

        // When cluster-b's and cluster-c's drains evict a pod each at the same instant
        let (in_b, in_c) = tokio::join!(
            evict(&drain_b, ns, "evict-race-0"),
            evict(&drain_c, ns, "evict-race-0")
        );

        // Then exactly one goes, and the other is refused for the zone the first took
        let outputs = || {
            format!(
                "cluster-b's webhook:\n{}\ncluster-c's webhook:\n{}",
                webhooks.output("cluster-b"),
                webhooks.output("cluster-c")
            )
        };
        let (message, went, refused_in) = match (in_b, in_c) {
            (Ok(()), Err(refused)) => (refused, "cluster-b", "cluster-c"),
            (Err(refused), Ok(())) => (refused, "cluster-c", "cluster-b"),
            (in_b, in_c) => panic!(
                "not exactly one of the racing evictions went: cluster-b {in_b:?}, cluster-c {in_c:?}\n{}",
                outputs()
            ),
        };
        let message = refusal(Err(message), "the racing eviction that lost");
        for words in [
            format!("pod {refused_in}/evict-race-0 cannot be evicted"),
            format!("StatefulSet {went}/evict-race"),
        ] {
            assert!(
                message.contains(&words),
                "{words:?} not in {message:?}\n{}",
                outputs()
            );
        }
        // and the pod of the cluster that lost is still there, not terminating
        let pod = Api::<Pod>::namespaced(clusters.cluster(refused_in).client(), ns)
            .get("evict-race-0")
            .await
            .expect("the losing cluster's pod");
        assert_eq!(pod.metadata.deletion_timestamp, None, "{refused_in}'s pod");
        // and the claim is in the records of a majority of the clusters (cluster-a's first)
        let key = baton_core::zpdb::record::record_key(&format!("{went}/evict-race-0"));
        let mut holding = Vec::new();
        for cluster in CLUSTERS {
            let record = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
                clusters.cluster(cluster).client(),
                ns,
            )
            .get_opt("baton-zpdb-evict-race")
            .await
            .expect("reading a record");
            if record
                .and_then(|record| record.data)
                .is_some_and(|data| data.contains_key(&key))
            {
                holding.push(cluster);
            }
        }
        assert!(holding.len() >= 2, "{key} claimed in {holding:?}");
        assert_eq!(holding[0], "cluster-a", "{holding:?}");
    });
}

#[test]
fn an_unreachable_cluster_counts_as_disrupted_an_eviction_elsewhere_refused_naming_it_until_it_is_back()
 {
    use baton_e2e::zpdb_support::{client_without_retries, evict, evict_dry_run};

    ClusterTrio::scenario_alone(|clusters| async move {
        let _witness = clusters.witness();
        let ns = clusters.namespace();
        // Given the group's pods all ready in the three clusters, judged by each cluster's
        // webhook over the three
        let (_group, webhooks) = group_judged_across(clusters, "evict-away").await;
        let drain = client_without_retries(&clusters.cluster("cluster-b").control_plane).await;

        // When cluster-c's API server stops
        let outage = clusters.stop_apiserver("cluster-c").await;
        wait_until(TIMEOUT, "cluster-b's webhook loses cluster-c", || async {
            evict_dry_run(&drain, ns, "evict-away-0").await.is_err()
        })
        .await;

        // Then a drain in cluster-b is refused, naming cluster-c and what lifts it
        let message = refusal(
            evict(&drain, ns, "evict-away-0").await,
            "evicting cluster-b's evict-away-0 while cluster-c is unreachable",
        );
        for words in [
            "pod cluster-b/evict-away-0 cannot be evicted",
            "ZoneAwarePodDisruptionBudget evict-away",
            "the pods of cluster-c",
            "count as unavailable",
            "remove it from webhook.clusters",
        ] {
            assert!(
                message.contains(words),
                "{words:?} not in {message:?}\n{}",
                webhooks.output("cluster-b")
            );
        }

        // And once cluster-c is back (listed again), the drain goes
        outage.end().await;
        wait_until(
            GROUP_TIMEOUT_EVICTIONS,
            "cluster-b's webhook lists cluster-c again",
            || async { evict_dry_run(&drain, ns, "evict-away-0").await.is_ok() },
        )
        .await;
        evict(&drain, ns, "evict-away-0")
            .await
            .unwrap_or_else(|refused| panic!("the drain after cluster-c came back: {refused:?}"));
    });
}

/// How long a member that came back may take to be listed again by the webhooks (its API
/// server starting, then the watches' backoff).
const GROUP_TIMEOUT_EVICTIONS: Duration = Duration::from_secs(120);

/// Evicts `pod` of `cluster` as `kubectl drain` does: on 429 again every 100 ms until it is
/// allowed (true), or the pod of that uid is gone, replaced by the rollout meanwhile (false);
/// with the refusals counted.
async fn drain_across(clusters: &ClusterTrio, cluster: &str, pod: &str) -> (bool, u32) {
    use baton_e2e::zpdb_support::{client_without_retries, evict};
    let ns = clusters.namespace();
    let member = clusters.cluster(cluster);
    let drain = client_without_retries(&member.control_plane).await;
    let pods = Api::<Pod>::namespaced(member.client(), ns);
    let uid = pods.get(pod).await.expect("the drained pod").metadata.uid;
    let mut refusals = 0;
    let deadline = Instant::now() + GROUP_TIMEOUT_EVICTIONS;
    loop {
        match evict(&drain, ns, pod).await {
            Ok(()) => return (true, refusals),
            Err((429, _)) => refusals += 1,
            Err((404, _)) => {}
            Err((code, message)) => panic!("draining {cluster}/{pod}: {code} {message}"),
        }
        let current = pods.get_opt(pod).await.expect("reading the drained pod");
        if current.is_none_or(|current| current.metadata.uid != uid) {
            return (false, refusals);
        }
        assert!(
            Instant::now() < deadline,
            "draining {cluster}/{pod}: still refused after {GROUP_TIMEOUT_EVICTIONS:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_rollout_across_the_clusters_and_drains_in_each_never_take_two_zones_the_rollout_claiming_in_the_members_records()
 {
    use k8s_openapi::api::core::v1::ConfigMap;

    ClusterTrio::scenario_alone(|clusters| async move {
        let witness = clusters.witness();
        let ns = clusters.namespace();
        // Given a group of two pods in each cluster, a budget of one unavailable pod in each,
        // each cluster's eviction webhook judging over the three, and the controller's
        // deletions claimed in the members' records
        let (group, _webhooks) = group_judged_across(clusters, "evict-roll").await;

        // When a version rolls out across the three and, at the same moment, a drain evicts
        // a pod in each cluster
        let from = Instant::now();
        let drained = [
            ("cluster-c", "evict-roll-1"),
            ("cluster-b", "evict-roll-0"),
            ("cluster-a", "evict-roll-1"),
        ];
        let drains = futures::future::join_all(
            drained
                .iter()
                .map(|(cluster, pod)| drain_across(clusters, cluster, pod)),
        );
        // (a rollout deletion's claim is seen in a member's record, not the hub's alone)
        let controller_claim = wait_until(
            GROUP_TIMEOUT_EVICTIONS,
            "a rollout deletion claimed in cluster-b's or cluster-c's record",
            || async {
                for cluster in ["cluster-b", "cluster-c"] {
                    let record =
                        Api::<ConfigMap>::namespaced(clusters.cluster(cluster).client(), ns)
                            .get_opt("baton-zpdb-evict-roll")
                            .await
                            .ok()
                            .flatten();
                    if record.and_then(|record| record.data).is_some_and(|data| {
                        data.values().any(|entry| {
                            entry.contains("baton-controller rollout of group evict-roll")
                        })
                    }) {
                        return true;
                    }
                }
                false
            },
        );
        let (_, drains, ()) =
            futures::join!(clusters.roll_out(&group, "v2"), drains, controller_claim);

        // Then the rollout completes, and the drains end
        clusters.wait_complete(&group).await;
        let summary: Vec<String> = drained
            .iter()
            .zip(&drains)
            .map(|((cluster, pod), (evicted, refusals))| {
                format!(
                    "{cluster}/{pod}: {refusals} refusals, {}",
                    if *evicted {
                        "evicted"
                    } else {
                        "replaced by the rollout"
                    }
                )
            })
            .collect();
        // And the three clusters' merged timeline never shows two zones unavailable at once,
        // nor a zone with more unavailable pods than the budget, nor a pod leaving while
        // another zone was unavailable
        check_rollout_guarantees(&clusters.merged_timeline(), &group.zones(), from)
            .unwrap_or_else(|violation| panic!("{violation}\ndrains: {summary:#?}"));
        drop(witness);
    });
}
