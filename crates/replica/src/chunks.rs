//! Snapshots in chunks (issue 40): a snapshot larger than one REPLICA frame travels as several
//! [`Envelope::Chunk`]s, and the receiver puts them back together before raft-rs sees anything.
//!
//! **Sending.** A leader's `MsgSnapshot` whose data is over
//! [`GroupSettings::snapshot_chunk`](crate::GroupSettings::snapshot_chunk) bytes is split
//! ([`split`]): every chunk carries the snapshot message with its data left out (so each names
//! the snapshot it belongs to: sender, term, index), its offset and the whole data's length.
//! One that fits goes whole as before ([`Envelope::Raft`]), so a small snapshot is one message
//! for a build that knows no chunks. The chunks leave a window per tick (see `pace`).
//!
//! **Receiving.** [`Assembly`] holds at most one snapshot in assembly per group, so memory is
//! bounded by [`GroupSettings::max_snapshot`](crate::GroupSettings::max_snapshot). A snapshot
//! is named by its sender, its message's term, its own term and index, and its length. Chunks
//! of the snapshot in assembly are kept by offset, in whatever order they come (the simulator's
//! network reorders; a broker link does not), a repeated one changing nothing, so a snapshot sent
//! again fills the gaps the last send left; a chunk overlapping another at a different offset
//! drops the assembly. A chunk of a later snapshot replaces the assembly, one of an earlier
//! snapshot is dropped, and so is one of a term older than this replica's or of a snapshot at or
//! below its commit (with an assembly as stale). A whole snapshot becomes the `MsgSnapshot` it
//! was, and goes through
//! [`ReplicaGroup::check`](crate::ReplicaGroup::check) like one that came whole: its checksum
//! and shape are verified there, and a corrupt one is refused and counted, never applied.
//!
//! Every chunk held is acknowledged to its sender ([`Envelope::ChunkAck`]): the sender keeps at
//! most a window of a snapshot's bytes unacknowledged (see `pace`).
//!
//! **Asking again.** Nothing here asks: the leader reports every snapshot finished once its
//! last chunk has left (see `pace` and `snapshot`), so a follower that did not install it refuses the leader's next append,
//! and the leader sends the snapshot again, from its first chunk.

use std::collections::BTreeMap;

use bytes::Bytes;
use raft::eraftpb::{Message, MessageType};

use crate::envelope::MAX_TERM_OR_INDEX;
use crate::group::{Action, Envelope, Phase, ReplicaGroup};

/// The default [`GroupSettings::snapshot_chunk`](crate::GroupSettings::snapshot_chunk): 1 MiB of
/// snapshot data per REPLICA frame, the size raft-rs batches appends to, so a snapshot's chunks
/// share a link with appends without holding it for long.
pub const CHUNK_BYTES: usize = 1 << 20;

/// The largest chunk a group sends: a REPLICA frame less room for the message around it.
pub const MAX_CHUNK: usize = tidings_wire::peer::MAX_REPLICA_MESSAGE - (64 << 10);

/// The default [`GroupSettings::max_snapshot`](crate::GroupSettings::max_snapshot): 1 GiB of
/// encoded state. A state past it is not compacted (its log grows until releases shrink it),
/// and a snapshot announced past it is refused, so a forged length costs nothing.
pub const MAX_SNAPSHOT: usize = 1 << 30;

/// A snapshot message as it goes out: whole when its data fits in `chunk` bytes, else one
/// [`Envelope::Chunk`] per `chunk` bytes, in order.
pub(crate) fn split(msg: Message, chunk: usize) -> Vec<Envelope> {
    let data = msg.get_snapshot().data.clone();
    let chunk = chunk.clamp(1, MAX_CHUNK);
    if msg.get_msg_type() != MessageType::MsgSnapshot || data.len() <= chunk {
        return vec![Envelope::Raft(msg)];
    }
    let mut header = msg;
    header.mut_snapshot().data = Bytes::new();
    let total = data.len() as u64;
    (0..data.len())
        .step_by(chunk)
        .map(|at| Envelope::Chunk {
            header: header.clone(),
            offset: at as u64,
            total,
            data: data.slice(at..(at + chunk).min(data.len())),
        })
        .collect()
}

/// One chunk as it arrived.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chunk<'a> {
    /// The mate whose link it came on.
    pub(crate) from: u64,
    /// The snapshot message, data left out.
    pub(crate) header: &'a Message,
    /// Where `data` starts.
    pub(crate) offset: u64,
    /// The whole data's length.
    pub(crate) total: u64,
    /// The piece.
    pub(crate) data: &'a Bytes,
}

