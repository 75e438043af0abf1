//! The broker's catch-up cursor (`crates/broker/src/guaranteed/cursor/`), modelled: a serve
//! order ([`Action::Serve`]) is served a seeded few milliseconds later from the simulated log,
//! each D tick its subend's filter passes handed to its client as a delivery is, each L run
//! told as a gap in its place; a record missing or the client gone stops the order short; a cancel
//! ([`Action::ServeCancel`]) drops it. Live ticks published meanwhile reach the subend only after
//! the order, so the census judges the seam (docs/catch-up.md).

use tidings_delivery::{Action, Input, Matcher, Millis, ServeOrder, TickRange};

use crate::gd::disk::Disk;
use crate::gd::layer::{GdLayer, GdNode, Out, MAX_SYNC_MS};
use crate::gd::world::message_of;

impl GdLayer {
    /// Takes a serve order or its cancel from the engine.
    pub(super) fn serve_action(&self, node: &mut GdNode, now: Millis, action: Action) -> Option<Input> {
        match action {
            Action::Serve(order) => {
                let durable = self.world.borrow().subs.get(&order.subend).is_some_and(|s| s.durable.is_some());
                if !durable {
                    // Declined, as the broker declines a subend it cannot serve: the core replays.
                    let (pubend, subend, order, through) = (order.pubend, order.subend, order.id, order.from.prev());
                    return Some(Input::SubendServed { pubend, subend, order, through, done: true });
                }
                let due = now.after(node.rng.below(MAX_SYNC_MS as usize + 1) as u64);
                node.serving.push((due, order));
            }
            Action::ServeCancel { pubend, subend, order } => {
                node.serving.retain(|(_, o)| (o.pubend, o.subend, o.id) != (pubend, subend, order));
            }
            _ => {}
        }
        None
    }

    /// Serves the orders due.
    pub(super) fn run_cursors(&self, node: &mut GdNode, store: &mut Disk, now: Millis, out: &mut Out) {
        while let Some(at) = node.serving.iter().position(|(due, _)| *due <= now) {
            let (_, order) = node.serving.remove(at);
            let through = self.serve(node, store, now, &order);
            let input = Input::SubendServed {
                pubend: order.pubend,
                subend: order.subend,
                order: order.id,
                through,
                done: true,
            };
            self.drive(node, store, now, input, out);
            // A next order starting right after this one: ticks came meanwhile (or the order
            // was cut at its size), and the seam moved while it ran.
            let next = node.serving.iter().any(|(_, o)| o.subend == order.subend && o.from == order.to.next());
            let data: u64 = order.runs.iter().filter(|run| !run.lost).map(|run| run.range.len()).sum();
            let cut = data >= self.settings.serve_order_messages;
            let mut world = self.world.borrow_mut();
            world.stats.orders_served += 1;
            world.stats.orders_at_a_moved_seam += u64::from(next && !cut);
        }
    }

    /// Serves `order` from the log; returns how far it got.
    fn serve(&self, node: &mut GdNode, store: &Disk, now: Millis, order: &ServeOrder) -> tidings_delivery::Tick {
        let Some(log) = store.store() else { return order.from.prev() };
        // The client went away since the order was given: the broker's cursor finds its
        // outbox closed and stops short, and the core replays the rest once it is back.
        let connected =
            self.world.borrow().subs.get(&order.subend).and_then(|s| s.durable.as_ref()).is_some_and(|d| d.connected);
        if !connected {
            return order.from.prev();
        }
        let range = TickRange { from: order.from, to: order.to };
        let tidings_delivery::StoreInput::ReadDone { records, .. } =
            tidings_node::journal::read(log, order.pubend, range)
        else {
            return order.from.prev();
        };
        let mut records = records.into_iter().peekable();
        let mut through = order.from.prev();
        for run in &order.runs {
            if run.lost {
                let text = format!(
                    "gap notice to {:?} for {:?} {:?} without early release",
                    order.subend, order.pubend, run.range
                );
                self.world.borrow_mut().violations.push(text);
                through = run.range.to;
                continue;
            }
            for tick in (run.range.from.0..=run.range.to.0).map(tidings_delivery::Tick) {
                while records.next_if(|(t, _)| *t < tick).is_some() {}
                let Some((_, payload)) = records.next_if(|(t, _)| *t == tick) else { return through };
                if node.engine.matcher().subend(order.pubend, order.subend, &payload) {
                    self.hand(node, now, (order.subend, order.pubend, tick, message_of(&payload)));
                }
                through = tick;
            }
        }
        order.to
    }

    /// When the next order is due.
    pub(super) fn cursors_due(node: &GdNode) -> Option<Millis> {
        node.serving.iter().map(|(due, _)| *due).min()
    }
}
