//! `kubectl baton` (the kubectl-baton binary) against the real control plane, as a person or a
//! deploy pipeline runs it: given a rollout group that baton-controller rolls, the plugin shows
//! where it stands, waits for it with documented exit codes, pauses and resumes a zone; and every
//! mistake is an error naming the object.

use std::path::Path;
use std::time::Duration;

use baton_e2e::Scene;
use baton_e2e::controller_support::{
    create_ready_group, roll_out, rollout_state, wait_rollout_complete,
};
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::plugin_support::{
    self, Run, kubectl_baton, kubectl_baton_across, wait_across, write_clusters_kubeconfig,
    write_unreachable_kubeconfig,
};
use baton_e2e::{ControlPlane, TestNamespace};
use k8s_openapi::api::apps::v1::StatefulSet;

const PAUSED: &str = "grafana.com/rollout-paused";
const HALTED: &str = "baton.dev/halted";

/// Runs `kubectl-baton args…` on a terminal (a pseudo-terminal from util-linux's `script`), as
/// a person at a shell does; the output is the terminal's.
async fn kubectl_baton_on_a_terminal(kubeconfig: &Path, args: &[&str]) -> Run {
    let binary = plugin_support::binary().await;
    let mut line = format!("'{}'", binary.display());
    for arg in args {
        line.push_str(&format!(" '{arg}'"));
    }
    let mut run = tokio::process::Command::new("script");
    run.args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .env("KUBECONFIG", kubeconfig)
        .stdin(std::process::Stdio::null());
    plugin_support::run_bounded(run, args).await
}

/// A namespace and its admin kubeconfig, to run the plugin in.
struct Plugin<'a> {
    kubeconfig: &'a Path,
    namespace: &'a str,
}

impl Plugin<'_> {
    /// `kubectl baton <args> -n <namespace>`.
    async fn run(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend(["-n", self.namespace]);
        kubectl_baton(self.kubeconfig, &all).await
    }

    async fn annotation(
        &self,
        client: &kube::Client,
        statefulset: &str,
        key: &str,
    ) -> Option<String> {
        let api = kube::Api::<StatefulSet>::namespaced(client.clone(), self.namespace);
        let read = api.get(statefulset).await.expect("reading the StatefulSet");
        read.metadata
            .annotations
            .unwrap_or_default()
            .get(key)
            .cloned()
    }
}

