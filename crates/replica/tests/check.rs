//! Received messages are checked before raft-rs sees them (`ReplicaGroup::check`): random bytes
//! and random well-typed but wrong raft messages, fed to replicas of a live group through
//! decode, check and step, never panic a replica, and the group goes on committing afterwards.
//! raft-rs itself panics on several of them (a heartbeat committing past the log, an append
//! rewriting a committed entry, a sender that is not a voter), which the targeted tests pin.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use protobuf::Message as _;
use raft::eraftpb::{Entry, EntryType, MessageType};
use tidings_replica::{Action, Envelope, GroupSettings, Input, Message, ReplicaGroup, ReplicaId};
use tidings_wire::peer::ReplicaBody;

/// Three replicas on a perfect network with instant disks.
struct Group {
    replicas: BTreeMap<ReplicaId, ReplicaGroup>,
    acks: usize,
    dropped: Vec<String>,
    now: u64,
}

impl Group {
    fn new() -> Self {
        Self::with(|settings| ReplicaGroup::bootstrap(settings).unwrap())
    }

    fn with(start: impl Fn(GroupSettings) -> ReplicaGroup) -> Self {
        let voters = vec![1, 2, 3];
        let replicas = voters.iter().map(|&id| (id, start(GroupSettings::new(id, voters.clone())))).collect();
        Self { replicas, acks: 0, dropped: Vec::new(), now: 0 }
    }

    /// Feeds one input, then everything it causes, to quiescence.
    fn run(&mut self, id: ReplicaId, input: Input) {
        let mut queue = vec![(id, input)];
        while let Some((id, input)) = queue.pop() {
            let Some(replica) = self.replicas.get_mut(&id) else { continue };
            for action in replica.handle(self.now, input) {
                match action {
                    Action::Send { to, msg } => {
                        // Every message goes through the wire form, as in a broker.
                        let body = msg.to_wire().unwrap();
                        queue.insert(0, (to, Input::Message { from: id, msg: Envelope::from_wire(&body).unwrap() }));
                    }
                    Action::Persist(write) => queue.insert(0, (id, Input::Persisted { number: write.number })),
                    Action::SaveSnapshot { index, .. } => queue.insert(0, (id, Input::SnapshotSaved { index })),
                    Action::Acked { .. } => self.acks += 1,
                    Action::Dropped { reason, .. } => self.dropped.push(reason),
                    _ => {}
                }
            }
        }
    }

    fn tick_all(&mut self, rounds: usize) {
        for _ in 0..rounds {
            self.now += 10;
            for id in 1..=3 {
                self.run(id, Input::Tick);
            }
        }
    }

    fn leader(&self) -> Option<ReplicaId> {
        self.replicas.iter().find(|(_, r)| r.leading().is_some()).map(|(&id, _)| id)
    }

    /// A group with a leader and a few committed publishes.
    fn live() -> Self {
        let mut g = Self::new();
        g.tick_all(30);
        let leader = g.leader().expect("a leader");
        for seq in 0..5 {
            g.run(leader, Input::Publish { publisher: 9, seq, payload: vec![seq as u8] });
        }
        g.tick_all(2);
        assert_eq!(g.acks, 5, "the live group acknowledges what it is given");
        assert!(g.dropped.is_empty(), "honest traffic is never refused: {:?}", g.dropped);
        g
    }

    /// The group still commits: one more publish is acknowledged within a few elections.
    fn still_commits(&mut self) -> bool {
        let before = self.acks;
        for round in 0..60 {
            if let Some(leader) = self.leader() {
                self.run(leader, Input::Publish { publisher: 10, seq: round, payload: Vec::new() });
            }
            self.tick_all(1);
            if self.acks > before {
                return true;
            }
        }
        false
    }
}

fn raft_message(from: u64, to: u64, ty: MessageType, term: u64) -> Message {
    let mut m = Message { from, to, term, ..Message::default() };
    m.set_msg_type(ty);
    m
}

fn entry(index: u64, term: u64) -> Entry {
    Entry { index, term, data: Bytes::from_static(b"x"), ..Entry::default() }
}

/// Feeds `m` from `from` to `to` and reports whether it was refused.
fn refused(g: &mut Group, from: u64, to: u64, m: Message) -> bool {
    let before = g.dropped.len();
    g.run(to, Input::Message { from, msg: Envelope::Raft(m) });
    g.dropped.len() > before
}

