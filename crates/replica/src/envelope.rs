//! An [`Envelope`] on the wire, and the check every received one passes before raft-rs sees it.
//!
//! raft-rs trusts its peers: it panics on some malformed messages (a heartbeat committing past
//! the receiver's log, an append that rewrites a committed entry or skips indices, a sender that
//! is not a voter, a local message type from the network), and it counts a forged append ack
//! toward a quorum. Peers are authenticated cell mates, but a corrupt frame or a buggy build
//! must cost one dropped message, never a crashed broker or a false commit. So
//! [`ReplicaGroup::check`] refuses, with a reason the shell logs, everything this build never
//! sends and everything that would break raft-rs's assumptions about the receiver's own log.
//! [`ReplicaGroup::handle`] runs the same check and answers a refused message with
//! [`Action::Dropped`](crate::Action::Dropped). A snapshot that came in chunks is checked the
//! same way once `chunks` has put it back together: nothing of it reaches raft-rs before.

use std::fmt;

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{EntryType, Message, MessageType};
use tidings_wire::peer::{ReplicaBody, MAX_REPLICA_MESSAGE};

use crate::group::{Envelope, Phase, ReplicaGroup, ReplicaId, Running};

/// The highest term or index a message may carry. Real ones grow by one per election or entry
/// and never come near it; a forged one near `u64::MAX` would overflow raft-rs's `term + 1`.
pub const MAX_TERM_OR_INDEX: u64 = 1 << 48;

/// Why a received replica message was refused before it reached raft-rs.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct InvalidMessage(pub String);

impl fmt::Display for InvalidMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid replica message: {}", self.0)
    }
}

impl std::error::Error for InvalidMessage {}

fn invalid<T>(why: impl Into<String>) -> Result<T, InvalidMessage> {
    Err(InvalidMessage(why.into()))
}

impl Envelope {
    /// The wire form (a REPLICA frame's body): raft messages in raft's own protobuf encoding.
    pub fn to_wire(&self) -> Result<ReplicaBody, InvalidMessage> {
        Ok(match self {
            Envelope::Raft(msg) => {
                let bytes = msg.write_to_bytes().map_err(|e| InvalidMessage(format!("protobuf encode: {e}")))?;
                if bytes.len() > MAX_REPLICA_MESSAGE {
                    return invalid(format!("{} bytes, over the {MAX_REPLICA_MESSAGE}-byte limit", bytes.len()));
                }
                ReplicaBody::Raft(Bytes::from(bytes))
            }
            Envelope::TermQuery => ReplicaBody::TermQuery,
            Envelope::TermReply { term, voters, last } => {
                ReplicaBody::TermReply { term: *term, voters: voters.clone(), last: *last }
            }
            Envelope::ChunkAck { index, end } => ReplicaBody::ChunkAck { index: *index, end: *end },
            Envelope::Chunk { header, offset, total, data } => {
                let message = header.write_to_bytes().map_err(|e| InvalidMessage(format!("protobuf encode: {e}")))?;
                if message.len() + data.len() > MAX_REPLICA_MESSAGE {
                    return invalid(format!("a chunk of {} bytes, over the limit", message.len() + data.len()));
                }
                ReplicaBody::SnapshotChunk {
                    message: Bytes::from(message),
                    offset: *offset,
                    total: *total,
                    data: data.clone(),
                }
            }
        })
    }

    /// Reads a REPLICA frame's body. Bytes that are not a raft message are refused here; a
    /// raft message still has to pass [`ReplicaGroup::check`].
    pub fn from_wire(body: &ReplicaBody) -> Result<Envelope, InvalidMessage> {
        Ok(match body {
            ReplicaBody::Raft(bytes) => {
                let msg = Message::parse_from_bytes(bytes).map_err(|e| InvalidMessage(format!("protobuf: {e}")))?;
                Envelope::Raft(msg)
            }
            ReplicaBody::TermQuery => Envelope::TermQuery,
            ReplicaBody::TermReply { term, voters, last } => {
                Envelope::TermReply { term: *term, voters: voters.clone(), last: *last }
            }
            ReplicaBody::SnapshotChunk { message, offset, total, data } => {
                let header =
                    Message::parse_from_bytes(message).map_err(|e| InvalidMessage(format!("protobuf: {e}")))?;
                Envelope::Chunk { header, offset: *offset, total: *total, data: data.clone() }
            }
            ReplicaBody::ChunkAck { index, end } => Envelope::ChunkAck { index: *index, end: *end },
            ReplicaBody::Forget { .. } => return invalid("a cell mate's forget is not a group's message"),
        })
    }
}

