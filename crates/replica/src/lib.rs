//! A pubend's log replicated by Raft, sans-IO (issue 40): each pubend is one Raft group among
//! the brokers of its cell (multi-raft, as TiKV's regions), run by raft-rs (TiKV's `raft`
//! crate), which is itself a pure state machine and so runs unchanged inside the simulator.
//!
//! The leader is the broker that hosts the pubend; the Raft term is the pubend's epoch, which
//! fences a deposed leader (it acknowledges nothing it proposed in an earlier term); a guaranteed
//! publish is acknowledged only once a quorum has synced it and the leader applied it.
//!
//! Map, in reading order:
//! - [`command`]: what the log carries (publish, silence, release) and its bytes.
//! - [`state`]: [`PubendReplica`], the replicated state machine (records, silence, release
//!   point, the retry table that answers a retry after a takeover with its first tick), bounded
//!   by what subscribers still need (released records leave a per-publisher high-water mark).
//! - [`ReplicaGroup`] (`group`, `ready`, `rejoin`): one group on one broker, driven as
//!   `handle(now, input) -> actions`; writes go out as [`Action::Persist`] and their completions
//!   come back as [`Input::Persisted`]; `rejoin` is the rule for a replica whose disk was wiped.
//! - [`journal`]: the durable side, each [`Write`] one record of a `tidings-store` pubend, and
//!   recovery folding them back into [`Recovered`].
//! - [`snapshot`] (with `log`, the raft-rs storage holding a snapshot and the entries after
//!   it): log compaction, the snapshot's bytes, and a follower behind the leader's first index
//!   caught up from a snapshot plus the log's tail; a compaction's write is a checkpoint below
//!   which the journal is released; `compaction`: a snapshot encoded a slice per turn.
//!
//! Nothing here runs a thread, a timer, a socket or a disk. Determinism: raft-rs draws election
//! timeouts from the thread's random generator; [`GroupSettings`] pins each replica's timeout
//! to a one-value range, so a run is a function of its inputs.
//!
//! - `envelope`: an [`Envelope`] as a REPLICA frame's body, and [`ReplicaGroup::check`], which
//!   refuses what would make raft-rs panic or miscount before raft-rs sees it.
//!
//! The host opens its pubend from [`ReplicaGroup::serving`]'s state when its own log is
//! missing (`tidings_node::replicated`); a successor will open it the same way (takeover).
//!
//! - `chunks`: a snapshot larger than one REPLICA frame sent as chunks and reassembled, in
//!   order and bounded, before its checksum is verified and raft-rs sees it; `pace`: a leader
//!   sends each mate a window of those chunks per tick, not all at once.
//!
//! - `members`: membership changes (a learner added, caught up by snapshot and log tail,
//!   promoted; a forgotten member removed), one single-node conf change at a time, and the
//!   members persisted with each snapshot so a restart replays the current membership.

mod chunks;
pub mod command;
mod compaction;
mod envelope;
mod group;
pub mod journal;
mod log;
mod members;
mod pace;
mod parts;
mod propose;
mod ready;
mod rejoin;
pub mod snapshot;
pub mod state;
mod status;

pub use chunks::{CHUNK_BYTES, MAX_CHUNK, MAX_SNAPSHOT};
pub use command::{Command, DecodeError, PublisherId};
pub use envelope::{InvalidMessage, MAX_TERM_OR_INDEX};
pub use group::{
    Action, Applied, Conf, Envelope, GroupSettings, Input, Membership, Recovered, ReplicaError, ReplicaGroup,
    ReplicaId, Write, COMPACT_BYTES, COMPACT_SLICE,
};
pub use journal::{Journal, JournalError};
pub use members::PROMOTE_SLACK;
pub use pace::SNAPSHOT_WINDOW;
pub use raft::eraftpb::{Entry, HardState, Message, MessageType};
pub use snapshot::SnapshotCounts;
pub use state::{Outcome, PubendReplica, Record};
pub use status::Status;