/// Each of these panics raft-rs (or makes it miscount a quorum) if it reaches `step` as sent.
#[test]
fn messages_raft_rs_would_panic_on_are_refused() {
    let mut g = Group::live();
    let leader = g.leader().unwrap();
    let follower = if leader == 1 { 2 } else { 1 };
    let term = g.replicas[&leader].leading().unwrap();
    // A heartbeat committing past the log would panic raft-rs. It is not refused (the leader
    // waits for its answer to probe a replica whose disk was wiped): its commit is held at the
    // follower's own.
    let commit = g.replicas[&follower].status().commit;
    let mut heartbeat = raft_message(leader, follower, MessageType::MsgHeartbeat, term);
    heartbeat.commit = 1_000;
    assert!(!refused(&mut g, leader, follower, heartbeat), "heartbeat committing past the log");
    assert_eq!(g.replicas[&follower].status().commit, commit, "the heartbeat advanced no commit");

    let mut rewrite = raft_message(leader, follower, MessageType::MsgAppend, term + 1);
    rewrite.index = 1;
    rewrite.log_term = 1;
    rewrite.entries = vec![entry(2, term + 1)].into();
    assert!(refused(&mut g, leader, follower, rewrite), "append rewriting a committed entry");

    let mut gap = raft_message(leader, follower, MessageType::MsgAppend, term);
    gap.index = 3;
    gap.entries = vec![entry(9, term)].into();
    assert!(refused(&mut g, leader, follower, gap), "append skipping indices");

    let mut forged_ack = raft_message(follower, leader, MessageType::MsgAppendResponse, term);
    forged_ack.index = 1_000;
    assert!(refused(&mut g, follower, leader, forged_ack), "an ack for entries the leader never had");

    // A leader's traffic is heard from any cell mate (a leader added after this replica's
    // applied members, `members`); a campaign or an answer from a non-member is not.
    let campaign = raft_message(7, follower, MessageType::MsgRequestVote, term + 1);
    assert!(refused(&mut g, 7, follower, campaign), "a vote request from a non-member");
    let answer = raft_message(7, leader, MessageType::MsgAppendResponse, term);
    assert!(refused(&mut g, 7, leader, answer), "an append answer from a non-member");
    let spoofed = raft_message(3, follower, MessageType::MsgHeartbeat, term);
    assert!(refused(&mut g, leader, follower, spoofed), "from differs from the link");
    for ty in [MessageType::MsgHup, MessageType::MsgPropose, MessageType::MsgSnapshot, MessageType::MsgTransferLeader] {
        assert!(refused(&mut g, leader, follower, raft_message(leader, follower, ty, term)), "{ty:?}");
    }
    let mut huge = raft_message(leader, follower, MessageType::MsgRequestVote, u64::MAX);
    huge.index = 1;
    assert!(refused(&mut g, leader, follower, huge), "a term that would overflow");
    assert!(g.still_commits());
}

fn message_type() -> impl Strategy<Value = MessageType> {
    (0i32..=18).prop_map(|v| <MessageType as protobuf::ProtobufEnum>::from_i32(v).unwrap())
}

/// Small numbers mostly, so that messages land near the group's real terms and indices.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..12, 1 => any::<u64>()]
}

