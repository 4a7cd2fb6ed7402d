//! The controller issues the webhook's certificate into a Secret, injects its CA into labelled
//! webhook configurations, renews and rotates without a restart, and regenerates garbage —
//! checked through the real API server calling baton-webhook.

use std::time::{Duration, Instant};

use baton_e2e::certificate_support::{
    GuardConfiguration, Kubelet, dns_names, secret_text, start_webhook, wait_issued,
};
use baton_e2e::controller_support::{Controller, wait_event};
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::keys::NO_DOWNSCALE;
use baton_e2e::{ControlPlane, TestNamespace, wait_until};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const SECRET: &str = "baton-webhook-tls";
/// The test's webhook is reached on 127.0.0.1, so the certificate must name it.
const LOCAL_IP: (&str, &str) = ("BATON_CERTIFICATES__EXTRA_IPS", "[127.0.0.1]");

/// A dry-run scale of `name` to `replicas`: `Ok` if admitted, the API server's message if not.
async fn dry_run_scale(api: &Api<StatefulSet>, name: &str, replicas: i32) -> Result<(), String> {
    api.patch_scale(
        name,
        &PatchParams::default().dry_run(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .map(|_| ())
    .map_err(|error| match error {
        kube::Error::Api(status) => status.message,
        other => other.to_string(),
    })
}

/// The webhook judged the downscale (rather than the API server failing to call it).
fn judged_by_the_webhook(outcome: &Result<(), String>) -> bool {
    matches!(outcome, Err(message)
        if message.contains("denied the request") && message.contains(NO_DOWNSCALE))
}

async fn guarded_statefulset(ns: &TestNamespace) -> Api<StatefulSet> {
    StatefulSetFixture::new("guarded")
        .replicas(3)
        .label(NO_DOWNSCALE, "true")
        .create(&ns.client(), ns.name())
        .await;
    ns.api::<StatefulSet>()
}

#[tokio::test]
async fn a_configuration_created_later_gets_the_ca_and_the_api_server_reaches_the_webhook() {
    let control_plane = ControlPlane::shared().await;
    let ns = TestNamespace::create(control_plane, "cert-inject").await;
    // Given a controller issuing the certificate, and the webhook serving the copied Secret
    let _controller = Controller::start(control_plane, ns.name(), &[LOCAL_IP]).await;
    let kubelet = Kubelet::mount(ns.api::<Secret>(), SECRET).await.unwrap();
    let (_webhook, port) = start_webhook(control_plane, ns.name(), &kubelet, &[])
        .await
        .unwrap();
    let statefulsets = guarded_statefulset(&ns).await;

    // When a labelled webhook configuration without a caBundle is created
    let guard = GuardConfiguration::create(
        control_plane,
        &format!("baton-cert-{}", ns.name()),
        ns.name(),
        port,
        true,
    )
    .await
    .unwrap();

    // Then it gets the Secret's ca.crt
    let ca = secret_text(&ns.api::<Secret>().get(SECRET).await.unwrap(), "ca.crt");
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    wait_until(
        Duration::from_secs(20),
        "the caBundle is injected",
        || async { guard.ca_bundle().await == ca },
    )
    .await;
    // And the API server calls baton-webhook over TLS with it: the downscale is judged
    wait_until(
        Duration::from_secs(20),
        "the API server reaches the webhook",
        || async { judged_by_the_webhook(&dry_run_scale(&statefulsets, "guarded", 1).await) },
    )
    .await;
    assert_eq!(dry_run_scale(&statefulsets, "guarded", 4).await, Ok(()));
}

#[tokio::test]
async fn a_cleared_ca_bundle_is_restored_and_unlabelled_configurations_are_untouched() {
    let control_plane = ControlPlane::shared().await;
    let ns = TestNamespace::create(control_plane, "cert-restore").await;
    let controller = Controller::start(control_plane, ns.name(), &[LOCAL_IP]).await;
    let unlabelled = GuardConfiguration::create(
        control_plane,
        &format!("baton-cert-unlabelled-{}", ns.name()),
        ns.name(),
        1,
        false,
    )
    .await
    .unwrap();
    let labelled = GuardConfiguration::create(
        control_plane,
        &format!("baton-cert-labelled-{}", ns.name()),
        ns.name(),
        1,
        true,
    )
    .await
    .unwrap();
    wait_until(
        Duration::from_secs(20),
        "the caBundle is injected",
        || async { !labelled.ca_bundle().await.is_empty() },
    )
    .await;
    let injected = labelled.ca_bundle().await;

    // Given an injected configuration, when someone clears its caBundle
    let api =
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
            control_plane.admin_client().await,
        );
    let mut cleared = labelled.get().await;
    for webhook in cleared.webhooks.iter_mut().flatten() {
        webhook.client_config.ca_bundle = Some(ByteString(Vec::new()));
    }
    api.replace(&labelled.name, &Default::default(), &cleared)
        .await
        .unwrap();

    // Then it is restored
    wait_until(
        Duration::from_secs(20),
        "the caBundle is restored",
        || async { labelled.ca_bundle().await == injected },
    )
    .await;
    // And once restored it is left alone: no update loop
    let settled = labelled.get().await.metadata.resource_version;
    let writes_before = injections(&controller).await;
    let observe_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < observe_until {
        assert_eq!(labelled.get().await.metadata.resource_version, settled);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(injections(&controller).await, writes_before);
    // And the unlabelled configuration never got a caBundle
    assert_eq!(unlabelled.ca_bundle().await, "");
}

/// `baton_ca_bundle_injections_total` summed over kinds.
async fn injections(controller: &Controller) -> u64 {
    controller
        .metrics()
        .await
        .lines()
        .filter(|line| line.starts_with("baton_ca_bundle_injections_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn a_minute_of_admissions_while_the_certificate_and_the_ca_rotate_never_fails() {
    let control_plane = ControlPlane::shared().await;
    let ns = TestNamespace::create(control_plane, "cert-rotate").await;
    // Given lifetimes of seconds: the serving certificate renews every 6 s, the CA rotates
    // every 16 s (publish, switch 3 s later, drop the old one 3 s after that)
    let _controller = Controller::start(
        control_plane,
        ns.name(),
        &[
            LOCAL_IP,
            ("BATON_CERTIFICATES__CA_LIFETIME", "24s"),
            ("BATON_CERTIFICATES__SERVING_LIFETIME", "9s"),
            ("BATON_CERTIFICATES__CA_OVERLAP", "3s"),
        ],
    )
    .await;
    let kubelet = Kubelet::mount(ns.api::<Secret>(), SECRET).await.unwrap();
    let (webhook, port) = start_webhook(
        control_plane,
        ns.name(),
        &kubelet,
        &[("BATON_WEBHOOK__CERT_RELOAD_INTERVAL", "200ms")],
    )
    .await
    .unwrap();
    let statefulsets = guarded_statefulset(&ns).await;
    let guard = GuardConfiguration::create(
        control_plane,
        &format!("baton-cert-{}", ns.name()),
        ns.name(),
        port,
        true,
    )
    .await
    .unwrap();
    wait_until(
        Duration::from_secs(20),
        "the API server reaches the webhook",
        || async { judged_by_the_webhook(&dry_run_scale(&statefulsets, "guarded", 1).await) },
    )
    .await;

    // When admission requests go through the API server for a minute
    let (certs_before, bundles_before) = (kubelet.distinct_certs(), kubelet.distinct_bundles());
    let mut judged = 0;
    let mut failures = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let outcome = dry_run_scale(&statefulsets, "guarded", 1).await;
        if judged_by_the_webhook(&outcome) {
            judged += 1;
        } else {
            failures.push(outcome);
        }
    }

    // Then every one was judged by the webhook
    assert!(
        failures.is_empty(),
        "{} of {} admissions failed, first: {:?}\nwebhook:\n{}",
        failures.len(),
        failures.len() + judged,
        failures.first(),
        webhook.output()
    );
    assert!(judged > 100, "only {judged} admissions in a minute");
    // While the serving certificate and the CA really rotated
    let renewed = kubelet.distinct_certs() - certs_before;
    let bundles = kubelet.distinct_bundles() - bundles_before;
    assert!(
        renewed >= 6,
        "the serving certificate changed {renewed} times"
    );
    assert!(
        bundles >= 4,
        "ca.crt changed {bundles} times: no CA rotation"
    );
    drop(guard);
}

#[tokio::test]
async fn a_garbage_secret_is_regenerated_with_a_warning_event() {
    let control_plane = ControlPlane::shared().await;
    let ns = TestNamespace::create(control_plane, "cert-garbage").await;
    let _controller = Controller::start(control_plane, ns.name(), &[]).await;
    let secrets = ns.api::<Secret>();
    let issued = wait_issued(&secrets, SECRET).await;

    // When someone writes garbage into the certificate
    secrets
        .patch(
            SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"tls.crt": "Z2FyYmFnZQ=="}})),
        )
        .await
        .unwrap();

    // Then a new CA and certificate replace it
    wait_until(
        Duration::from_secs(20),
        "the Secret is regenerated",
        || async {
            let secret = secrets.get(SECRET).await.unwrap();
            secret_text(&secret, "tls.crt").starts_with("-----BEGIN CERTIFICATE-----")
                && secret_text(&secret, "ca.crt") != secret_text(&issued, "ca.crt")
        },
    )
    .await;
    // And a warning Event on the Secret says why
    let events = ns.api::<Event>();
    wait_until(
        Duration::from_secs(20),
        "a warning Event is emitted",
        || async {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|event| {
                    event.type_.as_deref() == Some("Warning")
                        && event.reason.as_deref() == Some("CertificateRegenerated")
                        && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(SECRET)
                        && event
                            .note
                            .as_deref()
                            .is_some_and(|note| note.contains("tls.crt"))
                })
        },
    )
    .await;
}

