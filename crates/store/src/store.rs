//! The public face of the log: open (lock + recover), submit appends, lease raises and releases
//! (completions come back through a [`CompletionSink`]), read ranges, and counters.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::catalog::{Catalog, Loc, Slot};
use crate::codec::{decode, Decoded, Entry};
use crate::error::StoreError;
use crate::fs::{DirLock, Fs, StdFs};
use crate::policy::FsyncPolicy;
use crate::queue::{Op, Queue};
use crate::recovery::{recover, segment_path, Recovered};
use crate::reserve::Reserve;
use crate::stepped::Stepped;
use crate::types::{PubendId, PublisherId, PublisherSeq, Record, Tick, TickRange, Token};
use crate::writer::GroupWriter;

/// The name of the log writer's thread (the kernel keeps its first 15 bytes): benchmarks
/// read its CPU apart from the rest of the broker's, since its syncs are most of what the log
/// costs.
pub const WRITER_THREAD: &str = "tidings-store-writer";

/// How to run the store.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The fsync policy (default `always`).
    pub fsync: FsyncPolicy,
    /// A new segment starts when the next group would pass this size (default 64 MiB). Release
    /// frees disk a whole segment at a time, so smaller segments free it sooner.
    pub segment_bytes: u64,
    /// Bytes kept in a `RESERVE` file so that a release can still be logged (and free space)
    /// when the disk is full (default 1 MiB).
    pub reserve_bytes: u64,
    /// Under `always`, the period at which the writer paces its syncs while appends arrive
    /// steadily in small groups: after such a commit it takes the next group one period after
    /// that commit began, so one sync carries several appends and none waits longer than a
    /// period (the rules, and why, are in `linger.rs`). Zero turns it off (default).
    pub linger: Duration,
    /// Whether segments are filled with zeros ahead of the records (default on), so that a
    /// group's sync flushes data only: no block allocation, hence no file system journal
    /// commit. Worth it for small groups whose syncs someone waits for; a store of large
    /// writes nobody waits on (the snapshots a replica saves apart) would only write twice.
    pub fill_ahead: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fsync: FsyncPolicy::Always,
            segment_bytes: 64 << 20,
            reserve_bytes: 1 << 20,
            linger: Duration::ZERO,
            fill_ahead: true,
        }
    }
}

/// Which kind of operation completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// [`Store::append`].
    Append,
    /// [`Store::raise_lease`].
    Lease,
    /// [`Store::release`].
    Release,
    /// [`Store::void`].
    Void,
}

/// The outcome of one submitted operation, reported once the write (and, under `always`, the
/// sync) covering it returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The caller's token.
    pub token: Token,
    /// What was done.
    pub kind: OpKind,
    /// The pubend.
    pub pubend: PubendId,
    /// The record's tick, the new lease or the new release prefix (zero for a void).
    pub tick: Tick,
    /// Whether it is logged.
    pub result: Result<(), StoreError>,
}

/// Receives completions, one group at a time, on the writer thread. Keep it quick: hand them to
/// a channel (the broker: a tokio sender; a simulator or test: a std channel or a vector).
pub trait CompletionSink: Send + 'static {
    /// Takes one group's completions, in submission order.
    fn complete(&mut self, group: Vec<Completion>);

    /// Hears how long one `fdatasync` of the log took, before the completions it covers, so a
    /// broker can show the disk's share of its ack latency (a slow sync holds every publish in
    /// its group). Ignored unless implemented.
    fn synced(&mut self, _took: Duration) {}
}

impl<F: FnMut(Vec<Completion>) + Send + 'static> CompletionSink for F {
    fn complete(&mut self, group: Vec<Completion>) {
        self(group)
    }
}

/// One item of a read, in tick order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadItem {
    /// A record, byte for byte as appended.
    Data(Record),
    /// Ticks the log cannot serve because their bytes are damaged: answer them as L (lost).
    Lost(TickRange),
}

