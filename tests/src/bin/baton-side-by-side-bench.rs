//! baton beside Grafana's rollout-operator v0.38.1 (the real Go binary), one after the other on
//! one local control plane, in one run: the comparison table of docs/benchmarks.md ("Side by
//! side with the Go operator v0.38.1"), written as Markdown to stdout (or to the file named as
//! the first argument); progress and wrk's own reports go to stderr.
//!
//! 1. **Admissions**: `wrk --latency` over HTTPS keep-alive, one fixed review each, against
//!    the release `baton-webhook`, the floor (`baton-admission-floor`: baton-webhook's own TLS
//!    server answering every review allowed after decoding it, nothing else), and the Go
//!    operator as shipped and with its client's rate limit off (`-kubernetes.client-qps=0`:
//!    it reads the API server for `/scale` and for every eviction). The reviews: a no-downscale
//!    StatefulSet object (5 → 3, labelled: denied), the same through `/scale` (the parent's
//!    labels: from baton's cache, from a GET by the Go operator), and an eviction under a
//!    zone-aware budget (3 StatefulSets × 100 Ready pods, `maxUnavailable: 1`, a pod of zone a
//!    held not ready, a pod of zone b asked: denied). Each answer is checked before it is
//!    timed. CPU per request is the process's utime + stime over the run.
//! 2. **Memory and idle CPU at 9,000 pods**: 100 groups × 3 StatefulSets × 30 pods (Pending:
//!    the StatefulSet controller creates them, no kubelet, as `baton-bench rss`) and one
//!    budget; `baton-controller` and `baton-webhook` together, then the Go operator alone:
//!    `VmRSS` and the peak `VmHWM` once every group was reconciled (and, for the webhook, the
//!    namespace's pods cached for the budget), then the CPU (utime + stime) over an idle
//!    minute.
//!
//! Reaction times are the side-by-side rollout test's (`tests/tests/side_by_side.rs`), not
//! measured here. The machine, the date, both versions and the load average are printed with
//! the figures.
//!
//! `cargo run -p baton-e2e --bin baton-side-by-side-bench [-- OUTPUT.md]`: this driver is a
//! debug build; what it measures is built with the release profile, as shipped (`cargo build
//! --release -p <package>` per binary, on first use). Needs the Go operator
//! (tests/control-plane/install.sh builds it; `E2E_ROLLOUT_OPERATOR` names another) and wrk.
//! Environment: `BENCH_DURATION` (wrk's `-d`, default `10s`), `BENCH_THREADS` (2),
//! `BENCH_CONNECTIONS` (32), `BENCH_IDLE` (seconds of idle CPU measured, default 60).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use baton_e2e::bench_support::{
    Memory, WrkReport, api_requests, cpu_seconds, machine, parse_duration, run_wrk, sum_of,
};
use baton_e2e::controller_support::{Controller, wait_group_ready};
use baton_e2e::crds;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::go_operator::{self, GoOperator};
use baton_e2e::keys::NO_DOWNSCALE;
use baton_e2e::process::{BatonProcess, use_release_build_of, workspace_binary};
use baton_e2e::reviews::{scale_review, update_review};
use baton_e2e::scaling_support::install_replica_template_crd;
use baton_e2e::webhook_support::{TestTls, WebhookReplica, free_port};
use baton_e2e::zpdb_support::{budget, eviction_review, zpdb_resource};
use baton_e2e::{ControlPlane, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

/// What is measured, each from its release build.
const MEASURED: [&str; 3] = ["baton-webhook", "baton-controller", FLOOR];
const FLOOR: &str = "baton-admission-floor";
const TIMEOUT: Duration = Duration::from_secs(120);

/// The no-downscale StatefulSet (5 replicas, labelled) and the budget's group.
const GUARDED: &str = "limits";
const GROUP: &str = "ingester";
const ZONES: [&str; 3] = ["a", "b", "c"];
const GROUP_REPLICAS: i32 = 100;
/// Held not ready, as after an eviction: every eviction in another zone is then denied.
const HELD: &str = "ingester-zone-a-0";
const EVICTED: &str = "ingester-zone-b-1";

/// baton as shipped (docs/configuration.md's defaults), over what the tests set for their own
/// needs (debug logs, short lease timings).
const AS_SHIPPED: [(&str, &str); 4] = [
    ("BATON_LOG__LEVEL", "info"),
    ("BATON_CONTROLLER__LEASE__DURATION", "15s"),
    ("BATON_CONTROLLER__LEASE__RENEW_DEADLINE", "10s"),
    ("BATON_CONTROLLER__LEASE__RETRY_PERIOD", "2s"),
];

/// The 9,000 pods: groups × zones × pods per StatefulSet.
const GROUPS: usize = 100;
const PODS: i32 = 30;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    baton_shared::crypto::install_default_provider();
    let settings = Settings::from_env()?;
    let output = std::env::args().nth(1).map(PathBuf::from);
    let wrk = baton_e2e::process::which("wrk");
    // Missing, the error says how to build it: before anything is built or started.
    go_operator::binary()?;
    for binary in MEASURED {
        use_release_build_of(binary);
    }
    eprintln!("bench: building the release binaries (cargo build --release, once per binary)");
    for binary in MEASURED {
        tokio::task::spawn_blocking(move || workspace_binary(binary)).await??;
    }
    let started_at = now_utc();
    let load_before = load_average();
    let control_plane = ControlPlane::shared().await;
    let admin = control_plane.admin_client().await;
    crds::install(&admin, crds::ZONE_AWARE_POD_DISRUPTION_BUDGET).await;
    // (the Go operator watches ReplicaTemplates: it fails to start without their CRD)
    install_replica_template_crd(control_plane).await?;
    let kubernetes = admin
        .apiserver_version()
        .await
        .map(|info| info.git_version)
        .unwrap_or_else(|_| "unknown".to_owned());

    let admissions = admissions(control_plane, &settings, &wrk).await?;
    let resident = at_9000_pods(control_plane, &settings).await?;

    let mut table = String::new();
    write_table(
        &mut table,
        &Header {
            date: started_at,
            machine: machine(),
            load: format!("{load_before} before, {} after", load_average()),
            baton: baton_version(),
            go: format!("v{}", go_operator::VERSION),
            kubernetes,
            settings: &settings,
        },
        &admissions,
        &resident,
    )?;
    match output {
        Some(path) => {
            std::fs::write(&path, &table).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("bench: the table is in {}", path.display());
        }
        None => print!("{table}"),
    }
    Ok(())
}

