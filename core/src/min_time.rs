//! The min-time between zones' downscales: one rule, so that the two places that hold a zone's
//! downscale back (the prepare-downscale webhook, judging a downscale someone asked for, and
//! the scaling plan, deciding a follower's own) cannot drift apart.
//!
//! The rule: a zone may go down only once every other zone's last downscale is at least a
//! min-time in the past; when several are too recent, the one that frees the zone last is the
//! one to name (its wait is the wait left).
//!
//! The two uses differ in **whose** min-time separates two downscales, and the difference is
//! kept, not smoothed over (each is what its users were promised):
//! - prepare-downscale ([`Whose::EachDownscaledZone`], the Go operator's rule): each other zone
//!   that was downscaled is held to **its own** min-time (its `grafana.com/min-time-between-zones-downscale`).
//!   A zone without one holds nobody back, whatever the zone going down says; the min-time of
//!   the zone going down is not read.
//! - the scaling plan ([`Whose::ZoneGoingDown`]): the follower going down is held to **its
//!   own** min-time after every other zone's downscale, which comes to the newest of them. A
//!   follower without one does not scale down at all (the plan says so before asking this
//!   rule); the other zones' min-times are not read.
//!
//! What both do alike, and this rule does once: which zones count (all but the one going
//! down), when a wait is over (strictly after `last downscale + min-time`), which blocker is
//! named (the latest end of wait, the first in the callers' order on a tie: with one min-time
//! for all, that is the newest downscale), and that a record that cannot be read stops the
//! judgement at the first one met in that order, even where another zone already blocks
//! (callers word the error: a refusal, or a problem on the follower).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// Whose min-time separates a zone's downscale from another zone's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// Each downscaled zone's own ([`Downscaled::its_min_time`]): prepare-downscale's rule.
    EachDownscaledZone,
    /// The zone going down's, for every other zone's downscale: the scaling plan's rule.
    ZoneGoingDown(Duration),
}

/// Another zone's last downscale, with what the caller wants back about it (`zone`: a name,
/// or the record and how its min-time is written, for a message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downscaled<T> {
    pub zone: T,
    pub at: Timestamp,
    /// Its own min-time; `None` when it has none. Read only under [`Whose::EachDownscaledZone`].
    pub its_min_time: Option<Duration>,
}

/// The downscale that holds the zone back, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocker<T> {
    pub zone: T,
    pub at: Timestamp,
    /// The min-time it is held to.
    pub min_time: Duration,
    /// The first instant the zone may go down (`at + min_time`, at the latest representable
    /// time if that is beyond it).
    pub until: Timestamp,
}

impl<T> Blocker<T> {
    /// The wait left at `now` (positive: it blocks at `now`).
    pub fn left(&self, now: Timestamp) -> SignedDuration {
        self.until.duration_since(now)
    }

    /// The min-time in nanoseconds as Go formats durations (saturated; parsed min-times are
    /// Go durations and always fit).
    pub fn min_time_nanos(&self) -> i64 {
        i64::try_from(self.min_time.as_nanos()).unwrap_or(i64::MAX)
    }
}

/// Judges the zone going down against the other zones' last downscales, in the callers'
/// order: `Ok(None)` when it may go at `now`, the [`Blocker`] that holds it back the longest
/// otherwise, and the first unreadable record (`Err`) as soon as it is met. An item is
/// `Ok(None)` for a zone never downscaled (or that the caller leaves out).
pub fn blocker<T, E>(
    others: impl IntoIterator<Item = Result<Option<Downscaled<T>>, E>>,
    whose: Whose,
    now: Timestamp,
) -> Result<Option<Blocker<T>>, E> {
    let mut longest: Option<Blocker<T>> = None;
    for other in others {
        let Some(other) = other? else {
            continue;
        };
        let min_time = match whose {
            Whose::ZoneGoingDown(min_time) => min_time,
            Whose::EachDownscaledZone => match other.its_min_time {
                Some(min_time) => min_time,
                None => continue,
            },
        };
        let until = other
            .at
            .checked_add(SignedDuration::try_from(min_time).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MAX);
        if now < until && longest.as_ref().is_none_or(|longest| until > longest.until) {
            longest = Some(Blocker {
                zone: other.zone,
                at: other.at,
                min_time,
                until,
            });
        }
    }
    Ok(longest)
}

#[cfg(test)]
mod tests;
