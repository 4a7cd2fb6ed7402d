//! The README's first command, run as a newcomer runs it (and across three clusters, as a
//! Fleet user runs `./scripts/demo.sh --clusters 3`): `./scripts/demo.sh` says it is
//! building and shows cargo's progress, follows the rollout from before zone a's first pod is
//! replaced (so the reader sees every zone roll, and each soak count down in whole seconds),
//! and says where the controller's log is, a file kept after the demo stops.
//!
//! Off a terminal, as here, `kubectl baton wait` prints a line per change instead of drawing
//! progress bars: the lines the reader would see in a pipeline's log.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use baton_e2e::process::without_cargo_test_variables;

/// The demo's whole run: a build (a no-op after `cargo test`'s, or a few minutes after a
/// change), a control plane, and a rollout of three zones with two 10 s soaks.
const DEMO_TIMEOUT: Duration = Duration::from_secs(900);
const DONE: &str = "The rollout is complete.";

/// The demo, interrupted (as Ctrl-C does) and then killed if it is still running when dropped:
/// a failing test leaves no controller or control plane behind.
struct Demo {
    child: Child,
}

impl Demo {
    fn interrupt(&self) {
        let status = Command::new("kill")
            .arg("-INT")
            .arg(self.child.id().to_string())
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -INT of the demo failed");
    }

