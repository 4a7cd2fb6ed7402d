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
