//! Gate calls never go through a proxy named by the environment. Through a proxy, the proxy
//! resolves the URL's name, so the resolver guard (which refuses loopback and metadata-service
//! addresses) would never see where the call lands.
//!
//! The proxy variables are the process's, so the test runs its calls in a child process of its
//! own (this test binary again, this test alone, with the variables set): the test's process
//! keeps the proxy that counts connections, and no other test sees the variables.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use baton_controller::gates::egress::Allowlist;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// Set in the child process: it makes the calls.
const CHILD: &str = "BATON_TEST_CALLS_WITH_PROXY_VARIABLES";
const TEST: &str =
    "a_hook_or_check_call_ignores_proxy_variables_and_the_resolver_guard_still_refuses_loopback";

/// A proxy that answers nothing and counts who connected to it.
async fn counting_proxy() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("an address");
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                // Read what is sent and never answer: the caller times out.
                let mut buffer = [0u8; 1024];
                while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
            });
        }
    });
    (format!("http://{address}"), seen)
}

#[tokio::test]
async fn a_hook_or_check_call_ignores_proxy_variables_and_the_resolver_guard_still_refuses_loopback()
 {
    if std::env::var_os(CHILD).is_some() {
        return calls_with_proxy_variables().await;
    }
    // Given proxy variables naming a proxy that counts connections
    let (proxy, seen) = counting_proxy().await;
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("this test"));
    child
        .args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .stdin(Stdio::null());
    for variable in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        child.env(variable, &proxy);
    }
    // When an ordinary client and a gate call are made with them
    let ran = tokio::time::timeout(Duration::from_secs(60), child.output())
        .await
        .expect("the child ends")
        .expect("the child runs");
    let printed = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(printed.contains("1 passed"), "the calls ran: {printed}");
    // Then the ordinary client went through the proxy (the variables were in effect), and the
    // gate call did not (it would have been a second connection)
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "the ordinary client alone reached the proxy: {printed}"
    );
}

/// In the child: an ordinary client's call (through the proxy), then a gate call to a name that
/// resolves to loopback, refused by the resolver guard.
async fn calls_with_proxy_variables() {
    baton_shared::crypto::install_default_provider();
    let ordinary = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("a client");
    let _ = ordinary
        .get("http://hooks.example.invalid/ready")
        .send()
        .await;

    let gate = Allowlist::new("gates.hook_addresses", Vec::new())
        .client_builder(Duration::from_secs(2))
        .build()
        .expect("a client");
    let error = gate
        .get("http://localhost:8001/metrics")
        .send()
        .await
        .expect_err("refused");
    let chain = std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ");
    assert!(
        chain.contains("localhost resolves to no address"),
        "refused by the resolver guard, not sent to the proxy: {chain}"
    );
}