/// What this replica knows that makes a chunk stale, and the size bound.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// Its current term: a chunk of an older one is from a deposed leader.
    pub(crate) term: u64,
    /// Its commit index: a snapshot at or below it brings nothing.
    pub(crate) committed: u64,
    /// The largest snapshot data taken.
    pub(crate) max: usize,
}

/// What one chunk did.
#[derive(Clone, PartialEq, Debug)]
pub(crate) enum Taken {
    /// Kept; more chunks are due.
    Kept,
    /// The last chunk: the whole snapshot message, still to be checked.
    Whole(Message),
    /// Dropped (and the assembly with it, if there was one): why.
    Refused(String),
    /// Dropped as normal traffic: a chunk of a deposed leader's term, or of a snapshot this
    /// replica has committed past (a send that crossed an install), or of an earlier snapshot
    /// than the one in assembly.
    Stale,
}

/// The one snapshot in assembly on a replica (see this module).
#[derive(Default, Debug)]
pub(crate) struct Assembly {
    current: Option<Partial>,
}

/// Which snapshot a chunk belongs to: its sender, its message's term, the snapshot's term and
/// index, and its data's length. Ordered so that a later snapshot compares greater.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Key {
    term: u64,
    snapshot_term: u64,
    index: u64,
    from: u64,
    total: u64,
}

impl Key {
    fn of(chunk: &Chunk<'_>) -> Key {
        let meta = chunk.header.get_snapshot().get_metadata();
        let (term, snapshot_term, index) = (chunk.header.term, meta.term, meta.index);
        Key { term, snapshot_term, index, from: chunk.from, total: chunk.total }
    }
}

#[derive(Debug)]
struct Partial {
    key: Key,
    header: Message,
    /// The pieces by offset: none overlaps another, each inside `key.total`.
    pieces: BTreeMap<u64, Bytes>,
    /// Their bytes.
    held: u64,
}

impl Partial {
    /// Adds a piece; `false` if it overlaps one held at another offset or of another length
    /// (not the same chunking: a forged or broken sender). The same piece again is no change.
    fn add(&mut self, offset: u64, data: &Bytes) -> bool {
        let end = offset + data.len() as u64;
        if let Some(same) = self.pieces.get(&offset) {
            return same.len() == data.len();
        }
        let before = self.pieces.range(..offset).next_back().is_some_and(|(&at, p)| at + p.len() as u64 > offset);
        let after = self.pieces.range(offset..).next().is_some_and(|(&at, _)| at < end);
        if before || after {
            return false;
        }
        self.pieces.insert(offset, data.clone());
        self.held += data.len() as u64;
        true
    }
}

impl Assembly {
    /// Takes one chunk (see this module for the rules).
    pub(crate) fn take(&mut self, chunk: Chunk<'_>, bounds: Bounds) -> Taken {
        let Chunk { header, offset, total, data, .. } = chunk;
        let meta = header.get_snapshot().get_metadata();
        let key = Key::of(&chunk);
        let refusal = if header.get_msg_type() != MessageType::MsgSnapshot || !header.get_snapshot().data.is_empty() {
            Some("a chunk whose message is not an empty snapshot message".to_string())
        } else if total > bounds.max as u64 {
            Some(format!("a snapshot of {total} bytes, over the {}-byte maximum", bounds.max))
        } else if data.is_empty() || offset.checked_add(data.len() as u64).is_none_or(|end| end > total) {
            Some(format!("a chunk of {} bytes at {offset} of a {total}-byte snapshot", data.len()))
        } else {
            None
        };
        let stale = |term: u64, index: u64| term < bounds.term || index <= bounds.committed;
        // What makes a chunk stale makes the assembly stale too.
        if self.current.as_ref().is_some_and(|p| stale(p.key.term, p.key.index)) {
            self.current = None;
        }
        if let Some(why) = refusal {
            return Taken::Refused(why);
        }
        if stale(header.term, meta.index) {
            return Taken::Stale;
        }
        match &self.current {
            Some(p) if p.key > key => return Taken::Stale,
            Some(p) if p.key == key && p.header == *header => {}
            _ => {
                let header = header.clone();
                self.current = Some(Partial { key, header, pieces: BTreeMap::new(), held: 0 });
            }
        }
        let Some(partial) = &mut self.current else { return Taken::Refused("no assembly".into()) };
        if !partial.add(offset, data) {
            self.current = None;
            return Taken::Refused(format!("a chunk at {offset} overlapping another of its snapshot"));
        }
        if partial.held < total {
            return Taken::Kept;
        }
        let Some(Partial { mut header, pieces, .. }) = self.current.take() else { return Taken::Kept };
        let mut whole = Vec::with_capacity(total as usize);
        pieces.values().for_each(|piece| whole.extend_from_slice(piece));
        header.mut_snapshot().data = Bytes::from(whole);
        Taken::Whole(header)
    }

