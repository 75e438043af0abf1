//! Opening the log: read every segment in order, check every record, rebuild the catalog.
//! A bad record with nothing valid after it in the last segment is a torn tail (a write that
//! the crash interrupted, never acknowledged under `always`) and is cut off. A bad stretch with
//! valid records after it is damage: it is logged, counted and turned into lost ranges, and the
//! records around it still serve.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::catalog::{Catalog, Loc, SegmentMeta};
use crate::codec::{decode, only_zeros, resync, Decoded, Entry};
use crate::error::StoreError;
use crate::fs::{Fs, LogFile};
use crate::types::{PubendId, PublisherId, PublisherSeq, Tick, TickRange};

/// What a pubend's log held at open: enough for the delivery core to restart the pubend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PubendRecovery {
    /// The durable tick lease `H` (T1).
    pub lease: Tick,
    /// Every tick up to here is released (its records may be gone).
    pub released: Tick,
    /// The highest data tick ever logged (0 if none).
    pub highest: Tick,
    /// Unreleased records still in the log (read them with [`crate::Store::read`]).
    pub records: usize,
    /// (publisher, sequence) -> tick of every unreleased record, for T4 dedup.
    pub dedup: BTreeMap<(PublisherId, PublisherSeq), Tick>,
    /// Each publisher's highest logged sequence, released records included (the newest
    /// [`crate::PUBLISHERS_KEPT`] publishers at least): a retry at or below it is a retry.
    pub publishers: BTreeMap<PublisherId, PublisherSeq>,
    /// Ranges that damage on disk made unservable; report them as L.
    pub lost: Vec<TickRange>,
}

impl PubendRecovery {
    /// The last tick that may already have been used: new ticks must be above it, whatever the
    /// clock says (`last_tick = max(H, highest logged tick)`).
    pub fn tick_floor(&self) -> Tick {
        self.lease.max(self.highest)
    }
}

/// The result of opening a store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Per pubend state.
    pub pubends: BTreeMap<PubendId, PubendRecovery>,
    /// Bytes of torn tail cut from the last segment.
    pub truncated_bytes: u64,
    /// Damaged stretches found in the middle of the log (each is also logged as an error).
    pub corrupt_spans: u64,
    /// Segment files in the log.
    pub segments: usize,
}

/// The catalog plus where the writer continues.
pub(crate) struct Scan {
    pub(crate) catalog: Catalog,
    pub(crate) active_end: u64,
    pub(crate) recovered: Recovered,
}

/// The path of segment `id`.
pub(crate) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.log"))
}

