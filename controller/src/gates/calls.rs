//! The gates' calls out of the leader: health check runs and rollout hooks, with the bounds the
//! operator set (`gates` in the configuration, see [`super::egress`]).
//!
//! A health check's queries (Prometheus', or a web check's calls) run beside the groups'
//! reconciles, never inside them: a group whose Prometheus is slow or dead would otherwise hold one of the few reconcile slots for as long as
//! its queries wait, and every other group's rollout behind it. A due run is started here and
//! the reconcile goes on with the check's stored state (which passes nothing new); when the run
//! ends, its group is queued again and the next reconcile takes the outcome. At most
//! `gates.max_concurrent_checks` runs are in flight; each is bounded by its check's timeout
//! (at most `gates.max_query_timeout`), all of its queries at once.
//!
//! Hook calls go the same way ([`Runs`] holds both): a hook that answers slowly (up to
//! `kubernetes.request_timeout` each) holds no reconcile slot; its answer is recorded by the
//! reconcile its end queues.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_config::GatesConfig;
use jiff::Timestamp;
use tokio::sync::{Semaphore, mpsc::UnboundedSender};
use tokio::task::AbortHandle;

use super::egress::{self, Allowlist};
use baton_core::gates::checks::CheckOutcome;
use baton_core::gates::hooks::{self, HookAnswer, HookCall};
use baton_core::gates::redact::redact;
use baton_core::pass::{EndedRun, HookRead};

/// The settings and shared clients of the gates' calls, and the check runs in flight.
pub struct GateCalls {
    pub client: kube::Client,
    pub namespace: String,
    /// Bound on each Kubernetes read (a check, its Secrets) and each hook call.
    pub request_timeout: Duration,
    pub prometheus: Allowlist,
    /// Where web checks may call (`gates.web_check_addresses`).
    pub web: Allowlist,
    pub max_query_timeout: Duration,
    pub max_answer_bytes: u64,
    /// baton's own TLS Secret, when it lives in this namespace: never a check's credential.
    pub own_secret: Option<String>,
    hooks: HookPoster,
    pub runs: Runs<EndedRun>,
    /// Hook calls in flight, and answers not yet recorded.
    pub hook_calls: Runs<HookAnswer>,
}

/// What a check run needs to reach its Prometheus, owned by the run (which outlives the pass
/// that started it): the bounds and clients of [`GateCalls`].
#[derive(Clone)]
pub struct CheckConnector {
    pub client: kube::Client,
    pub namespace: String,
    pub request_timeout: Duration,
    pub prometheus: Allowlist,
    pub web: Allowlist,
    pub max_answer_bytes: u64,
    pub own_secret: Option<String>,
}

/// The one hook client and what it may call, for calls made beside the reconciles.
#[derive(Debug, Clone)]
struct HookPoster {
    allowlist: Allowlist,
    client: reqwest::Client,
    namespace: String,
}

impl HookPoster {
    /// POSTs `call`; the HTTP status, or why there is none (neither naming the URL unredacted).
    async fn post(&self, call: &HookCall, group: &str) -> Result<u16, String> {
        let url = self.allowlist.permit(&call.url)?;
        self.client
            .post(url)
            // (the hook is told the group's name and its namespace apart)
            .json(&hooks::body(
                call,
                baton_core::namespaces::split(group).1,
                &self.namespace,
            ))
            .send()
            .await
            .map(|response| response.status().as_u16())
            .map_err(|error| {
                format!(
                    "calling {}: {}",
                    redact(&call.url),
                    egress::describe_failure(&error)
                )
            })
    }
}

impl std::fmt::Debug for CheckConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckConnector")
            .field("namespace", &self.namespace)
            .field("prometheus", &self.prometheus)
            .field("web", &self.web)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for GateCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateCalls")
            .field("namespace", &self.namespace)
            .field("prometheus", &self.prometheus)
            .field("web", &self.web)
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}

