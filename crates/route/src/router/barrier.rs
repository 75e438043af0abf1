//! The start-tick barrier (gd-protocol §11.5): a new guaranteed subscription is confirmed only
//! once every broker between it and every publisher's broker holds its summary delta.
//!
//! Summary deltas and barriers travel on the same in-order links, so a barrier that arrives
//! after a delta proves the delta arrived. The barrier climbs each publishing cell's tree
//! separately (one climb per root, so waits follow the tree and can never form a cycle):
//! - A broker that receives a barrier for root R from a child cell starts a *full round* for R:
//!   it sends its own barrier to every linked broker of its parent cell in R's tree and to every
//!   linked cell mate (mates route sideways with the summaries it sent them, and advertise them
//!   upward too), then answers the sender once all of them answered.
//! - A barrier from a cell mate starts a *parent round*: parents only, never mates again.
//! - In R's own cell there is no parent: the broker adds the next tick of each of its local
//!   pubends (asked of the shell, [`GdAction::NextTicksWanted`]) and answers.
//! - Answers carry the ticks gathered below them; the origin confirms with all of them
//!   ([`GdAction::BarrierConfirmed`]). From those ticks on, every matching message reaches it.
//!
//! Batching: per root and kind at most one round is in flight; barriers that arrive meanwhile
//! wait for the next round, which one barrier serves for all of them. The shell's requests
//! batch the same way, so a burst of subscriptions costs one round trip per tree.
//!
//! Faults: rounds re-send to new parents or mates when routes change or a link is re-made, and
//! stop waiting for peers whose link went down (the summaries they would have vouched for are
//! resynchronised from scratch on a new link, ahead of the re-sent barrier).

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, GdAction, Router};
use crate::filter::Filter;
use crate::message::PeerMessage;
use crate::names::{BarrierId, BrokerName, CellName, PubendId, Tick};

/// Who waits for a round.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Waiter {
    /// The shell, for its request with this number.
    Shell(u64),
    /// A peer's barrier, answered with an ack.
    Peer(BrokerName, BarrierId),
}

/// One round of barriers this broker sent for one root.
#[derive(Clone, Debug)]
struct Round {
    number: u64,
    /// Peers sent this round's barrier on their current link.
    sent: BTreeSet<BrokerName>,
    /// Peers whose answer is outstanding.
    awaiting: BTreeSet<BrokerName>,
    /// Whether the shell still owes our local pubends' ticks.
    ticks_pending: bool,
    ticks: BTreeMap<PubendId, Tick>,
    waiters: Vec<Waiter>,
}

/// A root's rounds of one kind: the one in flight and those waiting for the next.
#[derive(Clone, Debug, Default)]
struct Slot {
    current: Option<Round>,
    next: Vec<Waiter>,
}

/// Barrier state of one router.
#[derive(Clone, Debug, Default)]
pub(super) struct Barriers {
    next_number: u64,
    /// Per (root, full round): rounds.
    slots: BTreeMap<(CellName, bool), Slot>,
    /// Shell requests not yet confirmed: roots still climbing, ticks gathered so far.
    requests: BTreeMap<u64, (BTreeSet<CellName>, BTreeMap<PubendId, Tick>)>,
    /// A request whose rounds have not started yet (they wait for rounds in flight): later
    /// requests join it.
    open_request: Option<u64>,
    /// Whether anything changed that `settle_barriers` must look at.
    dirty: bool,
}

impl Barriers {
    fn take_number(&mut self) -> u64 {
        self.next_number += 1;
        self.next_number
    }
}

