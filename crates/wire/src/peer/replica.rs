//! REPLICA, one message of a pubend's Raft group between cell mates (issue 40). Layout:
//! `pubend:u64 | count:u8 | count × voter:u64 | kind:u8 | body`, where kind 1 (RAFT) is
//! `message:bytes32` (a raft-rs message in raft's protobuf encoding), kind 2 (TERM_QUERY) has
//! no body, kind 3 (TERM_REPLY) is `term:u64`, then `count:u8 count × voter:u64` and
//! `last_term:u64 last_index:u64` when there is a voter or a last entry (see
//! [`ReplicaBody::TermReply`]), and kind 4 (SNAPSHOT_CHUNK) is
//! `message:bytes32 offset:u64 total:u64 data:bytes32`: one piece of a snapshot too large for
//! one frame, `message` the raft-rs snapshot message with its data left out (so every chunk
//! names the snapshot it belongs to), `data` the bytes at `offset` of the `total` bytes; kind
//! 5 (FORGET) is `broker:u64`, a broker's replica id that an operator removed from the cell for
//! good (`tidings cell forget`), told to every cell mate with pubend 0 and no voters: each
//! records it, and the groups it leads remove that member; kind 6 (CHUNK_ACK) is
//! `index:u64 end:u64`: the receiver of a snapshot's chunks tells the sender it holds the chunk
//! ending at byte `end` of the snapshot at raft index `index`, so the sender keeps at most a
//! window of chunks unacknowledged on the link.
//!
//! The voters (the group's replica ids, the pubend's host first) travel with every message, so
//! a broker that has never heard of the group (a new one, or its disk was wiped) learns its
//! membership from the first message it gets, and one that has refuses a message naming other
//! voters.
//!
//! This crate only frames the bytes: it never parses the raft message, so the wire stays free
//! of raft-rs. `tidings-replica` parses them and validates the message against its group before
//! raft-rs sees it (raft-rs panics on some malformed messages).

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::{put_bytes32, Reader};
use crate::error::WireError;
use crate::peer::PubendId;

/// The largest raft message a REPLICA frame carries: raft-rs batches appends up to 1 MiB per
/// message (the group's `max_size_per_msg`), and one entry may exceed that alone, so the bound
/// leaves room for a large publish while keeping one frame from pinning a link's buffers.
pub const MAX_REPLICA_MESSAGE: usize = 4 * 1024 * 1024;

/// The most voters a group may name: a cell's replicas are a handful (3 or 5), and the bound
/// keeps a forged count from costing anything.
pub const MAX_REPLICA_VOTERS: usize = 15;

const RAFT: u8 = 1;
const TERM_QUERY: u8 = 2;
const TERM_REPLY: u8 = 3;
const SNAPSHOT_CHUNK: u8 = 4;
const FORGET: u8 = 5;
const CHUNK_ACK: u8 = 6;

/// What one replica of a pubend's group tells another: the group is named by the pubend, since
/// each pubend is its own Raft group (multi-raft).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// The pubend, which is the group.
    pub pubend: PubendId,
    /// The group's voters (replica ids), the pubend's host first.
    pub voters: Vec<u64>,
    /// The message.
    pub body: ReplicaBody,
}

/// The replica protocol's messages, mirroring `tidings_replica::Envelope` without raft-rs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaBody {
    /// A raft-rs message, still encoded: parsed and validated by `tidings-replica`.
    Raft(Bytes),
    /// A replica whose disk was wiped asks for the receiver's term (the term fence).
    TermQuery,
    /// The answer to a term query.
    TermReply {
        /// The sender's current term.
        term: u64,
        /// The group's voters as the sender applied them (membership changes): the asker
        /// waits for each one's term too. Empty from a sender that knows none (itself fencing);
        /// on the wire, left out when empty and `led` is 0 (`count:u8` and the ids after `term`
        /// otherwise).
        voters: Vec<u64>,
        /// The (term, index) of the sender's last log entry, (0, 0) for an empty log: the
        /// asker's vote waits until its own log reaches the furthest of them in the highest
        /// term. On the wire, after the voters, left out when the index is 0.
        last: (u64, u64),
    },
    /// One piece of a snapshot sent in several frames (docs/replication.md, "Snapshots in
    /// chunks"): the receiver reassembles the pieces in order and checks the whole before
    /// raft-rs sees it.
    SnapshotChunk {
        /// The raft-rs snapshot message, still encoded, its snapshot data empty.
        message: Bytes,
        /// Where `data` starts in the snapshot's data.
        offset: u64,
        /// The snapshot data's whole length.
        total: u64,
        /// The piece.
        data: Bytes,
    },
    /// A broker removed from the cell for good (`tidings cell forget`): not a group's message,
    /// so it goes with pubend 0 and no voters, to every cell mate.
    Forget {
        /// The forgotten broker's replica id.
        broker: u64,
    },
    /// A snapshot chunk arrived: the sender paces the rest on these (docs/replication.md,
    /// "Pacing of chunks"), so a slow link never queues more than a window of them.
    ChunkAck {
        /// The raft index of the snapshot the chunk belongs to.
        index: u64,
        /// The end (offset plus length) of the chunk received, in the snapshot's data.
        end: u64,
    },
}