struct Settings {
    duration: String,
    threads: u32,
    connections: u32,
    idle: Duration,
}

impl Settings {
    fn from_env() -> anyhow::Result<Self> {
        let number = |name: &str, default: u64| -> anyhow::Result<u64> {
            match std::env::var(name) {
                Ok(value) => value
                    .parse()
                    .with_context(|| format!("{name}={value:?} is not a whole number")),
                Err(_) => Ok(default),
            }
        };
        Ok(Self {
            duration: std::env::var("BENCH_DURATION").unwrap_or_else(|_| "10s".to_owned()),
            threads: u32::try_from(number("BENCH_THREADS", 2)?)?,
            connections: u32::try_from(number("BENCH_CONNECTIONS", 32)?)?,
            idle: Duration::from_secs(number("BENCH_IDLE", 60)?),
        })
    }
}

/// The reviews timed, in the table's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Review {
    StatefulSet,
    Scale,
    Eviction,
}

impl Review {
    const ALL: [Review; 3] = [Review::StatefulSet, Review::Scale, Review::Eviction];

    fn title(self) -> &'static str {
        match self {
            Review::StatefulSet => "no-downscale, StatefulSet object 5 → 3, denied",
            Review::Scale => "no-downscale via `/scale` 5 → 3 (the parent's labels), denied",
            Review::Eviction => {
                "pod-eviction under a zone-aware budget (3 × 100 pods), another zone unavailable, denied"
            }
        }
    }

    fn path(self) -> &'static str {
        match self {
            Review::StatefulSet | Review::Scale => "/admission/no-downscale",
            Review::Eviction => "/admission/pod-eviction",
        }
    }

    /// What a server that judges must answer: denied, saying this.
    fn denial_words(self) -> &'static str {
        match self {
            Review::StatefulSet | Review::Scale => "is not allowed because it has the label",
            Review::Eviction => "ingester-zone-a",
        }
    }
}

