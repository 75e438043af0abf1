//! The seam between the delivery core and a pubend's replica group (issue 40,
//! `docs/replication.md`), as a state machine: the broker's driver feeds it what the engine and
//! the group said about each publish, and carries out the [`Step`]s it returns. It takes no
//! clock and does no I/O, so the simulator can run the same rules the broker runs.
//!
//! The rules:
//! - a publish to a replicated pubend is logged by the engine as before (its tick, its stream)
//!   and proposed to the group at that tick, one proposal per pubend per turn of the caller
//!   ([`Gate::take_batch`]);
//! - its PUBLISH_ACK waits for both the engine's acknowledgement (the host's log synced it) and
//!   the group's (a quorum synced it, applied in this broker's term), whichever comes last;
//! - the engine is told a record is synced (`AppendDone`) only once it is both synced here and
//!   committed in the group ([`Frontier`]): whatever a subscriber received then survives a
//!   takeover at its tick;
//! - every publish the gate took gets an answer, an acknowledgement or a refusal, while its
//!   publisher stays connected. A publisher answered neither waits for good: the relay of a
//!   durable subscription stored in its cell is such a publisher, and once its window held
//!   only unanswered republishes it paused its origin's stream for good (nemesis seed 625 on
//!   `gryphon-fig3-double`: 1,641 acknowledged messages never delivered to a durable
//!   subscriber, its relay group having lost its quorum).

use std::collections::{BTreeMap, BTreeSet};

use tidings_delivery::{Input, PubendId, PublisherId, StoreInput, Tick};
use tidings_replica::Record;

use crate::publishes::{Ack, PublishKey as Key, Publishes};

/// What a replica group decided for publishers, as the broker's group shell reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A quorum synced the publish and this broker led when it was applied; the tick the group
    /// holds it at (`None`: released, tick forgotten).
    Acked {
        /// The publish.
        key: Key,
        /// Where the group holds it.
        tick: Option<u64>,
    },
    /// This broker cannot log it now; `leads`: it leads the group all the same (the group
    /// passed the tick this broker's log gave the publish).
    Refused {
        /// The publish.
        key: Key,
        /// Why, for the publisher.
        why: String,
        /// This broker leads the group.
        leads: bool,
    },
    /// This broker leads the group in a new term: what it proposed before and is not yet
    /// acknowledged will never be (the group's core forgets it), so it is proposed again.
    Leads(PubendId),
    /// A quorum confirmed this broker led the group at `at` (ms): the engine may tell silence
    /// up to there (`tidings_delivery::Input::ConfirmSilence`).
    Confirmed {
        /// The group's pubend.
        pubend: PubendId,
        /// When, in ms of the group's clock.
        at: u64,
    },
}

/// What the caller does next, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<W> {
    /// Send the publisher its PUBLISH_ACK.
    Answer(Key, Ack<W>),
    /// Refuse the publisher (retryable: nothing is promised), with why.
    Refuse(Key, W, String),
    /// Propose these records to the pubend's group, in this order
    /// (`tidings_replica::Input::PublishAllAt`).
    Propose(PubendId, Vec<Record>),
    /// Feed this to the engine.
    Feed(Input),
    /// This broker won an election of the pubend's group (a metric).
    Won(PubendId),
    /// The group holds a publish at another tick than this broker's log: a subscriber would get
    /// another record (or none) at one of the ticks. An error to log.
    Disagree {
        /// The publish.
        key: Key,
        /// The group's tick.
        group: u64,
        /// The log's tick.
        log: u64,
    },
    /// The group holds a publish whose tick this broker no longer knows (a warning).
    Unknown {
        /// The publish.
        key: Key,
        /// The group's tick.
        group: u64,
    },
    /// The group refused a publish while this broker leads it (a warning).
    RefusedLeading {
        /// The publish.
        key: Key,
        /// The group's reason.
        why: String,
    },
}

/// A publish the group has not acknowledged yet.
#[derive(Clone, Debug)]
struct Proposal {
    /// The engine's tick (`None` until the engine appends it).
    tick: Option<Tick>,
    payload: Vec<u8>,
    /// The group refused it while this broker led: nothing proposes it again in this term, so
    /// the next acknowledgement of the engine (its own, or a retry's) proposes it again at once
    /// and the group's answer, either way, reaches the publisher ([`Gate::engine_acked`]).
    refused: bool,
}

