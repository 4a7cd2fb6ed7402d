//! The thin I/O loop around the pure decisions: read, decide, write conditionally, sleep.
//! Losing the Lease ends the term, not the loop: it goes back to campaigning until shutdown.

use std::time::Instant;

use baton_shared::kube_client::bounded;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::LeaderElector;
use super::leadership::{EndReason, LeadershipPhase, Span, Term};
use super::store::LeaseStore;
use crate::error::Error;
use baton_core::lease::decide::{
    LeaseDecision, LostReason, Observation, decide, leader_outcome, next_look, observe,
};
use baton_core::lease::record::{claimed, holder_of, record_of, released};

/// How many conditional writes a release tries before giving up to a changing Lease.
const RELEASE_ATTEMPTS: usize = 3;

pub(super) async fn run<S: LeaseStore>(elector: LeaderElector<S>, shutdown: CancellationToken) {
    info!(
        identity = %elector.identity,
        namespace = elector.store.namespace(),
        lease = elector.store.name(),
        duration = ?elector.timing.duration,
        renew_deadline = ?elector.timing.renew_deadline,
        "campaigning for leadership"
    );
    Campaign {
        elector,
        shutdown,
        observation: Observation::Unknown,
        lease: None,
        own_write_is_latest: false,
        write_uncertain: false,
        leading: None,
        terms: 0,
        standing_by_for: None,
    }
    .run()
    .await
}

/// The leadership currently held.
#[derive(Debug, Clone, Copy)]
struct Leading {
    term: Term,
    since: Instant,
    until: Instant,
}

struct Campaign<S: LeaseStore> {
    elector: LeaderElector<S>,
    shutdown: CancellationToken,
    observation: Observation,
    /// The Lease as last read or written: the base (and resourceVersion) of the next write.
    lease: Option<Lease>,
    /// `lease` is what our own last write returned, so the next renewal needs no read.
    own_write_is_latest: bool,
    /// A write may have been applied without us hearing back (timeout, shutdown).
    write_uncertain: bool,
    leading: Option<Leading>,
    /// Terms led so far: the next one is numbered one more.
    terms: u64,
    /// The holder last logged while standing by, to log changes only.
    standing_by_for: Option<Option<String>>,
}

impl<S: LeaseStore> Campaign<S> {
    async fn run(mut self) {
        loop {
            if self.shutdown.is_cancelled() {
                self.shut_down().await;
                return;
            }
            if self
                .leading
                .is_some_and(|leading| Instant::now() >= leading.until)
            {
                self.lose(LostReason::RenewDeadline(
                    self.elector.timing.renew_deadline,
                ));
            }
            if !self.own_write_is_latest {
                match self.call("reading", self.elector.store.get()).await {
                    Some(Ok(lease)) => {
                        let record = lease.as_ref().map(record_of);
                        self.observation = observe(&self.observation, record, Instant::now());
                        self.lease = lease;
                    }
                    None => continue,
                    Some(Err(error)) => {
                        self.call_failed(&error);
                        self.pause().await;
                        continue;
                    }
                }
            }
            self.own_write_is_latest = false;

            let now = Instant::now();
            let decision = decide(
                &self.observation,
                &self.elector.identity,
                now,
                &self.elector.timing,
            );
            if self.leading.is_some()
                && let Err(reason) = leader_outcome(&decision)
            {
                // Stop acting first; the next round decides afresh as a candidate.
                self.lose(reason);
                continue;
            }
            match decision {
                LeaseDecision::Read => {}
                LeaseDecision::Wait { holder, free_at } => {
                    if self.standing_by_for.as_ref() != Some(&holder) {
                        info!(
                            identity = %self.elector.identity,
                            holder = holder.as_deref().unwrap_or("<lease deleted>"),
                            "standing by: the lease is held by another replica, or its last holder may still be acting"
                        );
                        self.elector.status.send_modify(|status| {
                            status.seen_holder.clone_from(&holder);
                        });
                        self.standing_by_for = Some(holder);
                    }
                    self.sleep_until(next_look(now, free_at, &self.elector.timing))
                        .await;
                }
                LeaseDecision::Create | LeaseDecision::Renew | LeaseDecision::Acquire(_) => {
                    self.write(decision).await;
                }
            }
        }
    }