#[tokio::test]
async fn a_pipeline_follows_a_rollout_with_status_plan_pause_wait_and_resume() {
    // Given a 3-zone group, rolled by baton-controller, with its last zone paused
    let scene = Scene::start("plugin").await;
    let client = scene.namespace.client();
    let namespace = scene.namespace.name();
    let plugin = Plugin {
        kubeconfig: scene.control_plane.kubeconfig_path(),
        namespace,
    };
    let names = create_ready_group(&client, namespace, &["a", "b", "c"], 2).await;
    plugin
        .run(&["pause", "ingester-zone-c"])
        .await
        .exited(0)
        .says(&["statefulset/ingester-zone-c: grafana.com/rollout-paused set to \"true\""]);
    assert_eq!(
        plugin
            .annotation(&client, "ingester-zone-c", PAUSED)
            .await
            .as_deref(),
        Some("true")
    );
    plugin
        .run(&["pause", "ingester-zone-c"])
        .await
        .exited(0)
        .says(&["is already paused: nothing changed"]);

    // When a new version is deployed
    roll_out(&client, namespace, &names, "v2").await;

    // Then zones a and b roll, and `wait` times out with zone c paused: exit 3 naming the pause
    wait_rollout_complete(&client, namespace, &names[..2]).await;
    plugin
        .run(&["wait", "ingester", "--timeout", "2s"])
        .await
        .exited(3)
        .complains(&[
            "timed out after 2s waiting for rollout group ingester: paused",
            "waits (Paused): rollout paused with pods left to update in ingester-zone-c",
        ]);
    // and status and plan say the group waits for zone c
    let status = plugin.run(&["status"]).await;
    status.exited(0).says(&[
        "GROUP      ZONE              PHASE      UPDATED   READY   REVISION",
        "ingester: paused; waits (Paused): rollout paused with pods left to update in ingester-zone-c",
    ]);
    let rows: Vec<Vec<&str>> = status
        .stdout
        .lines()
        .skip(1)
        .take(3)
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.iter()
            .map(|row| (row[1], row[2], row[3]))
            .collect::<Vec<_>>(),
        [
            ("ingester-zone-a", "complete", "2/2"),
            ("ingester-zone-b", "complete", "2/2"),
            ("ingester-zone-c", "paused", "0/2"),
        ],
        "{status:#?}"
    );
    let json = plugin.run(&["status", "ingester", "-o", "json"]).await;
    let document: serde_json::Value =
        serde_json::from_str(&json.exited(0).stdout).expect("status -o json is JSON");
    assert_eq!(
        document["apiVersion"], "baton.dev/v1alpha1",
        "the status page's document"
    );
    assert_eq!(document["namespace"], namespace);
    assert_eq!(document["groups"][0]["phase"], "paused");
    assert_eq!(document["groups"][0]["zones"][2]["paused"], true);
    let yaml = plugin.run(&["status", "-o", "yaml"]).await;
    let from_yaml: serde_json::Value =
        serde_saphyr::from_str(&yaml.exited(0).stdout).expect("status -o yaml is YAML");
    assert_eq!(from_yaml["groups"], document["groups"]);
    plugin.run(&["plan", "ingester"]).await.exited(0).says(&[
        "(a dry run: nothing was changed)",
        "Next: nothing to do now.",
        "planner (Paused): rollout paused with pods left to update in ingester-zone-c",
    ]);
    assert_eq!(
        rollout_state(&client, namespace, "ingester-zone-c")
            .await
            .updated(),
        0,
        "plan deleted nothing"
    );

    // When zone c is resumed
    plugin
        .run(&["resume", "ingester-zone-c"])
        .await
        .exited(0)
        .says(&["statefulset/ingester-zone-c: grafana.com/rollout-paused removed (was \"true\")"]);
    assert_eq!(
        plugin.annotation(&client, "ingester-zone-c", PAUSED).await,
        None
    );

    // Then `wait` follows it to the end and exits 0 once every pod runs the new revision
    let waited = plugin.run(&["wait", "ingester", "--timeout", "2m"]).await;
    waited
        .exited(0)
        .says(&["rollout group ingester is complete", "ingester-zone-c"]);
    let zone_c = rollout_state(&client, namespace, "ingester-zone-c").await;
    assert_eq!(zone_c.updated(), 2, "{waited:#?}");
    assert_eq!(zone_c.ready_replicas, 2, "{waited:#?}");
    assert!(
        waited.stdout.contains("ingester-zone-c rolling")
            || waited.stdout.contains("ingester-zone-c waiting"),
        "a line per change while it rolled: {waited:#?}"
    );
    // and on a terminal it draws a progress bar per zone
    let on_a_terminal = kubectl_baton_on_a_terminal(
        plugin.kubeconfig,
        &["wait", "ingester", "-n", namespace, "--timeout", "1m"],
    )
    .await;
    on_a_terminal.exited(0).says(&[
        "rollout group ingester is complete",
        "ingester-zone-c [",
        "2/2 updated",
    ]);
}

#[tokio::test]
async fn wait_stops_at_once_on_a_halted_or_skipped_group_and_resume_lifts_the_halt() {
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "plugin-stop").await;
    let client = namespace.client();
    let plugin = Plugin {
        kubeconfig: control_plane.kubeconfig_path(),
        namespace: namespace.name(),
    };
    // Given a group halted by a gate, and a group with a RollingUpdate member
    StatefulSetFixture::new("halted-zone-a")
        .group("halted")
        .replicas(1)
        .create(&client, namespace.name())
        .await;
    StatefulSetFixture::new("halted-zone-b")
        .group("halted")
        .replicas(1)
        .annotation(HALTED, "hook answered 500")
        .create(&client, namespace.name())
        .await;
    StatefulSetFixture::new("skipped-zone-a")
        .group("skipped")
        .replicas(1)
        .create(&client, namespace.name())
        .await;
    StatefulSetFixture::new("skipped-zone-b")
        .group("skipped")
        .replicas(1)
        .rolling_update()
        .create(&client, namespace.name())
        .await;

    // Then wait exits 4 and 5 with the reason, without waiting for the timeout
    let started = std::time::Instant::now();
    plugin
        .run(&["wait", "halted", "--timeout", "10m"])
        .await
        .exited(4)
        .complains(&["rollout group halted is halted", "hook answered 500"]);
    plugin
        .run(&["wait", "skipped", "--timeout", "10m"])
        .await
        .exited(5)
        .complains(&["skipped-zone-b uses RollingUpdate, group skipped"]);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "neither waited for its timeout"
    );
    plugin.run(&["status"]).await.exited(0).says(&[
        "halted: halted; waits (Halted)",
        "skipped: skipped; waits (NonOnDeleteMember)",
    ]);

    // When the halted zone is resumed, the halt is gone
    plugin
        .run(&["resume", "halted-zone-b"])
        .await
        .exited(0)
        .says(&["statefulset/halted-zone-b: baton.dev/halted removed (was \"hook answered 500\")"]);
    assert_eq!(
        plugin.annotation(&client, "halted-zone-b", HALTED).await,
        None
    );
    let status = plugin.run(&["status", "halted"]).await;
    assert!(
        !status.exited(0).stdout.contains("halted: halted"),
        "{status:#?}"
    );
}

