//! The HTTP layer in process: what is not an answerable review gets HTTP 400 saying why,
//! answers come back in the request's version, each failure is counted under what failed, the
//! TLS server reloads its certificate, speaks HTTP/1.1 and, once draining, closes each
//! connection after its answer.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{App, test};
use baton_config::{ByteSize, Config};
use baton_shared::http_server::Draining;
use baton_webhook::server::{self, NO_DOWNSCALE_PATH, PREPARE_DOWNSCALE_PATH, routes};
use baton_webhook::tls_reload::{CertFiles, ClientCaFile, ReloadingCert, ReloadingClientCa};
use common::{DENIED, labelled_downscale, review, scale, state, workload};
use serde_json::{Value, json};

fn config() -> Config {
    let mut config = Config {
        namespace: "mimir".into(),
        ..Config::default()
    };
    config.webhook.max_request_bytes = ByteSize(4096);
    config.webhook.request_timeout = baton_config::Duration::from_secs(2);
    config
}

/// POSTs `body` with `content_type` to `path`; returns the status and body text.
async fn post(path: &str, content_type: Option<&str>, body: Vec<u8>) -> (StatusCode, String) {
    post_with(&config(), path, content_type, body).await
}

/// [`post`] to a webhook configured with `config`.
async fn post_with(
    config: &Config,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, String) {
    let (state, _) = state(config);
    let app = test::init_service(App::new().configure(routes(state))).await;
    let mut request = test::TestRequest::post().uri(path).set_payload(body);
    if let Some(content_type) = content_type {
        request = request.insert_header(("content-type", content_type));
    }
    let response = test::call_service(&app, request.to_request()).await;
    let status = response.status();
    let body = test::read_body(response).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[actix_web::test]
async fn what_is_not_an_answerable_review_is_a_400_saying_why() {
    let good = serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap();
    let cases: Vec<(Option<&str>, Vec<u8>, &str)> = vec![
        (
            Some("text/plain"),
            good.clone(),
            "wrong content type \"text/plain\"",
        ),
        (None, good.clone(), "no content type"),
        (
            Some("application/json"),
            b"{not json".to_vec(),
            "the request body is not JSON",
        ),
        (
            Some("application/json"),
            Vec::new(),
            "the request body is not JSON",
        ),
        (
            Some("application/json"),
            b"[1]".to_vec(),
            "not an AdmissionReview",
        ),
        (
            Some("application/json"),
            br#"{"apiVersion":"apps/v1","kind":"StatefulSet"}"#.to_vec(),
            "not an AdmissionReview: apiVersion \"apps/v1\" and kind \"StatefulSet\"",
        ),
        (
            Some("application/json"),
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            "it has no request",
        ),
        (
            Some("application/json"),
            serde_json::to_vec(
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                       "request": {"uid": "u", "padding": "x".repeat(5000)}}),
            )
            .unwrap(),
            "larger than webhook.max_request_bytes (4096 bytes)",
        ),
    ];
    for path in [NO_DOWNSCALE_PATH, PREPARE_DOWNSCALE_PATH] {
        for (content_type, body, expected) in &cases {
            let (status, text) = post(path, *content_type, body.clone()).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{path} {content_type:?}: {text}"
            );
            assert!(
                text.contains(expected),
                "{path}: {text:?} should say {expected:?}"
            );
        }
    }
}

#[actix_web::test]
async fn answers_in_the_version_it_was_asked_in() {
    for api_version in ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] {
        let body = serde_json::to_vec(&labelled_downscale(api_version)).unwrap();
        let (status, text) = post(
            NO_DOWNSCALE_PATH,
            Some("application/json; charset=utf-8"),
            body,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            answer,
            json!({
                "apiVersion": api_version,
                "kind": "AdmissionReview",
                "response": {
                    "uid": "3b4c1f3e-7f0e-4c55-9d5c-1a2b3c4d5e6f",
                    "allowed": false,
                    "status": {"message": DENIED, "code": 403}
                }
            })
        );
    }
}

/// A review of a StatefulSet's `/scale` from 5 replicas to 3.
fn scale_down_review() -> Vec<u8> {
    serde_json::to_vec(&review(
        "admission.k8s.io/v1",
        "statefulsets",
        Some("scale"),
        scale(5),
        scale(3),
        false,
    ))
    .unwrap()
}

