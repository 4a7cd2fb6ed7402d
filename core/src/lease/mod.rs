//! Leader election decided: what a candidate does next from what it has observed of the Lease
//! and when, on its own monotonic clock ([`decide::decide`], [`decide::observe`]), and the next
//! Lease object from the one last read ([`record`]). The controller's `leader` module does the
//! calls, keeps the terms and fences every action by them.

pub mod decide;
pub mod record;
