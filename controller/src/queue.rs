//! The work queue of rollout groups: a group is reconciled as soon as something about it
//! changes, never twice at the same time, and a burst of changes while it runs becomes one more
//! run, not one run per change.
//!
//! Groups are served in the order they were asked for: a group changed while it ran goes to the
//! back, behind the groups already waiting, so under load (100 groups rolling at once) a busy
//! group cannot keep the others out. How long each change waited for its run is
//! `baton_group_queue_wait_seconds`.
//!
//! Timers follow the same rule: each group has at most ONE pending timer (one
//! [`DelayQueue`] entry per group, as kubert's requeue does), and a new request for a later
//! time never adds a second one, so a burst of N events that each ask "again in 5 s" schedules
//! one run, not N. A reconcile that failed comes back after a per-group exponential backoff
//! ([`Backoff`]) that a successful run resets.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};

/// What a reconcile asks of the queue when it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Nothing: the next watch event or resync brings the group back.
    Never,
    /// Run again after this long even if nothing changes (a timer-driven condition).
    After(Duration),
    /// The run failed: run again after the group's next backoff step.
    Failed,
}

impl Requeue {
    /// Run again at `at` (wall clock, as the planners' deadlines are), at least 10 ms from now.
    pub fn at(at: jiff::Timestamp) -> Requeue {
        let wait = at.duration_since(jiff::Timestamp::now());
        Requeue::After(
            Duration::try_from(wait)
                .unwrap_or_default()
                .max(Duration::from_millis(10)),
        )
    }

    /// The more urgent of two requests: a failure first (it must be retried), then the shorter
    /// timer; `Never` only when both say so.
    pub fn sooner(self, other: Requeue) -> Requeue {
        match (self, other) {
            (Requeue::Failed, _) | (_, Requeue::Failed) => Requeue::Failed,
            (Requeue::Never, other) | (other, Requeue::Never) => other,
            (Requeue::After(a), Requeue::After(b)) => Requeue::After(a.min(b)),
        }
    }
}

/// Per-group retry delays after failed reconciles: `initial`, doubling up to `max`, back to
/// `initial` after a run that did not fail.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    failures: HashMap<String, u32>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            failures: HashMap::new(),
        }
    }

    /// Records a failed run of `group` and returns how long to wait before the next one.
    fn failed(&mut self, group: &str) -> Duration {
        let failures = self.failures.entry(group.to_owned()).or_default();
        let delay = self
            .initial
            .saturating_mul(2u32.saturating_pow(*failures))
            .min(self.max);
        *failures = failures.saturating_add(1);
        delay
    }

    /// Records a run of `group` that did not fail.
    fn succeeded(&mut self, group: &str) {
        self.failures.remove(group);
    }
}

impl Default for Backoff {
    /// 500 ms, 1 s, 2 s, … up to a minute.
    fn default() -> Self {
        Self::new(Duration::from_millis(500), Duration::from_secs(60))
    }
}

/// At most one timer per group; a request for a time later than the one pending is dropped.
#[derive(Default)]
struct Timers {
    queue: DelayQueue<String>,
    keys: HashMap<String, (delay_queue::Key, Instant)>,
}

