//! What the elector tells the rest of the process: a [`Leadership`] handle answering "may I act
//! right now?" without waiting, and events to await.

use std::time::Instant;

use tokio::sync::watch;

use super::decide::LostReason;

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

/// Where an elector stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Not leading (yet): someone else holds the Lease, or it is not known yet.
    Standby,
    /// Leading since `since`. `renewed` is when the last successful write was sent; the
    /// leadership is void from `until` on unless a later renewal moves it.
    Leader {
        since: Instant,
        renewed: Instant,
        until: Instant,
    },
    /// Done for good; `led` is when it was leader, if it was.
    Ended {
        reason: EndReason,
        led: Option<Span>,
    },
}

/// Why an elector ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReason {
    /// Asked to stop; a held Lease was released.
    Shutdown,
    /// Leadership was lost (or could not be kept): the caller must stop acting.
    Lost(LostReason),
}

impl Status {
    /// Whether this status lets its holder act at `now`.
    pub fn is_leader_at(&self, now: Instant) -> bool {
        matches!(self, Status::Leader { until, .. } if now < *until)
    }

    /// The span during which this elector has answered, or can still answer, `is_leader() ==
    /// true` (an upper bound while it leads: a renewal may extend it).
    pub fn led(&self) -> Option<Span> {
        match self {
            Status::Standby => None,
            Status::Leader { since, until, .. } => Some(Span {
                from: *since,
                to: *until,
            }),
            Status::Ended { led, .. } => *led,
        }
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
        if self.status.has_changed().is_err() {
            return false;
        }
        self.status.borrow().is_leader_at(Instant::now())
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// Waits until this elector leads; `Err` with the final status if it ended first.
    pub async fn acquired(&self) -> Result<(), Status> {
        let mut status = self.status.clone();
        let outcome = status
            .wait_for(|status| !matches!(status, Status::Standby))
            .await
            .map(|status| status.clone());
        match outcome {
            Ok(Status::Leader { .. }) => Ok(()),
            Ok(ended) => Err(ended),
            Err(_) => Err(Status::Ended {
                reason: EndReason::Lost(LostReason::ElectorGone),
                led: None,
            }),
        }
    }

    /// Resolves when this elector can no longer lead, other than by an orderly shutdown: it
    /// lost the Lease, or its task ended or was aborted. Never resolves after a shutdown.
    pub async fn lost(&self) -> LostReason {
        let mut status = self.status.clone();
        let ended = status
            .wait_for(|status| matches!(status, Status::Ended { .. }))
            .await
            .map(|status| status.clone());
        match ended {
            Ok(Status::Ended {
                reason: EndReason::Lost(reason),
                ..
            }) => reason,
            Ok(_) => std::future::pending().await,
            Err(_) => LostReason::ElectorGone,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn is_leader_turns_false_at_the_deadline_by_itself() {
        let now = Instant::now();
        let leader = Status::Leader {
            since: now,
            renewed: now,
            until: now + Duration::from_millis(10),
        };
        assert!(leader.is_leader_at(now));
        assert!(leader.is_leader_at(now + Duration::from_millis(9)));
        assert!(!leader.is_leader_at(now + Duration::from_millis(10)));
        assert!(!Status::Standby.is_leader_at(now));
    }

    #[tokio::test]
    async fn a_gone_elector_is_not_leader_and_counts_as_lost() {
        let now = Instant::now();
        let (sender, receiver) = watch::channel(Status::Leader {
            since: now,
            renewed: now,
            until: now + Duration::from_secs(60),
        });
        let leadership = Leadership::new(receiver);
        assert!(leadership.is_leader());
        drop(sender);
        assert!(!leadership.is_leader());
        assert_eq!(leadership.lost().await, LostReason::ElectorGone);
    }

    #[tokio::test]
    async fn lost_reports_the_reason_and_acquired_the_end() {
        let (sender, receiver) = watch::channel(Status::Standby);
        let leadership = Leadership::new(receiver);
        let waiting = tokio::spawn({
            let leadership = leadership.clone();
            async move { leadership.lost().await }
        });
        sender.send_replace(Status::Ended {
            reason: EndReason::Lost(LostReason::Deleted),
            led: None,
        });
        assert_eq!(waiting.await.unwrap(), LostReason::Deleted);
        assert!(leadership.acquired().await.is_err());
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
