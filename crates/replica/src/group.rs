//! [`ReplicaGroup`]: one pubend's Raft group on one broker, driven like every core here:
//! `handle(now, input) -> actions`, with writes going out as [`Action::Persist`] and their
//! completions coming back as [`Input::Persisted`].
//!
//! Layout: this file holds the types, the constructors and the dispatch; `ready` turns raft-rs's
//! `Ready` into actions (writes, sends, applies, acknowledgements); `rejoin` is the rule for a
//! replica whose disk was wiped.

use std::collections::{BTreeMap, VecDeque};

use raft::eraftpb::{Entry, HardState, Message, MessageType};
use raft::{Config, RawNode, StateRole};

use crate::command::{Command, PublisherId};
use crate::log::Log;
use crate::snapshot::SnapshotCounts;
use crate::state::{Outcome, PubendReplica, Record};

/// A replica's id inside its group: raft-rs's peer id, never 0. The shell maps it to a broker.
pub type ReplicaId = u64;

/// What the shell configures for one group on one broker.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GroupSettings {
    /// This replica.
    pub id: ReplicaId,
    /// Every voter of the group, this one included (the brokers of the pubend's cell that hold
    /// its log); the same list on every replica.
    pub voters: Vec<ReplicaId>,
    /// Ticks without a leader before an election. Each replica waits this plus its position in
    /// `voters`, exactly: raft-rs would draw the timeout from the thread's random generator,
    /// which a deterministic simulation cannot replay, so split votes resolve by rank instead.
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats (less than `election_ticks`).
    pub heartbeat_ticks: usize,
    /// Mutation switch for the simulator only: acknowledge a publish when the leader's own write
    /// is synced, before a quorum has it. Unsafe by design, so that the simulator proves it
    /// would notice; never set it in a broker.
    pub ack_before_quorum: bool,
    /// Whether a leader that is not the first voter hands the lead back to it once it is live
    /// and caught up. On where only the first voter serves the pubend (the simulator, a wiped
    /// host's rebuild); off in a broker that takes pubends over: the successor then serves the
    /// pubend, and handing the lead back would leave two brokers serving it (docs/replication.md,
    /// "Takeover").
    pub hand_back: bool,
    /// Whether a leader tells its followers each new commit index at once (an append message
    /// of its own, which each follower answers after a journal write), or lets it ride on the
    /// next append or heartbeat (raft-rs's `skip_bcast_commit` when off). Only acknowledgements
    /// need the commit, and only the leader gives them, so a follower learning it later costs
    /// nothing but how soon it applies; off, each commit saves an append to every follower, its
    /// journal write there and its answer (docs/replication.md, "Replicated throughput"). On
    /// where a test counts on a follower applying without a tick (the hand-driven network, the
    /// simulator).
    pub broadcast_commit: bool,
    /// Bytes of log entries that make a replica compact its log below what it applied (see
    /// `snapshot`): also at least twice the last snapshot's size.
    pub compact_bytes: u64,
    /// Bytes of records a compaction encodes per turn (see `compaction`): a large state's
    /// snapshot is spread over turns so that no turn holds the broker's driver for long. Small
    /// in the simulator, so its compactions span many turns.
    pub compact_slice: usize,
    /// Mutation switch for the simulator only: every snapshot leaves out the newest unreleased
    /// record, so that the simulator proves it would notice a snapshot that loses one.
    pub snapshot_drops_record: bool,
    /// Whether a leader confirms its lead at every tick ([`Action::Confirmed`]): a read-index
    /// round (raft-rs's `ReadOnlySafe`: a heartbeat that a quorum answers in this term). The
    /// host's engine tells silence only up to the last confirmation, so a host stalled or cut
    /// off past its term cannot call silent the ticks a successor logged. On in a broker; off
    /// where nothing consumes it (the simulator's replica worlds keep their traffic).
    pub confirm_lead: bool,
    /// Whether a publish proposed at a tick the group has passed (at or below the last tick
    /// proposed or applied) is refused rather than moved past it. The broker's engine gives
    /// every tick and serves the record there; a record the group moved would sit at a tick
    /// the engine gives another record later, and each later record of the turn would move
    /// in turn: the group and the log disagree from there on, and a successor (or a log
    /// resumed from the group) serves what the engine never did. Seen as six acknowledged
    /// publishes no subscriber got (nemesis on a replicated cell, seed 55): a retry the
    /// engine had logged at an old tick, never proposed before its host was deposed, proposed
    /// again at that tick after newer ones. Refused, the publisher retries; nothing is logged
    /// at a tick the engine did not give. On in a broker; off in the simulator's replica
    /// worlds, which propose at their clock and rely on the move.
    pub exact_ticks: bool,
    /// The most snapshot data one message carries: a larger snapshot goes as chunks of this
    /// size (see `chunks`), clamped to what one REPLICA frame holds. Small in the simulator, so
    /// its sweeps send every snapshot in many chunks.
    pub snapshot_chunk: usize,
    /// The largest encoded state a replica snapshots or takes from a mate (see `chunks`).
    pub max_snapshot: usize,
    /// Bytes of snapshot chunks a leader sends one mate per tick (at least one chunk; see
    /// `pace`): a large snapshot leaves over several ticks, so the link it shares with other
    /// groups' heartbeats and appends holds a bounded amount of it at a time.
    pub snapshot_window: usize,
}