impl Replica {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        let (message, data) = match &self.body {
            ReplicaBody::Raft(message) => (message.len(), 0),
            ReplicaBody::SnapshotChunk { message, data, .. } => (message.len(), data.len()),
            _ => (0, 0),
        };
        if message > MAX_REPLICA_MESSAGE || message + data > MAX_REPLICA_MESSAGE {
            return Err(WireError::TooLong { field: "message", len: message + data, max: MAX_REPLICA_MESSAGE });
        }
        if self.voters.len() > MAX_REPLICA_VOTERS {
            return Err(WireError::TooLong { field: "voters", len: self.voters.len(), max: MAX_REPLICA_VOTERS });
        }
        out.put_u64(self.pubend.0);
        out.put_u8(self.voters.len() as u8);
        for voter in &self.voters {
            out.put_u64(*voter);
        }
        match &self.body {
            ReplicaBody::Raft(message) => {
                out.put_u8(RAFT);
                put_bytes32(out, "message", message)?;
            }
            ReplicaBody::TermQuery => out.put_u8(TERM_QUERY),
            ReplicaBody::TermReply { term, voters, last } => {
                out.put_u8(TERM_REPLY);
                out.put_u64(*term);
                if !voters.is_empty() || last.1 > 0 {
                    if voters.len() > MAX_REPLICA_VOTERS {
                        return Err(WireError::TooLong { field: "voters", len: voters.len(), max: MAX_REPLICA_VOTERS });
                    }
                    out.put_u8(voters.len() as u8);
                    voters.iter().for_each(|&v| out.put_u64(v));
                }
                if last.1 > 0 {
                    out.put_u64(last.0);
                    out.put_u64(last.1);
                }
            }
            ReplicaBody::SnapshotChunk { message, offset, total, data } => {
                out.put_u8(SNAPSHOT_CHUNK);
                put_bytes32(out, "message", message)?;
                out.put_u64(*offset);
                out.put_u64(*total);
                put_bytes32(out, "data", data)?;
            }
            ReplicaBody::Forget { broker } => {
                out.put_u8(FORGET);
                out.put_u64(*broker);
            }
            ReplicaBody::ChunkAck { index, end } => {
                out.put_u8(CHUNK_ACK);
                out.put_u64(*index);
                out.put_u64(*end);
            }
        }
        Ok(())
    }

    pub(crate) fn decode_body(body: Bytes) -> Result<Replica, WireError> {
        let mut r = Reader::new("REPLICA", &body);
        let pubend = PubendId(r.u64("pubend")?);
        let count = r.u8("voters")?;
        if usize::from(count) > MAX_REPLICA_VOTERS {
            return Err(WireError::InvalidField { frame: "REPLICA", field: "voters", value: u64::from(count) });
        }
        let voters = (0..count).map(|_| r.u64("voter")).collect::<Result<Vec<_>, _>>()?;
        let body = match r.u8("kind")? {
            RAFT => {
                let range = r.bytes32("message")?;
                if range.len() > MAX_REPLICA_MESSAGE {
                    return Err(WireError::InvalidField {
                        frame: "REPLICA",
                        field: "message",
                        value: range.len() as u64,
                    });
                }
                ReplicaBody::Raft(body.slice(range))
            }
            TERM_QUERY => ReplicaBody::TermQuery,
            TERM_REPLY => {
                let term = r.u64("term")?;
                let (mut voters, mut last) = (Vec::new(), (0, 0));
                if r.remaining() > 0 {
                    let count = r.u8("voters")?;
                    if usize::from(count) > MAX_REPLICA_VOTERS {
                        return Err(WireError::InvalidField {
                            frame: "REPLICA",
                            field: "voters",
                            value: u64::from(count),
                        });
                    }
                    voters = (0..count).map(|_| r.u64("voter")).collect::<Result<Vec<_>, _>>()?;
                    let with_last = r.remaining() > 0;
                    if with_last {
                        last = (r.u64("last term")?, r.u64("last index")?);
                    }
                    // One encoding per reply: no empty count without a last entry, no last
                    // entry at index 0.
                    if (with_last && last.1 == 0) || (!with_last && count == 0) {
                        return Err(WireError::InvalidField { frame: "REPLICA", field: "term reply", value: 0 });
                    }
                }
                ReplicaBody::TermReply { term, voters, last }
            }
            SNAPSHOT_CHUNK => {
                let message = r.bytes32("message")?;
                let (offset, total) = (r.u64("offset")?, r.u64("total")?);
                let data = r.bytes32("data")?;
                if message.len() + data.len() > MAX_REPLICA_MESSAGE {
                    let value = (message.len() + data.len()) as u64;
                    return Err(WireError::InvalidField { frame: "REPLICA", field: "message", value });
                }
                ReplicaBody::SnapshotChunk { message: body.slice(message), offset, total, data: body.slice(data) }
            }
            FORGET => ReplicaBody::Forget { broker: r.u64("broker")? },
            CHUNK_ACK => ReplicaBody::ChunkAck { index: r.u64("index")?, end: r.u64("end")? },
            kind => return Err(WireError::InvalidField { frame: "REPLICA", field: "kind", value: u64::from(kind) }),
        };
        r.finish()?;
        Ok(Replica { pubend, voters, body })
    }
}
