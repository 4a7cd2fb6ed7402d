//! The ledgers live in `baton_shared::ledger` (the controller writes zone-aware budget records
//! with them too); re-exported here so the webhook's paths stay as they were.

pub use baton_shared::ledger::*;
