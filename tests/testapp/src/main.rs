//! The application real-node end-to-end tests run in their pods: a static binary packed as the
//! only layer of a local image, so nothing is pulled from a registry. Its behaviour comes from
//! the environment, so one image serves every version a scenario rolls out:
//!
//! - `TESTAPP_BEHAVIOUR`: `healthy` (default), `crash` (exits 1 at once: the kubelet restarts
//!   it into CrashLoopBackOff), `never-ready` (serves, but `/ready` answers 503).
//! - `TESTAPP_STOP_DELAY_MS`: on SIGTERM, keep serving this long before exiting (a pod that is
//!   slow to stop, so it stays Terminating for real).
//! - `TESTAPP_PORT`: where it listens (8080).
//! - `TESTAPP_READY_AFTER_MS`: `/ready` answers 503 for this long after start (a process slow
//!   to warm up, such as a sidecar whose readiness probe fails for a while).
//!
//! Endpoints: `GET /ready`; `POST`/`DELETE` on any path containing `prepare-downscale` or
//! `prepare-shutdown` (the Go rollout-operator's prepare-downscale calls) and on
//! `/prepare-delayed-downscale` (answers `{"timestamp": <first prepare, unix seconds>}` as a
//! pod that started preparing then, reset by DELETE); `GET /metrics` counts every call and says
//! when the delayed-downscale preparation began, so a test reads over the pod's IP what the
//! operator asked of it; `GET /environment` answers the process's environment, a `NAME=value`
//! line each, so a test sees exactly what the kubelet gives a container (the link variables of
//! every Service in its namespace among them).
//!
//! `exit <code> [NAME=value...]` makes it a Job's one-shot process instead: it prints its
//! `BATON_` variables and exits with `<code>` if each `NAME` holds `value` in its environment,
//! else with 2, naming the first that does not (a Job check's Job, told how to end).
//!
//! `pause` as the first argument makes it the pods' sandbox (pause) process instead: it waits
//! for SIGTERM or SIGINT and exits. It reaps nothing: pods here do not share their PID
//! namespace, so the sandbox process has no children.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Default)]
struct State {
    /// Requests served, keyed `METHOD path`.
    calls: BTreeMap<String, u64>,
    /// When the current delayed-downscale preparation began (unix seconds).
    delayed_since: Option<u64>,
    terminating: bool,
    /// `/ready` fails until then (`TESTAPP_READY_AFTER_MS`).
    not_ready_until: Option<std::time::Instant>,
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("exit") {
        return exit(&args[2..]);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("testapp: starting the runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if std::env::args().nth(1).as_deref() == Some("pause") {
        return runtime.block_on(pause());
    }
    runtime.block_on(serve())
}

/// `exit <code> [NAME=value...]` (module header).
fn exit(args: &[String]) -> std::process::ExitCode {
    for (name, value) in std::env::vars().filter(|(name, _)| name.starts_with("BATON_")) {
        println!("{name}={value}");
    }
    let code: u8 = args.first().and_then(|code| code.parse().ok()).unwrap_or(0);
    for expected in &args[args.len().min(1)..] {
        let (name, value) = expected.split_once('=').unwrap_or((expected, ""));
        let seen = std::env::var(name).unwrap_or_default();
        if seen != value {
            eprintln!("testapp: {name} is {seen:?}, not {value:?}: exiting 2");
            return std::process::ExitCode::from(2);
        }
    }
    println!("testapp: exiting {code}");
    std::process::ExitCode::from(code)
}

async fn pause() -> std::process::ExitCode {
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("pause: installing the signal handlers failed");
        return std::process::ExitCode::FAILURE;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    std::process::ExitCode::SUCCESS
}

async fn serve() -> std::process::ExitCode {
    let behaviour = std::env::var("TESTAPP_BEHAVIOUR").unwrap_or_else(|_| "healthy".into());
    if behaviour == "crash" {
        eprintln!("testapp: behaviour crash: exiting 1");
        return std::process::ExitCode::from(1);
    }
    let never_ready = behaviour == "never-ready";
    let stop_delay = Duration::from_millis(
        std::env::var("TESTAPP_STOP_DELAY_MS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(0),
    );
    let port: u16 = std::env::var("TESTAPP_PORT")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(8080);
    // PID 1 in its container: without a handler SIGTERM would be ignored and every pod would
    // take its whole grace period to stop.
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        eprintln!("testapp: installing the SIGTERM handler failed");
        return std::process::ExitCode::FAILURE;
    };
    let listener = match TcpListener::bind(("0.0.0.0", port)).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("testapp: binding port {port}: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    eprintln!("testapp: {behaviour} on port {port}, stop delay {stop_delay:?}");
    let ready_after = Duration::from_millis(
        std::env::var("TESTAPP_READY_AFTER_MS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(0),
    );
    let state = Arc::new(Mutex::new(State {
        not_ready_until: Some(std::time::Instant::now() + ready_after),
        ..State::default()
    }));
    // Serves on while stopping too: a pod going away still answers (readiness fails at once).
    tokio::spawn({
        let state = state.clone();
        async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, state.clone(), never_ready));
            }
        }
    });
    terminate.recv().await;
    eprintln!("testapp: SIGTERM; stopping in {stop_delay:?}");
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .terminating = true;
    tokio::time::sleep(stop_delay).await;
    std::process::ExitCode::SUCCESS
}