/// A change that cannot be judged is refused, as `failurePolicy: Fail` asks, saying why; the
/// Go operator's allow-with-a-warning is a setting.
#[actix_web::test]
async fn a_scale_whose_parent_cannot_be_read_is_refused_unless_allowed_on_error() {
    let body = scale_down_review();
    let (status, text) = post(NO_DOWNSCALE_PATH, Some("application/json"), body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["allowed"], json!(false), "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the change could not be judged, so it is refused (webhook.allow_on_error: true allows it instead): can't get statefulsets/ingester-zone-a in namespace mimir: reading statefulsets/ingester-zone-a"),
        "{message}"
    );

    let mut compatible = config();
    compatible.webhook.allow_on_error = true;
    let (status, text) = post_with(
        &compatible,
        NO_DOWNSCALE_PATH,
        Some("application/json"),
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
    let warning = answer["response"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("can't get statefulsets/ingester-zone-a in namespace mimir, allowing the change: reading statefulsets/ingester-zone-a"),
        "{warning}"
    );
}

#[actix_web::test]
async fn prepare_downscale_answers_what_needs_no_preparation_without_the_api() {
    let unlabelled = workload("StatefulSet", json!(5), json!({}));
    let cases = [
        // Dry runs never prepare pods.
        (
            review(
                "admission.k8s.io/v1",
                "statefulsets",
                Some("scale"),
                scale(5),
                scale(3),
                true,
            ),
            true,
            false,
        ),
        // Not opted in.
        (
            review(
                "admission.k8s.io/v1",
                "statefulsets",
                None,
                unlabelled.clone(),
                workload("StatefulSet", json!(3), json!({})),
                false,
            ),
            true,
            false,
        ),
        // Upscale.
        (
            review(
                "admission.k8s.io/v1beta1",
                "statefulsets",
                Some("scale"),
                scale(3),
                scale(5),
                false,
            ),
            true,
            false,
        ),
        // Deployments are not prepared: allowed, with a warning.
        (
            review(
                "admission.k8s.io/v1",
                "deployments",
                None,
                workload("Deployment", json!(5), json!({})),
                workload("Deployment", json!(3), json!({})),
                false,
            ),
            true,
            true,
        ),
        // Labelled but without the port annotation: denied.
        (
            review(
                "admission.k8s.io/v1",
                "statefulsets",
                None,
                workload(
                    "StatefulSet",
                    json!(5),
                    json!({"grafana.com/prepare-downscale": "true"}),
                ),
                workload(
                    "StatefulSet",
                    json!(3),
                    json!({"grafana.com/prepare-downscale": "true"}),
                ),
                false,
            ),
            false,
            false,
        ),
    ];
    for (review, allowed, warned) in cases {
        let (status, text) = post(
            PREPARE_DOWNSCALE_PATH,
            Some("application/json"),
            serde_json::to_vec(&review).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(answer["apiVersion"], review["apiVersion"]);
        assert_eq!(answer["response"]["allowed"], json!(allowed), "{answer}");
        assert_eq!(
            answer["response"]["warnings"].is_array(),
            warned,
            "{answer}"
        );
        if !allowed {
            assert_eq!(
                answer["response"]["status"]["message"],
                json!(
                    "downscale of statefulsets/ingester-zone-a in mimir from 5 to 3 replicas is not allowed because the grafana.com/prepare-downscale-http-port annotation is not set or empty."
                )
            );
        }
    }
}

type BodyStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<actix_web::web::Bytes, actix_web::error::PayloadError>>>,
>;

/// A client that announces a body of the largest size and sends it slowly holds its share of
/// the body budget only until webhook.read_timeout: then it is answered 408, its connection is
/// closed, and what it held is back. Meanwhile another client is answered at once, and the
/// slow client's own next request waits for its share.
#[actix_web::test]
async fn a_stalled_body_holds_only_its_clients_share_and_only_until_the_read_timeout() {
    // Given a budget of four largest bodies (4 KiB each): a client's share is one
    let mut config = config();
    config.webhook.max_inflight_request_bytes = ByteSize(16 * 1024);
    config.webhook.read_timeout = baton_config::Duration::from_millis(600);
    let (state, _) = state(&config);
    let app = test::init_service(App::new().configure(routes(state.clone()))).await;
    let (slow, other): (std::net::SocketAddr, std::net::SocketAddr) = (
        "10.0.0.1:40000".parse().unwrap(),
        "10.0.0.2:40000".parse().unwrap(),
    );
    let review = |from: std::net::SocketAddr| {
        test::TestRequest::post()
            .uri(NO_DOWNSCALE_PATH)
            .peer_addr(from)
            .insert_header(("content-type", "application/json"))
            .set_payload(serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap())
            .to_request()
    };
    // (a body that never comes: its sender is kept until the end)
    let (_sender, body) = futures::channel::mpsc::unbounded();
    let (stalled, _) = test::TestRequest::post()
        .uri(NO_DOWNSCALE_PATH)
        .peer_addr(slow)
        .insert_header(("content-type", "application/json"))
        .insert_header(("content-length", "4096"))
        .to_request()
        .replace_payload(actix_web::dev::Payload::from(Box::pin(body) as BodyStream));
    let started = std::time::Instant::now();

    // When the slow client stalls its body (join! polls in order: it takes its share first)
    let (stalled, (others, next)) =
        futures::join!(actix_web::dev::Service::call(&app, stalled), async {
            // and another client asks meanwhile, and later the slow client again
            let others = test::call_service(&app, review(other)).await;
            let answered_after = started.elapsed();
            tokio::time::sleep(Duration::from_millis(100)).await;
            let next = test::call_service(&app, review(slow)).await;
            (
                (others.status(), answered_after),
                (next.status(), started.elapsed()),
            )
        });

    // Then the other client is answered at once
    assert_eq!(others.0, StatusCode::OK);
    assert!(others.1 < Duration::from_millis(300), "{:?}", others.1);
    // and the stalled body is cut off at the deadline, closing its connection
    let stalled = stalled.unwrap();
    assert_eq!(stalled.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(
        stalled.response().head().connection_type(),
        actix_web::http::ConnectionType::Close
    );
    let text = String::from_utf8_lossy(&test::read_body(stalled).await).into_owned();
    assert!(text.contains("webhook.read_timeout"), "{text}");
    // and the slow client's next request waited for its share until then, and was answered
    assert_eq!(next.0, StatusCode::OK);
    assert!(next.1 >= Duration::from_millis(600), "{:?}", next.1);
    // and the whole budget is back, no client holding a share
    assert_eq!(state.body_budget().available(), 16);
    assert_eq!(state.body_budget().clients(), 0);
}

#[actix_web::test]
async fn other_methods_and_paths_are_refused_and_everything_is_measured() {
    let (state, registry) = state(&config());
    let app = test::init_service(App::new().configure(routes(state))).await;
    let get = test::call_service(
        &app,
        test::TestRequest::get().uri(NO_DOWNSCALE_PATH).to_request(),
    )
    .await;
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);
    let other =
        test::call_service(&app, test::TestRequest::post().uri("/mutate").to_request()).await;
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    let denied = test::TestRequest::post()
        .uri(NO_DOWNSCALE_PATH)
        .insert_header(("content-type", "application/json"))
        .set_payload(serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap())
        .to_request();
    assert_eq!(
        test::call_service(&app, denied).await.status(),
        StatusCode::OK
    );
    let bad = test::TestRequest::post()
        .uri(NO_DOWNSCALE_PATH)
        .insert_header(("content-type", "application/json"))
        .set_payload("nope")
        .to_request();
    assert_eq!(
        test::call_service(&app, bad).await.status(),
        StatusCode::BAD_REQUEST
    );

    let mut text = Vec::new();
    prometheus::Encoder::encode(
        &prometheus::TextEncoder::new(),
        &registry.gather(),
        &mut text,
    )
    .unwrap();
    let text = String::from_utf8(text).unwrap();
    for expected in [
        r#"baton_admission_decisions_total{result="denied",webhook="no-downscale"} 1"#,
        r#"baton_admission_decisions_total{result="bad_request",webhook="no-downscale"} 1"#,
        r#"rollout_operator_request_duration_seconds_count{method="POST",route="admission_no_downscale",status_code="200",ws="false"} 1"#,
        r#"rollout_operator_request_duration_seconds_count{method="POST",route="admission_no_downscale",status_code="400",ws="false"} 1"#,
        r#"rollout_operator_request_duration_seconds_count{method="GET",route="admission_no_downscale",status_code="405",ws="false"} 1"#,
        r#"rollout_operator_request_duration_seconds_count{method="POST",route="other",status_code="404",ws="false"} 1"#,
        // The Go operator's request middleware metrics: bodies received and sent, requests in
        // flight (none any more)
        r#"rollout_operator_request_message_bytes_count{method="POST",route="admission_no_downscale"} 2"#,
        r#"rollout_operator_request_message_bytes_bucket{method="POST",route="admission_no_downscale",le="1048576"} 2"#,
        r#"rollout_operator_response_message_bytes_count{method="POST",route="admission_no_downscale"} 2"#,
        r#"rollout_operator_response_message_bytes_count{method="GET",route="admission_no_downscale"} 1"#,
        r#"rollout_operator_inflight_requests{method="POST",route="admission_no_downscale"} 0"#,
    ] {
        assert!(text.contains(expected), "missing {expected}\n{text}");
    }
}

fn issue(name: &str) -> (String, String) {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    (cert.pem(), signing_key.serialize_pem())
}

/// A client that trusts only `ca_pem` and reaches `name` at `address`.
fn client_trusting(ca_pem: &str, name: &str, address: std::net::SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
        .resolve(name, address)
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// A TLS webhook server on 127.0.0.1 serving `cert_pem`/`key_pem` (written into `dir`, where a
/// test may renew them), to every client or only to `clients`' certificates.
fn serve_files(
    dir: &std::path::Path,
    cert_pem: &str,
    key_pem: &str,
    clients: Option<std::sync::Arc<ReloadingClientCa>>,
) -> (
    std::sync::Arc<ReloadingCert>,
    baton_shared::http_server::BoundServer,
) {
    baton_shared::crypto::install_default_provider();
    std::fs::write(dir.join("tls.crt"), cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), key_pem).unwrap();
    let cert = std::sync::Arc::new(
        ReloadingCert::load(CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        })
        .unwrap(),
    );
    let (state, _) = state(&config());
    let server = server::bind(
        "127.0.0.1:0".parse().unwrap(),
        cert.server_config(clients),
        state,
        Draining::default(),
        Duration::from_secs(1),
    )
    .unwrap();
    (cert, server)
}

