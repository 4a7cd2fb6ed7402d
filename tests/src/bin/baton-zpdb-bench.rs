//! Benchmark of `/admission/pod-eviction` (figures in docs/benchmarks.md): wrk over HTTPS
//! keep-alive against a release build of baton-webhook watching 3 StatefulSets × 100 Running,
//! Ready pods (the local control plane; the pod simulator plays the kubelet) under one
//! ZoneAwarePodDisruptionBudget (`maxUnavailable: 1`), one fixed review of a policy/v1 eviction
//! per case, as the API server sends them (`zpdb_support::eviction_review`):
//!
//! - allowed, claimed in the budget's record: one conditioned API write per eviction, so the
//!   rate is the API server's (the claims of one budget are written one at a time);
//! - allowed, no budget selects the pod: from the caches, no write;
//! - denied (one pod of zone a held not ready, as after an eviction): the bulk of a drain,
//!   which retries refused evictions: from the caches, no read, no write. Two denials: a pod of
//!   zone a (its zone at maxUnavailable: every zone counted) and of zone b (zone a unavailable).
//!
//! For each: req/s and latency percentiles from `wrk --latency`, the decisions, API reads and
//! writes counted by baton-webhook's metrics, and the CPU the webhook used. wrk runs on the
//! same machine as the webhook (and the API server), which the table says.
//!
//! `cargo run --release -p baton-e2e --bin baton-zpdb-bench` (builds the release webhook).
//! Environment: `BENCH_DURATION` (wrk's `-d`, default `10s`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use baton_e2e::bench_support::{WrkReport, cpu_seconds, run_wrk};
use baton_e2e::controller_support::wait_group_ready;
use baton_e2e::crds;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::webhook_support::{TestTls, WebhookReplica};
use baton_e2e::zpdb_support::{answer_of, budget, eviction_review, zpdb_resource};
use baton_e2e::{ControlPlane, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

const GROUP: &str = "ingester";
const ZONES: [&str; 3] = ["a", "b", "c"];
const REPLICAS: i32 = 100;
/// A StatefulSet no budget selects.
const UNBUDGETED: &str = "memcached";
const TIMEOUT: Duration = Duration::from_secs(120);

/// wrk's threads and connections: the load, then fewer connections (wrk and the
/// webhook share the two cores).
const LOADS: [(u32, u32); 3] = [(2, 64), (2, 16), (1, 8)];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    baton_shared::crypto::install_default_provider();
    let duration = std::env::var("BENCH_DURATION").unwrap_or_else(|_| "10s".to_owned());
    let wrk = baton_e2e::process::which("wrk");
    let control_plane = ControlPlane::shared().await;
    let scene = Scene::new(control_plane).await?;
    let work = tempfile::tempdir()?;
    let script = work.path().join("post.lua");

    let mut rows = Vec::new();
    let zone_pod = |zone: &str, ordinal: u32| format!("{GROUP}-zone-{zone}-{ordinal}");
    let allowed_claimed = Case {
        name: "allowed, claimed in the record (1 write each)",
        pod: zone_pod("c", 0),
        allowed: true,
        words: "met",
    };
    let allowed_unbudgeted = Case {
        name: "allowed, no budget selects the pod",
        pod: format!("{UNBUDGETED}-0"),
        allowed: true,
        words: "no ZoneAwarePodDisruptionBudget selects",
    };
    for case in [&allowed_claimed, &allowed_unbudgeted] {
        rows.push(
            scene
                .run(&wrk, &script, work.path(), case, LOADS[0], &duration)
                .await?,
        );
    }

    // A drain's state: zone a's first pod evicted and not ready again yet.
    let held = zone_pod("a", 0);
    scene.simulator.hold_not_ready(&held).await;
    let denied_own_zone = Case {
        name: "denied, its zone at maxUnavailable (every zone counted)",
        pod: zone_pod("a", 1),
        allowed: false,
        words: "allows 1 unavailable pod in StatefulSet",
    };
    let denied_other_zone = Case {
        name: "denied, another zone unavailable",
        pod: zone_pod("b", 1),
        allowed: false,
        words: "allows evictions in one zone at a time",
    };
    wait_until(
        TIMEOUT,
        &format!("the webhook sees {held} not ready"),
        || async {
            scene
                .review(&denied_own_zone.pod, "probe", true)
                .await
                .is_ok_and(|(_, message)| message.contains(&held))
        },
    )
    .await;
    for case in [&denied_own_zone, &denied_other_zone] {
        for load in LOADS {
            rows.push(
                scene
                    .run(&wrk, &script, work.path(), case, load, &duration)
                    .await?,
            );
        }
    }

    println!();
    println!(
        "| case | wrk | req/s | p50 | p90 | p99 | decisions | API reads | API writes | webhook CPU | CPU per decision |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for row in &rows {
        println!("{row}");
    }
    println!();
    println!(
        "{} StatefulSets x {REPLICAS} pods + 1 unbudgeted pod, wrk -d{duration} --latency over HTTPS keep-alive; machine: {} cores shared by wrk, baton-webhook and the control plane",
        ZONES.len(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    Ok(())
}

/// One eviction review sent over and over, and what the webhook must answer it.
struct Case {
    name: &'static str,
    pod: String,
    allowed: bool,
    /// In the answer's message.
    words: &'static str,
}

/// The namespace with the StatefulSets, their pods, the budget and the release webhook.
struct Scene {
    namespace: TestNamespace,
    simulator: PodSimulator,
    webhook: WebhookReplica,
    tls: TestTls,
}

impl Scene {
    async fn new(control_plane: &ControlPlane) -> anyhow::Result<Self> {
        let admin = control_plane.admin_client().await;
        crds::install(&admin, crds::ZONE_AWARE_POD_DISRUPTION_BUDGET).await;
        let namespace = TestNamespace::create(control_plane, "bench-zpdb").await;
        let client = namespace.client();
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let statefulsets: Api<StatefulSet> = namespace.api();
        let mut names = Vec::new();
        for zone in ZONES {
            let name = format!("{GROUP}-zone-{zone}");
            // Budgets select the pods and the StatefulSets by the same label.
            let mut object = StatefulSetFixture::new(&name)
                .group(GROUP)
                .replicas(REPLICAS)
                .build();
            object
                .spec
                .as_mut()
                .and_then(|spec| spec.template.metadata.as_mut())
                .context("a fixture has a pod template")?
                .labels
                .get_or_insert_default()
                .insert("rollout-group".into(), GROUP.into());
            statefulsets
                .create(&PostParams::default(), &object)
                .await
                .with_context(|| format!("creating StatefulSet {name}"))?;
            names.push(name);
        }
        StatefulSetFixture::new(UNBUDGETED)
            .replicas(1)
            .create(&client, namespace.name())
            .await;
        names.push(UNBUDGETED.to_owned());
        let started = Instant::now();
        wait_group_ready(&client, namespace.name(), &names).await;
        eprintln!(
            "bench: {} pods ready after {:.0} s",
            ZONES.len() as i32 * REPLICAS + 1,
            started.elapsed().as_secs_f64()
        );
        Api::<DynamicObject>::namespaced_with(client, namespace.name(), &zpdb_resource())
            .create(
                &PostParams::default(),
                &budget(
                    GROUP,
                    json!({"selector": {"matchLabels": {"rollout-group": GROUP}}, "maxUnavailable": 1}),
                ),
            )
            .await
            .context("creating the budget")?;
        let tls = TestTls::generate()?;
        let webhook = WebhookReplica::start_with(
            control_plane,
            &tls,
            namespace.name(),
            // One log line per decision would be measured too.
            &[("BATON_LOG__LEVEL", "warn")],
        )
        .await?;
        let scene = Self {
            namespace,
            simulator,
            webhook,
            tls,
        };
        let probe = format!("{GROUP}-zone-a-1");
        wait_until(TIMEOUT, "the webhook judges with the budget", || async {
            scene
                .review(&probe, "probe", true)
                .await
                .is_ok_and(|(_, message)| message.contains(GROUP))
        })
        .await;
        Ok(scene)
    }

    /// Sends the eviction review of `pod` to the webhook: allowed, and the message.
    async fn review(&self, pod: &str, uid: &str, dry_run: bool) -> anyhow::Result<(bool, String)> {
        let review = eviction_review(self.namespace.name(), pod, uid, dry_run);
        let answer = self
            .tls
            .client()?
            .post(self.webhook.url("/admission/pod-eviction"))
            .json(&review)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(answer_of(&answer))
    }

    /// Checks the webhook answers `case` as expected, then runs wrk with it.
    async fn run(
        &self,
        wrk: &Path,
        script: &Path,
        work: &Path,
        case: &Case,
        (threads, connections): (u32, u32),
        duration: &str,
    ) -> anyhow::Result<Row> {
        let uid = format!("bench-{}", case.pod);
        let (allowed, message) = self.review(&case.pod, &uid, false).await?;
        if allowed != case.allowed || !message.contains(case.words) {
            bail!(
                "{}: the eviction of {} was {} ({message}), expected {} with {:?}",
                case.name,
                case.pod,
                verdict(allowed),
                verdict(case.allowed),
                case.words
            );
        }
        let body = work.join(format!("{}.json", case.pod));
        std::fs::write(
            &body,
            serde_json::to_vec(&eviction_review(
                self.namespace.name(),
                &case.pod,
                &uid,
                false,
            ))?,
        )?;
        eprintln!(
            "bench: {} ({}): wrk -t{threads} -c{connections} -d{duration}",
            case.name, case.pod
        );
        let before = self.counters().await?;
        let wrk = run_wrk(
            wrk,
            script,
            &body,
            &self.webhook.url("/admission/pod-eviction"),
            (threads, connections),
            duration,
        )
        .await?;
        let after = self.counters().await?;
        let decisions = after.decisions - before.decisions;
        if wrk.errors.is_empty() && decisions < wrk.requests {
            bail!(
                "{}: wrk counted {} answers but the webhook {decisions} decisions",
                case.name,
                wrk.requests
            );
        }
        Ok(Row {
            case: case.name,
            load: format!("-t{threads} -c{connections}"),
            wrk,
            decisions,
            reads: after.reads - before.reads,
            writes: after.writes - before.writes,
            cpu_seconds: after.cpu_seconds - before.cpu_seconds,
        })
    }

    /// The webhook's eviction counters and CPU time now.
    async fn counters(&self) -> anyhow::Result<Counters> {
        let text = reqwest::Client::builder()
            .no_proxy()
            .build()?
            .get(format!(
                "http://127.0.0.1:{}/metrics",
                self.webhook.ops_port
            ))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let sum = |name: &str| -> u64 {
            text.lines()
                .filter(|line| {
                    line.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(['{', ' ']))
                })
                .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum::<f64>() as u64
        };
        let pid = self.webhook.process.pid().context("baton-webhook exited")?;
        Ok(Counters {
            decisions: sum(baton_webhook_metric::EVICTION_REQUESTS),
            reads: sum(baton_webhook_metric::API_READS),
            writes: sum(baton_webhook_metric::API_WRITES),
            cpu_seconds: cpu_seconds(pid)?,
        })
    }
}

/// baton-webhook's metric names (`webhook/src/evictions.rs`; the bench does not link the
/// webhook crate).
mod baton_webhook_metric {
    pub const EVICTION_REQUESTS: &str = "rollout_operator_zpdb_eviction_requests_total";
    pub const API_READS: &str = "baton_webhook_zpdb_api_reads_total";
    pub const API_WRITES: &str = "baton_webhook_zpdb_api_writes_total";
}

struct Counters {
    decisions: u64,
    reads: u64,
    writes: u64,
    cpu_seconds: f64,
}

struct Row {
    case: &'static str,
    load: String,
    wrk: WrkReport,
    decisions: u64,
    reads: u64,
    writes: u64,
    cpu_seconds: f64,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = |count: u64| {
            if self.decisions == 0 {
                "-".to_owned()
            } else {
                format!(
                    "{count} ({:.3}/decision)",
                    count as f64 / self.decisions as f64
                )
            }
        };
        write!(
            f,
            "| {} | `{}` | {:.0} | {} | {} | {} | {} | {} | {} | {:.2} cores | {:.0} µs |",
            self.case,
            self.load,
            self.wrk.requests as f64 / self.wrk.seconds,
            self.wrk.latency["50%"],
            self.wrk.latency["90%"],
            self.wrk.latency["99%"],
            self.decisions,
            per(self.reads),
            per(self.writes),
            self.cpu_seconds / self.wrk.seconds,
            self.cpu_seconds * 1e6 / self.decisions.max(1) as f64,
        )?;
        if !self.wrk.errors.is_empty() {
            write!(f, " errors: {}", self.wrk.errors.join("; "))?;
        }
        Ok(())
    }
}

fn verdict(allowed: bool) -> &'static str {
    if allowed { "allowed" } else { "denied" }
}