    /// Bytes held by the assembly under way (0: none).
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.current.as_ref().map_or(0, |p| p.held)
    }
}

impl ReplicaGroup {
    /// Takes a chunk from the mate `from`: the whole snapshot message once its last chunk is
    /// in, to be checked and stepped like one that came whole. A chunk that is refused is
    /// counted and reported as [`Action::Dropped`]; a fencing replica (wiped, learning its
    /// mates' terms) takes no snapshot yet and ignores chunks.
    pub(crate) fn assemble(&mut self, chunk: Chunk<'_>, out: &mut Vec<Action>) -> Option<Message> {
        let (me, max) = (self.settings.id, self.settings.max_snapshot);
        // Any cell mate but this replica: a snapshot is a leader's traffic, and the leader may
        // be a member added after this replica's creation voters (`members`); the whole
        // message is checked (`envelope`) before raft-rs sees it.
        let mate = chunk.from != me;
        let Phase::Running(running) = &mut self.phase else { return None };
        let h = chunk.header;
        // Told to the sender once held (kept, or the last piece of a whole): it may send more.
        let (from, end) = (chunk.from, chunk.offset.saturating_add(chunk.data.len() as u64));
        let ack = Envelope::ChunkAck { index: h.get_snapshot().get_metadata().index, end };
        let taken = if !mate || h.from != chunk.from || h.to != me || h.term > MAX_TERM_OR_INDEX {
            Taken::Refused(format!("a chunk {}->{} of term {} on the link from {}", h.from, h.to, h.term, chunk.from))
        } else {
            let log = &running.raw.raft.raft_log;
            let bounds = Bounds { term: running.raw.raft.term, committed: log.committed, max };
            running.assembly.take(chunk, bounds)
        };
        match taken {
            Taken::Kept => {
                running.snapshots.chunks_received += 1;
                out.push(Action::Send { to: from, msg: ack });
                None
            }
            Taken::Whole(msg) => {
                running.snapshots.chunks_received += 1;
                out.push(Action::Send { to: from, msg: ack });
                Some(msg)
            }
            Taken::Refused(reason) => {
                running.snapshots.chunks_refused += 1;
                out.push(Action::Dropped { from: chunk.from, reason });
                None
            }
            Taken::Stale => {
                running.snapshots.chunks_refused += 1;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use raft::eraftpb::{Message, MessageType, Snapshot};

    use super::*;

    fn snapshot(term: u64, index: u64, len: usize) -> Message {
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = index;
        snap.mut_metadata().term = term;
        snap.data = (0..len).map(|i| (i * 7) as u8).collect::<Vec<u8>>().into();
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        (m.from, m.to, m.term) = (1, 2, term);
        m.set_snapshot(snap);
        m
    }

    const BOUNDS: Bounds = Bounds { term: 1, committed: 3, max: 1 << 20 };

    fn feed(a: &mut Assembly, from: u64, envelopes: &[&Envelope]) -> Vec<Taken> {
        envelopes
            .iter()
            .map(|e| match e {
                Envelope::Chunk { header, offset, total, data } => {
                    a.take(Chunk { from, header, offset: *offset, total: *total, data }, BOUNDS)
                }
                other => panic!("not a chunk: {other:?}"),
            })
            .collect()
    }

    fn refused(taken: &Taken) -> bool {
        matches!(taken, Taken::Refused(_) | Taken::Stale)
    }

    /// A snapshot of several chunks comes back whole, byte for byte, from its last chunk, in
    /// whatever order its chunks come.
    #[test]
    fn a_snapshot_of_several_chunks_round_trips_in_any_order() {
        let msg = snapshot(2, 10, 1000);
        let c = split(msg.clone(), 300);
        assert_eq!(c.len(), 4);
        let mut a = Assembly::default();
        let taken = feed(&mut a, 1, &[&c[0], &c[1], &c[2], &c[3]]);
        assert_eq!(taken, [Taken::Kept, Taken::Kept, Taken::Kept, Taken::Whole(msg.clone())]);
        assert_eq!(a.held(), 0);
        let taken = feed(&mut a, 1, &[&c[3], &c[1], &c[1], &c[0], &c[2]]);
        assert_eq!(taken[..4], [Taken::Kept, Taken::Kept, Taken::Kept, Taken::Kept]);
        assert_eq!(taken[4], Taken::Whole(msg.clone()));
        // One that fits goes whole, as before chunks.
        assert_eq!(split(msg.clone(), 1000), vec![Envelope::Raft(msg)]);
    }

    /// A lost chunk leaves the assembly incomplete, and the snapshot sent again fills the gap.
    #[test]
    fn a_lost_chunk_is_filled_by_the_next_send() {
        let msg = snapshot(2, 10, 1000);
        let c = split(msg.clone(), 300);
        let mut a = Assembly::default();
        assert!(!feed(&mut a, 1, &[&c[0], &c[2], &c[3]]).iter().any(refused));
        assert_eq!(a.held(), 700);
        let taken = feed(&mut a, 1, &[&c[0], &c[1]]);
        assert_eq!(taken, [Taken::Kept, Taken::Whole(msg)]);
    }

    /// Chunks of two snapshots interleaved: the later snapshot replaces the assembly, the
    /// earlier one's chunks are refused, and the later one completes. A chunk of another
    /// chunking (overlapping a held piece) or from another sender does not join.
    #[test]
    fn interleaved_or_foreign_chunks_do_not_mix() {
        let older = split(snapshot(2, 10, 1000), 300);
        let newer_msg = snapshot(3, 12, 600);
        let newer = split(newer_msg.clone(), 300);
        let mut a = Assembly::default();
        let taken = feed(&mut a, 1, &[&older[0], &newer[0], &older[1], &newer[1]]);
        assert_eq!(taken[1], Taken::Kept);
        assert!(refused(&taken[2]), "{taken:?}");
        assert_eq!(taken[3], Taken::Whole(newer_msg));
        // Another chunking of the same snapshot overlaps a held piece: dropped.
        let other = split(snapshot(2, 10, 1000), 256);
        assert!(refused(&feed(&mut a, 1, &[&older[0], &other[1]])[1]));
        assert_eq!(a.held(), 0);
        // The same chunks from another sender are another snapshot: the later key wins.
        assert_eq!(feed(&mut a, 3, &older[..1].iter().collect::<Vec<_>>()), [Taken::Kept]);
        assert!(refused(&feed(&mut a, 1, &[&older[1]])[0]), "sender 1 < 3: an earlier key");
    }

    /// Stale chunks (an older term, a snapshot this replica has committed past), a length over
    /// the maximum, or a chunk past its length are refused without being kept.
    #[test]
    fn stale_or_oversized_chunks_are_refused() {
        let mut a = Assembly::default();
        let take = |a: &mut Assembly, m: &Message, offset, total, data: &[u8]| {
            a.take(Chunk { from: 1, header: m, offset, total, data: &Bytes::copy_from_slice(data) }, BOUNDS)
        };
        let mut header = snapshot(2, 10, 0);
        assert_eq!(take(&mut a, &header, 0, 10, b"abc"), Taken::Kept);
        assert!(refused(&take(&mut a, &header, 3, 10, b"too long!!")));
        assert!(refused(&take(&mut a, &header, 0, 1 << 21, b"abc")));
        assert!(refused(&take(&mut a, &header, 0, 10, b"")));
        assert!(refused(&take(&mut a, &header, u64::MAX, 10, b"a")));
        assert_eq!(a.held(), 3, "a bad chunk alone does not drop a sound assembly");
        assert!(refused(&take(&mut a, &snapshot(0, 10, 0), 0, 10, b"abc")));
        assert!(refused(&take(&mut a, &snapshot(2, 3, 0), 0, 10, b"abc")));
        header.mut_snapshot().data = Bytes::from_static(b"x");
        assert!(refused(&take(&mut a, &header, 0, 10, b"abc")));
        // Once this replica's term passes the assembly's, the assembly goes with the next chunk.
        let later = Bounds { term: 3, ..BOUNDS };
        let header = snapshot(2, 10, 0);
        let stale =
            a.take(Chunk { from: 1, header: &header, offset: 3, total: 10, data: &Bytes::from_static(b"d") }, later);
        assert!(refused(&stale));
        assert_eq!(a.held(), 0);
    }
}
