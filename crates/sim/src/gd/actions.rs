//! Carrying out what a broker's engine asks, judging each action against the run's truth as
//! it happens: sends (I2, I3), deliveries (I5), releases (I4), publish acknowledgements,
//! store operations with their seeded sync delay; and I1 after every input.

use crate::gd::disk::Disk;
use tidings_delivery::{Action, Input, Know, Millis, PubendId, StoreAction, StoreInput, Tick, TickRange};
use tidings_node::publishes::{Ack, PublishKey};
use tidings_store::OpKind;

use crate::gd::layer::{Command, GdFrame, GdLayer, GdNode, Out, MAX_SYNC_MS};
use crate::gd::world::{message_of, Publish, World};

/// Acknowledged publishes a reconnecting publisher sends again, their acknowledgements lost.
const ACKS_LOST: usize = 2;

impl GdLayer {
    /// The log's group commit is due: everything submitted is written and synced (the
    /// store's own writer code), and its completions go to the engine as the broker's driver
    /// turns them into inputs. An append acknowledged by the log is durable: it joins the truth.
    pub(super) fn sync(&self, node: &mut GdNode, store: &mut Disk, now: Millis, out: &mut Out) {
        node.sync_at = None;
        let done = store.step();
        {
            let mut world = self.world.borrow_mut();
            for completion in done.iter().filter(|c| c.kind == OpKind::Append && c.result.is_ok()) {
                let (pubend, tick) = (PubendId(completion.pubend.0), Tick(completion.tick.0));
                let at = node.pending.iter().position(|(p, t, _)| (*p, *t) == (pubend, tick));
                if let Some((pubend, tick, msg)) = at.map(|at| node.pending.remove(at)) {
                    world.made_durable(pubend, tick, msg);
                }
            }
        }
        for input in node.publishes.completed(&done).0 {
            self.drive(node, store, now, Input::Store(input), out);
        }
    }

    /// Feeds the engine one input and carries out every action, judging each.
    pub(super) fn drive(&self, node: &mut GdNode, store: &mut Disk, now: Millis, input: Input, out: &mut Out) {
        let mut work = vec![input];
        while let Some(input) = work.pop() {
            let mut actions = Vec::new();
            let trace = std::env::var("SIM_TRACE").ok().and_then(|t| t.parse::<usize>().ok()) == Some(node.index);
            let shown = trace && !matches!(input, Input::Tick | Input::Store(_));
            if shown {
                eprintln!("TRACE {now:?} node {} in {input:?}", node.index);
            }
            node.engine.handle(now, input, &mut actions);
            for action in actions {
                if trace && !matches!(action, Action::Free(_)) {
                    eprintln!("TRACE {now:?} node {} out {action:?}", node.index);
                }
                if let Some(next) = self.act(node, store, now, action, out) {
                    work.push(next);
                }
            }
        }
    }

    fn act(&self, node: &mut GdNode, store: &mut Disk, now: Millis, action: Action, out: &mut Out) -> Option<Input> {
        let me = node.index;
        match action {
            Action::Send { to, via, message } => {
                let to = to.0 as usize;
                let engine = &node.engine;
                let pubend = message.pubend();
                let is_final = |from: Tick, upto: Tick| {
                    engine.inspect(pubend).is_some_and(|v| TickRange::new(from, upto).is_none_or(|r| v.is_final(r)))
                };
                {
                    let mut world = self.world.borrow_mut();
                    world.stats.frames += 1;
                    world.judge_send(me, &message, is_final);
                }
                let frame = GdFrame::Peer { origin: me, to, message };
                self.send(me, to, via.map(|v| v.0 as usize), frame, out);
                None
            }
            Action::Deliver { subend, pubend, tick, payload } => {
                let durable = self.world.borrow().subs.get(&subend).is_some_and(|s| s.durable.is_some());
                match durable {
                    true => self.hand(node, now, (subend, pubend, tick, message_of(&payload))),
                    false => self.world.borrow_mut().judge_delivery(me, subend, pubend, tick, message_of(&payload)),
                }
                None
            }
            Action::GapNotice { subend, pubend, range } => {
                let text = format!("gap notice to {subend:?} for {pubend:?} {range:?} without early release");
                self.world.borrow_mut().violations.push(text);
                None
            }
            Action::PublishAcked { pubend, publisher, seq } => {
                if let Some(ack) = node.publishes.acked((pubend, publisher, seq)) {
                    self.publish_acked(me, (pubend, publisher, seq), ack);
                }
                None
            }
            Action::PublishRefused { pubend, publisher, seq } => {
                node.publishes.refused((pubend, publisher, seq));
                let text = format!("node {me} refused publish {seq}, but the simulated disk never fails a live write");
                self.world.borrow_mut().violations.push(text);
                None
            }
            Action::Store(store_action) => self.store(node, store, now, store_action),
            Action::Rejected { error } => {
                self.world.borrow_mut().violations.push(format!("node {me} rejected an input: {error}"));
                None
            }
            // Simulated time does not wait for frees.
            Action::Free(_) => None,
            action @ (Action::Serve(_) | Action::ServeCancel { .. }) => self.serve_action(node, now, action),
        }
    }

