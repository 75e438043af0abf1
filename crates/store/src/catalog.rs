//! What the store knows in memory about the log: the segments, and per pubend where each
//! unreleased record lives, its lease, release prefix, dedup table and unservable (lost) ranges.
//! Shared between the writer thread and readers behind one mutex that is never held across I/O.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::fs::LogFile;
use crate::types::{PubendId, PublisherId, PublisherSeq, Tick, TickRange};

/// Where one record's framed bytes are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loc {
    pub(crate) segment: u64,
    pub(crate) offset: u64,
    pub(crate) len: u32,
    pub(crate) publisher: PublisherId,
    pub(crate) seq: PublisherSeq,
}

/// One pubend's durable state as the log says it.
#[derive(Debug, Default)]
pub(crate) struct PubendLog {
    pub(crate) index: BTreeMap<Tick, Loc>,
    pub(crate) lease: Tick,
    pub(crate) released: Tick,
    pub(crate) highest: Tick,
    /// Unservable ranges, first tick -> last tick (inclusive).
    pub(crate) lost: BTreeMap<Tick, Tick>,
    /// Each publisher's highest logged seq and its tick, released records included: the index
    /// forgets a record at its release, but a publisher whose acknowledgement was lost in a
    /// crash retries it, and the retry must still be taken as one (T4). Written in every
    /// segment's checkpoint, so deleting the segments that held the records keeps it.
    pub(crate) publishers: BTreeMap<PublisherId, (PublisherSeq, Tick)>,
}

/// Publishers remembered per pubend beyond their unreleased records: the newest by tick. A
/// publisher quiet while this many others published, all its records released, and then
/// retrying across a restart is the one case left out (its retry is logged again).
pub const PUBLISHERS_KEPT: usize = 4096;

impl PubendLog {
    /// Raises `publisher`'s high-water mark to `seq` at `tick`.
    pub(crate) fn note_publisher(&mut self, publisher: PublisherId, seq: PublisherSeq, tick: Tick) {
        let mark = self.publishers.entry(publisher).or_insert((seq, tick));
        if seq >= mark.0 {
            *mark = (seq, tick.max(mark.1));
        }
        if self.publishers.len() > 2 * PUBLISHERS_KEPT {
            self.trim_publishers();
        }
    }

    /// Forgets all but the [`PUBLISHERS_KEPT`] publishers with the newest ticks.
    fn trim_publishers(&mut self) {
        let mut ticks: Vec<Tick> = self.publishers.values().map(|(_, tick)| *tick).collect();
        let cut = ticks.len().saturating_sub(PUBLISHERS_KEPT);
        let (_, oldest_kept, _) = ticks.select_nth_unstable(cut);
        let oldest_kept = *oldest_kept;
        self.publishers.retain(|_, (_, tick)| *tick >= oldest_kept);
    }
}

/// One segment file and, per pubend, the highest data tick it holds: the segment may go once
/// every one of those ticks is released.
#[derive(Debug)]
pub(crate) struct SegmentMeta {
    pub(crate) file: Arc<dyn LogFile>,
    pub(crate) high: BTreeMap<PubendId, Tick>,
}

/// What a new segment starts with for one pubend (see [`Catalog::checkpoint`]).
pub(crate) struct Checkpoint {
    pub(crate) pubend: PubendId,
    pub(crate) lease: Tick,
    pub(crate) released: Tick,
    pub(crate) publishers: Vec<(PublisherId, PublisherSeq, Tick)>,
}

/// A slot in a read: a record to fetch, or a range that cannot be served.
#[derive(Debug)]
pub(crate) enum Slot {
    Data { tick: Tick, file: Arc<dyn LogFile>, loc: Loc },
    Lost(TickRange),
}

impl Slot {
    /// Where a data slot's record ends in its segment.
    pub(crate) fn end(&self) -> Option<u64> {
        match self {
            Slot::Data { loc, .. } => Some(loc.offset + u64::from(loc.len)),
            Slot::Lost(_) => None,
        }
    }
}

