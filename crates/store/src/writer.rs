//! The group writer: the only code that writes the log. It encodes a whole group into one
//! buffer, writes it with one positioned write, syncs once (per the fsync policy), then
//! publishes the records to the catalog and completes the group. Runs on its own std thread so a
//! sync never blocks an async runtime's workers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog::{Loc, SegmentMeta};
use crate::codec::{self, MAX_BODY};
use crate::delete;
use crate::error::StoreError;
use crate::fs::{Fs, LogFile};
use crate::linger::Linger;
use crate::policy::FsyncPolicy;
use crate::queue::{Op, Taken};
use crate::recovery::segment_path;
use crate::reserve::Reserve;
use crate::store::{Completion, CompletionSink, OpKind, Shared};
use crate::types::{PubendId, Tick};

/// How far ahead of the records a segment is filled with zeros.
const FILL_AHEAD: u64 = 1 << 20;

/// A group commit this long is logged (what it wrote), as the broker's driver logs a long turn.
const LONG_GROUP: Duration = Duration::from_millis(50);

/// Where an encoded data record landed in the group buffer.
struct Placed {
    /// The append's place in the group: records and voids are published in that order.
    index: usize,
    pubend: PubendId,
    tick: Tick,
    loc: Loc,
}

/// The writer's state: the active segment and the group buffer, reused across groups.
pub(crate) struct GroupWriter {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) dir: PathBuf,
    pub(crate) shared: Arc<Shared>,
    pub(crate) policy: FsyncPolicy,
    pub(crate) segment_bytes: u64,
    /// [`crate::Options::fill_ahead`].
    pub(crate) fill: bool,
    pub(crate) file: Arc<dyn LogFile>,
    pub(crate) active: u64,
    pub(crate) end: u64,
    pub(crate) last_tick: BTreeMap<PubendId, Tick>,
    pub(crate) poisoned: bool,
    pub(crate) unsynced: bool,
    pub(crate) last_sync: Instant,
    /// When to take the next group while appends come steadily ([`crate::Options::linger`]).
    pub(crate) linger: Linger,
    pub(crate) buf: Vec<u8>,
    pub(crate) reserve: Reserve,
    /// The active segment has no record yet: its first write starts with the checkpoint.
    pub(crate) fresh: bool,
    /// The active segment holds written zeros (or records) up to here.
    pub(crate) filled: u64,
    /// A write met a full disk since released segments were last deleted: the next deletion
    /// happens in line, so the space is back before the next append.
    pub(crate) short_of_space: bool,
    /// How long each sync since the last report took (told to the sink, then cleared).
    pub(crate) sync_times: Vec<Duration>,
    /// Released segments are deleted within the commit, not on a thread of their own (a
    /// stepped store: a simulator must not race a thread).
    pub(crate) inline_deletes: bool,
}

fn completion(op: &Op, result: Result<(), StoreError>) -> Completion {
    let (kind, token, pubend, tick) = match op {
        Op::Append { token, pubend, tick, .. } => (OpKind::Append, token, pubend, tick),
        Op::Lease { token, pubend, tick } => (OpKind::Lease, token, pubend, tick),
        Op::Release { token, pubend, tick } => (OpKind::Release, token, pubend, tick),
        Op::Void { token, pubend } => (OpKind::Void, token, pubend, &Tick(0)),
    };
    Completion { token: *token, kind, pubend: *pubend, tick: *tick, result }
}

impl GroupWriter {
    /// The thread body: take groups until the store closes.
    pub(crate) fn run(mut self, mut sink: Box<dyn CompletionSink>) {
        let mut spare = Vec::new();
        loop {
            if let Some(until) = self.linger.pace() {
                // Plain sleep, not a wait on the queue: every arrival would wake it.
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
                let mut ops = spare;
                let spread = self.shared.queue.take_now(&mut ops);
                let fruitful = self.linger.waited(ops.len(), spread, Instant::now());
                self.shared.stats.lingers.fetch_add(1, Relaxed);
                self.shared.stats.lingers_fruitless.fetch_add(u64::from(!fruitful), Relaxed);
                spare = self.commit_group(ops, sink.as_mut());
                continue;
            }
            let wait = self.sync_due_in();
            match self.shared.queue.take(wait, spare) {
                Taken::Group(ops) => spare = self.commit_group(ops, sink.as_mut()),
                Taken::Idle => {
                    self.sync_if_due();
                    self.tell_syncs(sink.as_mut());
                    spare = Vec::new();
                }
                Taken::Closed => break,
            }
        }
        if self.unsynced && !self.poisoned {
            // A clean close makes everything durable, whatever the policy.
            let _ = self.sync();
        }
    }

