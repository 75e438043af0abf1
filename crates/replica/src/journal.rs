//! The durable side: a replica's [`Write`]s as records of one `tidings-store` pubend (its
//! journal), so a replica's log gets the store's group commit, CRC per record, torn-tail cut and
//! damage report, and a simulated crash runs the store's real recovery.
//!
//! Each write is one record, so it is atomic: after a crash a write is either whole or gone. The
//! record ticks count writes (1, 2, ...), which the store requires to grow. Recovery folds the
//! records in order ([`Recovered::fold`]). The first record is the journal's creation mark: an
//! empty journal means a wiped (or replaced) disk, and the replica must
//! [`rejoin`](crate::ReplicaGroup::rejoin). A damaged record (a lost range) is never served: the
//! replica counts as wiped and rebuilds from its mates.
//!
//! Compaction: a write that carries a snapshot is a checkpoint (the snapshot and the whole log
//! after it), so once it is synced every record before it is released
//! ([`Journal::release_below`]): the journal holds the last checkpoint and the writes since.
//!
//! A replica's own compaction saves its snapshot apart first ([`Journal::save`]: parts in a
//! second store, the snapshots' store, with its own writer and syncs), and its checkpoint, one
//! small record naming the snapshot by index, term, length and CRC32, follows once that is
//! synced: the journal's syncs, which acknowledgements wait for, never carry the snapshot's
//! bytes (76 MB in one group commit held them 350 ms). Once the checkpoint is synced, the
//! snapshots saved before it are released ([`Journal::saved_release_below`]). The two stores
//! release apart, so a crash can leave an older checkpoint whose snapshot is gone: that is
//! damage only if no later checkpoint replaces it.
//!
//! A snapshot the journal holds itself (one installed from the leader) larger than
//! [`JOURNAL_PART`] (the store takes records of at most 16 MiB) is written as part records
//! before its write's record, which names it by index, term, length
//! and CRC32 ([`Journal::records`]). The write is still atomic: recovery takes the parts only
//! when that last record is there and they match it whole; parts with no write after them
//! (a crash mid-checkpoint) are ignored, and parts that do not match their write are damage.
//! A part's payload is a slice of the snapshot's bytes, shared, not copied (copying a 100 MB
//! snapshot into parts held the broker's driver for 35-150 ms, `tests/encode_cost.rs`): its
//! record's publisher field says it is a part, the first of a snapshot ([`FIRST_PART`]) or a
//! next one ([`NEXT_PART`]), and the write after them says which snapshot they make. Journals written before hold parts as
//! `PART` records (a kind byte and a header before the bytes), still read.

use std::collections::BTreeMap;

use raft::eraftpb::{Entry, EntryType, HardState};
use tidings_store::{PubendId, PublisherId, PublisherSeq, ReadItem, Record, Store, StoreError, Tick, TickRange};

use crate::command::{DecodeError, Reader};
use crate::group::{Recovered, Write};
use crate::parts::{Parts, Saved};

/// Version 4 adds the members at the snapshot (3 is [`PART`]'s kind byte), version 2 the
/// snapshot; version 1 and 2 records (before compaction, before membership changes) still read.
const VERSION: u8 = 4;
/// A part of a snapshot too large for one record: `index term offset` then the bytes.
const PART: u8 = 3;
/// The record publisher of a snapshot's first part (its payload only the snapshot's bytes);
/// a write's records have publisher 0.
pub(crate) const FIRST_PART: u64 = 1;
/// The record publisher of a snapshot's next part, which continues the one before it.
pub(crate) const NEXT_PART: u64 = 2;
/// A snapshot byte of a write: none, inline, or in the part records before it.
const SNAPSHOT_NONE: u8 = 0;
const SNAPSHOT_INLINE: u8 = 1;
const SNAPSHOT_IN_PARTS: u8 = 2;
/// Named (index, term, length, CRC32) and saved apart ([`Journal::save`]).
const SNAPSHOT_APART: u8 = 3;

