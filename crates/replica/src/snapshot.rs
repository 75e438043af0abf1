//! Log compaction and snapshots (issue 40): a replica keeps only the raft log after its last
//! snapshot, the pubend's applied state encoded ([`PubendReplica::encode`]) at a known index.
//! A follower behind the leader's first index gets that snapshot (raft-rs's `MsgSnapshot`),
//! checked ([`PubendReplica::decode`]: checksum and shape) before raft-rs sees it, written to its
//! journal and synced before it answers, and goes on from the log's tail.
//!
//! **Trigger.** A replica compacts when the entries it holds reach
//! [`GroupSettings::compact_bytes`] and twice the last snapshot's size: memory and journal stay
//! bounded by the trigger plus the state subscribers still need, and snapshots (whose cost is
//! the state's size) never cost more than half the log writes they replace. A leader waits
//! until every live follower has the entries it drops (one that does not would need the whole
//! state sent), unless the log reached four times the trigger.
//!
//! **Bound.** A snapshot larger than one REPLICA frame travels in chunks (`chunks`), so a state
//! of any size up to [`GroupSettings::max_snapshot`] (1 GiB by default) is compacted; a larger
//! one (a backlog of unreleased records that big) is not compacted until releases shrink it,
//! and the log grows meanwhile (`too_large` in the counts).

use raft::eraftpb::{MessageType, Snapshot};
use raft::{SnapshotStatus, StateRole};

use crate::command::{DecodeError, Reader};
use crate::group::{Action, GroupSettings, Running, Write};
use crate::state::{PubendReplica, Record};

const VERSION: u8 = 1;

/// Snapshot traffic on one replica, for an operator.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SnapshotCounts {
    /// Snapshots this replica took of its own state (each a compaction).
    pub taken: u64,
    /// Compactions ended before they were whole by a snapshot installed from the leader
    /// (`compaction`).
    pub aborted: u64,
    /// Snapshots sent to a follower behind this leader's first index.
    pub sent: u64,
    /// Snapshots received and installed.
    pub received: u64,
    /// Snapshots received and refused (corrupt or foreign): the leader sends another.
    pub refused: u64,
    /// Compactions skipped because the state was over the maximum snapshot
    /// ([`GroupSettings::max_snapshot`]).
    pub too_large: u64,
    /// Chunks of snapshots sent (a snapshot that fits in one message counts none).
    pub chunks_sent: u64,
    /// Not a count but a level: chunks a leader has queued and not sent yet (see `pace`),
    /// non-zero while a snapshot is in flight.
    pub chunks_queued: u64,
    /// Chunks received and kept for assembly.
    pub chunks_received: u64,
    /// Chunks dropped: stale (a deposed leader's, of a snapshot committed past or earlier than
    /// the one in assembly) or faulty (over the maximum, past its length, overlapping another).
    pub chunks_refused: u64,
}

impl PubendReplica {
    /// The snapshot's bytes: everything a successor needs (the unreleased records, the release
    /// point, silence, the last tick, each publisher's released high-water mark), then a CRC32
    /// of all of it.
    pub fn encode(&self) -> Vec<u8> {
        // Sized once: grown by doubling, a 100 MB state was copied and faulted in again at
        // every step, on the driver's task.
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_head(&mut out, self.records.len() as u64);
        for r in self.records.values() {
            Self::encode_record(&mut out, r);
        }
        self.encode_tail(&mut out);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The snapshot's start: the version, the header words and the record count.
    pub(crate) fn encode_head(&self, out: &mut Vec<u8>, count: u64) {
        out.push(VERSION);
        for w in [self.last_tick, self.silent_up_to, self.released_up_to, count] {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// One record of a snapshot.
    pub(crate) fn encode_record(out: &mut Vec<u8>, r: &Record) {
        for w in [r.tick, r.publisher, r.seq, r.payload.len() as u64] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&r.payload);
    }

    /// The snapshot's end before its CRC: each publisher's released high-water mark.
    pub(crate) fn encode_tail(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.released_seqs.len() as u64).to_le_bytes());
        for (&publisher, &seq) in &self.released_seqs {
            out.extend_from_slice(&publisher.to_le_bytes());
            out.extend_from_slice(&seq.to_le_bytes());
        }
    }