    /// Commits `ops` (if any) and tells the pacing; returns the emptied vector for reuse.
    pub(crate) fn commit_group(&mut self, mut ops: Vec<Op>, sink: &mut dyn CompletionSink) -> Vec<Op> {
        if !ops.is_empty() {
            let started = Instant::now();
            let done = self.commit(&ops);
            let took = started.elapsed();
            if took >= LONG_GROUP {
                // Every append queued behind this group waited as long: say what made it large.
                let (ops, bytes) = (ops.len(), self.buf.len());
                tracing::warn!(took_ms = took.as_millis() as u64, ops, bytes, "a group commit took long");
            }
            self.tell_syncs(sink);
            sink.complete(done);
            self.linger.committed(ops.len(), started);
            ops.clear();
        }
        ops
    }

    /// Under `batch`, how long until unsynced bytes are due; `None` waits for work.
    fn sync_due_in(&self) -> Option<Duration> {
        match self.policy {
            FsyncPolicy::Batch(interval) if self.unsynced => Some(interval.saturating_sub(self.last_sync.elapsed())),
            _ => None,
        }
    }

    fn sync_if_due(&mut self) {
        if let FsyncPolicy::Batch(interval) = self.policy {
            if self.unsynced && self.last_sync.elapsed() >= interval {
                let _ = self.sync();
            }
        }
    }

    fn tell_syncs(&mut self, sink: &mut dyn CompletionSink) {
        for took in self.sync_times.drain(..) {
            sink.synced(took);
        }
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = self.file.sync_data();
        self.sync_times.push(started.elapsed());
        self.shared.stats.syncs.fetch_add(1, Relaxed);
        self.last_sync = started;
        match result {
            Ok(()) => {
                self.unsynced = false;
                Ok(())
            }
            Err(error) => {
                tracing::error!(%error, "fdatasync of the pubend log failed; refusing further writes");
                self.poisoned = true;
                Err(StoreError::io("syncing the log", &error))
            }
        }
    }

    /// Writes, syncs and publishes one group; returns one completion per operation.
    pub(crate) fn commit(&mut self, ops: &[Op]) -> Vec<Completion> {
        if self.poisoned {
            return ops.iter().map(|op| completion(op, Err(StoreError::Poisoned))).collect();
        }
        self.buf.clear();
        let mut placed = Vec::new();
        let mut rejected = BTreeMap::new();
        // Per pubend, the group's last tick (`None` after a void: any tick may follow).
        let mut ticks = BTreeMap::new();
        for (index, op) in ops.iter().enumerate() {
            if let Err(error) = self.encode(index, op, &mut ticks, &mut placed) {
                rejected.insert(index, error);
            }
        }
        let outcome = self.write_and_sync(ops, &mut placed);
        if outcome.is_ok() {
            for (pubend, last) in ticks {
                match last {
                    Some(tick) => self.last_tick.insert(pubend, tick),
                    None => self.last_tick.remove(&pubend),
                };
            }
            self.publish(ops, &placed, &rejected);
        }
        ops.iter()
            .enumerate()
            .map(|(index, op)| {
                let result = match (rejected.remove(&index), &outcome) {
                    (Some(error), _) => Err(error),
                    (None, Err(error)) => Err(error.clone()),
                    (None, Ok(())) => Ok(()),
                };
                completion(op, result)
            })
            .collect()
    }

    fn encode(
        &mut self,
        index: usize,
        op: &Op,
        ticks: &mut BTreeMap<PubendId, Option<Tick>>,
        placed: &mut Vec<Placed>,
    ) -> Result<(), StoreError> {
        match op {
            Op::Append { pubend, tick, publisher, seq, payload, .. } => {
                let last = match ticks.get(pubend) {
                    Some(last) => *last,
                    None => self.last_tick.get(pubend).copied(),
                };
                if let Some(last) = last.filter(|last| tick <= last) {
                    return Err(StoreError::TickNotIncreasing { tick: tick.0, last: last.0 });
                }
                let len = codec::data_len(payload.len());
                if len > MAX_BODY {
                    return Err(StoreError::TooLarge { len, limit: MAX_BODY });
                }
                let offset = self.buf.len() as u64;
                codec::encode_data(&mut self.buf, *pubend, *tick, *publisher, *seq, payload);
                ticks.insert(*pubend, Some(*tick));
                let loc = Loc { segment: 0, offset, len: len as u32, publisher: *publisher, seq: *seq };
                placed.push(Placed { index, pubend: *pubend, tick: *tick, loc });
            }
            Op::Lease { pubend, tick, .. } => codec::encode_lease(&mut self.buf, *pubend, *tick),
            Op::Release { pubend, tick, .. } => codec::encode_release(&mut self.buf, *pubend, *tick),
            Op::Void { pubend, .. } => {
                codec::encode_void(&mut self.buf, *pubend);
                ticks.insert(*pubend, None);
            }
        }
        Ok(())
    }

