//! Memory per subscription, measured with a counting global allocator: heap bytes held by the
//! index after inserting N subscriptions, minus before, divided by N. It counts everything the
//! index allocates (trie, groups, buckets, residues, interned names and predicates, id slab,
//! spare vector capacity), not an estimate from type sizes.
//!
//! `cargo bench -p tidings-matching --bench memory`

use std::alloc::System;

use cap::Cap;

mod workloads;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

fn measure(label: &str, count: usize, subscriptions: &[workloads::Subscription]) {
    let before = ALLOCATOR.allocated();
    let index = workloads::build(subscriptions);
    let after = ALLOCATOR.allocated();
    let per_subscription = (after - before) as f64 / count as f64;
    println!("{label:>8} {count:>9} subscriptions: {per_subscription:>7.1} bytes per subscription");
    drop(index);
}

fn main() {
    // `cargo bench` passes `--bench`; this binary has no options.
    for count in [1_000, 10_000, 100_000, 1_000_000] {
        measure("seed004", count, &workloads::seed004_subscriptions(count));
    }
    for count in [1_000, 100_000, 1_000_000] {
        measure("range", count, &workloads::range_subscriptions(count));
    }
    for count in [1_000, 100_000] {
        measure("mixed", count, &workloads::mixed_subscriptions(count));
    }
    let plain: Vec<workloads::Subscription> = (0..100_000)
        .map(|i| workloads::Subscription {
            pattern: workloads::pattern(&format!("plant.line{}.temp", i % 1000)),
            selector: None,
        })
        .collect();
    measure("no selector", 100_000, &plain);
}
