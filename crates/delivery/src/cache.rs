//! The bounded payload cache of one stream.
//!
//! **The limit.** Each stream keeps at most [`crate::Settings::payload_cache_bytes`] bytes of
//! payloads (default 64 MiB; payload bytes only, not map overhead). When an insert goes over, the
//! lowest ticks are evicted first, except ticks at or above a protected tick the stream names
//! (at a subscriber-hosting broker: ticks not yet delivered to its caught-up subends, which must
//! not wait for a refetch). An evicted payload leaves its D in the knowledge stream; whoever
//! needs it again re-fetches it with a nack (the pubend reads it from its log). So the
//! protected part is the only part that can exceed the limit, and it is bounded by how far data
//! runs ahead of a gap before the gap is repaired.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::names::{Tick, TickRange};

/// Payloads released from a cache, to be freed by the shell where it costs nothing that waits
/// ([`crate::Action::Free`]). A release during a durable subscriber's catch-up covers hundreds
/// of thousands of payloads; freeing them took 11-22 ms of the broker's single driver task at
/// each release (every half second), and every live message waited behind it (`bench
/// catch-up`: live p99 22-47 ms against 1-5 ms without a catch-up).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released(BTreeMap<Tick, Bytes>);

impl Released {
    /// Payloads held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when nothing was released.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Payloads of D ticks still worth keeping.
#[derive(Clone, Debug, Default)]
pub struct PayloadCache {
    payloads: BTreeMap<Tick, Bytes>,
    bytes: usize,
    evicted: u64,
    /// The lowest tick a local subend still has to read (`None`: none lags).
    wanted_from: Option<Tick>,
    /// Payloads from here on are not delivered yet to caught-up local subends: never evicted,
    /// whatever an insert says.
    protected_from: Option<Tick>,
}

impl PayloadCache {
    /// The cached payload of `tick`.
    pub fn get(&self, tick: Tick) -> Option<&Bytes> {
        self.payloads.get(&tick)
    }

    /// Whether `tick`'s payload is cached.
    pub fn contains(&self, tick: Tick) -> bool {
        self.payloads.contains_key(&tick)
    }

    /// The ticks in `range` whose payloads are cached, in order: one walk of the tree where a
    /// lookup per tick would cost a descent each (a catch-up's window scan asks about
    /// thousands of ticks at a time).
    pub fn ticks_in(&self, range: TickRange) -> impl Iterator<Item = Tick> + '_ {
        self.payloads.range(range.from..=range.to).map(|(&tick, _)| tick)
    }

    /// Caches a payload (keeping an existing one), then evicts the lowest unprotected ticks
    /// until the cache fits `limit` bytes.
    pub fn insert(&mut self, tick: Tick, payload: Bytes, limit: usize, protect_from: Tick) {
        if self.payloads.contains_key(&tick) {
            return;
        }
        self.bytes += payload.len();
        self.payloads.insert(tick, payload);
        let protect_from = self.protected_from.map_or(protect_from, |p| p.min(protect_from));
        while self.bytes > limit {
            let Some((&lowest, _)) = self.payloads.first_key_value() else { break };
            let victim = match self.wanted_from {
                Some(wanted) if lowest >= wanted => match self.payloads.range(..protect_from).next_back() {
                    Some((&highest, _)) => highest,
                    None => break,
                },
                _ if lowest >= protect_from => break,
                _ => lowest,
            };
            if let Some(dropped) = self.payloads.remove(&victim) {
                self.bytes -= dropped.len();
                self.evicted += 1;
            }
        }
    }

    /// Where the local subends stand: payloads from `wanted` on are what the slowest reads
    /// next, and those from `protected` on are not delivered yet to the caught-up ones.
    pub fn want_from(&mut self, wanted: Option<Tick>, protected: Tick) {
        self.wanted_from = wanted;
        self.protected_from = Some(protected);
    }

    /// Takes out every payload at or below `tick` (acknowledged everywhere downstream); the
    /// caller hands them to the shell to free ([`Released`]).
    pub fn drop_through(&mut self, tick: Tick) -> Released {
        // One split of the tree rather than a removal per payload (a release can cover
        // hundreds of thousands).
        let kept = self.payloads.split_off(&Tick(tick.0.saturating_add(1)));
        let dropped = std::mem::replace(&mut self.payloads, kept);
        // The byte count walks the smaller side: this runs on the driver, and the released
        // side can be hundreds of thousands of payloads.
        self.bytes = if self.payloads.len() <= dropped.len() {
            self.payloads.values().map(Bytes::len).sum::<usize>()
        } else {
            self.bytes - dropped.values().map(Bytes::len).sum::<usize>()
        };
        Released(dropped)
    }

    /// Payload bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Payloads evicted by the limit so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Payloads held.
    pub fn len(&self) -> usize {
        self.payloads.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.payloads.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn while_a_subend_catches_up_the_stretch_it_reads_next_is_kept() {
        let mut cache = PayloadCache::default();
        cache.want_from(Some(Tick(3)), Tick(100));
        for tick in 1..=6 {
            cache.insert(Tick(tick), Bytes::from_static(b"0123456789"), 30, Tick(100));
        }
        let kept: Vec<u64> = cache.payloads.keys().map(|t| t.0).collect();
        assert_eq!(kept, [3, 4, 5], "below it first, then the highest");
    }

    #[test]
    fn the_lowest_unprotected_payloads_are_evicted_first() {
        let mut cache = PayloadCache::default();
        for tick in 1..=4 {
            cache.insert(Tick(tick), Bytes::from_static(b"0123456789"), 25, Tick(4));
        }
        assert!(!cache.contains(Tick(1)) && !cache.contains(Tick(2)));
        assert!(cache.contains(Tick(3)) && cache.contains(Tick(4)));
        assert_eq!(cache.bytes(), 20);
        assert_eq!(cache.evicted(), 2);
    }

    #[test]
    fn protected_payloads_stay_even_over_the_limit() {
        let mut cache = PayloadCache::default();
        for tick in 1..=4 {
            cache.insert(Tick(tick), Bytes::from_static(b"0123456789"), 5, Tick(1));
        }
        assert_eq!(cache.len(), 4);
        assert_eq!(cache.drop_through(Tick(3)).len(), 3);
        assert_eq!((cache.len(), cache.bytes()), (1, 10), "the count of bytes left is exact");
        assert_eq!(cache.drop_through(Tick(0)).len(), 0);
        assert_eq!((cache.len(), cache.bytes()), (1, 10));
    }
}