/// The default [`GroupSettings::compact_bytes`]: 8 MiB of entries, about 30,000 publishes of
/// 256 B, so a broker holds a few MB per group and a follower that missed less than that (a
/// restart) catches up from the log; a wiped one gets the snapshot.
pub const COMPACT_BYTES: u64 = 8 << 20;

/// The default [`GroupSettings::compact_slice`]: 256 KiB, under a ms of encoding a turn.
pub const COMPACT_SLICE: usize = 256 << 10;

impl GroupSettings {
    /// Settings with the simulator's and the broker's default timing (10 and 2 ticks).
    pub fn new(id: ReplicaId, voters: Vec<ReplicaId>) -> Self {
        Self {
            id,
            voters,
            election_ticks: 10,
            heartbeat_ticks: 2,
            ack_before_quorum: false,
            hand_back: true,
            broadcast_commit: true,
            compact_bytes: COMPACT_BYTES,
            compact_slice: COMPACT_SLICE,
            snapshot_drops_record: false,
            confirm_lead: false,
            exact_ticks: false,
            snapshot_chunk: crate::chunks::CHUNK_BYTES,
            max_snapshot: crate::chunks::MAX_SNAPSHOT,
            snapshot_window: crate::pace::SNAPSHOT_WINDOW,
        }
    }
}

/// What travels between the replicas of a group.
#[derive(Clone, PartialEq, Debug)]
pub enum Envelope {
    /// A raft-rs message.
    Raft(Message),
    /// A replica whose disk was wiped asks a mate for its term (see `rejoin`).
    TermQuery,
    /// The answer: the mate's current term, and the voters it applied (membership changes:
    /// the asker waits for those too, see `rejoin`).
    TermReply {
        /// The mate's term.
        term: u64,
        /// Its voters as applied (empty from a mate that is fencing itself).
        voters: Vec<ReplicaId>,
        /// The (term, index) of its last log entry: the asker withholds its vote until its
        /// own log reaches the furthest in the highest term (see `rejoin`).
        last: (u64, u64),
    },
    /// One piece of a snapshot too large for one message (see `chunks`).
    Chunk {
        /// The snapshot message, its data left out.
        header: Message,
        /// Where `data` starts in the snapshot's data.
        offset: u64,
        /// The snapshot data's whole length.
        total: u64,
        /// The piece.
        data: bytes::Bytes,
    },
    /// The receiver of a [`Envelope::Chunk`] holds it: the sender paces the rest of that
    /// snapshot on these (see `pace`).
    ChunkAck {
        /// The raft index of the snapshot the chunk belongs to.
        index: u64,
        /// Where the chunk received ends in the snapshot's data.
        end: u64,
    },
}

