//! [`Chunks`] against a plain `BTreeMap` under random changes large enough to split chunks,
//! and copies that share chunks staying apart when either changes.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::{Chunks, MAX_CHUNK};
use crate::filter::test_filter::Rng;

/// Keys of differing lengths so that some lie between others' prefixes ("k12" < "k120" < "k13").
fn key(rng: &mut Rng) -> String {
    format!("k{}", rng.below(4 * MAX_CHUNK as u32))
}

fn same(chunks: &Chunks<u32>, model: &BTreeMap<String, u32>, context: &str) {
    let held: Vec<(&String, &u32)> = chunks.iter().collect();
    let expected: Vec<(&String, &u32)> = model.iter().collect();
    assert_eq!(held, expected, "{context}");
    assert_eq!(chunks.is_empty(), model.is_empty(), "{context}");
    for (first, chunk) in &chunks.chunks {
        assert_eq!(chunk.keys().next(), Some(first), "{context}: a chunk is stored under its first key");
        assert!(chunk.len() <= MAX_CHUNK, "{context}: a chunk of {}", chunk.len());
    }
}

fn bounds(rng: &mut Rng) -> (Bound<String>, Bound<String>) {
    let (a, b) = (key(rng), key(rng));
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    let low = match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(low),
        _ => Bound::Excluded(low),
    };
    // Excluded on both ends of one key is not a range (as for `BTreeMap::range`).
    let high = match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(high),
        _ if matches!(&low, Bound::Excluded(l) if *l == high) => Bound::Included(high),
        _ => Bound::Excluded(high),
    };
    (low, high)
}

#[test]
fn chunks_hold_what_a_map_holds_under_random_changes() {
    for seed in 1..=8u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut chunks = Chunks::default();
        let mut model = BTreeMap::new();
        for step in 0..6_000u32 {
            let context = format!("seed {seed} step {step}");
            let k = key(&mut rng);
            match rng.below(8) {
                0..=4 => {
                    chunks.insert(k.clone(), step);
                    model.insert(k.clone(), step);
                }
                5 => assert_eq!(chunks.remove(&k), model.remove(&k), "{context}"),
                6 => {
                    if let Some(value) = chunks.get_mut(&k) {
                        *value += 1;
                    }
                    if let Some(value) = model.get_mut(&k) {
                        *value += 1;
                    }
                }
                _ => {
                    let (low, high) = bounds(&mut rng);
                    let (low, high) = (low.as_ref().map(String::as_str), high.as_ref().map(String::as_str));
                    let held: Vec<_> = chunks.range(low, high).collect();
                    let expected: Vec<_> = model.range::<str, _>((low, high)).collect();
                    assert_eq!(held, expected, "{context}: range {low:?}..{high:?}");
                }
            }
            assert_eq!(chunks.get_key_value(&k), model.get_key_value(&k), "{context}");
            if step % 500 == 0 {
                same(&chunks, &model, &context);
            }
        }
        same(&chunks, &model, &format!("seed {seed}"));
        assert!(
            chunks.chunks.len() > 2,
            "seed {seed}: the test splits chunks ({} chunks, {} keys)",
            chunks.chunks.len(),
            model.len()
        );
    }
}

#[test]
fn a_copy_shares_every_chunk_and_a_change_copies_only_the_one_it_touches() {
    let mut original = Chunks::default();
    let mut model = BTreeMap::new();
    for i in 0..10 * MAX_CHUNK as u32 {
        original.insert(format!("k{i:06}"), i);
        model.insert(format!("k{i:06}"), i);
    }
    let mut copy = original.clone();
    let shared = |a: &Chunks<u32>, b: &Chunks<u32>| {
        a.chunks.values().zip(b.chunks.values()).filter(|(x, y)| std::sync::Arc::ptr_eq(x, y)).count()
    };
    let count = original.chunks.len();
    assert_eq!(shared(&original, &copy), count, "a copy shares every chunk");
    if let Some(value) = copy.get_mut("k000007") {
        *value = 0;
    }
    copy.remove("k004000");
    copy.insert("a".into(), 1);
    assert_eq!(shared(&original, &copy), count - 2, "only the touched chunks were copied");
    same(&original, &model, "the original is unchanged");
    model.insert("k000007".into(), 0);
    model.remove("k004000");
    model.insert("a".into(), 1);
    same(&copy, &model, "the copy has its changes");
    let mut freed = 0;
    while let Some(chunk) = copy.pop_last_chunk() {
        freed += chunk.len();
    }
    assert_eq!(freed, model.len());
    assert!(copy.is_empty());
    assert_eq!(original.iter().count(), 10 * MAX_CHUNK);
}