    /// Its exit status, once it exited; None if it still runs at `deadline`.
    fn exited_by(&mut self, deadline: Instant) -> Option<std::process::ExitStatus> {
        loop {
            if let Some(status) = self.child.try_wait().expect("polling the demo") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.interrupt();
            if self
                .exited_by(Instant::now() + Duration::from_secs(30))
                .is_none()
            {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// The text after `marker` on `line`, up to the next space.
fn word_after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &line[line.find(marker)? + marker.len()..];
    Some(rest.split_whitespace().next().unwrap_or(rest))
}

/// How many of `zone`'s pods `line` (a zone line of `wait`: `ingester-zone-a rolling: 2/5
/// updated, 4/5 ready`) says are updated and ready.
fn zone_counts(line: &str, zone: &str) -> Option<(u32, u32)> {
    let rest = line.strip_prefix(zone)?.strip_prefix(' ')?;
    let (_, counts) = rest.split_once(": ")?;
    let (updated, ready) = counts.split_once(" updated, ")?;
    let count = |text: &str| text.split('/').next()?.parse().ok();
    Some((count(updated)?, count(ready.trim_end_matches(" ready"))?))
}

/// What a run of the demo printed, until it said the rollout was complete and was then
/// interrupted as Ctrl-C does.
struct Ran {
    printed: Vec<String>,
    /// Its standard error: cargo's progress.
    errors: String,
    status: std::process::ExitStatus,
}

impl Ran {
    fn output(&self) -> String {
        self.printed.join("\n")
    }

    /// The index of the first line starting with `start`.
    fn line(&self, start: &str) -> usize {
        self.printed
            .iter()
            .position(|line| line.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?}:\n{}", self.output()))
    }

    /// The counts of `zone`'s lines printed from line `from` on.
    fn zone_lines(&self, zone: &str, from: usize) -> Vec<(u32, u32)> {
        self.printed[from..]
            .iter()
            .filter_map(|line| zone_counts(line, zone))
            .collect()
    }

    /// The controller's log, named before the rollout and again at the end (the same file),
    /// read after the demo stopped, and then removed.
    fn controller_log(&self) -> String {
        let output = self.output();
        let before = self
            .printed
            .iter()
            .find_map(|line| word_after(line, "log: "))
            .unwrap_or_else(|| panic!("the log is not named before the rollout:\n{output}"));
        let after = self
            .printed
            .iter()
            .find_map(|line| word_after(line, "baton-controller's log is kept: "))
            .unwrap_or_else(|| panic!("the log is not named at the end:\n{output}"));
        assert_eq!(before, after);
        let log = PathBuf::from(after);
        let written = std::fs::read_to_string(&log)
            .unwrap_or_else(|error| panic!("{} after the demo: {error}", log.display()));
        std::fs::remove_dir_all(log.parent().expect("the log's folder")).expect("removing the log");
        written
    }

    /// Each soak before `zone` counted down in whole seconds, a line only when the count
    /// changed: at least one, and at most one per second of the 10 s soak.
    fn assert_soak_counted_down(&self, zone: &str) {
        let output = self.output();
        let marker = format!("{zone} starts in ");
        let counts: Vec<&str> = self
            .printed
            .iter()
            .filter_map(|line| word_after(line, &marker))
            .collect();
        assert!(!counts.is_empty(), "no soak before {zone}:\n{output}");
        for count in &counts {
            let seconds = count
                .strip_suffix('s')
                .and_then(|seconds| seconds.parse::<u32>().ok());
            assert!(
                seconds.is_some_and(|seconds| seconds <= 10),
                "{zone}'s countdown shows {count:?}, not whole seconds up to 10s:\n{output}"
            );
        }
        assert!(
            counts.len() <= 11,
            "{} countdown lines for {zone}: one per second at most:\n{output}",
            counts.len()
        );
    }
}

/// Runs `scripts/demo.sh args` from the repository as a newcomer runs it, until it says the
/// rollout is complete; then interrupts it and waits for it to stop.
fn run_demo(args: &[&str]) -> Ran {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf();
    let mut command = Command::new(repository.join("scripts/demo.sh"));
    command
        .args(args)
        .current_dir(&repository)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    without_cargo_test_variables(&mut command);
    let mut demo = Demo {
        child: command.spawn().expect("starting scripts/demo.sh"),
    };
    let (lines_tx, lines) = mpsc::channel();
    let stdout = BufReader::new(demo.child.stdout.take().expect("piped"));
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stderr = demo.child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });

    let deadline = Instant::now() + DEMO_TIMEOUT;
    let mut printed: Vec<String> = Vec::new();
    while !printed.iter().any(|line| line.starts_with(DONE)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => printed.push(line),
            Err(error) => {
                // (its standard error too, once it stopped: why it ended, or cargo's failure)
                drop(demo);
                panic!(
                    "the demo did not say {DONE:?} ({error}); it printed:\n{}\n{}",
                    printed.join("\n"),
                    errors.join().unwrap_or_default()
                )
            }
        }
    }
    demo.interrupt();
    let status = demo
        .exited_by(Instant::now() + Duration::from_secs(60))
        .expect("the demo stops within a minute of Ctrl-C");
    printed.extend(lines.try_iter());
    let errors = errors.join().expect("reading the demo's stderr");
    Ran {
        printed,
        errors,
        status,
    }
}

#[test]
fn the_demo_says_it_builds_follows_zone_a_from_its_first_pod_and_names_the_controllers_log() {
    // Given the README's command, run from the repository as a newcomer runs it,
    // When it runs until the rollout is complete, and is then interrupted as Ctrl-C does
    let ran = run_demo(&[]);
    let output = ran.output();
    assert!(
        ran.status.success(),
        "the demo exited with {}:\n{output}\n{}",
        ran.status,
        ran.errors
    );

    // Then it said it was building before anything else, and cargo's progress was shown
    let building = ran.line("building (the first run takes a few minutes)");
    let control_plane = ran.line("Starting a local Kubernetes control plane");
    assert!(building < control_plane, "{output}");
    assert!(
        ran.errors.contains("Finished"),
        "cargo's own lines are shown, not hidden by --quiet: {}",
        ran.errors
    );

    // and it named the controller's log before following and again at the end, the same
    // file, which is still there after the demo stopped and holds what the controller wrote
    let written = ran.controller_log();
    assert!(
        written.contains("ingester"),
        "the controller's log tells of the group it rolled:\n{written}"
    );

    // and it followed the group before zone a's first pod was replaced: the first line of
    // zone a says none is updated and every pod is ready, a later one that some are updated
    let zone_a = ran.zone_lines("ingester-zone-a", ran.line("Following the rollout"));
    assert_eq!(
        zone_a.first(),
        Some(&(0, 5)),
        "the first view of zone a is before any pod of it was deleted:\n{output}"
    );
    assert!(
        zone_a.iter().any(|(updated, _)| (1..5).contains(updated)),
        "zone a is seen rolling, part of it updated:\n{output}"
    );
    assert!(zone_a.contains(&(5, 5)), "{output}");

    // and each soak (before zone b, and again before zone c) counted down in whole seconds
    for zone in ["ingester-zone-b", "ingester-zone-c"] {
        ran.assert_soak_counted_down(zone);
    }
}