impl<F: Filter> Router<F> {
    /// Asks for confirmation of every subscription fed so far; returns the request number that
    /// [`GdAction::BarrierConfirmed`] will report. A request leaves at once when no barrier of
    /// ours is climbing; otherwise it waits for those in flight, and every request made
    /// meanwhile joins it (same number, one round trip for the whole burst).
    pub fn request_barrier(&mut self, out: &mut Vec<Action<F>>) -> u64 {
        if let Some(number) = self.barriers.open_request {
            return number;
        }
        let number = self.barriers.take_number();
        let roots: BTreeSet<CellName> = self.table.trees.keys().cloned().collect();
        for root in &roots {
            self.barriers.slots.entry((root.clone(), true)).or_default().next.push(Waiter::Shell(number));
        }
        self.barriers.requests.insert(number, (roots.clone(), BTreeMap::new()));
        self.barriers.open_request = Some(number);
        if roots.is_empty() {
            self.finish_request(number, out);
        }
        self.barriers.dirty = true;
        self.settle_barriers(out);
        number
    }

    pub(super) fn handle_barrier(&mut self, from: BrokerName, id: BarrierId, root: CellName, relay_to_mates: bool) {
        let full = relay_to_mates && !self.is_mate(&from);
        let slot = self.barriers.slots.entry((root, full)).or_default();
        slot.next.push(Waiter::Peer(from, id));
        self.barriers.dirty = true;
    }

    pub(super) fn handle_barrier_ack(&mut self, from: &BrokerName, id: BarrierId, ticks: Vec<(PubendId, Tick)>) {
        if id.origin != self.settings.name {
            return;
        }
        for slot in self.barriers.slots.values_mut() {
            let Some(round) = slot.current.as_mut().filter(|round| round.number == id.number) else { continue };
            if round.awaiting.remove(from) {
                merge(&mut round.ticks, ticks);
                self.barriers.dirty = true;
            }
            return;
        }
    }

    pub(super) fn handle_next_ticks(&mut self, round_number: u64, ticks: Vec<(PubendId, Tick)>) {
        for slot in self.barriers.slots.values_mut() {
            let Some(round) = slot.current.as_mut().filter(|round| round.number == round_number) else { continue };
            round.ticks_pending = false;
            merge(&mut round.ticks, ticks);
            self.barriers.dirty = true;
            return;
        }
    }

    /// A link to `peer` went down or was replaced: what it was sent is lost with it.
    pub(super) fn forget_barriers_of(&mut self, peer: &BrokerName) {
        for slot in self.barriers.slots.values_mut() {
            if let Some(round) = slot.current.as_mut() {
                round.sent.remove(peer);
                round.awaiting.remove(peer);
            }
            slot.next.retain(|waiter| !matches!(waiter, Waiter::Peer(p, _) if p == peer));
        }
        self.barriers.dirty = true;
    }

    /// Starts, tops up and completes rounds. Runs last in `settle`, after every summary delta
    /// of this step was sent, so each barrier follows the deltas it vouches for.
    pub(super) fn settle_barriers(&mut self, out: &mut Vec<Action<F>>) {
        if !std::mem::take(&mut self.barriers.dirty) {
            return;
        }
        // Completing a round may start the next; loop until nothing moves.
        loop {
            let mut moved = false;
            let keys: Vec<(CellName, bool)> = self.barriers.slots.keys().cloned().collect();
            for key in keys {
                moved |= self.step_slot(&key, out);
            }
            if !moved {
                break;
            }
        }
        self.barriers.slots.retain(|_, slot| slot.current.is_some() || !slot.next.is_empty());
    }