/// The engine sends a record to subscribers only once its append is synced (`AppendDone`). For a
/// replicated pubend it is told so only once the group committed the record too: then every
/// record a subscriber ever received is in the group, and a successor serves it at its tick. A
/// record sent before its commit could be lost with its host, and a retry of its publish logged
/// again by the successor at another tick: a duplicate (docs/replication.md, "Takeover").
#[derive(Clone, Copy, Debug, Default)]
struct Frontier {
    /// The store's last `AppendDone`.
    store: Tick,
    /// The tick of the last publish the group acknowledged (raft commits in order).
    group: Tick,
    /// The last `AppendDone` fed to the engine: the lower of the two.
    fed: Tick,
}

/// What becomes of the engine's acknowledgement of a publish ([`Gate::engine_acked`]).
#[derive(Debug, PartialEq, Eq)]
pub enum EngineAck<W> {
    /// The group acknowledged it already: the PUBLISH_ACK goes now.
    Answer(Ack<W>),
    /// The gate never took it (the engine acknowledged a repeat it found in its own log after a
    /// restart): refused, and the publisher's retry goes through the gate.
    NotTaken(Ack<W>),
    /// Kept until the group answers (proposed at the caller's next [`Gate::take_batch`] if it
    /// must go again).
    Parked,
}

/// The seam's state for every replicated pubend of one broker; `W` is whoever waits for an
/// acknowledgement (the driver's reply handle).
pub struct Gate<W> {
    /// The engine acknowledged; the group has not yet.
    parked: BTreeMap<Key, Ack<W>>,
    /// The group acknowledged; the engine has not yet.
    acked: BTreeSet<Key>,
    /// Taken and not yet acknowledged by the group: proposed again when this broker leads in a
    /// new term (in tick order), since the group's core forgets what an earlier term proposed
    /// and a publisher that waits (rather than retries) would wait forever.
    proposed: BTreeMap<Key, Proposal>,
    /// Per replicated pubend, how far its log is synced here and committed in its group.
    frontier: BTreeMap<PubendId, Frontier>,
    /// Publishes to propose at the caller's next [`Gate::take_batch`], per pubend in the order
    /// they were appended (tick order): all of a turn's publishes go to the group as one
    /// proposal, so its per-message costs (a `Ready`, a journal write, an append and its answer
    /// per follower) are paid once per turn, not per publish.
    batch: BTreeMap<PubendId, Vec<Key>>,
    /// Ticks per millisecond of the engine's clock (`tidings_delivery::Settings::ticks`).
    ticks_per_ms: u64,
}

impl<W> Gate<W> {
    /// An empty gate for an engine whose clock gives `ticks_per_ms` ticks a millisecond.
    pub fn new(ticks_per_ms: u64) -> Self {
        Gate {
            parked: BTreeMap::new(),
            acked: BTreeSet::new(),
            proposed: BTreeMap::new(),
            frontier: BTreeMap::new(),
            batch: BTreeMap::new(),
            ticks_per_ms,
        }
    }

    /// The caller let `key` through to the engine (this broker leads the pubend's group): the
    /// group will be asked for it once the engine gives it a tick.
    pub fn take(&mut self, key: Key, payload: Vec<u8>) {
        self.proposed.entry(key).or_insert(Proposal { tick: None, payload, refused: false });
    }

    /// The engine appends `key` at `tick`: the group logs it at that tick too, in this turn's
    /// batch.
    pub fn appended(&mut self, key: Key, tick: Tick) {
        let Some(proposal) = self.proposed.get_mut(&key) else { return };
        proposal.tick = Some(tick);
        self.batch.entry(key.0).or_default().push(key);
    }

    /// The engine could not log `key`: the group will not be asked for it.
    pub fn forget(&mut self, key: Key) {
        self.proposed.remove(&key);
    }