/// Counters for the broker's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Data records written.
    pub appends: u64,
    /// Groups written (one write each).
    pub groups: u64,
    /// The largest group, in data records.
    pub max_group: u64,
    /// fdatasync calls.
    pub syncs: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Damaged records found by reads (each also logged as an error).
    pub corrupt_records: u64,
    /// Damaged stretches found when the log was opened (as in [`Recovered::corrupt_spans`]).
    pub corrupt_spans_at_open: u64,
    /// Segments deleted after release.
    pub segments_deleted: u64,
    /// Waits for more appends before a sync (`Options::linger`).
    pub lingers: u64,
    /// Of those, waits that gathered nothing (each turns waiting off for a while).
    pub lingers_fruitless: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) appends: AtomicU64,
    pub(crate) groups: AtomicU64,
    pub(crate) max_group: AtomicU64,
    pub(crate) syncs: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) corrupt_records: AtomicU64,
    pub(crate) corrupt_spans_at_open: AtomicU64,
    pub(crate) segments_deleted: AtomicU64,
    pub(crate) lingers: AtomicU64,
    pub(crate) lingers_fruitless: AtomicU64,
}

/// State shared by callers, readers and the writer thread.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) queue: Queue,
    pub(crate) catalog: Mutex<Catalog>,
    pub(crate) stats: Stats,
    /// Read buffers kept between reads (at most [`SPARE_SPANS`]). A catch-up reads a span of up
    /// to [`SPAN_BYTES`] about 140 times a second; allocated afresh each time, with freed memory
    /// returned to the OS at once (the broker's default), each span cost 256 page faults, the
    /// kernel zeroing those pages and a TLB shootdown when they went back.
    spans: Mutex<Vec<Vec<u8>>>,
}

impl Shared {
    pub(crate) fn lock_catalog(&self) -> MutexGuard<'_, Catalog> {
        self.catalog.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take_span(&self) -> Vec<u8> {
        self.spans.lock().unwrap_or_else(PoisonError::into_inner).pop().unwrap_or_default()
    }

    fn give_span(&self, span: Vec<u8>) {
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        if spans.len() < SPARE_SPANS && span.capacity() as u64 <= SPAN_BYTES {
            spans.push(span);
        }
    }
}

/// The durable pubend log of one broker. Dropping it drains queued operations, syncs, and stops
/// the writer thread.
#[derive(Debug)]
pub struct Store {
    pub(crate) shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    /// The writer of a store opened with [`Store::open_stepped`], run by [`Store::step`].
    pub(crate) stepped: Option<Stepped>,
    _lock: Box<dyn DirLock>,
}

impl Store {
    /// Opens (or creates) the log in `dir` on the real file system.
    pub fn open(dir: &Path, options: Options, sink: impl CompletionSink) -> Result<(Store, Recovered), StoreError> {
        Self::open_with(Arc::new(StdFs), dir, options, sink)
    }

    /// Opens (or creates) the log in `dir` on `fs`: locks `dir/LOCK`, reads and checks every
    /// segment (cutting a torn tail), and starts the writer thread.
    pub fn open_with(
        fs: Arc<dyn Fs>,
        dir: &Path,
        options: Options,
        sink: impl CompletionSink,
    ) -> Result<(Store, Recovered), StoreError> {
        let (opened, writer) = Self::open_parts(fs, dir, options, false)?;
        let sink: Box<dyn CompletionSink> = Box::new(sink);
        let handle = std::thread::Builder::new()
            .name(WRITER_THREAD.into())
            .spawn(move || writer.run(sink))
            .map_err(|e| StoreError::io("starting the writer thread", &e))?;
        let (mut store, recovered) = opened;
        store.writer = Some(handle);
        Ok((store, recovered))
    }