/// Everything that can happen to a group.
#[derive(Clone, PartialEq, Debug)]
pub enum Input {
    /// A publisher's guaranteed publish (first send or retry) reached this broker.
    Publish {
        /// The publishing session.
        publisher: PublisherId,
        /// Its sequence number.
        seq: u64,
        /// The message body.
        payload: Vec<u8>,
    },
    /// The host's delivery engine gave this publish its tick (it logs it there and sends it):
    /// the group logs it at that same tick, so a log rebuilt from the group (a wiped host, a
    /// successor) serves it where subscribers already know it. Ticks the shell hands in must
    /// grow in the order it hands them; apply still moves a tick past earlier records and
    /// silence (see [`PubendReplica`]), so a shell that breaks this cannot reorder the stream.
    PublishAt {
        /// The publishing session.
        publisher: PublisherId,
        /// Its sequence number.
        seq: u64,
        /// The engine's tick.
        tick: u64,
        /// The message body.
        payload: Vec<u8>,
    },
    /// Every publish the host's engine appended in one turn of the shell, each at the engine's
    /// tick, in tick order (as [`Input::PublishAt`] one by one): proposed together, one entry
    /// each, so they cost one `Ready`, one journal write and one append message per follower
    /// instead of one of each per publish. A group proposing one publish at a time spent its
    /// broker's turn on per-message work (docs/replication.md, "Replicated throughput").
    PublishAllAt(Vec<Record>),
    /// The leader wants this command logged (silence from the lease, a release point).
    Propose(Command),
    /// A mate sent this.
    Message {
        /// The sender (the shell's authenticated link, checked against the message).
        from: ReplicaId,
        /// What it sent.
        msg: Envelope,
    },
    /// Time passed by one raft tick.
    Tick,
    /// The snapshot of [`Action::SaveSnapshot`] at `index` is durable: the checkpoint naming
    /// it goes to the journal now.
    SnapshotSaved {
        /// The snapshot's log index.
        index: u64,
    },
    /// The write of [`Action::Persist`] `number`, and every earlier one, is synced.
    Persisted {
        /// The write's number.
        number: u64,
    },
    /// The mates whose link from this broker is up now; the shell feeds it before every tick and
    /// before every message from a mate (so a follower that already saw the leader's link drop
    /// grants the pre-vote that drop brought, rather than ignoring it as inside the lease).
    /// A mate holds back its campaign while the group's first voter (the pubend's host) is
    /// linked (see `Running::holds_back`), so a live host is not deposed by a mate whose clock
    /// or disk ran ahead of its own (the first election of a new group). A follower that loses
    /// its link to the leader campaigns within a few ticks rather than a whole election timeout
    /// (see `Running::links`): a dead broker's links drop at once, which is the takeover's
    /// detection. Never fed, no mate counts as linked and elections are raft-rs's alone (the
    /// simulator).
    Links {
        /// The linked mates.
        up: Vec<ReplicaId>,
    },
    /// The host (the group's first voter), a follower, asks the leader for the lead back:
    /// raft-rs's leader transfer, which this follower forwards to the leader, and which the
    /// leader makes once this replica holds its whole log. For a pubend only its host can feed
    /// (a durable subscription's relay pubend, docs/replication.md "Durable subscriptions stored
    /// in the cell"); a mate that took another pubend over keeps it. Ignored elsewhere.
    ClaimLead,
    /// What the group's membership should become (see `members`): the leader, one change at a
    /// time, removes a forgotten member, promotes a learner that caught up, or adds a candidate
    /// as a learner while the group has fewer members than `target`. The shell feeds it at
    /// every tick; a replica that does not lead ignores it.
    Membership(Membership),
}

/// What the shell wants of a group's membership ([`Input::Membership`]).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Membership {
    /// How many members (voters and learners) the group should have.
    pub target: usize,
    /// Linked cell mates that may be added, in the order to add them.
    pub candidates: Vec<ReplicaId>,
    /// Brokers removed from the cell for good: removed from the group if members.
    pub forgotten: Vec<ReplicaId>,
}

/// One write the shell must make durable, in order, then report with [`Input::Persisted`].
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Write {
    /// Its number (0: a rejoin fence, not a raft-rs ready; report it all the same).
    pub number: u64,
    /// Log entries to append; the first one's index replaces everything from there on.
    pub entries: Vec<Entry>,
    /// The new term, vote and commit index, if they changed.
    pub hard_state: Option<HardState>,
    /// Set when this replica rejoins after a wipe: the term its vote waits for (see `rejoin`).
    pub rejoin_term: Option<u64>,
    /// With `rejoin_term`: the index its log must reach in that term (0: any entry of it).
    pub rejoin_index: u64,
    /// A snapshot (index, term, encoded [`PubendReplica`]): the log up to `index` is replaced
    /// by it, and `entries` are the whole log after it (a checkpoint: every journal record
    /// before this one may be released once it is synced). `Bytes`: shared with the snapshot
    /// the log keeps for followers, not copied (a state of 100 MB took 34-153 ms to copy: `tests/encode_cost.rs`).
    pub snapshot: Option<(u64, u64, bytes::Bytes)>,
    /// The snapshot is durable already, saved apart ([`Action::SaveSnapshot`]): the journal
    /// names it and does not hold its bytes.
    pub snapshot_apart: bool,
    /// The members (voters, learners) at the snapshot's index: with the conf changes in the
    /// entries after it, what a restart rebuilds the current membership from.
    pub conf: Option<Conf>,
}

/// A group's members as applied: (voters, learners), each in id order.
pub type Conf = (Vec<ReplicaId>, Vec<ReplicaId>);

