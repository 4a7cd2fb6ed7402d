//! The pure part of leader election: what a candidate does next, given what it has observed of
//! the Lease and when, on its own monotonic clock.
//!
//! Wall-clock times written in the Lease (`renewTime`, `acquireTime`) are never compared with
//! this process's clock: a standby only trusts how long it has itself seen one resourceVersion
//! unchanged, so clock skew between nodes cannot make two leaders.

use std::time::{Duration, Instant};

/// The election's timing, from `controller.lease` (validated: retry < renew deadline < duration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long the Lease stays valid after a renewal, for others.
    pub duration: Duration,
    /// The leader stops acting when its last successful renewal is this old.
    pub renew_deadline: Duration,
    /// Pause between renewals, and between a standby's looks at the Lease.
    pub retry_period: Duration,
}

impl LeaseTiming {
    /// `leaseDurationSeconds` to write: whole seconds rounded up, so a standby reading it never
    /// waits less than `duration`.
    pub fn duration_seconds(&self) -> i32 {
        let mut seconds = self.duration.as_secs();
        if self.duration.subsec_nanos() > 0 {
            seconds += 1;
        }
        i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
    }

    /// Until when a leader may act after a renewal it sent at `sent` succeeded.
    ///
    /// Counted from the sending, not the answer: the write can only have been applied after it
    /// was sent, so a standby's observation of it starts later still.
    pub fn leading_until(&self, sent: Instant) -> Instant {
        sent + self.renew_deadline
    }
}

/// The fields of a Lease the decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `metadata.resourceVersion`: changes with every write, so it tells "renewed" apart from
    /// "unchanged" without reading anyone's clock.
    pub resource_version: String,
    /// `spec.holderIdentity`, `None` when absent or empty (released).
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds` as the holder wrote it, `None` when absent or not positive.
    pub duration: Option<Duration>,
}

/// What a candidate knows of the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// Not read yet.
    Unknown,
    /// The Lease did not exist at every read since `since`. `last_holder` is who held it when
    /// this candidate last saw it, `None` if it never saw it held (a fresh install).
    Absent {
        since: Instant,
        last_holder: Option<String>,
    },
    /// The Lease had this version at every read since `since` (our monotonic clock).
    Present { record: LeaseRecord, since: Instant },
}

/// Folds a fresh read into the observation: the `since` of an unchanged version (or of a
/// continued absence) is kept, anything new starts now.
pub fn observe(previous: &Observation, read: Option<LeaseRecord>, now: Instant) -> Observation {
    match (previous, read) {
        (absent @ Observation::Absent { .. }, None) => absent.clone(),
        (Observation::Present { record, .. }, None) => Observation::Absent {
            since: now,
            last_holder: record.holder.clone(),
        },
        (Observation::Unknown, None) => Observation::Absent {
            since: now,
            last_holder: None,
        },
        (Observation::Present { record, since }, Some(read))
            if record.resource_version == read.resource_version =>
        {
            Observation::Present {
                record: read,
                since: *since,
            }
        }
        (_, Some(read)) => Observation::Present {
            record: read,
            since: now,
        },
    }
}

/// Why a standby may take the Lease over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireReason {
    /// Its holder released it (empty `holderIdentity`).
    Released,
    /// This version went unchanged for a whole lease duration of our own observation.
    Expired { holder: String },
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseDecision {
    /// Nothing known yet: read the Lease.
    Read,
    /// The Lease does not exist and nobody else can still be acting on it: create it, holding
    /// it (the API server lets only one create succeed).
    Create,
    /// The Lease is ours: renew it, conditional on the version we know.
    Renew,
    /// Take it over, conditional on the version we observed.
    Acquire(AcquireReason),
    /// Someone else holds it (or its absence is recent): look again, at the latest at `free_at`
    /// when, by our own observation, it would be free.
    Wait {
        holder: Option<String>,
        free_at: Instant,
    },
}

/// The election rule.
///
/// An absent Lease is created at once, as client-go does: the create is atomic (the loser gets
/// AlreadyExists), so a fresh install leads without waiting. Only a Lease this candidate saw
/// held by *another* replica and then gone waits a lease duration of observed absence: that
/// holder may still be acting for up to its renew deadline. (A candidate that never saw the
/// Lease cannot tell a deleted one from one never created: deleting the Lease under a running
/// leader can give two leaders until that leader's next renewal finds it gone, as in client-go.)
///
/// A Lease that names this candidate is renewed whether or not it is leading now: after an
/// outage longer than the renew deadline, the replica whose name is still in the Lease resumes
/// at its first successful read, with a write conditional on the version it holds. Nobody else
/// can have led meanwhile without changing that version.
pub fn decide(
    observation: &Observation,
    me: &str,
    now: Instant,
    timing: &LeaseTiming,
) -> LeaseDecision {
    match observation {
        Observation::Unknown => LeaseDecision::Read,
        Observation::Absent { since, last_holder } => match last_holder.as_deref() {
            Some(holder) if holder != me => {
                let free_at = *since + timing.duration;
                if now >= free_at {
                    LeaseDecision::Create
                } else {
                    LeaseDecision::Wait {
                        holder: None,
                        free_at,
                    }
                }
            }
            _ => LeaseDecision::Create,
        },
        Observation::Present { record, since } => match record.holder.as_deref() {
            Some(holder) if holder == me => LeaseDecision::Renew,
            None => LeaseDecision::Acquire(AcquireReason::Released),
            Some(holder) => {
                let free_at = *since + record.duration.unwrap_or(timing.duration);
                if now >= free_at {
                    LeaseDecision::Acquire(AcquireReason::Expired {
                        holder: holder.to_owned(),
                    })
                } else {
                    LeaseDecision::Wait {
                        holder: Some(holder.to_owned()),
                        free_at,
                    }
                }
            }
        },
    }
}

/// Why a leader must stop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// No renewal succeeded within the renew deadline.
    #[error("no renewal succeeded within the renew deadline of {0:?}")]
    RenewDeadline(Duration),
    /// Someone else's name is in the Lease.
    #[error("the lease is now held by {0}")]
    TakenBy(String),
    /// Someone else cleared the holder.
    #[error("the lease was released by someone else")]
    ReleasedByOther,
    /// The Lease was deleted.
    #[error("the lease was deleted")]
    Deleted,
    /// The elector stopped without saying why (its task ended or was aborted).
    #[error("the leader elector stopped")]
    ElectorGone,
}

/// Whether a leader that reaches `decision` keeps leading, and if not why: only a Lease that is
/// still its own lets it go on.
pub fn leader_outcome(decision: &LeaseDecision) -> Result<(), LostReason> {
    match decision {
        LeaseDecision::Read | LeaseDecision::Renew => Ok(()),
        LeaseDecision::Create | LeaseDecision::Wait { holder: None, .. } => {
            Err(LostReason::Deleted)
        }
        LeaseDecision::Acquire(AcquireReason::Released) => Err(LostReason::ReleasedByOther),
        LeaseDecision::Wait {
            holder: Some(holder),
            ..
        }
        | LeaseDecision::Acquire(AcquireReason::Expired { holder }) => {
            Err(LostReason::TakenBy(holder.clone()))
        }
    }
}

/// When a standby looks at the Lease again: after a retry period, or as soon as the Lease
/// would be free by its observation.
pub fn next_look(now: Instant, free_at: Instant, timing: &LeaseTiming) -> Instant {
    (now + timing.retry_period).min(free_at)
}

#[cfg(test)]
mod tests;
