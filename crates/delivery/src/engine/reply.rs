//! Builds the fewest messages that tell a run of final ticks: F runs ride on the nearest Data
//! (`final_from` / `final_to`), the rest go out as one Silence per kind.

use bytes::Bytes;

use crate::message::{Message, SilenceKind};
use crate::names::{PubendId, Tick, TickRange, TreeTag};

/// A Data being built: its silence brackets can still grow.
struct PendingData {
    final_from: Tick,
    tick: Tick,
    final_to: Tick,
    payload: Bytes,
}

/// Accumulates final pieces in tick order and turns them into messages.
pub(crate) struct Reply {
    pubend: PubendId,
    requested_only: bool,
    finals: Vec<TickRange>,
    lost: Vec<TickRange>,
    data: Option<PendingData>,
    messages: Vec<Message>,
    /// Data ticks put into messages.
    pub(crate) data_ticks: Vec<Tick>,
}

fn push_range(ranges: &mut Vec<TickRange>, range: TickRange) {
    if let Some(last) = ranges.last_mut() {
        if last.to.next() == range.from {
            last.to = range.to;
            return;
        }
    }
    ranges.push(range);
}

impl Reply {
    /// An empty reply for `pubend`.
    pub(crate) fn new(pubend: PubendId, requested_only: bool) -> Self {
        Self {
            pubend,
            requested_only,
            finals: Vec::new(),
            lost: Vec::new(),
            data: None,
            messages: Vec::new(),
            data_ticks: Vec::new(),
        }
    }

    /// `range` is F for the receiver.
    pub(crate) fn final_range(&mut self, range: TickRange) {
        if let Some(data) = &mut self.data {
            if data.final_to.next() == range.from {
                data.final_to = range.to;
                return;
            }
        }
        push_range(&mut self.finals, range);
    }

    /// `range` is L.
    pub(crate) fn lost_range(&mut self, range: TickRange) {
        push_range(&mut self.lost, range);
    }

    /// `tick` is D with `payload`.
    pub(crate) fn data(&mut self, tick: Tick, payload: Bytes) {
        self.close_data();
        let mut final_from = tick;
        if let Some(last) = self.finals.last() {
            if last.to.next() == tick {
                final_from = last.from;
                self.finals.pop();
            }
        }
        self.data_ticks.push(tick);
        self.data = Some(PendingData { final_from, tick, final_to: tick, payload });
    }

    fn close_data(&mut self) {
        if let Some(data) = self.data.take() {
            self.messages.push(Message::Data {
                pubend: self.pubend,
                tick: data.tick,
                final_from: data.final_from,
                final_to: data.final_to,
                requested_only: self.requested_only,
                tree: TreeTag(0),
                payload: data.payload,
            });
        }
    }

    /// The messages, Data first, then the silences.
    pub(crate) fn finish(mut self) -> Vec<Message> {
        self.close_data();
        for (ranges, kind) in [
            (std::mem::take(&mut self.finals), SilenceKind::Final),
            (std::mem::take(&mut self.lost), SilenceKind::Lost),
        ] {
            if !ranges.is_empty() {
                self.messages.push(Message::Silence {
                    pubend: self.pubend,
                    ranges,
                    kind,
                    requested_only: self.requested_only,
                    tree: TreeTag(0),
                });
            }
        }
        self.messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(from: u64, to: u64) -> TickRange {
        TickRange { from: Tick(from), to: Tick(to) }
    }

    #[test]
    fn silence_around_a_data_tick_rides_on_the_data() {
        let mut reply = Reply::new(PubendId(1), true);
        reply.final_range(r(1001, 1004));
        reply.data(Tick(1005), Bytes::from_static(b"m2"));
        reply.final_range(r(1006, 1011));
        let messages = reply.finish();
        assert_eq!(
            messages,
            vec![Message::Data {
                pubend: PubendId(1),
                tick: Tick(1005),
                final_from: Tick(1001),
                final_to: Tick(1011),
                requested_only: true,
                tree: TreeTag(0),
                payload: Bytes::from_static(b"m2"),
            }]
        );
    }

    #[test]
    fn finals_without_data_become_one_silence_with_several_ranges() {
        let mut reply = Reply::new(PubendId(1), false);
        reply.final_range(r(1, 2));
        reply.final_range(r(3, 4));
        reply.final_range(r(8, 9));
        reply.lost_range(r(5, 7));
        let messages = reply.finish();
        assert_eq!(messages.len(), 2);
        assert_eq!(
            messages[0],
            Message::Silence {
                pubend: PubendId(1),
                ranges: vec![r(1, 4), r(8, 9)],
                kind: SilenceKind::Final,
                requested_only: false,
                tree: TreeTag(0),
            }
        );
    }
}
