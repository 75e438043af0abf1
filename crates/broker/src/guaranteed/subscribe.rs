//! Guaranteed subscriptions and their start ticks.
//!
//! On a lone broker (no links configured) a subscription starts at once, at each hosted
//! pubend's next tick. In a network it starts only after routing's barrier
//! (gd-protocol §11.5): the session already fed its filter into the routing summaries, the
//! driver attaches the subend to every pubend with its start pending and asks for a barrier;
//! [`GdAction::BarrierConfirmed`](tidings_route::GdAction::BarrierConfirmed) brings each
//! reachable pubend's next tick at its home, and SUBSCRIBED goes to the client with them.
//!
//! A pubend the barrier did not report though its home is in view (it did not exist yet when
//! its home answered), or one that appears later, starts at the subscription's confirmation
//! time on the broker clock less `tidings_node::starts::LATE_PUBEND_MARGIN_MS`: its ticks are
//! its home's clock, and it did not exist when the summaries were already in place. One whose
//! home is out of view waits for a barrier that reaches the home
//! (`tidings_node::starts::may_start_late`), asked when routes move; its start then comes in a
//! second SUBSCRIBED.

use std::collections::BTreeMap;
use std::sync::Arc;

use tidings_delivery::{Input, Millis, PubendId, SubendId, Tick};
use tidings_matching::{Pattern, Selector};
use tidings_node::durables::{attach_order, Attach};
use tidings_wire::{SubId, Subscribed};

use super::driver::{now, Driver, Subend};
use crate::outbox::Outbox;

/// How often a barrier is asked again for pubends a subscription still waits on
/// (`Driver::unstarted_turn`).
const UNSTARTED_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

impl Driver {
    /// A guaranteed SUBSCRIBE (its routing filter is already in the summaries).
    pub(super) fn subscribe(
        &mut self,
        subend: SubendId,
        id: SubId,
        (pattern, selector): (Pattern, Option<Selector>),
        durable: bool,
        outbox: Option<Arc<Outbox>>,
    ) {
        self.insert_filter(subend, pattern, selector);
        let entry = Subend {
            id,
            outbox: outbox.clone(),
            blocked: false,
            barrier: None,
            confirmed_at: None,
            durable,
            announced: Default::default(),
            unstarted: Default::default(),
        };
        self.subends.insert(subend, entry);
        self.metrics.subends.set(self.subends.len() as i64);
        let Some(net) = self.net.as_ref() else {
            let starts: Vec<(PubendId, Tick)> = self
                .hosted
                .iter()
                .filter(|&&pubend| self.relays.attaches(subend, pubend))
                .map(|&pubend| (pubend, self.next_tick(pubend)))
                .collect();
            let wire = starts.iter().map(|(p, t)| (tidings_wire::PubendId(p.0), tidings_wire::Tick(t.0))).collect();
            if let Some(outbox) = &outbox {
                outbox.push_frame(&tidings_wire::Frame::Subscribed(Subscribed { id, starts: wire }));
            }
            if let Some(entry) = self.subends.get_mut(&subend) {
                entry.announced.extend(starts.iter().map(|(pubend, _)| *pubend));
            }
            for (pubend, start) in starts {
                self.feed(Input::SubendAttach { pubend, subend, start: Some(start), durable });
                self.durable_started(subend, pubend, start);
            }
            self.confirm_subend(subend, now());
            return;
        };
        let number = net.cluster.request_barrier();
        if let Some(entry) = self.subends.get_mut(&subend) {
            entry.barrier = Some(number);
        }
        for pubend in self.pubends() {
            if self.relays.attaches(subend, pubend) {
                self.feed(Input::SubendAttach { pubend, subend, start: None, durable });
            }
        }
    }

    fn confirm_subend(&mut self, subend: SubendId, at: Millis) {
        self.metrics.subscriptions_confirmed.inc();
        if let Some(entry) = self.subends.get_mut(&subend) {
            entry.confirmed_at = Some(at);
            entry.barrier = None;
        }
    }

    /// The start of a subscription confirmed at `at` on a pubend its barrier did not report
    /// (`tidings_node::starts::late_start`, which the simulator runs too).
    pub(super) fn late_start(&self, at: Millis) -> Tick {
        tidings_node::starts::late_start(&self.engine, at, self.empty_start.then_some(self.started_ms))
    }

