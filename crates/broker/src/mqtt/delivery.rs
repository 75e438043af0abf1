//! The delivery task of an MQTT connection: takes what the native session's outbox queued and
//! writes what the client must see as MQTT packets: each delivery as a QoS 0 PUBLISH, each
//! guaranteed delivery as a PUBLISH at the lower of the subscription's and the message's QoS
//! (its topic mapped back, `$` topics left out of leading-wildcard filters, nothing over the
//! client's maximum packet size), PUBLISH_ACK as PUBACK or PUBREC, SUBSCRIBED as the SUBACK
//! that waited for it, and a native close as a 5.0 DISCONNECT.
//!
//! It is the outbox's writer: the queued items are encoded as MQTT straight from the queue (no
//! native frames in between), and each batch is accounted to the outbox as the native writer's
//! is, so the queue limits, the slow-consumer policy and the metrics apply unchanged.
//! A QoS 1/2 PUBLISH waits for room in the in-flight window: the task stops taking from the
//! outbox, so the queue fills and the guaranteed engine holds the rest in its log, not here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tidings_wire::mqtt::{
    Disconnect, MqttReason, Packet, PacketId, Properties, ProtocolVersion, Publish, PublishResponse, QoS,
};
use tidings_wire::{Frame, Message, PubendId, SubId, Tick, ValueRef, REDELIVERED_FLAG};
use tokio::io::AsyncWriteExt;

use super::link::{Link, Sub, QOS_PROPERTY};
use super::session::{delivery, reason_for};
use super::Writer;
use crate::outbox::queue::Item;
use crate::outbox::{Outbox, Target, Turn, MAX_BATCH};

/// Control frames are the broker's own, each under its own limits: no second limit.
const NATIVE_FRAME_LIMIT: usize = u32::MAX as usize;

/// What the delivery task needs of its connection.
pub(super) struct Delivery {
    /// The client's half of the TCP connection.
    pub(super) writer: Writer,
    /// What it shares with the reader.
    pub(super) link: Arc<Link>,
    /// The native session's queue, which this task drains.
    pub(super) outbox: Arc<Outbox>,
    /// The connection's MQTT version.
    pub(super) version: ProtocolVersion,
    /// The largest packet the client accepts.
    pub(super) max_packet: usize,
    /// The topic aliases set on this connection's PUBLISHes.
    pub(super) aliases: parking_lot::Mutex<super::aliases::ServerAliases>,
    /// The hash of the session's client identifier, which its own messages carry when it has a
    /// no-local subscription.
    pub(super) origin: u64,
    /// Bytes written to the client in the batch being written, for the outbox's counts.
    written: AtomicU64,
    /// The sessions, whose table of deliveries in flight is written before what it covers is
    /// sent.
    registry: Arc<super::registry::Registry>,
}

/// What translating an item did.
enum Translated {
    Carry,
    /// Close after sending this (a 5.0 DISCONNECT) or nothing.
    Close(Option<Box<Packet>>),
}

impl Delivery {
    /// The delivery task of a connection once its CONNACK is written.
    pub(super) fn new(
        (writer, link, outbox): (Writer, Arc<Link>, Arc<Outbox>),
        version: ProtocolVersion,
        max_packet: usize,
        client_aliases: Option<u16>,
        origin: u64,
        registry: Arc<super::registry::Registry>,
    ) -> Delivery {
        let aliases = parking_lot::Mutex::new(super::aliases::ServerAliases::new(client_aliases));
        let written = AtomicU64::new(0);
        Delivery { writer, link, outbox, version, max_packet, aliases, origin, written, registry }
    }

    /// Runs until the outbox is finished (the connection closes) or the client is gone.
    pub(super) async fn run(self) {
        let mut batch = VecDeque::new();
        loop {
            let closing = match self.outbox.next_batch(&mut batch).await {
                Turn::Write => None,
                Turn::Close(last) => Some(last),
                Turn::Stop => break,
            };
            let charged: usize = batch.iter().map(Item::charged).sum();
            let taken = batch.len();
            // Boxed: the work of a batch takes room while there is a batch, not while idle.
            let (delivered, step) = Box::pin(self.batch(&mut batch, closing)).await;
            let bytes = self.written.swap(0, Ordering::Relaxed);
            let written = step.is_some();
            self.outbox.batch_done(charged, written.then_some((delivered, bytes)));
            if !matches!(step, Some(Translated::Carry)) {
                break;
            }
            if taken == MAX_BATCH {
                // More is queued: the tasks woken meanwhile on this worker go first.
                tokio::task::yield_now().await;
            }
        }
        self.outbox.writer_gone();
        let _ = self.writer.lock().await.shutdown().await;
    }

