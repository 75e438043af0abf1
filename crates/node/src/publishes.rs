//! The publisher side of a pubend's shell: which tick each `(publisher, seq)` was given, which
//! of them the log has synced, and who waits for an acknowledgement. The broker's driver and
//! the simulator both ask it what to do with a GPUBLISH and with the core's acknowledgements,
//! so the rules below run the same in both.
//!
//! The rules:
//! - a publish is acknowledged only once its append's group commit has synced (the core says
//!   so with [`tidings_delivery::Action::PublishAcked`], after the completions of that sync);
//! - a retry of a publish already given a tick never reaches the core twice: it is answered at
//!   once if its tick is at or below what the log reported synced, else when its own append
//!   completes (a retry after a lost PUBLISH_ACK gets the tick of the first attempt);
//! - an append the log refused forgets its tick: a retry is a new publish.
//!
//! The tick table is kept apart from the log because the log forgets a record once every
//! subscriber has it, while a publisher may still be retrying it. It is bounded: per pubend the
//! newest [`Publishes::LIMIT`] publishes are remembered (about 40 B each). A retry of an older
//! one, or of one released before a restart (the store's dedup table holds unreleased records
//! only), is still recognised by the core and acknowledged, but with no tick: "logged earlier,
//! tick forgotten".

use std::collections::{BTreeMap, VecDeque};

use tidings_delivery::{PubendId, PublisherId, StoreInput, Tick};
use tidings_store::Completion;

/// A publish's identity within a pubend.
pub type Key = (PublisherId, u64);

/// A publish's identity at a broker: its pubend, publisher and sequence number.
pub type PublishKey = (PubendId, PublisherId, u64);

#[derive(Default)]
struct PubendTicks {
    ticks: BTreeMap<Key, Tick>,
    order: VecDeque<Key>,
}

/// What to do with a publish (see [`Publishes::publish`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Admit<W> {
    /// Not seen before (or refused before): feed it to the core.
    New,
    /// A retry of a publish already synced: acknowledge it now.
    Ack(Ack<W>),
    /// A retry of a publish still being appended: its acknowledgement comes with the first's.
    Wait,
}

/// An acknowledgement due to a waiting publisher.
#[derive(Debug, PartialEq, Eq)]
pub struct Ack<W> {
    /// Who waits (the caller's reply handle).
    pub waiter: W,
    /// The tick its publish was given; `None` when too old to be remembered.
    pub tick: Option<Tick>,
    /// Whether that tick is at or below what the log reported synced (a forgotten tick is not).
    pub synced: bool,
}

/// The tick table, the synced prefix per pubend and the waiting publishers; `W` is whatever
/// the caller answers a publisher through.
pub struct Publishes<W> {
    pubends: BTreeMap<PubendId, PubendTicks>,
    synced: BTreeMap<PubendId, Tick>,
    waiters: BTreeMap<PublishKey, W>,
}

impl<W> Default for Publishes<W> {
    fn default() -> Self {
        Publishes { pubends: BTreeMap::new(), synced: BTreeMap::new(), waiters: BTreeMap::new() }
    }
}

impl<W> Publishes<W> {
    /// Publishes remembered per pubend.
    pub const LIMIT: usize = 262_144;

    /// What an opened log recovered: the logged publishes still deduplicated (see
    /// `journal::Opened::dedup`), and per pubend its highest logged tick (all of it synced:
    /// an open syncs what it recovered).
    pub fn recovered(
        dedup: impl IntoIterator<Item = (PubendId, Key, Tick)>,
        logged: impl IntoIterator<Item = (PubendId, Tick)>,
    ) -> Self {
        let mut publishes = Publishes::default();
        for (pubend, key, tick) in dedup {
            publishes.remember(pubend, key, tick);
        }
        for (pubend, tick) in logged {
            publishes.synced(pubend, tick);
        }
        publishes
    }

    /// A publish arrived, answered through `waiter`: feed it to the core, acknowledge it now,
    /// or let it wait for its first attempt's append. A waiter for the same key replaces the
    /// one before (the publisher retried on a new connection).
    pub fn publish(&mut self, key: PublishKey, waiter: W) -> Admit<W> {
        let (pubend, publisher, seq) = key;
        self.waiters.insert(key, waiter);
        let Some(tick) = self.tick(pubend, (publisher, seq)) else { return Admit::New };
        if self.synced.get(&pubend).is_some_and(|&synced| tick <= synced) {
            return self.acked(key).map_or(Admit::Wait, Admit::Ack);
        }
        Admit::Wait
    }

