//! The driver's side of replication: the seam between the delivery engine and a pubend's
//! replica group.
//!
//! The seam is the publisher's acknowledgement and the tick. A publish to a replicated pubend
//! is fed to the engine as before, and proposed to its group when the engine appends it, at the
//! engine's tick: the engine logs it in the host's pubend log and delivers it exactly as an
//! unreplicated one (its ticks, its stream, its nacks and releases are unchanged), and the group
//! holds it at the tick subscribers know it by, so a log rebuilt from the group (`serve`)
//! serves it there. What replication adds is the promise: the PUBLISH_ACK waits for both the
//! engine's acknowledgement (the host's log synced it) and the group's (a quorum synced it,
//! applied, same term), whichever comes last. That is the smallest change that makes
//! "acknowledged" mean "on a quorum's disks" without a second delivery path; the price is that
//! the host keeps its own copy beside its journal. The engine sends a record to subscribers
//! only once it is both synced here and committed in the group ([`Frontier`]), so whatever a
//! subscriber received survives a takeover at its tick.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidings_delivery::{PubendId, PublisherId, Tick};
use tidings_node::publishes::Ack;
use tidings_replica::{Input, Record};
use tidings_wire::{Frame, GuaranteedPublish, Notice, PublishRefused, ReasonCode};

use super::quorum::{EngineAck, Key, Proposal};
use super::Outcome;
use crate::guaranteed::driver::{Driver, Waiter};
use crate::outbox::Outbox;

/// How long a publish waits for its group to have a leader here (an election, the lead coming
/// back to the host) before it is refused as unavailable.
const HOLD: Duration = Duration::from_secs(5);

impl Driver {
    /// Decides whether a GPUBLISH to `pubend` goes on to the engine: true if the pubend is not
    /// replicated, or if this broker leads its group and the pubend is open here (see `serve`);
    /// otherwise it is held for a leader or refused as unavailable.
    pub(in crate::guaranteed) fn replica_gate(
        &mut self,
        publish: &GuaranteedPublish,
        reply: &Arc<Outbox>,
        pubend: PubendId,
        since: Instant,
    ) -> bool {
        let Some(replicas) = self.replicas.as_mut() else { return true };
        if let Some(why) = replicas.forgotten_here() {
            // Its cell removed it from every group: what it logged alone, no group would hold.
            self.refuse_unavailable(publish, reply, &format!("this broker was {why}"));
            return false;
        }
        if !replicas.is_replicated(pubend) {
            if self.hosted.contains(&pubend) {
                // Created before any cell mate linked: it stays on this broker alone.
                return true;
            }
            match replicas.create(pubend) {
                Ok(false) => return true,
                Ok(true) => {}
                Err(why) => {
                    self.refuse_unavailable(publish, reply, &why);
                    return false;
                }
            }
        }
        if let Err(why) = replicas.quorum_reachable(pubend) {
            self.refuse_unavailable(publish, reply, &why);
            return false;
        }
        let leads = replicas.leads(pubend) && self.hosted.contains(&pubend);
        // Behind the publishes held for a leader, even once this broker leads: they go to the
        // engine at the end of the driver's turn (`replica_turn`), and a publish served in the
        // same turn before them (a turn serves every command waiting) would reach the engine
        // ahead of its publisher's earlier ones, which the engine then takes for retries of
        // publishes already logged (their sequence numbers are below the publisher's highest)
        // and never logs (seen in the takeover test, a publisher's window resent to a new
        // leader; `super::super::refusals` keeps the same order across a refusal).
        if !leads || !self.quorum.waiting.is_empty() {
            if let Some(leader) = replicas.led_by_mate(pubend).filter(|_| !leads) {
                let why = format!("this broker does not lead the pubend's replica group ({leader} does)");
                self.refuse_unavailable(publish, reply, &why);
            } else if since.elapsed() >= HOLD {
                self.refuse_unavailable(publish, reply, "this broker does not lead the pubend's replica group");
            } else {
                self.quorum.waiting.push_back((publish.clone(), Arc::clone(reply), since));
            }
            return false;
        }
        let key = (pubend, PublisherId(publish.publisher.0), publish.seq);
        let payload = publish.message.as_bytes().to_vec();
        self.quorum.proposed.entry(key).or_insert(Proposal { tick: None, payload, refused: false });
        true
    }

    /// The engine appends `key` at `tick`: the group logs it at that tick too.
    pub(in crate::guaranteed) fn propose_appended(&mut self, key: Key, tick: Tick) {
        let Some(proposal) = self.quorum.proposed.get_mut(&key) else { return };
        proposal.tick = Some(tick);
        self.quorum.batch.entry(key.0).or_default().push(key);
    }

