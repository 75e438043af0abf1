//! What an MQTT connection's reader and its delivery task both need to know: each native
//! subscription's MQTT filter and granted QoS, the client's QoS 1/2 publishes waiting for the
//! pubend's sync, and the QoS 1/2 messages sent to the client and not yet acknowledged.
//!
//! Outbound, a guaranteed delivery is acknowledged upstream (DELIVERY_ACK) only once the client
//! has it: PUBACK for QoS 1, PUBCOMP for QoS 2, at once for QoS 0. DELIVERY_ACK is cumulative
//! per subscription and pubend, while MQTT acknowledgements may come out of order (a QoS 2
//! exchange takes longer than a QoS 1 one sent after it), so each tick waits until every tick
//! before it is done. Fewer than `window` messages are in flight at once (the client's
//! Receive Maximum, and the server's own bound for 3.1.1 clients).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use tidings_wire::mqtt::topic::TidingsFilter;
use tidings_wire::mqtt::{PacketId, QoS};
use tidings_wire::{DeliveryAck, PubendId, SubId, Tick};
use tokio::sync::Notify;

use super::inflight::{Change, InflightStore, Loaded};

/// The in-flight bound for clients that state none (3.1.1, or a 5.0 client without Receive
/// Maximum): enough to keep a link busy, small enough that a stalled client holds back its
/// guaranteed subscriptions (their messages stay in the log) rather than the broker's memory.
pub(super) const SERVER_WINDOW: usize = 100;

/// The property a QoS 2 publish carries through tidings, so a QoS 2 subscriber receives it at
/// QoS 2 (a guaranteed message without it is QoS 1: every guaranteed publish is at least once).
pub(super) const QOS_PROPERTY: &str = tidings_wire::mqtt::carry::QOS;

/// One native subscription of an MQTT session.
#[derive(Debug, Clone)]
pub(super) struct Sub {
    /// The MQTT filter's mapped form (whether `$` topics are left out).
    pub(super) filter: TidingsFilter,
    /// The QoS granted: deliveries go at the lower of it and the message's.
    pub(super) qos: QoS,
    /// The 5.0 options that shape each delivery (identifier, no-local, retain flags).
    pub(super) options: Shape,
    /// A member of a guaranteed queue group (`$share` at QoS 1/2): its deliveries are whichever
    /// ticks the group leased it, so each is acknowledged by itself, not as a prefix.
    pub(super) member: bool,
    /// Of a `$share` filter: its copy of a message is its own (MQTT 5.0 §4.8.2), never merged
    /// with an overlapping subscription's.
    pub(super) shared: bool,
    /// The durable subscription's name (a persistent session's QoS 1/2 filter): what a delivery
    /// in flight when the connection ends is known by on the next one.
    pub(super) durable: Option<Arc<str>>,
}

/// What a 5.0 subscription's options ask of each message delivered through it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Shape {
    /// The subscription identifier to send with each message.
    pub(super) identifier: Option<u32>,
    /// Leave out the messages this session published itself.
    pub(super) no_local: bool,
    /// Keep the RETAIN flag of live messages as published.
    pub(super) retain_as_published: bool,
    /// Deliver the kept retained values the native subscription brings (retain handling 0, or 1
    /// for a new subscription; never on a session's resume).
    pub(super) retained: bool,
}

/// What the client must send next for a message in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// PUBACK (QoS 1) or PUBREC (QoS 2).
    First(QoS),
    /// PUBCOMP, after our PUBREL.
    Complete,
}

#[derive(Debug)]
struct Inflight {
    /// The subscription a retained value was sent for (nothing upstream waits for it).
    retained: Option<SubId>,
    /// The guaranteed deliveries it acknowledges when done: one per subscription whose copy it
    /// is (overlapping subscriptions of a session share one PUBLISH).
    from: Vec<(SubId, PubendId, Tick)>,
    stage: Stage,
}

/// A client's QoS 1/2 publish in the broker's hands: logged (`recorded`, QoS 2 only, until
/// PUBREL) or waiting for the log's sync.
#[derive(Debug, Clone, Copy)]
pub(super) struct Incoming {
    /// Its publisher sequence number: a DUP retry is the same publish.
    pub(super) seq: u64,
    /// Its QoS.
    pub(super) qos: QoS,
    /// PUBREC was sent: a retry is answered with PUBREC again, without publishing.
    pub(super) recorded: bool,
}