    /// This turn's publishes, each pubend's as one proposal at the ticks the engine gave them.
    /// One with no tick yet (a retry answered from the engine's table, see
    /// [`Gate::engine_acked`]) is proposed at the tick it is given then.
    pub fn take_batch(&mut self) -> Vec<Step<W>> {
        let mut steps = Vec::new();
        for (pubend, keys) in std::mem::take(&mut self.batch) {
            let records: Vec<Record> = keys.into_iter().filter_map(|key| self.record(key)).collect();
            if !records.is_empty() {
                steps.push(Step::Propose(pubend, records));
            }
        }
        steps
    }

    /// Whether publishes wait to be proposed (the caller then calls [`Gate::take_batch`]).
    pub fn has_batch(&self) -> bool {
        !self.batch.is_empty()
    }

    /// What the group logs for `key`: its proposal, at its tick.
    fn record(&self, key: Key) -> Option<Record> {
        let proposal = self.proposed.get(&key)?;
        let (_, publisher, seq) = key;
        Some(Record { tick: proposal.tick?.0, publisher: publisher.0, seq, payload: proposal.payload.clone() })
    }

    /// The engine acknowledged `key` (its append synced here, or a retry it answered from its
    /// table); the group's half decides.
    pub fn engine_acked(&mut self, key: Key, ack: Ack<W>) -> EngineAck<W> {
        if self.acked.remove(&key) {
            return EngineAck::Answer(ack);
        }
        let Some(proposal) = self.proposed.get_mut(&key) else { return EngineAck::NotTaken(ack) };
        let again = match proposal.tick {
            // Proposed at its append: the group answers it, here or after a new term; once
            // refused while this broker led, nothing would, so it goes again now.
            Some(_) => std::mem::take(&mut proposal.refused),
            // A retry the engine answered from its table never reached its append here: the
            // tick is the one the table remembers (0, "after every record", when forgotten).
            None => {
                proposal.tick = Some(ack.tick.unwrap_or_default());
                true
            }
        };
        self.parked.insert(key, ack);
        if again {
            self.batch.entry(key.0).or_default().push(key);
        }
        EngineAck::Parked
    }

    /// Acts on what the groups decided for publishers. `publishes` is the broker's tick table,
    /// asked where a publish the group acknowledged sits in the log when the gate no longer
    /// holds its proposal.
    ///
    /// The engine is fed the moved frontiers only after every outcome is recorded: it
    /// acknowledges synchronously once the frontier passes a record, and its acknowledgement
    /// must find the group's already recorded (before, it found neither the proposal nor the
    /// group's ack and refused the publish: "did not take the publish").
    pub fn outcomes<V>(&mut self, outcomes: Vec<Outcome>, publishes: &Publishes<V>) -> Vec<Step<W>> {
        let mut steps = Vec::new();
        // The highest tick each pubend's group acknowledged in these outcomes.
        let mut moved: BTreeMap<PubendId, Tick> = BTreeMap::new();
        for outcome in outcomes {
            match outcome {
                Outcome::Acked { key, tick: held } => {
                    let (pubend, publisher, seq) = key;
                    let tick = self.proposed.remove(&key).and_then(|p| p.tick);
                    // A retry the engine answered "logged earlier, tick forgotten" was proposed
                    // at tick 0 (see `engine_acked`): no tick is known for it here, and the
                    // group answers it from its retry table at the tick it holds (the
                    // simulator's core found this reported as a disagreement).
                    let known = tick.filter(|t| t.0 > 0).or_else(|| publishes.tick(pubend, (publisher, seq)));
                    match (held, known) {
                        (Some(group), Some(log)) if group != log.0 => {
                            steps.push(Step::Disagree { key, group, log: log.0 })
                        }
                        (Some(group), None) => steps.push(Step::Unknown { key, group }),
                        _ => {}
                    }
                    match self.parked.remove(&key) {
                        Some(ack) => steps.push(Step::Answer(key, ack)),
                        None => {
                            self.acked.insert(key);
                        }
                    }
                    if let Some(tick) = tick {
                        let highest = moved.entry(pubend).or_default();
                        *highest = (*highest).max(tick);
                    }
                }
                Outcome::Refused { key, why, leads } => {
                    if leads {
                        steps.push(Step::RefusedLeading { key, why: why.clone() });
                    }
                    if let Some(ack) = self.group_refused(key, leads) {
                        steps.push(Step::Refuse(key, ack.waiter, why));
                    }
                }
                Outcome::Leads(pubend) => {
                    steps.push(Step::Won(pubend));
                    steps.extend(self.propose_again(pubend));
                }
                Outcome::Confirmed { pubend, at } => {
                    let up_to = Tick(at.saturating_mul(self.ticks_per_ms));
                    steps.push(Step::Feed(Input::ConfirmSilence { pubend, up_to }));
                }
            }
        }
        for (pubend, tick) in moved {
            let frontier = self.frontier.entry(pubend).or_default();
            frontier.group = frontier.group.max(tick);
            // Committed in this broker's term, proposed once its tick was given: no successor
            // was elected before then, so silence up to it is confirmed too (and a record the
            // subscribers get does not wait for the next heartbeat round's confirmation).
            steps.push(Step::Feed(Input::ConfirmSilence { pubend, up_to: tick }));
            steps.extend(self.feed_synced(pubend));
        }
        steps
    }

