//! Pacing of a snapshot's chunks (issue 40, "pacing of chunks"): a leader keeps at most
//! [`GroupSettings::snapshot_window`](crate::GroupSettings::snapshot_window) bytes of a
//! snapshot's chunks unacknowledged by the mate it sends them to, so a 1 GiB snapshot is not
//! 1,024 frames queued on the link at once, ahead of every other group's heartbeats and
//! appends, and a slow link, or several groups sending to one mate, queue no more than the mate
//! drains.
//!
//! **Queue.** Each mate has at most one queue: the chunks of the last snapshot sent to it not
//! yet handed to the shell. A send hands out the first window at once (a snapshot within one
//! window leaves whole, as before pacing); each [`Envelope::ChunkAck`] from the mate (it sends
//! one for every chunk it holds, see `chunks`) hands out what the window then allows. A newer
//! snapshot to the same mate replaces the older one's chunks (the receiver drops them anyway
//! once a later snapshot's come).
//!
//! **Lost acknowledgements.** Frames between mates are not lost on a live link, but a link that
//! drops and comes back may take some with it. A queue that heard no acknowledgement for
//! [`STALL_TICKS`] ticks takes what it sent as received and hands out the next window: a
//! transfer never stops for good, and at worst goes at a window per [`STALL_TICKS`] ticks.
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
/// of one snapshot's data unacknowledged by its mate, 8 chunks of the default 1 MiB: a link
/// holds at most 8 MiB of one group's snapshot at a time.
pub const SNAPSHOT_WINDOW: usize = 8 << 20;

/// Ticks without an acknowledgement after which a queue takes what it sent as received (see
/// this module): 1 s at the broker's 100 ms tick.
pub(crate) const STALL_TICKS: u32 = 10;

/// The chunks of one snapshot still to send to one mate, and what of it is unacknowledged.
#[derive(Debug)]
struct Queue {
    /// The snapshot's raft index (its acknowledgements name it).
    index: u64,
    chunks: VecDeque<Envelope>,
    /// The end of the last chunk handed out.
    sent: u64,
    /// The highest end the mate acknowledged (or taken as received, see this module).
    acked: u64,
    /// Ticks since the last acknowledgement (or since the last window was taken as received).
    quiet: u32,
}

/// The chunks still to send, per mate (see this module).
#[derive(Debug)]
pub(crate) struct Pacer {
    /// Bytes of snapshot data a mate may have unacknowledged (at least one chunk goes at a time).
    window: usize,
    queues: BTreeMap<ReplicaId, Queue>,
}

/// What one send, tick or acknowledgement handed out.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub(crate) struct Emitted {
    /// Chunks handed to the shell.
    pub(crate) chunks: u64,
    /// Mates whose snapshot has left whole: their transfer is finished.
    pub(crate) finished: Vec<ReplicaId>,
}

impl Pacer {
    /// A pacer keeping at most `window` bytes of chunks unacknowledged per mate.
    pub(crate) fn new(window: usize) -> Self {
        Self { window, queues: BTreeMap::new() }
    }

    /// Queues one snapshot's `chunks` (in order) for `to`, replacing what is left of an earlier
    /// one, and hands out the first window now.
    pub(crate) fn send(&mut self, to: ReplicaId, chunks: Vec<Envelope>, out: &mut Vec<Action>) -> Emitted {
        let index = chunks.iter().find_map(snapshot_index).unwrap_or(0);
        let queue = Queue { index, chunks: VecDeque::from(chunks), sent: 0, acked: 0, quiet: 0 };
        self.queues.insert(to, queue);
        self.emit_to(to, out)
    }

    /// A tick: a queue quiet for [`STALL_TICKS`] takes what it sent as received and hands out
    /// its next window.
    pub(crate) fn tick(&mut self, out: &mut Vec<Action>) -> Emitted {
        let mut emitted = Emitted::default();
        for to in self.mates() {
            let Some(queue) = self.queues.get_mut(&to) else { continue };
            queue.quiet += 1;
            if queue.quiet >= STALL_TICKS {
                (queue.acked, queue.quiet) = (queue.sent, 0);
            }
            let more = self.emit_to(to, out);
            emitted.chunks += more.chunks;
            emitted.finished.extend(more.finished);
        }
        emitted
    }

    /// `from` holds the chunk of the snapshot at `index` that ends at `end`: hands out what the
    /// window then allows. An acknowledgement of another snapshot changes nothing.
    pub(crate) fn acked(&mut self, from: ReplicaId, index: u64, end: u64, out: &mut Vec<Action>) -> Emitted {
        let Some(queue) = self.queues.get_mut(&from).filter(|q| q.index == index) else {
            return Emitted::default();
        };
        if end > queue.acked {
            (queue.acked, queue.quiet) = (end.min(queue.sent), 0);
        }
        self.emit_to(from, out)
    }

