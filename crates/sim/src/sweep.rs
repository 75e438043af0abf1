//! Running many seeds, shrinking a failure to the shortest run that still fails, and saying
//! how to replay it.
//!
//! Environment: `SIM_SEED=<s>` runs that seed only; `SIM_SEEDS=<n>` runs `n` seeds (a soak);
//! `SIM_STEPS=<n>` and `SIM_SKIP=<i,j,..>` replay a shrunk plan exactly. To look into one:
//! `SIM_DEBUG=1` adds every broker's routes and stream state to the failure message, and
//! `SIM_TRACE=<node>` prints that broker's inputs (timer ticks and store completions left out)
//! and every action it takes but frees (frames sent, deliveries, store writes), on stderr;
//! `SIM_RTRACE=1` prints every router's inputs and actions (summaries, barriers, link changes;
//! heartbeats left out).

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::scenario::{Coverage, Failure, Plan};

/// The plans to run: `SIM_SEED` replays one (with `SIM_STEPS` / `SIM_SKIP` if given);
/// otherwise `SIM_SEEDS` (default `default_count`) seeds from `first`, `steps` chaos steps each.
pub fn plans(first: u64, default_count: u64, steps: usize) -> Vec<Plan> {
    let env = |name: &str| std::env::var(name).ok();
    let steps = env("SIM_STEPS").and_then(|s| s.parse().ok()).unwrap_or(steps);
    if let Some(seed) = env("SIM_SEED").and_then(|s| s.parse().ok()) {
        let skip =
            env("SIM_SKIP").map(|s| s.split(',').filter_map(|i| i.trim().parse().ok()).collect()).unwrap_or_default();
        return vec![Plan { seed, steps, skip }];
    }
    let count = env("SIM_SEEDS").and_then(|s| s.parse().ok()).unwrap_or(default_count);
    (first..first + count).map(|seed| Plan { seed, steps, skip: BTreeSet::new() }).collect()
}

/// Runs a plan, turning a panic into a failure.
fn attempt(run: &impl Fn(&Plan) -> Result<Coverage, Failure>, plan: &Plan) -> Result<Coverage, Failure> {
    match catch_unwind(AssertUnwindSafe(|| run(plan))) {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(Failure { step: None, faults: 0, message: format!("panic: {message}") })
        }
    }
}

/// The shortest failing variant of a failing plan: no more chaos steps than the failure
/// needed, then every fault whose absence still fails left out (greedy, one at a time).
pub fn shrink(run: &impl Fn(&Plan) -> Result<Coverage, Failure>, plan: &Plan, failure: &Failure) -> (Plan, Failure) {
    let mut best = (plan.clone(), failure.clone());
    if let Some(step) = failure.step {
        let shorter = Plan { steps: step + 1, ..plan.clone() };
        if let Err(failure) = attempt(run, &shorter) {
            best = (shorter, failure);
        }
    }
    for fault in 0..best.1.faults {
        let mut candidate = best.0.clone();
        if !candidate.skip.insert(fault) {
            continue;
        }
        if let Err(failure) = attempt(run, &candidate) {
            if let Some(step) = failure.step {
                candidate.steps = candidate.steps.min(step + 1);
            }
            best = (candidate, failure);
        }
    }
    best
}

/// Runs every plan; the first failure is shrunk and reported with its replay command.
/// `test` names the test to replay it with.
pub fn sweep(test: &str, plans: &[Plan], run: impl Fn(&Plan) -> Result<Coverage, Failure>) -> Coverage {
    let mut total = Coverage::default();
    for plan in plans {
        match attempt(&run, plan) {
            Ok(coverage) => total.add(&coverage),
            Err(failure) => {
                let (small, small_failure) = shrink(&run, plan, &failure);
                let skip: Vec<String> = small.skip.iter().map(ToString::to_string).collect();
                panic!(
                    "{test}: seed {} failed at step {:?}: {}\nshrunk to {} steps, {} of {} faults left out: {}\n\
                     replay with: SIM_SEED={} SIM_STEPS={} SIM_SKIP={} cargo test -p tidings-sim -- --exact {test}",
                    plan.seed,
                    failure.step,
                    failure.message,
                    small.steps,
                    small.skip.len(),
                    failure.faults,
                    small_failure.message,
                    small.seed,
                    small.steps,
                    skip.join(","),
                )
            }
        }
    }
    total
}
