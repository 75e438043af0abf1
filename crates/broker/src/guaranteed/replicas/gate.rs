//! The driver's side of replication: the seam between the delivery engine and a pubend's
//! replica group.
//!
//! The seam is the publisher's acknowledgement, and nothing else: a publish to a replicated
//! pubend is proposed to its group *and* fed to the engine as before, so the engine logs it in
//! the host's pubend log and delivers it exactly as an unreplicated one (its ticks, its stream,
//! its nacks and releases are unchanged). What replication adds is the promise: the PUBLISH_ACK
//! waits for both the engine's acknowledgement (the host's log synced it) and the group's
//! (a quorum synced it, applied, same term), whichever comes last. That is the smallest change
//! that makes "acknowledged" mean "on a quorum's disks" without a second delivery path; the
//! price is that a subscriber may receive a publish before it is acknowledged (as a subscriber
//! of an unreplicated pubend already may before the sync), and that the host keeps its own copy
//! beside its journal. Serving the stream from the replicated state (a successor after a
//! takeover, a host whose disk was wiped) is the next floor (docs/replication.md).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidings_delivery::{PubendId, PublisherId};
use tidings_node::publishes::Ack;
use tidings_replica::Input;
use tidings_wire::{Frame, GuaranteedPublish, Notice, PublishRefused, ReasonCode};

use super::Outcome;
use crate::guaranteed::driver::{Driver, Waiter};
use crate::outbox::Outbox;

type Key = (PubendId, PublisherId, u64);

/// How long a publish waits for its group to have a leader here (an election, the lead coming
/// back to the host) before it is refused as unavailable.
const HOLD: Duration = Duration::from_secs(5);

/// Acknowledgements waiting for the other half of the rule.
#[derive(Default)]
pub(crate) struct Quorum {
    /// The engine acknowledged; the group has not yet.
    parked: BTreeMap<Key, Ack<Waiter>>,
    /// The group acknowledged; the engine has not yet.
    acked: BTreeSet<Key>,
    /// Proposed to the group and not yet acknowledged by it, with the payload: proposed again
    /// when this broker leads in a new term, since the core forgets what an earlier term
    /// proposed and a publisher that waits (rather than retries) would wait forever.
    proposed: BTreeMap<Key, Vec<u8>>,
    /// Publishes waiting for this broker to lead their group.
    waiting: VecDeque<(GuaranteedPublish, Arc<Outbox>, Instant)>,
}

impl Driver {
    /// Decides whether a GPUBLISH to `pubend` goes on to the engine: true if the pubend is not
    /// replicated, or if this broker leads its group (the publish is then proposed to it too);
    /// otherwise it is held for a leader or refused as unavailable.
    pub(in crate::guaranteed) fn replica_gate(
        &mut self,
        publish: &GuaranteedPublish,
        reply: &Arc<Outbox>,
        pubend: PubendId,
        since: Instant,
    ) -> bool {
        let Some(replicas) = self.replicas.as_mut() else { return true };
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
        if !replicas.leads(pubend) {
            if since.elapsed() >= HOLD {
                self.refuse_unavailable(publish, reply, "this broker does not lead the pubend's replica group");
            } else {
                self.quorum.waiting.push_back((publish.clone(), Arc::clone(reply), since));
            }
            return false;
        }
        let key = (pubend, PublisherId(publish.publisher.0), publish.seq);
        let payload = publish.message.as_bytes().to_vec();
        self.quorum.proposed.insert(key, payload.clone());
        let outcomes = replicas.handle(pubend, Input::Publish { publisher: key.1 .0, seq: key.2, payload });
        self.replica_outcomes(outcomes);
        true
    }

    /// Sends the PUBLISH_ACK once both the engine and the group (if any) acknowledged.
    pub(in crate::guaranteed) fn answer_when_replicated(&mut self, key: Key, ack: Ack<Waiter>) {
        let replicated = self.replicas.as_ref().is_some_and(|r| r.is_replicated(key.0));
        if replicated && !self.quorum.acked.remove(&key) {
            if self.quorum.proposed.contains_key(&key) {
                self.quorum.parked.insert(key, ack);
            } else {
                // The group refused it (it lost the lead meanwhile): the publisher may retry.
                let why = "the pubend's replica group did not take the publish";
                let refused = refusal(tidings_wire::PublisherId(key.1 .0), key.2, why);
                ack.waiter.reply.push_frame(&Frame::PublishRefused(refused));
                self.metrics.publishes_refused.inc();
            }
            return;
        }
        self.answer(key, ack);
    }

    /// Acts on what the groups decided for publishers.
    pub(in crate::guaranteed) fn replica_outcomes(&mut self, outcomes: Vec<Outcome>) {
        for outcome in outcomes {
            match outcome {
                Outcome::Acked { pubend, publisher, seq } => {
                    let key = (pubend, publisher, seq);
                    self.quorum.proposed.remove(&key);
                    match self.quorum.parked.remove(&key) {
                        Some(ack) => self.answer(key, ack),
                        None => {
                            self.quorum.acked.insert(key);
                        }
                    }
                }
                Outcome::Refused { pubend, publisher, seq, why } => {
                    self.quorum.proposed.remove(&(pubend, publisher, seq));
                    if let Some(ack) = self.quorum.parked.remove(&(pubend, publisher, seq)) {
                        let refused = refusal(tidings_wire::PublisherId(publisher.0), seq, &why);
                        ack.waiter.reply.push_frame(&Frame::PublishRefused(refused));
                        self.metrics.publishes_refused.inc();
                    }
                }
                Outcome::Leads { pubend } => self.propose_again(pubend),
            }
        }
    }

    /// Proposes again, in this broker's new term, every publish of `pubend` its group has not
    /// acknowledged (the group answers one it already applied from its retry table).
    fn propose_again(&mut self, pubend: PubendId) {
        let again: Vec<(Key, Vec<u8>)> = self
            .quorum
            .proposed
            .range((pubend, PublisherId(0), 0)..)
            .take_while(|(k, _)| k.0 == pubend)
            .map(|(k, p)| (*k, p.clone()))
            .collect();
        let Some(replicas) = self.replicas.as_mut() else { return };
        let mut outcomes = Vec::new();
        for ((_, publisher, seq), payload) in again {
            outcomes.extend(replicas.handle(pubend, Input::Publish { publisher: publisher.0, seq, payload }));
        }
        self.replica_outcomes(outcomes);
    }

    /// One turn of the groups: ticks when due, then the publishes held for a leader.
    pub(in crate::guaranteed) fn replica_turn(&mut self) {
        let Some(replicas) = self.replicas.as_mut() else { return };
        let outcomes = replicas.tick();
        self.replica_outcomes(outcomes);
        for (publish, reply, since) in std::mem::take(&mut self.quorum.waiting) {
            self.publish_since(publish, reply, since);
        }
    }

    /// When the groups next need a turn.
    pub(in crate::guaranteed) fn replica_deadline(&self) -> Option<Instant> {
        self.replicas.as_ref().map(super::Replicas::next_tick)
    }

    fn refuse_unavailable(&mut self, publish: &GuaranteedPublish, reply: &Outbox, why: &str) {
        reply.push_frame(&Frame::PublishRefused(refusal(publish.publisher, publish.seq, why)));
        self.metrics.publishes_refused.inc();
    }
}

/// A refusal a client can retry: not logged, nothing promised.
fn refusal(publisher: tidings_wire::PublisherId, seq: u64, why: &str) -> PublishRefused {
    let text = format!("unavailable: {why}; not logged, retry later");
    PublishRefused { publisher, seq, reason: Notice::new(ReasonCode::StorageUnavailable, text) }
}