    /// Writes one taken batch, then `closing` (the native close, if the queue is closing) as
    /// MQTT. Returns the deliveries it held and how it ended: `Carry` when all was written,
    /// `Close` when the connection must close (its last packet written), `None` when the
    /// client is gone. The packets are built into a buffer that lives for this batch only: an
    /// idle connection holds none.
    async fn batch(&self, batch: &mut VecDeque<Item<Target>>, closing: Option<Bytes>) -> (u64, Option<Translated>) {
        let mut out = BytesMut::new();
        let mut delivered = 0;
        let mut items = batch.drain(..).chain(closing.map(Item::Frame)).peekable();
        while let Some(item) = items.next() {
            let step = match item {
                Item::Deliver(target, message, _missed) => {
                    // The copies of one publish for this session's overlapping subscriptions
                    // come one after the other: they go as one PUBLISH.
                    // (No list for the usual single copy: this is the QoS 0 path at full speed.)
                    if items.peek().is_some_and(|next| same_deliver(next, &message)) {
                        let mut ids = vec![target.id];
                        while let Some(Item::Deliver(next, ..)) = items.next_if(|next| same_deliver(next, &message)) {
                            ids.push(next.id);
                        }
                        delivered += ids.len() as u64;
                        self.deliver(&ids, &message, &mut out).await
                    } else {
                        delivered += 1;
                        self.deliver(&[target.id], &message, &mut out).await
                    }
                }
                Item::Guaranteed(id, pubend, tick, message) => {
                    let mut ids = vec![id];
                    while let Some(Item::Guaranteed(next, ..)) = items.next_if(|next| same_tick(next, pubend, tick)) {
                        ids.push(next);
                    }
                    delivered += ids.len() as u64;
                    self.guaranteed(&ids, (pubend, tick), &message, &mut out).await
                }
                Item::Frame(frame) => match Frame::decode(&mut BytesMut::from(&frame[..]), NATIVE_FRAME_LIMIT) {
                    Ok(Some(frame)) => self.translate(frame, &mut out).await,
                    _ => Some(Translated::Close(None)),
                },
            };
            match step {
                Some(Translated::Carry) => {}
                Some(Translated::Close(last)) => {
                    if let Some(packet) = last {
                        let _ = packet.encode(self.version, &mut out);
                    }
                    self.flush(&mut out).await;
                    return (delivered, Some(Translated::Close(None)));
                }
                None => return (delivered, None),
            }
        }
        match self.flush(&mut out).await {
            true => (delivered, Some(Translated::Carry)),
            false => (delivered, None),
        }
    }

    /// Writes what `out` holds, unless the connection is finished first (cut by the budget, or
    /// closed by its reader): a client that does not read must not hold this task. The table
    /// of deliveries in flight is written first (one sync for the batch): a PUBLISH reaches
    /// the client only once a restart would send it again with its packet identifier.
    async fn flush(&self, out: &mut BytesMut) -> bool {
        if out.is_empty() {
            return true;
        }
        if let Err(error) = self.link.persist(&self.registry.inflight).await {
            tracing::warn!(%error, "MQTT deliveries in flight not written: closing");
            return false;
        }
        let written = tokio::select! {
            written = super::write_flushed(&self.writer, out) => written.is_ok(),
            () = self.outbox.done.cancelled() => false,
        };
        self.written.fetch_add(out.len() as u64, Ordering::Relaxed);
        out.clear();
        written
    }

    fn push(&self, packet: Packet, out: &mut BytesMut) {
        let _ = packet.encode(self.version, out);
    }

