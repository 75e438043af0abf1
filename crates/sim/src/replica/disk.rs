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

use std::path::Path;
use std::sync::Arc;

use tidings_replica::{Journal, Recovered, Write};
use tidings_store::{FsyncPolicy, MemFs, Options, PubendId, Store, Tick, Token};

use crate::replica::JOURNAL_PART;
use crate::rng::Rng;

/// Where the store lives on the simulated file system.
const DIR: &str = "/data/replica";
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
    open: Option<(Store, Journal)>,
    /// Submitted writes not yet synced: (token, write number, journal release once synced).
    queued: Vec<(Token, u64, Option<Tick>)>,
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
        self.due = None;
        let fs: Arc<dyn tidings_store::Fs> = Arc::new(self.fs.clone());
        let (store, _) = Store::open_stepped(fs, Path::new(DIR), options()).map_err(|e| e.to_string())?;
        let (mut journal, recovered) = Journal::open(&store, PUBEND).map_err(|e| e.to_string())?;
        journal.set_part_bytes(JOURNAL_PART);
        self.open = Some((store, journal));
        Ok(recovered)
    }

    /// Writes the journal's creation mark and syncs it (a group's birth on this replica).
    pub(crate) fn create(&mut self) -> Result<(), String> {
        self.submit(&Write::default(), 0)?;
        self.step().map(|_| ())
    }

    /// Queues one write; it syncs at `due` or with an earlier group.
    pub(crate) fn submit(&mut self, write: &Write, due: u64) -> Result<(), String> {
        let Some((store, journal)) = &mut self.open else { return Err("write to a closed disk".into()) };
        // A checkpoint's snapshot in parts, the write last: only its token reports the write.
        let records = journal.records(write);
        let release = Journal::release_below(write, &records);
        let mut token = Token(self.next_token);
        for record in records {
            self.next_token += 1;
            token = Token(self.next_token);
            store.append(token, record).map_err(|e| e.to_string())?;
        }
        self.queued.push((token, write.number, release));
        self.due.get_or_insert(due);
        Ok(())
    }

    /// Commits every queued write as one group; the last write number now synced, if any.
    pub(crate) fn step(&mut self) -> Result<Option<u64>, String> {
        self.due = None;
        let Some((store, _)) = &self.open else { return Ok(None) };
        let mut last = None;
        let mut release = None;
        for completion in store.step() {
            completion.result.map_err(|e| format!("journal write failed: {e}"))?;
            let position = self.queued.iter().position(|(t, _, _)| *t == completion.token);
            if let Some(position) = position {
                let (_, number, releases) = self.queued.remove(position);
                last = Some(number);
                release = releases.or(release);
            }
        }
        if let Some(tick) = release {
            self.next_token += 1;
            store.release(Token(self.next_token), PUBEND, tick).map_err(|e| e.to_string())?;
        }
        Ok(last)
    }

    /// Takes the replica's disk down as `crash` leaves it (`rng` seeds the tears).
    pub(crate) fn crash(&mut self, crash: Crash, rng: &mut Rng) {
        if crash != Crash::Wipe && !self.queued.is_empty() && rng.chance(50) {
            self.fs.fail_syncs(true);
            if let Some((store, _)) = &self.open {
                store.step();
            }
            self.fs.fail_syncs(false);
        }
        self.open = None;
        self.queued.clear();
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