fn segment_ids(fs: &dyn Fs, dir: &Path) -> Result<Vec<u64>, StoreError> {
    let names = fs.list(dir).map_err(|e| StoreError::io("listing the log directory", &e))?;
    crate::delete::remove_leftovers(fs, dir, &names);
    let mut ids: Vec<u64> = names.iter().filter_map(|name| name.strip_suffix(".log")?.parse().ok()).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Reads the whole log under `dir`.
pub(crate) fn recover(fs: &dyn Fs, dir: &Path) -> Result<Scan, StoreError> {
    let ids = segment_ids(fs, dir)?;
    let mut scanner = Scanner::default();
    let mut active_end = 0;
    for (position, id) in ids.iter().enumerate() {
        let file = fs.open(&segment_path(dir, *id)).map_err(|e| StoreError::io("opening a segment", &e))?;
        let last = position + 1 == ids.len();
        active_end = scanner.segment(*id, file, last)?;
    }
    scanner.finish();
    let mut catalog = scanner.catalog;
    catalog.active = ids.last().copied().unwrap_or(0);
    let mut recovered = summarize(&catalog);
    recovered.truncated_bytes = scanner.truncated;
    recovered.corrupt_spans = scanner.corrupt_spans;
    recovered.segments = ids.len();
    Ok(Scan { catalog, active_end, recovered })
}

fn summarize(catalog: &Catalog) -> Recovered {
    let pubends = catalog
        .pubends
        .iter()
        .map(|(id, log)| {
            let lost = log.lost.iter().map(|(first, last)| TickRange { first: *first, last: *last });
            let state = PubendRecovery {
                lease: log.lease,
                released: log.released,
                highest: log.highest,
                records: log.index.len(),
                dedup: log.index.iter().map(|(tick, loc)| ((loc.publisher, loc.seq), *tick)).collect(),
                publishers: log.publishers.iter().map(|(publisher, (seq, _))| (*publisher, *seq)).collect(),
                lost: lost.collect(),
            };
            (*id, state)
        })
        .collect();
    Recovered { pubends, ..Recovered::default() }
}

#[derive(Default)]
struct Scanner {
    catalog: Catalog,
    /// Pubends with a damaged stretch after their tick `after`, waiting for their next record.
    pending: BTreeMap<PubendId, Tick>,
    truncated: u64,
    corrupt_spans: u64,
}

impl Scanner {
    /// Scans one segment; returns where its records end (the writer continues there).
    fn segment(&mut self, id: u64, file: Arc<dyn LogFile>, last: bool) -> Result<u64, StoreError> {
        let len = file.size().map_err(|e| StoreError::io("sizing a segment", &e))?;
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, 0).map_err(|e| StoreError::io("reading a segment", &e))?;
        let meta = SegmentMeta { file: Arc::clone(&file), high: BTreeMap::new() };
        self.catalog.segments.insert(id, meta);
        let mut offset = 0;
        while offset < bytes.len() {
            match decode(&bytes[offset..]) {
                Decoded::Record(entry, used) => {
                    self.apply(entry, id, offset as u64, used as u32);
                    offset += used;
                }
                Decoded::Truncated | Decoded::Bad if only_zeros(&bytes[offset..]) => break,
                Decoded::Truncated | Decoded::Bad => match resync(&bytes, offset) {
                    Some(next) => {
                        self.damaged(id, offset as u64, next - offset);
                        offset = next;
                    }
                    None if last => return self.truncate(&*file, offset, &bytes[offset..]),
                    None => {
                        self.damaged(id, offset as u64, bytes.len() - offset);
                        break;
                    }
                },
            }
        }
        Ok(offset as u64)
    }

    /// Cuts the torn `tail` (which starts at `offset`) and any zero fill after it.
    fn truncate(&mut self, file: &dyn LogFile, offset: usize, tail: &[u8]) -> Result<u64, StoreError> {
        let torn = tail.iter().rposition(|b| *b != 0).map_or(0, |last| last + 1);
        tracing::warn!(offset, bytes = torn, "cutting a torn tail off the last segment");
        file.set_len(offset as u64).map_err(|e| StoreError::io("cutting a torn tail", &e))?;
        file.sync_data().map_err(|e| StoreError::io("syncing the cut tail", &e))?;
        self.truncated += torn as u64;
        Ok(offset as u64)
    }

    fn damaged(&mut self, segment: u64, offset: u64, bytes: usize) {
        tracing::error!(segment, offset, bytes, "corrupt records in the log; their ticks are lost");
        self.corrupt_spans += 1;
        for (pubend, log) in &self.catalog.pubends {
            self.pending.entry(*pubend).or_insert(log.highest.max(log.released));
        }
    }

    fn apply(&mut self, entry: Entry<'_>, segment: u64, offset: u64, len: u32) {
        match entry {
            Entry::Data { pubend, tick, publisher, seq, .. } => {
                if let Some(after) = self.pending.remove(&pubend) {
                    let range = TickRange { first: Tick(after.0 + 1), last: Tick(tick.0.saturating_sub(1)) };
                    self.catalog.add_lost(pubend, range);
                }
                let loc = Loc { segment, offset, len, publisher, seq };
                self.catalog.add_data(pubend, tick, loc);
            }
            Entry::Lease { pubend, tick } => self.catalog.raise_lease(pubend, tick),
            Entry::Release { pubend, tick } => drop(self.catalog.release(pubend, tick)),
            Entry::Publisher { pubend, tick, publisher, seq } => {
                self.catalog.pubends.entry(pubend).or_default().note_publisher(publisher, seq, tick);
            }
            Entry::Void { pubend } => {
                // Damage before the void was in records it voids.
                self.pending.remove(&pubend);
                drop(self.catalog.void(pubend));
            }
        }
    }

    /// Damage after a pubend's last record: its ticks up to the lease may have been in it.
    fn finish(&mut self) {
        for (pubend, after) in std::mem::take(&mut self.pending) {
            let lease = self.catalog.pubends.get(&pubend).map_or(after, |log| log.lease);
            let range = TickRange { first: Tick(after.0 + 1), last: lease };
            self.catalog.add_lost(pubend, range);
        }
    }
}