/// The default snapshot bytes per journal record ([`Journal::set_part_bytes`]): half the
/// store's largest record, so a checkpoint's own entries fit beside a snapshot kept inline.
pub const JOURNAL_PART: usize = 8 << 20;

/// The bytes per part of a snapshot saved apart ([`Journal::save`]): a shell that appends one
/// part a group keeps each of the snapshots' store's syncs short, and with them the file
/// system journal commits the replica journal's own syncs may have to wait for.
pub const SAVE_PART: usize = 1 << 20;

/// A snapshot written in parts, as its write names it: (index, term, length, CRC32).
pub(crate) type PartsRef = (u64, u64, u64, u32);

impl Write {
    /// The bytes of one journal record.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(false)
    }

    /// The bytes of one journal record; `parted`: the snapshot is only named (its bytes are in
    /// the part records before this one).
    fn encode_with(&self, parted: bool) -> Vec<u8> {
        let mut out = vec![VERSION];
        let word = |out: &mut Vec<u8>, w: u64| out.extend_from_slice(&w.to_le_bytes());
        word(&mut out, self.number);
        word(&mut out, self.entries.len() as u64);
        for e in &self.entries {
            for w in [e.index, e.term, e.get_entry_type() as u64, e.data.len() as u64] {
                word(&mut out, w);
            }
            out.extend_from_slice(&e.data);
            word(&mut out, e.context.len() as u64);
            out.extend_from_slice(&e.context);
        }
        match &self.hard_state {
            Some(hs) => {
                out.push(1);
                for w in [hs.term, hs.vote, hs.commit] {
                    word(&mut out, w);
                }
            }
            None => out.push(0),
        }
        match self.rejoin_term {
            Some(term) if self.rejoin_index == 0 => {
                out.push(1);
                word(&mut out, term);
            }
            Some(term) => {
                out.push(2);
                word(&mut out, term);
                word(&mut out, self.rejoin_index);
            }
            None => out.push(0),
        }
        match &self.snapshot {
            Some((index, term, data)) if parted || self.snapshot_apart => {
                out.push(if self.snapshot_apart { SNAPSHOT_APART } else { SNAPSHOT_IN_PARTS });
                for w in [*index, *term, data.len() as u64] {
                    word(&mut out, w);
                }
                out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
            }
            Some((index, term, data)) => {
                out.push(SNAPSHOT_INLINE);
                for w in [*index, *term, data.len() as u64] {
                    word(&mut out, w);
                }
                out.extend_from_slice(data);
            }
            None => out.push(SNAPSHOT_NONE),
        }
        match &self.conf {
            Some((voters, learners)) => {
                out.push(1);
                for ids in [voters, learners] {
                    word(&mut out, ids.len() as u64);
                    ids.iter().for_each(|&id| word(&mut out, id));
                }
            }
            None => out.push(0),
        }
        out
    }

    /// Reads what [`Write::encode`] wrote; anything else is a [`DecodeError`].
    pub fn decode(bytes: &[u8]) -> Result<Write, DecodeError> {
        match Self::decode_record(bytes)? {
            (write, None) => Ok(write),
            (_, Some(_)) => Err(DecodeError("a write whose snapshot is in parts")),
        }
    }

    /// Reads a write's record: the write, and the snapshot it names if that is in parts or
    /// saved apart (the write's `snapshot` is then `None` until it is put back, and
    /// `snapshot_apart` says where from).
    fn decode_record(bytes: &[u8]) -> Result<(Write, Option<PartsRef>), DecodeError> {
        let mut r = Reader(bytes);
        let version = r.byte()?;
        if !matches!(version, 1 | 2 | VERSION) {
            return Err(DecodeError("unknown write version"));
        }
        let number = r.word()?;
        let count = r.word()?;
        let mut entries = Vec::new();
        for _ in 0..count {
            let mut e = Entry { index: r.word()?, term: r.word()?, ..Entry::default() };
            e.set_entry_type(match r.word()? {
                0 => EntryType::EntryNormal,
                1 => EntryType::EntryConfChange,
                2 => EntryType::EntryConfChangeV2,
                _ => return Err(DecodeError("unknown entry type")),
            });
            let len = usize::try_from(r.word()?).map_err(|_| DecodeError("data length"))?;
            e.data = r.take(len)?.to_vec().into();
            let len = usize::try_from(r.word()?).map_err(|_| DecodeError("context length"))?;
            e.context = r.take(len)?.to_vec().into();
            entries.push(e);
        }
        let hard_state = match r.byte()? {
            0 => None,
            _ => Some(HardState { term: r.word()?, vote: r.word()?, commit: r.word()?, ..HardState::default() }),
        };
        let (rejoin_term, rejoin_index) = match r.byte()? {
            0 => (None, 0),
            1 => (Some(r.word()?), 0),
            2 => (Some(r.word()?), r.word()?),
            _ => return Err(DecodeError("unknown rejoin fence")),
        };
        let (mut snapshot, mut parts, mut snapshot_apart) = (None, None, false);
        match if version == 1 { SNAPSHOT_NONE } else { r.byte()? } {
            SNAPSHOT_NONE => {}
            SNAPSHOT_INLINE => {
                let (index, term) = (r.word()?, r.word()?);
                let len = usize::try_from(r.word()?).map_err(|_| DecodeError("snapshot length"))?;
                snapshot = Some((index, term, bytes::Bytes::copy_from_slice(r.take(len)?)));
            }
            kind @ (SNAPSHOT_IN_PARTS | SNAPSHOT_APART) => {
                snapshot_apart = kind == SNAPSHOT_APART;
                let (index, term, len) = (r.word()?, r.word()?, r.word()?);
                let crc = r.take(4)?;
                parts = Some((index, term, len, u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]])));
            }
            _ => return Err(DecodeError("unknown snapshot kind")),
        }
        let conf = match if version < VERSION { 0 } else { r.byte()? } {
            0 => None,
            _ => {
                let mut ids = || -> Result<Vec<u64>, DecodeError> {
                    let count = r.word()?;
                    if count > 64 {
                        return Err(DecodeError("member count"));
                    }
                    (0..count).map(|_| r.word()).collect()
                };
                Some((ids()?, ids()?))
            }
        };
        if !r.0.is_empty() {
            return Err(DecodeError("trailing bytes"));
        }
        Ok((Write { number, entries, hard_state, rejoin_term, rejoin_index, snapshot, snapshot_apart, conf }, parts))
    }
}