impl Timers {
    fn schedule(&mut self, group: String, delay: Duration) {
        let at = Instant::now() + delay;
        match self.keys.get_mut(&group) {
            Some((_, pending)) if *pending <= at => {}
            Some((key, pending)) => {
                self.queue.reset_at(key, at);
                *pending = at;
            }
            None => {
                let key = self.queue.insert_at(group.clone(), at);
                self.keys.insert(group, (key, at));
            }
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    /// The next group whose time has come (pending forever while there is none).
    async fn next(&mut self) -> String {
        match std::future::poll_fn(|context| self.queue.poll_expired(context)).await {
            Some(expired) => {
                let group = expired.into_inner();
                self.keys.remove(&group);
                group
            }
            None => std::future::pending().await,
        }
    }
}

/// Runs `reconcile` for every group received on `requests` until `shutdown`. At most
/// `max_concurrent` groups run at once; `waited` observes, for each run, how long since the
/// first request it serves. A panic in a reconcile is re-raised here, so it ends the process
/// instead of silently stopping that group.
pub async fn run<F, Fut>(
    requests: UnboundedReceiver<String>,
    max_concurrent: usize,
    waited: prometheus::Histogram,
    reconcile: F,
    shutdown: CancellationToken,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Requeue> + Send + 'static,
{
    run_with_backoff(
        requests,
        (max_concurrent, waited),
        Backoff::default(),
        reconcile,
        shutdown,
    )
    .await
}

/// [`run`] with its own failure [`Backoff`].
pub async fn run_with_backoff<F, Fut>(
    mut requests: UnboundedReceiver<String>,
    (max_concurrent, waited): (usize, prometheus::Histogram),
    mut backoff: Backoff,
    reconcile: F,
    shutdown: CancellationToken,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Requeue> + Send + 'static,
{
    let mut state = QueueState::new(max_concurrent.max(1));
    let mut running: JoinSet<(String, Requeue)> = JoinSet::new();
    let mut timers = Timers::default();
    loop {
        for (group, since) in state.startable() {
            waited.observe(since.elapsed().as_secs_f64());
            let work = reconcile(group.clone());
            running.spawn(async move { (group, work.await) });
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            request = requests.recv() => match request {
                Some(group) => state.request(group, Instant::now()),
                None => break,
            },
            Some(done) = running.join_next(), if !running.is_empty() => {
                let (group, requeue) = match done {
                    Ok(done) => done,
                    Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                    Err(_) => continue,
                };
                state.finished(&group);
                match requeue {
                    Requeue::Never => backoff.succeeded(&group),
                    Requeue::After(delay) => {
                        backoff.succeeded(&group);
                        timers.schedule(group, delay);
                    }
                    Requeue::Failed => {
                        let delay = backoff.failed(&group);
                        timers.schedule(group, delay);
                    }
                }
            }
            group = timers.next(), if timers.len() > 0 => state.request(group, Instant::now()),
        }
    }
    running.shutdown().await;
}

/// The bookkeeping of the queue, apart from any task, so its rules can be tested directly.
#[derive(Debug)]
struct QueueState {
    max_concurrent: usize,
    running: HashSet<String>,
    /// Requested while running, since when: run once more when the current run ends.
    dirty: HashMap<String, Instant>,
    /// Groups not running that wait for a turn, in the order they were asked for, and since
    /// when each waits (a group is in both or in neither).
    waiting: VecDeque<String>,
    since: HashMap<String, Instant>,
}

impl QueueState {
    fn new(max_concurrent: usize) -> Self {
        Self {
            max_concurrent,
            running: HashSet::new(),
            dirty: HashMap::new(),
            waiting: VecDeque::new(),
            since: HashMap::new(),
        }
    }

    /// `group` changed at `now`.
    fn request(&mut self, group: String, now: Instant) {
        if self.running.contains(&group) {
            self.dirty.entry(group).or_insert(now);
        } else if !self.since.contains_key(&group) {
            self.since.insert(group.clone(), now);
            self.waiting.push_back(group);
        }
    }

    fn finished(&mut self, group: &str) {
        self.running.remove(group);
        if let Some(since) = self.dirty.remove(group) {
            // At the back: the groups already waiting came first.
            self.since.insert(group.to_owned(), since);
            self.waiting.push_back(group.to_owned());
        }
    }

    /// Groups to start now, each with when it was first asked for since its last run; they
    /// are counted as running from here on.
    fn startable(&mut self) -> Vec<(String, Instant)> {
        let mut started = Vec::new();
        while self.running.len() < self.max_concurrent
            && let Some(group) = self.waiting.pop_front()
        {
            let since = self
                .since
                .remove(&group)
                .expect("a waiting group has its time");
            self.running.insert(group.clone());
            started.push((group, since));
        }
        started
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// The groups started, by name.
    fn names(started: Vec<(String, Instant)>) -> Vec<String> {
        started.into_iter().map(|(group, _)| group).collect()
    }

    /// A histogram of waits, registered nowhere.
    fn waits() -> prometheus::Histogram {
        prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("waits", "waits"))
            .expect("a valid histogram")
    }

    #[test]
    fn a_group_changed_while_it_ran_goes_behind_the_groups_already_waiting() {
        // Given one slot, with a running and b and c waiting
        let mut state = QueueState::new(1);
        let start = Instant::now();
        for group in ["a", "b", "c"] {
            state.request(group.into(), start);
        }
        assert_eq!(names(state.startable()), ["a"]);
        // When a changes while it runs, then ends
        state.request("a".into(), start + Duration::from_secs(1));
        state.finished("a");
        // Then b and c run before a again
        let mut order = Vec::new();
        while let Some((group, _)) = state.startable().pop() {
            state.finished(&group);
            order.push(group);
        }
        assert_eq!(order, ["b", "c", "a"]);
    }

    #[test]
    fn each_run_is_told_since_when_the_changes_it_serves_waited() {
        let mut state = QueueState::new(1);
        let start = Instant::now();
        let at = |seconds| start + Duration::from_secs(seconds);
        // a waits from its first request, not its last
        state.request("a".into(), at(1));
        state.request("a".into(), at(2));
        assert_eq!(state.startable(), [("a".to_owned(), at(1))]);
        // b waits behind a, from its own request
        state.request("b".into(), at(3));
        // a changes twice while running: its next run serves both, the first one's time
        state.request("a".into(), at(4));
        state.request("a".into(), at(5));
        state.finished("a");
        assert_eq!(state.startable(), [("b".to_owned(), at(3))]);
        state.finished("b");
        assert_eq!(state.startable(), [("a".to_owned(), at(4))]);
        state.finished("a");
        assert!(state.startable().is_empty());
    }

    #[test]
    fn a_burst_while_running_becomes_exactly_one_more_run() {
        let mut state = QueueState::new(4);
        state.request("ingester".into(), Instant::now());
        assert_eq!(names(state.startable()), ["ingester"]);
        for _ in 0..10 {
            state.request("ingester".into(), Instant::now());
        }
        assert!(names(state.startable()).is_empty(), "never twice at once");
        state.finished("ingester");
        assert_eq!(names(state.startable()), ["ingester"]);
        state.finished("ingester");
        assert!(names(state.startable()).is_empty());
    }

    #[test]
    fn requests_for_a_waiting_group_are_merged_and_groups_are_bounded() {
        let mut state = QueueState::new(1);
        state.request("a".into(), Instant::now());
        state.request("b".into(), Instant::now());
        state.request("b".into(), Instant::now());
        assert_eq!(names(state.startable()), ["a"]);
        state.finished("a");
        assert_eq!(names(state.startable()), ["b"]);
        state.finished("b");
        assert!(
            names(state.startable()).is_empty(),
            "b ran once for two requests"
        );
    }

    /// What the reconciles of [`groups_run_concurrently_but_one_group_never_overlaps_itself`]
    /// saw, per group.
    #[derive(Debug, Default)]
    struct Runs {
        /// Runs started (the queue called the reconcile) and not finished.
        in_flight: HashMap<String, usize>,
        /// The most runs of the group in flight at once.
        most_at_once: HashMap<String, usize>,
        finished: HashMap<String, usize>,
    }

    impl Runs {
        fn start(&mut self, group: &str) {
            let in_flight = self.in_flight.entry(group.to_owned()).or_default();
            *in_flight += 1;
            let most = self.most_at_once.entry(group.to_owned()).or_default();
            *most = (*most).max(*in_flight);
        }

        fn finish(&mut self, group: &str) {
            *self.in_flight.entry(group.to_owned()).or_default() -= 1;
            *self.finished.entry(group.to_owned()).or_default() += 1;
        }

        fn count(counts: &HashMap<String, usize>, group: &str) -> usize {
            counts.get(group).copied().unwrap_or(0)
        }
    }

    /// Waits until `condition` holds of the runs; panics, naming `what`, if it does not soon.
    async fn wait_for_runs(
        watched: &mut tokio::sync::watch::Receiver<Runs>,
        what: &str,
        condition: impl FnMut(&Runs) -> bool,
    ) {
        let waited = tokio::time::timeout(Duration::from_secs(10), watched.wait_for(condition))
            .await
            .map(|seen| seen.map(|_| ()));
        if !matches!(waited, Ok(Ok(()))) {
            panic!("never {what}: {:?}", *watched.borrow());
        }
    }

    #[tokio::test]
    async fn groups_run_concurrently_but_one_group_never_overlaps_itself() {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let (runs, mut watched) = tokio::sync::watch::channel(Runs::default());
        let runs = Arc::new(runs);
        // Runs of "a" and "b" hold until released; the marker's never do.
        let (release, released) = tokio::sync::watch::channel(false);
        let shutdown = CancellationToken::new();
        let queue = tokio::spawn(run(
            receiver,
            8,
            waits(),
            {
                let runs = runs.clone();
                move |group: String| {
                    // Counted when the queue starts the run, before the task is first polled:
                    // a second run of a group started by mistake counts at once.
                    runs.send_modify(|runs| runs.start(&group));
                    let (runs, mut released) = (runs.clone(), released.clone());
                    async move {
                        if group != "marker" {
                            released
                                .wait_for(|released| *released)
                                .await
                                .expect("the test keeps the release until the end");
                        }
                        runs.send_modify(|runs| runs.finish(&group));
                        Requeue::Never
                    }
                }
            },
            shutdown.clone(),
        ));

        // Given two groups requested: both run, at the same time (neither finishes before the
        // other has started: a queue running one group at a time never gets here)
        sender.send("a".to_owned()).unwrap();
        sender.send("b".to_owned()).unwrap();
        wait_for_runs(&mut watched, "a and b in flight at once", |runs| {
            Runs::count(&runs.in_flight, "a") > 0 && Runs::count(&runs.in_flight, "b") > 0
        })
        .await;

        // When each is requested 50 times more while it runs, then a marker group: the queue
        // takes requests in order, so once the marker ran it has seen all 100
        for _ in 0..50 {
            sender.send("a".to_owned()).unwrap();
            sender.send("b".to_owned()).unwrap();
        }
        sender.send("marker".to_owned()).unwrap();
        wait_for_runs(&mut watched, "the marker finished", |runs| {
            Runs::count(&runs.finished, "marker") == 1
        })
        .await;

        // Then neither group was started a second time while it ran
        {
            let seen = watched.borrow();
            for group in ["a", "b"] {
                assert_eq!(
                    Runs::count(&seen.most_at_once, group),
                    1,
                    "{group} overlapped itself: {:?}",
                    *seen
                );
            }
        }

        // And once released, the 50 requests of each became exactly one more run, never
        // overlapping the first
        release.send(true).unwrap();
        wait_for_runs(&mut watched, "a and b ran twice each", |runs| {
            Runs::count(&runs.finished, "a") == 2 && Runs::count(&runs.finished, "b") == 2
        })
        .await;
        shutdown.cancel();
        queue.await.unwrap();
        let seen = watched.borrow();
        for group in ["a", "b"] {
            assert_eq!(Runs::count(&seen.finished, group), 2, "{:?}", *seen);
            assert_eq!(Runs::count(&seen.most_at_once, group), 1, "{:?}", *seen);
        }
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
            waits(),
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

    #[test]
    fn sooner_prefers_a_failure_then_the_shorter_timer() {
        let (short, long) = (
            Requeue::After(Duration::from_secs(1)),
            Requeue::After(Duration::from_secs(5)),
        );
        assert_eq!(short.sooner(long), short);
        assert_eq!(long.sooner(short), short);
        assert_eq!(Requeue::Never.sooner(long), long);
        assert_eq!(long.sooner(Requeue::Failed), Requeue::Failed);
        assert_eq!(Requeue::Never.sooner(Requeue::Never), Requeue::Never);
    }

    #[test]
    fn backoff_doubles_per_group_up_to_the_cap_and_resets_on_success() {
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(3));
        let delays: Vec<_> = (0..5).map(|_| backoff.failed("a")).collect();
        assert_eq!(
            delays,
            [500, 1000, 2000, 3000, 3000].map(Duration::from_millis)
        );
        assert_eq!(backoff.failed("b"), Duration::from_millis(500), "per group");
        backoff.succeeded("a");
        assert_eq!(backoff.failed("a"), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_has_one_timer_however_many_requeues_ask_for_one() {
        let mut timers = Timers::default();
        for _ in 0..100 {
            timers.schedule("mirror".into(), Duration::from_secs(5));
        }
        timers.schedule("mirror".into(), Duration::from_secs(2));
        timers.schedule("mirror".into(), Duration::from_secs(9));
        timers.schedule("other".into(), Duration::from_secs(3));
        assert_eq!(timers.len(), 2, "one entry per group");
        let started = Instant::now();
        assert_eq!(timers.next().await, "mirror");
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(2),
            "the soonest request wins"
        );
        assert_eq!(timers.next().await, "other");
        assert_eq!(
            timers.len(),
            0,
            "nothing left: the later mirror requests were merged"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_requeues_becomes_one_more_run_and_failures_back_off() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let queue = tokio::spawn(run_with_backoff(
            receiver,
            (4, waits()),
            Backoff::new(Duration::from_secs(1), Duration::from_secs(60)),
            {
                let runs = runs.clone();
                move |group: String| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        if group == "failing" {
                            Requeue::Failed
                        } else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            Requeue::After(Duration::from_secs(5))
                        }
                    }
                }
            },
            shutdown.clone(),
        ));
        // Given a group whose every run asks to come back in 5 s, and ten events 100 ms apart
        // (each one a run of its own, each asking for a timer)
        for _ in 0..10 {
            sender.send("mirror".to_owned()).unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(runs.load(Ordering::SeqCst), 10);
        // When the time of the first timer comes, and until the last one asked for
        tokio::time::sleep(Duration::from_millis(4_950)).await;
        // Then one timer-driven run happened, not ten (the later requests merged into it)
        assert_eq!(runs.load(Ordering::SeqCst), 11);

        // And a failing group is retried after 1, 2, 4, 8 s: 5 runs in 15.5 s, not 8 (fixed 2 s)
        runs.store(0, Ordering::SeqCst);
        sender.send("failing".to_owned()).unwrap();
        tokio::time::sleep(Duration::from_millis(15_500)).await;
        // (mirror goes on once every 5 s: 3 runs in those 15.5 s)
        assert_eq!(runs.load(Ordering::SeqCst), 5 + 3);
        shutdown.cancel();
        queue.await.unwrap();
    }

    #[tokio::test]
    #[should_panic(expected = "reconcile bug")]
    async fn a_panicking_reconcile_ends_the_queue_with_that_panic() {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        sender.send("broken".to_owned()).unwrap();
        run(
            receiver,
            1,
            waits(),
            |_group: String| async move { panic!("reconcile bug") },
            CancellationToken::new(),
        )
        .await;
    }
}