/// One committed entry as this replica applied it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Applied {
    /// The entry's log index.
    pub index: u64,
    /// The term it was logged in.
    pub term: u64,
    /// What applying it did.
    pub outcome: Outcome,
}

/// What the shell must do.
#[derive(Clone, PartialEq, Debug)]
pub enum Action {
    /// Send to a mate (loss, duplication and reordering are tolerated).
    Send {
        /// The mate.
        to: ReplicaId,
        /// What to send.
        msg: Envelope,
    },
    /// Make this durable after every earlier write, then report it.
    Persist(Write),
    /// Make this snapshot of the applied state (at log `index`, `term`) durable apart from
    /// the journal, then report it with [`Input::SnapshotSaved`]; the checkpoint that names it
    /// follows as a [`Write`]. Apart, because every acknowledgement waits for the journal's
    /// syncs: a 76 MB checkpoint in the journal's group commit held them for 350 ms (issue 40).
    /// Until that checkpoint is synced, the snapshot the journal's previous one names is kept.
    SaveSnapshot {
        /// The log index the snapshot is of.
        index: u64,
        /// That entry's term.
        term: u64,
        /// The encoded state, shared with the log's copy.
        data: bytes::Bytes,
    },
    /// Committed entries applied here, in log order.
    Apply(Vec<Applied>),
    /// Tell the publisher its publish is safe: a quorum has it, and this replica led the
    /// group, in the term it proposed it, when it was applied.
    Acked {
        /// The publishing session.
        publisher: PublisherId,
        /// Its sequence number.
        seq: u64,
        /// Where it landed (a retry gets the first copy's tick; `None`: the retry of a record
        /// already released, "logged earlier, tick forgotten").
        tick: Option<u64>,
    },
    /// This replica does not lead: the publisher should try the leader (when known).
    Refused {
        /// The publishing session.
        publisher: PublisherId,
        /// Its sequence number.
        seq: u64,
        /// The leader this replica last heard from.
        leader: Option<ReplicaId>,
    },
    /// This replica leads the group in `term`: it hosts the pubend now.
    BecameLeader {
        /// The term, the pubend's epoch.
        term: u64,
    },
    /// This replica led the group when a quorum answered a heartbeat it sent at `at` (the
    /// shell's milliseconds, as given to [`ReplicaGroup::handle`]): no other replica can have
    /// been elected before then, so nothing a successor assigned is at or below `at`
    /// ([`GroupSettings::confirm_lead`]).
    Confirmed {
        /// When the confirmed heartbeat was sent.
        at: u64,
    },
    /// This replica no longer leads (it led in `term`): nothing it proposed then will be acked.
    LostLeadership {
        /// The term it led.
        term: u64,
    },
    /// A received message failed [`ReplicaGroup::check`] and was dropped before raft-rs saw
    /// it: the shell logs the reason (a corrupt frame or a buggy mate, never normal traffic).
    Dropped {
        /// The mate whose link it came on.
        from: ReplicaId,
        /// Why it was refused.
        reason: String,
    },
    /// The state is over [`GroupSettings::max_snapshot`]: the log is not compacted (and grows)
    /// until releases shrink the state. Given again only once the log has doubled since.
    TooLarge {
        /// The state's encoded bytes.
        bytes: u64,
        /// The maximum.
        max: u64,
    },
    /// The replica's state broke an invariant raft-rs relies on: stop it and rebuild it from
    /// its mates (as after a wipe), never serve from it.
    Fault {
        /// What broke.
        reason: String,
    },
    /// The group's members changed (a conf change applied, or a snapshot installed): the
    /// shell shows them and counts quorums by them.
    Members {
        /// The voters.
        voters: Vec<ReplicaId>,
        /// The learners (catching up, not counted in quorums).
        learners: Vec<ReplicaId>,
    },
    /// This replica applied its own removal from the group: the shell stops it and drops its
    /// journal (it will never be asked for anything again).
    Removed,
}

/// What a restarted replica read back from its disk: every write it had reported synced, and
/// possibly later ones.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Recovered {
    /// The last hard state written.
    pub hard_state: HardState,
    /// The last snapshot written (index, term, encoded state), if any.
    pub snapshot: Option<(u64, u64, bytes::Bytes)>,
    /// The log after the snapshot (from index 1 without one), contiguous.
    pub entries: Vec<Entry>,
    /// The last rejoin term written (0: none).
    pub rejoin_term: u64,
    /// The index written with it (see [`Write::rejoin_index`]).
    pub rejoin_index: u64,
    /// The members at the snapshot (none: the creation voters, [`GroupSettings::voters`]).
    pub conf: Option<Conf>,
}

