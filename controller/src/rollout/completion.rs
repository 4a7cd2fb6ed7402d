//! The zones the leader has seen rolling, by group, kept between passes: what the core's
//! [`completed`](baton_core::rollout::completion::completed) decides on to tell a zone's
//! completion once, and only for zones this term saw rolling.

use std::collections::HashMap;
use std::sync::Mutex;

use baton_core::rollout::completion::Rolling;

/// The zones seen rolling, by group.
#[derive(Debug, Default)]
pub struct Completions {
    rolling: Mutex<HashMap<String, Rolling>>,
}

impl Completions {
    /// What was seen rolling in `group` (nothing, the first time).
    pub fn seen(&self, group: &str) -> Rolling {
        self.lock().get(group).cloned().unwrap_or_default()
    }

    /// Remembers what a pass of `group` saw rolling.
    pub fn keep(&self, group: &str, rolling: Rolling) {
        let mut all = self.lock();
        if rolling.is_empty() {
            all.remove(group);
        } else {
            all.insert(group.to_owned(), rolling);
        }
    }

    /// `group` is gone.
    pub fn forget(&self, group: &str) {
        self.lock().remove(group);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Rolling>> {
        self.rolling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