    fn store(&self, node: &mut GdNode, store: &mut Disk, now: Millis, action: StoreAction) -> Option<Input> {
        if let StoreAction::AckLease { pubend, up_to } = action {
            let lease = store.ack_leases.entry(pubend).or_default();
            *lease = (*lease).max(up_to);
            return Some(Input::Store(StoreInput::AckLeaseDone { pubend, lease: *lease }));
        }
        match &action {
            StoreAction::Append { pubend, tick, record, .. } => {
                let mut world = self.world.borrow_mut();
                let assigned = world.assigned.entry(*pubend).or_default();
                *assigned = (*assigned).max(*tick);
                node.pending.push((*pubend, *tick, message_of(record).unwrap_or(u64::MAX)));
                if let StoreAction::Append { publisher, seq, .. } = &action {
                    node.publishes.appending((*pubend, *publisher, *seq), *tick);
                }
                self.schedule_sync(node, now);
            }
            StoreAction::LeaseRaise { .. } => self.schedule_sync(node, now),
            StoreAction::AckLease { .. } => return None,
            // The core never voids a log (the broker's shell does, for replicated pubends).
            StoreAction::Void { .. } => self.schedule_sync(node, now),
            StoreAction::ReleasePrefix { pubend, tick } => {
                self.world.borrow_mut().judge_release(*pubend, *tick);
                self.schedule_sync(node, now);
            }
            // Reads are answered at once, from what the log holds now (the broker's driver
            // reads on a blocking pool and feeds the answer back the same way).
            StoreAction::ReadRange { pubend, range } => {
                let store = store.store()?;
                return Some(Input::Store(tidings_node::journal::read(store, *pubend, *range)));
            }
        }
        let token = store.token();
        if let Some(Err(error)) = store.store().map(|log| tidings_node::journal::submit(log, token, &action)) {
            self.world.borrow_mut().violation(format!("node {me}'s log refused {action:?}: {error}", me = node.index));
        }
        None
    }

    /// The local publisher reconnected: it re-publishes everything not acknowledged, in order,
    /// and before them its last [`ACKS_LOST`] acknowledged publishes, as a publisher does whose
    /// connection died with their PUBLISH_ACKs in flight. By then each may be delivered
    /// everywhere and released, its record gone from the log: it must still be taken for a
    /// retry (T4), never logged and delivered again.
    pub(super) fn retry(&self, node: &mut GdNode, store: &mut Disk, now: Millis, out: &mut Out) {
        let retries: Vec<(u64, u64)> = {
            let world = self.world.borrow();
            let publishes: Vec<&Publish> = world.publishes.get(&node.index).into_iter().flatten().collect();
            let acked: Vec<usize> = (0..publishes.len()).filter(|&i| publishes[i].acked).collect();
            let lost = &acked[acked.len().saturating_sub(ACKS_LOST)..];
            let again = |i: &usize| !publishes[*i].acked || lost.contains(i);
            (0..publishes.len()).filter(again).map(|i| (publishes[i].seq, publishes[i].msg)).collect()
        };
        for (seq, msg) in retries {
            self.command(node, store, now, Command::Publish { seq, msg }, out);
        }
    }

    /// A PUBLISH_ACK reaches `me`'s publisher (its key's waiter is the message it published):
    /// judged against the truth, then the publish counts as acknowledged. A tick told must be
    /// synced and hold that message; without a tick ("logged earlier, tick forgotten") the
    /// message must be in the log's truth all the same.
    pub(super) fn publish_acked(&self, me: usize, key: PublishKey, ack: Ack<u64>) {
        let (pubend, _, seq) = key;
        let mut world = self.world.borrow_mut();
        let truth = world.durable.get(&pubend);
        let held = match ack.tick {
            Some(tick) => ack.synced && truth.and_then(|log| log.get(&tick)) == Some(&ack.waiter),
            None => truth.is_some_and(|log| log.values().any(|&msg| msg == ack.waiter)),
        };
        if !held {
            let text = format!(
                "node {me} acknowledged publish {seq} (msg {}) at {:?} (synced {}), not what its log holds",
                ack.waiter, ack.tick, ack.synced
            );
            world.violation(text);
        }
        for publish in world.publishes.entry(me).or_default().iter_mut().filter(|p| p.seq == seq) {
            publish.acked = true;
        }
    }

    fn schedule_sync(&self, node: &mut GdNode, now: Millis) {
        if node.sync_at.is_none() {
            node.sync_at = Some(now.after(node.rng.below(MAX_SYNC_MS as usize + 1) as u64));
        }
    }

    /// I1: within this incarnation no tick goes from final back to Q or to another final
    /// value (but L to D/F), judged over every durable tick above the done prefix.
    pub(super) fn judge_knowledge(&self, node: &mut GdNode) {
        let mut world = self.world.borrow_mut();
        let World { durable, violations, .. } = &mut *world;
        for (&pubend, log) in durable.iter() {
            let Some(view) = node.engine.inspect(pubend) else { continue };
            for &tick in log.range(view.done().next()..).map(|(t, _)| t) {
                let now = view.knowledge(tick);
                let before = node.seen.get(&(pubend, tick)).copied();
                match (before, now) {
                    (Some(b), None) => {
                        violations.push(format!("I1: node {} {pubend:?} {tick:?} {b:?} -> Q", node.index))
                    }
                    (Some(b), Some(n)) if b != n && b != Know::Lost => {
                        violations.push(format!("I1: node {} {pubend:?} {tick:?} {b:?} -> {n:?}", node.index))
                    }
                    _ => {}
                }
                if let Some(now) = now {
                    node.seen.insert((pubend, tick), now);
                }
            }
        }
    }
}