#[tokio::test]
async fn renaming_the_service_reissues_the_certificate_under_the_same_ca() {
    let control_plane = ControlPlane::shared().await;
    let ns = TestNamespace::create(control_plane, "cert-rename").await;
    // Given a certificate issued for the Service baton-webhook
    let mut controller = Controller::start(control_plane, ns.name(), &[LOCAL_IP]).await;
    let secrets = ns.api::<Secret>();
    let issued = wait_issued(&secrets, SECRET).await;
    let old_name = format!("baton-webhook.{}.svc", ns.name());
    let new_name = format!("ingester-guard.{}.svc", ns.name());
    let names = dns_names(&secret_text(&issued, "tls.crt")).unwrap();
    assert!(names.contains(&old_name), "{names:?}");

    // When baton restarts configured for the Service renamed to ingester-guard
    controller.process.signal("TERM").unwrap();
    controller.process.wait().await.unwrap();
    let _controller = Controller::start(
        control_plane,
        ns.name(),
        &[
            LOCAL_IP,
            ("BATON_CERTIFICATES__SERVICE_NAME", "ingester-guard"),
        ],
    )
    .await;

    // Then the serving certificate is reissued for the new names, with nobody deleting the
    // Secret (the Go operator's users had to)
    wait_until(
        Duration::from_secs(20),
        "the certificate names the renamed Service",
        || async {
            let secret = secrets.get(SECRET).await.unwrap();
            dns_names(&secret_text(&secret, "tls.crt"))
                .is_ok_and(|names| names.contains(&new_name) && !names.contains(&old_name))
        },
    )
    .await;
    let reissued = secrets.get(SECRET).await.unwrap();
    assert_eq!(
        reissued.metadata.uid, issued.metadata.uid,
        "the same Secret"
    );
    // And signed by the same CA, so no webhook configuration needs a new caBundle
    assert_eq!(
        secret_text(&reissued, "ca.crt"),
        secret_text(&issued, "ca.crt")
    );
    // And an Event on the Secret says why it changed
    wait_event(
        &ns.client(),
        ns.name(),
        SECRET,
        "CertificateReissued",
        &[&old_name, &new_name],
    )
    .await;
}
