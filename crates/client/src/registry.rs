//! The live subscriptions of a client: what to re-send after a reconnect, where to route
//! deliveries, and which subscription an ERROR refused. Pure: no I/O, no clock; generic over
//! the sink a delivery is routed to so tests need no channels.
//!
//! Sequence numbers order what the client sent on one connection: every SUBSCRIBE and every
//! PING takes the next number from one counter, in the order they enter the write buffer.
//! The broker handles frames in order, so a PONG for PING `n` confirms every SUBSCRIBE sent
//! before `n`. The client follows every SUBSCRIBE with its own PING, so by the time an ERROR
//! is read, every SUBSCRIBE the broker handled before the refused frame has been confirmed:
//! an ERROR about a subscription concerns exactly the earliest unconfirmed one.

use std::collections::BTreeMap;

use tidings_wire::{ReasonCode, SubId, Subscribe};

/// One live subscription.
#[derive(Debug)]
struct Entry<S> {
    frame: Subscribe,
    sink: S,
    /// Sequence number of the latest SUBSCRIBE sent for it; `None` before the first.
    sent: Option<u64>,
    /// A PONG sent after `sent` came back.
    confirmed: bool,
}

/// Live subscriptions by id. Invariant: `confirmed` implies `sent.is_some()`.
#[derive(Debug)]
pub(crate) struct Registry<S> {
    entries: BTreeMap<SubId, Entry<S>>,
}

impl<S> Default for Registry<S> {
    fn default() -> Registry<S> {
        Registry { entries: BTreeMap::new() }
    }
}

/// Whether an ERROR with this reason refuses a SUBSCRIBE (rather than a PUBLISH, say).
pub(crate) fn refuses_subscription(reason: Option<ReasonCode>) -> bool {
    matches!(
        reason,
        Some(
            ReasonCode::InvalidPattern
                | ReasonCode::InvalidSelector
                | ReasonCode::DuplicateSubscriptionId
                | ReasonCode::UnsupportedDeliveryMode
                | ReasonCode::LimitExceeded
        )
    )
}

/// Whether an ERROR with this reason may refuse a guaranteed queue group member after its PONG:
/// a group kept at another broker is joined there, and that broker's refusal comes later
/// (docs/protocol.md, "Guaranteed queue groups").
pub(crate) fn refuses_late(reason: Option<ReasonCode>) -> bool {
    refuses_subscription(reason)
        || matches!(
            reason,
            Some(ReasonCode::DurableMismatch | ReasonCode::DurableInUse | ReasonCode::InvalidQueueGroup)
        )
}

impl<S> Registry<S> {
    /// Adds a subscription that has not been sent yet. Replaces one with the same id.
    pub(crate) fn insert(&mut self, frame: Subscribe, sink: S) {
        self.entries.insert(frame.id, Entry { frame, sink, sent: None, confirmed: false });
    }