impl Recovered {
    /// Adds one write, as the disk does: a snapshot replaces the whole log (its entries are
    /// the log after it), entries replace the log from their first index on, the hard state
    /// and the rejoin term replace the previous ones.
    pub fn fold(&mut self, write: Write) {
        if let Some(snapshot) = write.snapshot {
            self.snapshot = Some(snapshot);
            self.conf = write.conf;
            self.entries.clear();
        }
        if let Some(first) = write.entries.first() {
            let base = self.snapshot.as_ref().map_or(0, |s| s.0);
            self.entries.truncate(first.index.saturating_sub(base + 1) as usize);
            self.entries.extend(write.entries);
        }
        if let Some(hs) = write.hard_state {
            self.hard_state = hs;
        }
        if let Some(term) = write.rejoin_term {
            (self.rejoin_term, self.rejoin_index) = (term, write.rejoin_index);
        }
    }
}

/// Why a journal cannot be read back.
#[derive(Debug)]
pub enum JournalError {
    /// The store failed.
    Store(StoreError),
    /// A record is damaged or not a write: the replica must rebuild from its mates.
    Damaged(String),
}

impl std::fmt::Display for JournalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JournalError::Store(e) => write!(f, "replica journal: {e}"),
            JournalError::Damaged(why) => write!(f, "replica journal damaged: {why}"),
        }
    }
}

impl std::error::Error for JournalError {}

