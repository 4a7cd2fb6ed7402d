//! A fake API server for the unit tests of the commands that write across member clusters: it
//! serves a namespace's StatefulSets (by label selector), pods and ControllerRevisions, a
//! SelfSubjectReview naming `alice`, and takes merge patches of StatefulSets' annotations,
//! recording each (or refusing them with 403, as a missing permission). Plain HTTP/1.1 on
//! loopback: enough for kube's client, nothing more.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::access::{Access, ClusterAccess};
use crate::clusters::Cluster;

pub const NAMESPACE: &str = "mimir";

#[derive(Default)]
struct State {
    statefulsets: Vec<Value>,
    pods: Vec<Value>,
    patches: Vec<(String, Value)>,
    refuse_patches: bool,
}

/// One fake cluster, served until the test's runtime ends.
#[derive(Clone)]
pub struct FakeCluster {
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl FakeCluster {
    /// Serves `statefulsets` and `pods` (JSON objects of namespace [`NAMESPACE`]).
    pub async fn start(statefulsets: Vec<Value>, pods: Vec<Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let state = Arc::new(Mutex::new(State {
            statefulsets,
            pods,
            ..State::default()
        }));
        let serving = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, serving.clone()));
            }
        });
        Self { url, state }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every patch taken so far: the StatefulSet's name and the patch.
    pub fn patches(&self) -> Vec<(String, Value)> {
        self.state().patches.clone()
    }

    /// Refuses (403) every patch from now on, or takes them again.
    pub fn refuse_patches(&self, refuse: bool) {
        self.state().refuse_patches = refuse;
    }

    /// StatefulSet `name`'s annotations now.
    pub fn annotations(&self, name: &str) -> Value {
        self.state()
            .statefulsets
            .iter()
            .find(|statefulset| statefulset["metadata"]["name"] == name)
            .map(|statefulset| statefulset["metadata"]["annotations"].clone())
            .unwrap_or(Value::Null)
    }
}

/// Cluster `name` reached at `url` (a [`FakeCluster`]'s, or [`unreachable`]).
pub fn member(name: &str, url: &str) -> ClusterAccess {
    let config = kube::Config::new(url.parse().expect("a URL"));
    ClusterAccess {
        member: Cluster {
            name: name.to_owned(),
            context: name.to_owned(),
        },
        server: url.to_owned(),
        access: Access {
            client: kube::Client::try_from(config).expect("a client"),
            namespace: NAMESPACE.to_owned(),
            context: Some(name.to_owned()),
            reader: Default::default(),
        },
    }
}

/// A URL nothing listens at: a cluster that cannot be reached.
pub async fn unreachable() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    drop(listener);
    url
}

async fn serve(stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or_default().to_owned();
        let target = words.next().unwrap_or_default().to_owned();
        let mut length = 0;
        loop {
            let mut header = String::new();
            if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        let (code, answer) = {
            let mut state = state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            answer(&mut state, &method, &target, &body)
        };
        let answer = answer.to_string();
        let response = format!(
            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> (u16, Value) {
    (
        200,
        json!({"kind": kind, "apiVersion": api_version, "metadata": {}, "items": items}),
    )
}

/// Whether `object`'s labels match `selector` (`key=value` or `key`, comma-separated).
fn selected(object: &Value, selector: &str) -> bool {
    selector.split(',').all(|term| match term.split_once('=') {
        Some((key, value)) => object["metadata"]["labels"][key] == value,
        None => !object["metadata"]["labels"][term].is_null(),
    })
}

fn answer(state: &mut State, method: &str, target: &str, body: &[u8]) -> (u16, Value) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let selector = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("labelSelector="))
        .map(|selector| selector.replace("%3D", "=").replace("%2C", ","));
    let statefulsets = format!("/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets");
    match (method, path) {
        ("GET", path) if path == statefulsets => list(
            "StatefulSetList",
            "apps/v1",
            state
                .statefulsets
                .iter()
                .filter(|statefulset| {
                    selector
                        .as_deref()
                        .is_none_or(|selector| selected(statefulset, selector))
                })
                .cloned()
                .collect(),
        ),
        ("GET", path) if path == format!("/api/v1/namespaces/{NAMESPACE}/pods") => {
            list("PodList", "v1", state.pods.clone())
        }
        ("GET", path)
            if path == format!("/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions") =>
        {
            list("ControllerRevisionList", "apps/v1", Vec::new())
        }
        ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews") => (
            201,
            json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                   "metadata": {}, "status": {"userInfo": {"username": "alice"}}}),
        ),
        (method, path) if path.starts_with(&format!("{statefulsets}/")) => {
            let name = &path[statefulsets.len() + 1..];
            let Some(found) = state
                .statefulsets
                .iter_mut()
                .find(|statefulset| statefulset["metadata"]["name"] == name)
            else {
                return status(
                    404,
                    "NotFound",
                    &format!("statefulsets \"{name}\" not found"),
                );
            };
            match method {
                "GET" => (200, found.clone()),
                "PATCH" if state.refuse_patches => status(
                    403,
                    "Forbidden",
                    &format!("cannot patch statefulsets \"{name}\""),
                ),
                "PATCH" => {
                    let patch: Value = serde_json::from_slice(body).expect("a JSON patch");
                    let annotations = &mut found["metadata"]["annotations"];
                    if annotations.is_null() {
                        *annotations = json!({});
                    }
                    for (key, value) in patch["metadata"]["annotations"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default()
                    {
                        let map = annotations.as_object_mut().expect("an object");
                        if value.is_null() {
                            map.remove(&key);
                        } else {
                            map.insert(key, value);
                        }
                    }
                    let patched = found.clone();
                    state.patches.push((name.to_owned(), patch));
                    (200, patched)
                }
                _ => status(405, "MethodNotAllowed", method),
            }
        }
        _ => status(404, "NotFound", path),
    }
}
