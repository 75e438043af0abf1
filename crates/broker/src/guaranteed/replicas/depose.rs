//! A host deposed without dying (docs/replication.md, "Takeover"): a broker stalled (SIGSTOP)
//! or cut off long enough that its pubend's replica group elected a mate comes back with the
//! pubend still open in its engine. Its group already fences it (no acknowledgement after its
//! term), but its log would still answer nacks, tell silence and advertise the pubend beside
//! the successor, which serves the same pubend and logs new records at ticks this log calls
//! silent. So once this broker no longer leads a pubend's group, the engine closes the pubend's
//! log (`Input::CloseLog`): its pending publishes and those waiting for the group are refused
//! `unavailable` (retryable: a client with a server list moves on to the new leader), routing
//! stops advertising it here, and its stream follows the new home as any other broker's. The
//! log stays on disk: if the group elects this broker again, the pubend reopens from it brought
//! up to the group's state, as a log found at start does (`serve`), records the group never
//! committed dropped.

use tidings_delivery::{Input, PubendId};
use tidings_wire::Frame;
use tracing::warn;

use super::gate::refusal;
use crate::guaranteed::driver::Driver;

impl Driver {
    /// Closes the log of every pubend open here whose replica group this broker no longer leads.
    pub(in crate::guaranteed) fn close_deposed(&mut self) {
        let Some(replicas) = self.replicas.as_ref() else { return };
        let deposed: Vec<PubendId> = self
            .hosted
            .iter()
            .filter(|&&pubend| replicas.is_replicated(pubend) && !replicas.leads(pubend))
            .copied()
            .collect();
        for pubend in deposed {
            self.close_log(pubend);
        }
    }

    fn close_log(&mut self, pubend: PubendId) {
        let Some(holds) = self.engine.log_holds(pubend) else { return };
        warn!(pubend = pubend.0, "this broker no longer leads the pubend's replica group: its log closes here");
        self.hosted.remove(&pubend);
        self.metrics.pubends.set(self.hosted.len() as i64);
        // The engine refuses its pending publishes (`refused`, which forgets their proposals).
        self.feed(Input::CloseLog { pubend });
        self.refuse_deposed(pubend);
        self.found.insert(pubend, holds);
        self.unhost(pubend);
    }

    /// Refuses every publisher of `pubend` still waiting for the group's half or the engine's:
    /// neither comes from this broker any more.
    fn refuse_deposed(&mut self, pubend: PubendId) {
        let why = "this broker no longer leads the pubend's replica group";
        let (parked, acked) = self.gate.forget_pubend(pubend);
        let waiters = parked
            .into_iter()
            .map(|(key, ack)| (key, ack.waiter))
            .chain(acked.into_iter().filter_map(|key| self.publishes.unwait(key).map(|waiter| (key, waiter))));
        let waiters: Vec<_> = waiters.collect();
        for ((_, publisher, seq), waiter) in waiters {
            self.refusals.refused(publisher, seq, &waiter.reply);
            let refused = refusal(tidings_wire::PublisherId(publisher.0), seq, why);
            waiter.reply.push_frame(&Frame::PublishRefused(refused));
            self.metrics.publishes_refused.inc();
        }
    }
}
