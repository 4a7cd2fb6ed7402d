//! What the elector tells the rest of the process: a [`Leadership`] handle answering "may I act
//! right now, and in which term?" without waiting, and events to await.
//!
//! # Terms
//! An elector that loses the Lease does not end: it campaigns again and may lead again later.
//! Each stretch of leadership is a numbered [`Term`] (1, 2, … per elector). Work that started
//! under one term checks [`Leadership::is_leader_in`] with *that* term before every write, so a
//! reconcile planned before an outage cannot carry on after the same replica wins the Lease
//! back: it stops, and the new term starts from a fresh read.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use baton_core::lease::decide::LostReason;

/// How many ended terms a [`Status`] remembers (the oldest are dropped first). A term only ends
/// by an outage, a takeover or a shutdown, so this is hours of history in the worst case.
pub const PAST_TERMS_KEPT: usize = 32;

/// A stretch of monotonic time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub from: Instant,
    pub to: Instant,
}

impl Span {
    /// Whether the two half-open spans `[from, to)` share a moment.
    pub fn overlaps(&self, other: &Span) -> bool {
        self.from < other.to && other.from < self.to
    }
}

/// The number of one stretch of leadership of one elector: 1 for its first, then one more each
/// time it wins the Lease again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Term(pub u64);

impl std::fmt::Display for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "term {}", self.0)
    }
}

/// A term that is over: when it was led and why it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastTerm {
    pub term: Term,
    pub led: Span,
    pub end: EndReason,
}

/// Where an elector stands now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeadershipPhase {
    /// Campaigning: someone else holds the Lease, it is not known yet, or the API server cannot
    /// be reached.
    Standby,
    /// Leading in `term` since `since`. `renewed` is when the last successful write was sent;
    /// the leadership is void from `until` on unless a later renewal moves it.
    Leader {
        term: Term,
        since: Instant,
        renewed: Instant,
        until: Instant,
    },
    /// Done for good (shut down, or the elector task is gone).
    Ended(EndReason),
}

/// Where an elector stands, and the terms it led before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub phase: LeadershipPhase,
    /// Ended terms, oldest first (at most [`PAST_TERMS_KEPT`]).
    pub past: Vec<PastTerm>,
    /// The Lease's holder as a standby last read it (`None`: none seen, or the Lease was
    /// released or deleted): who leads, for the status page, without a read of its own.
    pub seen_holder: Option<String>,
}

/// Why a term (or the elector) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReason {
    /// Asked to stop; a held Lease was released.
    Shutdown,
    /// Leadership was lost (or could not be kept): every action stops; the elector campaigns
    /// again.
    Lost(LostReason),
}

impl Status {
    /// A new elector's status.
    pub fn standby() -> Self {
        Self {
            phase: LeadershipPhase::Standby,
            past: Vec::new(),
            seen_holder: None,
        }
    }

    /// Whether this status lets its holder act at `now`.
    pub fn is_leader_at(&self, now: Instant) -> bool {
        matches!(self.phase, LeadershipPhase::Leader { until, .. } if now < until)
    }

    /// How long from `now` its holder may still act in `term`: `None` outside it.
    pub fn time_left_in(&self, term: Term, now: Instant) -> Option<Duration> {
        match self.phase {
            LeadershipPhase::Leader {
                term: current,
                until,
                ..
            } if current == term && now < until => Some(until - now),
            _ => None,
        }
    }

    /// The term led now (by the status; [`Leadership::term`] also checks the deadline).
    pub fn term(&self) -> Option<Term> {
        match self.phase {
            LeadershipPhase::Leader { term, .. } => Some(term),
            _ => None,
        }
    }

    /// The last term this elector started, ended or not.
    pub fn latest_term(&self) -> Option<Term> {
        self.term()
            .or_else(|| self.past.last().map(|past| past.term))
    }

    /// Every span during which this elector answered, or can still answer, `is_leader() ==
    /// true`, oldest first (the current one is an upper bound: a renewal may extend it).
    pub fn led(&self) -> Vec<Span> {
        let mut spans: Vec<Span> = self.past.iter().map(|past| past.led).collect();
        if let LeadershipPhase::Leader { since, until, .. } = self.phase {
            spans.push(Span {
                from: since,
                to: until,
            });
        }
        spans
    }

    /// How `term` ended, if it did and is still remembered.
    pub fn end_of(&self, term: Term) -> Option<&EndReason> {
        self.past
            .iter()
            .find(|past| past.term == term)
            .map(|past| &past.end)
    }