    /// Locks `dir`, recovers it, and builds the writer (not yet running).
    pub(crate) fn open_parts(
        fs: Arc<dyn Fs>,
        dir: &Path,
        options: Options,
        inline_deletes: bool,
    ) -> Result<((Store, Recovered), GroupWriter), StoreError> {
        fs.create_dir_all(dir).map_err(|e| StoreError::io("creating the log directory", &e))?;
        let lock_path = dir.join("LOCK");
        let lock = fs.lock(&lock_path).map_err(|error| match error.kind() {
            std::io::ErrorKind::WouldBlock => StoreError::Locked { path: lock_path.clone() },
            _ => StoreError::io("locking the log directory", &error),
        })?;
        let scan = recover(&*fs, dir)?;
        let active = scan.catalog.active;
        let file = fs.open(&segment_path(dir, active)).map_err(|e| StoreError::io("opening the active segment", &e))?;
        let filled = file.size().map_err(|e| StoreError::io("sizing the active segment", &e))?;
        if scan.recovered.segments == 0 {
            fs.sync_dir(dir).map_err(|e| StoreError::io("syncing the log directory", &e))?;
        }
        let mut catalog = scan.catalog;
        // What recovery found is what the log now claims to hold (the core acknowledges a
        // publisher's retry of a recovered record as a duplicate, and delivers it), but a crashed
        // process may have left it in the page cache only: a power loss after this open would
        // take it back. Syncing every segment first makes the claim true (clean files cost a
        // no-op sync).
        for meta in catalog.segments.values() {
            meta.file.sync_data().map_err(|e| StoreError::io("syncing a recovered segment", &e))?;
        }
        catalog
            .segments
            .entry(active)
            .or_insert_with(|| crate::catalog::SegmentMeta { file: Arc::clone(&file), high: Default::default() });
        let last_tick = catalog.pubends.iter().map(|(id, log)| (*id, log.highest)).collect();
        let shared = Arc::new(Shared { catalog: Mutex::new(catalog), ..Shared::default() });
        shared.stats.corrupt_spans_at_open.store(scan.recovered.corrupt_spans, Relaxed);
        let mut reserve =
            Reserve { fs: Arc::clone(&fs), path: dir.join("RESERVE"), bytes: options.reserve_bytes, present: false };
        reserve.ensure();
        let writer = GroupWriter {
            reserve,
            fresh: false,
            filled,
            fs,
            dir: dir.to_path_buf(),
            shared: Arc::clone(&shared),
            policy: options.fsync,
            segment_bytes: options.segment_bytes,
            fill: options.fill_ahead,
            file,
            active,
            end: scan.active_end,
            last_tick,
            poisoned: false,
            unsynced: false,
            last_sync: Instant::now(),
            // Only `always` syncs per group: the other policies have nothing to wait for.
            linger: crate::linger::Linger::new(match options.fsync {
                FsyncPolicy::Always => options.linger,
                _ => Duration::ZERO,
            }),
            buf: Vec::new(),
            short_of_space: false,
            sync_times: Vec::new(),
            inline_deletes,
        };
        let store = Store { shared, writer: None, stepped: None, _lock: lock };
        Ok(((store, scan.recovered), writer))
    }

    fn submit(&self, op: Op) -> Result<(), StoreError> {
        if self.shared.queue.push(op) {
            Ok(())
        } else {
            Err(StoreError::Closed)
        }
    }

    /// Submits a record. Ticks of one pubend must increase in submission order (T2). The
    /// completion arrives once the group holding it is written and, under `always`, synced.
    pub fn append(&self, token: Token, record: Record) -> Result<(), StoreError> {
        let Record { pubend, tick, publisher, seq, payload } = record;
        self.submit(Op::Append { token, pubend, tick, publisher, seq, payload })
    }