/// Why a group could not start from what the disk gave back.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ReplicaError {
    /// The settings are not a valid group (raft-rs's message).
    Settings(String),
    /// The recovered log is not contiguous from index 1 (or its snapshot), its terms go down,
    /// or its snapshot does not decode.
    BrokenLog,
}

impl std::fmt::Display for ReplicaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplicaError::Settings(why) => write!(f, "invalid replica group settings: {why}"),
            ReplicaError::BrokenLog => write!(f, "recovered raft log is not contiguous"),
        }
    }
}

impl std::error::Error for ReplicaError {}

/// A ready whose write is not synced yet, with what waits for it.
pub(crate) struct Unsynced {
    pub(crate) number: u64,
    /// Messages raft-rs allows out only once the write is durable (votes, append acks).
    pub(crate) messages: Vec<Message>,
    /// The highest (term, index) among the write's entries and snapshot ((0, 0): none).
    pub(crate) reach: (u64, u64),
    /// Publishes in the write, with their proposed ticks (for the mutation switch only).
    pub(crate) publishes: Vec<(PublisherId, u64, u64)>,
    /// The index of a snapshot the write installs (0: none).
    pub(crate) installed: u64,
}

/// The running part of a group: raft-rs and the applied state.
pub(crate) struct Running {
    pub(crate) raw: RawNode<Log>,
    pub(crate) state: PubendReplica,
    /// Publishes this leader proposed, and the term it proposed them in.
    pub(crate) pending: BTreeMap<(PublisherId, u64), u64>,
    /// The term this replica leads, if it does.
    pub(crate) leading: Option<u64>,
    /// The last tick this leader proposed.
    pub(crate) last_proposed: u64,
    /// The term of the last entry applied (0: none): once it is the term this replica leads,
    /// every entry committed before its lead is applied (see [`ReplicaGroup::serving`]).
    pub(crate) applied_term: u64,
    pub(crate) unsynced: VecDeque<Unsynced>,
    /// Non-zero while a rejoined replica withholds its vote (see `rejoin`).
    pub(crate) rejoin_term: u64,
    /// The index its log must reach in `rejoin_term` (see `rejoin`).
    pub(crate) rejoin_index: u64,
    /// The mates linked at the shell's last [`Input::Links`].
    pub(crate) linked: Vec<ReplicaId>,
    /// Snapshot traffic (see `snapshot`).
    pub(crate) snapshots: SnapshotCounts,
    /// The log bytes the next compaction waits for: twice the last snapshot's size.
    pub(crate) compact_at: u64,
    /// The compaction being encoded, a slice a turn (see `compaction`).
    pub(crate) compaction: Option<crate::compaction::Compaction>,
    /// The index of the snapshot being saved apart ([`Action::SaveSnapshot`]): no compaction
    /// starts until its checkpoint is written.
    pub(crate) saving: Option<u64>,
    /// The number of the last [`Write`] handed out (a compaction's write takes it too).
    pub(crate) last_number: u64,
    /// Ticks in a row this mate held its campaign back for a linked host (see `holds_back`).
    pub(crate) held: usize,
    /// The snapshot being received in chunks (see `chunks`).
    pub(crate) assembly: crate::chunks::Assembly,
    /// The most snapshot data one sent message carries ([`GroupSettings::snapshot_chunk`]).
    pub(crate) chunk: usize,
    /// The chunks of snapshots still to send, per mate (see `pace`).
    pub(crate) pacer: crate::pace::Pacer,
    /// The last log position (term, index) the host campaigned with since a leader was last
    /// heard: a host whose log is behind this replica's cannot win, so no mate holds back for
    /// it (see `holds_back`).
    pub(crate) host_claim: Option<(u64, u64)>,
    /// Whether this replica has been a member (voter or learner) of the group as applied
    /// here: an added replica starts outside its own membership, and only a member that
    /// then leaves it was removed (see `members`).
    pub(crate) was_member: bool,
}

/// Where a group stands.
pub(crate) enum Phase {
    /// A wiped replica learning its mates' terms before it takes part (see `rejoin`): the
    /// answers so far, the voters they named, and the brokers forgotten in the cell (never
    /// asked).
    Fencing {
        /// Per mate, its latest answer: its term and its log's last (term, index).
        answers: BTreeMap<ReplicaId, (u64, (u64, u64))>,
        named: std::collections::BTreeSet<ReplicaId>,
        forgotten: Vec<ReplicaId>,
        /// An added member (`ReplicaGroup::added`): the term of the leader that named it. It
        /// never starts as a new group's voter, and starts in that term at least.
        added: Option<u64>,
    },
    /// Taking part in the group.
    Running(Box<Running>),
}