/// The client's publishes by packet identifier, kept with the session across connections so a
/// retry after a reconnect is recognised (MQTT-4.3.3: QoS 2 dedup holds until PUBREL).
#[derive(Debug, Default)]
pub(super) struct Inbound {
    /// By packet identifier.
    pub(super) by_packet: BTreeMap<u16, Incoming>,
    /// The last sequence number given.
    pub(super) last_seq: u64,
    /// The QoS 1/2 deliveries of durable subscriptions in flight when a connection ended, by
    /// durable name, pubend and tick: their packet identifier, and whether the client's PUBREC
    /// came (our PUBREL was due). The next connection sends each again with the same identifier,
    /// a PUBLISH with DUP 1 or the PUBREL (MQTT-4.4.0-1), so a QoS 2 delivery stays exactly once.
    /// Boxed, and none until a connection ends with something in flight: an idle connection
    /// holds no empty table.
    pub(super) carried: Option<Box<Carried>>,
    /// By durable name and pubend, the highest tick the client was done with before a broker
    /// restart ([`super::inflight`]): a tick at or below it that the durable subscription sends
    /// again (its checkpoint is written later than the client's acknowledgement) is
    /// acknowledged, not delivered again. None unless the table had some.
    #[allow(clippy::box_collection, reason = "a pointer inline: most sessions have none")]
    pub(super) acked: Option<Box<Marks>>,
}

impl Inbound {
    /// Takes in what the durable table held for the session: its deliveries in flight (those
    /// already known in memory stay as they are) and how far its client was done.
    pub(super) fn restore(&mut self, loaded: Loaded) {
        for ((name, pubend, tick), kept) in loaded.inflight {
            let carried = self.carried.get_or_insert_with(Box::default);
            carried.entry((Arc::from(name), PubendId(pubend), Tick(tick))).or_insert(kept);
        }
        self.acked = None;
        for ((name, pubend), tick) in loaded.acked {
            self.acked.get_or_insert_with(Box::default).insert((Arc::from(name), PubendId(pubend)), Tick(tick));
        }
    }

    /// Forgets what is kept of durable subscription `name` (it was deleted).
    pub(super) fn forget_durable(&mut self, name: &str) {
        if let Some(carried) = self.carried.as_deref_mut() {
            carried.retain(|(of, ..), _| &**of != name);
            if carried.is_empty() {
                self.carried = None;
            }
        }
        if let Some(acked) = self.acked.as_deref_mut() {
            acked.retain(|(of, _), _| &**of != name);
        }
    }

    /// A sequence number above every earlier one, across restarts too (the log refuses a
    /// publisher's sequence number at or below one it logged): the clock, or one more.
    pub(super) fn next_seq(&mut self) -> u64 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
        self.last_seq = self.last_seq.saturating_add(1).max(u64::try_from(now).unwrap_or(u64::MAX));
        self.last_seq
    }
}

/// [`Inbound::acked`]: by durable name and pubend, the highest tick done.
pub(super) type Marks = HashMap<(Arc<str>, PubendId), Tick>;

/// [`Inbound::carried`]: by durable name, pubend and tick, the packet identifier and whether
/// PUBREL was due.
pub(super) type Carried = HashMap<(Arc<str>, PubendId, Tick), (u16, bool)>;

/// The shared state, under one lock. Its tables are B-trees: an empty one is 24 bytes where a
/// `HashMap` is 48, and every idle connection holds one of each (issue 42); they stay small.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Each native subscription of the session.
    pub(super) subs: BTreeMap<SubId, Sub>,
    /// The client's publishes.
    pub(super) inbound: Inbound,
    /// Sequence number to packet identifier, for the publishes waiting for PUBLISH_ACK.
    pub(super) waiting: BTreeMap<u64, u16>,
    /// SUBACKs waiting for SUBSCRIBED of these native subscriptions (a guaranteed subscription
    /// is in force only then; the client may publish as soon as it has SUBACK).
    pub(super) subacks: Vec<(Vec<SubId>, tidings_wire::mqtt::Packet)>,
    /// SUBSCRIBED that came before their SUBACK was put in `subacks`.
    pub(super) confirmed: BTreeSet<SubId>,
    inflight: BTreeMap<u16, Inflight>,
    next_packet: u16,
    pending: BTreeMap<(SubId, PubendId), BTreeMap<Tick, bool>>,
    /// The most messages in flight.
    pub(super) window: usize,
    /// Guaranteed deliveries done with at QoS 0, for the reader to acknowledge upstream
    /// (through its native session, which only the reader holds).
    pub(super) acks: Vec<DeliveryAck>,
    /// Changes to the durable table of deliveries in flight not written yet: written (synced)
    /// before the next PUBLISH or PUBREL that needs them leaves ([`Link::persist`]).
    pub(super) journal: Vec<Change>,
    /// A newer connection took the session over: the reader closes ([`Link::kick`]).
    pub(super) kicked: bool,
}