    /// Appends the QoS 0 PUBLISH of a delivery on subscriptions `ids` to `out` (a retained
    /// value at QoS 1/2 waits for room); `None` when the client is gone. Overlapping
    /// subscriptions get one copy carrying each one's identifier (MQTT-3.3.4-3..5), a shared
    /// one a copy of its own.
    async fn deliver(&self, ids: &[SubId], message: &Message, out: &mut BytesMut) -> Option<Translated> {
        if let [id] = ids {
            let sub = self.link.state.lock().subs.get(id).cloned();
            let Some(sub) = sub else { return Some(Translated::Carry) };
            return self.deliver_one(&[(*id, sub)], message, out).await;
        }
        let (alone, merged): (Vec<_>, Vec<_>) = self.subs(ids).into_iter().partition(|(_, sub)| sub.shared);
        for (id, sub) in alone {
            self.deliver_one(&[(id, sub)], message, out).await?;
        }
        self.deliver_one(&merged, message, out).await
    }

    /// [`Delivery::deliver`] of one PUBLISH for `subs`.
    async fn deliver_one(&self, subs: &[(SubId, Sub)], message: &Message, out: &mut BytesMut) -> Option<Translated> {
        let Some((publish, qos, id)) =
            merge(subs, message, self.version, self.origin, |sub| retained_qos(message).min(sub.qos))
        else {
            return Some(Translated::Carry);
        };
        if qos != QoS::AtMostOnce {
            return self.retained(id, publish, qos, out).await;
        }
        // Encoded in place (no buffer per message: this is the QoS 0 path at full speed),
        // and sized with its name: an alias is set only on a PUBLISH the client gets.
        let start = out.len();
        let mut publish = Packet::Publish(publish);
        if publish.encode(self.version, out).is_err() || out.len() - start > self.max_packet {
            out.truncate(start);
        } else if let Packet::Publish(p) = &mut publish {
            if self.aliases.lock().apply(p) {
                out.truncate(start);
                self.push(publish, out);
            }
        }
        Some(Translated::Carry)
    }

    /// Appends the MQTT form of one native control frame to `out`; `None` when the client is
    /// gone.
    async fn translate(&self, frame: Frame, out: &mut BytesMut) -> Option<Translated> {
        match frame {
            Frame::PublishAck(ack) => {
                let mut state = self.link.state.lock();
                let Some(id) = state.waiting.remove(&ack.seq) else { return Some(Translated::Carry) };
                let Some(incoming) = state.inbound.by_packet.get_mut(&id) else { return Some(Translated::Carry) };
                let response = PublishResponse::success(PacketId::new(id)?);
                let packet = match incoming.qos {
                    QoS::ExactlyOnce => {
                        incoming.recorded = true;
                        Packet::Pubrec(response)
                    }
                    _ => {
                        state.inbound.by_packet.remove(&id);
                        Packet::Puback(response)
                    }
                };
                drop(state);
                self.push(packet, out);
            }
            Frame::PublishRefused(refused) => {
                let mut state = self.link.state.lock();
                let Some(id) = state.waiting.remove(&refused.seq) else { return Some(Translated::Carry) };
                let incoming = state.inbound.by_packet.remove(&id)?;
                drop(state);
                // 3.1.1 has no way to refuse a publish: closing makes the client send it again.
                if self.version == ProtocolVersion::V311 {
                    return Some(Translated::Close(None));
                }
                let mut response = PublishResponse::success(PacketId::new(id)?);
                // PUBACK and PUBREC can say 0x87 (MQTT 5.0 §3.4.2.1): a user publishing outside
                // its permissions learns so, as a native publisher does.
                response.reason = match reason_for(&refused.reason) {
                    MqttReason::TopicNameInvalid => MqttReason::TopicNameInvalid,
                    MqttReason::NotAuthorized => MqttReason::NotAuthorized,
                    _ => MqttReason::UnspecifiedError,
                };
                self.push(
                    match incoming.qos {
                        QoS::ExactlyOnce => Packet::Pubrec(response),
                        _ => Packet::Puback(response),
                    },
                    out,
                );
            }
            Frame::Subscribed(subscribed) => {
                for packet in self.link.state.lock().subscribed(subscribed.id) {
                    self.push(packet, out);
                }
            }
            Frame::Error(notice) | Frame::Disconnect(notice) => {
                return Some(Translated::Close(match self.version {
                    ProtocolVersion::V5 => Some(Box::new(Packet::Disconnect(Disconnect {
                        reason: reason_for(&notice),
                        properties: Properties::default(),
                    }))),
                    ProtocolVersion::V311 => None,
                }))
            }
            // WELCOME, PONG and the like answer native frames this session never sent; a GAP
            // (ticks a retention policy released) has no MQTT form.
            _ => {}
        }
        Some(Translated::Carry)
    }