/// Who answers the reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    Baton,
    Floor,
    Go,
    GoUnlimited,
}

impl Server {
    const ALL: [Server; 4] = [
        Server::Baton,
        Server::Floor,
        Server::Go,
        Server::GoUnlimited,
    ];

    fn judges(self) -> bool {
        self != Server::Floor
    }
}

/// One wrk run: the report, and the server's CPU seconds over it.
struct Timed {
    wrk: WrkReport,
    cpu: f64,
}

struct Admissions {
    runs: Vec<(Server, Review, Timed)>,
    review_bytes: Vec<(Review, usize)>,
}

impl Admissions {
    fn get(&self, server: Server, review: Review) -> Option<&Timed> {
        self.runs
            .iter()
            .find(|(s, r, _)| *s == server && *r == review)
            .map(|(_, _, timed)| timed)
    }
}

/// A running server the reviews are sent to.
enum Running {
    Baton(WebhookReplica),
    Floor {
        process: BatonProcess,
        port: u16,
        /// Its certificate's files, kept while it runs.
        _files: tempfile::TempDir,
    },
    Go(GoOperator),
}

impl Running {
    fn url(&self, path: &str) -> String {
        match self {
            Running::Baton(webhook) => webhook.url(path),
            Running::Floor { port, .. } => format!("https://127.0.0.1:{port}{path}"),
            Running::Go(operator) => operator.url(path),
        }
    }

    fn pid(&self) -> anyhow::Result<u32> {
        match self {
            Running::Baton(webhook) => webhook.process.pid(),
            Running::Floor { process, .. } => process.pid(),
            Running::Go(operator) => operator.process.pid(),
        }
        .context("the server under measurement exited")
    }
}

async fn admissions(
    control_plane: &ControlPlane,
    settings: &Settings,
    wrk: &Path,
) -> anyhow::Result<Admissions> {
    let namespace = TestNamespace::create(control_plane, "bench-sbs").await;
    let ns = namespace.name().to_owned();
    let client = namespace.client();
    let simulator = PodSimulator::for_namespace(&namespace).await;
    let mut names = Vec::new();
    for zone in ZONES {
        let name = format!("{GROUP}-zone-{zone}");
        StatefulSetFixture::new(&name)
            .group(GROUP)
            .pod_label("rollout-group", GROUP)
            .replicas(GROUP_REPLICAS)
            .create(&client, &ns)
            .await;
        names.push(name);
    }
    StatefulSetFixture::new(GUARDED)
        .label(NO_DOWNSCALE, "true")
        .replicas(5)
        .create(&client, &ns)
        .await;
    names.push(GUARDED.to_owned());
    let started = Instant::now();
    wait_group_ready(&client, &ns, &names).await;
    eprintln!(
        "bench: {} pods ready after {:.0} s",
        ZONES.len() as i32 * GROUP_REPLICAS + 5,
        started.elapsed().as_secs_f64()
    );
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &zpdb_resource())
        .create(
            &PostParams::default(),
            &budget(
                GROUP,
                json!({"selector": {"matchLabels": {"rollout-group": GROUP}}, "maxUnavailable": 1}),
            ),
        )
        .await
        .context("creating the budget")?;
    simulator.hold_not_ready(HELD).await;

    let stored = serde_json::to_value(
        Api::<StatefulSet>::namespaced(client.clone(), &ns)
            .get(GUARDED)
            .await
            .with_context(|| format!("reading StatefulSet {GUARDED}"))?,
    )?;
    let work = tempfile::tempdir()?;
    let script = work.path().join("post.lua");
    let mut bodies = Vec::new();
    for review in Review::ALL {
        let body = match review {
            Review::StatefulSet => update_review("admission.k8s.io/v1", &stored, Some(3), false),
            Review::Scale => scale_review(&ns, GUARDED, 5, 3),
            Review::Eviction => eviction_review(&ns, EVICTED, "bench-eviction", false),
        };
        let path = work.path().join(format!("{review:?}.json"));
        std::fs::write(&path, serde_json::to_vec(&body)?)?;
        bodies.push((review, path, body));
    }

    let tls = TestTls::generate()?;
    let https = tls.client()?;
    let mut runs = Vec::new();
    for server in Server::ALL {
        eprintln!("bench: starting {server:?}");
        let running = match server {
            Server::Baton => Running::Baton(
                WebhookReplica::start_with(control_plane, &tls, &ns, &AS_SHIPPED).await?,
            ),
            Server::Floor => start_floor(control_plane, &tls, &https).await?,
            Server::Go => Running::Go(GoOperator::start(control_plane, &tls, &ns, &[]).await?),
            Server::GoUnlimited => Running::Go(
                GoOperator::start(control_plane, &tls, &ns, &["-kubernetes.client-qps=0"]).await?,
            ),
        };
        for (review, path, body) in &bodies {
            let url = running.url(review.path());
            // Each answer checked before it is timed; the eviction's once the caches have the
            // held pod not ready (the Go operator reads it from the API server each time).
            wait_until(
                TIMEOUT,
                &format!("{server:?} answers the {review:?} review as expected"),
                || async {
                    match answer(&https, &url, body).await {
                        Ok((allowed, message)) if server.judges() => {
                            !allowed && message.contains(review.denial_words())
                        }
                        Ok((allowed, _)) => allowed,
                        Err(_) => false,
                    }
                },
            )
            .await;
            eprintln!(
                "bench: {server:?}, {review:?}: wrk -t{} -c{} -d{}",
                settings.threads, settings.connections, settings.duration
            );
            let pid = running.pid()?;
            let before = cpu_seconds(pid)?;
            let wrk = run_wrk(
                wrk,
                &script,
                path,
                &url,
                (settings.threads, settings.connections),
                &settings.duration,
            )
            .await?;
            let cpu = cpu_seconds(pid)? - before;
            runs.push((server, *review, Timed { wrk, cpu }));
        }
        drop(running);
    }
    simulator.release(HELD).await;
    let review_bytes = bodies
        .iter()
        .map(|(review, _, body)| Ok((*review, serde_json::to_vec(body)?.len())))
        .collect::<anyhow::Result<_>>()?;
    Ok(Admissions { runs, review_bytes })
}