/// One replica's journal in an open store, and the snapshots its checkpoints name, saved
/// apart in a second store ([`Journal::save`]): it numbers the records it hands out to each.
#[derive(Clone, Debug)]
pub struct Journal {
    pubend: PubendId,
    next_tick: u64,
    part_bytes: usize,
    /// The next tick of this pubend's records in the snapshots' store.
    next_saved: u64,
    /// Where each snapshot saved since the open starts in the snapshots' store, by index: once
    /// a checkpoint naming one is synced, the snapshots' store is released below it.
    saved: BTreeMap<u64, u64>,
}

impl Journal {
    /// Reads the journal of `pubend` back (with the snapshots its checkpoints name, from
    /// `snapshots`): `None` when it is empty (the disk was wiped, or the group never ran here),
    /// else what the replica restarts from.
    pub fn open(
        store: &Store,
        snapshots: &Store,
        pubend: PubendId,
    ) -> Result<(Journal, Option<Recovered>), JournalError> {
        let (journal, recovered) = Self::read(store, snapshots, pubend)?;
        Ok((journal, recovered.map_err(JournalError::Damaged)?))
    }

    /// As [`Journal::open`], but a damaged journal (a lost or undecodable record) is not an
    /// error: its replica counts as wiped (`None`, so it rejoins behind the fences and rebuilds
    /// from its mates, never serving what it lost), and the returned tick is where the damaged
    /// records end, for the shell to release before anything else (the new journal follows).
    pub fn open_or_wipe(
        store: &Store,
        snapshots: &Store,
        pubend: PubendId,
    ) -> Result<(Journal, Option<Recovered>, Option<Tick>), JournalError> {
        let (journal, recovered) = Self::read(store, snapshots, pubend)?;
        let last = journal.last_tick();
        match recovered {
            Ok(recovered) => Ok((journal, recovered, None)),
            Err(_) => Ok((journal, None, Some(last))),
        }
    }

    /// Every record folded: the journal numbering on after the last tick read in each store
    /// (lost ones included), and what they hold, or why they are damaged.
    #[allow(clippy::type_complexity)]
    fn read(
        store: &Store,
        snapshots: &Store,
        pubend: PubendId,
    ) -> Result<(Journal, Result<Option<Recovered>, String>), JournalError> {
        let all = TickRange { first: Tick(1), last: Tick(u64::MAX) };
        let (last_saved, mut saved) =
            Saved::read(snapshots.read(pubend, all, usize::MAX).map_err(JournalError::Store)?);
        let items = store.read(pubend, all, usize::MAX).map_err(JournalError::Store)?;
        let mut recovered = Ok(Recovered::default());
        let mut last = 0;
        let mut parts = Parts::default();
        // The snapshot the last checkpoint read names, when it is missing from the snapshots' store.
        let mut missing = None;
        for item in items {
            match item {
                ReadItem::Data(record) => {
                    last = record.tick.0;
                    if matches!(record.publisher.0, FIRST_PART | NEXT_PART) {
                        parts.piece(record.publisher.0 == FIRST_PART, &record.payload);
                        continue;
                    }
                    if let Some((&PART, part)) = record.payload.split_first() {
                        let taken = parts.take(part).map_err(|e| e.to_string());
                        recovered = recovered.and_then(|r| taken.map(|()| r));
                        continue;
                    }
                    let write = Write::decode_record(&record.payload).map_err(|e| e.to_string());
                    let write = write.and_then(|(mut write, named)| {
                        match named {
                            // Missing, it is damage only if no later checkpoint replaces it: the
                            // snapshots' store is released beside the journal, not in order with
                            // it, so a crash can leave an old checkpoint whose snapshot is gone.
                            Some(named) if write.snapshot_apart => match saved.claim(named) {
                                Ok(snapshot) => write.snapshot = Some(snapshot),
                                Err(why) => {
                                    write.snapshot = Some((named.0, named.1, bytes::Bytes::new()));
                                    missing = Some(why);
                                    return Ok(write);
                                }
                            },
                            Some(named) => write.snapshot = Some(parts.claim(named)?),
                            None => {}
                        }
                        if write.snapshot.is_some() {
                            missing = None;
                        }
                        Ok(write)
                    });
                    recovered = recovered.and_then(|mut r| {
                        r.fold(write?);
                        Ok(r)
                    });
                }
                ReadItem::Lost(range) => {
                    last = last.max(range.last.0);
                    let lost = format!("ticks {}..={} lost", range.first.0, range.last.0);
                    recovered = recovered.and(Err(lost));
                }
            }
        }
        if let Some(why) = missing {
            recovered = recovered.and(Err(why));
        }
        // A store whose records for the pubend are all released reads empty but takes no tick
        // at or below the last it took.
        let journal = Journal {
            pubend,
            next_tick: last.max(store.highest(pubend).0) + 1,
            part_bytes: JOURNAL_PART,
            next_saved: last_saved.max(snapshots.highest(pubend).0) + 1,
            saved: BTreeMap::new(),
        };
        Ok((journal, recovered.map(|r| (last > 0).then_some(r))))
    }

