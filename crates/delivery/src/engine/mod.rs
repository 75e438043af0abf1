//! The engine: every guaranteed-delivery role of one broker behind one state machine. Inputs go
//! in through [`Engine::handle`]; actions come out into a caller-owned `Vec`; the shell calls
//! again with [`Input::Tick`] at [`Engine::next_deadline`].
//!
//! Layout: `types` holds the public inputs, actions and routes; `stream` what every role
//! shares (one [`stream::Stream`] per pubend); `log` the pubend at its own broker; `upstream`
//! and `receive` the relay side; `ostream` the filter edge towards one downstream cell;
//! `subends` local delivery; `holds` cells that left the tree; `reply` packs answers into messages; `dispatch` the handlers.

mod dispatch;
mod holds;
mod log;
mod ostream;
mod receive;
mod reply;
mod stream;
mod subends;
mod types;
mod upstream;

use std::collections::{BTreeMap, BTreeSet};

use crate::names::{Millis, PubendId, SubendId, Tick, TreeTag};
use crate::settings::Settings;

use stream::Stream;
pub use types::{Action, ChildLink, Input, Matcher, ServeOrder, ServeRun, StreamRoute, UpstreamCell, Verdict};

#[cfg(test)]
mod tests;

/// Counters for metrics; they only grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Nack messages sent upstream.
    pub nacks_sent: u64,
    /// Ticks nacked upstream.
    pub nack_ticks_sent: u64,
    /// Ticks a downstream nack asked for that an upstream nack already covered (consolidation).
    pub nack_ticks_absorbed: u64,
    /// Retransmission messages sent downstream (answers to nacks).
    pub retransmitted: u64,
    /// First-time Data for ticks already final here, dropped.
    pub duplicates_dropped: u64,
    /// Publishes dropped as repeats of a logged `(publisher, seq)`.
    pub duplicate_publishes: u64,
    /// F silences from a broker that is not this stream's upstream cell (a former upstream,
    /// or a former entry of our own cell): judged for another subtree, so dropped; what they
    /// covered is learned again from the upstream.
    pub foreign_finals: u64,
    /// F (silences, or a Data's brackets) from the upstream cell judged under another tree
    /// than ours for the pubend ([`crate::TreeTag`]): sound for the subtree it was judged
    /// for, which may lack subscribers now below us, so dropped and learned again.
    pub stale_tree_finals: u64,
    /// Knowledge contradicting what was held (D against F): protocol errors, old value kept.
    pub conflicts: u64,
    /// Messages with impossible fields.
    pub malformed: u64,
    /// Messages for a pubend with no stream here.
    pub unknown_stream: u64,
    /// Ticks known to hold a message whose record turned out unreadable (damaged in the log
    /// at the pubend, or told lost by upstream while this broker lacked the payload): they
    /// became L and their subscribers got gap notices.
    pub damaged_ticks: u64,
    /// Untold F runs cut back because a tick judged F in them passed the filter edge when
    /// judged again after the summaries moved (the F would have been a lie).
    pub rejudged: u64,
}

/// What one stream operation needs besides the stream.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Millis,
    pub(crate) pubend: PubendId,
    /// The tree the stream's filter edges judge under now (`Stream::tree`).
    pub(crate) tree: TreeTag,
    pub(crate) settings: &'a Settings,
    /// How far the pubend's replica group confirmed this broker's lead, if it is replicated.
    pub(crate) confirmed: Option<Tick>,
    pub(crate) matcher: &'a dyn Matcher,
    pub(crate) out: &'a mut Vec<Action>,
    pub(crate) counters: &'a mut Counters,
}

/// Every guaranteed-delivery role of one broker: pubends it hosts, relayed streams, subends.
pub struct Engine<M: Matcher> {
    settings: Settings,
    matcher: M,
    streams: BTreeMap<PubendId, Stream>,
    /// Which streams each local subend is attached to (flow control is per subend).
    subend_streams: BTreeMap<SubendId, BTreeSet<PubendId>>,
    /// Per replicated pubend, how far its group confirmed this broker's lead
    /// ([`crate::Input::ConfirmSilence`]): its silence stops there.
    confirmed: BTreeMap<PubendId, Tick>,
    /// Per stream, the ack lease its store holds ([`crate::StoreAction::AckLease`]): kept
    /// here, not in the stream, so it outlives a stream dropped while idle, and restored at a
    /// start before any subscription ([`crate::StoreInput::AckLeaseDone`]).
    ack_leases: BTreeMap<PubendId, Tick>,
    counters: Counters,
}

impl<M: Matcher> Engine<M> {
    /// An engine with no streams. After a restart, a new engine starts empty: all its soft state
    /// is gone, and the pubends it hosts come back through [`crate::StoreInput::Opened`].
    pub fn new(settings: Settings, matcher: M) -> Self {
        Self {
            settings,
            matcher,
            streams: BTreeMap::new(),
            subend_streams: BTreeMap::new(),
            confirmed: BTreeMap::new(),
            ack_leases: BTreeMap::new(),
            counters: Counters::default(),
        }
    }

    /// The matcher, to update filters as subscriptions and summaries change.
    pub fn matcher_mut(&mut self) -> &mut M {
        &mut self.matcher
    }

    /// The matcher.
    pub fn matcher(&self) -> &M {
        &self.matcher
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// When the shell must next call `handle(now, Input::Tick)`.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.streams.values().filter_map(|stream| stream.deadline).min()
    }