impl ReplicaGroup {
    /// Whether `msg`, received from the cell mate `from` over its authenticated link, may be
    /// handed to this replica. See this module for what is refused and why.
    pub fn check(&self, from: ReplicaId, msg: &Envelope) -> Result<(), InvalidMessage> {
        if from == self.settings.id || !self.knows(from, msg) {
            return invalid(format!("sender {from} is not a mate in this group"));
        }
        let Envelope::Raft(m) = msg else { return Ok(()) };
        if m.from != from || m.to != self.settings.id {
            return invalid(format!("raft message {}->{} on the link from {from}", m.from, m.to));
        }
        let ty = m.get_msg_type();
        use MessageType as T;
        let network = matches!(
            ty,
            T::MsgAppend
                | T::MsgAppendResponse
                | T::MsgRequestVote
                | T::MsgRequestVoteResponse
                | T::MsgHeartbeat
                | T::MsgHeartbeatResponse
                | T::MsgRequestPreVote
                | T::MsgRequestPreVoteResponse
                | T::MsgTimeoutNow
                | T::MsgSnapshot
        );
        // The host asking this replica, its group's leader, for the lead back (`Input::ClaimLead`),
        // for itself: refused from a mate, and at a replica that does not lead.
        let claim =
            ty == T::MsgTransferLeader && self.settings.voters.first() == Some(&from) && self.leading().is_some();
        if !network && !claim {
            return invalid(format!("{ty:?} is never sent between replicas by this build"));
        }
        if m.term == 0 || [m.term, m.log_term, m.index, m.commit, m.reject_hint].iter().any(|&v| v > MAX_TERM_OR_INDEX)
        {
            return invalid(format!("{ty:?} with term {} or an index out of range", m.term));
        }
        if m.snapshot.is_some() != (ty == T::MsgSnapshot)
            || m.request_snapshot != 0
            || (!m.entries.is_empty() && ty != T::MsgAppend)
        {
            return invalid(format!("{ty:?} carries a snapshot or entries it never carries"));
        }
        if ty == T::MsgSnapshot {
            self.check_snapshot(m)?;
        }
        // A leader hands the lead to the preferred replica with TIMEOUT_NOW; one that may not
        // campaign (wiped, not caught up: see `rejoin`) must not be made to.
        if ty == T::MsgTimeoutNow && self.withholding_vote() {
            return invalid("TIMEOUT_NOW to a replica that may not campaign yet");
        }
        match &self.phase {
            // A fencing replica steps no raft message at all.
            Phase::Fencing { .. } => Ok(()),
            Phase::Running(running) => running.check_against_log(m),
        }
    }
}

impl ReplicaGroup {
    /// Whether `from` may send this to this replica: anything from a member as applied here,
    /// and a leader's traffic (appends, heartbeats, snapshots) from any cell mate (the shell
    /// authenticated the link): a replica just added, or one behind the conf change that added
    /// the leader, learns the members from that leader's log. A non-member's campaign and
    /// answers are refused (a removed member's, `members`); a fencing replica hears from the
    /// creation voters.
    fn knows(&self, from: ReplicaId, msg: &Envelope) -> bool {
        let fence = matches!(msg, Envelope::TermQuery | Envelope::TermReply { .. });
        // A fencing replica asks the members its answers name, not only the creation voters.
        let Phase::Running(running) = &self.phase else { return fence || self.settings.voters.contains(&from) };
        let leader_traffic = |m: &Message| {
            matches!(m.get_msg_type(), MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot)
        };
        running.is_member(from)
            || match msg {
                Envelope::Raft(m) | Envelope::Chunk { header: m, .. } => leader_traffic(m),
                Envelope::TermQuery | Envelope::TermReply { .. } | Envelope::ChunkAck { .. } => false,
            }
    }

