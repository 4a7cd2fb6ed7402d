//! The work queue of rollout groups: a group is reconciled as soon as something about it
//! changes, never twice at the same time, and a burst of changes while it runs becomes one more
//! run, not one run per change.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What a reconcile asks of the queue when it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Nothing: the next watch event or resync brings the group back.
    Never,
    /// Run again after this long even if nothing changes (a timer-driven condition, or a
    /// retry after an error).
    After(Duration),
}

/// Runs `reconcile` for every group received on `requests` until `shutdown`. At most
/// `max_concurrent` groups run at once. A panic in a reconcile is re-raised here, so it ends the
/// process instead of silently stopping that group.
pub async fn run<F, Fut>(
    mut requests: UnboundedReceiver<String>,
    max_concurrent: usize,
    reconcile: F,
    shutdown: CancellationToken,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Requeue> + Send + 'static,
{
    let mut state = QueueState::new(max_concurrent.max(1));
    let mut running: JoinSet<(String, Requeue)> = JoinSet::new();
    let mut timers: JoinSet<String> = JoinSet::new();
    loop {
        for group in state.startable() {
            let work = reconcile(group.clone());
            running.spawn(async move { (group, work.await) });
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            request = requests.recv() => match request {
                Some(group) => state.request(group),
                None => break,
            },
            Some(done) = running.join_next(), if !running.is_empty() => {
                let (group, requeue) = match done {
                    Ok(done) => done,
                    Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                    Err(_) => continue,
                };
                state.finished(&group);
                if let Requeue::After(delay) = requeue {
                    timers.spawn(async move {
                        tokio::time::sleep(delay).await;
                        group
                    });
                }
            }
            Some(Ok(group)) = timers.join_next(), if !timers.is_empty() => state.request(group),
        }
    }
    running.shutdown().await;
}

/// The bookkeeping of the queue, apart from any task, so its rules can be tested directly.
#[derive(Debug)]
struct QueueState {
    max_concurrent: usize,
    running: HashSet<String>,
    /// Requested while running: run once more when the current run ends.
    dirty: HashSet<String>,
    /// Requested while `max_concurrent` groups were running.
    waiting: VecDeque<String>,
}

impl QueueState {
    fn new(max_concurrent: usize) -> Self {
        Self {
            max_concurrent,
            running: HashSet::new(),
            dirty: HashSet::new(),
            waiting: VecDeque::new(),
        }
    }

    fn request(&mut self, group: String) {
        if self.running.contains(&group) {
            self.dirty.insert(group);
        } else if !self.waiting.contains(&group) {
            self.waiting.push_back(group);
        }
    }

    fn finished(&mut self, group: &str) {
        self.running.remove(group);
        if self.dirty.remove(group) {
            self.waiting.push_front(group.to_owned());
        }
    }

    /// Groups to start now; they are counted as running from here on.
    fn startable(&mut self) -> Vec<String> {
        let mut started = Vec::new();
        let mut index = 0;
        while self.running.len() < self.max_concurrent && index < self.waiting.len() {
            if self.running.contains(&self.waiting[index]) {
                index += 1;
                continue;
            }
            let group = self.waiting.remove(index).expect("index is in range");
            self.running.insert(group.clone());
            started.push(group);
        }
        started
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_burst_while_running_becomes_exactly_one_more_run() {
        let mut state = QueueState::new(4);
        state.request("ingester".into());
        assert_eq!(state.startable(), ["ingester"]);
        for _ in 0..10 {
            state.request("ingester".into());
        }
        assert!(state.startable().is_empty(), "never twice at once");
        state.finished("ingester");
        assert_eq!(state.startable(), ["ingester"]);
        state.finished("ingester");
        assert!(state.startable().is_empty());
    }

    #[test]
    fn requests_for_a_waiting_group_are_merged_and_groups_are_bounded() {
        let mut state = QueueState::new(1);
        state.request("a".into());
        state.request("b".into());
        state.request("b".into());
        assert_eq!(state.startable(), ["a"]);
        state.finished("a");
        assert_eq!(state.startable(), ["b"]);
        state.finished("b");
        assert!(state.startable().is_empty(), "b ran once for two requests");
    }

    #[tokio::test]
    async fn groups_run_concurrently_but_one_group_never_overlaps_itself() {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let shutdown = CancellationToken::new();
        let queue = tokio::spawn(run(
            receiver,
            8,
            {
                let (in_flight, overlaps, runs) =
                    (in_flight.clone(), overlaps.clone(), runs.clone());
                move |group: String| {
                    let (in_flight, overlaps, runs) =
                        (in_flight.clone(), overlaps.clone(), runs.clone());
                    async move {
                        assert_eq!(group, "only");
                        if in_flight.fetch_add(1, Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        runs.fetch_add(1, Ordering::SeqCst);
                        Requeue::Never
                    }
                }
            },
            shutdown.clone(),
        ));
        for _ in 0..50 {
            sender.send("only".to_owned()).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        shutdown.cancel();
        queue.await.unwrap();
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
        let runs = runs.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&runs),
            "50 requests coalesced into {runs} runs"
        );
    }

    #[tokio::test]
    async fn requeue_after_brings_the_group_back() {
        let runs = Arc::new(AtomicUsize::new(0));
        let shutdown = CancellationToken::new();
        let (first_sender, first) = tokio::sync::mpsc::unbounded_channel();
        first_sender.send("timer".to_owned()).unwrap();
        let queue = tokio::spawn(run(
            first,
            1,
            {
                let runs = runs.clone();
                move |_group: String| {
                    let runs = runs.clone();
                    async move {
                        let run = runs.fetch_add(1, Ordering::SeqCst);
                        if run < 2 {
                            Requeue::After(Duration::from_millis(10))
                        } else {
                            Requeue::Never
                        }
                    }
                }
            },
            shutdown.clone(),
        ));
        tokio::time::timeout(Duration::from_secs(5), async {
            while runs.load(Ordering::SeqCst) < 3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the group was requeued twice");
        shutdown.cancel();
        queue.await.unwrap();
        drop(first_sender);
    }

    #[tokio::test]
    #[should_panic(expected = "reconcile bug")]
    async fn a_panicking_reconcile_ends_the_queue_with_that_panic() {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        sender.send("broken".to_owned()).unwrap();
        run(
            receiver,
            1,
            |_group: String| async move { panic!("reconcile bug") },
            CancellationToken::new(),
        )
        .await;
    }
}
