//! Go duration syntax now lives in `baton_shared::go_duration`: the controller reads the
//! min-time label too. Re-exported so the webhook's paths keep working.

pub use baton_shared::go_duration::*;