#[tokio::test]
async fn every_mistake_is_an_error_naming_the_object() {
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "plugin-errors").await;
    let name = namespace.name();
    let plugin = Plugin {
        kubeconfig: control_plane.kubeconfig_path(),
        namespace: name,
    };
    StatefulSetFixture::new("loner")
        .replicas(0)
        .create(&namespace.client(), name)
        .await;

    for command in [
        &["status", "nope"][..],
        &["wait", "nope"],
        &["plan", "nope"],
    ] {
        plugin.run(command).await.exited(1).complains(&[&format!(
            "no rollout group nope in namespace {name}: no StatefulSet there has the label rollout-group=nope"
        )]);
    }
    plugin
        .run(&["status", "a,b"])
        .await
        .exited(1)
        .complains(&["\"a,b\" is not a valid rollout group name"]);
    plugin
        .run(&["pause", "loner"])
        .await
        .exited(1)
        .complains(&[&format!(
            "StatefulSet loner in namespace {name} is not in a rollout group: it has no rollout-group label"
        )]);
    plugin
        .run(&["resume", "ghost"])
        .await
        .exited(1)
        .complains(&[&format!("no StatefulSet ghost in namespace {name}")]);
    plugin
        .run(&["wait", "g", "--timeout", "soon"])
        .await
        .exited(2)
        .complains(&["--timeout", "\"soon\"", "30m"]);

    // A user without RBAC bindings is told which permission is missing
    let restricted = control_plane
        .restricted_kubeconfig()
        .expect("the local control plane has a restricted user");
    kubectl_baton(restricted, &["status", "-n", name])
        .await
        .exited(1)
        .complains(&[&format!(
            "no permission to list statefulsets in namespace {name}"
        )]);

    // --context and the context's namespace are honoured, as kubectl does
    let directory = tempfile::tempdir().unwrap();
    let kubeconfig = directory.path().join("two-contexts.kubeconfig");
    let mut config: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(control_plane.kubeconfig_path()).unwrap())
            .unwrap();
    let admin_context = config["contexts"][0].clone();
    let mut here = admin_context.clone();
    here["name"] = "here".into();
    here["context"]["namespace"] = name.into();
    let mut nowhere = admin_context;
    nowhere["name"] = "nowhere".into();
    nowhere["context"]["namespace"] = "no-such-namespace".into();
    config["contexts"] = serde_json::Value::Array(vec![here, nowhere]);
    config["current-context"] = "nowhere".into();
    std::fs::write(&kubeconfig, serde_saphyr::to_string(&config).unwrap()).unwrap();
    kubectl_baton(&kubeconfig, &["status", "nope"])
        .await
        .exited(1)
        .complains(&["no rollout group nope in namespace no-such-namespace"]);
    kubectl_baton(
        Path::new("/nonexistent"),
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--context",
            "here",
            "pause",
            "loner",
        ],
    )
    .await
    .exited(1)
    .complains(&[&format!(
        "StatefulSet loner in namespace {name} is not in a rollout group"
    )]);
}

#[tokio::test]
async fn across_members_a_member_names_its_zones_for_its_cluster_and_wait_follows_it() {
    // Given a 2-zone group rolled by baton-controller, seen as the one member `x` of a
    // cross-cluster group (its context reaching this control plane)
    let scene = Scene::start("plugin-members").await;
    let client = scene.namespace.client();
    let namespace = scene.namespace.name();
    let names = create_ready_group(&client, namespace, &["a", "b"], 1).await;
    let members = [("x", scene.control_plane.kubeconfig_path())];

    // Then status names each zone for its cluster, in the table and in the document
    kubectl_baton_across(&members, &["status", "-n", namespace])
        .await
        .exited(0)
        .says(&[
            "x/ingester-zone-a",
            "x/ingester-zone-b",
            "ingester: complete",
        ]);
    let json = kubectl_baton_across(
        &members,
        &["status", "ingester", "-n", namespace, "-o", "json"],
    )
    .await;
    let document: serde_json::Value =
        serde_json::from_str(&json.exited(0).stdout).expect("status -o json is JSON");
    let zones: Vec<&str> = document["groups"][0]["zones"]
        .as_array()
        .expect("zones")
        .iter()
        .filter_map(|zone| zone["statefulset"].as_str())
        .collect();
    assert_eq!(
        zones,
        ["x/ingester-zone-a", "x/ingester-zone-b"],
        "{json:#?}"
    );
    assert_eq!(document["namespace"], namespace);

    // When a new version is deployed, wait across the member follows it to the end
    roll_out(&client, namespace, &names, "v2").await;
    let waited = wait_across(&members, namespace, "ingester", "2m").await;
    waited
        .exited(0)
        .says(&["rollout group ingester is complete", "x/ingester-zone-b"]);
    assert!(
        !waited.stdout.contains("cannot be read"),
        "the member was read throughout: {waited:#?}"
    );
    for name in &names {
        let state = rollout_state(&client, namespace, name).await;
        assert_eq!(
            (state.updated(), state.ready_replicas),
            (1, 1),
            "{waited:#?}"
        );
    }
}