    /// Submits several records at once (one lock, one wake-up of the writer), as a broker does
    /// with the publishes of one socket read. Same rules and completions as [`Store::append`].
    pub fn append_many(&self, records: impl IntoIterator<Item = (Token, Record)>) -> Result<(), StoreError> {
        let ops = records.into_iter().map(|(token, record)| {
            let Record { pubend, tick, publisher, seq, payload } = record;
            Op::Append { token, pubend, tick, publisher, seq, payload }
        });
        if self.shared.queue.push_many(ops) {
            Ok(())
        } else {
            Err(StoreError::Closed)
        }
    }

    /// Submits a raise of the pubend's tick lease `H`. Always synced before completion, whatever
    /// the policy: the lease is what keeps ticks from going back after a crash (T1).
    pub fn raise_lease(&self, token: Token, pubend: PubendId, tick: Tick) -> Result<(), StoreError> {
        self.submit(Op::Lease { token, pubend, tick })
    }

    /// Submits a release of the pubend's records up to `tick`. Segments whose every record is
    /// released are deleted (oldest first) after the release is durable.
    pub fn release(&self, token: Token, pubend: PubendId, tick: Tick) -> Result<(), StoreError> {
        self.submit(Op::Release { token, pubend, tick })
    }

    /// Submits a void of everything the pubend's log held: its records, lease, release prefix,
    /// publishers' high-water marks and lost ranges. It takes effect in submission order with
    /// appends: appends submitted after it start again at any tick (a replicated pubend's log
    /// the replica group contradicts is re-seeded from the group's state, `docs/store.md`), and
    /// reads no longer see a voided record once it completes. Lost in a crash before its sync,
    /// it leaves the old log intact (void again); once synced, a restart finds only what was
    /// appended after it. Segments holding only voided or released records are deleted.
    pub fn void(&self, token: Token, pubend: PubendId) -> Result<(), StoreError> {
        self.submit(Op::Void { token, pubend })
    }

    /// Reads the pubend's records in `range` (at most `max` records), in tick order, each checked
    /// against its checksum. Damaged records come back as [`ReadItem::Lost`] (and are counted and
    /// logged), never as data; an I/O error fails the read.
    pub fn read(&self, pubend: PubendId, range: TickRange, max: usize) -> Result<Vec<ReadItem>, StoreError> {
        let slots = self.shared.lock_catalog().locate(pubend, range, max);
        let mut items = Vec::with_capacity(slots.len());
        let mut span = self.shared.take_span();
        let result = self.read_spans(pubend, &slots, &mut span, &mut items);
        self.shared.give_span(span);
        result.map(|()| items)
    }

    /// Reads `slots` into `items`, neighbouring records with one system call through `span`.
    fn read_spans(
        &self,
        pubend: PubendId,
        slots: &[Slot],
        span: &mut Vec<u8>,
        items: &mut Vec<ReadItem>,
    ) -> Result<(), StoreError> {
        let mut rest = slots;
        while let Some((first, tail)) = rest.split_first() {
            let Slot::Data { file, loc: start, .. } = first else {
                if let Slot::Lost(range) = first {
                    items.push(ReadItem::Lost(*range));
                }
                rest = tail;
                continue;
            };
            // Records next to each other in one segment are read with one system call: a
            // catch-up reads thousands of small records in a row.
            let taken = 1 + tail.iter().take_while(|slot| in_span(slot, start)).count();
            let (run, after) = rest.split_at(taken);
            let end = run.iter().filter_map(Slot::end).max().unwrap_or(start.offset);
            span.resize((end - start.offset) as usize, 0);
            file.read_exact_at(span, start.offset).map_err(|e| StoreError::io("reading the log", &e))?;
            for slot in run {
                let Slot::Data { tick, loc, .. } = slot else { continue };
                let at = (loc.offset - start.offset) as usize;
                items.push(match check(&span[at..at + loc.len as usize], pubend, *tick) {
                    Some(record) => ReadItem::Data(record),
                    None => self.damaged(pubend, *tick, loc.segment, loc.offset),
                });
            }
            rest = after;
        }
        Ok(())
    }