    pub(crate) fn contains(&self, id: SubId) -> bool {
        self.entries.contains_key(&id)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Where deliveries for `id` go.
    pub(crate) fn sink(&self, id: SubId) -> Option<&S> {
        self.entries.get(&id).map(|e| &e.sink)
    }

    /// Where deliveries for `id` go, to update it.
    pub(crate) fn sink_mut(&mut self, id: SubId) -> Option<&mut S> {
        self.entries.get_mut(&id).map(|e| &mut e.sink)
    }

    pub(crate) fn remove(&mut self, id: SubId) -> Option<S> {
        self.entries.remove(&id).map(|e| e.sink)
    }

    /// Records that the SUBSCRIBE for `id` was sent with sequence number `seq`.
    pub(crate) fn mark_sent(&mut self, id: SubId, seq: u64) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.sent = Some(seq);
            e.confirmed = false;
        }
    }

    /// Re-sends every subscription, in id order: `send` writes the frame and returns the
    /// sequence number it used.
    pub(crate) fn resend_all(&mut self, mut send: impl FnMut(&Subscribe) -> u64) {
        for e in self.entries.values_mut() {
            e.sent = Some(send(&e.frame));
            e.confirmed = false;
        }
    }

    /// A PONG for the PING with sequence number `seq` came back.
    pub(crate) fn confirm_before(&mut self, seq: u64) {
        for e in self.entries.values_mut() {
            if e.sent.is_some_and(|sent| sent < seq) {
                e.confirmed = true;
            }
        }
    }

    /// An ERROR arrived: if its reason refuses a subscription, removes and returns the
    /// earliest sent, unconfirmed one.
    pub(crate) fn take_refused(&mut self, reason: Option<ReasonCode>) -> Option<(SubId, S)> {
        if !refuses_subscription(reason) {
            return None;
        }
        let id = self
            .entries
            .iter()
            .filter(|(_, e)| !e.confirmed)
            .filter_map(|(id, e)| e.sent.map(|seq| (seq, *id)))
            .min()
            .map(|(_, id)| id)?;
        self.remove(id).map(|sink| (id, sink))
    }

    /// Removes the earliest sent subscription that its PONG confirmed and `waiting` says still
    /// waits for more (a guaranteed member's SUBSCRIBED), if an ERROR with `reason` can refuse
    /// one that late ([`refuses_late`]): the refusal is its, and its caller is told at once
    /// instead of when its wait ends.
    pub(crate) fn take_waiting(
        &mut self,
        reason: Option<ReasonCode>,
        waiting: impl Fn(&S) -> bool,
    ) -> Option<(SubId, S)> {
        if !refuses_late(reason) {
            return None;
        }
        let id = self
            .entries
            .iter()
            .filter(|(_, e)| e.confirmed && waiting(&e.sink))
            .filter_map(|(id, e)| e.sent.map(|seq| (seq, *id)))
            .min()
            .map(|(_, id)| id)?;
        self.remove(id).map(|sink| (id, sink))
    }

    /// The SUBSCRIBE frames of every subscription, in id order.
    pub(crate) fn frames(&self) -> impl Iterator<Item = &Subscribe> {
        self.entries.values().map(|e| &e.frame)
    }

    /// Where each subscription's deliveries go, in id order.
    pub(crate) fn sinks(&self) -> impl Iterator<Item = &S> {
        self.entries.values().map(|e| &e.sink)
    }

    /// Removes every subscription.
    pub(crate) fn drain(&mut self) -> Vec<S> {
        std::mem::take(&mut self.entries).into_values().map(|e| e.sink).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidings_wire::DeliveryMode;

    fn sub(id: u32) -> Subscribe {
        Subscribe {
            queue_key: None,
            id: SubId(id),
            mode: DeliveryMode::BestEffort,
            pattern: format!("p{id}"),
            selector: None,
            durable: None,
            group: None,
        }
    }

    fn registry(ids: &[u32]) -> Registry<u32> {
        let mut r = Registry::default();
        for &id in ids {
            r.insert(sub(id), id * 10);
        }
        r
    }

    /// A registry of subscriptions each sent with its sequence number: `(id, seq)`.
    fn sent(sent: &[(u32, u64)]) -> Registry<u32> {
        let mut r = registry(&sent.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        for &(id, seq) in sent {
            r.mark_sent(SubId(id), seq);
        }
        r
    }

    #[test]
    fn error_about_a_subscription_removes_the_earliest_unconfirmed_one() {
        let mut r = sent(&[(3, 5), (1, 7), (2, 9)]);
        assert_eq!(r.take_refused(Some(ReasonCode::InvalidPattern)), Some((SubId(3), 30)));
        assert!(r.contains(SubId(1)) && r.contains(SubId(2)));
    }

    #[test]
    fn pong_confirms_only_what_was_sent_before_its_ping() {
        let mut r = registry(&[1, 2]);
        r.mark_sent(SubId(1), 1);
        r.mark_sent(SubId(2), 3);
        r.confirm_before(2);
        assert_eq!(r.take_refused(Some(ReasonCode::InvalidSelector)), Some((SubId(2), 20)));
        assert_eq!(r.take_refused(Some(ReasonCode::InvalidSelector)), None);
        assert!(r.contains(SubId(1)));
    }

    #[test]
    fn a_late_refusal_removes_the_earliest_confirmed_subscription_still_waiting() {
        let mut r = sent(&[(1, 1), (2, 3), (3, 5)]);
        r.confirm_before(4);
        let waiting = |sink: &u32| *sink != 10; // 1 has its SUBSCRIBED; 3 is not confirmed
        assert_eq!(r.take_waiting(Some(ReasonCode::InvalidTopic), waiting), None, "not a subscription's refusal");
        assert_eq!(r.take_waiting(Some(ReasonCode::DurableMismatch), waiting), Some((SubId(2), 20)));
        assert_eq!(r.take_waiting(Some(ReasonCode::DurableMismatch), waiting), None);
        assert!(r.contains(SubId(1)) && r.contains(SubId(3)));
    }

    #[test]
    fn error_about_something_else_removes_nothing() {
        let mut r = registry(&[1]);
        r.mark_sent(SubId(1), 1);
        assert_eq!(r.take_refused(Some(ReasonCode::InvalidTopic)), None);
        assert_eq!(r.take_refused(None), None);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn unsent_subscriptions_are_never_blamed() {
        let mut r = registry(&[1]);
        assert_eq!(r.take_refused(Some(ReasonCode::InvalidPattern)), None);
    }

    #[test]
    fn resend_makes_every_subscription_unconfirmed_again() {
        let mut r = registry(&[2, 1]);
        r.mark_sent(SubId(1), 1);
        r.mark_sent(SubId(2), 2);
        r.confirm_before(3);
        let mut sent = Vec::new();
        let mut seq = 10;
        r.resend_all(|f| {
            sent.push(f.id.0);
            seq += 1;
            seq
        });
        assert_eq!(sent, [1, 2], "resent in id order");
        assert_eq!(r.take_refused(Some(ReasonCode::LimitExceeded)), Some((SubId(1), 10)));
    }

    #[test]
    fn drain_empties_the_registry() {
        let mut r = registry(&[1, 2]);
        assert_eq!(r.frames().map(|f| f.id.0).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(r.sink(SubId(2)), Some(&20));
        assert_eq!(r.drain(), [10, 20]);
        assert_eq!(r.len(), 0);
    }
}