impl GateCalls {
    /// `own_secret` is the webhook's TLS Secret if it is in `namespace`; `wake` queues a group
    /// again (the controller's reconcile queue).
    pub fn new(
        client: kube::Client,
        namespace: String,
        request_timeout: Duration,
        config: &GatesConfig,
        own_secret: Option<String>,
        wake: UnboundedSender<String>,
    ) -> Result<Self, reqwest::Error> {
        let hooks = Self::hook_client(config, request_timeout)?;
        Ok(Self::with_hook_client(
            hooks,
            client,
            namespace,
            request_timeout,
            config,
            (own_secret, wake),
        ))
    }

    /// The HTTP client hooks are called with: built once per process and shared by every
    /// namespace served (a client holds its TLS roots and connection pool).
    pub fn hook_client(
        config: &GatesConfig,
        request_timeout: Duration,
    ) -> Result<reqwest::Client, reqwest::Error> {
        Allowlist::new("gates.hook_addresses", config.hook_addresses.clone())
            .client_builder(request_timeout)
            .build()
    }

    /// As [`GateCalls::new`], calling hooks with `hooks` ([`GateCalls::hook_client`]).
    pub fn with_hook_client(
        hooks: reqwest::Client,
        client: kube::Client,
        namespace: String,
        request_timeout: Duration,
        config: &GatesConfig,
        (own_secret, wake): (Option<String>, UnboundedSender<String>),
    ) -> Self {
        let allowlist = Allowlist::new("gates.hook_addresses", config.hook_addresses.clone());
        let hooks = HookPoster {
            client: hooks,
            allowlist,
            namespace: namespace.clone(),
        };
        Self {
            client,
            namespace,
            request_timeout,
            prometheus: Allowlist::new(
                "gates.prometheus_addresses",
                config.prometheus_addresses.clone(),
            ),
            web: Allowlist::new(
                "gates.web_check_addresses",
                config.web_check_addresses.clone(),
            ),
            max_query_timeout: config.max_query_timeout.get(),
            max_answer_bytes: config.max_answer_bytes.0,
            own_secret,
            hooks,
            runs: Runs::new(config.max_concurrent_checks, wake.clone()),
            hook_calls: Runs::new(config.max_concurrent_checks, wake),
        }
    }

    /// What a check run needs, for a run about to start.
    pub fn connector(&self) -> CheckConnector {
        CheckConnector {
            client: self.client.clone(),
            namespace: self.namespace.clone(),
            request_timeout: self.request_timeout,
            prometheus: self.prometheus.clone(),
            web: self.web.clone(),
            max_answer_bytes: self.max_answer_bytes,
            own_secret: self.own_secret.clone(),
        }
    }

    /// What a pass of `group` knows of its hook at `url`: whether the operator's bounds refuse
    /// it, an answer not yet recorded (left in place: the pass takes it when it records it)
    /// and the call in flight.
    pub fn hook_read(&self, group: &str, url: &str) -> HookRead {
        let (ended, running) = match self.hook_calls.peek(group) {
            Some((key, Peeked::Ended(answer))) => (Some((key, answer)), None),
            Some((key, Peeked::Running)) => (None, Some(key)),
            None => (None, None),
        };
        HookRead {
            refused: self.hooks.allowlist.permit(url).err(),
            ended,
            running,
        }
    }

    /// Starts POSTing `call` of `group` beside the reconciles, unless it is in flight; when it
    /// answers, the group is queued again and its reconcile records the answer
    /// ([`Runs::take_ended`] with [`hooks::key`]).
    pub fn start_hook(&self, group: &str, call: HookCall) {
        let poster = self.hooks.clone();
        let name = group.to_owned();
        self.hook_calls
            .start(group, &hooks::key(&call), async move {
                let answer = poster.post(&call, &name).await;
                HookAnswer {
                    at: Timestamp::now(),
                    answer,
                }
            });
    }
}

