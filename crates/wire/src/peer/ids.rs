//! The values broker-to-broker frames talk about, as newtypes so a tick is never confused with
//! a pubend id or a tree id. `route` and `delivery` can use these directly, so a value read off
//! the wire needs no conversion before the cores see it.
//!
//! Layouts: every id and tick is a `u64`; a tick range is `first:u64 | last:u64` (inclusive);
//! a range list is `count:u32 | count × range`, sorted and disjoint.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_count, Reader};
use crate::error::WireError;
pub use crate::ids::{PubendId, Tick};

/// The routing tree a best-effort message was routed under; a receiver that holds another tree
/// drops the message, so a message never mixes two trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TreeId(pub u64);

/// A broker's restart counter. Persisted and incremented on every start, so a peer can tell a
/// restarted broker (whose soft state is gone) from the same process reconnecting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Incarnation(pub u64);

/// Names one subscription barrier of its origin broker (gd-protocol §11.5), so the answer can
/// be matched to the subscriptions it confirms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BarrierId(pub u64);

/// The ticks `first..=last`. Inclusive on both ends, as the protocol's ranges are, so a range
/// of one tick needs no `+1` that could overflow at `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TickRange {
    /// The first tick of the range.
    pub first: Tick,
    /// The last tick of the range (at least `first`).
    pub last: Tick,
}

impl TickRange {
    /// The range `first..=last`; `None` if `last < first`.
    pub fn new(first: Tick, last: Tick) -> Option<TickRange> {
        (first <= last).then_some(TickRange { first, last })
    }
}

/// Bytes one encoded range takes: the decoder's bound on a forged count.
pub(crate) const RANGE_LEN: usize = 16;

/// Writes a range list, refusing one that is not sorted and disjoint: the receiver would
/// refuse the frame, so the sender learns of its own bug where it happens, with the frame in
/// hand, instead of only as a peer's complaint.
pub(crate) fn put_ranges(out: &mut BytesMut, ranges: &[TickRange]) -> Result<(), WireError> {
    if let Some(pair) = ranges.windows(2).find(|pair| pair[0].last >= pair[1].first) {
        return Err(WireError::InvalidField { frame: "range list", field: "range first", value: pair[1].first.0 });
    }
    put_count(out, "ranges", ranges.len())?;
    for range in ranges {
        out.put_u64(range.first.0);
        out.put_u64(range.last.0);
    }
    Ok(())
}

/// Reads a range list and checks that every range is well formed and that they are sorted and
/// disjoint, so the cores never see overlapping knowledge from one frame.
pub(crate) fn read_ranges(r: &mut Reader<'_>, frame: &'static str) -> Result<Vec<TickRange>, WireError> {
    let count = r.count("ranges", RANGE_LEN)?;
    let mut ranges: Vec<TickRange> = Vec::with_capacity(count);
    for _ in 0..count {
        let first = Tick(r.u64("range first")?);
        let last = Tick(r.u64("range last")?);
        let Some(range) = TickRange::new(first, last) else {
            return Err(WireError::InvalidField { frame, field: "range last", value: last.0 });
        };
        if ranges.last().is_some_and(|prev| prev.last >= range.first) {
            return Err(WireError::InvalidField { frame, field: "range first", value: first.0 });
        }
        ranges.push(range);
    }
    Ok(ranges)
}