/// [`State`] and the signal that room opened in the window.
#[derive(Debug, Default)]
pub(super) struct Link {
    /// The state.
    pub(super) state: Mutex<State>,
    /// Notified when a message in flight completes.
    pub(super) room: Notify,
    /// Notified when `state.acks` has acknowledgements for the reader.
    pub(super) acks: Notify,
    /// Held while the journal is written: the reader and the delivery task each wait for a
    /// write the other started before sending what it covers.
    persisting: tokio::sync::Mutex<()>,
}

impl Link {
    /// Hands `ack` to the reader, which acknowledges it upstream. A vector under the lock the
    /// state already has, not a channel: a channel allocates its first block of slots at once,
    /// a kilobyte per idle connection.
    pub(super) fn acked(&self, ack: DeliveryAck) {
        self.state.lock().acks.push(ack);
        self.acks.notify_one();
    }

    /// Writes the journal (and waits for a write of it already started) before a packet it
    /// covers goes to the client: nothing reaches the client that a restart would forget.
    pub(super) async fn persist(&self, store: &InflightStore) -> Result<(), String> {
        let _writing = self.persisting.lock().await;
        let changes = std::mem::take(&mut self.state.lock().journal);
        if changes.is_empty() {
            return Ok(());
        }
        store.commit(changes).await
    }

    /// Tells the reader a newer connection took its session over: it says so to its client and
    /// closes. Through the signal it already waits on for acknowledgements, so a connection
    /// holds no token and no wait of its own for a rare takeover (issue 42).
    pub(super) fn kick(&self) {
        self.state.lock().kicked = true;
        self.acks.notify_one();
    }

    /// The acknowledgements handed to the reader since it last looked.
    pub(super) fn take_acks(&self) -> Vec<DeliveryAck> {
        std::mem::take(&mut self.state.lock().acks)
    }
}

impl State {
    /// The native subscription confirmed (SUBSCRIBED): the SUBACKs it completes.
    pub(super) fn subscribed(&mut self, sub: SubId) -> Vec<tidings_wire::mqtt::Packet> {
        let mut found = false;
        for (waits, _) in &mut self.subacks {
            found |= waits.contains(&sub);
            waits.retain(|id| *id != sub);
        }
        if !found && self.subs.contains_key(&sub) {
            self.confirmed.insert(sub);
        }
        let (done, waiting) = std::mem::take(&mut self.subacks).into_iter().partition(|(waits, _)| waits.is_empty());
        self.subacks = waiting;
        done.into_iter().map(|(_, packet)| packet).collect::<Vec<_>>()
    }

    /// Whether another QoS 1/2 message may go out.
    pub(super) fn has_room(&self) -> bool {
        self.inflight.len() < self.window.max(1)
    }

    /// Records a guaranteed delivery of `subs` (one PUBLISH for all of them) sent at `qos`: its
    /// packet identifier (none at QoS 0), and the acknowledgements now due upstream (at QoS 0
    /// they are done as soon as it is written).
    pub(super) fn sent(
        &mut self,
        subs: &[SubId],
        (pubend, tick): (PubendId, Tick),
        qos: QoS,
    ) -> (Option<PacketId>, Vec<DeliveryAck>) {
        for sub in subs {
            if !self.is_member(*sub) {
                self.pending.entry((*sub, pubend)).or_default().insert(tick, false);
            }
        }
        if qos == QoS::AtMostOnce {
            let acks: Vec<DeliveryAck> = subs.iter().filter_map(|sub| self.done(*sub, pubend, tick)).collect();
            self.mark(&acks);
            return (None, acks);
        }
        let from: Vec<_> = subs.iter().map(|sub| (*sub, pubend, tick)).collect();
        let id = self.take_packet(None, from.clone(), qos);
        if let Some(id) = id {
            self.put(&from, id.0.get(), false);
        }
        (id, Vec::new())
    }

