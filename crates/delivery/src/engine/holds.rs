//! What still holds a stream's acknowledgements (and, at the pubend, its log's release) besides
//! the ostreams of the current tree: downstream cells that left the tree, and, at a pubend
//! that just restarted, the cells it cannot know about yet.
//!
//! gd-protocol §9.1 lets a link that is not in the pubend's tree go unwaited for. That is unsafe
//! when a cell leaves the tree because of a partition, a reroute or a restart of the pubend's
//! broker: its subscribers are still owed the ticks it had not acknowledged, and the cell that
//! takes it over starts its new ostream at its own ack prefix. So a cell that leaves keeps its
//! ostream here, holding the aggregate where it last acknowledged, until it comes back into the
//! tree (its ostream, acks and all, is restored) or [`Settings::departed_retention_ms`] passes
//! (it is then taken as gone for good). A restarted pubend holds its release at the recovered
//! prefix for the same retention: the cells that were in its tree are unknown to it.
//! Holds are kept per (cell, entry broker): when another broker of the same cell becomes its
//! entry (the old entry was cut off or restarted), the new entry's acks say nothing about the
//! subscribers behind the old one, so the old entry's ostream is held the same way.
//! When a child cell's entry broker restarts (empty: its own holds and children are gone), its
//! old ostream is held the same way: the new incarnation acknowledges for the subtree it knows
//! so far, and the cells that hung below the old one may come back anywhere, lower
//! (simulator seed 920: a restarted relay's first child acknowledged past a subtree that then
//! rejoined below that child, and the pubend released what the subtree was still owed).
//! Last, a stream with no consumer at all acknowledges everything it holds only once it has
//! stayed so for the same retention ([`Stream::idle_aggregate`]).
//!
//! [`Settings::departed_retention_ms`]: crate::Settings::departed_retention_ms

use std::collections::BTreeMap;

use crate::engine::ostream::Ostream;
use crate::engine::stream::{Source, Stream};
use crate::engine::Ctx;
use crate::names::{BrokerId, CellId, Millis, Tick};

/// A cell that left the tree, and since when.
#[derive(Clone, Debug)]
struct Departed {
    ostream: Ostream,
    since: Millis,
}

/// The holds of one stream. All soft but the restart hold's tick (the recovered release).
#[derive(Clone, Debug, Default)]
pub(crate) struct Holds {
    departed: BTreeMap<(CellId, BrokerId), Departed>,
    /// Ostreams whose entry broker restarted, frozen where the old incarnation acknowledged
    /// (acks from the new one go to the live ostream, never here).
    restarted_entries: Vec<Departed>,
    /// At a restarted pubend: the recovered release prefix, and when the hold began.
    restart: Option<(Tick, Millis)>,
}

impl Holds {
    /// A pubend reopened a log that had a past: nothing above `release` is released before the
    /// retention passes (and then only as far as the tree it knows by then acknowledged).
    pub(crate) fn restarted(&mut self, release: Tick, now: Millis) {
        self.restart = Some((release, now));
    }

    /// Takes over the departed cells of `other` (the relay stream a pubend's log replaces).
    pub(crate) fn absorb(&mut self, other: Holds) {
        self.departed.extend(other.departed);
        self.restarted_entries.extend(other.restarted_entries);
    }

    /// `ostream`'s cell left the tree, or its entry broker stopped being the cell's entry.
    pub(crate) fn leave(&mut self, ostream: Ostream, now: Millis) {
        let key = (ostream.cell, ostream.link().broker);
        self.departed.insert(key, Departed { ostream, since: now });
    }

    /// `ostream`'s entry broker restarted empty: what its old incarnation had not acknowledged
    /// stays pinned for the retention, whatever the new one acknowledges.
    pub(crate) fn entry_restarted(&mut self, ostream: Ostream, now: Millis) {
        self.restarted_entries.push(Departed { ostream, since: now });
    }