#[tokio::test]
async fn the_tls_server_picks_up_a_renewed_certificate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_a, key_a) = issue("webhook.test");
    let (cert, server) = serve_files(dir.path(), &cert_a, &key_a, None);
    let address = server.local_addr();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(server.run(shutdown.clone()));
    let reloading = tokio::spawn(cert.clone().watch(
        Duration::from_millis(50),
        None,
        shutdown.clone(),
    ));

    let url = format!("https://webhook.test:{}{NO_DOWNSCALE_PATH}", address.port());
    let body = serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap();
    let ask = |client: reqwest::Client| {
        let (url, body) = (url.clone(), body.clone());
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
        }
    };
    let answer: Value = ask(client_trusting(&cert_a, "webhook.test", address))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["response"]["status"]["message"], json!(DENIED));

    // The Secret is renewed: kubelet swaps the files under the running process.
    let (cert_b, key_b) = issue("webhook.test");
    let staging = dir.path().join("staging");
    std::fs::create_dir(&staging).unwrap();
    std::fs::write(staging.join("tls.crt"), &cert_b).unwrap();
    std::fs::write(staging.join("tls.key"), &key_b).unwrap();
    std::fs::rename(staging.join("tls.key"), dir.path().join("tls.key")).unwrap();
    std::fs::rename(staging.join("tls.crt"), dir.path().join("tls.crt")).unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if ask(client_trusting(&cert_b, "webhook.test", address))
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the renewed certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ask(client_trusting(&cert_a, "webhook.test", address))
            .await
            .is_err(),
        "the old certificate is no longer served"
    );

    shutdown.cancel();
    serving.await.unwrap().unwrap();
    reloading.await.unwrap();
}