/// Calls in flight beside the reconciles and those ended but not yet taken, one per group
/// (check runs, hook calls). Each is made for a key (for a check: its generation and what the
/// group rolls to; for a hook: the call): an outcome is taken only for the key it was made for,
/// so a run made before the check or the template changed never counts after it.
#[derive(Debug)]
pub struct Runs<T> {
    slots: Arc<Mutex<HashMap<String, Slot<T>>>>,
    permits: Arc<Semaphore>,
    wake: UnboundedSender<String>,
}

#[derive(Debug)]
struct Slot<T> {
    key: String,
    state: SlotState<T>,
}

/// What a slot holds, as [`Runs::peek`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked<T> {
    Running,
    Ended(T),
}

#[derive(Debug)]
enum SlotState<T> {
    Running(AbortHandle),
    Ended(T),
}

impl<T: Send + 'static> Runs<T> {
    pub fn new(max_concurrent: usize, wake: UnboundedSender<String>) -> Self {
        Self {
            slots: Arc::default(),
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            wake,
        }
    }

    /// The run of `group` for `key` that ended since the last call, if any (one for another
    /// key is dropped).
    pub fn take_ended(&self, group: &str, key: &str) -> Option<T> {
        let mut slots = self.lock();
        let slot = slots.remove(group)?;
        match slot.state {
            SlotState::Ended(run) if slot.key == key => Some(run),
            SlotState::Ended(_) => None,
            SlotState::Running(_) => {
                slots.insert(group.to_owned(), slot);
                None
            }
        }
    }

    /// `group` is gone (it has no member left): its run stops and its slot goes, so the slots
    /// stay as many as the groups (whose names are anyone's to create).
    pub fn forget(&self, group: &str) {
        if let Some(Slot {
            state: SlotState::Running(task),
            ..
        }) = self.lock().remove(group)
        {
            task.abort();
        }
    }

    /// What `group`'s slot holds, under which key: a run in flight, or one ended and not taken.
    pub fn peek(&self, group: &str) -> Option<(String, Peeked<T>)>
    where
        T: Clone,
    {
        let slots = self.lock();
        let slot = slots.get(group)?;
        let peeked = match &slot.state {
            SlotState::Running(_) => Peeked::Running,
            SlotState::Ended(run) => Peeked::Ended(run.clone()),
        };
        Some((slot.key.clone(), peeked))
    }

    /// Whether a run of `group` for `key` is in flight.
    pub fn running(&self, group: &str, key: &str) -> bool {
        self.lock()
            .get(group)
            .is_some_and(|slot| slot.key == key && matches!(slot.state, SlotState::Running(_)))
    }

    /// Starts `run` as the one of `group` for `key`, unless one for `key` is in flight (one for
    /// another key is stopped); when it ends, the group is queued again.
    pub fn start<F>(&self, group: &str, key: &str, run: F)
    where
        F: Future<Output = T> + Send + 'static,
    {
        let mut slots = self.lock();
        if let Some(slot) = slots.get(group)
            && let SlotState::Running(task) = &slot.state
        {
            if slot.key == key {
                return;
            }
            task.abort();
        }
        let (owned, permits, wake) = (self.slots.clone(), self.permits.clone(), self.wake.clone());
        let (name, made_for) = (group.to_owned(), key.to_owned());
        let task = tokio::spawn(async move {
            // Never closed: the semaphore lives as long as the runs.
            let _permit = permits.acquire_owned().await;
            let ended = Slot {
                key: made_for,
                state: SlotState::Ended(run.await),
            };
            owned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(name.clone(), ended);
            // The queue is gone only when the controller stops.
            let _ = wake.send(name);
        });
        let running = Slot {
            key: key.to_owned(),
            state: SlotState::Running(task.abort_handle()),
        };
        slots.insert(group.to_owned(), running);
    }
}

