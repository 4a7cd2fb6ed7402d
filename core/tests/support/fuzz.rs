//! What the fuzz targets of the core share (each includes this file):
//! a runner sized by `FUZZ_CASES`, and inputs mutated from a corpus.

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};

/// A runner of `FUZZ_CASES` cases (else `default_cases`), persisting no failures to disk.
pub fn runner(default_cases: u32) -> TestRunner {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default_cases);
    TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    })
}

pub fn corpus(text: &'static str) -> Vec<&'static str> {
    text.split('\n').collect()
}

/// A corpus entry with a few characters inserted, replaced or removed, or an arbitrary string.
pub fn value_from(corpus: Vec<&'static str>) -> impl Strategy<Value = String> {
    let edits = prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<char>()), 0..4);
    let mutated = (prop::sample::select(corpus), edits).prop_map(|(seed, edits)| {
        let mut chars: Vec<char> = seed.chars().collect();
        for (at, op, c) in edits {
            let position = at.index(chars.len() + 1);
            match op {
                0 => chars.insert(position, c),
                1 if position < chars.len() => chars[position] = c,
                _ if position < chars.len() => {
                    chars.remove(position);
                }
                _ => {}
            }
        }
        chars.into_iter().collect::<String>()
    });
    prop_oneof![4 => mutated, 1 => any::<String>()]
}