    /// The core appends `key` at `tick` (its [`tidings_delivery::StoreAction::Append`]).
    pub fn appending(&mut self, key: PublishKey, tick: Tick) {
        let (pubend, publisher, seq) = key;
        self.remember(pubend, (publisher, seq), tick);
    }

    /// The log synced `pubend` up to `tick` (an append completion).
    pub fn synced(&mut self, pubend: PubendId, tick: Tick) {
        let synced = self.synced.entry(pubend).or_default();
        *synced = (*synced).max(tick);
    }

    /// A group commit completed: its completions as the core's inputs, in order, and how
    /// many appends it held. The synced prefix moves before the caller feeds them, so every
    /// acknowledgement they cause, and every retry after, sees its tick synced.
    pub fn completed(&mut self, group: &[Completion]) -> (Vec<StoreInput>, usize) {
        let (inputs, appends) = crate::journal::inputs(group);
        for input in &inputs {
            if let StoreInput::AppendDone { pubend, synced_up_to } = input {
                self.synced(*pubend, *synced_up_to);
            }
        }
        (inputs, appends)
    }

    /// The core acknowledged `key` (or a retry of it was found synced): the waiter to answer,
    /// if one waits.
    pub fn acked(&mut self, key: PublishKey) -> Option<Ack<W>> {
        let (pubend, publisher, seq) = key;
        let waiter = self.waiters.remove(&key)?;
        let tick = self.tick(pubend, (publisher, seq));
        let synced = tick.is_some_and(|tick| self.synced.get(&pubend).is_some_and(|&synced| tick <= synced));
        Some(Ack { waiter, tick, synced })
    }

    /// The log refused `key`'s append: its tick is forgotten (a retry is a new publish); the
    /// waiter to refuse, if one waits.
    pub fn refused(&mut self, key: PublishKey) -> Option<W> {
        let (pubend, publisher, seq) = key;
        if let Some(entry) = self.pubends.get_mut(&pubend) {
            entry.ticks.remove(&(publisher, seq));
        }
        self.waiters.remove(&key)
    }

    /// Keeps of `pubend`'s publishes only those its reopened log holds: at or below its
    /// release point, or at one of `logged`. A log resumed or re-seeded from its replica group
    /// (`crate::replicated::reopen`) drops what the group never committed: a retry of one is a
    /// new publish, not answered with a tick no subscriber will ever get (nor proposed to the
    /// group again at a tick it has passed, and refused at every retry). Kept by what the log
    /// holds rather than forgotten by what it dropped, so no tick the log lacks survives,
    /// however the log came to lack it.
    pub fn keep_logged(&mut self, pubend: PubendId, release: Tick, logged: &[Tick]) {
        let Some(entry) = self.pubends.get_mut(&pubend) else { return };
        let logged: std::collections::BTreeSet<Tick> = logged.iter().copied().collect();
        entry.ticks.retain(|_, tick| *tick <= release || logged.contains(tick));
        let kept = &entry.ticks;
        entry.order.retain(|key| kept.contains_key(key));
    }

    /// `key`'s waiter, to refuse, keeping its tick: its pubend's log closed here (this broker
    /// lost the pubend's replica group) with the publish appended, and the group may hold it at
    /// that tick. A retry after the log reopens is answered with it; one the group lacks is
    /// forgotten by [`Publishes::keep_logged`] then.
    pub fn unwait(&mut self, key: PublishKey) -> Option<W> {
        self.waiters.remove(&key)
    }

    /// The tick given to `key`, if remembered.
    pub fn tick(&self, pubend: PubendId, key: Key) -> Option<Tick> {
        self.pubends.get(&pubend).and_then(|entry| entry.ticks.get(&key)).copied()
    }

    /// Every tick of `pubend` up to this one is synced (`None` before the first completion).
    pub fn synced_prefix(&self, pubend: PubendId) -> Option<Tick> {
        self.synced.get(&pubend).copied()
    }

