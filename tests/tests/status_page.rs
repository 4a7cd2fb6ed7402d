//! The status page on a real controller, control plane and browser: given a group
//! mid-rollout, the page and its JSON say where each zone stands and why the group waits;
//! given a group rolled through, its timeline draws what happened, zone by zone.

use std::path::PathBuf;
use std::time::Duration;

use baton_core::gates::keys::{HALTED_ANNOTATION, SOAK_ANNOTATION};
use baton_core::status::timeline::{MarkKind, SpanKind, Timeline};
use baton_core::status::{Role, RolloutPhase, RolloutStatus};
use baton_e2e::Scene;
use baton_e2e::browser::Chromium;
use baton_e2e::controller_support::{Controller, roll_out, rollout_state, wait_rollout_complete};
use baton_e2e::fixtures::rollout_group;
use baton_e2e::wait_until;

const TIMEOUT: Duration = Duration::from_secs(90);
const ZONES: [&str; 3] = ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"];

/// A 3-zone group (3 pods each) mid-rollout: zone a rolled to v2 and complete, then b and c
/// told to roll to v3, a version whose pods crash-loop — so b's first new pod never becomes
/// ready, b holds the group and c waits its turn.
async fn group_mid_rollout() -> Scene {
    let scene = Scene::start("status").await;
    let (client, namespace) = (scene.namespace.client(), scene.namespace.name().to_owned());
    for fixture in rollout_group("ingester", &["a", "b", "c"], 3) {
        fixture.create(&client, &namespace).await;
    }
    let names: Vec<String> = ZONES.iter().map(|zone| zone.to_string()).collect();
    wait_rollout_complete(&client, &namespace, &names).await;
    roll_out(&client, &namespace, &names[..1], "v2").await;
    wait_rollout_complete(&client, &namespace, &names[..1]).await;
    scene.simulator.break_version("v3");
    roll_out(&client, &namespace, &names[1..], "v3").await;
    wait_until(TIMEOUT, "a pod of zone b runs v3", || async {
        rollout_state(&client, &namespace, ZONES[1]).await.updated() == 1
    })
    .await;
    scene
}

/// The JSON document, once it parses.
async fn status(controller: &Controller, query: &str) -> Option<RolloutStatus> {
    let (code, body) = controller
        .ops_get(&format!("/api/v1/status{query}"))
        .await?;
    (code == 200).then(|| serde_json::from_str(&body).expect("a RolloutStatus document"))
}

fn phases(status: &RolloutStatus) -> Vec<(String, RolloutPhase)> {
    status
        .groups
        .iter()
        .flat_map(|group| &group.zones)
        .map(|zone| (zone.statefulset.clone(), zone.phase))
        .collect()
}

fn expected_phases() -> Vec<(String, RolloutPhase)> {
    vec![
        (ZONES[0].to_owned(), RolloutPhase::Complete),
        (ZONES[1].to_owned(), RolloutPhase::Rolling),
        (ZONES[2].to_owned(), RolloutPhase::Waiting),
    ]
}

/// Waits until the JSON shows a complete, b rolling, c waiting (the controller's view and the
/// cluster converge within a reconcile).
async fn wait_mid_rollout_status(controller: &Controller) -> RolloutStatus {
    wait_until(
        TIMEOUT,
        "the status shows a complete, b rolling, c waiting, b's new pod crash-looping",
        || async {
            // (b's new pod is Pending before it crash-loops: wait for the state that stays)
            status(controller, "").await.is_some_and(|status| {
                phases(&status) == expected_phases()
                    && status.groups[0]
                        .waiting
                        .as_ref()
                        .is_some_and(|waiting| waiting.message.contains("CrashLoopBackOff"))
            })
        },
    )
    .await;
    status(controller, "").await.expect("answered just now")
}

