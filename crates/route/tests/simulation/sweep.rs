//! Running many seeds, and saying which one failed.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::scenario::Coverage;

/// The seeds to run: `SIM_SEED` replays one; otherwise `SIM_SEEDS` (default `default_count`)
/// seeds from `first`.
pub(crate) fn seeds(first: u64, default_count: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let count = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default_count);
    (first..first + count).collect()
}

/// Runs `run` for every seed; a failure (an `Err` or a panic) names the seed to replay.
pub(crate) fn sweep(name: &str, seeds: &[u64], run: impl Fn(u64) -> Result<Coverage, String>) -> Coverage {
    let mut total = Coverage::default();
    for &seed in seeds {
        let outcome = catch_unwind(AssertUnwindSafe(|| run(seed)));
        let failure = match outcome {
            Ok(Ok(coverage)) => {
                total.add(&coverage);
                continue;
            }
            Ok(Err(message)) => message,
            Err(panic) => panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into()),
        };
        panic!("{name}: seed {seed} failed: {failure}\nreplay with: SIM_SEED={seed} cargo test -p tidings-route --test simulation");
    }
    total
}