    /// Waits for room in the in-flight window, flushing what is written meanwhile (the client
    /// acknowledges what it has only once it has it); `None` when the client is gone.
    async fn room(&self, out: &mut BytesMut) -> Option<()> {
        loop {
            let room = self.link.room.notified();
            if self.link.state.lock().has_room() {
                return Some(());
            }
            if !self.flush(out).await {
                return None;
            }
            tokio::select! {
                () = room => {}
                () = self.outbox.done.cancelled() => return None,
            }
        }
    }

    /// A QoS 1/2 retained value given to a new subscription: sent at the lower of the two QoS
    /// with a packet identifier, within the window, and acknowledged to no one upstream.
    async fn retained(&self, sub: SubId, mut publish: Publish, qos: QoS, out: &mut BytesMut) -> Option<Translated> {
        publish.qos = qos;
        publish.packet_id = PacketId::new(1);
        let mut packet = BytesMut::new();
        if Packet::Publish(publish.clone()).encode(self.version, &mut packet).is_err() || packet.len() > self.max_packet
        {
            return Some(Translated::Carry);
        }
        self.room(out).await?;
        publish.packet_id = self.link.state.lock().sent_retained(sub, qos);
        self.aliases.lock().apply(&mut publish);
        self.push(Packet::Publish(publish), out);
        Some(Translated::Carry)
    }

    /// A guaranteed delivery on subscriptions `ids`: overlapping ones of the session get one
    /// PUBLISH carrying each one's identifier, at the highest of their granted QoS (each the
    /// lower of the subscription's and the message's, MQTT-3.3.4-2..5), acknowledged upstream
    /// for each of them once the client has it; a shared one (a queue group member) gets its
    /// own. One a queue group flagged redelivered (another member had it and left) goes with
    /// DUP set.
    async fn guaranteed(
        &self,
        ids: &[SubId],
        (pubend, tick): (PubendId, Tick),
        message: &Message,
        out: &mut BytesMut,
    ) -> Option<Translated> {
        let subs = self.subs(ids);
        let (alone, merged): (Vec<_>, Vec<_>) = subs.into_iter().partition(|(_, sub)| sub.shared);
        for (id, sub) in alone {
            self.guaranteed_one(vec![(id, sub)], (pubend, tick), message, out).await?;
        }
        self.guaranteed_one(merged, (pubend, tick), message, out).await
    }

    /// [`Delivery::guaranteed`] of one PUBLISH for `subs`.
    async fn guaranteed_one(
        &self,
        subs: Vec<(SubId, Sub)>,
        (pubend, tick): (PubendId, Tick),
        message: &Message,
        out: &mut BytesMut,
    ) -> Option<Translated> {
        let redelivered = tick.0 & REDELIVERED_FLAG != 0;
        let tick = Tick(tick.0 & !REDELIVERED_FLAG);
        if subs.is_empty() {
            return Some(Translated::Carry);
        }
        let ids: Vec<SubId> = subs.iter().map(|(id, _)| *id).collect();
        let merged = merge(&subs, message, self.version, self.origin, |sub| sub.qos.min(message_qos(message)));
        let mut packet = BytesMut::new();
        let publish = merged.filter(|(publish, qos, _)| {
            let mut sized = publish.clone();
            sized.qos = *qos;
            sized.packet_id = PacketId::new(1).filter(|_| *qos != QoS::AtMostOnce);
            Packet::Publish(sized).encode(self.version, &mut packet).is_ok() && packet.len() <= self.max_packet
        });
        // Not for this client (its filters leave the topic out, or it is too large): done.
        let qos = publish.as_ref().map_or(QoS::AtMostOnce, |(_, qos, _)| *qos);
        // Done by the client before a broker restart (the durable subscription's checkpoint had
        // not caught up): acknowledged again upstream, not sent again.
        if self.link.state.lock().done_before(&ids, (pubend, tick)) {
            let (_, acks) = self.link.state.lock().sent(&ids, (pubend, tick), QoS::AtMostOnce);
            for ack in acks {
                self.link.acked(ack);
            }
            return Some(Translated::Carry);
        }
        if qos != QoS::AtMostOnce {
            self.room(out).await?;
        }
        // In flight when the last connection ended: the same packet identifier again, as a
        // PUBLISH with DUP 1, or as our PUBREL if the client's PUBREC had come.
        let again = self.link.state.lock().sent_again(&ids, (pubend, tick), qos);
        if let Some((packet_id, released)) = again {
            if released {
                self.push(Packet::Pubrel(PublishResponse::success(packet_id)), out);
            } else if let Some((mut publish, ..)) = publish {
                publish.qos = qos;
                publish.packet_id = Some(packet_id);
                publish.dup = true;
                self.aliases.lock().apply(&mut publish);
                self.push(Packet::Publish(publish), out);
            }
            return Some(Translated::Carry);
        }
        let (packet_id, acks) = self.link.state.lock().sent(&ids, (pubend, tick), qos);
        if let Some((mut publish, ..)) = publish {
            publish.qos = qos;
            publish.packet_id = packet_id;
            publish.dup = redelivered && qos != QoS::AtMostOnce;
            self.aliases.lock().apply(&mut publish);
            self.push(Packet::Publish(publish), out);
        }
        for ack in acks {
            self.link.acked(ack);
        }
        Some(Translated::Carry)
    }

