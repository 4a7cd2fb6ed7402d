//! Groups for the plugin's tests, from the core's builders: zones rolling from `old` to `new`.

use baton_core::rollout::{GroupSnapshot, StatefulSetSnapshot};
use baton_core::status::{self, GroupStatus};
pub use baton_core::testing::annotated;
use jiff::Timestamp;

/// A zone of `total` ready pods, `updated` of them at revision `new`, the rest at `old`.
pub fn zone(name: &str, total: u32, updated: u32) -> StatefulSetSnapshot {
    let zone = baton_core::testing::zone(name, total)
        .at_revision("old")
        .template_changed_to("new")
        .updated_first(updated);
    if updated == total {
        zone.current_revision("new").build()
    } else {
        zone.build()
    }
}

/// Group `ingester` of `zones`.
pub fn group(zones: Vec<StatefulSetSnapshot>) -> GroupSnapshot {
    baton_core::testing::group(zones)
}

/// The controller's status of `group`, as the plugin computes it (no leader history).
pub fn status_of(group: &GroupSnapshot) -> GroupStatus {
    status::compute(
        group,
        None,
        Timestamp::from_second(1_800_000_000).expect("a time"),
    )
}
