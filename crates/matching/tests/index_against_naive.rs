//! The index must answer exactly as a naive loop over all subscriptions does, with or without
//! its cache, whatever the order of subscribes, unsubscribes and publishes.

// Test helpers outside `#[test]` functions may unwrap: generated input is valid by construction.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tidings_matching::{Pattern, SubscriptionId, SubscriptionIndex};

#[derive(Debug, Clone)]
enum Op {
    Subscribe(Pattern, u32),
    /// Unsubscribes the live subscription at this position (modulo the count).
    Unsubscribe(usize),
    Publish(String),
}

fn level() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("a"), Just("b"), Just("c")]
}

fn topic() -> impl Strategy<Value = String> {
    prop::collection::vec(level(), 1..5).prop_map(|levels| levels.join("."))
}

fn pattern() -> impl Strategy<Value = Pattern> {
    let one = prop_oneof![3 => level(), 1 => Just("*")];
    (prop::collection::vec(one, 1..5), any::<bool>()).prop_map(|(mut levels, rest)| {
        if rest {
            *levels.last_mut().unwrap() = ">";
        }
        Pattern::parse(&levels.join(".")).unwrap()
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (pattern(), 0..1000u32).prop_map(|(p, s)| Op::Subscribe(p, s)),
        1 => any::<usize>().prop_map(Op::Unsubscribe),
        3 => topic().prop_map(Op::Publish),
    ]
}

/// Applies `ops` to an index with the given cache size and to a plain list, comparing answers.
fn check(cache: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut index = SubscriptionIndex::with_cache_capacity(cache);
    let mut naive: Vec<(SubscriptionId, Pattern, u32)> = Vec::new();
    for op in ops {
        match op {
            Op::Subscribe(pattern, subscriber) => {
                let id = index.insert(pattern.clone(), None, *subscriber);
                naive.push((id, pattern.clone(), *subscriber));
            }
            Op::Unsubscribe(at) if !naive.is_empty() => {
                let (id, _, subscriber) = naive.swap_remove(at % naive.len());
                prop_assert_eq!(index.remove(id), Some(subscriber));
                prop_assert_eq!(index.remove(id), None);
            }
            Op::Unsubscribe(_) => {}
            Op::Publish(topic) => {
                let mut got = Vec::new();
                index.matches(topic, &[], &mut got);
                got.sort_unstable();
                let mut want: Vec<u32> =
                    naive.iter().filter(|(_, p, _)| p.matches(topic)).map(|(_, _, s)| *s).collect();
                want.sort_unstable();
                prop_assert_eq!(got, want, "topic {}", topic);
            }
        }
        prop_assert_eq!(index.len(), naive.len());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_index_without_a_cache_agrees_with_a_naive_loop(ops in prop::collection::vec(op(), 1..200)) {
        check(0, &ops)?;
    }

    #[test]
    fn the_index_with_a_cache_agrees_with_a_naive_loop(ops in prop::collection::vec(op(), 1..200)) {
        check(tidings_matching::DEFAULT_CACHE_CAPACITY, &ops)?;
    }

    #[test]
    fn the_index_with_a_tiny_evicting_cache_agrees_with_a_naive_loop(ops in prop::collection::vec(op(), 1..200)) {
        check(3, &ops)?;
    }
}
