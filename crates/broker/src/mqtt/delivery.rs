//! The delivery task of an MQTT connection: reads the native frames the session's outbox writes
//! into the in-memory pipe and writes what the client must see as MQTT packets: each DELIVER
//! as a QoS 0 PUBLISH (its topic mapped back, `$` topics left out of leading-wildcard filters,
//! nothing over the client's maximum packet size), and a native close as a 5.0 DISCONNECT.

use std::sync::Arc;

use bytes::BytesMut;
use tidings_wire::mqtt::{Disconnect, Packet, Properties, ProtocolVersion};
use tidings_wire::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::session::{delivery, reason_for, Admits};
use super::Writer;
use crate::outbox::Outbox;

/// The pipe carries frames the broker itself wrote, each under its own limits: no second limit.
const NATIVE_FRAME_LIMIT: usize = u32::MAX as usize;

/// What the delivery task needs of its connection.
pub(super) struct Delivery {
    /// The client's half of the TCP connection.
    pub(super) writer: Writer,
    /// The session's native subscriptions and the filters they serve.
    pub(super) admits: Admits,
    /// The connection's MQTT version.
    pub(super) version: ProtocolVersion,
    /// The largest packet the client accepts.
    pub(super) max_packet: usize,
}

impl Delivery {
    /// Runs until the pipe closes (the outbox's writer finished) or the client is gone.
    pub(super) async fn run(self, mut pipe: DuplexStream, outbox: Arc<Outbox>) {
        let mut frames = BytesMut::with_capacity(8 * 1024);
        let mut out = BytesMut::new();
        loop {
            match pipe.read_buf(&mut frames).await {
                Ok(n) if n > 0 => {}
                _ => break,
            }
            let closing = loop {
                match Frame::decode(&mut frames, NATIVE_FRAME_LIMIT) {
                    Ok(Some(frame)) => {
                        if let Some(last) = self.translate(frame, &mut out) {
                            break Some(last);
                        }
                    }
                    Ok(None) => break None,
                    Err(_) => break Some(None),
                }
            };
            if let Some(last) = closing {
                if let Some(packet) = last {
                    let _ = packet.encode(self.version, &mut out);
                }
                let _ = self.writer.lock().await.write_all(&out).await;
                break;
            }
            if !out.is_empty() && self.writer.lock().await.write_all(&out.split()).await.is_err() {
                break;
            }
        }
        outbox.abort();
        let _ = self.writer.lock().await.shutdown().await;
    }

    /// Appends the MQTT form of one native frame to `out`; `Some` when the connection closes
    /// after it (with the DISCONNECT to send last, in 5.0).
    fn translate(&self, frame: Frame, out: &mut BytesMut) -> Option<Option<Packet>> {
        match frame {
            Frame::Deliver(deliver) => {
                let filter = self.admits.lock().get(&deliver.id).cloned()?;
                let publish = delivery(&deliver.message, &filter)?;
                let mut packet = BytesMut::new();
                if Packet::Publish(publish).encode(self.version, &mut packet).is_ok() && packet.len() <= self.max_packet
                {
                    out.extend_from_slice(&packet);
                }
                None
            }
            Frame::Error(notice) | Frame::Disconnect(notice) => Some(match self.version {
                ProtocolVersion::V5 => Some(Packet::Disconnect(Disconnect {
                    reason: reason_for(&notice),
                    properties: Properties::default(),
                })),
                ProtocolVersion::V311 => None,
            }),
            // WELCOME, PONG, SUBSCRIBED and the like answer native frames this session never
            // sent, or say what CONNACK and SUBACK already said.
            _ => None,
        }
    }
}