    /// Barrier `number` came back: every subscription waiting on it (or an earlier one) starts.
    pub(super) fn barrier_confirmed(&mut self, number: u64, ticks: &BTreeMap<PubendId, Tick>) {
        let waiting: Vec<SubendId> = self
            .subends
            .iter()
            .filter(|(_, entry)| entry.barrier.is_some_and(|b| b <= number))
            .map(|(subend, _)| *subend)
            .collect();
        let at = now();
        for subend in waiting {
            let (mut starts, mut unstarted) = (Vec::new(), std::collections::BTreeSet::new());
            for pubend in self.pubends().into_iter().filter(|&pubend| self.relays.attaches(subend, pubend)) {
                let sigma = match ticks.get(&pubend) {
                    Some(&tick) => tick,
                    None if self.in_view(pubend) => self.late_start(at),
                    None => {
                        unstarted.insert(pubend);
                        continue;
                    }
                };
                starts.push((pubend, tidings_node::starts::confirmed_start(&self.engine, pubend, subend, sigma)));
            }
            tracing::debug!(subend = subend.0, number, ?starts, ?unstarted, "barrier confirmed a subscription");
            // SUBSCRIBED first: what starting delivers comes after it on the connection.
            if let Some(entry) = self.subends.get_mut(&subend) {
                entry.unstarted = unstarted;
                entry.announced.extend(starts.iter().map(|(pubend, _)| *pubend));
                let wire = starts.iter().map(|(p, t)| (tidings_wire::PubendId(p.0), tidings_wire::Tick(t.0))).collect();
                let frame = tidings_wire::Frame::Subscribed(Subscribed { id: entry.id, starts: wire });
                if let Some(outbox) = &entry.outbox {
                    outbox.push_frame(&frame);
                }
            }
            for (pubend, start) in starts {
                self.feed(Input::SubendStart { pubend, subend, start });
                self.durable_started(subend, pubend, start);
            }
            self.confirm_subend(subend, at);
            if self.groups.is_group(subend) {
                self.group_confirmed(subend);
            }
        }
        self.start_unstarted(number, ticks);
    }

    /// A barrier asked for unstarted pubends (`ask_for_unstarted`) came back as `number`: each
    /// it reports starts at its home's tick, announced in a second SUBSCRIBED; the others wait
    /// for the next time routes move, or for [`Driver::unstarted_turn`].
    fn start_unstarted(&mut self, number: u64, ticks: &BTreeMap<PubendId, Tick>) {
        if self.unstarted_barrier.is_none_or(|asked| asked > number) {
            return;
        }
        self.unstarted_barrier = None;
        tracing::debug!(number, ?ticks, "a barrier for unstarted pubends came back");
        let reported: Vec<(SubendId, PubendId, Tick)> = self
            .subends
            .iter()
            .flat_map(|(&subend, entry)| entry.unstarted.iter().map(move |&pubend| (subend, pubend)))
            .filter_map(|(subend, pubend)| ticks.get(&pubend).map(|&sigma| (subend, pubend, sigma)))
            .collect();
        for (subend, pubend, sigma) in reported {
            if let Some(entry) = self.subends.get_mut(&subend) {
                entry.unstarted.remove(&pubend);
            }
            let start = tidings_node::starts::confirmed_start(&self.engine, pubend, subend, sigma);
            self.announce_late_start(subend, pubend, start);
            self.feed(Input::SubendStart { pubend, subend, start });
            self.durable_started(subend, pubend, start);
        }
    }

    /// Asks a barrier for subscriptions waiting on a pubend whose home is now in view (one at a
    /// time: a barrier answers every subscription made before it).
    pub(super) fn ask_for_unstarted(&mut self) {
        let wanted = self.subends.values().flat_map(|entry| entry.unstarted.iter()).any(|&p| self.in_view(p));
        if !wanted || self.unstarted_barrier.is_some() {
            return;
        }
        if let Some(net) = self.net.as_ref() {
            self.unstarted_barrier = Some(net.cluster.request_barrier());
            self.unstarted_tried = std::time::Instant::now();
            tracing::debug!(number = self.unstarted_barrier, "a barrier asked for unstarted pubends");
        }
    }