#[tokio::test]
async fn the_tls_server_speaks_http1_and_once_draining_closes_each_connection_after_answering() {
    // Given the TLS server and a client offering HTTP/2 and HTTP/1.1 (as the API server does)
    baton_shared::crypto::install_default_provider();
    let dir = tempfile::tempdir().unwrap();
    let (cert_pem, key_pem) = issue("webhook.test");
    std::fs::write(dir.path().join("tls.crt"), &cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &key_pem).unwrap();
    let cert = std::sync::Arc::new(
        ReloadingCert::load(CertFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        })
        .unwrap(),
    );
    let (state, _) = state(&config());
    let draining = Draining::default();
    let server = server::bind(
        "127.0.0.1:0".parse().unwrap(),
        cert.server_config(None),
        state,
        draining.clone(),
        Duration::from_secs(1),
    )
    .unwrap();
    let address = server.local_addr();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(server.run(shutdown.clone()));
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap()])
        .resolve("webhook.test", address)
        .no_proxy()
        .build()
        .unwrap();
    let url = format!("https://webhook.test:{}{NO_DOWNSCALE_PATH}", address.port());
    let body = serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap();
    let ask = || {
        client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    };

    // When it answers while serving normally
    let answer = ask().await.unwrap();
    // Then HTTP/1.1 was negotiated and the connection is kept alive
    assert_eq!(answer.version(), reqwest::Version::HTTP_11);
    assert_eq!(answer.headers().get("connection"), None);
    assert_eq!(answer.status(), 200);

    // When it drains
    draining.start();
    let answer = ask().await.unwrap();
    // Then it still answers, and asks the client to close the connection
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["connection"], "close");
    let review: Value = answer.json().await.unwrap();
    assert_eq!(review["response"]["status"]["message"], json!(DENIED));

    shutdown.cancel();
    serving.await.unwrap().unwrap();
}