    /// The durable names of `sub`, if it is a persistent session's durable subscription.
    fn durable(&self, sub: SubId) -> Option<Arc<str>> {
        self.subs.get(&sub).and_then(|s| s.durable.clone())
    }

    /// Journals the durable deliveries of `from` as in flight with packet identifier `id`.
    fn put(&mut self, from: &[(SubId, PubendId, Tick)], id: u16, released: bool) {
        for (sub, pubend, tick) in from {
            if let Some(name) = self.durable(*sub) {
                self.journal.push(Change::Put((name.to_string(), pubend.0, tick.0), id, released));
            }
        }
    }

    /// Journals how far the client is done with each durable subscription of `acks`. A carried
    /// delivery at or below it (done, and left in the table by a restart before its mark was
    /// written) will not come again: it lets go of its packet identifier, as the table's entry
    /// goes with the mark.
    fn mark(&mut self, acks: &[DeliveryAck]) {
        for ack in acks {
            let Some(name) = self.durable(ack.id) else { continue };
            if let Some(carried) = self.inbound.carried.as_deref_mut() {
                carried.retain(|(of, p, t), _| !(*of == name && *p == ack.pubend && *t <= ack.tick));
                if carried.is_empty() {
                    self.inbound.carried = None;
                }
            }
            // One mark per subscription and pubend waits: deliveries the client never sees
            // (filtered out) add none, however long nothing is written.
            let pubend = ack.pubend.0;
            let waiting = self.journal.iter_mut().rev().find_map(|change| match change {
                Change::Acked((of, p), tick) if **of == *name && *p == pubend => Some(tick),
                _ => None,
            });
            match waiting {
                Some(tick) => *tick = (*tick).max(ack.tick.0),
                None => self.journal.push(Change::Acked((name.to_string(), pubend), ack.tick.0)),
            }
        }
    }

    /// Whether the client was done with `tick` of every durable subscription of `subs` before
    /// a restart (see [`Inbound::acked`]).
    pub(super) fn done_before(&self, subs: &[SubId], (pubend, tick): (PubendId, Tick)) -> bool {
        let Some(acked) = self.inbound.acked.as_deref() else { return false };
        !subs.is_empty()
            && subs.iter().all(|sub| {
                self.durable(*sub).and_then(|name| acked.get(&(name, pubend))).is_some_and(|done| *done >= tick)
            })
    }

    /// Records a retained value sent at QoS 1 or 2 on subscription `sub`: a packet identifier
    /// and a place in the window, and nothing to acknowledge upstream when the client is done.
    pub(super) fn sent_retained(&mut self, sub: SubId, qos: QoS) -> Option<PacketId> {
        self.take_packet(Some(sub), Vec::new(), qos)
    }

    fn take_packet(
        &mut self,
        retained: Option<SubId>,
        from: Vec<(SubId, PubendId, Tick)>,
        qos: QoS,
    ) -> Option<PacketId> {
        let mut id = self.next_packet;
        loop {
            id = id.wrapping_add(1).max(1);
            // Nor one a delivery carried from the last connection will take again.
            let carried = self.inbound.carried.as_deref().is_some_and(|c| c.values().any(|(kept, _)| *kept == id));
            if !self.inflight.contains_key(&id) && !carried {
                break;
            }
        }
        self.next_packet = id;
        self.inflight.insert(id, Inflight { retained, from, stage: Stage::First(qos) });
        PacketId::new(id)
    }

    /// At the connection's end: its durable subscriptions' deliveries in flight, kept for the
    /// next connection (see [`Inbound::carried`]).
    pub(super) fn carry(&mut self) {
        for (id, entry) in std::mem::take(&mut self.inflight) {
            for (sub, pubend, tick) in entry.from {
                if let Some(name) = self.subs.get(&sub).and_then(|s| s.durable.clone()) {
                    let carried = self.inbound.carried.get_or_insert_with(Box::default);
                    carried.insert((name, pubend, tick), (id, entry.stage == Stage::Complete));
                }
            }
        }
    }

