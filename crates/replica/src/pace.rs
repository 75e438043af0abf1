//! Pacing of a snapshot's chunks (issue 40, "pacing of chunks"): a leader sends a mate at most
//! [`GroupSettings::snapshot_window`](crate::GroupSettings::snapshot_window) bytes of snapshot
//! data per tick, so a 1 GiB snapshot is not 1,024 frames queued on the link at once, ahead of
//! every other group's heartbeats and appends on that link.
//!
//! **Queue.** Each mate has at most one queue: the chunks of the last snapshot sent to it not
//! yet handed to the shell. A send hands out the first window at once (a snapshot within one
//! window leaves whole, as before pacing); each tick hands out the next. A newer snapshot to
//! the same mate replaces the older one's chunks (the receiver drops them anyway once a later
//! snapshot's come).
//!
//! **raft-rs.** The leader reports a snapshot finished only when its last chunk has left. Until
//! then raft-rs keeps the mate in its snapshot state, where it sends that mate no appends and
//! no other snapshot (heartbeats still go, so the lease holds). A queue is dropped when the
//! transfer cannot go on: the mate's link drops (reported failed, so raft-rs probes it and
//! sends a new snapshot once it answers again), this replica stops leading (a new leader
//! starts its own transfers), or raft-rs no longer waits on it (the mate caught up otherwise).

use std::collections::{BTreeMap, VecDeque};

use raft::{ProgressState, SnapshotStatus, StateRole};

use crate::group::{Action, Envelope, ReplicaId, Running};

/// The default [`GroupSettings::snapshot_window`](crate::GroupSettings::snapshot_window): 8 MiB
/// of snapshot data to one mate per tick, 8 chunks of the default 1 MiB: 80 MiB/s at the
/// broker's 100 ms tick, so a 1 GiB snapshot takes about 13 s, and a link holds at most 8 MiB
/// of one group's snapshot at a time.
pub const SNAPSHOT_WINDOW: usize = 8 << 20;

/// The chunks still to send, per mate (see this module).
#[derive(Debug)]
pub(crate) struct Pacer {
    /// Bytes of snapshot data per mate and tick (at least one chunk goes each time).
    window: usize,
    queues: BTreeMap<ReplicaId, VecDeque<Envelope>>,
}

/// What one send or tick handed out.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub(crate) struct Emitted {
    /// Chunks handed to the shell.
    pub(crate) chunks: u64,
    /// Mates whose snapshot has left whole: their transfer is finished.
    pub(crate) finished: Vec<ReplicaId>,
}

impl Pacer {
    /// A pacer handing out `window` bytes of chunks per mate and tick.
    pub(crate) fn new(window: usize) -> Self {
        Self { window, queues: BTreeMap::new() }
    }

    /// Queues one snapshot's `chunks` (in order) for `to`, replacing what is left of an earlier
    /// one, and hands out the first window now.
    pub(crate) fn send(&mut self, to: ReplicaId, chunks: Vec<Envelope>, out: &mut Vec<Action>) -> Emitted {
        let mut queue = VecDeque::from(chunks);
        let mut emitted = Emitted { chunks: self.emit(to, &mut queue, out), finished: Vec::new() };
        match queue.is_empty() {
            true => {
                self.queues.remove(&to);
                emitted.finished.push(to);
            }
            false => {
                self.queues.insert(to, queue);
            }
        }
        emitted
    }

    /// Hands out the next window of every queue.
    pub(crate) fn tick(&mut self, out: &mut Vec<Action>) -> Emitted {
        let mut emitted = Emitted::default();
        let mut queues = std::mem::take(&mut self.queues);
        for (&to, queue) in &mut queues {
            emitted.chunks += self.emit(to, queue, out);
            if queue.is_empty() {
                emitted.finished.push(to);
            }
        }
        queues.retain(|_, queue| !queue.is_empty());
        self.queues = queues;
        emitted
    }

    /// Moves chunks from `queue` to `out` up to the window's bytes (at least one chunk);
    /// returns how many.
    fn emit(&self, to: ReplicaId, queue: &mut VecDeque<Envelope>, out: &mut Vec<Action>) -> u64 {
        let (mut bytes, mut chunks) = (0usize, 0u64);
        while bytes < self.window.max(1) {
            let Some(msg) = queue.pop_front() else { break };
            bytes += match &msg {
                Envelope::Chunk { data, .. } => data.len().max(1),
                _ => 1,
            };
            chunks += 1;
            out.push(Action::Send { to, msg });
        }
        chunks
    }

    /// Drops the queue of `to`; whether there was one.
    pub(crate) fn drop_queue(&mut self, to: ReplicaId) -> bool {
        self.queues.remove(&to).is_some()
    }

    /// Drops every queue.
    pub(crate) fn clear(&mut self) {
        self.queues.clear();
    }

    /// The mates with a queue.
    pub(crate) fn mates(&self) -> Vec<ReplicaId> {
        self.queues.keys().copied().collect()
    }

    /// Chunks queued, over every mate.
    pub(crate) fn queued(&self) -> u64 {
        self.queues.values().map(|q| q.len() as u64).sum()
    }
}