impl<T> Runs<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot<T>>> {
        // A panic while holding the lock left whole entries: the map is still sound.
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<T> Drop for Runs<T> {
    /// Runs belong to the controller that started them: none outlives it.
    fn drop(&mut self) {
        for slot in self.lock().values() {
            if let SlotState::Running(task) = &slot.state {
                task.abort();
            }
        }
    }
}

/// Bounds `queries` by `timeout`: past it, the run is inconclusive.
pub async fn bounded_run<F>(timeout: Duration, queries: F) -> CheckOutcome
where
    F: Future<Output = CheckOutcome>,
{
    bounded_seen(timeout, async { (queries.await, None) })
        .await
        .0
}

/// [`bounded_run`] for queries that also say what they saw (a pass's values): past `timeout`,
/// inconclusive, nothing seen.
pub async fn bounded_seen<F>(timeout: Duration, queries: F) -> (CheckOutcome, Option<String>)
where
    F: Future<Output = (CheckOutcome, Option<String>)>,
{
    tokio::time::timeout(timeout, queries)
        .await
        .unwrap_or_else(|_| {
            let why = format!("no answer within {timeout:?}");
            (CheckOutcome::Inconclusive { why }, None)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_run_that_never_ends_holds_only_its_own_group() {
        // Given one run slot, taken by a group whose Prometheus never answers
        let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let runs = Runs::<CheckOutcome>::new(2, wake);
        runs.start("dead", "k", std::future::pending());
        // When another group's run is started
        runs.start("alive", "k", async { CheckOutcome::Pass });
        // Then it ends, its group is queued again and its outcome is taken once
        assert_eq!(woken.recv().await.as_deref(), Some("alive"));
        assert_eq!(runs.take_ended("alive", "k"), Some(CheckOutcome::Pass));
        assert_eq!(runs.take_ended("alive", "k"), None);
        // and the dead group's run is still in flight, not restarted
        assert!(runs.running("dead", "k"));
        runs.start("dead", "k", async { CheckOutcome::Pass });
        assert_eq!(runs.take_ended("dead", "k"), None);
    }

    #[tokio::test]
    async fn runs_beyond_the_limit_wait_for_a_slot() {
        let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let runs = Runs::<CheckOutcome>::new(1, wake);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        runs.start("first", "k", async move {
            let _ = released.await;
            CheckOutcome::Pass
        });
        runs.start("second", "k", async { CheckOutcome::Pass });
        tokio::task::yield_now().await;
        assert!(
            runs.running("second", "k"),
            "waits while first holds the slot"
        );
        release.send(()).expect("first is waiting");
        let mut ended = vec![
            woken.recv().await.expect("one ends"),
            woken.recv().await.expect("the other ends"),
        ];
        ended.sort();
        assert_eq!(ended, ["first", "second"]);
    }

    #[tokio::test]
    async fn a_run_made_for_an_earlier_check_or_template_is_never_taken() {
        let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let runs = Runs::<CheckOutcome>::new(1, wake);
        // A run in flight for generation 1 is stopped when generation 2 needs one
        runs.start("group", "1/rev-a", std::future::pending());
        runs.start("group", "2/rev-a", async { CheckOutcome::Pass });
        assert!(!runs.running("group", "1/rev-a"));
        assert_eq!(woken.recv().await.as_deref(), Some("group"));
        // and an ended run is taken only for the key it was made for
        assert_eq!(runs.take_ended("group", "2/rev-b"), None);
        assert!(!runs.running("group", "2/rev-a"));
        assert_eq!(runs.take_ended("group", "2/rev-a"), None, "dropped");
    }

    #[tokio::test]
    async fn a_group_that_is_gone_leaves_no_slot_and_no_run() {
        let (wake, _woken) = tokio::sync::mpsc::unbounded_channel();
        let runs = Runs::<CheckOutcome>::new(1, wake);
        runs.start("gone", "k", std::future::pending());
        runs.forget("gone");
        assert!(!runs.running("gone", "k"));
        assert!(runs.lock().is_empty());
    }

    #[tokio::test]
    async fn a_run_past_its_timeout_is_inconclusive() {
        tokio::time::pause();
        let outcome = bounded_run(Duration::from_secs(2), std::future::pending()).await;
        assert!(
            matches!(&outcome, CheckOutcome::Inconclusive { why } if why.contains("within 2s")),
            "{outcome:?}"
        );
    }
}