    /// Hands out the chunks of `to`'s queue that the window allows (at least one when nothing
    /// is unacknowledged); drops the queue once its last chunk has left.
    fn emit_to(&mut self, to: ReplicaId, out: &mut Vec<Action>) -> Emitted {
        let window = self.window.max(1) as u64;
        let Some(queue) = self.queues.get_mut(&to) else { return Emitted::default() };
        let mut chunks = 0;
        while queue.sent.saturating_sub(queue.acked) < window {
            let Some(msg) = queue.chunks.pop_front() else { break };
            match &msg {
                Envelope::Chunk { offset, data, .. } => queue.sent = offset.saturating_add(data.len() as u64),
                // A snapshot that went whole is never acknowledged chunk by chunk.
                _ => queue.acked = queue.sent,
            }
            chunks += 1;
            out.push(Action::Send { to, msg });
        }
        let mut emitted = Emitted { chunks, finished: Vec::new() };
        if queue.chunks.is_empty() {
            self.queues.remove(&to);
            emitted.finished.push(to);
        }
        emitted
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
        self.queues.values().map(|q| q.chunks.len() as u64).sum()
    }
}

/// The raft index of the snapshot an envelope carries, if it carries one.
fn snapshot_index(msg: &Envelope) -> Option<u64> {
    match msg {
        Envelope::Chunk { header: m, .. } | Envelope::Raft(m) => Some(m.get_snapshot().get_metadata().index),
        _ => None,
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

    /// `from` acknowledged a chunk of the snapshot at `index`: the next ones the window allows
    /// go, and a snapshot whose last chunk left is reported finished.
    pub(crate) fn chunk_acked(&mut self, from: ReplicaId, index: u64, end: u64, out: &mut Vec<Action>) {
        if self.raw.raft.state != StateRole::Leader {
            return;
        }
        let emitted = self.pacer.acked(from, index, end, out);
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

    /// A snapshot of 10 chunks under a window of 3 chunks leaves 3 at the send, then one more
    /// for each acknowledged, in order; it is finished when its last chunk leaves. Ticks alone
    /// send nothing until the queue has been quiet for `STALL_TICKS`.
    #[test]
    fn a_large_snapshot_leaves_a_window_at_a_time_as_the_mate_acknowledges() {
        let mut pacer = Pacer::new(300);
        let mut out = Vec::new();
        let first = pacer.send(2, chunks(10, 1000, 100), &mut out);
        assert_eq!(first, Emitted { chunks: 3, finished: vec![] });
        for _ in 1..STALL_TICKS {
            assert_eq!(pacer.tick(&mut out), Emitted::default(), "nothing acknowledged: nothing more leaves");
        }
        assert_eq!(pacer.acked(2, 9, 100, &mut out), Emitted::default(), "another snapshot's ack changes nothing");
        assert_eq!(pacer.acked(3, 10, 100, &mut out), Emitted::default(), "another mate's ack changes nothing");
        assert_eq!(pacer.acked(2, 10, 100, &mut out).chunks, 1, "one acknowledged, one more leaves");
        assert_eq!(pacer.acked(2, 10, 300, &mut out).chunks, 2, "an ack covers the chunks before it");
        assert_eq!(pacer.acked(2, 10, 300, &mut out).chunks, 0, "a repeated ack changes nothing");
        let mut finished = None;
        for end in [400, 500, 600, 700] {
            let emitted = pacer.acked(2, 10, end, &mut out);
            if emitted.finished == [2] {
                finished = Some(end);
            }
        }
        assert_eq!(finished, Some(700), "the last chunk (offset 900) left when 700 was acknowledged");
        let offsets: Vec<u64> = sent(&out).iter().map(|&(_, _, offset)| offset).collect();
        assert_eq!(offsets, (0..10).map(|i| i * 100).collect::<Vec<_>>());
        assert_eq!(pacer.queued(), 0);
        // A window smaller than a chunk still sends one chunk at a time; one within the window
        // leaves at once.
        let mut small = Pacer::new(1);
        assert_eq!(small.send(3, chunks(10, 300, 100), &mut out).chunks, 1);
        assert_eq!(small.acked(3, 10, 100, &mut out).chunks, 1);
        assert_eq!(Pacer::new(1000).send(3, chunks(10, 300, 100), &mut out), Emitted { chunks: 3, finished: vec![3] });
    }

    /// Acknowledgements lost (a link that dropped and came back): after `STALL_TICKS` quiet
    /// ticks the queue takes what it sent as received, so a transfer never stops for good.
    #[test]
    fn a_quiet_queue_sends_its_next_window_after_the_stall_ticks() {
        let mut pacer = Pacer::new(300);
        let mut out = Vec::new();
        pacer.send(2, chunks(10, 1000, 100), &mut out);
        let mut sent_per_tick = Vec::new();
        for _ in 0..2 * STALL_TICKS {
            sent_per_tick.push(pacer.tick(&mut out).chunks);
        }
        let windows: Vec<usize> = sent_per_tick.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, _)| i).collect();
        assert_eq!(windows, [STALL_TICKS as usize - 1, 2 * STALL_TICKS as usize - 1], "a window per STALL_TICKS");
        assert_eq!(sent(&out).len(), 9);
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
        pacer.acked(2, 10, 200, &mut out);
        pacer.acked(2, 12, 200, &mut out);
        pacer.acked(2, 12, 400, &mut out);
        pacer.acked(3, 10, 200, &mut out);
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