impl Running {
    /// A tick on the leader: drops the queues raft-rs no longer waits on, hands out the next
    /// window of the others and reports the snapshots that left whole. Not leading, it drops
    /// them all.
    pub(crate) fn pace(&mut self, out: &mut Vec<Action>) {
        if self.raw.raft.state != StateRole::Leader {
            self.pacer.clear();
            return;
        }
        for to in self.pacer.mates() {
            let waiting = self.raw.raft.prs().get(to).is_some_and(|p| p.state == ProgressState::Snapshot);
            if !waiting {
                self.pacer.drop_queue(to);
            }
        }
        let emitted = self.pacer.tick(out);
        self.snapshots.chunks_sent += emitted.chunks;
        for to in emitted.finished {
            self.raw.report_snapshot(to, SnapshotStatus::Finish);
        }
    }

    /// The link to `to` dropped: its queue goes, and raft-rs hears the transfer failed, so it
    /// probes the mate once it answers again and sends a new snapshot.
    pub(crate) fn unreachable(&mut self, to: ReplicaId) {
        if self.pacer.drop_queue(to) {
            self.raw.report_snapshot(to, SnapshotStatus::Failure);
        }
    }
}

#[cfg(test)]
mod tests {
    use raft::eraftpb::{Message, MessageType, Snapshot};

    use super::*;

    fn chunks(index: u64, len: usize, chunk: usize) -> Vec<Envelope> {
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = index;
        snap.mut_metadata().term = 2;
        snap.data = (0..len).map(|i| i as u8).collect::<Vec<u8>>().into();
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        (m.from, m.to, m.term) = (1, 2, 2);
        m.set_snapshot(snap);
        crate::chunks::split(m, chunk)
    }

    /// (to, index, offset) of every chunk sent.
    fn sent(out: &[Action]) -> Vec<(ReplicaId, u64, u64)> {
        out.iter()
            .map(|a| match a {
                Action::Send { to, msg: Envelope::Chunk { header, offset, .. } } => {
                    (*to, header.get_snapshot().get_metadata().index, *offset)
                }
                other => panic!("not a chunk: {other:?}"),
            })
            .collect()
    }

    /// A snapshot of 10 chunks under a window of 3 chunks leaves 3 at the send and 3, 3, 1
    /// on the next ticks, in order; it is finished at the tick its last chunk leaves.
    #[test]
    fn a_large_snapshot_leaves_in_windows_over_several_ticks_in_order() {
        let mut pacer = Pacer::new(300);
        let mut out = Vec::new();
        let first = pacer.send(2, chunks(10, 1000, 100), &mut out);
        assert_eq!(first, Emitted { chunks: 3, finished: vec![] });
        assert_eq!(pacer.queued(), 7);
        let mut finished_at = None;
        for tick in 1..=5 {
            let emitted = pacer.tick(&mut out);
            if emitted.finished == [2] {
                finished_at = Some(tick);
            }
        }
        assert_eq!(finished_at, Some(3));
        let offsets: Vec<u64> = sent(&out).iter().map(|&(_, _, offset)| offset).collect();
        assert_eq!(offsets, (0..10).map(|i| i * 100).collect::<Vec<_>>());
        assert_eq!(pacer.queued(), 0);
        // A window smaller than a chunk still sends one chunk a tick; one within the window
        // leaves at once.
        let mut small = Pacer::new(1);
        assert_eq!(small.send(3, chunks(10, 300, 100), &mut out).chunks, 1);
        assert_eq!(small.tick(&mut out).chunks, 1);
        assert_eq!(Pacer::new(1000).send(3, chunks(10, 300, 100), &mut out), Emitted { chunks: 3, finished: vec![3] });
    }

    /// A newer snapshot to a mate replaces the older one's chunks still queued; another mate's
    /// queue is its own; a dropped queue sends nothing more.
    #[test]
    fn a_newer_snapshot_replaces_the_queue_and_mates_are_paced_apart() {
        let mut pacer = Pacer::new(200);
        let mut out = Vec::new();
        pacer.send(2, chunks(10, 1000, 100), &mut out);
        pacer.send(3, chunks(10, 400, 100), &mut out);
        pacer.send(2, chunks(12, 500, 100), &mut out);
        assert_eq!(pacer.queued(), 3 + 2);
        out.clear();
        pacer.tick(&mut out);
        pacer.tick(&mut out);
        let to_2: Vec<_> = sent(&out).into_iter().filter(|c| c.0 == 2).collect();
        assert_eq!(to_2, [(2, 12, 200), (2, 12, 300), (2, 12, 400)], "only the newer snapshot's");
        assert_eq!(sent(&out).iter().filter(|c| c.0 == 3).count(), 2);
        pacer.send(2, chunks(14, 1000, 100), &mut out);
        assert!(pacer.drop_queue(2) && !pacer.drop_queue(2));
        out.clear();
        assert_eq!(pacer.tick(&mut out), Emitted::default());
        assert!(out.is_empty());
    }
}
