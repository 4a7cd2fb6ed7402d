//! The min-time between zones' downscales across member clusters, without a single arbiter
//! (docs/design/multi-cluster.md, "Downscales"): a downscale of a member is approved only once
//! its claim is in the downscale ledgers of a majority of the member clusters. Any two
//! majorities share a ledger, and a ledger accepts only one of two conflicting claims, so two
//! members are never both approved within a min-time; no cluster decides for the others, and
//! one member down of three still leaves a majority.
//!
//! This module is the rule alone, with no I/O: what a ledger as read accepts ([`judge`]), what
//! a withdrawal writes ([`withdrawn`]), and, from what each member's ledger answered so far,
//! whether to wait, approve or refuse, what to withdraw, and the refusal that names the
//! members that held the claim back or could not be reached ([`next`]). The webhook reads and
//! writes (each write conditioned on the resourceVersion judged), its own cluster's ledger
//! first, then every other member's at once ([`order`]), so that a member that never answers
//! holds back no other's answer: approved once a majority accepted, refused once every member
//! answered (or the deadline passed) without one.
//!
//! - **A claim** is `{at, minTime, request}` under the key
//!   `member_<cluster>_<statefulset>_<request>` in the group's ledger (`_` is in no cluster
//!   or StatefulSet name, so the key cannot be a StatefulSet's entry, and splits one way).
//!   Its min-time is the downscaled StatefulSet's own
//!   `grafana.com/min-time-between-zones-downscale` (none: zero), as inside one cluster each
//!   downscaled zone holds the others for its own min-time. One key per request: a claim
//!   never replaces another, not even one of the same member (an approved claim replaced by a
//!   later one would let a slow claim of another member slip into the window it held).
//! - **A claim lives for its request's deadline** (`lifetime`): a ledger judged later than
//!   that after the claim's time refuses it (stale). So every claim still being judged is
//!   recent, and a claim whose window ended more than [`KEEP`] ago can hold none of them
//!   back: it is dropped when a new claim is written, which keeps a ledger small.
//! - **Two claims conflict** when either falls within the other's min-time: judged both ways,
//!   so clocks that disagree between clusters cannot let a claim that is "earlier" by one
//!   clock slip under another's window.
//! - **An unreadable claim of another member holds every claim back** (fail closed), naming
//!   its key; a claim of the same member is replaced (a member does not hold itself back).
//! - **A member that cannot be reached counts against**: never for, and neither does one that
//!   has not answered. A downscale is approved once a majority accepted; without one it is
//!   refused once every member answered, a member silent at the deadline being unreachable.
//! - **A half-written claim that could not be withdrawn** (the webhook died, a member went
//!   away meanwhile) holds others back only for its own min-time, as a downscale that happened.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::clusters::majority;
use crate::duration::go as go_duration;
use crate::ledger::Ledger;

/// Where a member claim's key starts.
pub const CLAIM_PREFIX: &str = "member_";

/// How long after its window ended a claim is kept: far longer than any claim's lifetime, so
/// that clocks that disagree by less than this cannot drop a claim a live one is judged by.
pub const KEEP: Duration = Duration::from_secs(3600);

/// A downscale's claim, as it is written in each member's ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberClaim {
    /// RFC 3339 time of the claim.
    pub at: String,
    /// Its min-time, as a Go duration (`30m0s`).
    pub min_time: String,
    /// UID of the admission request that claimed it, so a withdrawal removes only its own.
    pub request: String,
}

impl MemberClaim {
    pub fn new(at: Timestamp, min_time: Duration, request: &str) -> Self {
        let nanos = i64::try_from(min_time.as_nanos()).unwrap_or(i64::MAX);
        Self {
            at: at.to_string(),
            min_time: go_duration::format(nanos),
            request: request.to_owned(),
        }
    }

    /// Its time and min-time; an unreadable one is an error saying which.
    pub fn window(&self) -> Result<(Timestamp, Duration), String> {
        let at = self
            .at
            .parse::<Timestamp>()
            .map_err(|error| format!("invalid time {:?}: {error}", self.at))?;
        let min_time = go_duration::parse(&self.min_time)
            .ok()
            .and_then(|nanos| u64::try_from(nanos).ok())
            .map(Duration::from_nanos)
            .ok_or_else(|| format!("invalid min-time {:?}", self.min_time))?;
        Ok((at, min_time))
    }
}