#[test]
fn the_demo_across_three_clusters_pauses_follows_resumes_and_rolls_the_clusters_in_order() {
    // Given the README's command across clusters, run as a Fleet user runs it,
    // When it runs until the rollout is complete, and is then interrupted as Ctrl-C does
    let ran = run_demo(&["--clusters", "3"]);
    let output = ran.output();
    assert!(
        ran.status.success(),
        "the demo exited with {}:\n{output}\n{}",
        ran.status,
        ran.errors
    );

    // Then it started three control planes, paused the group across them and followed it
    // before resuming it
    let started = ran.line("Starting three local Kubernetes control planes");
    let paused = ran.line("All clusters are ready. Pausing the group");
    let following =
        ran.line("Following the rollout as a pipeline would: kubectl baton wait ingester");
    let resumed = ran.line("Resuming it: kubectl baton resume ingester");
    assert!(
        started < paused && paused < following && following < resumed,
        "{output}"
    );
    for cluster in ["cluster-a", "cluster-b", "cluster-c"] {
        assert!(
            output.contains(&format!(
                "statefulset/ingester in cluster {cluster}: grafana.com/rollout-paused set to \"true\""
            )),
            "the pause reached {cluster}:\n{output}"
        );
        assert!(
            output.contains(&format!(
                "statefulset/ingester in cluster {cluster}: grafana.com/rollout-paused removed"
            )),
            "the resume reached {cluster}:\n{output}"
        );
    }

    // and each cluster's member was first seen paused with nothing updated, then rolling,
    // then complete; the clusters one after the other, in name order
    let mut finished_at = 0;
    for cluster in ["cluster-a", "cluster-b", "cluster-c"] {
        let member = format!("{cluster}/ingester");
        let lines = ran.zone_lines(&member, following);
        assert_eq!(
            lines.first(),
            Some(&(0, 5)),
            "{member} is first seen before any pod of it was deleted:\n{output}"
        );
        assert!(lines.contains(&(5, 5)), "{member} completes:\n{output}");
        let first_updated = ran.printed[following..]
            .iter()
            .position(|line| zone_counts(line, &member).is_some_and(|(updated, _)| updated > 0))
            .unwrap_or_else(|| panic!("{member} is never seen updated:\n{output}"));
        assert!(
            first_updated >= finished_at,
            "{member} rolls only once the cluster before it completed:\n{output}"
        );
        finished_at = ran.line(&format!("{member} complete: 5/5 updated, 5/5 ready")) - following;
    }
    // (the soak of cluster-a's annotation before each later cluster)
    for member in ["cluster-b/ingester", "cluster-c/ingester"] {
        ran.assert_soak_counted_down(member);
    }

    // and the status across the clusters shows every member complete, and the log named
    // before and after holds what the controller did in the member clusters
    for cluster in ["cluster-a", "cluster-b", "cluster-c"] {
        assert!(
            ran.printed.iter().any(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                words.contains(&format!("{cluster}/ingester").as_str())
                    && words.contains(&"complete")
                    && words.iter().filter(|word| **word == "5/5").count() == 2
            }),
            "the status table shows {cluster}/ingester complete:\n{output}"
        );
    }
    let written = ran.controller_log();
    assert!(
        written.contains("cluster-c/ingester"),
        "the controller's log tells of the last member it rolled:\n{written}"
    );
}