    /// Creates, renews or takes over the Lease with one conditional write.
    async fn write(&mut self, decision: LeaseDecision) {
        let store = &self.elector.store;
        let base = match decision {
            LeaseDecision::Create => None,
            _ => self.lease.as_ref(),
        };
        let desired = claimed(
            base,
            store.namespace(),
            store.name(),
            &self.elector.identity,
            Timestamp::now(),
            self.elector.timing.duration_seconds(),
        );
        let sent = Instant::now();
        let result = match decision {
            LeaseDecision::Create => self.call("creating", store.create(&desired)).await,
            _ => self.call("replacing", store.replace(&desired)).await,
        };
        match result {
            Some(Ok(written)) => {
                let now = Instant::now();
                if self.leading.is_some_and(|leading| now >= leading.until) {
                    // Too late for this term; the next round may start a new one.
                    self.lose(LostReason::RenewDeadline(
                        self.elector.timing.renew_deadline,
                    ));
                    return;
                }
                self.observation = observe(&self.observation, Some(record_of(&written)), now);
                self.lease = Some(written);
                self.own_write_is_latest = true;
                self.write_uncertain = false;
                let until = self.elector.timing.leading_until(sent);
                if now < until {
                    self.lead(sent, until, &decision);
                } else {
                    warn!(
                        identity = %self.elector.identity,
                        took = ?now - sent,
                        "the lease write succeeded too late to act on it; trying again"
                    );
                }
                self.sleep_until(sent + self.elector.timing.retry_period)
                    .await;
            }
            Some(Err(error @ (Error::LeaseConflict { .. } | Error::LeaseNotFound { .. }))) => {
                debug!(identity = %self.elector.identity, %error, "lease changed under us; reading it again");
            }
            None => self.write_uncertain = true,
            Some(Err(error)) => {
                self.write_uncertain = true;
                self.call_failed(&error);
                self.pause().await;
            }
        }
    }

    /// Records a successful write: a new term starts, or the current one's deadline moves on.
    fn lead(&mut self, sent: Instant, until: Instant, decision: &LeaseDecision) {
        if let Some(leading) = &mut self.leading {
            leading.until = until;
            let (term, since) = (leading.term, leading.since);
            self.elector.status.send_modify(|status| {
                status.phase = LeadershipPhase::Leader {
                    term,
                    since,
                    renewed: sent,
                    until,
                };
            });
            return;
        }
        self.terms += 1;
        let term = Term(self.terms);
        let mut since = sent;
        // The start is taken under the channel's write lock: no reader can see `Leader` before it.
        self.elector.status.send_modify(|status| {
            since = Instant::now();
            status.phase = LeadershipPhase::Leader {
                term,
                since,
                renewed: sent,
                until,
            };
        });
        self.leading = Some(Leading { term, since, until });
        self.standing_by_for = None;
        if let Some(metrics) = &self.elector.metrics {
            metrics.leader.set(1);
            metrics.terms.inc();
        }
        let transitions = self
            .lease
            .as_ref()
            .and_then(|lease| lease.spec.as_ref()?.lease_transitions);
        info!(
            identity = %self.elector.identity,
            lease = self.elector.store.name(),
            how = ?decision,
            transitions,
            term = term.0,
            "became leader"
        );
    }

    /// Ends the current term (if any) and moves to `phase`, publishing when it was led.
    fn end(&mut self, reason: EndReason, phase: LeadershipPhase) -> Option<Span> {
        self.leading = None;
        let mut led = None;
        // The end is taken under the write lock: no reader answers `true` after it.
        self.elector.status.send_modify(|status| {
            led = status.end_term(reason, Instant::now(), phase);
        });
        if let Some(metrics) = &self.elector.metrics {
            metrics.leader.set(0);
        }
        led
    }

    /// Ends the term: every action stops now. The elector stays a candidate, and the next write
    /// is preceded by a fresh read.
    fn lose(&mut self, reason: LostReason) {
        let term = self.leading.map(|leading| leading.term);
        let led = self.end(EndReason::Lost(reason.clone()), LeadershipPhase::Standby);
        self.own_write_is_latest = false;
        self.standing_by_for = None;
        error!(
            identity = %self.elector.identity,
            lease = self.elector.store.name(),
            %reason,
            term = term.map(|term| term.0),
            led_for = ?led.map(|span| span.to - span.from),
            "lost the leadership: every action stops now; campaigning again"
        );
    }

    /// Stops acting first, then releases a Lease we may hold so a standby takes over at once.
    async fn shut_down(&mut self) {
        let led = self.end(
            EndReason::Shutdown,
            LeadershipPhase::Ended(EndReason::Shutdown),
        );
        let me = self.elector.identity.as_str();
        let maybe_holding = led.is_some()
            || self.write_uncertain
            || self.lease.as_ref().and_then(holder_of) == Some(me);
        if !maybe_holding {
            info!(identity = %me, "stopped standing by");
            return;
        }
        let timeout = self.elector.request_timeout;
        match bounded(timeout, "releasing the lease", self.release()).await {
            Ok(Ok(true)) => info!(identity = %me, "released the lease for a standby"),
            Ok(Ok(false)) => info!(identity = %me, "stopped; the lease was not ours to release"),
            Ok(Err(error)) => {
                warn!(identity = %me, %error, "could not release the lease; a standby takes over when it expires");
            }
            Err(error) => {
                warn!(identity = %me, %error, "could not release the lease; a standby takes over when it expires");
            }
        }
    }

