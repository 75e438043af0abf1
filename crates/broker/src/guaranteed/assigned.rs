//! The ticks given to publishes, by `(publisher, seq)`: what a retry after a lost PUBLISH_ACK is
//! answered with. Kept apart from the log because the log forgets a record once every
//! subscriber has it, while a publisher may still be retrying it.
//!
//! Bounded: per pubend the newest [`Assigned::LIMIT`] publishes are remembered (about 40 B
//! each). A retry of an older one, or of one released before a restart (the store's dedup table
//! holds unreleased records only), is still recognised by the core and acknowledged, but with
//! tick 0: "logged earlier, tick forgotten".

use std::collections::{BTreeMap, VecDeque};

use tidings_delivery::{PubendId, PublisherId, Tick};

type Key = (PublisherId, u64);

#[derive(Default)]
struct PubendTicks {
    ticks: BTreeMap<Key, Tick>,
    order: VecDeque<Key>,
}

/// Ticks of recent publishes per pubend.
#[derive(Default)]
pub(crate) struct Assigned {
    pubends: BTreeMap<PubendId, PubendTicks>,
}

impl Assigned {
    /// Publishes remembered per pubend.
    pub(crate) const LIMIT: usize = 262_144;

    /// Remembers the tick of `key`, forgetting the oldest past the limit.
    pub(crate) fn insert(&mut self, pubend: PubendId, key: Key, tick: Tick) {
        let entry = self.pubends.entry(pubend).or_default();
        if entry.ticks.insert(key, tick).is_none() {
            entry.order.push_back(key);
        }
        while entry.order.len() > Self::LIMIT {
            if let Some(old) = entry.order.pop_front() {
                entry.ticks.remove(&old);
            }
        }
    }

    /// The tick given to `key`, if remembered.
    pub(crate) fn get(&self, pubend: PubendId, key: Key) -> Option<Tick> {
        self.pubends.get(&pubend).and_then(|entry| entry.ticks.get(&key)).copied()
    }

    /// Forgets `key` (its append failed: a retry is a new publish).
    pub(crate) fn remove(&mut self, pubend: PubendId, key: Key) {
        if let Some(entry) = self.pubends.get_mut(&pubend) {
            entry.ticks.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_publishes_are_forgotten_past_the_limit() {
        let mut a = Assigned::default();
        let p = PubendId(1);
        for seq in 0..(Assigned::LIMIT as u64 + 2) {
            a.insert(p, (PublisherId(1), seq), Tick(seq + 10));
        }
        assert_eq!(a.get(p, (PublisherId(1), 0)), None);
        assert_eq!(a.get(p, (PublisherId(1), 1)), None);
        assert_eq!(a.get(p, (PublisherId(1), 2)), Some(Tick(12)));
        a.remove(p, (PublisherId(1), 2));
        assert_eq!(a.get(p, (PublisherId(1), 2)), None);
    }
}
