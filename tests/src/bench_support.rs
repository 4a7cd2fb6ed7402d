//! What the benchmarks of `src/bin` share: wrk's script and its report, a process's CPU time
//! and resident memory from /proc. Figures go to docs/benchmarks.md, never into assertions.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// wrk's script POSTing the file named by the `BODY` environment variable (webhook/bench/run.sh
/// uses the same file).
pub const WRK_POST_LUA: &str = include_str!("../../webhook/bench/post.lua");

/// What `wrk --latency` reported.
#[derive(Debug, Clone)]
pub struct WrkReport {
    pub requests: u64,
    pub seconds: f64,
    /// `50%`, `90%`, `99%` as wrk writes them (`1.23ms`).
    pub latency: BTreeMap<&'static str, String>,
    /// Non-2xx answers and socket errors, as wrk words them.
    pub errors: Vec<String>,
}

impl WrkReport {
    pub fn parse(report: &str) -> anyhow::Result<Self> {
        let (requests, seconds) = report
            .lines()
            .find_map(|line| {
                let (requests, rest) = line.trim().split_once(" requests in ")?;
                let seconds = rest.split_once(',')?.0;
                Some((requests.parse().ok()?, parse_duration(seconds)?))
            })
            .context("no \"N requests in T\" line in wrk's report")?;
        let mut latency = BTreeMap::new();
        for percentile in ["50%", "90%", "99%"] {
            let value = report
                .lines()
                .find_map(|line| {
                    let mut words = line.split_whitespace();
                    (words.next() == Some(percentile)).then(|| words.next())?
                })
                .with_context(|| format!("no {percentile} latency in wrk's report"))?;
            latency.insert(percentile, value.to_owned());
        }
        let errors = report
            .lines()
            .map(str::trim)
            .filter(|line| line.starts_with("Non-2xx") || line.starts_with("Socket errors"))
            .map(str::to_owned)
            .collect();
        Ok(Self {
            requests,
            seconds,
            latency,
            errors,
        })
    }

    /// Answers per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

/// Runs `wrk -t<threads> -c<connections> -d<duration> --latency` POSTing `body` (a file) to
/// `url` with [`WRK_POST_LUA`] (written to `script`); wrk's report goes to stderr as it is.
pub async fn run_wrk(
    wrk: &Path,
    script: &Path,
    body: &Path,
    url: &str,
    (threads, connections): (u32, u32),
    duration: &str,
) -> anyhow::Result<WrkReport> {
    if !script.is_file() {
        std::fs::write(script, WRK_POST_LUA)?;
    }
    let output = tokio::process::Command::new(wrk)
        .args([
            format!("-t{threads}"),
            format!("-c{connections}"),
            format!("-d{duration}"),
            "--latency".to_owned(),
            "-s".to_owned(),
        ])
        .arg(script)
        .arg(url)
        .env("BODY", body)
        .output()
        .await
        .context("running wrk")?;
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    eprint!("{report}");
    if !output.status.success() {
        bail!(
            "wrk failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    WrkReport::parse(&report)
}

/// wrk's durations: `10.00s`, `1.50m`, `812.00ms`, `420.00us`.
pub fn parse_duration(text: &str) -> Option<f64> {
    let text = text.trim();
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(us) = text.strip_suffix("us") {
        (us, 1e-6)
    } else if let Some(m) = text.strip_suffix('m') {
        (m, 60.0)
    } else {
        (text.strip_suffix('s')?, 1.0)
    };
    Some(number.parse::<f64>().ok()? * scale)
}

/// User + system CPU seconds of process `pid` (`/proc/<pid>/stat`, in clock ticks of 1/100 s).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command (which may hold spaces), from field 3 (state) on.
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .context("a /proc stat line")?
        .1
        .split_whitespace()
        .collect();
    let ticks = |index: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(index - 3)
            .context("utime and stime in /proc stat")?
            .parse::<f64>()?)
    };
    Ok((ticks(14)? + ticks(15)?) / 100.0)
}

/// A process's resident memory now (VmRSS: anonymous memory, the heap, and file pages, its
/// code) and at its peak (VmHWM), from /proc.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss_kib: u64,
    pub anon_kib: u64,
    pub file_kib: u64,
    pub peak_kib: u64,
}

impl Memory {
    pub fn of(pid: u32) -> anyhow::Result<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|value| value.split_whitespace().next()?.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("no {name} in /proc/{pid}/status"))
        };
        Ok(Self {
            rss_kib: field("VmRSS:")?,
            anon_kib: field("RssAnon:")?,
            file_kib: field("RssFile:")?,
            peak_kib: field("VmHWM:")?,
        })
    }

    /// The memory of `pid` once its RSS has not changed for 2 s (sampled every 100 ms; at most
    /// 60 s).
    pub async fn settled(pid: u32) -> anyhow::Result<Self> {
        const STILL: Duration = Duration::from_secs(2);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = Self::of(pid)?;
        let mut since = Instant::now();
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = Self::of(pid)?;
            if now.rss_kib != last.rss_kib {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= STILL {
                break;
            }
        }
        Self::of(pid)
    }
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |kib: u64| kib as f64 / 1024.0;
        write!(
            f,
            "{:.1} MiB (anon {:.1}, file {:.1}; peak {:.1})",
            mib(self.rss_kib),
            mib(self.anon_kib),
            mib(self.file_kib),
            mib(self.peak_kib)
        )
    }
}

/// The machine, for the figures: cores and the CPU model (/proc/cpuinfo).
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cores} cores, {model}")
}

/// The sum of the samples of `metric` whose labels contain `label` (every sample when empty),
/// in a Prometheus text exposition.
pub fn sum_of(exposition: &str, metric: &str, label: &str) -> f64 {
    exposition
        .lines()
        .filter(|line| {
            line.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && line.contains(label)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A baton binary's API requests between two readings of its metrics, by method and route
/// (the metric's own labels, whatever the status); routes with none left out.
pub fn api_requests(before: &str, after: &str) -> BTreeMap<(String, String), f64> {
    const REQUESTS: &str = "rollout_operator_kubernetes_api_client_request_duration_seconds_count";
    let label = |line: &str, name: &str| -> Option<String> {
        Some(
            line.split(&format!("{name}=\""))
                .nth(1)?
                .split('"')
                .next()?
                .to_owned(),
        )
    };
    let routes: std::collections::BTreeSet<(String, String)> = after
        .lines()
        .filter(|line| line.starts_with(REQUESTS))
        .filter_map(|line| Some((label(line, "method")?, label(line, "path")?)))
        .collect();
    routes
        .into_iter()
        .filter_map(|(method, path)| {
            let selector = format!("method=\"{method}\",path=\"{path}\"");
            let count = sum_of(after, REQUESTS, &selector) - sum_of(before, REQUESTS, &selector);
            (count > 0.0).then_some(((method, path), count))
        })
        .collect()
}