#[tokio::test]
async fn the_page_in_a_browser_shows_each_zone_of_a_group_mid_rollout() {
    // Given a 3-zone group mid-rollout: a complete, b rolling a crash-looping version, c next
    let scene = group_mid_rollout().await;
    wait_mid_rollout_status(&scene.controller).await;

    // When the page is loaded in headless Chromium
    let chromium = Chromium::installed();
    let url = format!("http://{}/ui/status", scene.controller.ops_address);
    let dom = chromium
        .dump_dom(&url)
        .await
        .expect("chromium loads the page");

    // Then the DOM has each zone in its state, the group's wait in words, and the leader
    for (zone, phase) in [
        (ZONES[0], "complete"),
        (ZONES[1], "rolling"),
        (ZONES[2], "waiting"),
    ] {
        let row = format!(r#"data-zone="{zone}" data-phase="{phase}""#);
        assert!(dom.contains(&row), "no row {row} in the DOM:\n{dom}");
    }
    assert!(
        dom.contains("ingester-zone-b-0 (new revision) to become ready: CrashLoopBackOff"),
        "the wait in words:\n{dom}"
    );
    assert!(dom.contains("(MaxUnavailable)"), "the wait's kind:\n{dom}");
    assert!(dom.contains("— the leader."), "this replica leads:\n{dom}");

    // And a screenshot is kept for people to look at
    let screenshot = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/status-page.png");
    chromium
        .screenshot(&url, &screenshot, (1280, 900))
        .await
        .expect("chromium saves a screenshot");
    let size = std::fs::metadata(&screenshot)
        .expect("screenshot written")
        .len();
    assert!(
        size > 10_000,
        "a screenshot of a page, not a blank ({size} bytes)"
    );
}

#[tokio::test]
async fn the_json_status_is_versioned_names_the_wait_and_a_standby_names_the_leader() {
    // Given a 3-zone group mid-rollout
    let scene = group_mid_rollout().await;

    // When the leader's /api/v1/status is read, once its reconcile recorded the wait
    wait_mid_rollout_status(&scene.controller).await;
    wait_until(
        TIMEOUT,
        "the leader records since when the group waits",
        || async {
            status(&scene.controller, "").await.is_some_and(|status| {
                status.groups[0]
                    .waiting
                    .as_ref()
                    .is_some_and(|waiting| waiting.since.is_some())
            })
        },
    )
    .await;
    let status = self::status(&scene.controller, "").await.expect("answers");

    // Then it is a versioned document in camelCase, from the leader, with the group's wait
    assert_eq!(status.api_version, "baton.dev/v1alpha1");
    assert_eq!(status.kind, "RolloutStatus");
    assert_eq!(status.namespace, scene.namespace.name());
    assert_eq!(status.replica.role, Role::Leader);
    assert_eq!(status.leader.as_ref(), Some(&status.replica.identity));
    let group = &status.groups[0];
    assert_eq!(
        (group.name.as_str(), group.phase),
        ("ingester", RolloutPhase::Rolling)
    );
    let waiting = group
        .waiting
        .as_ref()
        .expect("the group waits for b's new pod");
    assert_eq!(waiting.kind, "MaxUnavailable");
    assert!(
        waiting.message.contains("CrashLoopBackOff"),
        "{}",
        waiting.message
    );
    assert!(waiting.since.expect("recorded") <= status.generated_at);
    let deleted: Vec<Option<&str>> = group
        .last_actions
        .iter()
        .filter(|action| action.action == "DeletePod")
        .map(|action| action.pod.as_deref())
        .collect();
    assert_eq!(
        deleted.first(),
        Some(&Some("ingester-zone-b-0")),
        "the latest deletion first: {:?}",
        group.last_actions
    );
    assert!(deleted.contains(&Some("ingester-zone-a-0")), "{deleted:?}");
    let b = &group.zones[1];
    assert_eq!((b.updated, b.ready, b.total), (1, 2, 3));
    assert_ne!(b.current_revision, b.update_revision);
    let (_, raw) = scene
        .controller
        .ops_get("/api/v1/status")
        .await
        .expect("answers");
    let raw: serde_json::Value = serde_json::from_str(&raw).expect("JSON");
    assert!(raw["generatedAt"].is_string(), "{raw}");
    assert!(raw["groups"][0]["lastActions"].is_array(), "{raw}");
    assert_eq!(
        raw["groups"][0]["zones"][1]["updateRevision"],
        b.update_revision.as_deref().unwrap()
    );

    // And ?group= selects one group, naming an unknown one in a 404
    let selected = self::status(&scene.controller, "?group=ingester")
        .await
        .expect("the group");
    assert_eq!(selected.groups.len(), 1);
    let (code, body) = scene
        .controller
        .ops_get("/api/v1/status?group=nope")
        .await
        .expect("answers");
    assert_eq!(code, 404);
    assert!(
        body.contains(r#"no rollout group "nope" in namespace"#),
        "{body}"
    );

    // When a second replica starts, it stands by
    let standby = Controller::start(scene.control_plane, scene.namespace.name(), &[]).await;

    // Then its page says it is a standby, names the leader, and shows the same zones
    let leader = status.replica.identity.clone();
    wait_until(TIMEOUT, "the standby names the leader", || async {
        self::status(&standby, "").await.is_some_and(|status| {
            status.replica.role == Role::Standby
                && status.leader.as_ref() == Some(&leader)
                && phases(&status) == expected_phases()
        })
    })
    .await;
    let (_, page) = standby.ops_get("/ui/status").await.expect("answers");
    assert!(page.contains("is a standby; the leader is"), "{page}");
    assert!(page.contains(&leader), "{page}");
}

/// The group's timeline in the leader's JSON, once it has one.
async fn timeline(controller: &Controller) -> Option<Timeline> {
    status(controller, "")
        .await
        .and_then(|status| status.groups.into_iter().next()?.timeline)
}

/// The DOM between the timeline row of `zone` and the next row (or the end of the timeline).
fn timeline_row<'a>(dom: &'a str, zone: &str) -> &'a str {
    let start = dom
        .find(&format!(r#"data-tl-zone="{zone}""#))
        .unwrap_or_else(|| panic!("no timeline row of {zone} in the DOM:\n{dom}"));
    let rest = &dom[start + 1..];
    let end = ["data-tl-zone=", "data-tl-lane=", "tl-marks"]
        .iter()
        .filter_map(|next| rest.find(next))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

#[tokio::test]
async fn the_timeline_in_a_browser_draws_each_zones_replacements_its_soak_and_a_halt_as_text() {
    // Given a 3-zone group (2 pods each) with a 2 s soak, rolled through by the controller
    let scene = Scene::start("timeline").await;
    let names = scene
        .create_group(&["a", "b", "c"], 2, |zone, fixture| match zone {
            "a" => fixture.annotation(SOAK_ANNOTATION, "2s"),
            _ => fixture,
        })
        .await;
    scene.roll_out(&names, "v2").await;
    scene.wait_complete(&names).await;
    let pods: Vec<String> = ZONES
        .iter()
        .flat_map(|zone| [format!("{zone}-0"), format!("{zone}-1")])
        .collect();
    wait_until(
        TIMEOUT,
        "the timeline has every pod's replacement ended",
        || async {
            timeline(&scene.controller).await.is_some_and(|timeline| {
                let ended: Vec<&str> = timeline
                    .spans
                    .iter()
                    .filter(|span| span.kind == SpanKind::Replacement && span.end.is_some())
                    .filter_map(|span| span.pod.as_deref())
                    .collect();
                pods.iter().all(|pod| ended.contains(&pod.as_str()))
            })
        },
    )
    .await;

    // When a person halts zone b, saying why in markup
    let why = r#"<img src=x onerror=alert(1)><b>stop</b>"#;
    scene.annotate(ZONES[1], HALTED_ANNOTATION, Some(why)).await;
    wait_until(TIMEOUT, "the timeline marks the halt", || async {
        timeline(&scene.controller).await.is_some_and(|timeline| {
            timeline
                .marks
                .iter()
                .any(|mark| mark.kind == MarkKind::Halt)
        })
    })
    .await;

    // And the page is loaded in headless Chromium
    let chromium = Chromium::installed();
    let url = format!("http://{}/ui/status", scene.controller.ops_address);
    let dom = chromium
        .dump_dom(&url)
        .await
        .expect("chromium loads the page");

    // Then the timeline has a row per zone, in zone order, and no other zone row
    let rows: Vec<usize> = ZONES
        .iter()
        .map(|zone| {
            dom.find(&format!(r#"data-tl-zone="{zone}""#))
                .unwrap_or_else(|| panic!("no timeline row of {zone}:\n{dom}"))
        })
        .collect();
    assert!(rows.is_sorted(), "rows in zone order: {rows:?}");
    assert_eq!(dom.matches("data-tl-zone=").count(), 3, "{dom}");

    // And each replaced pod's replacement is drawn in its zone's row, once: 6 in all
    for zone in ZONES {
        let row = timeline_row(&dom, zone);
        for ordinal in 0..2 {
            let pod = format!(r#"data-span="replacement" data-pod="{zone}-{ordinal}""#);
            assert_eq!(
                row.matches(&pod).count(),
                1,
                "{pod} in {zone}'s row:\n{row}"
            );
        }
        assert_eq!(
            row.matches(r#"data-span="replacement""#).count(),
            2,
            "{row}"
        );
    }
    assert_eq!(dom.matches(r#"data-span="replacement""#).count(), 6);

    // And the soak before zones b and c in their rows, none before the first zone
    for zone in &ZONES[1..] {
        let row = timeline_row(&dom, zone);
        assert!(
            row.contains(r#"data-span="soak""#),
            "a soak before {zone}:\n{row}"
        );
    }
    assert!(!timeline_row(&dom, ZONES[0]).contains(r#"data-span="soak""#));

    // And the halt is marked, its reason shown as text, not markup
    assert_eq!(dom.matches(r#"data-mark="halt""#).count(), 1, "{dom}");
    assert!(
        dom.contains("&lt;img src=x onerror=alert(1)&gt;&lt;b&gt;stop&lt;/b&gt;"),
        "the reason as text:\n{dom}"
    );
    assert!(
        !dom.contains("<img"),
        "no image element from the reason:\n{dom}"
    );
    assert!(
        !dom.contains("<b>stop"),
        "no bold element from the reason:\n{dom}"
    );

    // And each finished zone shows its revision once, not `rev → rev`
    let status = status(&scene.controller, "").await.expect("answers");
    for zone in &status.groups[0].zones {
        let revision = zone.update_revision.as_deref().expect("computed");
        assert_eq!(zone.current_revision.as_deref(), Some(revision));
        assert!(!dom.contains(&format!("{revision} → {revision}")), "{dom}");
        assert!(
            dom.contains(&format!(r#"<td class="rev">{revision}</td>"#)),
            "{dom}"
        );
    }

    // And a screenshot of the timeline is kept for people to look at
    let screenshot =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/status-timeline.png");
    chromium
        .screenshot(&url, &screenshot, (1280, 800))
        .await
        .expect("chromium saves a screenshot");
}
