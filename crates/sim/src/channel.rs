//! The simulated connections: routing's in-order stream with per-frame delays, the second
//! layer's lossy channel, and which frames are due.

use crate::layer::{Layer, LayerInput};
use crate::net::{Net, Packet, Queued, MAX_DELAY_MS};
use tidings_route::{Input, Millis};

impl<L: Layer> Net<L> {
    pub(crate) fn enqueue(&mut self, from: usize, to: usize, packet: Packet) {
        let key = (from.min(to), from.max(to));
        let direction = usize::from(from > to);
        let delay = self.rng.below(MAX_DELAY_MS as usize + 1) as u64;
        let now = self.now;
        let Some(conn) = self.wires.get_mut(&key).and_then(|w| w.conn.as_mut()) else { return };
        if conn.silent {
            return;
        }
        let queue = &mut conn.queues[direction];
        // In order: a frame never arrives before the one ahead of it.
        let due = queue.back().map_or(now, |last| last.due).max(now.after(delay));
        if let Packet::Data(_, msg) = &packet {
            self.messages[*msg].in_flight += 1;
        }
        queue.push_back(Queued { due, frame: packet });
    }

    /// The lossy channel: a frame may be lost (5%), duplicated (5%) and is delayed at random.
    pub(crate) fn enqueue_lossy(&mut self, from: usize, to: usize, frame: L::Frame) {
        let key = (from.min(to), from.max(to));
        let direction = usize::from(from > to);
        let copies = match self.rng.below(20) {
            0 => 0,
            1 => 2,
            _ => 1,
        };
        for _ in 0..copies {
            let due = self.now.after(self.rng.below(3 * MAX_DELAY_MS as usize) as u64);
            if let Some(conn) = self.wires.get_mut(&key).and_then(|w| w.conn.as_mut()).filter(|c| !c.silent) {
                conn.lossy[direction].push(Queued { due, frame: frame.clone() });
            }
        }
    }

    /// Connection directions with a frame due now whose receiver reads, as (wire, direction).
    pub fn busy(&self) -> Vec<((usize, usize), usize)> {
        let mut busy = Vec::new();
        for (key, wire) in &self.wires {
            let Some(conn) = &wire.conn else { continue };
            for direction in 0..2 {
                let to = if direction == 0 { key.1 } else { key.0 };
                let due = conn.queues[direction].front().is_some_and(|q| q.due <= self.now)
                    || conn.lossy[direction].iter().any(|q| q.due <= self.now);
                if due && !self.nodes[to].stalled {
                    busy.push((*key, direction));
                }
            }
        }
        busy
    }

    /// The earliest time a queued frame to a reading broker becomes due, if any is queued.
    pub fn next_due(&self) -> Option<Millis> {
        let mut next: Option<Millis> = None;
        for (key, wire) in &self.wires {
            let Some(conn) = &wire.conn else { continue };
            for direction in 0..2 {
                let to = if direction == 0 { key.1 } else { key.0 };
                if self.nodes[to].stalled {
                    continue;
                }
                let dues = conn.queues[direction].front().map(|q| q.due).into_iter();
                for due in dues.chain(conn.lossy[direction].iter().map(|q| q.due)) {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
        }
        next
    }

    /// Delivers one due frame on one connection direction: routing's first, else a random
    /// due frame of the lossy channel.
    pub fn deliver(&mut self, key: (usize, usize), direction: usize) {
        let now = self.now;
        let (from, to) = if direction == 0 { key } else { (key.1, key.0) };
        let Some(conn) = self.wires.get_mut(&key).and_then(|w| w.conn.as_mut()) else { return };
        if conn.queues[direction].front().is_some_and(|q| q.due <= now) {
            let Some(queued) = conn.queues[direction].pop_front() else { return };
            match queued.frame {
                Packet::Control(message) => {
                    self.input(to, Input::Received { from: self.nodes[from].name.clone(), message });
                }
                Packet::Data(header, msg) => {
                    self.messages[msg].in_flight -= 1;
                    self.data_arrival(to, from, &header, msg);
                }
            }
            return;
        }
        let due: Vec<usize> =
            (0..conn.lossy[direction].len()).filter(|i| conn.lossy[direction][*i].due <= now).collect();
        let Some(&pick) = self.rng.pick(&due) else { return };
        let Some(conn) = self.wires.get_mut(&key).and_then(|w| w.conn.as_mut()) else { return };
        let frame = conn.lossy[direction].swap_remove(pick).frame;
        let from = self.nodes[from].name.clone();
        self.layer_input(to, LayerInput::Frame { from, frame });
    }
}