    /// Clears the holder with a conditional write, re-reading on conflicts. `Ok(false)` when the
    /// Lease is not (or no longer) ours.
    async fn release(&self) -> Result<bool, Error> {
        let me = self.elector.identity.as_str();
        let store = &self.elector.store;
        let mut known = self
            .lease
            .clone()
            .filter(|lease| holder_of(lease) == Some(me));
        for _ in 0..RELEASE_ATTEMPTS {
            let lease = match known.take() {
                Some(lease) => lease,
                None => match store.get().await? {
                    Some(lease) if holder_of(&lease) == Some(me) => lease,
                    _ => return Ok(false),
                },
            };
            match store.replace(&released(&lease, Timestamp::now())).await {
                Ok(_) => return Ok(true),
                Err(Error::LeaseConflict { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(false)
    }

    /// One lease call, bounded by the request timeout and, while leading, by the renew deadline;
    /// shutdown interrupts it (`None`: nothing is known of it).
    async fn call<T>(
        &self,
        action: &'static str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Option<Result<T, Error>> {
        let mut timeout = self.elector.request_timeout;
        if let Some(leading) = &self.leading {
            timeout = timeout.min(leading.until.saturating_duration_since(Instant::now()));
        }
        let what = format!(
            "{action} lease {}/{}",
            self.elector.store.namespace(),
            self.elector.store.name()
        );
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => None,
            result = bounded(timeout, what, call) => Some(result.map_err(Error::from).and_then(|answer| answer)),
        }
    }

    /// The one place a failed Lease call is counted.
    fn call_failed(&self, error: &Error) {
        if let Some(metrics) = &self.elector.metrics {
            metrics.call_errors.inc();
            if let Some(failures) = &metrics.failures {
                failures.count(error);
            }
        }
        warn!(
            identity = %self.elector.identity,
            leading = self.leading.is_some(),
            %error,
            "lease call failed; trying again"
        );
    }

    /// Waits a retry period (never past the renew deadline) or until shutdown.
    async fn pause(&self) {
        self.sleep_until(Instant::now() + self.elector.timing.retry_period)
            .await;
    }

    /// Sleeps until `at`, waking early at the renew deadline or on shutdown.
    async fn sleep_until(&self, at: Instant) {
        let at = match &self.leading {
            Some(leading) => at.min(leading.until),
            None => at,
        };
        tokio::select! {
            () = self.shutdown.cancelled() => {}
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use baton_config::LeaseConfig;
    use prometheus::Registry;

    use super::*;
    use crate::leader::LeaderMetrics;
    use crate::runner::recorded::{self, Reply};

    #[tokio::test(start_paused = true)]
    async fn a_failed_lease_read_is_counted_under_lease_call_and_nothing_else() {
        // Given an API server that fails every Lease call, and a candidate counting its
        // failures,
        baton_shared::crypto::install_default_provider();
        let (asked, mut asks) = tokio::sync::mpsc::unbounded_channel();
        let (client, recorded) = recorded::api("baton", move |_, _| {
            let _ = asked.send(());
            Reply::Status(500)
        });
        let registry = Registry::new();
        let failures = crate::error::register_failures(&registry).expect("registers");
        let metrics = LeaderMetrics::register(&registry).expect("registers");
        let elector = LeaderElector::new(
            client,
            "baton",
            &LeaseConfig::default(),
            "me",
            Duration::from_secs(1),
        )
        .with_metrics(metrics.counting_failures_in(failures.clone()));
        let shutdown = CancellationToken::new();
        let campaign = tokio::spawn(elector.run(shutdown.clone()));

        // when its first read has failed and it reads again (after counting the failure),
        asks.recv().await.expect("a first read");
        asks.recv().await.expect("a read again");
        shutdown.cancel();
        campaign.await.expect("the campaign ends at shutdown");

        // then each failed read was counted under lease_call (but the last one, which shutdown
        // may have cut short), and under no other label.
        let reads = recorded
            .requests()
            .iter()
            .filter(|request| request.starts_with("GET "))
            .count() as u64;
        let counted = |label: &str| failures.counter().with_label_values(&[label]).get();
        assert!(counted("lease_call") >= 1, "the first read's failure");
        assert!(
            (reads - 1..=reads).contains(&counted("lease_call")),
            "one count per failed read: {} for {reads}",
            counted("lease_call")
        );
        let total: u64 = crate::error::METRIC_LABELS.iter().map(|l| counted(l)).sum();
        assert_eq!(total, counted("lease_call"));
    }
}