    fn write_and_sync(&mut self, ops: &[Op], placed: &mut [Placed]) -> Result<(), StoreError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut written = self.write_group();
        self.short_of_space |= matches!(written, Err(StoreError::NoSpace { .. }));
        let releasing = ops.iter().any(|op| matches!(op, Op::Release { .. } | Op::Void { .. }));
        if matches!(written, Err(StoreError::NoSpace { .. })) && releasing && self.reserve.free() {
            written = self.write_group();
        }
        let base = written?;
        placed.iter_mut().for_each(|p| {
            p.loc.offset += base;
            p.loc.segment = self.active;
        });
        self.unsynced = true;
        let stats = &self.shared.stats;
        stats.groups.fetch_add(1, Relaxed);
        stats.appends.fetch_add(placed.len() as u64, Relaxed);
        stats.max_group.fetch_max(placed.len() as u64, Relaxed);
        stats.bytes.fetch_add(self.buf.len() as u64, Relaxed);
        let forced = ops.iter().any(|op| matches!(op, Op::Lease { .. }));
        match self.policy {
            FsyncPolicy::Always => self.sync(),
            _ if forced => self.sync(),
            FsyncPolicy::Batch(_) => {
                self.sync_if_due();
                Ok(())
            }
            FsyncPolicy::Never => Ok(()),
        }
    }

    /// Writes the group buffer (after the checkpoint, in a fresh segment) with one positioned
    /// write; returns the offset of the group's first byte.
    fn write_group(&mut self) -> Result<u64, StoreError> {
        if self.end > 0 && self.end + self.buf.len() as u64 > self.segment_bytes {
            self.rotate()?;
        }
        let mut head = Vec::new();
        if self.fresh {
            for pubend in self.shared.lock_catalog().checkpoint() {
                codec::encode_lease(&mut head, pubend.pubend, pubend.lease);
                codec::encode_release(&mut head, pubend.pubend, pubend.released);
                for (publisher, seq, tick) in pubend.publishers {
                    codec::encode_publisher(&mut head, pubend.pubend, tick, publisher, seq);
                }
            }
        }
        let base = self.end + head.len() as u64;
        self.fill_ahead(base + self.buf.len() as u64)?;
        let bytes = if head.is_empty() {
            &self.buf
        } else {
            head.extend_from_slice(&self.buf);
            &head
        };
        if let Err(error) = self.file.write_all_at(bytes, self.end) {
            // Cut off whatever part reached the file, so no half record stays in the middle of
            // the segment; the next group overwrites the place.
            let _ = self.file.set_len(self.end);
            self.filled = self.end;
            tracing::warn!(%error, "appending to the pubend log failed");
            return Err(StoreError::io("appending to the log", &error));
        }
        self.end += bytes.len() as u64;
        self.fresh = false;
        Ok(base)
    }

    /// Makes sure the file holds written zeros up to at least `needed`, filling up to
    /// [`FILL_AHEAD`] further (within the segment size). Groups then overwrite blocks that are
    /// already allocated and written, so their `fdatasync` flushes data only: no file size, no
    /// block allocation, no unwritten-extent conversion, hence no file system journal commit
    /// (which costs milliseconds on a busy ext4). The fill is synced by the group's own sync.
    fn fill_ahead(&mut self, needed: u64) -> Result<(), StoreError> {
        if needed <= self.filled {
            return Ok(());
        }
        if !self.fill {
            // The group's own write extends the file.
            self.filled = needed;
            return Ok(());
        }
        let mut target = (self.filled + FILL_AHEAD).min(self.segment_bytes).max(needed);
        let zeros = vec![0; (target - self.filled) as usize];
        let mut result = self.file.write_all_at(&zeros, self.filled);
        if result.is_err() && target > needed {
            // A nearly full disk: fill only what this group needs.
            let _ = self.file.set_len(self.filled);
            target = needed;
            result = self.file.write_all_at(&zeros[..(needed - self.filled) as usize], self.filled);
        }
        match result {
            Ok(()) => {
                self.filled = target;
                Ok(())
            }
            Err(error) => {
                let _ = self.file.set_len(self.filled);
                Err(StoreError::io("filling a segment with zeros", &error))
            }
        }
    }

    /// Starts the next segment. Its first write carries the checkpoint (every pubend's lease and
    /// release prefix), so deleting older segments never loses them.
    fn rotate(&mut self) -> Result<(), StoreError> {
        if self.unsynced {
            self.sync()?;
        }
        let next = self.active + 1;
        let path = segment_path(&self.dir, next);
        let file = self.fs.open(&path).map_err(|e| StoreError::io("creating a segment", &e))?;
        self.fs.sync_dir(&self.dir).map_err(|e| StoreError::io("syncing the log directory", &e))?;
        {
            let mut catalog = self.shared.lock_catalog();
            let meta = SegmentMeta { file: Arc::clone(&file), high: BTreeMap::new() };
            catalog.segments.insert(next, meta);
            catalog.active = next;
        }
        self.file = file;
        self.active = next;
        self.end = 0;
        self.filled = 0;
        self.fresh = true;
        Ok(())
    }

    /// Makes the group visible to readers and applies leases and releases; deletes segments
    /// that became fully released (after making the release records durable).
    fn publish(&mut self, ops: &[Op], placed: &[Placed], rejected: &BTreeMap<usize, StoreError>) {
        // Released index entries are freed after the lock is let go: readers and the next
        // group wait for the lock, not for the allocator.
        let mut forgotten = Vec::new();
        let gone = {
            let mut catalog = self.shared.lock_catalog();
            // In submission order: a void forgets the records before it, not those after.
            let mut placed = placed.iter().peekable();
            for (index, op) in ops.iter().enumerate() {
                match op {
                    _ if rejected.contains_key(&index) => {}
                    Op::Append { .. } => {
                        if let Some(p) = placed.next_if(|p| p.index == index) {
                            catalog.add_data(p.pubend, p.tick, p.loc);
                        }
                    }
                    Op::Lease { pubend, tick, .. } => catalog.raise_lease(*pubend, *tick),
                    Op::Release { pubend, tick, .. } => forgotten.push(catalog.release(*pubend, *tick)),
                    Op::Void { pubend, .. } => forgotten.push(catalog.void(*pubend)),
                }
            }
            catalog.take_released_segments()
        };
        free_elsewhere(forgotten);
        if gone.is_empty() || (self.unsynced && self.sync().is_err()) {
            return;
        }
        let (fs, dir, shared) = (Arc::clone(&self.fs), self.dir.clone(), Arc::clone(&self.shared));
        let delete = move |gradually: bool| {
            for id in gone {
                let path = segment_path(&dir, id);
                let removed = match gradually {
                    true => delete::remove_gradually(&*fs, &path, delete::SLICE, delete::PAUSE),
                    false => fs.remove(&path),
                };
                if let Err(error) = removed {
                    tracing::warn!(%error, segment = id, "could not delete a released segment");
                }
                shared.stats.segments_deleted.fetch_add(1, Relaxed);
            }
        };
        if std::mem::take(&mut self.short_of_space) || !self.reserve.present || self.inline_deletes {
            // The disk was full: the space must be back before the next append.
            delete(false);
        } else {
            // Deleting a full segment costs the file system milliseconds, and every append
            // queued behind it (a live publisher's acknowledgement) would wait: it goes on a
            // thread of its own, a slice at a time (see `delete.rs`). The release records are
            // durable already, so the files are dead whenever they go (a crash first leaves them
            // to the next open, which finds them released).
            let deleting = std::thread::Builder::new().name("tidings-store-delete".into()).spawn(move || delete(true));
            if let Err(error) = deleting {
                tracing::warn!(%error, "could not start deleting released segments; they go at the next open");
            }
        }
        self.reserve.ensure();
    }
}

/// Frees released index entries on a thread of their own when there are many: a release
/// during a catch-up forgets hundreds of thousands, which took 3-7 ms of this thread while
/// live appends (and their publishers' acknowledgements) waited behind it.
fn free_elsewhere(forgotten: Vec<BTreeMap<Tick, Loc>>) {
    if forgotten.iter().map(BTreeMap::len).sum::<usize>() < 1024 {
        return;
    }
    let freeing = std::thread::Builder::new().name("tidings-store-free".into()).spawn(move || drop(forgotten));
    if let Err(error) = freeing {
        tracing::debug!(%error, "could not start a thread to free released index entries; freed here");
    }
}