/// A CA and a client certificate it signed (PEM: CA, client certificate, client key).
fn client_ca_and_certificate(name: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn with_a_client_ca_only_clients_presenting_its_certificates_are_served() {
    // Given a webhook server that requires client certificates of one CA (the API server's)
    let dir = tempfile::tempdir().unwrap();
    let (serving_cert, serving_key) = issue("webhook.test");
    let (api_server_ca, api_server_cert, api_server_key) =
        client_ca_and_certificate("kube-apiserver");
    let (_, stranger_cert, stranger_key) = client_ca_and_certificate("kube-apiserver");
    std::fs::write(dir.path().join("client-ca.crt"), &api_server_ca).unwrap();
    let clients = std::sync::Arc::new(
        ReloadingClientCa::load(ClientCaFile(dir.path().join("client-ca.crt"))).unwrap(),
    );
    let (_cert, server) = serve_files(dir.path(), &serving_cert, &serving_key, Some(clients));
    let address = server.local_addr();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(server.run(shutdown.clone()));
    let url = format!("https://webhook.test:{}{NO_DOWNSCALE_PATH}", address.port());
    let body = serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap();
    let ask = |identity: Option<(&str, &str)>| {
        let mut builder = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(serving_cert.as_bytes()).unwrap()])
            .resolve("webhook.test", address)
            .no_proxy();
        if let Some((cert, key)) = identity {
            builder = builder
                .identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
        }
        let request = builder
            .build()
            .unwrap()
            .post(url.clone())
            .header("content-type", "application/json")
            .body(body.clone());
        async move { request.send().await }
    };

    // When a client presents no certificate, or one of another CA, a review cannot even be sent
    assert!(
        ask(None).await.is_err(),
        "served a client with no certificate"
    );
    assert!(
        ask(Some((&stranger_cert, &stranger_key))).await.is_err(),
        "served a client whose certificate another CA signed"
    );
    // Then the API server's certificate is answered
    let answer: Value = ask(Some((&api_server_cert, &api_server_key)))
        .await
        .expect("the API server's certificate is served")
        .json()
        .await
        .unwrap();
    assert_eq!(answer["response"]["status"]["message"], json!(DENIED));

    shutdown.cancel();
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_new_client_ca_written_to_its_file_is_required_after_the_reload() {
    // Given a webhook server requiring client certificates of the CA in its client CA file,
    // which it polls
    let dir = tempfile::tempdir().unwrap();
    let (serving_cert, serving_key) = issue("webhook.test");
    let (old_ca, old_cert, old_key) = client_ca_and_certificate("kube-apiserver");
    let (new_ca, new_cert, new_key) = client_ca_and_certificate("kube-apiserver");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &old_ca).unwrap();
    let clients = std::sync::Arc::new(ReloadingClientCa::load(ClientCaFile(ca_file)).unwrap());
    let (_cert, server) = serve_files(
        dir.path(),
        &serving_cert,
        &serving_key,
        Some(clients.clone()),
    );
    let address = server.local_addr();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(server.run(shutdown.clone()));
    let reloading = tokio::spawn(clients.watch(Duration::from_millis(50), None, shutdown.clone()));
    let url = format!("https://webhook.test:{}{NO_DOWNSCALE_PATH}", address.port());
    let body = serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap();
    // (a new client, so a new connection and handshake, each time)
    let ask = |cert: &str, key: &str| {
        let request = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(serving_cert.as_bytes()).unwrap()])
            .identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap())
            .resolve("webhook.test", address)
            .no_proxy()
            .build()
            .unwrap()
            .post(url.clone())
            .header("content-type", "application/json")
            .body(body.clone());
        async move { request.send().await }
    };
    assert_eq!(
        ask(&old_cert, &old_key).await.unwrap().status(),
        200,
        "the old CA's certificate is served at first"
    );
    assert!(
        ask(&new_cert, &new_key).await.is_err(),
        "the new CA's certificate is refused at first"
    );

    // When the API server's client certificate is reissued by a new CA, written to the file as
    // kubelet updates a mounted ConfigMap (a new file renamed over the old)
    let staging = dir.path().join("client-ca.crt.new");
    std::fs::write(&staging, &new_ca).unwrap();
    std::fs::rename(&staging, dir.path().join("client-ca.crt")).unwrap();

    // Then a certificate of the new CA is served once the file is reloaded
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(answer) = ask(&new_cert, &new_key).await {
            assert_eq!(answer.status(), 200);
            let review: Value = answer.json().await.unwrap();
            assert_eq!(review["response"]["status"]["message"], json!(DENIED));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new client CA was never required"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // and one of the old CA is refused before a review is read
    assert!(
        ask(&old_cert, &old_key).await.is_err(),
        "the old CA's certificate is still served"
    );

    // When the file is replaced by something that is not a CA
    std::fs::write(dir.path().join("client-ca.crt"), "not a certificate").unwrap();
    // Then the last good CA stays: the new CA's certificate is still served, the old refused
    let replaced = tokio::time::Instant::now() + Duration::from_millis(300);
    while tokio::time::Instant::now() < replaced {
        assert_eq!(ask(&new_cert, &new_key).await.unwrap().status(), 200);
        assert!(ask(&old_cert, &old_key).await.is_err());
    }

    shutdown.cancel();
    serving.await.unwrap().unwrap();
    reloading.await.unwrap();
}