    /// Approximate bytes of state held for `pubend` (knowledge runs, payloads, curiosity).
    pub fn stream_bytes(&self, pubend: PubendId) -> Option<usize> {
        self.streams.get(&pubend).map(Stream::approx_bytes)
    }

    /// What `pubend`'s log holds, as a restart would find it (`None` unless this broker hosts
    /// the pubend): asked before [`crate::Input::CloseLog`], so a host that leads the pubend's
    /// group again reopens the same log ([`crate::StoreInput::Opened`]) once brought up to the
    /// group's state.
    pub fn log_holds(&self, pubend: PubendId) -> Option<crate::store::Recovered> {
        let stream = self.streams.get(&pubend)?;
        match &stream.source {
            stream::Source::Log(log) => Some(log.holds(&stream.know)),
            stream::Source::Upstream(_) => None,
        }
    }

    /// The lowest start a local subscription made now may be confirmed at on `pubend` (`None`:
    /// any): at or above [`StreamView::start_floor`] where `subend` is attached, and above the
    /// stream's ack lease. What this broker acknowledged upstream, in this life or an earlier
    /// one, was settled there for the subscriptions it had then, and is answered as silence
    /// below it; a subscription made since may want messages among those ticks, so it starts
    /// above them, and a client that stood lower is told the gap (nemesis seed 310: a
    /// subscriber back at its broker after the broker restarted lost, without a word, what
    /// the broker's earlier life had acknowledged for another subscription).
    pub fn start_floor(&self, pubend: PubendId, subend: SubendId) -> Option<Tick> {
        let attached = self.inspect(pubend).and_then(|view| view.start_floor(subend));
        let leased = self.ack_leases.get(&pubend).map(|lease| lease.next());
        attached.max(leased)
    }

    /// A read-only view of one stream, for invariant checks and `/state`.
    pub fn inspect(&self, pubend: PubendId) -> Option<StreamView<'_>> {
        self.streams.get(&pubend).map(|stream| StreamView { stream })
    }
}

/// Read-only facts about one stream at one broker.
pub struct StreamView<'a> {
    stream: &'a Stream,
}

impl StreamView<'_> {
    /// The knowledge value at `tick` (`None`: Q).
    pub fn knowledge(&self, tick: crate::names::Tick) -> Option<crate::knowledge::Know> {
        self.stream.know.get(tick)
    }

    /// The done prefix.
    pub fn done(&self) -> crate::names::Tick {
        self.stream.know.done()
    }

    /// The doubt horizon.
    pub fn horizon(&self) -> crate::names::Tick {
        self.stream.know.horizon()
    }

    /// What this stream last acknowledged (at a pubend: the log's release prefix).
    pub fn acked(&self) -> crate::names::Tick {
        self.stream.acked.ack
    }

    /// At the pubend's broker, the log's release prefix.
    pub fn release(&self) -> Option<crate::names::Tick> {
        match &self.stream.source {
            stream::Source::Log(log) => Some(log.release),
            stream::Source::Upstream(_) => None,
        }
    }

    /// At the pubend's broker, the tick the next publish gets at the earliest (the start tick
    /// to confirm a new local subscription with); `None` at other brokers.
    pub fn next_tick(&self) -> Option<crate::names::Tick> {
        match &self.stream.source {
            stream::Source::Log(log) => Some(log.next_tick()),
            stream::Source::Upstream(_) => None,
        }
    }

    /// Whether every tick of `range` is final here (gd-protocol S1: only then may F be claimed).
    pub fn is_final(&self, range: crate::names::TickRange) -> bool {
        let mut unknown = Vec::new();
        self.stream.know.unknown(range, &mut unknown);
        unknown.is_empty()
    }

    /// The lowest start a barrier may give attached local `subend` here: below it the stream
    /// holds nothing for the subend any more (a later barrier can carry a lower start than an
    /// earlier one that started the stream). `None` when the subend is not attached.
    pub fn start_floor(&self, subend: crate::names::SubendId) -> Option<crate::names::Tick> {
        self.stream.subends.start_floor(subend, &self.stream.know)
    }

    /// Everything up to this tick was handed to local `subend` or did not match it: a durable
    /// subscription whose client acknowledged every delivery may checkpoint here, so a filter
    /// that rarely matches does not hold the log until its next match.
    pub fn subend_position(&self, subend: crate::names::SubendId) -> Option<crate::names::Tick> {
        self.stream.subends.position(subend)
    }

    /// The first `max` tick ranges this broker wants from upstream (nacked, or waiting out
    /// the gap curiosity threshold), and whether more follow; none at the pubend's broker.
    /// An operator sees where knowledge is missing without reading the nack counters' totals.
    pub fn wanted(&self, max: usize) -> (Vec<crate::names::TickRange>, bool) {
        match &self.stream.source {
            stream::Source::Upstream(up) => up.wanted(max),
            stream::Source::Log(_) => (Vec::new(), false),
        }
    }

    /// Per downstream cell that asked for ticks not answered yet: its entry broker, the first
    /// `max` of those ranges, and whether more follow.
    pub fn asked(&self, max: usize) -> Vec<(crate::names::BrokerId, Vec<crate::names::TickRange>, bool)> {
        let asked = self.stream.children.values().map(|child| (child.link().broker, child.asked(max)));
        asked
            .filter(|(_, (ranges, _))| !ranges.is_empty())
            .map(|(broker, (ranges, more))| (broker, ranges, more))
            .collect()
    }

    /// Runs held by the knowledge map.
    pub fn runs(&self) -> usize {
        self.stream.know.run_count()
    }

    /// Payloads cached.
    pub fn cached(&self) -> usize {
        self.stream.cache.len()
    }
}
