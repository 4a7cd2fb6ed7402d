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
    pass::decide_with(&read, gate)
}