async fn answer(mut stream: TcpStream, state: Arc<Mutex<State>>, never_ready: bool) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 1024];
    // The request head (bodies are ignored: every endpoint acts on method and path alone).
    while !buffer.windows(4).any(|window| window == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
        if buffer.len() > 64 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&buffer);
    let mut words = head.split_whitespace();
    let (method, path) = match (words.next(), words.next()) {
        (Some(method), Some(path)) => (method.to_owned(), path.to_owned()),
        _ => return,
    };
    let (status, body) = {
        let mut state = state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if path != "/metrics" {
            *state.calls.entry(format!("{method} {path}")).or_default() += 1;
        }
        respond(&mut state, &method, &path, never_ready)
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

fn respond(state: &mut State, method: &str, path: &str, never_ready: bool) -> (u16, String) {
    match (method, path) {
        ("GET", "/ready")
            if never_ready
                || state.terminating
                || state
                    .not_ready_until
                    .is_some_and(|until| std::time::Instant::now() < until) =>
        {
            (503, "not ready\n".into())
        }
        ("GET", "/ready") => (200, "ready\n".into()),
        ("GET", "/metrics") => (200, metrics(state)),
        ("GET", "/environment") => (200, environment()),
        ("POST", path) if path.contains("prepare-delayed-downscale") => {
            let since = *state.delayed_since.get_or_insert_with(now);
            (200, format!("{{\"timestamp\": {since}}}"))
        }
        ("DELETE", path) if path.contains("prepare-delayed-downscale") => {
            state.delayed_since = None;
            (200, String::new())
        }
        ("POST" | "DELETE", path)
            if path.contains("prepare-downscale") || path.contains("prepare-shutdown") =>
        {
            (200, String::new())
        }
        _ => (404, "not found\n".into()),
    }
}

fn environment() -> String {
    std::env::vars_os()
        .map(|(name, value)| format!("{}={}\n", name.to_string_lossy(), value.to_string_lossy()))
        .collect()
}

fn metrics(state: &State) -> String {
    let mut text = String::from(
        "# HELP testapp_requests_total Requests served, by method and path.\n# TYPE testapp_requests_total counter\n",
    );
    if let Some(since) = state.delayed_since {
        text.push_str(&format!(
            "# HELP testapp_delayed_downscale_prepared_since_seconds When the current delayed-downscale preparation began.\n# TYPE testapp_delayed_downscale_prepared_since_seconds gauge\ntestapp_delayed_downscale_prepared_since_seconds {since}\n"
        ));
    }
    for (call, count) in &state.calls {
        let (method, path) = call.split_once(' ').unwrap_or((call, ""));
        text.push_str(&format!(
            "testapp_requests_total{{method=\"{method}\",path=\"{path}\"}} {count}\n"
        ));
    }
    text
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}