prop_compose! {
    fn wrong_message()(
        from in 0u64..5, to in 0u64..5, ty in message_type(), term in number(), log_term in number(),
        index in number(), commit in number(), reject in any::<bool>(), reject_hint in number(),
        entries in prop::collection::vec((number(), number(), 0i32..3), 0..4),
    ) -> Message {
        let mut m = Message { from, to, term, log_term, index, commit, reject, reject_hint, ..Message::default() };
        m.set_msg_type(ty);
        m.entries = entries
            .into_iter()
            .map(|(index, term, ty)| {
                let mut e = entry(index, term);
                e.set_entry_type(<EntryType as protobuf::ProtobufEnum>::from_i32(ty).unwrap());
                e
            })
            .collect::<Vec<_>>()
            .into();
        m
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Wrong but well-typed messages, from any link to any replica, never panic a replica, and
    /// the group still commits afterwards.
    #[test]
    fn wrong_messages_never_panic_a_replica(msgs in prop::collection::vec((1u64..=3, 0u64..5, wrong_message()), 1..8)) {
        let mut g = Group::live();
        for (to, link, m) in msgs {
            // Through the wire form, as a broker receives it.
            let body = Envelope::Raft(m).to_wire().unwrap();
            let msg = Envelope::from_wire(&body).unwrap();
            g.run(to, Input::Message { from: link, msg });
            g.tick_all(1);
        }
        prop_assert!(g.still_commits(), "the group stopped committing");
    }

    /// Random bytes as a REPLICA body are refused by decode or by the check, never a panic.
    #[test]
    fn random_bytes_never_panic_a_replica(bytes in prop::collection::vec(any::<u8>(), 0..96), to in 1u64..=3, link in 1u64..=3) {
        let mut g = Group::live();
        if let Ok(msg) = Envelope::from_wire(&ReplicaBody::Raft(Bytes::from(bytes))) {
            g.run(to, Input::Message { from: link, msg });
        }
        g.tick_all(1);
        prop_assert!(g.still_commits());
    }

    /// Snapshot chunks with any offsets, lengths, data and snapshot positions, through the wire
    /// form, are kept or refused, and a garbage snapshot they complete is refused by its
    /// checksum: never a panic, never a stopped group.
    #[test]
    fn wrong_snapshot_chunks_never_panic_a_replica(
        chunks in prop::collection::vec(
            (1u64..=3, 1u64..=3, 1u64..4, 0u64..20, 0u64..48, 1u64..64, prop::collection::vec(any::<u8>(), 0..24)),
            1..12,
        )
    ) {
        let mut g = Group::live();
        for (to, link, term, index, offset, total, data) in chunks {
            let mut header = raft_message(link, to, MessageType::MsgSnapshot, term);
            header.mut_snapshot().mut_metadata().index = index;
            header.mut_snapshot().mut_metadata().term = term;
            header.mut_snapshot().mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
            let chunk = Envelope::Chunk { header, offset, total, data: Bytes::from(data) };
            let msg = Envelope::from_wire(&chunk.to_wire().unwrap()).unwrap();
            prop_assert_eq!(&msg, &chunk);
            g.run(to, Input::Message { from: link, msg });
            g.tick_all(1);
        }
        prop_assert!(g.still_commits(), "the group stopped committing");
    }
}

/// A broker cannot tell a new group from a wiped journal: every replica with an empty journal
/// fences, and when every mate answers term 0 the group is new and starts fresh; a replica
/// wiped later, whose mates answer a real term, rejoins behind the vote fence instead.
#[test]
fn replicas_with_empty_journals_start_a_new_group_and_a_later_wipe_is_fenced() {
    let mut g = Group::with(|settings| ReplicaGroup::rejoin(settings).unwrap());
    g.tick_all(30);
    let leader = g.leader().expect("a new group elects a leader");
    g.run(leader, Input::Publish { publisher: 1, seq: 1, payload: Vec::new() });
    g.tick_all(1);
    assert_eq!(g.acks, 1);
    assert!(g.replicas.values().all(|r| !r.withholding_vote()), "nobody fenced a new group");
    let follower = if leader == 1 { 2 } else { 1 };
    let wiped = ReplicaGroup::rejoin(GroupSettings::new(follower, vec![1, 2, 3])).unwrap();
    g.replicas.insert(follower, wiped);
    g.tick_all(1);
    assert!(g.replicas[&follower].withholding_vote(), "a wiped replica of a live group is fenced");
    assert!(g.still_commits());
}

/// The lead goes back to the first voter (the pubend's host) once it is back and caught up,
/// so publishing resumes where the publishers and the stream are.
#[test]
fn the_lead_returns_to_the_preferred_replica() {
    let mut g = Group::live();
    assert_eq!(g.leader(), Some(1), "the first voter has the shortest election timeout");
    let away = g.replicas.remove(&1).unwrap();
    g.tick_all(40);
    let interim = g.leader().expect("a leader without the first voter");
    assert_ne!(interim, 1);
    g.run(interim, Input::Publish { publisher: 3, seq: 1, payload: Vec::new() });
    g.replicas.insert(1, away);
    g.tick_all(40);
    let leaders: Vec<_> = g.replicas.iter().filter(|(_, r)| r.leading().is_some()).map(|(&id, _)| id).collect();
    assert_eq!(leaders, vec![1], "the lead went back to the first voter");
    let status = g.replicas[&1].status();
    assert_eq!(status.leader, Some(1));
    assert_eq!((status.commit, status.applied), (status.last_index, status.last_index), "{status:?}");
    assert_eq!(status.lag, vec![(2, 0), (3, 0)], "both followers hold the whole log");
    assert_eq!(g.replicas[&2].status().leader, Some(1));
    assert!(g.replicas[&2].status().lag.is_empty(), "only the leader knows the lag");
    assert!(g.still_commits());
}

/// A raft message survives its wire form unchanged.
#[test]
fn a_raft_message_round_trips_through_its_wire_form() {
    let mut m = raft_message(1, 2, MessageType::MsgAppend, 3);
    m.entries = vec![entry(4, 3)].into();
    let back = Envelope::from_wire(&Envelope::Raft(m.clone()).to_wire().unwrap()).unwrap();
    assert_eq!(back, Envelope::Raft(m.clone()));
    assert_eq!(Message::parse_from_bytes(&m.write_to_bytes().unwrap()).unwrap(), m);
}

/// A leader that thinks a follower further behind than it is (the follower caught up from an
/// earlier leader's snapshot) probes it from below the follower's first index. Those entries
/// are committed and compacted there and cannot be compared: the append is not refused, raft-rs
/// answers it with the follower's commit, and the leader goes on from there. Refused, the
/// follower never caught up again (the simulator's delivery-core mode, seed 35).
#[test]
fn an_append_below_a_compacted_log_is_answered_not_refused() {
    let mut g = Group::with(|s| ReplicaGroup::bootstrap(GroupSettings { compact_bytes: 64, ..s }).unwrap());
    g.tick_all(30);
    let leader = g.leader().expect("a leader");
    for seq in 0..30 {
        g.run(leader, Input::Publish { publisher: 9, seq, payload: vec![seq as u8; 8] });
        g.tick_all(1);
    }
    let follower = if leader == 1 { 2 } else { 1 };
    let status = g.replicas[&follower].status();
    assert!(status.first_index > 3, "the follower compacted its log: {status:?}");
    let term = g.replicas[&leader].leading().unwrap();
    let mut probe = raft_message(leader, follower, MessageType::MsgAppend, term);
    (probe.index, probe.log_term) = (1, 1);
    probe.entries = vec![entry(2, 1), entry(3, 1)].into();
    assert!(!refused(&mut g, leader, follower, probe), "{:?}", g.dropped);
    assert!(g.still_commits());
}