    /// The bytes [`PubendReplica::encode`] takes, without encoding.
    pub fn encoded_len(&self) -> usize {
        let records = 32 * self.records.len() + self.payload_bytes;
        1 + 32 + records + 8 + 16 * self.released_seqs.len() + 4
    }

    /// Reads a snapshot back: a wrong checksum, a truncated or over-long body, or a state no
    /// apply could have built (a record at or below the release point or past the last tick,
    /// out of order) is a [`DecodeError`], never a state.
    pub fn decode(bytes: &[u8]) -> Result<PubendReplica, DecodeError> {
        let Some((body, crc)) = bytes.split_last_chunk::<4>() else { return Err(DecodeError("truncated")) };
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return Err(DecodeError("snapshot checksum"));
        }
        let mut r = Reader(body);
        if r.byte()? != VERSION {
            return Err(DecodeError("unknown snapshot version"));
        }
        let mut state = PubendReplica {
            last_tick: r.word()?,
            silent_up_to: r.word()?,
            released_up_to: r.word()?,
            ..PubendReplica::default()
        };
        let count = r.word()?;
        let mut previous = state.released_up_to;
        for _ in 0..count {
            let (tick, publisher, seq) = (r.word()?, r.word()?, r.word()?);
            let len = usize::try_from(r.word()?).map_err(|_| DecodeError("payload length"))?;
            let payload = r.take(len)?.to_vec();
            if tick <= previous || tick > state.last_tick || state.recent.insert((publisher, seq), tick).is_some() {
                return Err(DecodeError("snapshot record out of order"));
            }
            previous = tick;
            state.payload_bytes += payload.len();
            state.records.insert(tick, Record { tick, publisher, seq, payload });
        }
        for _ in 0..r.word()? {
            state.released_seqs.insert(r.word()?, r.word()?);
        }
        if !r.0.is_empty() {
            return Err(DecodeError("trailing bytes"));
        }
        Ok(state)
    }
}

impl Running {
    /// Compacts the log below the applied index when the trigger is reached (see this module),
    /// a slice of the snapshot per call (`compaction`).
    pub(crate) fn maybe_compact(&mut self, settings: &GroupSettings, out: &mut Vec<Action>) {
        if self.compaction.is_none() && (self.saving.is_some() || !self.should_compact(settings, out)) {
            return;
        }
        let compaction = self.compaction.get_or_insert_with(|| {
            let log = self.raw.store();
            let applied = self.raw.raft.raft_log.applied;
            let conf = log.conf_state().clone();
            crate::compaction::Compaction::start(&self.state, applied, conf, settings.snapshot_drops_record)
        });
        let data = match compaction.advance(&self.state, settings.compact_slice.max(1)) {
            Ok(None) => return,
            Ok(Some(data)) => data,
            Err(reason) => {
                self.compaction = None;
                out.push(Action::Fault { reason });
                return;
            }
        };
        let Some(compaction) = self.compaction.take() else { return };
        let size = data.len() as u64;
        if let Err(reason) = self.raw.mut_store().compact(compaction.index, compaction.conf, data) {
            out.push(Action::Fault { reason });
            return;
        }
        self.snapshots.taken += 1;
        self.compact_at = 2 * size;
        let (index, term, data) = to_parts(self.raw.store().snapshot_ref());
        self.saving = Some(index);
        out.push(Action::SaveSnapshot { index, term, data });
    }