    fn remember(&mut self, pubend: PubendId, key: Key, tick: Tick) {
        let entry = self.pubends.entry(pubend).or_default();
        if entry.ticks.insert(key, tick).is_none() {
            entry.order.push_back(key);
        }
        while entry.order.len() > Self::LIMIT {
            if let Some(old) = entry.order.pop_front() {
                entry.ticks.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PubendId = PubendId(1);
    const A: PublisherId = PublisherId(7);

    #[test]
    fn the_oldest_publishes_are_forgotten_past_the_limit() {
        let mut a = Publishes::<()>::default();
        for seq in 0..(Publishes::<()>::LIMIT as u64 + 2) {
            a.appending((P, PublisherId(1), seq), Tick(seq + 10));
        }
        assert_eq!(a.tick(P, (PublisherId(1), 0)), None);
        assert_eq!(a.tick(P, (PublisherId(1), 1)), None);
        assert_eq!(a.tick(P, (PublisherId(1), 2)), Some(Tick(12)));
        assert_eq!(a.refused((P, PublisherId(1), 2)), None);
        assert_eq!(a.tick(P, (PublisherId(1), 2)), None);
    }

    #[test]
    fn a_forgotten_tick_makes_its_retry_new() {
        let mut p = Publishes::default();
        p.appending((P, A, 1), Tick(100));
        p.appending((P, A, 2), Tick(101));
        p.appending((P, A, 4), Tick(103));
        p.appending((P, A, 5), Tick(104));
        p.synced(P, Tick(104));
        // The reopened log holds 100 (released) and 104; the group never committed 101, and
        // 103 was not in the log that closed (its append unsynced then).
        p.keep_logged(P, Tick(100), &[Tick(104)]);
        assert_eq!(p.tick(P, (A, 1)), Some(Tick(100)));
        assert_eq!(p.tick(P, (A, 5)), Some(Tick(104)));
        assert_eq!(p.publish((P, A, 2), "retry"), Admit::New);
        assert_eq!(p.publish((P, A, 4), "retry"), Admit::New);
        // A waiter refused by a closing log leaves its tick: a retry is answered with it.
        assert_eq!(
            p.publish((P, A, 1), "first"),
            Admit::Ack(Ack { waiter: "first", tick: Some(Tick(100)), synced: true })
        );
        p.appending((P, A, 3), Tick(105));
        assert_eq!(p.publish((P, A, 3), "waits"), Admit::Wait);
        assert_eq!(p.unwait((P, A, 3)), Some("waits"));
        assert_eq!(p.tick(P, (A, 3)), Some(Tick(105)));
    }

    #[test]
    fn a_retry_waits_for_the_sync_of_its_first_attempt() {
        let mut p = Publishes::default();
        assert_eq!(p.publish((P, A, 1), "first"), Admit::New);
        p.appending((P, A, 1), Tick(100));
        // The PUBLISH_ACK is lost before the sync: the retry is not fed again, and waits.
        assert_eq!(p.publish((P, A, 1), "retry"), Admit::Wait);
        p.synced(P, Tick(99));
        assert_eq!(p.publish((P, A, 1), "again"), Admit::Wait);
        p.synced(P, Tick(100));
        let ack = p.acked((P, A, 1));
        assert_eq!(ack, Some(Ack { waiter: "again", tick: Some(Tick(100)), synced: true }));
        assert_eq!(p.acked((P, A, 1)), None, "answered once");
    }

    #[test]
    fn a_retry_of_a_synced_publish_is_answered_at_once_with_its_tick() {
        let mut p = Publishes::recovered([(P, (A, 4), Tick(40))], [(P, Tick(40))]);
        assert_eq!(p.publish((P, A, 4), 1), Admit::Ack(Ack { waiter: 1, tick: Some(Tick(40)), synced: true }));
        assert_eq!(p.publish((P, A, 5), 2), Admit::New);
        assert_eq!(p.synced_prefix(P), Some(Tick(40)));
    }

    #[test]
    fn a_refused_append_makes_the_retry_a_new_publish() {
        let mut p = Publishes::default();
        assert_eq!(p.publish((P, A, 1), 'a'), Admit::New);
        p.appending((P, A, 1), Tick(5));
        assert_eq!(p.refused((P, A, 1)), Some('a'));
        assert_eq!(p.publish((P, A, 1), 'b'), Admit::New);
    }

    #[test]
    fn a_forgotten_tick_is_acknowledged_unsynced_and_without_a_tick() {
        let mut p = Publishes::default();
        p.synced(P, Tick(1000));
        assert_eq!(p.publish((P, A, 9), 0), Admit::New);
        assert_eq!(p.acked((P, A, 9)), Some(Ack { waiter: 0, tick: None, synced: false }));
    }
}
