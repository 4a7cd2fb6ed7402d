//! Debian's haproxy standing in for a Kubernetes Service in front of webhook replicas: TCP mode,
//! so TLS passes through to the replicas (the API server verifies their certificate), and a
//! health check of `/ready` on each replica's ops port every 200 ms, as a readinessProbe does.
//! A replica leaves the rotation after two failed checks and returns after two passed ones;
//! connections already open stay where they are, as with a Service.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::process::BatonProcess;
use crate::wait::wait_until;
use crate::webhook_support::free_port;

/// One replica behind the load balancer.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    /// Where it serves (TLS, passed through).
    pub port: u16,
    /// Where `/ready` is checked (plain HTTP).
    pub check_port: u16,
}

/// A running haproxy; stopped when dropped.
#[derive(Debug)]
pub struct LoadBalancer {
    _process: BatonProcess,
    port: u16,
    stats_port: u16,
    _config: tempfile::TempDir,
}

impl LoadBalancer {
    /// Starts haproxy on a free port in front of `backends` (named `replica-<index>`) and
    /// waits until it sees every one of them up.
    pub async fn start(backends: &[Backend]) -> anyhow::Result<Self> {
        let haproxy = haproxy()?;
        let (port, stats_port) = (free_port()?, free_port()?);
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("haproxy.cfg");
        std::fs::write(&config, configuration(port, stats_port, backends))?;
        let config_path = config.to_str().context("temporary paths are UTF-8")?;
        let check = std::process::Command::new(&haproxy)
            .args(["-c", "-q", "-f", config_path])
            .output()
            .context("running haproxy -c")?;
        if !check.status.success() {
            bail!(
                "haproxy rejects the generated configuration:\n{}",
                String::from_utf8_lossy(&check.stderr)
            );
        }
        // -db: foreground, no daemon; the process ends with the test.
        let process =
            BatonProcess::spawn_program("haproxy", &haproxy, &["-db", "-f", config_path])?;
        let balancer = Self {
            _process: process,
            port,
            stats_port,
            _config: dir,
        };
        for index in 0..backends.len() {
            balancer.wait_for(index, "UP").await;
        }
        Ok(balancer)
    }

    /// `https://127.0.0.1:<port>`: where the API server should call the webhooks.
    pub fn base_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// haproxy's view of each backend (`replica-<index>` → `UP`, `DOWN`, `UP 1/2`, …), from
    /// its CSV statistics; empty while they cannot be read.
    pub async fn statuses(&self) -> BTreeMap<String, String> {
        let url = format!("http://127.0.0.1:{}/stats;csv", self.stats_port);
        let Ok(client) = reqwest::Client::builder().no_proxy().build() else {
            return BTreeMap::new();
        };
        let csv = match client.get(url).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => return BTreeMap::new(),
        };
        parse_statuses(&csv)
    }

    /// Waits until haproxy reports backend `index` as `status` (`UP` or `DOWN`).
    pub async fn wait_for(&self, index: usize, status: &str) {
        let server = format!("replica-{index}");
        wait_until(
            Duration::from_secs(60),
            &format!("haproxy reports {server} {status}"),
            || async {
                self.statuses()
                    .await
                    .get(&server)
                    .is_some_and(|current| current == status)
            },
        )
        .await;
    }
}

/// haproxy from PATH or where Debian installs it.
fn haproxy() -> anyhow::Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("haproxy"))
        .find(|candidate| candidate.is_file())
        .context(
            "haproxy is not installed: tests/control-plane/install.sh installs Debian's haproxy",
        )
}

fn configuration(port: u16, stats_port: u16, backends: &[Backend]) -> String {
    let mut config = format!(
        "defaults
  mode tcp
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  timeout check 1s

frontend webhook
  bind 127.0.0.1:{port}
  default_backend replicas

backend replicas
  balance roundrobin
  option httpchk GET /ready
  default-server inter 200ms fall 2 rise 2
"
    );
    for (index, backend) in backends.iter().enumerate() {
        config.push_str(&format!(
            "  server replica-{index} 127.0.0.1:{} check port {}\n",
            backend.port, backend.check_port
        ));
    }
    config.push_str(&format!(
        "
listen stats
  mode http
  bind 127.0.0.1:{stats_port}
  stats enable
  stats uri /stats
"
    ));
    config
}

/// `svname` → `status` of the `replicas` backend's servers in haproxy's CSV statistics.
fn parse_statuses(csv: &str) -> BTreeMap<String, String> {
    let mut lines = csv.lines();
    let Some(header) = lines.next() else {
        return BTreeMap::new();
    };
    let columns: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
    let column = |name: &str| columns.iter().position(|column| *column == name);
    let (Some(proxy), Some(server), Some(status)) =
        (column("pxname"), column("svname"), column("status"))
    else {
        return BTreeMap::new();
    };
    lines
        .map(|line| line.split(',').collect::<Vec<_>>())
        .filter(|fields| fields.get(proxy) == Some(&"replicas"))
        .filter_map(|fields| {
            Some((
                (*fields.get(server)?).to_owned(),
                (*fields.get(status)?).to_owned(),
            ))
        })
        .filter(|(server, _)| server.starts_with("replica-"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_status_of_each_replica_from_the_statistics() {
        let csv = "# pxname,svname,qcur,status,weight\n\
                   webhook,FRONTEND,,OPEN,\n\
                   replicas,replica-0,0,UP,1\n\
                   replicas,replica-1,0,DOWN,1\n\
                   replicas,BACKEND,0,UP,1\n";
        let statuses = parse_statuses(csv);
        assert_eq!(
            statuses,
            BTreeMap::from([
                ("replica-0".to_owned(), "UP".to_owned()),
                ("replica-1".to_owned(), "DOWN".to_owned()),
            ])
        );
        assert!(parse_statuses("").is_empty());
    }
}