/// Starts the floor on a free port, serving `tls`; waits until it answers.
async fn start_floor(
    control_plane: &ControlPlane,
    tls: &TestTls,
    https: &reqwest::Client,
) -> anyhow::Result<Running> {
    let files = tempfile::tempdir()?;
    let (cert, key) = (files.path().join("tls.crt"), files.path().join("tls.key"));
    std::fs::write(&cert, &tls.cert_pem)?;
    std::fs::write(&key, &tls.key_pem)?;
    let port = free_port()?;
    let address = format!("127.0.0.1:{port}");
    let text = |path: &Path| path.to_str().map(str::to_owned).context("UTF-8 path");
    let (cert, key) = (text(&cert)?, text(&key)?);
    let process = BatonProcess::spawn(
        FLOOR,
        control_plane.kubeconfig_path(),
        &[
            ("BATON_WEBHOOK__ADDRESS", address.as_str()),
            ("BATON_WEBHOOK__CERT_FILE", cert.as_str()),
            ("BATON_WEBHOOK__KEY_FILE", key.as_str()),
        ],
    )
    .await?;
    let url = format!("https://{address}/");
    let probe = eviction_review("default", "probe", "probe", true);
    wait_until(TIMEOUT, "the floor answers", || async {
        answer(https, &url, &probe).await.is_ok()
    })
    .await;
    Ok(Running::Floor {
        process,
        port,
        _files: files,
    })
}