    /// Advances one slot; returns whether it changed.
    fn step_slot(&mut self, key: &(CellName, bool), out: &mut Vec<Action<F>>) -> bool {
        let targets = self.round_targets(&key.0, key.1);
        let Some(slot) = self.barriers.slots.get_mut(key) else { return false };
        if slot.current.is_none() {
            if slot.next.is_empty() {
                return false;
            }
            let waiters = std::mem::take(&mut slot.next);
            if waiters.iter().any(|w| matches!(w, Waiter::Shell(n) if Some(*n) == self.barriers.open_request)) {
                self.barriers.open_request = None;
            }
            let number = self.barriers.take_number();
            let local = self.local_pubends(&key.0);
            let ticks_pending = !local.is_empty();
            if ticks_pending {
                out.push(Action::Guaranteed(GdAction::NextTicksWanted { round: number, pubends: local }));
            }
            let round = Round {
                number,
                sent: BTreeSet::new(),
                awaiting: BTreeSet::new(),
                ticks_pending,
                ticks: BTreeMap::new(),
                waiters,
            };
            let Some(slot) = self.barriers.slots.get_mut(key) else { return false };
            slot.current = Some(round);
        }
        let me = self.settings.name.clone();
        let mates = self.table.mates.clone();
        let Some(slot) = self.barriers.slots.get_mut(key) else { return false };
        let Some(round) = slot.current.as_mut() else { return false };
        for peer in targets {
            if !round.sent.insert(peer.clone()) {
                continue;
            }
            round.awaiting.insert(peer.clone());
            let id = BarrierId { origin: me.clone(), number: round.number };
            let relay_to_mates = key.1 && !mates.contains(&peer);
            let message = PeerMessage::Barrier { id, root: key.0.clone(), relay_to_mates };
            out.push(Action::Send { to: peer, message });
        }
        if !round.awaiting.is_empty() || round.ticks_pending {
            return false;
        }
        let Some(round) = slot.current.take() else { return false };
        self.complete(&key.0, round, out);
        true
    }

    /// The peers a round for `root` asks: linked brokers of our parent cell in its tree, and,
    /// for a full round, every linked cell mate.
    fn round_targets(&self, root: &CellName, full: bool) -> BTreeSet<BrokerName> {
        let mut targets: BTreeSet<BrokerName> = self.upstream_peers(root).into_iter().collect();
        if full {
            targets.extend(self.table.mates.iter().cloned());
        }
        targets.retain(|peer| self.links.contains_key(peer));
        targets
    }

    /// Tracked pubends hosted here, when `root` is our cell (their ticks answer barriers).
    fn local_pubends(&self, root: &CellName) -> Vec<PubendId> {
        if *root != self.settings.cell {
            return Vec::new();
        }
        self.tracked.keys().filter(|pubend| pubend.home == self.settings.name).map(|pubend| pubend.id).collect()
    }

    fn complete(&mut self, root: &CellName, round: Round, out: &mut Vec<Action<F>>) {
        for waiter in round.waiters {
            match waiter {
                Waiter::Peer(peer, id) => {
                    if self.links.contains_key(&peer) {
                        let ticks = round.ticks.iter().map(|(pubend, tick)| (*pubend, *tick)).collect();
                        out.push(Action::Send { to: peer, message: PeerMessage::BarrierAck { id, ticks } });
                    }
                }
                Waiter::Shell(number) => {
                    let Some((roots, ticks)) = self.barriers.requests.get_mut(&number) else { continue };
                    roots.remove(root);
                    merge(ticks, round.ticks.iter().map(|(p, t)| (*p, *t)));
                    if roots.is_empty() {
                        self.finish_request(number, out);
                    }
                }
            }
        }
    }

    fn finish_request(&mut self, number: u64, out: &mut Vec<Action<F>>) {
        if self.barriers.open_request == Some(number) {
            self.barriers.open_request = None;
        }
        let Some((_, ticks)) = self.barriers.requests.remove(&number) else { return };
        let ticks = ticks.into_iter().collect();
        out.push(Action::Guaranteed(GdAction::BarrierConfirmed { number, ticks }));
    }

    fn is_mate(&self, peer: &BrokerName) -> bool {
        self.links.get(peer).is_some_and(|link| link.cell == self.settings.cell)
    }

    /// Routes may have moved: rounds in flight ask their new parents and mates too.
    pub(super) fn routes_moved_for_barriers(&mut self) {
        self.barriers.dirty = true;
    }
}

/// Merges answered ticks, keeping the later tick of a pubend reported twice (any reported tick
/// is safe; a later one is too).
fn merge(held: &mut BTreeMap<PubendId, Tick>, ticks: impl IntoIterator<Item = (PubendId, Tick)>) {
    for (pubend, tick) in ticks {
        let entry = held.entry(pubend).or_insert(tick);
        *entry = (*entry).max(tick);
    }
}