    /// Proposes this turn's publishes (see [`Quorum::batch`]), each pubend's as one proposal,
    /// at the ticks their proposals hold. One acknowledged meanwhile (a retry the group
    /// answered from its table) is left out.
    fn propose_batch(&mut self) {
        // What the outcomes cause (the engine fed) may append more: proposed too, not left for
        // a later turn.
        while !self.quorum.batch.is_empty() {
            for (pubend, keys) in std::mem::take(&mut self.quorum.batch) {
                let records = keys.into_iter().filter_map(|key| self.record(key)).collect();
                self.propose(pubend, records);
            }
        }
    }

    /// What the group logs for `key`: its proposal, at its tick.
    fn record(&self, key: Key) -> Option<Record> {
        let proposal = self.quorum.proposed.get(&key)?;
        let (_, publisher, seq) = key;
        Some(Record { tick: proposal.tick?.0, publisher: publisher.0, seq, payload: proposal.payload.clone() })
    }

    fn propose(&mut self, pubend: PubendId, records: Vec<Record>) {
        let Some(replicas) = self.replicas.as_mut() else { return };
        if records.is_empty() {
            return;
        }
        let outcomes = replicas.handle(pubend, Input::PublishAllAt(records));
        self.replica_outcomes(outcomes);
    }

    /// Sends the PUBLISH_ACK once both the engine and the group (if any) acknowledged. A retry
    /// the engine answered from its table is asked of the group again: it answers one it applied
    /// from its retry table, and logs one it lacks at the engine's tick.
    pub(in crate::guaranteed) fn answer_when_replicated(&mut self, key: Key, ack: Ack<Waiter>) {
        let replicated = self.replicas.as_ref().is_some_and(|r| r.is_replicated(key.0));
        if !replicated {
            return self.answer(key, ack);
        }
        match self.quorum.engine_acked(key, ack) {
            EngineAck::Answer(ack) => self.answer(key, ack),
            EngineAck::NotTaken(ack) => {
                let why = "the pubend's replica group did not take the publish";
                let refused = refusal(tidings_wire::PublisherId(key.1 .0), key.2, why);
                ack.waiter.reply.push_frame(&Frame::PublishRefused(refused));
                self.metrics.publishes_refused.inc();
            }
            EngineAck::Parked => {}
        }
    }

    /// Acts on what the groups decided for publishers.
    pub(in crate::guaranteed) fn replica_outcomes(&mut self, outcomes: Vec<Outcome>) {
        // The highest tick each pubend's group acknowledged in these outcomes.
        let mut moved: BTreeMap<PubendId, Tick> = BTreeMap::new();
        for outcome in outcomes {
            match outcome {
                Outcome::Acked { pubend, publisher, seq, tick: held } => {
                    let key = (pubend, publisher, seq);
                    let tick = self.quorum.proposed.remove(&key).and_then(|p| p.tick);
                    let known = tick.or_else(|| self.publishes.tick(pubend, (publisher, seq)));
                    if let Some((held, known)) = held.zip(known).filter(|&(h, k)| h != k.0) {
                        // The group and this broker's log disagree on where the record is: a
                        // subscriber would get another record (or none) at one of the ticks.
                        tracing::error!(
                            pubend = pubend.0,
                            publisher = publisher.0,
                            seq,
                            group_tick = held,
                            log_tick = known.0,
                            "the replica group holds a publish at another tick than this broker's log"
                        );
                    } else if held.is_some() && known.is_none() {
                        tracing::warn!(
                            pubend = pubend.0,
                            publisher = publisher.0,
                            seq,
                            group_tick = held,
                            "a publish the replica group holds is acknowledged with no tick known here"
                        );
                    }
                    match self.quorum.parked.remove(&key) {
                        Some(ack) => self.answer(key, ack),
                        None => {
                            self.quorum.acked.insert(key);
                        }
                    }
                    if let Some(tick) = tick {
                        let highest = moved.entry(pubend).or_default();
                        *highest = (*highest).max(tick);
                    }
                }
                Outcome::Refused { pubend, publisher, seq, why } => {
                    // Refused while this broker leads: nothing proposes it again in this
                    // term, so the engine's next acknowledgement of it does (`Quorum`).
                    let leads = self.replicas.as_ref().is_some_and(|r| r.leads(pubend));
                    if leads {
                        tracing::warn!(
                            pubend = pubend.0,
                            publisher = publisher.0,
                            seq,
                            %why,
                            "the replica group refused a publish while this broker leads it"
                        );
                    }
                    if let Some(ack) = self.quorum.group_refused((pubend, publisher, seq), leads) {
                        let refused = refusal(tidings_wire::PublisherId(publisher.0), seq, &why);
                        ack.waiter.reply.push_frame(&Frame::PublishRefused(refused));
                        self.metrics.publishes_refused.inc();
                    }
                }
                Outcome::Leads { pubend } => {
                    let label = crate::guaranteed::metrics::PubendLabel { pubend: format!("{:016x}", pubend.0) };
                    self.metrics.replica_elections_won.get_or_create(&label).inc();
                    self.propose_again(pubend);
                }
                Outcome::Confirmed { pubend, at } => {
                    let up_to = Tick(self.engine.settings().ticks(at));
                    self.feed(tidings_delivery::Input::ConfirmSilence { pubend, up_to });
                }
            }
        }
        // Only now, once for all of them: the engine acknowledges synchronously inside
        // `feed_synced` once the frontier passes a record, and its acknowledgement must find the
        // group's already recorded (before, it found neither the proposal nor the group's ack
        // and refused the publish: "did not take the publish").
        for (pubend, tick) in moved {
            let frontier = self.quorum.frontier.entry(pubend).or_default();
            frontier.group = frontier.group.max(tick);
            // Committed in this broker's term, proposed once its tick was given: no successor
            // was elected before then, so silence up to it is confirmed too (and a record the
            // subscribers get does not wait for the next heartbeat round's confirmation).
            self.feed(tidings_delivery::Input::ConfirmSilence { pubend, up_to: tick });
            self.feed_synced(pubend);
        }
    }