    /// A snapshot is installed only whole and sound: its state decodes (checksum and shape, see
    /// `snapshot`), it names this replica among its members, and its index and term are in
    /// range. A corrupt
    /// one is refused here, never applied; the leader sends another when this replica refuses
    /// its next append.
    fn check_snapshot(&self, m: &Message) -> Result<(), InvalidMessage> {
        let snapshot = m.get_snapshot();
        let meta = snapshot.get_metadata();
        if meta.index == 0 || meta.index > MAX_TERM_OR_INDEX || meta.term == 0 || meta.term > m.term {
            return invalid(format!(
                "snapshot at index {} term {} in a message of term {}",
                meta.index, meta.term, m.term
            ));
        }
        // The members may have changed since this replica last applied (`members`), so they
        // are not compared with its own; they must be a simple configuration (never joint in
        // this build) of a bounded size, and name this replica.
        let conf = meta.get_conf_state();
        let id = self.settings.id;
        let simple = conf.voters_outgoing.is_empty() && conf.learners_next.is_empty() && !conf.auto_leave;
        let bounded = !conf.voters.is_empty() && conf.voters.len() + conf.learners.len() <= 64;
        if !simple || !bounded || !(conf.voters.contains(&id) || conf.learners.contains(&id)) {
            return invalid("snapshot of a membership this replica is not in");
        }
        if let Err(e) = crate::PubendReplica::decode(&snapshot.data) {
            return invalid(format!("snapshot at index {}: {}", meta.index, e.0));
        }
        Ok(())
    }
}

impl Running {
    /// The checks that depend on this replica's own log. A message of an older term never
    /// reaches the log (raft-rs answers it with the newer term, which is how a deposed leader,
    /// or one whose follower was wiped and fenced, learns to step down), so only the
    /// term-independent checks apply to it: refusing it would keep that answer from going out.
    fn check_against_log(&self, m: &Message) -> Result<(), InvalidMessage> {
        let log = &self.raw.raft.raft_log;
        if m.term < self.raw.raft.term {
            return Self::check_shape(m);
        }
        let (last, committed) = (log.last_index(), log.committed);
        match m.get_msg_type() {
            // Not refused: `Running::hold_commit` lowers it (see there).
            MessageType::MsgHeartbeat if m.commit > last => Ok(()),
            MessageType::MsgAppendResponse if !m.reject && m.index > last => {
                invalid(format!("append ack for index {} past this log's last index {last}", m.index))
            }
            MessageType::MsgAppend => {
                Self::check_shape(m)?;
                // Rewriting a committed entry is a fatal error in raft-rs. An entry this log
                // compacted away (below its first index: committed, applied, in its snapshot)
                // cannot be compared and is not refused: raft-rs ignores an append below its
                // commit and answers with the commit index, which is how a leader that thinks
                // this replica further behind (it caught up from another leader's snapshot)
                // learns where it stands. Refused, the leader probed from below the snapshot
                // for good and this replica never caught up (the simulator's core mode, seed 35).
                let compared = |e: &&raft::eraftpb::Entry| e.index >= log.first_index() && e.index <= committed;
                match m.entries.iter().filter(compared).find(|e| log.term(e.index).ok() != Some(e.term)) {
                    Some(e) => invalid(format!("append rewrites committed entry {}", e.index)),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// An append's entries follow its previous entry, one index each, in terms that never go
    /// down and never pass the message's own term, and are normal entries or single-node conf
    /// changes of the kinds this build proposes (`members`).
    fn check_shape(m: &Message) -> Result<(), InvalidMessage> {
        if m.get_msg_type() != MessageType::MsgAppend {
            return Ok(());
        }
        if m.log_term > m.term {
            return invalid(format!("append's previous term {} above its term {}", m.log_term, m.term));
        }
        let mut previous = m.log_term;
        for (i, e) in m.entries.iter().enumerate() {
            if e.index != m.index + 1 + i as u64 {
                return invalid(format!("append entry {i} has index {} after {}", e.index, m.index));
            }
            let known = match e.get_entry_type() {
                EntryType::EntryNormal => true,
                EntryType::EntryConfChange => crate::members::sound_change(&e.data),
                EntryType::EntryConfChangeV2 => false,
            };
            if e.term < previous || e.term > m.term || !known {
                return invalid(format!("append entry {} has term {} or a type never logged", e.index, e.term));
            }
            previous = e.term;
        }
        Ok(())
    }
}
