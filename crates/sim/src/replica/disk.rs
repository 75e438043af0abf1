//! A simulated replica's data directory: its journal (`tidings-replica`'s [`Journal`]) in the
//! real pubend log (`tidings-store`, opened stepped so group commits run when the simulator
//! says) on an in-memory file system ([`MemFs`]). A restart runs the store's real recovery and
//! folds the journal back.
//!
//! Writes queue in the store and sync as one group commit at a seeded delay; only then is the
//! replica told. A process crash loses the queued writes, or half the time strikes inside the
//! group commit (written, the sync failed, nobody told): those bytes survive in the page cache.
//! A power loss keeps the synced bytes and a torn in-order prefix of the rest. A wipe is a new,
//! empty file system. A synced checkpoint (a write with a snapshot) releases the journal records
//! before it, as the broker does, so a restart reads the checkpoint and what followed.
//!
//! A compaction's snapshot is saved apart, in a second store on the same file system (as the
//! broker's `<data dir>/replica-snapshots`), synced with the same step and crashed with it;
//! the checkpoint that names it is written once it is saved, and once that is synced the
//! snapshots saved before it are released.

use std::path::Path;
use std::sync::Arc;

use tidings_replica::{Journal, Recovered, Write};
use tidings_store::{FsyncPolicy, MemFs, Options, PubendId, Store, Tick, Token};

use crate::replica::JOURNAL_PART;
use crate::rng::Rng;

/// Where the store lives on the simulated file system.
const DIR: &str = "/data/replica";
/// Where the snapshots saved apart live.
const SNAPSHOTS: &str = "/data/replica-snapshots";
/// The journal's pubend in the store (one group per run).
const PUBEND: PubendId = PubendId(1);

/// How a replica goes down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Crash {
    /// The process dies: the page cache keeps what was written.
    Process,
    /// The power goes: unsynced bytes are lost, the last kept one torn.
    PowerLoss,
    /// The disk is replaced by an empty one.
    Wipe,
}

/// One replica's data directory.
#[derive(Default)]
pub(crate) struct Disk {
    fs: MemFs,
    /// The journal's store, the snapshots' store, the journal.
    open: Option<(Store, Store, Journal)>,
    /// Submitted writes not yet synced: (token, write number, the journal's and the snapshots'
    /// store's releases once synced).
    queued: Vec<(Token, u64, Option<Tick>, Option<Tick>)>,
    /// Snapshots being saved: (the last part's token, the index).
    saving: Vec<(Token, u64)>,
    next_token: u64,
    /// When the queued writes sync.
    pub(crate) due: Option<u64>,
}

fn options() -> Options {
    Options { fsync: FsyncPolicy::Always, segment_bytes: 64 << 10, reserve_bytes: 0, ..Options::default() }
}

impl Disk {
    /// Opens the store and reads the journal back: `Ok(None)` for an empty journal (a wiped
    /// disk), `Err` for a store that will not open or a damaged journal.
    pub(crate) fn open(&mut self) -> Result<Option<Recovered>, String> {
        self.open = None;
        self.queued.clear();
        self.saving.clear();
        self.due = None;
        let fs: Arc<dyn tidings_store::Fs> = Arc::new(self.fs.clone());
        let (store, _) = Store::open_stepped(Arc::clone(&fs), Path::new(DIR), options()).map_err(|e| e.to_string())?;
        let (snapshots, _) = Store::open_stepped(fs, Path::new(SNAPSHOTS), options()).map_err(|e| e.to_string())?;
        let (mut journal, recovered) = Journal::open(&store, &snapshots, PUBEND).map_err(|e| e.to_string())?;
        journal.set_part_bytes(JOURNAL_PART);
        self.open = Some((store, snapshots, journal));
        Ok(recovered)
    }

    /// Writes the journal's creation mark and syncs it (a group's birth on this replica).
    pub(crate) fn create(&mut self) -> Result<(), String> {
        self.submit(&Write::default(), 0)?;
        self.step().map(|_| ())
    }

    /// Queues one write; it syncs at `due` or with an earlier group.
    pub(crate) fn submit(&mut self, write: &Write, due: u64) -> Result<(), String> {
        let Some((store, _, journal)) = &mut self.open else { return Err("write to a closed disk".into()) };
        // A checkpoint's snapshot in parts, the write last: only its token reports the write.
        let records = journal.records(write);
        let release = Journal::release_below(write, &records);
        let release_saved = journal.saved_release_below(write);
        let mut token = Token(self.next_token);
        for record in records {
            self.next_token += 1;
            token = Token(self.next_token);
            store.append(token, record).map_err(|e| e.to_string())?;
        }
        self.queued.push((token, write.number, release, release_saved));
        self.due.get_or_insert(due);
        Ok(())
    }

    /// Queues the saving of the snapshot at `index` in the snapshots' store; it is saved at
    /// `due` or with an earlier group.
    pub(crate) fn save(&mut self, index: u64, data: &bytes::Bytes, due: u64) -> Result<(), String> {
        let Some((_, snapshots, journal)) = &mut self.open else { return Err("save to a closed disk".into()) };
        let mut token = Token(self.next_token);
        for record in journal.save(index, data) {
            self.next_token += 1;
            token = Token(self.next_token);
            snapshots.append(token, record).map_err(|e| e.to_string())?;
        }
        self.saving.push((token, index));
        self.due.get_or_insert(due);
        Ok(())
    }

    /// Commits every queued write and save as one group in each store: the last write number
    /// now synced, if any, and the snapshots now saved.
    pub(crate) fn step(&mut self) -> Result<(Option<u64>, Vec<u64>), String> {
        self.due = None;
        let Some((store, snapshots, _)) = &self.open else { return Ok((None, Vec::new())) };
        let mut last = None;
        let (mut release, mut release_saved) = (None, None);
        for completion in store.step() {
            completion.result.map_err(|e| format!("journal write failed: {e}"))?;
            let position = self.queued.iter().position(|(t, ..)| *t == completion.token);
            if let Some(position) = position {
                let (_, number, releases, releases_saved) = self.queued.remove(position);
                last = Some(number);
                release = releases.or(release);
                release_saved = releases_saved.or(release_saved);
            }
        }
        let mut saved = Vec::new();
        for completion in snapshots.step() {
            completion.result.map_err(|e| format!("snapshot save failed: {e}"))?;
            if let Some(position) = self.saving.iter().position(|(t, _)| *t == completion.token) {
                saved.push(self.saving.remove(position).1);
            }
        }
        for (store, tick) in [(store, release), (snapshots, release_saved)] {
            if let Some(tick) = tick {
                self.next_token += 1;
                store.release(Token(self.next_token), PUBEND, tick).map_err(|e| e.to_string())?;
            }
        }
        Ok((last, saved))
    }

    /// Takes the replica's disk down as `crash` leaves it (`rng` seeds the tears).
    pub(crate) fn crash(&mut self, crash: Crash, rng: &mut Rng) {
        if crash != Crash::Wipe && !(self.queued.is_empty() && self.saving.is_empty()) && rng.chance(50) {
            self.fs.fail_syncs(true);
            if let Some((store, snapshots, _)) = &self.open {
                store.step();
                snapshots.step();
            }
            self.fs.fail_syncs(false);
        }
        self.open = None;
        self.queued.clear();
        self.saving.clear();
        self.due = None;
        match crash {
            Crash::Process => {}
            Crash::PowerLoss => {
                self.fs.power_loss(rng.next_u64());
                self.fs.restart();
            }
            Crash::Wipe => self.fs = MemFs::new(),
        }
    }
}
