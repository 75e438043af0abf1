//! [`Log`]: the raft log raft-rs reads, in memory: the last snapshot (the applied state at its
//! index, encoded) and the entries after it. raft-rs's own `MemStorage` cannot hold a snapshot's
//! data apart from its entries (its snapshot is always at the commit index, with no data), so a
//! compacted log, which must hand a follower behind it the state at a known index, is kept here.
//!
//! Like `MemStorage`, it holds everything handed to the shell, synced or not (see `ready`).

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

/// A replica's raft log: the snapshot at `snapshot.index` and the entries after it.
pub(crate) struct Log {
    hard_state: HardState,
    conf_state: ConfState,
    /// The last snapshot taken or installed (index 0: none, the log starts at 1).
    snapshot: Snapshot,
    /// Entries from `snapshot.index + 1`, contiguous.
    entries: Vec<Entry>,
    /// The bytes of the entries' data: what a compaction frees.
    bytes: u64,
    /// Set when raft-rs asked for a snapshot for a member the last one does not name (added
    /// since): the next `Ready` compacts at once, so the snapshot it sends names it (raft-rs
    /// refuses a snapshot that does not, `members`).
    stale_for: std::cell::Cell<bool>,
}

impl Log {
    /// A log of the members `conf` (voters, learners) starting after `snapshot` (index 0: from
    /// the start); `conf` is the membership at the snapshot's index.
    pub(crate) fn new(conf: crate::group::Conf, snapshot: Option<(u64, u64, bytes::Bytes)>) -> Self {
        let conf_state = ConfState::from(conf);
        let mut log = Self {
            hard_state: HardState::default(),
            conf_state,
            snapshot: Snapshot::default(),
            entries: Vec::new(),
            bytes: 0,
            stale_for: std::cell::Cell::new(false),
        };
        if let Some((index, term, data)) = snapshot {
            log.set_snapshot(index, term, data);
        }
        log
    }

    fn set_snapshot(&mut self, index: u64, term: u64, data: bytes::Bytes) {
        let meta = self.snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        self.snapshot.data = data;
    }

    /// The index of the entry before the first held (the snapshot's).
    pub(crate) fn base(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    /// Whether a member was refused the last snapshot for not being named in it; cleared.
    pub(crate) fn take_stale(&self) -> bool {
        self.stale_for.replace(false)
    }

    /// The last snapshot.
    pub(crate) fn snapshot_ref(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The bytes of the entries held.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The entries held, after the snapshot.
    pub(crate) fn entries_held(&self) -> &[Entry] {
        &self.entries
    }

    /// The members as last applied: what the next snapshot records.
    pub(crate) fn set_conf_state(&mut self, conf_state: ConfState) {
        self.conf_state = conf_state;
    }

    /// The members as last applied, as raft-rs has them: a compaction starting now takes them.
    pub(crate) fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The members as last applied (voters, learners), each in id order.
    pub(crate) fn conf(&self) -> crate::group::Conf {
        crate::members::conf_of(&self.conf_state)
    }

    /// Sets the hard state.
    pub(crate) fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    /// The hard state.
    pub(crate) fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// Appends entries; the first one's index replaces everything from there on. `Err` when
    /// they would leave a gap or rewrite the snapshot.
    pub(crate) fn append(&mut self, entries: &[Entry]) -> Result<(), String> {
        let Some(first) = entries.first() else { return Ok(()) };
        let last = self.base() + self.entries.len() as u64;
        if first.index <= self.base() || first.index > last + 1 {
            return Err(format!("entries from {} onto a log of {}..={last}", first.index, self.base() + 1));
        }
        let keep = (first.index - self.base() - 1) as usize;
        for dropped in self.entries.drain(keep..) {
            self.bytes -= dropped.data.len() as u64;
        }
        self.bytes += entries.iter().map(|e| e.data.len() as u64).sum::<u64>();
        self.entries.extend_from_slice(entries);
        Ok(())
    }

    /// Takes the state applied at `index` (held, at or below the last entry), with the members
    /// `conf` there, as the snapshot and drops the entries up to it.
    pub(crate) fn compact(&mut self, index: u64, conf: ConfState, data: Vec<u8>) -> Result<(), String> {
        let term = self.term(index).map_err(|e| format!("compacting to {index}: {e}"))?;
        let drop = index.saturating_sub(self.base()) as usize;
        for dropped in self.entries.drain(..drop.min(self.entries.len())) {
            self.bytes -= dropped.data.len() as u64;
        }
        self.set_snapshot(index, term, data.into());
        self.snapshot.mut_metadata().set_conf_state(conf);
        Ok(())
    }

    /// Replaces the whole log with a snapshot received from the leader.
    pub(crate) fn install(&mut self, snapshot: &Snapshot) {
        let meta = snapshot.get_metadata();
        self.entries.clear();
        self.bytes = 0;
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.conf_state = meta.get_conf_state().clone();
        self.set_snapshot(meta.index, meta.term, snapshot.data.clone());
    }
}

impl Storage for Log {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState { hard_state: self.hard_state.clone(), conf_state: self.conf_state.clone() })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let first = self.base() + 1;
        if low < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > first + self.entries.len() as u64 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let mut out = self.entries[(low - first) as usize..(high - first) as usize].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let base = self.base();
        if idx == base {
            return Ok(self.snapshot.get_metadata().term);
        }
        if idx < base {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        match self.entries.get((idx - base - 1) as usize) {
            Some(e) => Ok(e.term),
            None => Err(raft::Error::Store(StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.base() + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.base() + self.entries.len() as u64)
    }

    /// The last snapshot: raft-rs asks for one for a follower behind the first index. It is
    /// never empty then (the log starts after it).
    /// A member the last snapshot does not name gets none until the next compaction (see
    /// `stale_for`).
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        if self.base() < request_index || self.base() == 0 {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        let named = self.snapshot.get_metadata().get_conf_state();
        if !named.voters.contains(&to) && !named.learners.contains(&to) {
            self.stale_for.set(true);
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(self.snapshot.clone())
    }
}