/// The end of a window: `at + min_time`, at the latest representable time beyond it.
fn end((at, min_time): (Timestamp, Duration)) -> Timestamp {
    at.checked_add(SignedDuration::try_from(min_time).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX)
}

/// Whether two claims' windows conflict: either starts within the other's min-time.
pub fn conflict(a: (Timestamp, Duration), b: (Timestamp, Duration)) -> bool {
    (b.0 <= a.0 && a.0 < end(b)) || (a.0 <= b.0 && b.0 < end(a))
}

/// The key of the claim of `cluster`'s `statefulset` by `request` (of the request's UID, only
/// what a key may hold, so an odd UID cannot make an invalid key).
pub fn key(cluster: &str, statefulset: &str, request: &str) -> String {
    let request: String = request
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    format!("{}{request}", member_prefix(cluster, statefulset))
}

/// Where the keys of every claim of `cluster`'s `statefulset` start.
fn member_prefix(cluster: &str, statefulset: &str) -> String {
    format!("{CLAIM_PREFIX}{cluster}_{statefulset}_")
}

/// The member a claim's key names, as people read it (`cluster/statefulset`); `None` for a key
/// that is not a claim's.
pub fn member_of(key: &str) -> Option<String> {
    let mut parts = key.strip_prefix(CLAIM_PREFIX)?.split('_');
    let (cluster, statefulset) = (parts.next()?, parts.next()?);
    Some(format!("{cluster}/{statefulset}"))
}

/// The prefix of a claim key up to its request: claims sharing it are the same member's.
fn same_member(key: &str) -> &str {
    key.rfind('_').map_or(key, |end| &key[..=end])
}

/// What one ledger, as read, says of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// It takes the claim: store this ledger, conditioned on the version read.
    Accepts(Ledger),
    /// Another member's claim (`member`, `cluster/statefulset`) is within the min-time: held
    /// until `until`, the end of that claim's window (the later of the two windows' ends).
    Held { member: String, until: Timestamp },
    /// Another member's claim cannot be read: held (fail closed) until it is removed.
    Unreadable { key: String, error: String },
    /// The claim is older than its lifetime: it is not written any more.
    Stale,
}

/// Judges the claim of `key` in `ledger` at `now`, the claim living for `lifetime`. Claims of
/// the same member do not hold it back; claims whose window ended more than [`KEEP`] before
/// `now` are dropped from what is written.
pub fn judge(
    ledger: &Ledger,
    key: &str,
    claim: &MemberClaim,
    now: Timestamp,
    lifetime: Duration,
) -> Judged {
    let Ok(ours) = claim.window() else {
        return Judged::Unreadable {
            key: key.to_owned(),
            error: "the claim itself is unreadable".to_owned(),
        };
    };
    if now > end((ours.0, lifetime)) {
        return Judged::Stale;
    }
    let keep_after = now
        .checked_sub(SignedDuration::try_from(KEEP).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MIN);
    let member = same_member(key);
    let mut held: Option<(String, Timestamp)> = None;
    let mut expired = Vec::new();
    for (other, raw) in ledger.data.range(CLAIM_PREFIX.to_owned()..) {
        if !other.starts_with(CLAIM_PREFIX) {
            break;
        }
        let window = serde_json::from_str::<MemberClaim>(raw)
            .map_err(|error| error.to_string())
            .and_then(|theirs| theirs.window());
        let theirs = match window {
            Ok(theirs) => theirs,
            // The member's own does not hold it back; it stays, holding the others.
            Err(_) if same_member(other) == member => continue,
            Err(error) => {
                return Judged::Unreadable {
                    key: other.clone(),
                    error,
                };
            }
        };
        if end(theirs) < keep_after {
            expired.push(other.clone());
            continue;
        }
        if same_member(other) == member {
            continue;
        }
        if conflict(ours, theirs) {
            let until = end(theirs).max(end(ours));
            if held.as_ref().is_none_or(|(_, longest)| until > *longest) {
                let member = member_of(other).unwrap_or_else(|| other.clone());
                held = Some((member, until));
            }
        }
    }
    match held {
        Some((member, until)) => Judged::Held { member, until },
        None => {
            let mut accepted = ledger.clone();
            for key in expired {
                accepted.data.remove(&key);
            }
            accepted.data.insert(
                key.to_owned(),
                serde_json::to_string(claim).unwrap_or_default(),
            );
            Judged::Accepts(accepted)
        }
    }
}