#[tokio::test]
async fn across_members_every_mistake_names_the_member() {
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "plugin-members-errors").await;
    let name = namespace.name();
    let here = control_plane.kubeconfig_path();
    let config: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(here).unwrap()).unwrap();
    let admin_context = config["current-context"].as_str().unwrap().to_owned();

    // A member whose context the kubeconfig lacks: named, with the contexts it has
    kubectl_baton(here, &["status", "--cluster", "ghost", "-n", name])
        .await
        .exited(1)
        .complains(&[
            "member ghost: no context ghost in the kubeconfig",
            "its contexts: ",
            &admin_context,
            "--cluster ghost=CONTEXT",
        ]);
    kubectl_baton(here, &["wait", "g", "--cluster", "x=nope", "-n", name])
        .await
        .exited(1)
        .complains(&["member x: no context nope in the kubeconfig"]);

    // A group none of the members holds: the clusters searched are named
    for command in [
        &["wait", "nope", "-n", name][..],
        &["status", "nope", "-n", name],
    ] {
        kubectl_baton_across(&[("x", here)], command)
            .await
            .exited(1)
            .complains(&[&format!(
                "no rollout group nope in namespace {name} in any of the member clusters searched (x): \
                 no StatefulSet there has the label rollout-group=nope"
            )]);
    }

    // A member cluster that cannot be reached is named, with its server; the other is read
    let directory = tempfile::tempdir().unwrap();
    let unreachable = directory.path().join("down.kubeconfig");
    write_unreachable_kubeconfig(&unreachable).unwrap();
    let run = kubectl_baton_across(
        &[("x", here), ("down", &unreachable)],
        &["wait", "ingester", "-n", name],
    )
    .await;
    run.exited(1).complains(&[
        "cannot reach member cluster down (context down, https://127.0.0.1:1/)",
        "Connection refused",
    ]);
    assert!(!run.stderr.contains("member cluster x"), "{run:#?}");
    // and refuses a command that writes: nothing is written on a partial view
    for command in [
        &["approve", "ingester", "-n", name][..],
        &["rollback", "ingester", "-n", name],
    ] {
        kubectl_baton_across(&[("x", here), ("down", &unreachable)], command)
            .await
            .exited(1)
            .complains(&[
                "cannot reach member cluster down",
                "nothing written: a command that writes across member clusters reads every member first",
            ]);
    }

    // A zone of a write is named with its member cluster, one of those given
    kubectl_baton_across(&[("x", here)], &["pause", "ingester-zone-a", "-n", name])
        .await
        .exited(1)
        .complains(&["with --cluster, name the StatefulSet with its member cluster, as status shows it: CLUSTER/ingester-zone-a (e.g. x/ingester-zone-a)"]);
    kubectl_baton_across(&[("x", here)], &["resume", "y/ingester-zone-a", "-n", name])
        .await
        .exited(1)
        .complains(&[
            "y/ingester-zone-a is in member cluster y, which is not among the members given (x): add --cluster y[=CONTEXT]",
        ]);
    kubectl_baton_across(&[("x", here)], &["pause", "x/nothing", "-n", name])
        .await
        .exited(1)
        .complains(&[&format!(
            "member cluster x (context x): no StatefulSet nothing in namespace {name}"
        )]);

    // Each member has its own context: --context with --cluster is a usage error
    kubectl_baton(
        here,
        &["status", "--cluster", "x", "--context", &admin_context],
    )
    .await
    .exited(2)
    .complains(&["--context cannot be used with --cluster"]);

    // The kubeconfig written for members names each context, cluster and user for its member
    let merged = directory.path().join("clusters.kubeconfig");
    write_clusters_kubeconfig(&[("x", here), ("down", &unreachable)], &merged).unwrap();
    let written: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    for kind in ["contexts", "clusters", "users"] {
        let names: Vec<&str> = written[kind]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|entry| entry["name"].as_str())
            .collect();
        assert_eq!(names, ["x", "down"], "{kind}: {written:#}");
    }
}