    /// The snapshot at `index` is saved apart ([`Input::SnapshotSaved`](crate::Input)): the
    /// checkpoint naming it is written now, with the log and hard state as they are now (not
    /// as at the compaction), because the journal's writes since then come before it and it
    /// replaces them all. A snapshot installed from the leader meanwhile replaced the log:
    /// nothing is written, and the saved one is left for the next checkpoint to release.
    pub(crate) fn saved(&mut self, index: u64, out: &mut Vec<Action>) {
        if self.saving != Some(index) {
            return;
        }
        self.saving = None;
        let log = self.raw.store();
        if log.base() != index {
            return;
        }
        let write = Write {
            number: self.last_number,
            entries: log.entries_held().to_vec(),
            hard_state: Some(log.hard_state().clone()),
            rejoin_term: None,
            rejoin_index: 0,
            snapshot: Some(to_parts(log.snapshot_ref())),
            snapshot_apart: true,
            conf: Some(crate::members::conf_of(log.snapshot_ref().get_metadata().get_conf_state())),
        };
        out.push(Action::Persist(write));
    }

    /// Whether a compaction starts now: the trigger is reached (see this module) and the state
    /// is not over the maximum.
    fn should_compact(&mut self, settings: &GroupSettings, out: &mut Vec<Action>) -> bool {
        let log = self.raw.store();
        let applied = self.raw.raft.raft_log.applied;
        let bytes = log.bytes();
        // A member added since the last snapshot needs one that names it (`members`): now.
        let stale = log.take_stale() && applied > log.base();
        if !stale && (applied <= log.base() || bytes < self.compact_at.max(settings.compact_bytes)) {
            return false;
        }
        if !stale && self.raw.raft.state == StateRole::Leader && bytes < 4 * self.compact_at.max(settings.compact_bytes)
        {
            let first = log.base() + 1;
            let behind =
                self.raw.raft.prs().iter().any(|(&id, p)| {
                    id != settings.id && p.recent_active && p.matched < applied && p.matched + 1 >= first
                });
            if behind {
                return false;
            }
        }
        if self.state.encoded_len() > settings.max_snapshot {
            self.snapshots.too_large += 1;
            self.compact_at = 2 * bytes;
            let (bytes, max) = (self.state.encoded_len() as u64, settings.max_snapshot as u64);
            out.push(Action::TooLarge { bytes, max });
            return false;
        }
        true
    }

    /// Installs a snapshot raft-rs accepted from the leader (its `Ready` carries it): the
    /// applied state becomes the snapshot's. Its journal write goes out with the `Ready`'s, and
    /// the answer to the leader waits for that write's sync (`ready`).
    pub(crate) fn install(&mut self, snapshot: &Snapshot, out: &mut Vec<Action>) {
        match PubendReplica::decode(&snapshot.data) {
            Ok(state) => {
                // The log and the state become the leader's: a compaction of the old ones ends.
                self.snapshots.aborted += u64::from(self.compaction.take().is_some() || self.saving.take().is_some());
                self.state = state;
                self.applied_term = snapshot.get_metadata().term;
                self.raw.mut_store().install(snapshot);
                self.snapshots.received += 1;
                let id = self.raw.raft.id;
                self.members_changed(id, out);
            }
            // `ReplicaGroup::check` decoded it before raft-rs saw it: only a bug gets here.
            Err(e) => out.push(Action::Fault { reason: format!("installing a snapshot raft-rs accepted: {e}") }),
        }
    }

    /// Snapshots have left whole (their last chunk handed out, see `pace`): raft-rs holds each
    /// follower's progress until told how the transfer went. Reported finished then, not on
    /// an answer: a snapshot lost on the way (or refused as corrupt) shows as the follower's
    /// refusal of the next append, which sends another.
    pub(crate) fn report_sent(&mut self, finished: &[u64]) {
        for &to in finished {
            self.raw.report_snapshot(to, SnapshotStatus::Finish);
        }
    }
}

/// A snapshot as its journal record keeps it: (index, term, encoded state).
pub(crate) fn to_parts(snapshot: &Snapshot) -> (u64, u64, bytes::Bytes) {
    let meta = snapshot.get_metadata();
    (meta.index, meta.term, snapshot.data.clone())
}

/// Whether `ty` is a snapshot (the counters of sends and refusals).
pub(crate) fn is_snapshot(ty: MessageType) -> bool {
    ty == MessageType::MsgSnapshot
}