    /// A guaranteed delivery of `subs` that a past connection had in flight: its packet
    /// identifier and whether PUBREL is due, now in flight again (at `qos`) on this one.
    pub(super) fn sent_again(
        &mut self,
        subs: &[SubId],
        (pubend, tick): (PubendId, Tick),
        qos: QoS,
    ) -> Option<(PacketId, bool)> {
        let key = |sub: &SubId| self.subs.get(sub).and_then(|s| s.durable.clone()).map(|name| (name, pubend, tick));
        let keys: Vec<_> = subs.iter().filter_map(key).collect();
        let carried = self.inbound.carried.as_deref_mut()?;
        let found: Vec<(u16, bool)> = keys.iter().filter_map(|key| carried.remove(key)).collect();
        if carried.is_empty() {
            self.inbound.carried = None;
        }
        let (id, released) = *found.first()?;
        if qos == QoS::AtMostOnce || self.inflight.contains_key(&id) {
            return None;
        }
        for sub in subs {
            if !self.is_member(*sub) {
                self.pending.entry((*sub, pubend)).or_default().insert(tick, false);
            }
        }
        let stage = if released && qos == QoS::ExactlyOnce { Stage::Complete } else { Stage::First(qos) };
        let from = subs.iter().map(|sub| (*sub, pubend, tick)).collect();
        self.inflight.insert(id, Inflight { retained: None, from, stage });
        Some((PacketId::new(id)?, stage == Stage::Complete))
    }

    /// The client's PUBACK: `Err` when no QoS 1 message has this identifier.
    pub(super) fn puback(&mut self, id: u16) -> Result<Vec<DeliveryAck>, ()> {
        self.finish(id, Stage::First(QoS::AtLeastOnce))
    }

    /// The client's PUBCOMP: `Err` when no PUBREL was sent with this identifier.
    pub(super) fn pubcomp(&mut self, id: u16) -> Result<Vec<DeliveryAck>, ()> {
        self.finish(id, Stage::Complete)
    }

    /// The client's PUBREC: whether a QoS 2 message has this identifier (now waiting for
    /// PUBCOMP after the PUBREL the caller sends).
    pub(super) fn pubrec(&mut self, id: u16) -> bool {
        match self.inflight.get_mut(&id) {
            Some(entry) if entry.stage != Stage::First(QoS::AtLeastOnce) => {
                entry.stage = Stage::Complete;
                let from = entry.from.clone();
                self.put(&from, id, true);
                true
            }
            _ => false,
        }
    }

    fn finish(&mut self, id: u16, stage: Stage) -> Result<Vec<DeliveryAck>, ()> {
        match self.inflight.get(&id) {
            Some(entry) if entry.stage == stage => {}
            _ => return Err(()),
        }
        let entry = self.inflight.remove(&id).ok_or(())?;
        let acks: Vec<DeliveryAck> =
            entry.from.into_iter().filter_map(|(sub, pubend, tick)| self.done(sub, pubend, tick)).collect();
        self.mark(&acks);
        Ok(acks)
    }

    fn is_member(&self, sub: SubId) -> bool {
        self.subs.get(&sub).is_some_and(|s| s.member)
    }

    /// Marks `tick` done; the acknowledgement of the longest done prefix, if it grew (of that
    /// tick alone for a queue group member's, whose ticks are not a prefix of anything).
    fn done(&mut self, sub: SubId, pubend: PubendId, tick: Tick) -> Option<DeliveryAck> {
        if self.is_member(sub) {
            return Some(DeliveryAck { id: sub, pubend, tick });
        }
        let ticks = self.pending.get_mut(&(sub, pubend))?;
        if let Some(flag) = ticks.get_mut(&tick) {
            *flag = true;
        }
        let mut acked = None;
        while let Some(entry) = ticks.first_entry() {
            if !*entry.get() {
                break;
            }
            acked = Some(entry.remove_entry().0);
        }
        if ticks.is_empty() {
            self.pending.remove(&(sub, pubend));
        }
        acked.map(|tick| DeliveryAck { id: sub, pubend, tick })
    }