/// `ledger` without the claim of `key` made by `request`; `None` when it holds no such claim
/// (another request's claim of the same member is not ours to remove).
pub fn withdrawn(ledger: &Ledger, key: &str, request: &str) -> Option<Ledger> {
    let raw = ledger.data.get(key)?;
    let claim = serde_json::from_str::<MemberClaim>(raw).ok()?;
    if claim.request != request {
        return None;
    }
    let mut without = ledger.clone();
    without.data.remove(key);
    Some(without)
}

/// The members a claim is written to: `own` first (its ledger is claimed before the others
/// are asked), then the others by name (all asked at once; the name order is the answers').
pub fn order(own: &str, members: &[String]) -> Vec<String> {
    let mut others: Vec<String> = members
        .iter()
        .filter(|member| member.as_str() != own)
        .cloned()
        .collect();
    others.sort();
    std::iter::once(own.to_owned()).chain(others).collect()
}

/// What one member's ledger answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reached {
    /// The claim is in it.
    Accepted,
    /// It refused the claim (`why`: [`Judged::Held`] or [`Judged::Unreadable`] as told).
    Refused(String),
    /// It could not be read or written (`why`), or the ledger kept changing.
    Unreachable(String),
}

impl Reached {
    /// The answer of a ledger that was judged.
    pub fn of(judged: &Judged) -> Self {
        match judged {
            Judged::Accepts(_) => Reached::Accepted,
            Judged::Held { member, until } => Reached::Refused(format!(
                "holds a claim of {member} within the min-time (until {until})"
            )),
            Judged::Unreadable { key, error } => Reached::Refused(format!(
                "holds an unreadable claim {key:?} ({error}); delete it to go on"
            )),
            Judged::Stale => Reached::Refused(
                "was reached only after the claim's deadline (the request took too long)"
                    .to_owned(),
            ),
        }
    }
}

/// What to do next, given the members' answers so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// No majority yet, and members still to answer: wait for the next answer.
    Wait,
    /// A majority accepted: approved. `warnings` names each member that did not accept, or
    /// had not answered yet (its claim, if it lands there, holds as this downscale's).
    Approved { warnings: Vec<String> },
    /// Every member answered and no majority accepted: withdraw the claim from these members'
    /// ledgers (every one that accepted it), and refuse, retryably, with `message`.
    Refused {
        withdraw: Vec<String>,
        message: String,
    },
}

/// The decision over `order` (from [`order`]), every member asked at once, given `answers`
/// in that order (`None`: not answered yet; a member left out at the end has not answered
/// either); `downscale` names the change in the refusal.
///
/// Approved as soon as a majority accepted, whoever has not answered yet: a member that takes
/// connections and never answers cannot hold back the others' majority. Refused only once
/// every member answered (the driver answers for those still silent at the deadline:
/// unreachable), so that the withdrawal reaches every member that accepted.
pub fn next(order: &[String], answers: &[Option<Reached>], downscale: &str) -> Next {
    let needed = majority(order.len());
    let answer = |index: usize| answers.get(index).and_then(Option::as_ref);
    let accepted = (0..order.len())
        .filter(|&index| matches!(answer(index), Some(Reached::Accepted)))
        .count();
    let why = |member: &String, answer: Option<&Reached>| match answer {
        Some(Reached::Accepted) => None,
        Some(Reached::Refused(why)) => Some(format!("member cluster {member} {why}")),
        Some(Reached::Unreachable(why)) => Some(format!(
            "member cluster {member} could not be reached: {why}"
        )),
        None => Some(format!(
            "member cluster {member} had not answered when a majority accepted"
        )),
    };
    if accepted >= needed {
        let warnings = order
            .iter()
            .enumerate()
            .filter_map(|(index, member)| why(member, answer(index)))
            .collect();
        return Next::Approved { warnings };
    }
    if (0..order.len()).any(|index| answer(index).is_none()) {
        return Next::Wait;
    }
    let withdraw = order
        .iter()
        .enumerate()
        .filter(|(index, _)| matches!(answer(*index), Some(Reached::Accepted)))
        .map(|(_, member)| member.clone())
        .collect();
    let why: Vec<String> = order
        .iter()
        .enumerate()
        .filter_map(|(index, member)| why(member, answer(index)))
        .collect();
    Next::Refused {
        withdraw,
        message: format!(
            "{downscale} is not allowed yet: its claim is in the downscale ledgers of {accepted} of {} member clusters, and {needed} are needed: {}; retry later",
            order.len(),
            why.join("; ")
        ),
    }
}

#[cfg(test)]
mod tests;