    /// The store synced `pubend`'s log up to `tick`: true if the engine is told later, once the
    /// group committed it too (a replicated pubend); false if it is to be told now.
    pub(in crate::guaranteed) fn store_synced(&mut self, pubend: PubendId, tick: Tick) -> bool {
        if !self.replicas.as_ref().is_some_and(|r| r.is_replicated(pubend)) {
            return false;
        }
        let frontier = self.quorum.frontier.entry(pubend).or_default();
        frontier.store = frontier.store.max(tick);
        self.feed_synced(pubend);
        true
    }

    /// Tells the engine what is both synced here and committed in the group, if that grew.
    fn feed_synced(&mut self, pubend: PubendId) {
        let Some(frontier) = self.quorum.frontier.get_mut(&pubend) else { return };
        let up_to = frontier.store.min(frontier.group);
        if up_to > frontier.fed {
            frontier.fed = up_to;
            let input = tidings_delivery::StoreInput::AppendDone { pubend, synced_up_to: up_to };
            self.feed(tidings_delivery::Input::Store(input));
        }
    }

    /// The engine could not log `key`: the group will not be asked for it.
    pub(in crate::guaranteed) fn forget_proposal(&mut self, key: Key) {
        self.quorum.proposed.remove(&key);
    }

    /// Proposes again, in this broker's new term and in tick order, every publish of `pubend`
    /// its group has not acknowledged (the group answers one it already applied from its retry
    /// table).
    /// This turn's batch of the pubend is among them (each has its tick), so it is dropped:
    /// proposed after the rest, a record of the batch whose tick is below theirs would be logged
    /// by the group at another tick than the engine's.
    fn propose_again(&mut self, pubend: PubendId) {
        self.quorum.batch.remove(&pubend);
        let mut again: Vec<Record> = self
            .quorum
            .proposed
            .range((pubend, PublisherId(0), 0)..)
            .take_while(|(k, _)| k.0 == pubend)
            .filter_map(|(&key, _)| self.record(key))
            .collect();
        again.sort_by_key(|record| record.tick);
        self.propose(pubend, again);
    }

    /// One turn of the groups: the messages received this turn, ticks when due, pubends to open
    /// from their groups, the publishes held for a leader, then the turn's publishes proposed
    /// (see [`Quorum::batch`]).
    pub(in crate::guaranteed) fn replica_turn(&mut self) {
        let Some(replicas) = self.replicas.as_mut() else { return };
        let mut outcomes = replicas.deliver();
        outcomes.extend(replicas.tick());
        self.replica_outcomes(outcomes);
        self.close_deposed();
        self.serve_from_replicas();
        for (publish, reply, since) in std::mem::take(&mut self.quorum.waiting) {
            self.publish_since(publish, reply, since);
        }
        self.propose_batch();
    }

    /// When the groups next need a turn.
    pub(in crate::guaranteed) fn replica_deadline(&self) -> Option<Instant> {
        self.replicas.as_ref().map(super::Replicas::next_tick)
    }

    /// Refuses a publish as unavailable: nothing was logged, and the client may retry it here or
    /// at another broker of its list.
    pub(in crate::guaranteed) fn refuse_unavailable(
        &mut self,
        publish: &GuaranteedPublish,
        reply: &Arc<Outbox>,
        why: &str,
    ) {
        self.refusals.refused(publish, reply);
        reply.push_frame(&Frame::PublishRefused(refusal(publish.publisher, publish.seq, why)));
        self.metrics.publishes_refused.inc();
    }
}

/// A refusal a client can retry: not logged, nothing promised.
pub(super) fn refusal(publisher: tidings_wire::PublisherId, seq: u64, why: &str) -> PublishRefused {
    let text = format!("unavailable: {why}; not logged, retry later");
    PublishRefused { publisher, seq, reason: Notice::new(ReasonCode::StorageUnavailable, text) }
}
