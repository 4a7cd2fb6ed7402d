//! What one pass allocates: heap blocks and bytes of the leader's whole pass
//! (`baton_core::pass::decide`) over the planner bench's mid-rollout group, without and with
//! gate keys. dhat counts every allocation, which slows each one down: this is its own bench
//! binary, so criterion's timings (`planner`) stay on the system allocator.
//!
//! `cargo bench -p baton-controller --bench pass_allocations`

use std::hint::black_box;

mod groups;
use groups::{gated_group, leader_pass, mid_rollout_group};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    for (case, group) in [
        ("pass, no gate keys", mid_rollout_group(0)),
        ("pass, a soak and a ramp", gated_group(0)),
    ] {
        // The first pass warms nothing up that a later one reuses: each is counted alike.
        let before = dhat::HeapStats::get();
        let pass = black_box(leader_pass(black_box(&group)));
        let after = dhat::HeapStats::get();
        println!(
            "{case} (3 StatefulSets x 100 pods, {} effects): {} allocations, {} bytes",
            pass.effects.len(),
            after.total_blocks - before.total_blocks,
            after.total_bytes - before.total_bytes,
        );
    }
}