    /// Records the end of the current term (if leading) and moves to `phase`; returns the span
    /// that was led.
    pub(super) fn end_term(
        &mut self,
        end: EndReason,
        now: Instant,
        phase: LeadershipPhase,
    ) -> Option<Span> {
        let ended = match self.phase {
            LeadershipPhase::Leader {
                term, since, until, ..
            } => {
                let led = Span {
                    from: since,
                    to: now.min(until),
                };
                if self.past.len() >= PAST_TERMS_KEPT {
                    self.past.remove(0);
                }
                self.past.push(PastTerm { term, led, end });
                Some(led)
            }
            _ => None,
        };
        self.phase = phase;
        ended
    }
}

/// A cheap, clonable view of one elector's leadership.
#[derive(Debug, Clone)]
pub struct Leadership {
    status: watch::Receiver<Status>,
}

impl Leadership {
    pub(super) fn new(status: watch::Receiver<Status>) -> Self {
        Self { status }
    }

    /// May the caller act right now? Checks the renew deadline itself, so the answer turns
    /// false on time even if the elector task is stuck, and at once if that task is gone.
    pub fn is_leader(&self) -> bool {
        self.term().is_some()
    }

    /// The term this replica leads in right now, `None` when it may not act.
    pub fn term(&self) -> Option<Term> {
        if self.status.has_changed().is_err() {
            return None;
        }
        let status = self.status.borrow();
        if status.is_leader_at(Instant::now()) {
            status.term()
        } else {
            None
        }
    }

    /// May work started in `term` go on? Only while that same term lasts: once it ended, a
    /// later term of this replica does not count.
    pub fn is_leader_in(&self, term: Term) -> bool {
        self.time_left_in(term).is_some()
    }

    /// How long work started in `term` may still act (see [`Status::time_left_in`]).
    pub fn time_left_in(&self, term: Term) -> Option<Duration> {
        if self.status.has_changed().is_err() {
            return None;
        }
        self.status.borrow().time_left_in(term, Instant::now())
    }

