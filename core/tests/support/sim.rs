//! What the simulations share (each includes this file): their sizes and seeds come from the
//! environment (`SIM_SEED`, `SIM_SCENARIOS`, …), so a failure found once replays exactly.

/// The number in environment variable `name`, if set; anything else set there is a mistake
/// worth stopping for.
pub fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// The leader's pass over `group` at `now` as the controller makes it (the core's one call),
/// with `gate` composing the planner and the gates and nothing read besides the group: no
/// health check read, no hook answered, no zone seen rolling.
pub fn leader_pass(
    group: &baton_core::rollout::GroupSnapshot,
    now: jiff::Timestamp,
    gate: &baton_core::pass::Gate<'_>,
) -> baton_core::pass::Pass {
    use baton_core::pass::{self, CheckRead, Gates, HookRead, Read};
    let gates = Gates::read(group);
    let read = Read {
        snapshot: group,
        gates: &gates,
        check: &CheckRead::NotRead,
        hook: &HookRead::default(),
        rolling: &baton_core::rollout::completion::Rolling::new(),
        namespace: "simulation",
        now,
    };
    pass::decide_gated_by(&read, gate)
}

/// What a simulation's statistics offer [`search`]: they add up across scenarios, and a
/// scenario ended by a violation nobody asked about still counts as one.
pub trait Tally: Default + Send {
    fn merge(&mut self, other: &Self);
    fn count_ended_scenario(&mut self);
}

/// Runs `run` on every seed of `seeds` on all cores (up to 8) until one violates a property
/// `wanted` accepts (other violations end their scenario only); of those found, the lowest seed
/// wins, so a failure replays the same whatever the machine.
pub fn search<S: Tally, V: Send>(
    seeds: std::ops::Range<u64>,
    run: &(dyn Fn(u64) -> Result<S, V> + Sync),
    wanted: &(dyn Fn(&V) -> bool + Sync),
    seed_of: fn(&V) -> u64,
) -> Result<S, V> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    let threads = std::thread::available_parallelism()
        .map_or(2, |count| count.get())
        .min(8);
    let stop = AtomicBool::new(false);
    let outcome: Mutex<(S, Option<V>)> = Mutex::new((S::default(), None));
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (seeds, stop, outcome) = (seeds.clone(), &stop, &outcome);
            scope.spawn(move || {
                let mut stats = S::default();
                let mut found = None;
                for seed in seeds.skip(thread).step_by(threads) {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    match run(seed) {
                        Ok(scenario) => stats.merge(&scenario),
                        Err(violation) if !wanted(&violation) => stats.count_ended_scenario(),
                        Err(violation) => {
                            stop.store(true, Ordering::Relaxed);
                            found = Some(violation);
                            break;
                        }
                    }
                }
                let mut outcome = outcome.lock().expect("no thread panics while holding it");
                outcome.0.merge(&stats);
                if let Some(violation) = found
                    && outcome
                        .1
                        .as_ref()
                        .is_none_or(|best| seed_of(&violation) < seed_of(best))
                {
                    outcome.1 = Some(violation);
                }
            });
        }
    });
    let (stats, violation) = outcome.into_inner().expect("no thread panicked");
    match violation {
        Some(violation) => Err(violation),
        None => Ok(stats),
    }
}