#[tokio::test]
async fn across_members_wait_holds_while_a_member_cannot_be_read_and_goes_on_once_it_is_listed_again()
 {
    // Given a control plane of its own as member x, with a group whose one pod is not ready
    // (nothing serves pods here): `wait` follows it
    let control_plane = ControlPlane::dedicated().await;
    let namespace = TestNamespace::create(&control_plane, "plugin-member-lost").await;
    let client = namespace.client();
    let name = namespace.name();
    StatefulSetFixture::new("lost-zone-a")
        .group("lost")
        .replicas(1)
        .create(&client, name)
        .await;
    let directory = tempfile::tempdir().unwrap();
    let kubeconfig = directory.path().join("clusters.kubeconfig");
    write_clusters_kubeconfig(&[("x", control_plane.kubeconfig_path())], &kubeconfig).unwrap();
    let mut wait = tokio::process::Command::new(plugin_support::binary().await)
        .args([
            "wait",
            "lost",
            "-n",
            name,
            "--timeout",
            "5m",
            "--cluster",
            "x",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl-baton runs");
    let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let printed = printed.clone();
        let stdout = wait.stdout.take().expect("stdout");
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut printed = printed.lock().unwrap();
                printed.push_str(&line);
                printed.push('\n');
            }
        })
    };
    let said = |text: &'static str| {
        let printed = printed.clone();
        move || {
            let holds = printed.lock().unwrap().contains(text);
            async move { holds }
        }
    };
    let timeout = Duration::from_secs(60);
    baton_e2e::wait_until(
        timeout,
        "wait shows x/lost-zone-a",
        said("x/lost-zone-a waiting"),
    )
    .await;

    // When the member's API server stops
    control_plane.stop_apiserver().await.unwrap();
    // Then wait says the member cannot be read, the group waits for it, and wait goes on
    baton_e2e::wait_until(
        timeout,
        "wait says member x cannot be read",
        said("member cluster x cannot be read: "),
    )
    .await;
    baton_e2e::wait_until(
        timeout,
        "the group waits for x",
        said("lost: waiting; waits (MemberUnreachable): x/lost-zone-a cannot be read: cluster x is unreachable"),
    )
    .await;
    assert!(
        wait.try_wait().unwrap().is_none(),
        "wait goes on: {}",
        printed.lock().unwrap()
    );

    // When it is back, wait lists the member afresh and follows it to the end
    control_plane.start_apiserver().await.unwrap();
    baton_e2e::wait_until(
        timeout,
        "wait says member x is read again",
        said("member cluster x is read again"),
    )
    .await;
    let patch = serde_json::json!({"spec": {"replicas": 0}});
    kube::Api::<StatefulSet>::namespaced(client.clone(), name)
        .patch(
            "lost-zone-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("scaling lost-zone-a to 0");
    let status = tokio::time::timeout(Duration::from_secs(120), wait.wait())
        .await
        .expect("wait ends once the group is complete")
        .expect("wait's status");
    reader.await.unwrap();
    let printed = printed.lock().unwrap().clone();
    eprintln!("wait printed:\n{printed}");
    assert_eq!(status.code(), Some(0), "{printed}");
    assert!(
        printed.contains("rollout group lost is complete"),
        "{printed}"
    );
}

/// What a namespace user writes to drive a reader's terminal (clear the screen, ring the bell,
/// return the cursor) and forge lines of baton's output.
const HOSTILE: &str = "oops\u{1b}[2J\u{7}\rrollout group hostile is complete\nforged line\u{0}";

/// Panics unless `run` printed no control character but its own line breaks, and no line a
/// value forged.
fn printed_escaped(command: &str, run: &Run) {
    for (stream, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "`kubectl baton {command}` printed a control character on {stream}: {run:#?}"
        );
        assert!(
            !text.lines().any(|line| line.starts_with("forged line")
                || line.trim() == "rollout group hostile is complete"),
            "`kubectl baton {command}` printed a forged line on {stream}: {run:#?}"
        );
    }
}

