//! `window` against its meaning, a lookup per tick.

use proptest::prelude::*;

use super::*;
use crate::knowledge::Joined;

/// What `window` means, a lookup per tick: among the first `4 × messages` D ticks from
/// `from`, the first `messages` whose payload is missing; the window ends at the last.
fn window_by_lookups(from: Tick, until: Tick, know: &Knowledge, cache: &PayloadCache, messages: u64) -> TickRange {
    let Some(range) = TickRange::new(from, until) else { return TickRange::single(from) };
    let messages = messages.max(1) as usize;
    let data = know.runs(range).filter(|run| run.value == Know::Data).flat_map(|run| run.range.from.0..=run.range.to.0);
    let missing = data.take(4 * messages).filter(|&tick| !cache.contains(Tick(tick)));
    TickRange { from, to: missing.take(messages).last().map_or(from, Tick) }
}

proptest! {
    #[test]
    fn the_window_walks_the_cache_to_the_same_range_as_a_lookup_per_tick(
        runs in proptest::collection::vec((1u64..20, 0u8..3), 1..30),
        cached in proptest::collection::btree_set(1u64..400, 0..200),
        from in 1u64..400,
        span in 0u64..400,
        messages in 0u64..40,
    ) {
        let (mut know, mut next) = (Knowledge::new(), 1);
        for (len, value) in runs {
            let value = [Know::Data, Know::Final, Know::Lost][usize::from(value)];
            know.join(TickRange { from: Tick(next), to: Tick(next + len - 1) }, value, &mut Joined::default());
            next += len;
        }
        let mut cache = PayloadCache::default();
        for tick in cached {
            cache.insert(Tick(tick), bytes::Bytes::from_static(b"p"), usize::MAX, Tick(u64::MAX));
        }
        let (from, until) = (Tick(from), Tick(from + span));
        prop_assert_eq!(
            window(from, until, &know, &cache, messages),
            window_by_lookups(from, until, &know, &cache, messages)
        );
    }
}
