//! A simulated broker's data directory: the real pubend log (`tidings-store`, opened stepped so
//! its group commits run when the simulator says) on an in-memory file system ([`MemFs`]), and
//! the incarnation counter the broker keeps beside it (`crates/broker/src/storage.rs`).
//!
//! A crash is one of three [`Crash`]es, chosen by the run before it happens: the process dies
//! (the page cache keeps what was written, synced or not), the power goes (`MemFs::power_loss`:
//! synced bytes plus a torn in-order prefix of the rest), or the broker comes back on an empty
//! directory. Either of the first two may strike in the middle of a group commit, between its
//! write and its `fdatasync` (the sync fails, nobody hears the completions). Reopening the store
//! then runs the real recovery (torn tail cut, damage reported as lost ranges).

use std::path::Path;
use std::sync::Arc;

use tidings_delivery::{PubendId, Tick, TickRange};
use tidings_store::{Completion, FsyncPolicy, MemFs, Options, ReadItem, Store, StoreError, Token};

/// What the next crash of a broker does to its data directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Crash {
    /// The process dies; written bytes survive in the page cache.
    #[default]
    Process,
    /// The machine loses power: unsynced writes are lost, the last kept one torn.
    PowerLoss,
    /// The broker restarts on an empty data directory (a replaced disk, a wiped volume).
    Empty,
}

/// Where the log lives on the simulated file system.
const LOG_DIR: &str = "/data/log";
/// Where the incarnation counter lives.
const INCARNATION: &str = "/data/incarnation";

/// The log's options in the simulator: fsync `always` (a publish is acknowledged once synced,
/// as the broker's default) and small segments, so rotation, checkpoints at segment starts and
/// deletion after release happen within a run.
fn options() -> Options {
    Options { fsync: FsyncPolicy::Always, segment_bytes: 4096, reserve_bytes: 0, ..Options::default() }
}

/// One broker's data directory (the simulator's `Layer::Store`: it outlives the broker's
/// crashes, minus what [`Disk::crash`] takes).
#[derive(Default)]
pub struct Disk {
    fs: MemFs,
    /// The open log, while the broker is up.
    store: Option<Store>,
    /// Operations submitted since the last step (a crash may strike inside that step).
    queued: bool,
    /// Tokens of submitted operations.
    next_token: u64,
    /// What the next crash does (reset to [`Crash::Process`] by each crash).
    pub next_crash: Crash,
    /// Crashes so far (seeds their tears).
    crashes: u64,
    /// The ack leases (`StoreAction::AckLease`), as the broker's durable store keeps them: each
    /// write synced at once (redb commits with immediate durability before the broker feeds
    /// its completion), so only an empty directory loses them.
    pub ack_leases: std::collections::BTreeMap<PubendId, Tick>,
    /// The broker's last start found no incarnation counter: a first start or an empty
    /// directory (the broker's `empty_start`, which floors its late starts).
    pub fresh: bool,
}

impl Disk {
    /// Opens the log (recovering it); `Err` when the store refuses, which a run reports.
    pub(crate) fn open(&mut self) -> Result<tidings_store::Recovered, StoreError> {
        self.store = None;
        let fs: Arc<dyn tidings_store::Fs> = Arc::new(self.fs.clone());
        let (store, recovered) = Store::open_stepped(fs, Path::new(LOG_DIR), options())?;
        self.store = Some(store);
        self.queued = false;
        Ok(recovered)
    }

    /// The open log (`None` while the broker is down or its log would not open).
    pub(crate) fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// A token for the next submitted operation (submitted ones wait for [`Disk::step`]).
    pub(crate) fn token(&mut self) -> Token {
        self.queued = true;
        self.next_token += 1;
        Token(self.next_token)
    }

    /// Runs one group commit of everything submitted; its completions, in order.
    pub(crate) fn step(&mut self) -> Vec<Completion> {
        self.queued = false;
        self.store.as_ref().map(Store::step).unwrap_or_default()
    }

    /// The broker crashed: the log is dropped as the chosen [`Crash`] leaves it. With operations
    /// queued, half the crashes (a choice seeded by `seed`) strike inside their group commit,
    /// after the write and before the sync returns.
    pub(crate) fn crash(&mut self, seed: u64) {
        self.crashes += 1;
        let mut rng = crate::rng::Rng::new(seed ^ self.crashes.rotate_left(17));
        let (mid_commit, seed) = (rng.chance(50), rng.next_u64());
        if mid_commit && self.queued {
            self.fs.fail_syncs(true);
            self.step();
            self.fs.fail_syncs(false);
        }
        match std::mem::take(&mut self.next_crash) {
            Crash::Process => self.store = None,
            Crash::PowerLoss => {
                self.fs.power_loss(seed);
                self.store = None;
                self.fs.restart();
            }
            Crash::Empty => {
                self.store = None;
                self.fs = MemFs::new();
                self.ack_leases.clear();
            }
        }
        self.queued = false;
    }

    /// The broker's incarnation rule (`crates/broker/src/storage.rs`): the larger of the stored
    /// counter plus one and the wall clock in microseconds, written back durably. An empty
    /// directory has no counter, so only the clock keeps the new life above the old one.
    pub(super) fn incarnation(&mut self, clock_us: u64) -> u64 {
        let file = self.fs.open_file(INCARNATION);
        let mut bytes = [0; 8];
        let stored = match file.size() {
            Ok(8) => file.read_exact_at(&mut bytes, 0).map_or(0, |()| u64::from_le_bytes(bytes)),
            _ => 0,
        };
        self.fresh = stored == 0;
        let incarnation = (stored + 1).max(clock_us);
        // The simulated disk does not fail these; a failure would show as a repeated number.
        let _ = file.write_all_at(&incarnation.to_le_bytes(), 0).and_then(|()| file.sync_data());
        incarnation
    }

    /// How many records of `pubend` the log still holds in `range` (0 while it is closed).
    pub(super) fn held(&self, pubend: PubendId, range: TickRange) -> usize {
        let Some(store) = &self.store else { return 0 };
        let wanted = tidings_store::TickRange {
            first: tidings_store::Tick(range.from.0),
            last: tidings_store::Tick(range.to.0),
        };
        let items = store.read(tidings_store::PubendId(pubend.0), wanted, usize::MAX).unwrap_or_default();
        items.iter().filter(|item| matches!(item, ReadItem::Data(_))).count()
    }

    /// Every record of `pubend` in the open log above `after`: (tick, payload), and the ranges
    /// the log reports lost.
    pub(super) fn records(&self, pubend: PubendId, after: Tick) -> tidings_delivery::StoreInput {
        let range = TickRange { from: after.next(), to: Tick(u64::MAX) };
        match &self.store {
            Some(store) => tidings_node::journal::read(store, pubend, range),
            None => tidings_delivery::StoreInput::ReadDone { pubend, range, records: Vec::new(), lost: Vec::new() },
        }
    }
}
