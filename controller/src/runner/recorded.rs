//! A recorded API server for in-process tests of a pass: a kube client whose requests go to a
//! task that answers each with what the test's script says and records it (method and path),
//! in the order the pass sent them. The end-to-end tests keep the real API server; these say
//! exactly which requests a pass makes, and what it does when one fails or its term ends.

use std::pin::pin;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use tower_test::mock;

/// How the recorded API server answers one request.
pub(crate) enum Reply {
    /// 200 with this object.
    Object(serde_json::Value),
    /// A `Status` failure with this code.
    Status(u16),
}

/// The requests a pass sent, as `"METHOD /path"`, in order.
#[derive(Clone, Default)]
pub(crate) struct Recorded(Arc<Mutex<Vec<String>>>);

impl Recorded {
    pub(crate) fn requests(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A client in `namespace` whose API server answers each request by `script` (given its method
/// and path) and records it; the server stops when the client and its clones are dropped.
pub(crate) fn api(
    namespace: &str,
    script: impl Fn(&Method, &str) -> Reply + Send + 'static,
) -> (kube::Client, Recorded) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let recorded = Recorded::default();
    let log = recorded.clone();
    tokio::spawn(async move {
        let mut handle = pin!(handle);
        while let Some((request, send)) = handle.next_request().await {
            let (method, path) = (request.method().clone(), request.uri().path().to_owned());
            log.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(format!("{method} {path}"));
            let (code, body) = match script(&method, &path) {
                Reply::Object(object) => (200, object),
                Reply::Status(code) => (
                    code,
                    serde_json::json!({
                        "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                        "reason": "Scripted", "message": format!("{method} {path} answered {code}"),
                    }),
                ),
            };
            let response = Response::builder()
                .status(StatusCode::from_u16(code).expect("a scripted status code"))
                .body(Body::from(serde_json::to_vec(&body).expect("JSON")))
                .expect("a response");
            send.send_response(response);
        }
    });
    (kube::Client::new(service, namespace), recorded)
}