/// POSTs `review`: allowed, and the message.
async fn answer(
    https: &reqwest::Client,
    url: &str,
    review: &Value,
) -> anyhow::Result<(bool, String)> {
    let answer: Value = https
        .post(url)
        .json(review)
        .timeout(Duration::from_secs(10))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let response = &answer["response"];
    Ok((
        response["allowed"] == true,
        response["status"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    ))
}

/// Memory and idle CPU of one process.
struct Resident {
    /// Once synced (every group reconciled; the webhook's pods cached).
    synced: Memory,
    /// After the idle minute.
    idle: Memory,
    idle_cpu: f64,
}

struct AtNineThousandPods {
    controller: Resident,
    webhook: Resident,
    go: Resident,
    idle: Duration,
    controller_idle_work: IdleWork,
}

/// What baton-controller did while idle, by its own metrics.
struct IdleWork {
    passes: f64,
    /// By method and route.
    requests: std::collections::BTreeMap<(String, String), f64>,
}

async fn at_9000_pods(
    control_plane: &ControlPlane,
    settings: &Settings,
) -> anyhow::Result<AtNineThousandPods> {
    let namespace = TestNamespace::create(control_plane, "bench-sbs-9k").await;
    let ns = namespace.name().to_owned();
    let client = namespace.client();
    for group in 0..GROUPS {
        let group = format!("g{group:03}");
        for zone in ZONES {
            StatefulSetFixture::new(&format!("{group}-zone-{zone}"))
                .group(&group)
                .pod_label("rollout-group", &group)
                .replicas(PODS)
                .create(&client, &ns)
                .await;
        }
    }
    let expected = GROUPS * ZONES.len() * PODS as usize;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let creating = Instant::now();
    wait_until(
        Duration::from_secs(900),
        &format!("{expected} pods exist"),
        || async {
            pods.list(&ListParams::default().limit(1))
                .await
                .ok()
                .and_then(|list| list.metadata.remaining_item_count)
                .map(|remaining| remaining as usize + 1)
                .unwrap_or(0)
                >= expected
        },
    )
    .await;
    eprintln!(
        "bench: {expected} pods created in {:.0} s",
        creating.elapsed().as_secs_f64()
    );
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &zpdb_resource())
        .create(
            &PostParams::default(),
            &budget(
                "g000",
                json!({"selector": {"matchLabels": {"rollout-group": "g000"}}, "maxUnavailable": 1}),
            ),
        )
        .await
        .context("creating the budget")?;
    let reconciled_every_group = |metrics: String| {
        metrics
            .lines()
            .filter(|line| line.starts_with("rollout_operator_group_reconciles_total{"))
            .count()
            >= GROUPS
    };

    // baton: both binaries at once, as deployed.
    eprintln!("bench: baton-controller and baton-webhook on {expected} pods");
    let controller = Controller::start(control_plane, &ns, &AS_SHIPPED).await;
    let tls = TestTls::generate()?;
    let webhook = WebhookReplica::start_with(control_plane, &tls, &ns, &AS_SHIPPED).await?;
    let https = tls.client()?;
    wait_until(
        TIMEOUT,
        "baton-controller reconciled every group",
        || async { reconciled_every_group(controller.metrics().await) },
    )
    .await;
    // A Pending pod under the budget: judged (not running) once the pods are cached.
    let probe = eviction_review(&ns, "g000-zone-a-0", "bench-probe", true);
    let url = webhook.url("/admission/pod-eviction");
    wait_until(TIMEOUT, "baton-webhook cached the pods", || async {
        answer(&https, &url, &probe)
            .await
            .is_ok_and(|(_, message)| message.contains("is not running"))
    })
    .await;
    let pids = [
        controller
            .process
            .pid()
            .context("baton-controller exited")?,
        webhook.process.pid().context("baton-webhook exited")?,
    ];
    let before = controller.metrics().await;
    let [controller_resident, webhook_resident] = idle(&pids, settings.idle).await?;
    let after = controller.metrics().await;
    let passes = "rollout_operator_group_reconcile_duration_seconds_count";
    let controller_idle_work = IdleWork {
        passes: sum_of(&after, passes, "") - sum_of(&before, passes, ""),
        requests: api_requests(&before, &after),
    };
    drop(webhook);
    drop(controller);

    eprintln!("bench: the Go operator on {expected} pods");
    let operator = GoOperator::start(control_plane, &tls, &ns, &[]).await?;
    let metrics = format!("http://127.0.0.1:{}/metrics", operator.ops_port);
    let plain = reqwest::Client::builder().no_proxy().build()?;
    wait_until(
        TIMEOUT,
        "the Go operator reconciled every group",
        || async {
            let text = async { plain.get(&metrics).send().await?.text().await };
            text.await.is_ok_and(reconciled_every_group)
        },
    )
    .await;
    let [go_resident] = idle(
        &[operator.process.pid().context("the Go operator exited")?],
        settings.idle,
    )
    .await?;
    drop(operator);
    Ok(AtNineThousandPods {
        controller: controller_resident,
        webhook: webhook_resident,
        go: go_resident,
        idle: settings.idle,
        controller_idle_work,
    })
}

