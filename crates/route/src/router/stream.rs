//! A link's first summary of a large set, streamed a slice at a time (issue 46): a link coming
//! up beside 100,000 local subscriptions was sent all of them in one input, the set copied,
//! sorted and cut into a hundred messages while the shell held the router's lock, so the
//! broker answered nothing for seconds and the new peer declared the link dead.
//!
//! A scope the link was sent nothing for whose set holds more than a slice does not go out
//! whole: it gets a cursor, the last filter sent in the set's own kept order
//! ([`Minimized::kept_after`]), and every input the router handles afterwards sends the next
//! slice from the set as it is then (the shell calls [`super::Router::next_deadline`], which is
//! due at once while a stream is under way, and lets go of its lock between inputs).
//!
//! Why a cursor rather than a snapshot: a snapshot costs the copy this avoids. Instead the
//! link holds, at every step, exactly the set's filters up to the cursor, and every change of
//! the set settled meanwhile keeps it so: a change at or before the cursor is sent at once as
//! a delta (the link holds that part already, so the delta applies in order behind the slices
//! sent before it), a change after it is not sent at all, because the stream reaches that
//! part later and sends the set as it is by then. When the cursor passes the end the link
//! holds the whole set, the same summary the whole message gave, whatever changed meanwhile.
//! A topology change that gives the scope another set compares the new set's part up to the
//! cursor with what was sent (`Grouped::replace`).
//!
//! What a peer reads as "the summary is complete" waits behind the stream: `Synced` (it
//! vouches for whole trees), barriers and their answers (a barrier that overtook the slices
//! would confirm subscriptions the peer does not hold yet) are held per link, in order, and
//! sent after the last slice.

use std::collections::BTreeMap;

use super::{Action, Router};
use crate::filter::Filter;
use crate::message::PeerMessage;
use crate::minimized::{in_kept_order, Minimized};
use crate::names::BrokerName;
use crate::summary::{Scope, SummaryDelta};

/// Per scope still streaming to one link: the last filter sent, in kept order (`None` before
/// the first slice).
pub(super) type Cursors<F> = BTreeMap<Scope, Option<F>>;

/// The streams under way, per link, and what waits behind them.
#[derive(Clone, Debug)]
pub(super) struct Streams<F> {
    /// Per link with a stream under way: its streaming scopes.
    pub(super) cursors: BTreeMap<BrokerName, Cursors<F>>,
    /// Per link: messages that claim the summary complete, in the order they were produced.
    held: BTreeMap<BrokerName, Vec<PeerMessage<F>>>,
}

impl<F> Default for Streams<F> {
    fn default() -> Self {
        Self { cursors: BTreeMap::new(), held: BTreeMap::new() }
    }
}

impl<F> Streams<F> {
    /// A link went down or was replaced: its streams and what waited behind them are void (a
    /// new link starts from nothing, and its barrier rounds are re-sent).
    pub(super) fn forget(&mut self, peer: &BrokerName) {
        self.cursors.remove(peer);
        self.held.remove(peer);
    }

    /// Whether any link is still being sent a first summary.
    pub(super) fn under_way(&self) -> bool {
        !self.cursors.is_empty()
    }
}

/// Whether a streaming scope's link holds `filter` when the set keeps it: it lies at or before
/// the cursor.
pub(super) fn streamed<F: Filter>(cursor: &Option<F>, filter: &F) -> bool {
    cursor.as_ref().is_some_and(|last| in_kept_order(filter, last))
}

/// Whether a scope bound for a set of `len` filters, sent nothing so far, streams rather than
/// going out whole (never without a `slice`: outside topology changes).
pub(super) fn streams(len: usize, slice: Option<usize>) -> bool {
    slice.is_some_and(|slice| len > slice)
}

/// Whether `message` claims something about the summary as a whole (see the module doc).
fn waits_behind_stream<F>(message: &PeerMessage<F>) -> bool {
    matches!(message, PeerMessage::Synced(_) | PeerMessage::Barrier { .. } | PeerMessage::BarrierAck { .. })
}

impl<F: Filter> Router<F> {
    /// The set `scope` of the link to `peer` is fed from now (`None`: it is sent nothing).
    pub(super) fn source(&self, peer: &BrokerName, scope: &Scope) -> Option<&Minimized<F>> {
        let link = self.links.get(peer)?;
        let mate = link.cell == self.settings.cell;
        match scope {
            Scope::Local => mate.then_some(&self.local),
            Scope::Tree(root) if mate => self.advertised.down.get(root),
            Scope::Tree(root) => {
                let parent = self.table.trees.get(root).and_then(|place| place.parent.as_ref());
                self.advertised.subtree.get(root).filter(|_| parent == Some(&link.cell))
            }
        }
    }

    /// After a settle: holds what the actions from `start` on claim of streaming links, sends
    /// each stream's next slice, and lets held messages go behind a stream that ended.
    pub(super) fn advance_streams(&mut self, start: usize, out: &mut Vec<Action<F>>) {
        self.streams.cursors.retain(|_, cursors| !cursors.is_empty());
        if !self.streams.cursors.is_empty() {
            let produced: Vec<Action<F>> = out.drain(start.min(out.len())..).collect();
            for action in produced {
                match action {
                    Action::Send { to, message }
                        if waits_behind_stream(&message) && self.streams.cursors.contains_key(&to) =>
                    {
                        self.streams.held.entry(to).or_default().push(message);
                    }
                    action => out.push(action),
                }
            }
            let peers: Vec<BrokerName> = self.streams.cursors.keys().cloned().collect();
            for peer in peers {
                self.next_slice(&peer, out);
            }
        }
        let ended: Vec<BrokerName> =
            self.streams.held.keys().filter(|peer| !self.streams.cursors.contains_key(*peer)).cloned().collect();
        for peer in ended {
            for message in self.streams.held.remove(&peer).unwrap_or_default() {
                out.push(Action::Send { to: peer.clone(), message });
            }
        }
    }

    /// Sends `peer` the next slice of its first streaming scope, from the scope's set as it is
    /// now, and moves the cursor; a slice shorter than a whole one ends the scope's stream.
    fn next_slice(&mut self, peer: &BrokerName, out: &mut Vec<Action<F>>) {
        let Some((scope, cursor)) = self.streams.cursors.get(peer).and_then(|cursors| cursors.iter().next()) else {
            return;
        };
        let (scope, cursor) = (scope.clone(), cursor.clone());
        let slice: Vec<F> = self
            .source(peer, &scope)
            .map(|set| set.kept_after(cursor.as_ref()).take(self.stream_slice).cloned().collect())
            .unwrap_or_default();
        let ended = slice.len() < self.stream_slice;
        if let Some(cursors) = self.streams.cursors.get_mut(peer) {
            if ended {
                cursors.remove(&scope);
            } else {
                cursors.insert(scope.clone(), slice.last().cloned());
            }
            if cursors.is_empty() {
                self.streams.cursors.remove(peer);
            }
        }
        if slice.is_empty() {
            return;
        }
        self.sent.entry(peer.clone()).or_default().entry(scope.clone()).or_default().extend(slice.iter().cloned());
        self.counters.summary_deltas_sent += 1;
        let delta = SummaryDelta { scopes: vec![scope], added: slice, removed: Vec::new() };
        out.push(Action::Send { to: peer.clone(), message: PeerMessage::Summary(vec![delta]) });
    }
}