    /// The group refused `key` (`leads`: while this broker leads it). Returns the engine's
    /// acknowledgement parked for it, to turn into a refusal. The proposal is kept: proposed
    /// again when this broker leads in a new term; refused while it leads, again at the
    /// engine's next acknowledgement of it (see [`Proposal::refused`]).
    fn group_refused(&mut self, key: Key, leads: bool) -> Option<Ack<W>> {
        if leads {
            if let Some(proposal) = self.proposed.get_mut(&key) {
                proposal.refused = true;
            }
        }
        self.parked.remove(&key)
    }

    /// Proposes again, in this broker's new term and in tick order, every publish of `pubend`
    /// its group has not acknowledged (the group answers one it already applied from its retry
    /// table). This turn's batch of the pubend is among them (each has its tick), so it is
    /// dropped: proposed after the rest, a record of the batch whose tick is below theirs would
    /// be logged by the group at another tick than the engine's.
    fn propose_again(&mut self, pubend: PubendId) -> Option<Step<W>> {
        self.batch.remove(&pubend);
        let mut again: Vec<Record> = self
            .proposed
            .range((pubend, PublisherId(0), 0)..)
            .take_while(|(k, _)| k.0 == pubend)
            .filter_map(|(&key, _)| self.record(key))
            .collect();
        again.sort_by_key(|record| record.tick);
        (!again.is_empty()).then_some(Step::Propose(pubend, again))
    }

    /// The store synced `pubend`'s log up to `tick` (a replicated pubend: the caller asks only
    /// for those). The engine is told once the group committed it too.
    pub fn store_synced(&mut self, pubend: PubendId, tick: Tick) -> Option<Step<W>> {
        let frontier = self.frontier.entry(pubend).or_default();
        frontier.store = frontier.store.max(tick);
        self.feed_synced(pubend)
    }

    /// Tells the engine what is both synced here and committed in the group, if that grew.
    fn feed_synced(&mut self, pubend: PubendId) -> Option<Step<W>> {
        let frontier = self.frontier.get_mut(&pubend)?;
        let up_to = frontier.store.min(frontier.group);
        (up_to > frontier.fed).then(|| {
            frontier.fed = up_to;
            Step::Feed(Input::Store(StoreInput::AppendDone { pubend, synced_up_to: up_to }))
        })
    }

    /// Forgets everything of `pubend` (its log closed here): returns who waited, for the
    /// acknowledgements parked for the group's half, and the keys the group acknowledged before
    /// the engine did (whose waiters the caller's tick table holds).
    pub fn forget_pubend(&mut self, pubend: PubendId) -> (Vec<(Key, Ack<W>)>, Vec<Key>) {
        let of = |key: &Key| key.0 == pubend;
        self.proposed.retain(|key, _| !of(key));
        self.batch.remove(&pubend);
        self.frontier.remove(&pubend);
        let parked = self.parked.extract_if(.., |key, _| of(key)).collect();
        let acked = self.acked.extract_if(.., of).collect();
        (parked, acked)
    }
}

#[cfg(test)]
mod tests;