    fn damaged(&self, pubend: PubendId, tick: Tick, segment: u64, offset: u64) -> ReadItem {
        let error = StoreError::Corrupt { segment, offset };
        tracing::error!(%error, pubend = pubend.0, tick = tick.0, "a logged record is damaged");
        self.shared.stats.corrupt_records.fetch_add(1, Relaxed);
        let range = TickRange { first: tick, last: tick };
        self.shared.lock_catalog().add_lost(pubend, range);
        ReadItem::Lost(range)
    }

    /// The highest data tick the pubend's log ever took (0: none), released records
    /// included: an append must be above it, so a log whose records are all released, whose
    /// reads come back empty, still numbers on after it.
    pub fn highest(&self, pubend: PubendId) -> Tick {
        self.shared.lock_catalog().pubends.get(&pubend).map_or(Tick(0), |log| log.highest.max(log.released))
    }

    /// The store's counters.
    pub fn stats(&self) -> StoreStats {
        let s = &self.shared.stats;
        StoreStats {
            appends: s.appends.load(Relaxed),
            groups: s.groups.load(Relaxed),
            max_group: s.max_group.load(Relaxed),
            syncs: s.syncs.load(Relaxed),
            bytes: s.bytes.load(Relaxed),
            corrupt_records: s.corrupt_records.load(Relaxed),
            corrupt_spans_at_open: s.corrupt_spans_at_open.load(Relaxed),
            segments_deleted: s.segments_deleted.load(Relaxed),
            lingers: s.lingers.load(Relaxed),
            lingers_fruitless: s.lingers_fruitless.load(Relaxed),
        }
    }
}

/// The most bytes one read of neighbouring records takes (a span is a buffer of this size).
const SPAN_BYTES: u64 = 1 << 20;

/// Span buffers kept for the next reads: one per reader that runs at once in practice (a
/// catch-up, a nack, a retention check), so at most this many MiB stay allocated.
const SPARE_SPANS: usize = 4;

/// Whether `slot` joins the span read from `start`: the same segment, after it, within
/// [`SPAN_BYTES`] (records of other pubends between are read and skipped).
fn in_span(slot: &Slot, start: &Loc) -> bool {
    matches!(slot, Slot::Data { loc, .. }
        if loc.segment == start.segment && loc.offset >= start.offset
            && loc.offset + u64::from(loc.len) - start.offset <= SPAN_BYTES)
}

/// Decodes a record read back for `pubend`/`tick`; `None` if it is not intact or not that record.
fn check(bytes: &[u8], pubend: PubendId, tick: Tick) -> Option<Record> {
    match decode(bytes) {
        Decoded::Record(Entry::Data { pubend: p, tick: t, publisher, seq, payload }, used)
            if p == pubend && t == tick && used == bytes.len() =>
        {
            Some(Record {
                pubend,
                tick,
                publisher: PublisherId(publisher.0),
                seq: PublisherSeq(seq.0),
                payload: Bytes::copy_from_slice(payload),
            })
        }
        _ => None,
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.shared.queue.close();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_read_buffers_are_reused_and_bounded_in_number_and_size() {
        let shared = Shared::default();
        let mut span = shared.take_span();
        span.resize(4096, 0);
        let kept = span.as_ptr();
        shared.give_span(span);
        let again = shared.take_span();
        assert_eq!(again.as_ptr(), kept, "the next read reuses the buffer");
        // A span grown past the bound by one huge record is not kept.
        shared.give_span(Vec::with_capacity(SPAN_BYTES as usize + 1));
        assert_eq!(shared.spans.lock().unwrap().len(), 0);
        for _ in 0..SPARE_SPANS + 3 {
            shared.give_span(Vec::with_capacity(16));
        }
        assert_eq!(shared.spans.lock().unwrap().len(), SPARE_SPANS);
    }
}
