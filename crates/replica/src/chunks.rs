//! Snapshots in chunks (issue 40): a snapshot larger than one REPLICA frame travels as several
//! [`Envelope::Chunk`]s, and the receiver puts them back together before raft-rs sees anything.
//!
//! **Sending.** A leader's `MsgSnapshot` whose data is over
//! [`GroupSettings::snapshot_chunk`](crate::GroupSettings::snapshot_chunk) bytes is split
//! ([`split`]): every chunk carries the snapshot message with its data left out (so each names
//! the snapshot it belongs to: sender, term, index), its offset and the whole data's length.
//! One that fits goes whole as before ([`Envelope::Raft`]), so a small snapshot is one message
//! for a build that knows no chunks.
//!
//! **Receiving.** [`Assembly`] holds at most one snapshot in assembly per group, so memory is
//! bounded by [`GroupSettings::max_snapshot`](crate::GroupSettings::max_snapshot). The chunks
//! must come in order (a link is ordered; raft resends what is lost): a chunk at offset 0
//! starts a new assembly (dropping any other); any other chunk must continue the current one
//! exactly (same sender, message, length, and offset where the data ends) or the assembly is
//! dropped. A chunk of an older term or of a snapshot at or below what this replica committed
//! is dropped. A whole snapshot becomes the `MsgSnapshot` it was, and goes through
//! [`ReplicaGroup::check`](crate::ReplicaGroup::check) like one that came whole: its checksum
//! and shape are verified there, and a corrupt one is refused and counted, never applied.
//!
//! **Asking again.** Nothing here asks: the leader reports every snapshot sent as finished
//! (see `snapshot`), so a follower that did not install it refuses the leader's next append,
//! and the leader sends the snapshot again, from its first chunk.

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
    pub(crate) data: &'a [u8],
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
}

/// The one snapshot in assembly on a replica (see this module).
#[derive(Default, Debug)]
pub(crate) struct Assembly {
    current: Option<Partial>,
}

#[derive(Debug)]
struct Partial {
    from: u64,
    header: Message,
    total: u64,
    data: Vec<u8>,
}

impl Partial {
    /// Whether `chunk` continues this assembly where its data ends.
    fn continued_by(&self, chunk: &Chunk<'_>) -> bool {
        self.from == chunk.from
            && self.total == chunk.total
            && self.data.len() as u64 == chunk.offset
            && self.header.term == chunk.header.term
            && self.header.get_snapshot().get_metadata() == chunk.header.get_snapshot().get_metadata()
    }
}

impl Assembly {
    /// Takes one chunk (see this module for the rules).
    pub(crate) fn take(&mut self, chunk: Chunk<'_>, bounds: Bounds) -> Taken {
        let Chunk { header, offset, total, data, .. } = chunk;
        let meta = header.get_snapshot().get_metadata();
        let refusal = if header.get_msg_type() != MessageType::MsgSnapshot || !header.get_snapshot().data.is_empty() {
            Some("a chunk whose message is not an empty snapshot message".to_string())
        } else if total > bounds.max as u64 {
            Some(format!("a snapshot of {total} bytes, over the {}-byte maximum", bounds.max))
        } else if data.is_empty() || offset.checked_add(data.len() as u64).is_none_or(|end| end > total) {
            Some(format!("a chunk of {} bytes at {offset} of a {total}-byte snapshot", data.len()))
        } else if header.term < bounds.term {
            Some(format!("a chunk of term {} below this replica's term {}", header.term, bounds.term))
        } else if meta.index <= bounds.committed {
            Some(format!("a chunk of a snapshot at index {} at or below the commit {}", meta.index, bounds.committed))
        } else if offset != 0 && !self.current.as_ref().is_some_and(|p| p.continued_by(&chunk)) {
            Some(format!("a chunk at {offset} that does not continue the snapshot in assembly"))
        } else {
            None
        };
        if let Some(why) = refusal {
            self.current = None;
            return Taken::Refused(why);
        }
        if offset == 0 {
            self.current = Some(Partial { from: chunk.from, header: header.clone(), total, data: Vec::new() });
        }
        let Some(partial) = &mut self.current else { return Taken::Refused("no assembly".into()) };
        partial.data.extend_from_slice(data);
        if (partial.data.len() as u64) < total {
            return Taken::Kept;
        }
        let Some(Partial { mut header, data, .. }) = self.current.take() else { return Taken::Kept };
        header.mut_snapshot().data = Bytes::from(data);
        Taken::Whole(header)
    }

    /// Bytes held by the assembly under way (0: none).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.current.as_ref().map_or(0, |p| p.data.len())
    }
}