    /// The subscriptions of `ids` still in force.
    fn subs(&self, ids: &[SubId]) -> Vec<(SubId, Sub)> {
        let state = self.link.state.lock();
        ids.iter().filter_map(|id| state.subs.get(id).map(|sub| (*id, sub.clone()))).collect()
    }
}

/// One PUBLISH of `message` for `subs` (those whose filter and options let it through): the
/// first one's, carrying every subscription identifier, at the highest QoS `qos_of` gives
/// them, with the first subscription it is for; `None` when it is for none of them.
fn merge(
    subs: &[(SubId, Sub)],
    message: &Message,
    version: ProtocolVersion,
    origin: u64,
    qos_of: impl Fn(&Sub) -> QoS,
) -> Option<(Publish, QoS, SubId)> {
    let mut merged: Option<(Publish, QoS, SubId)> = None;
    for (id, sub) in subs {
        let Some(publish) = delivery(message, sub, version, origin) else { continue };
        let qos = qos_of(sub);
        match &mut merged {
            None => merged = Some((publish, qos, *id)),
            Some((first, highest, _)) => {
                first.properties.subscription_identifiers.extend(publish.properties.subscription_identifiers);
                *highest = (*highest).max(qos);
            }
        }
    }
    merged
}

/// Whether `item` is a best-effort delivery of the same publish as `message` (the dispatcher
/// gives every matching subscription a clone of one message: the same bytes).
fn same_deliver(item: &Item<Target>, message: &Message) -> bool {
    matches!(item, Item::Deliver(_, next, _) if next.as_bytes().as_ptr() == message.as_bytes().as_ptr())
}

/// Whether `item` is a guaranteed delivery of the same message as `(pubend, tick)` (the
/// redelivered flag aside).
fn same_tick(item: &Item<Target>, pubend: PubendId, tick: Tick) -> bool {
    let plain = |tick: Tick| tick.0 & !REDELIVERED_FLAG;
    matches!(item, Item::Guaranteed(_, p, t, _) if *p == pubend && plain(*t) == plain(tick))
}

/// The QoS a retained value was published at: 1 or 2 when it says so (an MQTT QoS 1/2 retained
/// publish), else 0 (a QoS 0 or native one, and every live best-effort message).
fn retained_qos(message: &Message) -> QoS {
    match message.property(QOS_PROPERTY) {
        Some(ValueRef::Int(2)) if message.is_retained() => QoS::ExactlyOnce,
        Some(ValueRef::Int(1)) if message.is_retained() => QoS::AtLeastOnce,
        _ => QoS::AtMostOnce,
    }
}

/// The QoS a guaranteed message was published at: 2 when it says so, else 1.
fn message_qos(message: &Message) -> QoS {
    match message.property(QOS_PROPERTY) {
        Some(ValueRef::Int(2)) => QoS::ExactlyOnce,
        _ => QoS::AtLeastOnce,
    }
}
