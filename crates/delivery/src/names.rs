//! Small identity and time newtypes. The delivery core uses plain integers for brokers and cells
//! (the shell maps its names to them once), so the per-message path never clones a string.

use std::fmt;

/// One slot of a pubend's stream: a timestamp of the publishing broker's clock made strictly
/// increasing (`max(now, last + 1)`). `Tick(0)` is never assigned, so it doubles as "nothing"
/// in prefixes (an ack prefix of `Tick(0)` acknowledges nothing).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tick(pub u64);

impl Tick {
    /// The tick after this one, saturating at the end of time.
    pub fn next(self) -> Tick {
        Tick(self.0.saturating_add(1))
    }

    /// The tick before this one (`Tick(0)` stays `Tick(0)`, "nothing").
    pub fn prev(self) -> Tick {
        Tick(self.0.saturating_sub(1))
    }
}

impl fmt::Debug for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// A point in time in milliseconds from an origin the shell chooses; the core never reads a
/// clock, which is what makes simulated runs replayable.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Millis(pub u64);

impl Millis {
    /// `self + duration_ms`, saturating so that a huge timeout means "never".
    pub fn after(self, duration_ms: u64) -> Millis {
        Millis(self.0.saturating_add(duration_ms))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Millis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

macro_rules! id {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(pub $inner);
    };
}

id!(
    /// A persistent message stream hosted at one publisher-hosting broker.
    PubendId(u64)
);
id!(
    /// A broker, as the shell numbers them: where messages are sent.
    BrokerId(u32)
);
id!(
    /// A cell (a group of fully linked brokers). Ostreams are keyed by downstream cell, so
    /// acknowledgement state survives a change of entry broker within the cell's bundle.
    CellId(u32)
);
id!(
    /// One local subscription endpoint at a subscriber-hosting broker.
    SubendId(u64)
);
id!(
    /// One publishing client, for duplicate suppression of its retried publishes.
    PublisherId(u64)
);
id!(
    /// The routing tree a filter edge judged a pubend's messages under (the router's tree id
    /// for the pubend's root; `TreeTag(0)` where no tree is known). F is relative to the
    /// subtree it was judged for, so every F told carries the sender's tag and is taken only
    /// by a receiver under the same tree.
    TreeTag(u64)
);

/// An inclusive range of ticks `[from, to]`; never empty (`from <= to`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct TickRange {
    /// First tick of the range.
    pub from: Tick,
    /// Last tick of the range (inclusive).
    pub to: Tick,
}

impl TickRange {
    /// The range `[from, to]`; `None` when `from > to`.
    pub fn new(from: Tick, to: Tick) -> Option<TickRange> {
        (from <= to).then_some(TickRange { from, to })
    }

    /// A range of one tick.
    pub fn single(tick: Tick) -> TickRange {
        TickRange { from: tick, to: tick }
    }

    /// Number of ticks in the range.
    pub fn len(&self) -> u64 {
        self.to.0 - self.from.0 + 1
    }

    /// Always false: a range holds at least one tick (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sorts `ranges` and merges those that overlap or touch, in place: the form every range
    /// list on the wire must have (sorted, disjoint). Curiosity gathered from several sources
    /// (the broker's own wants, each child's, several stalled catch-up windows) overlaps, and a
    /// frame built from it unmerged is refused by the receiver (issue 38, failure B).
    pub fn normalize(ranges: &mut Vec<TickRange>) {
        ranges.sort_unstable();
        let mut merged: Vec<TickRange> = Vec::with_capacity(ranges.len());
        for &range in ranges.iter() {
            match merged.last_mut() {
                Some(last) if range.from.0 <= last.to.0.saturating_add(1) => last.to = last.to.max(range.to),
                _ => merged.push(range),
            }
        }
        *ranges = merged;
    }
}