#[tokio::test]
async fn every_command_prints_what_namespace_users_wrote_escaped() {
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "plugin-hostile").await;
    let client = namespace.client();
    let plugin = Plugin {
        kubeconfig: control_plane.kubeconfig_path(),
        namespace: namespace.name(),
    };
    // Given a group whose every field a namespace user writes, and the plugin shows, holds
    // escape sequences, a bell, a carriage return, a line break and a NUL: a halt's reason, a
    // rollback request's reason, an approval, and the gate keys the plugin names in warnings
    StatefulSetFixture::new("hostile-zone-a")
        .group("hostile")
        .replicas(1)
        .annotation(HALTED, HOSTILE)
        .annotation("baton.dev/soak", HOSTILE)
        .annotation("baton.dev/health-check", HOSTILE)
        .annotation("rollout-max-unavailable", HOSTILE)
        .create(&client, namespace.name())
        .await;
    StatefulSetFixture::new("hostile-zone-b")
        .group("hostile")
        .replicas(1)
        .annotation(HALTED, HOSTILE)
        .annotation("baton.dev/hook", HOSTILE)
        .annotation("baton.dev/batches", HOSTILE)
        .annotation("baton.dev/approved", HOSTILE)
        .annotation("baton.dev/rollback", HOSTILE)
        .create(&client, namespace.name())
        .await;

    // When every command is run against it
    let escaped = "oops\\u{1b}[2J\\u{7}\\rrollout group hostile is complete\\nforged line\\u{0}";
    let status = plugin.run(&["status"]).await;
    printed_escaped("status", status.exited(0));
    let as_json = plugin.run(&["status", "hostile", "-o", "json"]).await;
    printed_escaped("status -o json", as_json.exited(0));
    let as_yaml = plugin.run(&["status", "hostile", "-o", "yaml"]).await;
    printed_escaped("status -o yaml", as_yaml.exited(0));
    let plan = plugin.run(&["plan", "hostile"]).await;
    printed_escaped("plan", plan.exited(0));
    let wait = plugin.run(&["wait", "hostile", "--timeout", "1m"]).await;
    printed_escaped("wait", &wait);
    let approve = plugin.run(&["approve", "hostile"]).await;
    printed_escaped("approve", &approve);
    let step = plugin
        .run(&["approve", "hostile", "--step", "zone\u{1b}[2J\nforged line"])
        .await;
    printed_escaped("approve --step", &step);
    let rollback = plugin
        .run(&[
            "rollback",
            "hostile",
            "--reason",
            "why\u{1b}[2J\nforged line",
        ])
        .await;
    printed_escaped("rollback", &rollback);
    let pause = plugin.run(&["pause", "hostile-zone-a"]).await;
    printed_escaped("pause", pause.exited(0));
    let resume = plugin.run(&["resume", "hostile-zone-b"]).await;
    printed_escaped("resume", resume.exited(0));
    let missing = plugin
        .run(&["pause", "hostile-zone-\u{1b}[2J\nforged line"])
        .await;
    printed_escaped("pause (no such StatefulSet)", &missing);

    // Then each printed the values, escaped: what was written is still there to read
    status.says(&[escaped]);
    assert!(
        as_json.stdout.contains(
            "oops\\u001b[2J\\u0007\\rrollout group hostile is complete\\nforged line\\u0000"
        ),
        "JSON escapes as JSON does: {as_json:#?}"
    );
    plan.says(&[escaped]);
    wait.exited(4).complains(&[escaped]);
    approve.complains(&[escaped]);
    resume.says(&[&format!(
        "still halted by statefulset/hostile-zone-a ({escaped})"
    )]);
}

/// Sets (`Some`) or removes (`None`) annotation `key` of StatefulSet `name`, as a person with
/// kubectl does.
async fn annotate(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
    value: Option<&str>,
) {
    let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
    kube::Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("annotating the StatefulSet");
}

/// Runs `command` exactly as baton printed it, through a shell, as a person pasting it does:
/// with the test's kubeconfig, and kubectl and kubectl-baton on the PATH.
async fn paste(control_plane: &ControlPlane, command: &str) -> Run {
    let plugin = plugin_support::binary().await;
    let mut path: Vec<std::path::PathBuf> =
        plugin.parent().map(Path::to_path_buf).into_iter().collect();
    path.extend(
        control_plane
            .kubectl()
            .parent()
            .filter(|directory| !directory.as_os_str().is_empty())
            .map(Path::to_path_buf),
    );
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut run = tokio::process::Command::new("sh");
    run.args(["-c", command])
        .env("KUBECONFIG", control_plane.kubeconfig_path())
        .env("PATH", std::env::join_paths(path).expect("a PATH"))
        .stdin(std::process::Stdio::null());
    plugin_support::run_bounded(run, &[command]).await
}

/// The text of `text` between `before` and the next `after`.
fn between<'a>(text: &'a str, before: &str, after: &str) -> &'a str {
    let start = text
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in {text}"))
        + before.len();
    let length = text[start..]
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} after {before:?} in {text}"));
    &text[start..start + length]
}