    /// The records that save `data`, the snapshot at `index` ([`Action::SaveSnapshot`]), to
    /// append in order to the snapshots' store: parts of [`SAVE_PART`] (or
    /// [`Journal::set_part_bytes`] if smaller), each naming the index, sharing `data`'s bytes.
    /// It is saved once the last is synced.
    ///
    /// [`Action::SaveSnapshot`]: crate::Action::SaveSnapshot
    pub fn save(&mut self, index: u64, data: &bytes::Bytes) -> Vec<Record> {
        self.saved.insert(index, self.next_saved);
        let part = self.part_bytes.min(SAVE_PART);
        let mut records = Vec::new();
        for start in (0..data.len().max(1)).step_by(part) {
            let piece = data.slice(start..(start + part).min(data.len()));
            let publisher = if start == 0 { FIRST_PART } else { NEXT_PART };
            records.push(self.at(self.next_saved, publisher, index, piece));
            self.next_saved += 1;
        }
        records
    }

    /// The tick up to which the snapshots' store may be released once `write`, a checkpoint,
    /// is synced: below the snapshot it names if that was saved apart, else (a snapshot
    /// installed from the leader, which the journal holds itself) everything saved so far.
    /// Asked when the write is handed to the store, as [`Journal::release_below`].
    pub fn saved_release_below(&mut self, write: &Write) -> Option<Tick> {
        let (index, _, _) = write.snapshot.as_ref()?;
        let below = match write.snapshot_apart {
            true => *self.saved.get(index)?,
            false => self.next_saved,
        };
        self.saved.retain(|_, first| *first >= below);
        (below > 1).then(|| Tick(below - 1))
    }

    /// The last tick this journal handed out in the snapshots' store (0: none): where to
    /// release it when the journal is dropped.
    pub fn last_saved_tick(&self) -> Tick {
        Tick(self.next_saved - 1)
    }

    /// The last tick this journal holds or handed out (0: none): where to release a journal
    /// whose writes cannot restart a replica, before it rejoins.
    pub fn last_tick(&self) -> Tick {
        Tick(self.next_tick - 1)
    }

    /// The tick up to which the journal may be released once `records` (the ones that carry
    /// `write`, from [`Journal::records`]) are synced: every record before a checkpoint, which
    /// holds all they held.
    pub fn release_below(write: &Write, records: &[Record]) -> Option<Tick> {
        write.snapshot.as_ref().and(records.first()).map(|first| Tick(first.tick.0 - 1))
    }

    /// Snapshot bytes per part record ([`JOURNAL_PART`] unless set): small in the simulator,
    /// so its checkpoints are written, and recovered, in parts.
    pub fn set_part_bytes(&mut self, bytes: usize) {
        self.part_bytes = bytes.clamp(1, JOURNAL_PART);
    }