    /// Asks again, every [`UNSTARTED_RETRY`], for pubends a subscription still waits on. A
    /// barrier can come back without a pubend whose home is in view by the routes: its cell
    /// was restarting, and the broker the routes lead to did not host it yet when the barrier
    /// reached it. Routes then need not move again, and without a retry the subscription
    /// never started on that pubend and its client was never told (the nemesis found a
    /// subscriber set up again after a lost connection, while its publishers' whole cell was
    /// killed, receiving nothing more of two pubends, silently).
    pub(super) fn unstarted_turn(&mut self) {
        if self.unstarted_barrier.is_none() && self.unstarted_tried.elapsed() >= UNSTARTED_RETRY {
            self.ask_for_unstarted();
        }
    }

    /// Tells a confirmed subscription's client where a pubend that appeared after its
    /// SUBSCRIBED starts, in another SUBSCRIBED listing just that pubend, ahead of what the
    /// stream then delivers. A client that had the pubend before (a subscription set up again
    /// after a lost connection, at a broker that restarted behind a cut link and learned the
    /// pubend only later) reports the ticks between where it stood and `start` as a gap;
    /// without this, the nemesis found such subscribers missing the tail of a stream silently.
    /// Durable subscriptions resume from their checkpoint and need no such notice; a pubend
    /// the client was told of before continues where it was and is not announced again (a
    /// second start would read as a gap where nothing was missed).
    fn announce_late_start(&mut self, subend: SubendId, pubend: PubendId, start: Tick) {
        let Some(entry) = self.subends.get_mut(&subend).filter(|entry| entry.confirmed_at.is_some()) else { return };
        if !entry.announced.insert(pubend) {
            return;
        }
        let Some(outbox) = &entry.outbox else { return };
        let starts = vec![(tidings_wire::PubendId(pubend.0), tidings_wire::Tick(start.0))];
        outbox.push_frame(&tidings_wire::Frame::Subscribed(Subscribed { id: entry.id, starts }));
    }

    /// A pubend appeared after subscriptions were made: confirmed ones start at `start` (a
    /// hosted pubend's next tick) or else at their late start, pending ones wait for their
    /// barrier like the rest.
    pub(super) fn attach_late(&mut self, pubend: PubendId, start: Option<Tick>) {
        // A durable subend starts one past its checkpoint; the others at `start` or their late
        // start. Lowest first, so the stream here starts at the lowest and every later subend
        // attaches at or above it (`tidings_node::durables::attach_order`, the simulator's
        // restart attaches in it too).
        let attach: Vec<Attach> = self
            .subends
            .iter()
            .filter(|(&subend, _)| self.relays.attaches(subend, pubend))
            .map(|(&subend, entry)| {
                // Never below the ack lease of a restarted broker: see `Engine::start_floor`.
                let floor = |start: Tick| tidings_node::starts::confirmed_start(&self.engine, pubend, subend, start);
                // A pubend whose home is out of view waits for a barrier (`start_unstarted`).
                let late_at = entry.confirmed_at.filter(|_| self.in_view(pubend));
                let late = match start {
                    Some(start) => entry.confirmed_at.map(|_| floor(start)),
                    None => late_at.map(|at| floor(self.late_start(at))),
                };
                // A durable subscription with no checkpoint on this pubend yet (it appeared after
                // the last one was written) takes everything since the subscription was made,
                // not only what comes next: the pubend may have logged messages for it already.
                let durable =
                    self.durable_start(subend, pubend).or_else(|| late_at.map(|at| floor(self.late_start(at))));
                Attach { subend, start: if entry.durable { durable } else { late }, durable: entry.durable }
            })
            .collect();
        for Attach { subend, start, durable } in attach_order(attach) {
            if let (false, Some(start)) = (durable, start) {
                self.announce_late_start(subend, pubend, start);
            }
            if let Some(entry) = self.subends.get_mut(&subend).filter(|e| start.is_none() && e.confirmed_at.is_some()) {
                entry.unstarted.insert(pubend);
            }
            self.feed(Input::SubendAttach { pubend, subend, start, durable });
            if let (true, Some(start)) = (durable, start) {
                self.durable_started(subend, pubend, start);
            }
            // The core pauses a subend per stream: one paused by a full outbox stays paused on
            // the new stream too, until its room callback fires.
            if self.subends.get(&subend).is_some_and(|entry| entry.blocked) {
                self.feed(Input::OutboxFull { subend });
            }
        }
        self.ask_for_unstarted();
    }
}