#[tokio::test]
async fn a_halts_resume_command_pasted_as_printed_resumes_the_rollout() {
    // Given a 3-zone group rolled by baton-controller, whose zone b a person halted by hand
    let scene = Scene::start("plugin-paste").await;
    let client = scene.namespace.client();
    let namespace = scene.namespace.name();
    let plugin = Plugin {
        kubeconfig: scene.control_plane.kubeconfig_path(),
        namespace,
    };
    let names = create_ready_group(&client, namespace, &["a", "b", "c"], 1).await;
    annotate(
        &client,
        namespace,
        "ingester-zone-b",
        HALTED,
        Some("stopped-by-hand"),
    )
    .await;

    // When a new version is deployed
    roll_out(&client, namespace, &names, "v2").await;

    // Then wait stops at once (exit 4) saying how to resume, in the group's namespace
    let halted = plugin.run(&["wait", "ingester", "--timeout", "1m"]).await;
    halted
        .exited(4)
        .complains(&["halted at ingester-zone-b: stopped-by-hand; resume with "]);
    let printed = between(&halted.stderr, "resume with ", " (or ");
    assert_eq!(
        printed,
        format!("kubectl baton resume ingester-zone-b -n {namespace}")
    );
    let without_plugin = between(&halted.stderr, " (or ", ")\n");
    assert_eq!(
        without_plugin,
        format!("kubectl -n {namespace} annotate statefulset ingester-zone-b baton.dev/halted-")
    );

    // When a person pastes the command as printed
    paste(scene.control_plane, printed)
        .await
        .exited(0)
        .says(&["statefulset/ingester-zone-b: baton.dev/halted removed (was \"stopped-by-hand\")"]);

    // Then the rollout goes on to the end
    plugin
        .run(&["wait", "ingester", "--timeout", "2m"])
        .await
        .exited(0)
        .says(&["rollout group ingester is complete"]);

    // And the command for whoever has no plugin works pasted too
    annotate(&client, namespace, "ingester-zone-a", HALTED, Some("again")).await;
    paste(
        scene.control_plane,
        &without_plugin.replace("ingester-zone-b", "ingester-zone-a"),
    )
    .await
    .exited(0);
    assert_eq!(
        plugin.annotation(&client, "ingester-zone-a", HALTED).await,
        None
    );
}

#[tokio::test]
async fn a_typo_in_the_soak_holds_the_group_as_invalid_configuration_until_it_is_fixed() {
    // Given a 3-zone group rolled by baton-controller, with a soak written in words on zone b
    let scene = Scene::start("plugin-typo").await;
    let client = scene.namespace.client();
    let namespace = scene.namespace.name();
    let plugin = Plugin {
        kubeconfig: scene.control_plane.kubeconfig_path(),
        namespace,
    };
    let names = create_ready_group(&client, namespace, &["a", "b", "c"], 1).await;
    annotate(
        &client,
        namespace,
        "ingester-zone-b",
        "baton.dev/soak",
        Some("5 minutes"),
    )
    .await;

    // When a new version is deployed
    roll_out(&client, namespace, &names, "v2").await;

    // Then wait stops at once with its own exit code, not a halt's, naming annotation, value
    // and StatefulSet
    let named = "invalid configuration: annotation baton.dev/soak on StatefulSet ingester-zone-b \
                 has the invalid value \"5 minutes\" (accepted: a duration such as 30s, 5m or \
                 1h30m (0 for no soak)); holding the group until it is fixed";
    let held = plugin.run(&["wait", "ingester", "--timeout", "1m"]).await;
    held.exited(8)
        .complains(&["rollout group ingester is held: ", named]);
    // and status says the same, in a phase of its own
    plugin.run(&["status"]).await.exited(0).says(&[
        &format!("ingester: invalidConfiguration; waits (InvalidGate): {named}"),
        "ingester-zone-b   invalidConfiguration",
    ]);
    // and resume, which has nothing to lift, says what to fix instead, with the command
    let remove =
        format!("kubectl -n {namespace} annotate statefulset ingester-zone-b baton.dev/soak-");
    let resumed = plugin.run(&["resume", "ingester-zone-b"]).await;
    resumed.exited(0).says(&[
        "statefulset/ingester-zone-b (rollout group ingester) is neither paused nor halted: nothing changed",
        &format!("rollout group ingester is still held, and resume does not lift it: {named}"),
        &format!("remove it with {remove}"),
    ]);
    // and nothing rolled meanwhile
    for name in &names {
        assert_eq!(
            rollout_state(&client, namespace, name).await.updated(),
            0,
            "{name}"
        );
    }

    // When the person runs the command resume printed
    paste(scene.control_plane, &remove).await.exited(0);

    // Then the rollout goes on to the end
    plugin
        .run(&["wait", "ingester", "--timeout", "2m"])
        .await
        .exited(0)
        .says(&["rollout group ingester is complete"]);
}