    /// The records that carry `write`, to append in order to the store: one, or for a snapshot
    /// over [`Journal::set_part_bytes`] (not saved apart) its parts first and the write last.
    /// The write is synced only once its last record is.
    pub fn records(&mut self, write: &Write) -> Vec<Record> {
        let mut records = Vec::new();
        let parted = match &write.snapshot {
            Some((_, _, data)) if data.len() > self.part_bytes && !write.snapshot_apart => {
                for start in (0..data.len()).step_by(self.part_bytes) {
                    let piece = data.slice(start..(start + self.part_bytes).min(data.len()));
                    let publisher = if start == 0 { FIRST_PART } else { NEXT_PART };
                    records.push(self.record(publisher, piece));
                }
                true
            }
            _ => false,
        };
        records.push(self.record(0, write.encode_with(parted).into()));
        records
    }

    fn record(&mut self, publisher: u64, payload: bytes::Bytes) -> Record {
        let tick = self.next_tick;
        self.next_tick += 1;
        self.at(tick, publisher, tick, payload)
    }

    /// A record of this journal's pubend (in either store).
    fn at(&self, tick: u64, publisher: u64, seq: u64, payload: bytes::Bytes) -> Record {
        Record {
            pubend: self.pubend,
            tick: Tick(tick),
            publisher: PublisherId(publisher),
            seq: PublisherSeq(seq),
            payload,
        }
    }
}

#[cfg(test)]
mod tests {
    use raft::eraftpb::{Entry, HardState};

    use crate::group::{Recovered, Write};

    /// A write must come back from its journal record unchanged, or a restart would rebuild a
    /// different log than the one the replica acknowledged.
    #[test]
    fn a_write_round_trips_and_damage_is_refused() {
        let entry = |index, term, data: &[u8]| Entry { index, term, data: data.to_vec().into(), ..Entry::default() };
        let write = Write {
            number: 9,
            entries: vec![entry(1, 1, b""), entry(2, 3, b"abc")],
            hard_state: Some(HardState { term: 3, vote: 2, commit: 1, ..HardState::default() }),
            rejoin_term: Some(3),
            rejoin_index: 7,
            snapshot: None,
            snapshot_apart: false,
            conf: None,
        };
        let bytes = write.encode();
        assert_eq!(Write::decode(&bytes), Ok(write.clone()));
        let term_only = Write { rejoin_index: 0, ..write.clone() };
        assert_eq!(Write::decode(&term_only.encode()), Ok(term_only), "a fence of any entry of its term");
        assert!(Write::decode(&bytes[..bytes.len() - 1]).is_err());
        assert_eq!(Write::decode(&Write::default().encode()), Ok(Write::default()));
        // Folding: a later write's entries replace the log from their first index.
        let mut recovered = Recovered::default();
        recovered.fold(write);
        recovered.fold(Write { entries: vec![entry(2, 4, b"x")], ..Write::default() });
        assert_eq!(recovered.entries.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(), vec![(1, 1), (2, 4)]);
        assert_eq!((recovered.hard_state.term, recovered.rejoin_term, recovered.rejoin_index), (3, 3, 7));
        // A checkpoint replaces the log with its snapshot and the entries after it.
        let checkpoint = Write {
            snapshot: Some((2, 4, bytes::Bytes::from_static(b"state"))),
            entries: vec![entry(3, 4, b"y")],
            conf: Some((vec![1, 2, 4], vec![5])),
            ..Write::default()
        };
        assert_eq!(Write::decode(&checkpoint.encode()), Ok(checkpoint.clone()));
        recovered.fold(checkpoint);
        recovered.fold(Write { entries: vec![entry(4, 4, b"z")], ..Write::default() });
        recovered.fold(Write { entries: vec![entry(4, 5, b"w")], ..Write::default() });
        assert_eq!(recovered.snapshot.as_ref().map(|s| (s.0, s.1)), Some((2, 4)));
        assert_eq!(recovered.conf, Some((vec![1, 2, 4], vec![5])));
        assert_eq!(recovered.entries.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(), vec![(3, 4), (4, 5)]);
    }
}
