//! How long deciding takes: the planner alone and the leader's whole pass (planner, gates,
//! effects), on one group of 3 StatefulSets × 100 pods mid-rollout, and the planner on 100 such
//! groups (what a reconcile of a large namespace costs in planning alone).

use std::hint::black_box;

use baton_core::rollout::{GroupSnapshot, plan};
use criterion::{Criterion, criterion_group, criterion_main};

mod groups;
use groups::{gated_group, leader_pass, mid_rollout_group, now};

fn planner(criterion: &mut Criterion) {
    let one = mid_rollout_group(0);
    let sanity = plan(&one, now());
    assert_eq!(sanity.deletions().count(), 7, "10% of 100 minus 3 starting");

    criterion.bench_function("plan 1 group (3 StatefulSets x 100 pods)", |bencher| {
        bencher.iter(|| plan(black_box(&one), black_box(now())))
    });

    assert_eq!(leader_pass(&one).actions().count(), 7);
    criterion.bench_function("pass 1 group (3 StatefulSets x 100 pods)", |bencher| {
        bencher.iter(|| leader_pass(black_box(&one)))
    });
    let gated = gated_group(0);
    criterion.bench_function(
        "pass 1 group with a soak and a ramp (3 StatefulSets x 100 pods)",
        |bencher| bencher.iter(|| leader_pass(black_box(&gated))),
    );

    let hundred: Vec<GroupSnapshot> = (0..100).map(mid_rollout_group).collect();
    criterion.bench_function("plan 100 groups (3 StatefulSets x 100 pods)", |bencher| {
        bencher.iter(|| {
            hundred
                .iter()
                .map(|group| plan(black_box(group), black_box(now())).actions.len())
                .sum::<usize>()
        })
    });
}

criterion_group!(benches, planner);
criterion_main!(benches);