/// One pubend's Raft group on one broker (a restart is a new value: see the constructors).
pub struct ReplicaGroup {
    pub(crate) settings: GroupSettings,
    pub(crate) phase: Phase,
}

impl ReplicaGroup {
    /// A replica of a group that has never run: every voter starts this way, once, when the
    /// pubend is created (the shell marks that on disk, so an empty disk later means a wipe).
    pub fn bootstrap(settings: GroupSettings) -> Result<Self, ReplicaError> {
        if !settings.voters.contains(&settings.id) {
            return Err(ReplicaError::Settings("this replica is not a voter of its group".into()));
        }
        Self::restart(settings, Recovered::default())
    }

    /// A replica restarted from what its disk recovered. Its state is its last snapshot's, and
    /// the committed entries after it are applied again, so the state is rebuilt by the same
    /// code that built it; so are its members (the snapshot's, then the conf changes after it:
    /// see `members`). It may be outside the creation voters (a member added later).
    pub fn restart(settings: GroupSettings, recovered: Recovered) -> Result<Self, ReplicaError> {
        let running = Running::start(&settings, recovered)?;
        Ok(Self { settings, phase: Phase::Running(Box::new(running)) })
    }

    /// Feeds one input at time `now` (milliseconds; must not go backwards) and returns what the
    /// shell must do, in order.
    pub fn handle(&mut self, now: u64, input: Input) -> Vec<Action> {
        self.handle_all(now, [input])
    }

    /// Feeds several inputs at time `now`, in order, then turns what raft-rs has to say into
    /// actions once: the messages a mate sent during one turn of the shell cost one `Ready`
    /// and one journal write here, not one of each (raft-rs steps any number of messages
    /// between two `Ready`s, and the answers wait for the write of the `Ready` that holds
    /// everything they acknowledge).
    pub fn handle_all(&mut self, now: u64, inputs: impl IntoIterator<Item = Input>) -> Vec<Action> {
        let mut out = Vec::new();
        let mut stepped = false;
        for input in inputs {
            let input = match input {
                Input::Message { from, msg: Envelope::Chunk { header, offset, total, data } } => {
                    let chunk = crate::chunks::Chunk { from, header: &header, offset, total, data: &data };
                    match self.assemble(chunk, &mut out) {
                        Some(whole) => Input::Message { from, msg: Envelope::Raft(whole) },
                        None => continue,
                    }
                }
                input => input,
            };
            if let Input::Message { from, msg } = &input {
                if let Err(e) = self.check(*from, msg) {
                    if let (Envelope::Raft(m), Phase::Running(running)) = (msg, &mut self.phase) {
                        running.snapshots.refused += u64::from(crate::snapshot::is_snapshot(m.get_msg_type()));
                    }
                    out.push(Action::Dropped { from: *from, reason: e.0 });
                    continue;
                }
            }
            match &mut self.phase {
                Phase::Fencing { .. } => self.fencing(input, &mut out),
                Phase::Running(running) => {
                    running.step(&self.settings, now, input, &mut out);
                    stepped = true;
                }
            }
        }
        if let (true, Phase::Running(running)) = (stepped, &mut self.phase) {
            running.drain(&self.settings, &mut out);
        }
        out
    }
}

