//! The small HTTP endpoints tests put "on a pod" (its loopback IP), standing in for the pods'
//! prepare-shutdown (webhook) and prepare-delayed-downscale (controller) endpoints.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A request an endpoint received: `"POST /path"`.
pub type Call = String;

/// A status for [`PodEndpoint::answer`]: accept the request and never answer it (until the
/// endpoint is dropped), like a pod that hangs.
pub const HANG: u16 = 0;

/// An HTTP server on a pod's IP: answers each method with the status and body it is told to
/// (by default 200 and `{"timestamp": <when it started>}`, a pod that has just prepared), and
/// records every request. One request per connection is all baton's pod client needs.
#[derive(Debug)]
pub struct PodEndpoint {
    pub address: SocketAddr,
    calls: Arc<Mutex<Vec<Call>>>,
    /// Each request's header lines (`Name: value`), in the order of `calls`.
    headers: Arc<Mutex<Vec<Vec<String>>>>,
    answers: Arc<Mutex<HashMap<String, (u16, String)>>>,
    started_at: i64,
    task: tokio::task::JoinHandle<()>,
    stopped: CancellationToken,
}

impl PodEndpoint {
    /// Listens on `ip:port`.
    pub async fn start(ip: Ipv4Addr, port: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((IpAddr::V4(ip), port))
            .await
            .with_context(|| format!("binding {ip}:{port}"))?;
        let address = listener.local_addr()?;
        let started_at = jiff::Timestamp::now().as_second();
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let headers: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
        let answers: Arc<Mutex<HashMap<String, (u16, String)>>> = Arc::default();
        let stopped = CancellationToken::new();
        let task = tokio::spawn({
            let (calls, answers, stopped) = (calls.clone(), answers.clone(), stopped.clone());
            let headers = headers.clone();
            async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    let (calls, answers, stopped) =
                        (calls.clone(), answers.clone(), stopped.clone());
                    let headers = headers.clone();
                    tokio::spawn(async move {
                        let Some(request) = read_request_head(&mut stream).await else {
                            return;
                        };
                        let (method, path) = (request.method, request.path);
                        let (code, body) = answers
                            .lock()
                            .unwrap()
                            .get(&method)
                            .cloned()
                            .unwrap_or_else(|| (200, timestamp_body(started_at)));
                        {
                            // Together, so a call's headers are at its index
                            let mut calls = calls.lock().unwrap();
                            calls.push(format!("{method} {path}"));
                            headers.lock().unwrap().push(request.headers);
                        }
                        if code == HANG {
                            stopped.cancelled().await;
                            return;
                        }
                        let response = format!(
                            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = stream.write_all(response.as_bytes()).await;
                        let _ = stream.shutdown().await;
                    });
                }
            }
        });
        Ok(Self {
            address,
            calls,
            headers,
            answers,
            started_at,
            task,
            stopped,
        })
    }

    /// Answers requests with `method` (`"POST"`, `"DELETE"`) with `code` (or [`HANG`]) from now
    /// on, with the default body.
    pub fn answer(&self, method: &str, code: u16) {
        self.answer_with(method, code, &timestamp_body(self.started_at));
    }

    /// Answers requests with `method` with `code` and `body` from now on.
    pub fn answer_with(&self, method: &str, code: u16, body: &str) {
        self.answers
            .lock()
            .unwrap()
            .insert(method.to_owned(), (code, body.to_owned()));
    }

    /// Answers POST as a pod that prepared at `unix_seconds`.
    pub fn prepared_at(&self, unix_seconds: i64) {
        self.answer_with("POST", 200, &timestamp_body(unix_seconds));
    }

    /// Everything received so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// How many requests with `method` were received.
    pub fn count(&self, method: &str) -> usize {
        let prefix = format!("{method} ");
        self.calls()
            .iter()
            .filter(|call| call.starts_with(&prefix))
            .count()
    }

    pub fn clear(&self) {
        self.calls.lock().unwrap().clear();
        self.headers.lock().unwrap().clear();
    }

    /// The values of header `name` (any case) in every request received so far, in order.
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.headers
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .filter_map(|line| {
                let (header, value) = line.split_once(':')?;
                header
                    .trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
            .collect()
    }
}

impl Drop for PodEndpoint {
    fn drop(&mut self) {
        self.stopped.cancel();
        self.task.abort();
    }
}

fn timestamp_body(unix_seconds: i64) -> String {
    format!("{{\"timestamp\": {unix_seconds}}}")
}

/// A test endpoint on the loopback IP the pod simulator gives each of `pods`, all on `port`:
/// pod name → its endpoint.
pub async fn endpoints_on_pods<S: AsRef<str>>(
    simulator: &crate::PodSimulator,
    pods: &[S],
    port: u16,
) -> std::collections::BTreeMap<String, PodEndpoint> {
    let mut endpoints = std::collections::BTreeMap::new();
    for pod in pods {
        let pod = pod.as_ref();
        let endpoint = PodEndpoint::start(simulator.pod_ip(pod), port)
            .await
            .unwrap_or_else(|error| panic!("an endpoint for {pod}: {error:#}"));
        endpoints.insert(pod.to_owned(), endpoint);
    }
    endpoints
}

/// Reads one request's head and drains its body (by `Content-Length`); returns its method and
/// path. `None` when the peer closes early or sends more than 64 KiB of head.
pub async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    let (method, path, _) = read_request_with_body(stream).await?;
    Some((method, path))
}

/// A request as read: its method, path, header lines and body.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// `Name: value`, as sent.
    pub headers: Vec<String>,
    pub body: Vec<u8>,
}

/// As [`read_request`], and returns the body too.
pub async fn read_request_with_body(
    stream: &mut tokio::net::TcpStream,
) -> Option<(String, String, Vec<u8>)> {
    let request = read_request_head(stream).await?;
    Some((request.method, request.path, request.body))
}

/// As [`read_request`], the whole request.
pub async fn read_request_head(stream: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end + 4;
        }
        if buffer.len() > 64 * 1024 {
            return None;
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut words = head.split_whitespace();
    let method = words.next()?.to_owned();
    let path = words.next()?.to_owned();
    let headers = head
        .lines()
        .skip(1)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect();
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}