/// The in-memory catalog of the log.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    pub(crate) segments: BTreeMap<u64, SegmentMeta>,
    pub(crate) pubends: BTreeMap<PubendId, PubendLog>,
    /// The segment being appended to; never deleted.
    pub(crate) active: u64,
}

impl Catalog {
    /// Records a data record at `loc` (released ticks only count toward the segment's high mark).
    pub(crate) fn add_data(&mut self, pubend: PubendId, tick: Tick, loc: Loc) {
        if let Some(segment) = self.segments.get_mut(&loc.segment) {
            let high = segment.high.entry(pubend).or_default();
            *high = (*high).max(tick);
        }
        let log = self.pubends.entry(pubend).or_default();
        log.highest = log.highest.max(tick);
        log.note_publisher(loc.publisher, loc.seq, tick);
        if tick > log.released {
            log.index.insert(tick, loc);
        }
    }

    /// Raises the pubend's lease (never lowers it).
    pub(crate) fn raise_lease(&mut self, pubend: PubendId, tick: Tick) {
        let log = self.pubends.entry(pubend).or_default();
        log.lease = log.lease.max(tick);
    }

    /// Moves the pubend's release prefix to `tick` (never back) and forgets released records,
    /// returning their index entries for the caller to free outside the catalog lock.
    pub(crate) fn release(&mut self, pubend: PubendId, tick: Tick) -> BTreeMap<Tick, Loc> {
        let log = self.pubends.entry(pubend).or_default();
        if tick <= log.released {
            return BTreeMap::new();
        }
        log.released = tick;
        // Cheap under the catalog lock, which appends wait for: no per-record work (the dedup
        // table is derived from the index at open, not kept up to date record by record).
        let kept = log.index.split_off(&Tick(tick.0.saturating_add(1)));
        let released = std::mem::replace(&mut log.index, kept);
        let above = Tick(tick.0.saturating_add(1));
        let kept = log.lost.split_off(&above);
        // A lost range that straddles the prefix keeps its unreleased part.
        let straddling = log.lost.last_key_value().map(|(_, last)| *last).filter(|last| *last >= above);
        log.lost = kept;
        if let Some(last) = straddling {
            log.lost.insert(above, last);
        }
        released
    }

    /// Forgets everything of the pubend (a void record): its log starts again empty, and the
    /// segments no longer count its records, so those holding nothing else live go like
    /// released ones. Returns its index entries for the caller to free outside the lock.
    pub(crate) fn void(&mut self, pubend: PubendId) -> BTreeMap<Tick, Loc> {
        for segment in self.segments.values_mut() {
            segment.high.remove(&pubend);
        }
        self.pubends.insert(pubend, PubendLog::default()).map(|log| log.index).unwrap_or_default()
    }

    /// Marks `range` of the pubend as unservable.
    pub(crate) fn add_lost(&mut self, pubend: PubendId, range: TickRange) {
        let log = self.pubends.entry(pubend).or_default();
        if range.last > log.released && range.first <= range.last {
            let first = range.first.max(Tick(log.released.0 + 1));
            let last = log.lost.get(&first).map_or(range.last, |old| (*old).max(range.last));
            log.lost.insert(first, last);
            log.index.retain(|tick, _| *tick < first || *tick > last);
        }
    }

    /// Removes the oldest segments whose every record is released (never the active one) and
    /// returns their numbers, oldest first, for the caller to delete.
    pub(crate) fn take_released_segments(&mut self) -> Vec<u64> {
        let mut gone = Vec::new();
        while let Some((&id, segment)) = self.segments.first_key_value() {
            let released = segment
                .high
                .iter()
                .all(|(pubend, high)| self.pubends.get(pubend).is_some_and(|log| *high <= log.released));
            if id == self.active || !released {
                break;
            }
            self.segments.remove(&id);
            gone.push(id);
        }
        gone
    }

