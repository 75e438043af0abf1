//! The driver's side of replication: the seam between the delivery engine and a pubend's
//! replica group. The rules (a PUBLISH_ACK waits for the host's sync and the group's commit;
//! the engine hears a record synced only once both hold it) are the pure
//! [`tidings_node::gate::Gate`], which the simulator runs too; this file admits publishes to a
//! replicated pubend (leader, quorum, hold for an election) and carries out the gate's steps.
//!
//! The seam is the publisher's acknowledgement and the tick. A publish to a replicated pubend
//! is fed to the engine as before, and proposed to its group when the engine appends it, at the
//! engine's tick: the engine logs it in the host's pubend log and delivers it exactly as an
//! unreplicated one (its ticks, its stream, its nacks and releases are unchanged), and the group
//! holds it at the tick subscribers know it by, so a log rebuilt from the group (`serve`)
//! serves it there. That is the smallest change that makes "acknowledged" mean "on a quorum's
//! disks" without a second delivery path; the price is that the host keeps its own copy beside
//! its journal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tidings_delivery::{PubendId, PublisherId, Tick};
use tidings_node::gate::{EngineAck, Step};
use tidings_node::publishes::{Ack, PublishKey as Key};
use tidings_replica::Input;
use tidings_wire::{Frame, GuaranteedPublish, Notice, PublishRefused, ReasonCode};

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
        if !leads || !self.leaderless.is_empty() {
            if let Some(leader) = replicas.led_by_mate(pubend).filter(|_| !leads) {
                let why = format!("this broker does not lead the pubend's replica group ({leader} does)");
                self.refuse_unavailable(publish, reply, &why);
            } else if since.elapsed() >= HOLD {
                self.refuse_unavailable(publish, reply, "this broker does not lead the pubend's replica group");
            } else {
                self.leaderless.push_back((publish.clone(), Arc::clone(reply), since));
            }
            return false;
        }
        let key = (pubend, PublisherId(publish.publisher.0), publish.seq);
        self.gate.take(key, publish.message.as_bytes().to_vec());
        true
    }

    /// The engine appends `key` at `tick`: the group logs it at that tick too.
    pub(in crate::guaranteed) fn propose_appended(&mut self, key: Key, tick: Tick) {
        self.gate.appended(key, tick);
    }

    /// Proposes this turn's publishes, each pubend's as one proposal. What the outcomes cause
    /// (the engine fed) may append more: proposed too, not left for a later turn.
    fn propose_batch(&mut self) {
        while self.gate.has_batch() {
            let steps = self.gate.take_batch();
            self.gate_steps(steps);
        }
    }

    /// Carries out the gate's steps, in order.
    fn gate_steps(&mut self, steps: Vec<Step<Waiter>>) {
        for step in steps {
            match step {
                Step::Answer(key, ack) => self.answer(key, ack),
                Step::Refuse((_, publisher, seq), waiter, why) => {
                    self.refusals.refused(publisher, seq, &waiter.reply);
                    let refused = refusal(tidings_wire::PublisherId(publisher.0), seq, &why);
                    waiter.reply.push_frame(&Frame::PublishRefused(refused));
                    self.metrics.publishes_refused.inc();
                }
                Step::Propose(pubend, records) => {
                    let Some(replicas) = self.replicas.as_mut() else { continue };
                    let outcomes = replicas.handle(pubend, Input::PublishAllAt(records));
                    self.replica_outcomes(outcomes);
                }
                Step::Feed(input) => self.feed(input),
                Step::Won(pubend) => {
                    let label = crate::guaranteed::metrics::PubendLabel { pubend: format!("{:016x}", pubend.0) };
                    self.metrics.replica_elections_won.get_or_create(&label).inc();
                }
                Step::Disagree { key: (pubend, publisher, seq), group, log } => tracing::error!(
                    pubend = pubend.0,
                    publisher = publisher.0,
                    seq,
                    group_tick = group,
                    log_tick = log,
                    "the replica group holds a publish at another tick than this broker's log"
                ),
                Step::Unknown { key: (pubend, publisher, seq), group } => tracing::warn!(
                    pubend = pubend.0,
                    publisher = publisher.0,
                    seq,
                    group_tick = group,
                    "a publish the replica group holds is acknowledged with no tick known here"
                ),
                Step::RefusedLeading { key: (pubend, publisher, seq), why } => tracing::warn!(
                    pubend = pubend.0,
                    publisher = publisher.0,
                    seq,
                    %why,
                    "the replica group refused a publish while this broker leads it"
                ),
            }
        }
    }

    /// Sends the PUBLISH_ACK once both the engine and the group (if any) acknowledged. A retry
    /// the engine answered from its table is asked of the group again: it answers one it applied
    /// from its retry table, and logs one it lacks at the engine's tick.
    pub(in crate::guaranteed) fn answer_when_replicated(&mut self, key: Key, ack: Ack<Waiter>) {
        let replicated = self.replicas.as_ref().is_some_and(|r| r.is_replicated(key.0));
        if !replicated {
            return self.answer(key, ack);
        }
        match self.gate.engine_acked(key, ack) {
            EngineAck::Answer(ack) => self.answer(key, ack),
            EngineAck::NotTaken(ack) => {
                let why = "the pubend's replica group did not take the publish";
                self.refusals.refused(key.1, key.2, &ack.waiter.reply);
                let refused = refusal(tidings_wire::PublisherId(key.1 .0), key.2, why);
                ack.waiter.reply.push_frame(&Frame::PublishRefused(refused));
                self.metrics.publishes_refused.inc();
            }
            EngineAck::Parked => {}
        }
    }

    /// Acts on what the groups decided for publishers (see [`tidings_node::gate::Gate::outcomes`]).
    pub(in crate::guaranteed) fn replica_outcomes(&mut self, outcomes: Vec<Outcome>) {
        if outcomes.is_empty() {
            return;
        }
        let steps = self.gate.outcomes(outcomes, &self.publishes);
        self.gate_steps(steps);
    }

    /// The store synced `pubend`'s log up to `tick`: true if the engine is told later, once the
    /// group committed it too (a replicated pubend); false if it is to be told now.
    pub(in crate::guaranteed) fn store_synced(&mut self, pubend: PubendId, tick: Tick) -> bool {
        if !self.replicas.as_ref().is_some_and(|r| r.is_replicated(pubend)) {
            return false;
        }
        let steps = self.gate.store_synced(pubend, tick).into_iter().collect();
        self.gate_steps(steps);
        true
    }

    /// The engine could not log `key`: the group will not be asked for it.
    pub(in crate::guaranteed) fn forget_proposal(&mut self, key: Key) {
        self.gate.forget(key);
    }

    /// One turn of the groups: the messages received this turn, ticks when due, pubends to open
    /// from their groups, the publishes held for a leader, then the turn's publishes proposed
    /// (see `tidings_node::gate::Gate::take_batch`).
    pub(in crate::guaranteed) fn replica_turn(&mut self) {
        let Some(replicas) = self.replicas.as_mut() else { return };
        let mut outcomes = replicas.deliver();
        outcomes.extend(replicas.tick());
        self.replica_outcomes(outcomes);
        self.close_deposed();
        self.serve_from_replicas();
        for (publish, reply, since) in std::mem::take(&mut self.leaderless) {
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
        self.refusals.refused(PublisherId(publish.publisher.0), publish.seq, reply);
        reply.push_frame(&Frame::PublishRefused(refusal(publish.publisher, publish.seq, why)));
        self.metrics.publishes_refused.inc();
    }
}

/// A refusal a client can retry: not logged, nothing promised.
pub(super) fn refusal(publisher: tidings_wire::PublisherId, seq: u64, why: &str) -> PublishRefused {
    let text = format!("unavailable: {why}; not logged, retry later");
    PublishRefused { publisher, seq, reason: Notice::new(ReasonCode::StorageUnavailable, text) }
}
