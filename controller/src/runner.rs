//! The one place that asks whether this replica may act. Every pass that writes (a group's
//! rollout and scaling, a certificate round, a caBundle injection) runs its writes through a
//! [`Runner`] bound to the leadership term the pass started in, so the fencing rules live here
//! once instead of beside each feature's effects:
//! - a pass acts only within the term it started in: a later term of this replica does not
//!   count, it reads again ([`Runner::in_current_term`], [`may_start`]);
//! - before each step that writes or calls out, the runner asks once whether that term lasts,
//!   and bounds the step by the sooner of the request timeout and what is left of the term, so a
//!   deposed leader stops when its term ends, not a request timeout later ([`Runner::bound`],
//!   [`Runner::step`]);
//! - a lost term is typed ([`TermLost`]): it ends the pass, and nothing is written after it.
//!
//! A stale write (the object changed since the pass read it) ends a pass too, but what tells it
//! and what follows differ by call, so each feature maps its own: a 409 on a conditional write,
//! a failed JSON-patch test (422), a 404; the rollout's next pass plans on the new version at
//! its watch event, scaling looks again soon, a certificate round reads again at once.
//!
//! Reads that decide nothing on their own (the caches, a fresh read before a write) take the
//! request timeout only: a read cannot act on a later leader's objects.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use baton_shared::kube_client::{TimedOut, bounded};
use tokio::sync::watch;

use crate::leader::{Leadership, Term};

/// Whether a reconcile may still act right now, and for how long: `Some(time left)` only while
/// the leadership term it started in lasts. A call made to act is bounded by that time, so a
/// replica whose term ends mid-call stops acting when it ends, not a request timeout later.
pub type MayAct = Arc<dyn Fn() -> Option<Duration> + Send + Sync>;

/// Opens one reconcile's right to act: `None` when this replica may not act now, else a
/// [`MayAct`] bound to the current leadership term, so a reconcile planned before a lost term
/// can never act in a later one; the next term starts from a fresh snapshot.
pub type MayStart = Arc<dyn Fn() -> Option<MayAct> + Send + Sync>;

/// One pass's hold on its leadership term, and the bound on each of its calls.
#[derive(Clone)]
pub struct Runner {
    may_act: MayAct,
    request_timeout: Duration,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

/// The term the pass started in ended: nothing more is written in it, and a later term reads
/// again from a fresh snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermLost;

impl Runner {
    /// A runner for a pass allowed to act while `may_act` answers, each call bounded by at most
    /// `request_timeout`.
    pub fn new(may_act: MayAct, request_timeout: Duration) -> Self {
        Self {
            may_act,
            request_timeout,
        }
    }

    /// A runner bound to the term `leadership` is in now; `None` when this replica may not act.
    pub fn in_current_term(leadership: &Leadership, request_timeout: Duration) -> Option<Self> {
        let term = leadership.term()?;
        Some(Self::new(
            acting_in(leadership.clone(), term),
            request_timeout,
        ))
    }

    /// How long the next step may take. A step that acts (`needs_term`) asks once whether the
    /// pass's term lasts and is bounded by what is left of it; one that does not (an Event, a
    /// read) by the request timeout alone.
    pub fn bound(&self, needs_term: bool) -> Result<Duration, TermLost> {
        if !needs_term {
            return Ok(self.request_timeout);
        }
        let left = (self.may_act)().ok_or(TermLost)?;
        Ok(self.request_timeout.min(left))
    }

    /// Runs one write of the pass: only while its term lasts, bounded by what is left of it.
    pub async fn step<T>(
        &self,
        what: impl Into<String>,
        call: impl Future<Output = T>,
    ) -> Result<Result<T, TimedOut>, TermLost> {
        let timeout = self.bound(true)?;
        Ok(bounded(timeout, what, call).await)
    }
}

/// Whether a reconcile may start now, and then for how long it may act. Acting on half-filled
/// caches could miss a not-ready zone: lead AND be synced. A reconcile acts only within the
/// term it started in.
pub fn may_start(leadership: Leadership, synced: watch::Receiver<bool>) -> MayStart {
    Arc::new(move || {
        if !*synced.borrow() {
            return None;
        }
        let term = leadership.term()?;
        Some(acting_in(leadership.clone(), term))
    })
}

/// The right to act while `term` lasts, and for how long.
fn acting_in(leadership: Leadership, term: Term) -> MayAct {
    Arc::new(move || leadership.time_left_in(term))
}

#[cfg(test)]
pub(crate) mod recorded;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(10);

    /// A term that answers `left` for `answers` asks, then has ended; counts the asks.
    fn term_lasting(answers: u32, left: Duration) -> (MayAct, Arc<AtomicU32>) {
        let asked = Arc::new(AtomicU32::new(0));
        let counted = asked.clone();
        let may_act: MayAct = Arc::new(move || {
            let before = counted.fetch_add(1, Ordering::SeqCst);
            (before < answers).then_some(left)
        });
        (may_act, asked)
    }

    #[test]
    fn a_step_that_acts_asks_once_and_is_bounded_by_what_is_left_of_the_term() {
        let (may_act, asked) = term_lasting(u32::MAX, Duration::from_secs(3));
        let runner = Runner::new(may_act, TIMEOUT);
        assert_eq!(runner.bound(true), Ok(Duration::from_secs(3)));
        assert_eq!(asked.load(Ordering::SeqCst), 1);

        let (may_act, _) = term_lasting(u32::MAX, Duration::from_secs(60));
        let runner = Runner::new(may_act, TIMEOUT);
        assert_eq!(
            runner.bound(true),
            Ok(TIMEOUT),
            "a long term leaves the request timeout"
        );
    }

    #[test]
    fn a_step_that_does_not_act_never_asks() {
        let (may_act, asked) = term_lasting(0, Duration::ZERO);
        let runner = Runner::new(may_act, TIMEOUT);
        assert_eq!(runner.bound(false), Ok(TIMEOUT));
        assert_eq!(asked.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_lost_term_ends_the_pass_before_the_call_starts() {
        let (may_act, asked) = term_lasting(1, Duration::from_secs(3));
        let runner = Runner::new(may_act, TIMEOUT);
        let calls = AtomicU32::new(0);
        let call = || async { calls.fetch_add(1, Ordering::SeqCst) };
        assert!(matches!(runner.step("first", call()).await, Ok(Ok(0))));
        assert!(matches!(runner.step("second", call()).await, Err(TermLost)));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "no call after the term ended"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 2, "asked once per step");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_outliving_the_term_times_out_when_the_term_ends() {
        let (may_act, _) = term_lasting(u32::MAX, Duration::from_millis(50));
        let runner = Runner::new(may_act, TIMEOUT);
        let outcome = runner
            .step("a call that never answers", std::future::pending::<()>())
            .await;
        let timed_out = outcome
            .expect("the term lasted when it started")
            .expect_err("no answer");
        assert_eq!(timed_out.timeout, Duration::from_millis(50));
    }
}