    /// Each pubend's lease, release prefix and publishers' high-water marks, written at the
    /// head of every new segment so deleting older segments never loses them.
    pub(crate) fn checkpoint(&mut self) -> Vec<Checkpoint> {
        let mut out = Vec::with_capacity(self.pubends.len());
        for (id, log) in &mut self.pubends {
            if log.publishers.len() > PUBLISHERS_KEPT {
                log.trim_publishers();
            }
            let publishers = log.publishers.iter().map(|(publisher, (seq, tick))| (*publisher, *seq, *tick)).collect();
            out.push(Checkpoint { pubend: *id, lease: log.lease, released: log.released, publishers });
        }
        out
    }

    /// The records and lost ranges of `pubend` within `range`, in tick order, at most `max`
    /// records.
    pub(crate) fn locate(&self, pubend: PubendId, range: TickRange, max: usize) -> Vec<Slot> {
        let Some(log) = self.pubends.get(&pubend) else { return Vec::new() };
        let mut slots = Vec::new();
        let lost_before = log.lost.range(..=range.first).next_back();
        let lost = lost_before
            .filter(|(_, last)| **last >= range.first)
            .into_iter()
            .chain(log.lost.range(Tick(range.first.0.saturating_add(1))..=range.last));
        let mut lost = lost.peekable();
        for (tick, loc) in log.index.range(range.first..=range.last).take(max) {
            while let Some((first, last)) = lost.next_if(|(first, _)| **first < *tick) {
                slots.push(Slot::Lost(TickRange { first: *first, last: *last }));
            }
            if let Some(segment) = self.segments.get(&loc.segment) {
                let file = Arc::clone(&segment.file);
                slots.push(Slot::Data { tick: *tick, file, loc: *loc });
            }
        }
        if slots.iter().filter(|slot| matches!(slot, Slot::Data { .. })).count() < max {
            slots.extend(lost.map(|(first, last)| Slot::Lost(TickRange { first: *first, last: *last })));
        }
        slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u64, last: u64) -> TickRange {
        TickRange { first: Tick(first), last: Tick(last) }
    }

    #[test]
    fn release_keeps_the_unreleased_part_of_a_straddling_lost_range() {
        let mut catalog = Catalog::default();
        catalog.add_lost(PubendId(1), range(10, 20));
        catalog.add_lost(PubendId(1), range(30, 40));
        drop(catalog.release(PubendId(1), Tick(15)));
        let lost: Vec<_> = catalog.pubends[&PubendId(1)].lost.iter().map(|(f, l)| (f.0, l.0)).collect();
        assert_eq!(lost, vec![(16, 20), (30, 40)]);
    }

    #[test]
    fn a_lost_range_interleaves_with_records_in_tick_order() {
        let mut catalog = Catalog { active: 1, ..Catalog::default() };
        let file: Arc<dyn LogFile> = crate::MemFs::new().open_file("/x");
        catalog.segments.insert(0, SegmentMeta { file, high: BTreeMap::new() });
        let loc = Loc { segment: 0, offset: 0, len: 1, publisher: PublisherId(1), seq: PublisherSeq(1) };
        for tick in [5, 25, 45] {
            catalog.add_data(PubendId(1), Tick(tick), loc);
        }
        catalog.add_lost(PubendId(1), range(10, 20));
        catalog.add_lost(PubendId(1), range(30, 40));
        let order: Vec<String> = catalog
            .locate(PubendId(1), range(0, 100), usize::MAX)
            .iter()
            .map(|slot| match slot {
                Slot::Data { tick, .. } => format!("d{}", tick.0),
                Slot::Lost(r) => format!("l{}-{}", r.first.0, r.last.0),
            })
            .collect();
        assert_eq!(order, ["d5", "l10-20", "d25", "l30-40", "d45"]);
        let from_inside = catalog.locate(PubendId(1), range(15, 26), usize::MAX);
        assert!(matches!(from_inside[0], Slot::Lost(r) if r == range(10, 20)));
        assert_eq!(from_inside.len(), 2);
    }
}