/// The memory of each process now, then its CPU over `idle` and its memory after.
async fn idle<const N: usize>(pids: &[u32; N], idle: Duration) -> anyhow::Result<[Resident; N]> {
    let mut synced = Vec::new();
    let mut before = Vec::new();
    for pid in pids {
        synced.push(Memory::of(*pid)?);
        before.push(cpu_seconds(*pid)?);
    }
    eprintln!("bench: idle for {idle:?}");
    tokio::time::sleep(idle).await;
    let mut resident = Vec::new();
    for (index, pid) in pids.iter().enumerate() {
        resident.push(Resident {
            synced: synced[index],
            idle: Memory::of(*pid)?,
            idle_cpu: cpu_seconds(*pid)? - before[index],
        });
    }
    resident
        .try_into()
        .map_err(|_| anyhow::anyhow!("one figure per process"))
}

struct Header<'a> {
    date: String,
    machine: String,
    load: String,
    baton: String,
    go: String,
    kubernetes: String,
    settings: &'a Settings,
}

fn write_table(
    out: &mut String,
    header: &Header<'_>,
    admissions: &Admissions,
    resident: &AtNineThousandPods,
) -> anyhow::Result<()> {
    let settings = header.settings;
    writeln!(
        out,
        "Measured {} by `baton-side-by-side-bench`: {}; Kubernetes {} (the tests' local control plane, \
         the pod simulator for a kubelet); baton {} (release profile, as shipped), Grafana's \
         rollout-operator {} (started as the side-by-side tests start it: `-log.level=info`, \
         otherwise its defaults). Load average {}.",
        header.date, header.machine, header.kubernetes, header.baton, header.go, header.load
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "Admissions: `wrk -t{} -c{} -d{} --latency` over HTTPS keep-alive on the same machine; req/s, p99, \
         the server's CPU per request (utime + stime over the run ÷ answers).",
        settings.threads, settings.connections, settings.duration
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| review | baton | floor | baton ÷ floor | Go operator | Go, `-kubernetes.client-qps=0` | baton ÷ Go |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for review in Review::ALL {
        let cell = |server| {
            admissions
                .get(server, review)
                .map_or("-".to_owned(), describe)
        };
        let rate = |server| admissions.get(server, review).map(|timed| timed.wrk.rate());
        let ratio = |a: Option<f64>, b: Option<f64>, percent: bool| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 && percent => format!("{:.0} %", 100.0 * a / b),
            (Some(a), Some(b)) if b > 0.0 => format!("{:.1}×", a / b),
            _ => "-".to_owned(),
        };
        let bytes = admissions
            .review_bytes
            .iter()
            .find(|(r, _)| *r == review)
            .map_or(0, |(_, bytes)| *bytes);
        let best_go = match (rate(Server::Go), rate(Server::GoUnlimited)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        writeln!(
            out,
            "| {}; {:.1} KiB | {} | {} | {} | {} | {} | {} |",
            review.title(),
            bytes as f64 / 1024.0,
            cell(Server::Baton),
            cell(Server::Floor),
            ratio(rate(Server::Baton), rate(Server::Floor), true),
            cell(Server::Go),
            cell(Server::GoUnlimited),
            ratio(rate(Server::Baton), best_go, false),
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "(baton ÷ Go: against the faster of the two Go columns.) At {} pods ({GROUPS} groups × {} StatefulSets × \
         {PODS} Pending pods, one zone-aware budget; baton's two processes run together, the Go \
         operator is one process): MiB `VmRSS` (peak `VmHWM`) once every group was reconciled \
         (and the webhook had cached the pods), then after {} s idle, and the CPU used in those \
         {} s.",
        thousands((GROUPS * ZONES.len() * PODS as usize) as f64),
        ZONES.len(),
        resident.idle.as_secs(),
        resident.idle.as_secs()
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| at 9,000 pods | baton-controller | baton-webhook | baton, both | Go operator |"
    )?;
    writeln!(out, "|---|---|---|---|---|")?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let memory = |memory: Memory| {
        format!(
            "{:.1} (peak {:.1})",
            mib(memory.rss_kib),
            mib(memory.peak_kib)
        )
    };
    let both = |a: Memory, b: Memory| {
        format!(
            "{:.1} (peak {:.1})",
            mib(a.rss_kib + b.rss_kib),
            mib(a.peak_kib + b.peak_kib)
        )
    };
    let (c, w, g) = (&resident.controller, &resident.webhook, &resident.go);
    writeln!(
        out,
        "| resident, synced | {} | {} | {} | {} |",
        memory(c.synced),
        memory(w.synced),
        both(c.synced, w.synced),
        memory(g.synced)
    )?;
    writeln!(
        out,
        "| resident, after the idle minute | {} | {} | {} | {} |",
        memory(c.idle),
        memory(w.idle),
        both(c.idle, w.idle),
        memory(g.idle)
    )?;
    let seconds = resident.idle.as_secs_f64();
    let cpu = |used: f64| format!("{used:.2} s ({:.2} % of a core)", 100.0 * used / seconds);
    writeln!(
        out,
        "| CPU while idle | {} | {} | {} | {} |",
        cpu(c.idle_cpu),
        cpu(w.idle_cpu),
        cpu(c.idle_cpu + w.idle_cpu),
        cpu(g.idle_cpu)
    )?;
    let work = &resident.controller_idle_work;
    let requests: Vec<String> = work
        .requests
        .iter()
        .map(|((method, path), count)| format!("{count} {method} {path}"))
        .collect();
    writeln!(out)?;
    writeln!(
        out,
        "baton-controller while idle, by its metrics: {} passes; API requests: {}.",
        work.passes,
        if requests.is_empty() {
            "none".to_owned()
        } else {
            requests.join(", ")
        }
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "Reaction (pod Ready → next pod deleted) is not measured here: see the side-by-side \
         rollouts (`cargo test -p baton-e2e --test side_by_side -- --nocapture`)."
    )?;
    Ok(())
}

/// One run's cell: req/s, p99, CPU per answer, errors.
fn describe(timed: &Timed) -> String {
    let wrk = &timed.wrk;
    // wrk leaves out what it timed out on: with every answer late, it has no percentile.
    let p99 = match parse_duration(&wrk.latency["99%"]) {
        Some(seconds) if seconds > 0.0 => milliseconds(seconds),
        _ => "-".to_owned(),
    };
    let mut cell = format!(
        "{} req/s, p99 {p99}, {:.0} µs CPU",
        thousands(wrk.rate()),
        timed.cpu * 1e6 / wrk.requests.max(1) as f64
    );
    for error in &wrk.errors {
        write!(cell, "; {}", condensed(error)).unwrap_or_default();
    }
    cell
}

/// `Socket errors: connect 0, read 0, write 0, timeout 40` → `40 timeouts (wrk: 2 s)`; any
/// other error line as wrk wrote it.
fn condensed(error: &str) -> String {
    match error.strip_prefix("Socket errors:") {
        Some(counts) => counts
            .split(',')
            .filter_map(|count| {
                let (kind, number) = count.trim().rsplit_once(' ')?;
                (number != "0").then(|| match kind {
                    "timeout" => format!("{number} timeouts (wrk: 2 s)"),
                    other => format!("{number} {other} errors"),
                })
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => error.to_owned(),
    }
}

fn milliseconds(seconds: f64) -> String {
    match seconds * 1000.0 {
        ms if ms >= 100.0 => format!("{ms:.0} ms"),
        ms if ms >= 10.0 => format!("{ms:.1} ms"),
        ms => format!("{ms:.2} ms"),
    }
}

fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn now_utc() -> String {
    command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "unknown date".into())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The commit measured (`git describe`), from the workspace.
fn baton_version() -> String {
    let describe = command_output(
        "git",
        &[
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ],
    )
    .unwrap_or_else(|| "unknown commit".to_owned());
    format!("{} at {describe}", env!("CARGO_PKG_VERSION"))
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = std::process::Command::new(program)
        .args(args)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
