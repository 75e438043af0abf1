//! The delivery task of an MQTT connection: reads the native frames the session's outbox writes
//! into the in-memory pipe and writes what the client must see as MQTT packets: each DELIVER as
//! a QoS 0 PUBLISH, each GDELIVER as a PUBLISH at the lower of the subscription's and the
//! message's QoS (its topic mapped back, `$` topics left out of leading-wildcard filters,
//! nothing over the client's maximum packet size), PUBLISH_ACK as PUBACK or PUBREC, SUBSCRIBED
//! as the SUBACK that waited for it, and a native close as a 5.0 DISCONNECT.
//!
//! A QoS 1/2 PUBLISH waits for room in the in-flight window: the task stops reading the pipe,
//! so the guaranteed engine holds the rest in its log, not here.

use std::sync::Arc;

use bytes::BytesMut;
use tidings_wire::mqtt::{
    Disconnect, MqttReason, Packet, PacketId, Properties, ProtocolVersion, Publish, PublishResponse, QoS,
};
use tidings_wire::{DeliveryAck, Frame, GuaranteedDeliver, Message, SubId, ValueRef};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc::UnboundedSender;

use super::link::{Link, QOS_PROPERTY};
use super::session::{delivery, reason_for};
use super::Writer;
use crate::outbox::Outbox;

/// The pipe carries frames the broker itself wrote, each under its own limits: no second limit.
const NATIVE_FRAME_LIMIT: usize = u32::MAX as usize;

/// What the delivery task needs of its connection.
pub(super) struct Delivery {
    /// The client's half of the TCP connection.
    pub(super) writer: Writer,
    /// What it shares with the reader.
    pub(super) link: Arc<Link>,
    /// The connection's MQTT version.
    pub(super) version: ProtocolVersion,
    /// The largest packet the client accepts.
    pub(super) max_packet: usize,
    /// The topic aliases set on this connection's PUBLISHes.
    pub(super) aliases: parking_lot::Mutex<super::aliases::ServerAliases>,
    /// Acknowledgements of guaranteed deliveries sent at QoS 0, for the reader's native session.
    pub(super) acks: UnboundedSender<DeliveryAck>,
    /// The hash of the session's client identifier, which its own messages carry when it has a
    /// no-local subscription.
    pub(super) origin: u64,
}

/// What translating a frame did.
enum Translated {
    Carry,
    /// Close after sending this (a 5.0 DISCONNECT) or nothing.
    Close(Option<Box<Packet>>),
}

impl Delivery {
    /// Runs until the pipe closes (the outbox's writer finished) or the client is gone.
    pub(super) async fn run(self, mut pipe: DuplexStream, outbox: Arc<Outbox>) {
        let mut frames = BytesMut::with_capacity(8 * 1024);
        let mut out = BytesMut::new();
        'pipe: loop {
            match pipe.read_buf(&mut frames).await {
                Ok(n) if n > 0 => {}
                _ => break,
            }
            loop {
                let frame = match Frame::decode(&mut frames, NATIVE_FRAME_LIMIT) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(_) => {
                        let _ = super::write_flushed(&self.writer, &out).await;
                        break 'pipe;
                    }
                };
                match self.translate(frame, &mut out).await {
                    Some(Translated::Carry) => {}
                    Some(Translated::Close(last)) => {
                        if let Some(packet) = last {
                            let _ = packet.encode(self.version, &mut out);
                        }
                        let _ = super::write_flushed(&self.writer, &out).await;
                        break 'pipe;
                    }
                    None => break 'pipe,
                }
            }
            if !self.flush(&mut out).await {
                break;
            }
        }
        outbox.abort();
        let _ = self.writer.lock().await.shutdown().await;
    }

    async fn flush(&self, out: &mut BytesMut) -> bool {
        out.is_empty() || super::write_flushed(&self.writer, &out.split()).await.is_ok()
    }

    fn push(&self, packet: Packet, out: &mut BytesMut) {
        let _ = packet.encode(self.version, out);
    }

    /// Appends the MQTT form of one native frame to `out`; `None` when the client is gone.
    async fn translate(&self, frame: Frame, out: &mut BytesMut) -> Option<Translated> {
        match frame {
            Frame::Deliver(deliver) => {
                let sub = self.link.state.lock().subs.get(&deliver.id).cloned();
                let Some(sub) = sub else { return Some(Translated::Carry) };
                let qos = retained_qos(&deliver.message).min(sub.qos);
                if let Some(publish) = delivery(&deliver.message, &sub, self.version, self.origin) {
                    if qos != QoS::AtMostOnce {
                        return self.retained(deliver.id, publish, qos, out).await;
                    }
                    let mut packet = BytesMut::new();
                    let mut publish = Packet::Publish(publish);
                    // Sized with its name: an alias is set only on a PUBLISH the client gets.
                    if publish.encode(self.version, &mut packet).is_ok() && packet.len() <= self.max_packet {
                        let aliased = match &mut publish {
                            Packet::Publish(p) => self.aliases.lock().apply(p),
                            _ => false,
                        };
                        match aliased {
                            true => self.push(publish, out),
                            false => out.extend_from_slice(&packet),
                        }
                    }
                }
            }
            Frame::GuaranteedDeliver(deliver) => return self.guaranteed(deliver, out).await,
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
            room.await;
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

    /// A guaranteed delivery: sent at the lower of the subscription's and the message's QoS once
    /// the window has room, and acknowledged upstream once the client has it.
    async fn guaranteed(&self, deliver: GuaranteedDeliver, out: &mut BytesMut) -> Option<Translated> {
        let Some(sub) = self.link.state.lock().subs.get(&deliver.id).cloned() else { return Some(Translated::Carry) };
        let qos = sub.qos.min(message_qos(&deliver.message));
        let mut packet = BytesMut::new();
        let publish = delivery(&deliver.message, &sub, self.version, self.origin).filter(|publish| {
            let mut sized = publish.clone();
            sized.qos = qos;
            sized.packet_id = PacketId::new(1).filter(|_| qos != QoS::AtMostOnce);
            Packet::Publish(sized).encode(self.version, &mut packet).is_ok() && packet.len() <= self.max_packet
        });
        // Not for this client (its filter leaves the topic out, or it is too large): done.
        let qos = if publish.is_some() { qos } else { QoS::AtMostOnce };
        if qos != QoS::AtMostOnce {
            self.room(out).await?;
        }
        let (packet_id, ack) = self.link.state.lock().sent(deliver.id, (deliver.pubend, deliver.tick), qos);
        if let Some(mut publish) = publish {
            publish.qos = qos;
            publish.packet_id = packet_id;
            self.aliases.lock().apply(&mut publish);
            self.push(Packet::Publish(publish), out);
        }
        if let Some(ack) = ack {
            let _ = self.acks.send(ack);
        }
        Some(Translated::Carry)
    }
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