    /// The Lease's holder as this replica last read it while standing by.
    pub fn seen_holder(&self) -> Option<String> {
        self.status.borrow().seen_holder.clone()
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// Waits until this elector leads; `Err` with the final status if it ended first.
    pub async fn acquired(&self) -> Result<Term, Status> {
        self.acquired_after(None).await
    }

    /// Waits until this elector leads in a term after `after` (any term for `None`): how a task
    /// learns that leadership was (re)gained. `Err` with the final status if it ended first.
    pub async fn acquired_after(&self, after: Option<Term>) -> Result<Term, Status> {
        let mut status = self.status.clone();
        let outcome = status
            .wait_for(|status| match &status.phase {
                LeadershipPhase::Leader { term, .. } => Some(*term) > after,
                LeadershipPhase::Ended(_) => true,
                LeadershipPhase::Standby => false,
            })
            .await
            .map(|status| status.clone());
        match outcome {
            Ok(Status {
                phase: LeadershipPhase::Leader { term, .. },
                ..
            }) => Ok(term),
            Ok(ended) => Err(ended),
            Err(_) => Err(Status {
                phase: LeadershipPhase::Ended(EndReason::Lost(LostReason::ElectorGone)),
                past: Vec::new(),
                seen_holder: None,
            }),
        }
    }

    /// Resolves when `term` (one this elector leads or led) is over, with why; at once for a
    /// term that is not the current one.
    pub async fn term_ended(&self, term: Term) -> EndReason {
        let mut status = self.status.clone();
        let ended = status
            .wait_for(|status| status.term() != Some(term))
            .await
            .map(|status| status.clone());
        match ended {
            Ok(status) => match (status.end_of(term), &status.phase) {
                (Some(end), _) => end.clone(),
                (None, LeadershipPhase::Ended(end)) => end.clone(),
                (None, _) => EndReason::Lost(LostReason::ElectorGone),
            },
            Err(_) => EndReason::Lost(LostReason::ElectorGone),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn leading(term: u64, since: Instant, until: Instant) -> Status {
        Status {
            phase: LeadershipPhase::Leader {
                term: Term(term),
                since,
                renewed: since,
                until,
            },
            past: Vec::new(),
            seen_holder: None,
        }
    }

    #[test]
    fn is_leader_turns_false_at_the_deadline_by_itself() {
        let now = Instant::now();
        let leader = leading(1, now, now + Duration::from_millis(10));
        assert!(leader.is_leader_at(now));
        assert!(leader.is_leader_at(now + Duration::from_millis(9)));
        assert!(!leader.is_leader_at(now + Duration::from_millis(10)));
        assert!(!Status::standby().is_leader_at(now));
    }

    /// What bounds an action: the time left in the term it started in, none in another term.
    #[test]
    fn the_time_left_is_the_terms_and_none_outside_it() {
        let now = Instant::now();
        let leader = leading(2, now, now + Duration::from_millis(10));
        assert_eq!(
            leader.time_left_in(Term(2), now + Duration::from_millis(4)),
            Some(Duration::from_millis(6))
        );
        assert_eq!(
            leader.time_left_in(Term(2), now + Duration::from_millis(10)),
            None
        );
        assert_eq!(leader.time_left_in(Term(1), now), None);
        assert_eq!(Status::standby().time_left_in(Term(2), now), None);
    }

    #[tokio::test]
    async fn a_gone_elector_is_not_leader_and_its_term_ended() {
        let now = Instant::now();
        let (sender, receiver) = watch::channel(leading(1, now, now + Duration::from_secs(60)));
        let leadership = Leadership::new(receiver);
        assert!(leadership.is_leader());
        assert_eq!(leadership.term(), Some(Term(1)));
        drop(sender);
        assert!(!leadership.is_leader());
        assert!(!leadership.is_leader_in(Term(1)));
        assert_eq!(
            leadership.term_ended(Term(1)).await,
            EndReason::Lost(LostReason::ElectorGone)
        );
    }

    #[tokio::test]
    async fn work_of_a_lost_term_stays_stopped_when_the_next_term_starts() {
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        let (sender, receiver) = watch::channel(leading(1, now, far));
        let leadership = Leadership::new(receiver);
        let first = leadership.acquired().await.unwrap();
        assert_eq!(first, Term(1));
        let ended = tokio::spawn({
            let leadership = leadership.clone();
            async move { leadership.term_ended(first).await }
        });
        let regained = tokio::spawn({
            let leadership = leadership.clone();
            async move { leadership.acquired_after(Some(first)).await }
        });

        // The term is lost (the API server went away), then won back.
        sender.send_modify(|status| {
            status.end_term(
                EndReason::Lost(LostReason::RenewDeadline(Duration::from_secs(2))),
                Instant::now(),
                LeadershipPhase::Standby,
            );
        });
        assert!(!leadership.is_leader_in(first));
        sender.send_modify(|status| {
            status.phase = LeadershipPhase::Leader {
                term: Term(2),
                since: Instant::now(),
                renewed: Instant::now(),
                until: far,
            }
        });

        assert_eq!(
            ended.await.unwrap(),
            EndReason::Lost(LostReason::RenewDeadline(Duration::from_secs(2)))
        );
        assert_eq!(regained.await.unwrap(), Ok(Term(2)));
        assert!(leadership.is_leader());
        assert!(
            !leadership.is_leader_in(first),
            "term 1's work stays stopped"
        );
        assert!(leadership.is_leader_in(Term(2)));
        let status = leadership.status();
        assert_eq!(status.led().len(), 2);
        assert_eq!(status.latest_term(), Some(Term(2)));
    }

    #[tokio::test]
    async fn acquired_reports_the_end_of_the_elector() {
        let (sender, receiver) = watch::channel(Status::standby());
        let leadership = Leadership::new(receiver);
        sender.send_replace(Status {
            phase: LeadershipPhase::Ended(EndReason::Shutdown),
            past: Vec::new(),
            seen_holder: None,
        });
        assert!(leadership.acquired().await.is_err());
    }

    #[test]
    fn only_the_most_recent_terms_are_remembered() {
        let now = Instant::now();
        let mut status = Status::standby();
        for term in 1..=(PAST_TERMS_KEPT as u64 + 5) {
            status.phase = LeadershipPhase::Leader {
                term: Term(term),
                since: now,
                renewed: now,
                until: now + Duration::from_secs(1),
            };
            status.end_term(EndReason::Shutdown, now, LeadershipPhase::Standby);
        }
        assert_eq!(status.past.len(), PAST_TERMS_KEPT);
        assert_eq!(status.past[0].term, Term(6));
        assert_eq!(status.latest_term(), Some(Term(PAST_TERMS_KEPT as u64 + 5)));
    }

    #[test]
    fn spans_overlap_only_when_they_share_a_moment() {
        let t = Instant::now();
        let span = |from: u64, to: u64| Span {
            from: t + Duration::from_millis(from),
            to: t + Duration::from_millis(to),
        };
        assert!(span(0, 10).overlaps(&span(5, 15)));
        assert!(span(5, 15).overlaps(&span(0, 10)));
        assert!(span(0, 10).overlaps(&span(2, 3)));
        assert!(!span(0, 10).overlaps(&span(10, 20)));
        assert!(!span(10, 20).overlaps(&span(0, 10)));
    }
}
