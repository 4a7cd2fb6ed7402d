//! How far apart clocks may be.

use jiff::SignedDuration;

/// How far ahead of this replica's clock a recorded time may be and still be believed: clocks
/// of replicas differ by seconds. A time further ahead (`2099-01-01`, written by anyone who may
/// edit a record or an annotation) is unreadable, and said so, rather than a wait until then.
pub const MAX_CLOCK_SKEW: SignedDuration = SignedDuration::from_mins(5);