impl Running {
    pub(crate) fn start(settings: &GroupSettings, recovered: Recovered) -> Result<Self, ReplicaError> {
        let Recovered { mut hard_state, snapshot, entries, rejoin_term, rejoin_index, conf } = recovered;
        let (base, base_term) = snapshot.as_ref().map_or((0, 0), |&(index, term, _)| (index, term));
        let contiguous = entries.iter().enumerate().all(|(i, e)| e.index == base + i as u64 + 1)
            && entries.windows(2).all(|w| w[0].term <= w[1].term)
            && entries.first().is_none_or(|e| e.term >= base_term);
        if !contiguous {
            return Err(ReplicaError::BrokenLog);
        }
        let state = match &snapshot {
            Some((_, _, data)) => PubendReplica::decode(data).map_err(|_| ReplicaError::BrokenLog)?,
            None => PubendReplica::default(),
        };
        // A commit index past the log (a write torn between entries and hard state) is lowered:
        // the leader tells it again, and lowering commit never unsays anything. The snapshot is
        // committed (it was applied).
        let last = base + entries.len() as u64;
        hard_state.commit = hard_state.commit.clamp(base, last);
        let fence = (rejoin_term, rejoin_index);
        let caught_up = rejoin_term == 0
            || (base_term, base) >= fence
            || entries.last().is_some_and(|e| (e.term, e.index) >= fence);
        let conf = conf.unwrap_or_else(|| (settings.voters.clone(), Vec::new()));
        let was_member = conf.0.contains(&settings.id) || conf.1.contains(&settings.id);
        let mut storage = Log::new(conf, snapshot);
        storage.append(&entries).map_err(|_| ReplicaError::BrokenLog)?;
        storage.set_hard_state(hard_state);
        // An added member (not among the creation voters) ranks after all of them.
        let rank = settings.voters.iter().position(|&v| v == settings.id).unwrap_or(settings.voters.len());
        let config = Config {
            id: settings.id,
            election_tick: settings.election_ticks,
            heartbeat_tick: settings.heartbeat_ticks,
            // One tick past the lease (`election_ticks`): a follower that saw its leader's link
            // drop is put at the lease's end (see `links`), out of it at once, and the ranks
            // still order the campaigns after that.
            min_election_tick: settings.election_ticks + 1 + rank,
            max_election_tick: settings.election_ticks + 2 + rank,
            check_quorum: true,
            pre_vote: true,
            max_inflight_msgs: 256,
            max_size_per_msg: 1 << 20,
            skip_bcast_commit: !settings.broadcast_commit,
            ..Config::default()
        };
        config.validate().map_err(|e| ReplicaError::Settings(e.to_string()))?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&config, storage, &logger).map_err(|e| ReplicaError::Settings(e.to_string()))?;
        Ok(Self {
            raw,
            state,
            pending: BTreeMap::new(),
            leading: None,
            last_proposed: 0,
            applied_term: base_term,
            unsynced: VecDeque::new(),
            rejoin_term: if caught_up { 0 } else { rejoin_term },
            rejoin_index: if caught_up { 0 } else { rejoin_index },
            linked: Vec::new(),
            held: 0,
            assembly: crate::chunks::Assembly::default(),
            chunk: settings.snapshot_chunk,
            pacer: crate::pace::Pacer::new(settings.snapshot_window),
            host_claim: None,
            was_member,
            snapshots: SnapshotCounts::default(),
            compact_at: 0,
            compaction: None,
            saving: None,
            last_number: 0,
        })
    }

    /// One input, without turning raft-rs's `Ready` into actions yet (`ReplicaGroup::handle_all`
    /// does, once for all its inputs).
    fn step(&mut self, settings: &GroupSettings, now: u64, input: Input, out: &mut Vec<Action>) {
        match input {
            Input::Publish { publisher, seq, payload } => {
                self.publish_all(vec![Record { tick: now, publisher, seq, payload }], false, out)
            }
            Input::PublishAt { publisher, seq, tick, payload } => {
                self.publish_all(vec![Record { tick, publisher, seq, payload }], settings.exact_ticks, out)
            }
            Input::PublishAllAt(records) => self.publish_all(records, settings.exact_ticks, out),
            Input::Propose(command) => {
                if self.leading.is_some() {
                    let _ = self.raw.propose(Vec::new(), command.encode());
                }
            }
            Input::Message { from, msg: Envelope::TermQuery } => {
                let raft = &self.raw.raft;
                let (term, last) = (raft.term, (raft.raft_log.last_term(), raft.raft_log.last_index()));
                let voters = self.raw.store().conf().0;
                out.push(Action::Send { to: from, msg: Envelope::TermReply { term, voters, last } });
            }
            // `ReplicaGroup::handle_all` assembles chunks into the message they carry.
            Input::Message { msg: Envelope::TermReply { .. } | Envelope::Chunk { .. }, .. } => {}
            Input::Message { from, msg: Envelope::ChunkAck { index, end } } => self.chunk_acked(from, index, end, out),
            // `ReplicaGroup::check` passed it (`envelope`): a snapshot among them decodes.
            Input::Message { from, msg: Envelope::Raft(mut msg) } => {
                self.note_campaigns(settings, from, &msg);
                self.forget_lost_progress(from, &msg);
                self.hold_commit(&mut msg);
                let _ = self.raw.step(msg);
            }
            Input::Tick => {
                // A rejoined replica that has not caught up must not campaign: it cannot know
                // which entries it lost.
                if self.rejoin_term == 0 && !self.holds_back(settings) {
                    self.raw.tick();
                }
                if settings.confirm_lead && self.raw.raft.state == StateRole::Leader {
                    self.raw.read_index(now.to_be_bytes().to_vec());
                }
                self.pace(out);
                self.hand_back(settings);
            }
            Input::Persisted { number } => self.persisted(settings, number, out),
            Input::SnapshotSaved { index } => self.saved(index, out),
            Input::Links { up } => self.links(settings, up),
            Input::Membership(wanted) => self.membership(settings, &wanted),
            Input::ClaimLead => {
                let host = settings.voters.first() == Some(&settings.id);
                let leader = self.raw.raft.leader_id;
                if host && self.leading.is_none() && self.rejoin_term == 0 && leader != 0 && leader != settings.id {
                    self.raw.transfer_leader(settings.id);
                }
            }
        }
    }

    /// Whether this tick must not reach raft-rs: this replica is a mate (not the first voter),
    /// it does not lead, its next tick would start a campaign, and the host is linked. The host
    /// gets the first chance at every election it is alive for: its election timeout is the
    /// shortest, but a mate whose fence or disk finished first would otherwise win a new group's
    /// first election and take a live host's pubend (docs/replication.md, "Takeover"). The hold
    /// lasts at most one more election timeout in a row: a linked host that cannot campaign (it
    /// is behind its wipe fence, or its disk stalls) must not leave the group without a leader.
    pub(crate) fn holds_back(&mut self, settings: &GroupSettings) -> bool {
        let mate = settings.voters.first() != Some(&settings.id);
        let raft = &self.raw.raft;
        let would_campaign =
            raft.state != StateRole::Leader && raft.election_elapsed + 1 >= raft.randomized_election_timeout();
        let host_linked = settings.voters.first().is_some_and(|host| self.linked.contains(host));
        let host_behind = self.host_claim.is_some_and(|(term, index)| !raft.raft_log.is_up_to_date(index, term));
        if !(mate && would_campaign && host_linked) || host_behind || self.held >= settings.election_ticks {
            self.held = 0;
            return false;
        }
        self.held += 1;
        true
    }

    /// Keeps the log position the host last campaigned with, until a leader is heard again. The
    /// host may lack entries this mate holds: the leader that died committed them with the other
    /// mates before the host received them. Then this mate refuses the host's votes, the host
    /// cannot win, and holding this mate's own campaign back for it left the group leaderless
    /// for one more election timeout (the process takeover test: about one kill in four took
    /// 1.1-1.6 s instead of about 0.1 s).
    fn note_campaigns(&mut self, settings: &GroupSettings, from: ReplicaId, msg: &Message) {
        match msg.get_msg_type() {
            MessageType::MsgRequestPreVote | MessageType::MsgRequestVote if settings.voters.first() == Some(&from) => {
                self.host_claim = Some((msg.log_term, msg.index));
            }
            MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot => self.host_claim = None,
            _ => {}
        }
    }

    /// The shell's links changed: a follower whose link to its leader just dropped (the leader
    /// died, or is cut off from it) brings its election clock to the end of the leader's lease
    /// (`election_ticks`), so it grants a mate's pre-vote at once and campaigns itself after
    /// `1 + rank` ticks rather than a whole timeout; the ranks still order the mates. Being put
    /// out of the lease at once matters: the host (rank 0) campaigns at the tick it sees the
    /// drop, and a mate whose own tick comes later would otherwise ignore that pre-vote and
    /// leave the group leaderless for a whole election timeout (seen: about one takeover in
    /// three took a second). A leader cut off from only this replica is not deposed: its other
    /// followers, still linked to it and in its lease, refuse the pre-vote.
    fn links(&mut self, settings: &GroupSettings, up: Vec<ReplicaId>) {
        let leader = self.raw.raft.leader_id;
        let lost = leader != 0 && self.linked.contains(&leader) && !up.contains(&leader);
        let dropped: Vec<ReplicaId> = self.linked.iter().copied().filter(|mate| !up.contains(mate)).collect();
        dropped.into_iter().for_each(|mate| self.unreachable(mate));
        self.linked = up;
        if lost && self.raw.raft.state == StateRole::Follower {
            let raft = &mut self.raw.raft;
            raft.election_elapsed = raft.election_elapsed.max(settings.election_ticks);
        }
    }

    /// Whether this replica leads in `term` right now: the acknowledgement rule's fence.
    pub(crate) fn leads_in(&self, term: u64) -> bool {
        self.raw.raft.state == StateRole::Leader && self.raw.raft.term == term && self.leading == Some(term)
    }
}