    /// Forgets a subscription that ended: its deliveries in flight are not acknowledged (a
    /// durable subscription's come again from its checkpoint).
    pub(super) fn forget(&mut self, sub: SubId) {
        self.subs.remove(&sub);
        self.confirmed.remove(&sub);
        self.pending.retain(|(id, _), _| *id != sub);
        // A PUBLISH it shared with another subscription stays in flight for that one's sake.
        for entry in self.inflight.values_mut() {
            entry.from.retain(|(of, ..)| *of != sub);
        }
        self.inflight.retain(|_, entry| entry.retained.is_some_and(|of| of != sub) || !entry.from.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PubendId = PubendId(1);

    fn state() -> State {
        State { window: 2, ..State::default() }
    }

    #[test]
    fn an_ack_waits_for_every_earlier_tick_of_its_subscription_and_pubend() {
        let mut s = state();
        let (a, _) = s.sent(&[SubId(1)], (P, Tick(10)), QoS::ExactlyOnce);
        let (b, _) = s.sent(&[SubId(1)], (P, Tick(20)), QoS::AtLeastOnce);
        assert!(!s.has_room(), "two in flight fill a window of two");
        let (a, b) = (a.unwrap().0.get(), b.unwrap().0.get());
        assert_ne!(a, b);
        assert_eq!(s.puback(b), Ok(vec![]), "tick 20 done, but tick 10 is not");
        assert!(s.has_room());
        assert_eq!(s.puback(a), Err(()), "a QoS 2 message takes PUBREC, not PUBACK");
        assert!(s.pubrec(a));
        assert_eq!(s.pubcomp(a), Ok(vec![DeliveryAck { id: SubId(1), pubend: P, tick: Tick(20) }]));
        assert_eq!(s.pubcomp(a), Err(()), "completed once");
    }

    #[test]
    fn a_qos0_delivery_is_acknowledged_at_once_unless_an_earlier_one_is_in_flight() {
        let mut s = state();
        assert_eq!(
            s.sent(&[SubId(2)], (P, Tick(1)), QoS::AtMostOnce),
            (None, vec![DeliveryAck { id: SubId(2), pubend: P, tick: Tick(1) }])
        );
        let (id, _) = s.sent(&[SubId(2)], (P, Tick(2)), QoS::AtLeastOnce);
        assert_eq!(s.sent(&[SubId(2)], (P, Tick(3)), QoS::AtMostOnce), (None, vec![]));
        let ack = s.puback(id.unwrap().0.get()).unwrap();
        assert_eq!(ack.iter().map(|a| a.tick).collect::<Vec<_>>(), [Tick(3)]);
    }

    #[test]
    fn a_queue_group_members_deliveries_are_each_acknowledged_alone_in_any_order() {
        let mut s = state();
        let filter = tidings_wire::mqtt::topic::filter_to_tidings("w/#");
        let sub =
            Sub { filter, qos: QoS::ExactlyOnce, options: Shape::default(), member: true, shared: true, durable: None };
        s.subs.insert(SubId(3), sub);
        let (a, _) = s.sent(&[SubId(3)], (P, Tick(10)), QoS::AtLeastOnce);
        let (b, _) = s.sent(&[SubId(3)], (P, Tick(30)), QoS::ExactlyOnce);
        assert!(s.pubrec(b.unwrap().0.get()));
        let ack = |tick| vec![DeliveryAck { id: SubId(3), pubend: P, tick: Tick(tick) }];
        assert_eq!(s.pubcomp(b.unwrap().0.get()), Ok(ack(30)), "tick 30 alone, tick 10 still leased");
        assert_eq!(s.puback(a.unwrap().0.get()), Ok(ack(10)));
        assert_eq!(s.sent(&[SubId(3)], (P, Tick(40)), QoS::AtMostOnce), (None, ack(40)));
    }

    /// A persistent session's QoS 2 subscription, durable name `mqtt-d`.
    fn durable_sub() -> Sub {
        let filter = tidings_wire::mqtt::topic::filter_to_tidings("d/#");
        let durable = Some(Arc::<str>::from("mqtt-d"));
        Sub { filter, qos: QoS::ExactlyOnce, options: Shape::default(), member: false, shared: false, durable }
    }

    #[test]
    fn a_durable_delivery_in_flight_at_the_end_keeps_its_packet_id_and_stage_for_the_next_connection() {
        let sub = durable_sub();
        let mut first = state();
        first.subs.insert(SubId(1), sub.clone());
        let (a, _) = first.sent(&[SubId(1)], (P, Tick(1)), QoS::ExactlyOnce);
        let (b, _) = first.sent(&[SubId(1)], (P, Tick(2)), QoS::ExactlyOnce);
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(first.pubrec(b.0.get()), "tick 2's PUBREC came, tick 1's did not");
        first.carry();
        // The next connection: other subscription ids, the same durable name.
        let mut next = State { window: 2, inbound: std::mem::take(&mut first.inbound), ..State::default() };
        next.subs.insert(SubId(9), sub);
        let (fresh, _) = next.sent(&[SubId(9)], (P, Tick(3)), QoS::ExactlyOnce);
        assert!(fresh != Some(a) && fresh != Some(b), "a new delivery takes no carried packet id");
        assert_eq!(next.sent_again(&[SubId(9)], (P, Tick(1)), QoS::ExactlyOnce), Some((a, false)), "PUBLISH, DUP");
        assert_eq!(next.sent_again(&[SubId(9)], (P, Tick(2)), QoS::ExactlyOnce), Some((b, true)), "PUBREL");
        assert_eq!(next.sent_again(&[SubId(9)], (P, Tick(2)), QoS::ExactlyOnce), None, "once");
        assert_eq!(next.pubcomp(b.0.get()), Ok(vec![]), "tick 1 is not done yet");
        assert!(next.pubrec(a.0.get()));
        assert_eq!(next.pubcomp(a.0.get()), Ok(vec![DeliveryAck { id: SubId(9), pubend: P, tick: Tick(2) }]));
    }

    #[test]
    fn the_durable_table_learns_each_send_pubrec_and_completion_and_skips_what_was_done() {
        let sub = durable_sub();
        let mut s = state();
        s.subs.insert(SubId(1), sub.clone());
        let (a, _) = s.sent(&[SubId(1)], (P, Tick(1)), QoS::ExactlyOnce);
        let a = a.unwrap().0.get();
        let put = |tick, released| Change::Put(("mqtt-d".into(), 1, tick), a, released);
        assert_eq!(std::mem::take(&mut s.journal), vec![put(1, false)], "in the table before the PUBLISH");
        assert!(s.pubrec(a));
        assert_eq!(std::mem::take(&mut s.journal), vec![put(1, true)], "PUBREC known before the PUBREL");
        assert!(s.pubcomp(a).is_ok());
        s.sent(&[SubId(1)], (P, Tick(2)), QoS::AtMostOnce);
        assert_eq!(s.journal, vec![Change::Acked(("mqtt-d".into(), 1), 2)], "one mark waits, the highest");
        // A new process: the table says the client was done with tick 1, and has tick 2 in flight.
        let mut next = State { window: 2, ..State::default() };
        next.subs.insert(SubId(7), sub);
        let loaded =
            Loaded { inflight: vec![(("mqtt-d".into(), 1, 2), (a, false))], acked: vec![(("mqtt-d".into(), 1), 1)] };
        next.inbound.restore(loaded);
        assert!(next.done_before(&[SubId(7)], (P, Tick(1))), "done: acknowledged, not sent again");
        assert!(!next.done_before(&[SubId(7)], (P, Tick(2))));
        assert_eq!(
            next.sent_again(&[SubId(7)], (P, Tick(2)), QoS::ExactlyOnce),
            Some((PacketId::new(a).unwrap(), false))
        );
        next.inbound.forget_durable("mqtt-d");
        assert!(!next.done_before(&[SubId(7)], (P, Tick(1))), "a deleted subscription's marks go with it");
    }

    #[test]
    fn one_publish_for_overlapping_subscriptions_acknowledges_each_and_outlives_an_unsubscribe() {
        let mut s = state();
        let (id, acks) = s.sent(&[SubId(5), SubId(6)], (P, Tick(7)), QoS::AtLeastOnce);
        assert!(acks.is_empty());
        let ack = |sub| DeliveryAck { id: SubId(sub), pubend: P, tick: Tick(7) };
        assert_eq!(s.puback(id.unwrap().0.get()), Ok(vec![ack(5), ack(6)]), "one PUBACK, both acknowledged");
        let (id, _) = s.sent(&[SubId(5), SubId(6)], (P, Tick(8)), QoS::AtLeastOnce);
        s.forget(SubId(5));
        let left = s.puback(id.unwrap().0.get()).unwrap();
        assert_eq!(left, vec![DeliveryAck { id: SubId(6), pubend: P, tick: Tick(8) }], "still in flight for 6");
    }

    #[test]
    fn sequence_numbers_only_grow() {
        let mut inbound = Inbound { last_seq: u64::MAX - 1, ..Inbound::default() };
        assert_eq!(inbound.next_seq(), u64::MAX);
        let mut inbound = Inbound::default();
        let first = inbound.next_seq();
        assert!(inbound.next_seq() > first);
    }
}