#[tokio::test]
async fn a_bad_max_unavailable_is_a_warning_of_the_group_in_status_the_json_and_the_page() {
    // Given a group rolled by baton-controller whose zone a says max-unavailable "abc"
    let scene = Scene::start("plugin-warning").await;
    let client = scene.namespace.client();
    let namespace = scene.namespace.name();
    let plugin = Plugin {
        kubeconfig: scene.control_plane.kubeconfig_path(),
        namespace,
    };
    create_ready_group(&client, namespace, &["a", "b"], 1).await;
    annotate(
        &client,
        namespace,
        "ingester-zone-a",
        "rollout-max-unavailable",
        Some("abc"),
    )
    .await;
    let warning = "StatefulSet ingester-zone-a: annotation rollout-max-unavailable has the invalid \
                   value \"abc\" (accepted: a positive integer or a percentage from 1% to 100%); \
                   using 1";

    // Then kubectl baton status says it under the group
    plugin
        .run(&["status"])
        .await
        .exited(0)
        .says(&[&format!("ingester: warning (InvalidAnnotation): {warning}")]);
    // and the controller's /api/v1/status lists it with its kind and StatefulSet
    let document = baton_e2e::wait_for(
        Duration::from_secs(90),
        "the controller's status lists the warning",
        || async {
            let (code, body) = scene.controller.ops_get("/api/v1/status").await?;
            let document: serde_json::Value = serde_json::from_str(&body).ok()?;
            (code == 200 && document["groups"][0]["warnings"][0]["message"] == warning)
                .then_some(document)
        },
    )
    .await;
    let listed = &document["groups"][0]["warnings"][0];
    assert_eq!(listed["kind"], "InvalidAnnotation");
    assert_eq!(listed["statefulset"], "ingester-zone-a");
    // and the page shows it
    let (code, page) = scene
        .controller
        .ops_get("/ui/status")
        .await
        .expect("the page answers");
    assert_eq!(code, 200);
    assert!(
        page.contains(r#"data-kind="InvalidAnnotation""#)
            && page.contains(
                "annotation rollout-max-unavailable has the invalid value &quot;abc&quot;"
            ),
        "{page}"
    );
}

#[tokio::test]
async fn status_in_a_namespace_without_groups_says_so_and_where_it_read() {
    // Given a namespace without any rollout group
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "plugin-empty").await;
    let plugin = Plugin {
        kubeconfig: control_plane.kubeconfig_path(),
        namespace: namespace.name(),
    };
    let config: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(control_plane.kubeconfig_path()).expect("the kubeconfig"),
    )
    .expect("the kubeconfig is YAML");
    let context = config["current-context"]
        .as_str()
        .expect("a current context");

    // Then status says no group is there, naming the namespace and the context read
    let status = plugin.run(&["status"]).await;
    status.exited(0).says(&[&format!(
        "no rollout group in namespace {} (context {context}): no StatefulSet there has the \
         label rollout-group",
        namespace.name()
    )]);
    assert!(
        !status.stdout.contains("GROUP"),
        "no header over nothing: {status:#?}"
    );
}

#[tokio::test]
async fn pause_of_the_group_pauses_every_zone_until_resume_of_the_group() {
    // Given a 3-zone group rolled by baton-controller
    let scene = Scene::start("plugin-pause-group").await;
    let client = scene.namespace.client();
    let namespace = scene.namespace.name();
    let plugin = Plugin {
        kubeconfig: scene.control_plane.kubeconfig_path(),
        namespace,
    };
    let names = create_ready_group(&client, namespace, &["a", "b", "c"], 1).await;

    // When a person pauses the group by its name
    plugin.run(&["pause", "ingester"]).await.exited(0).says(&[
        "statefulset/ingester-zone-a: grafana.com/rollout-paused set to \"true\"",
        "statefulset/ingester-zone-b: grafana.com/rollout-paused set to \"true\"",
        "statefulset/ingester-zone-c: grafana.com/rollout-paused set to \"true\"",
        &format!(
            "rollout group ingester is paused: no pod of its 3 members is deleted until \
             kubectl baton resume ingester -n {namespace}"
        ),
    ]);
    for name in &names {
        assert_eq!(
            plugin.annotation(&client, name, PAUSED).await.as_deref(),
            Some("true"),
            "{name}"
        );
    }

    // and a new version is deployed
    roll_out(&client, namespace, &names, "v2").await;

    // Then no zone rolls: wait times out on a paused group
    plugin
        .run(&["wait", "ingester", "--timeout", "3s"])
        .await
        .exited(3)
        .complains(&["waiting for rollout group ingester: paused"]);
    for name in &names {
        assert_eq!(
            rollout_state(&client, namespace, name).await.updated(),
            0,
            "{name}"
        );
    }

    // When the group is resumed by its name, it rolls to the end
    plugin.run(&["resume", "ingester"]).await.exited(0).says(&[
        "statefulset/ingester-zone-a: grafana.com/rollout-paused removed (was \"true\")",
        "statefulset/ingester-zone-c: grafana.com/rollout-paused removed (was \"true\")",
    ]);
    plugin
        .run(&["wait", "ingester", "--timeout", "2m"])
        .await
        .exited(0);

    // And pausing one zone says what it does not hold, and how to hold the group
    plugin
        .run(&["pause", "ingester-zone-b"])
        .await
        .exited(0)
        .says(&[&format!(
            "a pause holds only ingester-zone-b's own pods: the other zones of rollout group \
         ingester go on, and a zone after ingester-zone-b may roll past it; to hold the whole \
         group: kubectl baton pause ingester -n {namespace}"
        )]);
}