#[actix_web::test]
async fn each_request_that_fails_is_counted_once_under_what_failed() {
    // Given a webhook whose API server cannot be reached,
    let (state, registry) = state(&config());
    let app = test::init_service(App::new().configure(routes(state))).await;
    let post = |path: &str, content_type: &str, body: Vec<u8>| {
        test::TestRequest::post()
            .uri(path)
            .insert_header(("content-type", content_type))
            .set_payload(body)
            .to_request()
    };
    let scale_down = scale_down_review();
    let good = serde_json::to_vec(&labelled_downscale("admission.k8s.io/v1")).unwrap();

    // when it is sent a body that is not JSON, a review as text, a `/scale` whose parent it
    // cannot read, a `/scale` prepare-downscale must read the StatefulSet for, and a review
    // it can judge,
    let requests = [
        post(NO_DOWNSCALE_PATH, "application/json", b"nope".to_vec()),
        post(NO_DOWNSCALE_PATH, "text/plain", good.clone()),
        post(NO_DOWNSCALE_PATH, "application/json", scale_down.clone()),
        post(PREPARE_DOWNSCALE_PATH, "application/json", scale_down),
        post(NO_DOWNSCALE_PATH, "application/json", good),
    ];
    for request in requests {
        test::call_service(&app, request).await;
    }

    // then each failure is counted once, under the step that failed, and nothing else is.
    let mut counted = BTreeMap::new();
    for family in registry.gather() {
        if family.name() != baton_webhook::error::FAILURES_METRIC {
            continue;
        }
        for metric in family.get_metric() {
            let label = metric.get_label()[0].value().to_owned();
            counted.insert(label, metric.get_counter().get_value() as u64);
        }
    }
    let expected: BTreeMap<String, u64> = [
        ("not_json", 1),
        ("wrong_content_type", 1),
        ("unjudged", 1),
        ("kube_api", 1),
    ]
    .into_iter()
    .map(|(label, count)| (label.to_owned(), count))
    .collect();
    assert_eq!(counted, expected);
}