impl ReplicaGroup {
    /// Takes a chunk from the mate `from`: the whole snapshot message once its last chunk is
    /// in, to be checked and stepped like one that came whole. A chunk that is refused is
    /// counted and reported as [`Action::Dropped`]; a fencing replica (wiped, learning its
    /// mates' terms) takes no snapshot yet and ignores chunks.
    pub(crate) fn assemble(&mut self, chunk: Chunk<'_>, out: &mut Vec<Action>) -> Option<Message> {
        let (me, max) = (self.settings.id, self.settings.max_snapshot);
        let mate = chunk.from != me && self.settings.voters.contains(&chunk.from);
        let Phase::Running(running) = &mut self.phase else { return None };
        let h = chunk.header;
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
                None
            }
            Taken::Whole(msg) => {
                running.snapshots.chunks_received += 1;
                Some(msg)
            }
            Taken::Refused(reason) => {
                running.snapshots.chunks_refused += 1;
                out.push(Action::Dropped { from: chunk.from, reason });
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

    fn feed(a: &mut Assembly, from: u64, envelopes: &[Envelope]) -> Vec<Taken> {
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

    /// A snapshot of several chunks comes back whole, byte for byte, from its last chunk.
    #[test]
    fn a_snapshot_of_several_chunks_round_trips() {
        let msg = snapshot(2, 10, 1000);
        let chunks = split(msg.clone(), 300);
        assert_eq!(chunks.len(), 4);
        let mut a = Assembly::default();
        let taken = feed(&mut a, 1, &chunks);
        assert_eq!(taken[..3], [Taken::Kept, Taken::Kept, Taken::Kept]);
        assert_eq!(taken[3], Taken::Whole(msg.clone()));
        assert_eq!(a.held(), 0);
        // One that fits goes whole, as before chunks.
        assert_eq!(split(msg.clone(), 1000), vec![Envelope::Raft(msg)]);
    }

    /// A lost chunk, chunks out of order, and a chunk of another snapshot drop the assembly;
    /// the next snapshot from its first chunk is assembled.
    #[test]
    fn a_gap_reordering_or_a_foreign_chunk_drops_the_assembly() {
        let chunks = split(snapshot(2, 10, 1000), 300);
        let mut a = Assembly::default();
        // Lost: chunk 1 never comes.
        let taken = feed(&mut a, 1, &[chunks[0].clone(), chunks[2].clone(), chunks[3].clone()]);
        assert!(matches!(taken[1], Taken::Refused(_)) && matches!(taken[2], Taken::Refused(_)), "{taken:?}");
        assert_eq!(a.held(), 0);
        // Interleaved with a newer snapshot's: the newer one restarts the assembly, the older
        // one's next chunk is refused, and the newer one completes.
        let newer = snapshot(3, 12, 600);
        let other = split(newer.clone(), 300);
        let taken = feed(&mut a, 1, &[chunks[0].clone(), other[0].clone(), chunks[1].clone()]);
        assert!(matches!(taken[2], Taken::Refused(_)), "{taken:?}");
        let taken = feed(&mut a, 1, &[other[0].clone(), other[1].clone()]);
        assert_eq!(taken[1], Taken::Whole(newer));
        // The same chunks from another sender do not continue it.
        assert_eq!(feed(&mut a, 1, &chunks[..1]), [Taken::Kept]);
        assert!(matches!(feed(&mut a, 3, &chunks[1..2])[0], Taken::Refused(_)));
    }

    /// Stale chunks (an older term, a snapshot this replica has committed past), a length over
    /// the maximum, or a chunk past its length are refused without being kept.
    #[test]
    fn stale_or_oversized_chunks_are_refused() {
        let mut a = Assembly::default();
        let take = |a: &mut Assembly, m: &Message, offset, total, data: &[u8]| {
            a.take(Chunk { from: 1, header: m, offset, total, data }, BOUNDS)
        };
        let mut header = snapshot(2, 10, 0);
        assert_eq!(take(&mut a, &header, 0, 10, b"abc"), Taken::Kept);
        assert!(matches!(take(&mut a, &header, 3, 10, b"too long!!"), Taken::Refused(_)));
        assert!(matches!(take(&mut a, &header, 0, 1 << 21, b"abc"), Taken::Refused(_)));
        assert!(matches!(take(&mut a, &header, 0, 10, b""), Taken::Refused(_)));
        assert!(matches!(take(&mut a, &header, u64::MAX, 10, b"a"), Taken::Refused(_)));
        assert!(matches!(take(&mut a, &snapshot(0, 10, 0), 0, 10, b"abc"), Taken::Refused(_)));
        assert!(matches!(take(&mut a, &snapshot(2, 3, 0), 0, 10, b"abc"), Taken::Refused(_)));
        header.mut_snapshot().data = Bytes::from_static(b"x");
        assert!(matches!(take(&mut a, &header, 0, 10, b"abc"), Taken::Refused(_)));
        assert_eq!(a.held(), 0);
    }
}