    /// `broker` restarted empty while out of the tree: as for an entry in the tree
    /// ([`Self::entry_restarted`]), what the ostreams that left through it had acknowledged is
    /// held, whatever the new incarnation acknowledges, and the departed ostream forgets what
    /// the old one reported, so that the new one's nacks below it are answered once it returns
    /// (simulator seed 575: a restarted relay rejoined the pubend's tree with one child of its
    /// three and acknowledged, for the other two, ticks they were still owed).
    pub(crate) fn broker_restarted(&mut self, broker: BrokerId, now: Millis) {
        for ((_, entry), departed) in self.departed.iter_mut() {
            if *entry == broker {
                self.restarted_entries.push(Departed { ostream: departed.ostream.clone(), since: now });
                departed.ostream.peer_restarted();
            }
        }
    }

    /// `cell` is back in the tree through `broker`: the ostream held for that entry, if any.
    pub(crate) fn rejoin(&mut self, cell: CellId, broker: BrokerId) -> Option<Ostream> {
        self.departed.remove(&(cell, broker)).map(|departed| departed.ostream)
    }

    /// An ack from a departed entry (routes may disagree for a while): it still counts.
    pub(crate) fn on_ack(&mut self, key: (CellId, BrokerId), ack: Tick, release: Tick, now: Millis, interval_ms: u64) {
        if let Some(departed) = self.departed.get_mut(&key) {
            departed.ostream.on_ack(ack, release, now, interval_ms);
        }
    }

    /// Drops the holds older than `retention_ms` (`None`: none ever expires).
    pub(crate) fn expire(&mut self, now: Millis, retention_ms: Option<u64>) {
        let Some(retention) = retention_ms else { return };
        self.departed.retain(|_, departed| now < departed.since.after(retention));
        self.restarted_entries.retain(|held| now < held.since.after(retention));
        if self.restart.is_some_and(|(_, since)| now >= since.after(retention)) {
            self.restart = None;
        }
    }

    /// The lowest (ack, release) the holds allow; `None` without holds.
    pub(crate) fn floor(&self) -> Option<(Tick, Tick)> {
        let restart = self.restart.map(|(tick, _)| (tick, tick));
        let departed = self.departed.values().chain(&self.restarted_entries);
        let departed = departed.map(|d| (d.ostream.effective_ack(), d.ostream.effective_release()));
        restart.into_iter().chain(departed).reduce(|(a, r), (b, s)| (a.min(b), r.min(s)))
    }

    /// When the oldest hold expires.
    pub(crate) fn deadline(&self, retention_ms: Option<u64>) -> Option<Millis> {
        let retention = retention_ms?;
        let restart = self.restart.map(|(_, since)| since);
        let departed = self.departed.values().chain(&self.restarted_entries);
        let oldest = departed.map(|d| d.since).chain(restart).min()?;
        Some(oldest.after(retention))
    }
}

impl Stream {
    /// Nobody behind this stream: everything it holds is F for its consumers, so it is all
    /// acknowledged (a relay or an SHB left without consumers must not pin the log), but only
    /// once it has stayed so for the departed retention: while routes settle, a relay may
    /// briefly have no child, and a child that joins then starts at what the stream acked.
    pub(crate) fn idle_aggregate(&mut self, ctx: &Ctx<'_>) -> (Tick, Tick) {
        let since = *self.idle_since.get_or_insert(ctx.now);
        let settled = ctx.settings.departed_retention_ms.is_some_and(|ms| ctx.now >= since.after(ms));
        match &self.source {
            Source::Log(log) if !settled => (log.release, log.release),
            Source::Log(_) => (self.know.horizon().prev(), self.know.horizon().prev()),
            Source::Upstream(_) if !settled => (self.acked.ack, self.acked.release),
            Source::Upstream(_) => (self.know.highest_known(), self.know.highest_known()),
        }
    }
}
