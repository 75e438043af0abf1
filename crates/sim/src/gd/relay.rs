//! How a broker's delivery frames travel between brokers: over a link, or sideways through a
//! cell mate (gd-protocol §11.3), never through a broker of a third cell; and which cell a
//! frame's sender stands for (cell mates are pseudo cells of their own).

use tidings_delivery::{CellId, Message};
use tidings_route::PubendRef;

use crate::gd::layer::{GdFrame, GdLayer, GdNode, Out, MATE_CELL};
use crate::layer::LayerOutput;

impl GdLayer {
    pub(super) fn cell_for(&self, origin: usize, me: usize) -> CellId {
        let world = self.world.borrow();
        if world.cell_of[origin] == world.cell_of[me] {
            CellId(MATE_CELL + origin as u32)
        } else {
            CellId(world.cell_of[origin])
        }
    }

    /// Sends a frame towards `to`: directly, through `via`, or sideways through a cell mate
    /// (of ours or of the receiver) linked to both, as gd-protocol §11.3 lets data, acks and
    /// nacks travel; never through a broker of a third cell. Otherwise the frame is lost.
    pub(super) fn send(&self, me: usize, to: usize, via: Option<usize>, frame: GdFrame, out: &mut Out) {
        let mut world = self.world.borrow_mut();
        let hop = if world.linked(me, to) {
            Some(to)
        } else if let Some(via) = via.filter(|&v| world.linked(me, v)) {
            Some(via)
        } else {
            let mate = |n: usize| world.cell_of[n] == world.cell_of[me] || world.cell_of[n] == world.cell_of[to];
            (0..self.names.len()).find(|&n| mate(n) && world.linked(me, n) && world.linked(n, to))
        };
        if world.blackout.is_some_and(|wire| hop.is_some_and(|h| wire == (me.min(h), me.max(h)))) {
            return;
        }
        if let Some(hop) = hop {
            if hop != to {
                world.stats.sideways += 1;
            }
            out.push(LayerOutput::Send { to: self.names[hop].clone(), frame });
        }
    }

    /// gd-protocol §11.3: a child cell sends its acks and nacks to the broker of ours that
    /// terminates its link, which may not be our cell's entry broker for the pubend (the data
    /// came sideways through it); that broker has no stream towards the child and hands them
    /// sideways to the entry. Returns the entry to relay to, if this is such a broker.
    pub(super) fn sideways_entry(&self, node: &GdNode, origin: usize, message: &Message) -> Option<usize> {
        if !matches!(message, Message::Ack { .. } | Message::Nack { .. }) {
            return None;
        }
        let world = self.world.borrow();
        if world.cell_of[origin] == world.cell_of[node.index] {
            return None;
        }
        let home = world.pubends.iter().find(|(_, p)| **p == message.pubend()).map(|(home, _)| *home)?;
        let reference = PubendRef { id: tidings_route::PubendId(message.pubend().0), home: self.names[home].clone() };
        let route = node.engine.matcher().router.as_ref()?.pubend_route(&reference)?;
        let entry = self.index.get(&route.entry).copied()?;
        (entry != node.index && world.cell_of[entry] == world.cell_of[node.index]).then_some(entry)
    }
}
