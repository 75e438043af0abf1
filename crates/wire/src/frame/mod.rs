//! The frame set and the framing rule.
//!
//! Every frame is `length:u32 | type:u8 | body`, big-endian, where `length` counts the type byte
//! and the body. A decoder that sees fewer bytes than a whole frame asks for more; one that sees
//! a length over the negotiated maximum fails before buffering anything.

mod deliver;
mod delivery_ack;
mod gap;
mod guaranteed_deliver;
mod guaranteed_publish;
mod hello;
mod message;
mod no_responders;
mod notice;
mod ping;
mod publish_ack;
mod publish_refused;
mod sequence;
mod servers;
mod subscribe;
mod subscribed;
mod token;
mod unsubscribe;

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub use deliver::{Deliver, DELIVER_HEADER_LEN};
pub use delivery_ack::DeliveryAck;
pub use gap::Gap;
pub use guaranteed_deliver::{GuaranteedDeliver, GUARANTEED_DELIVER_HEADER_LEN, REDELIVERED_FLAG};
pub use guaranteed_publish::GuaranteedPublish;
pub use hello::{Hello, HelloAuth, HELLO_AUTH_VERSION};
pub use message::{Message, REPLY_TO, RETAIN, RETAINED, RETAIN_ONLY};
pub use no_responders::NoResponders;
pub use notice::Notice;
pub use ping::{Ping, Pong};
pub use publish_ack::PublishAck;
pub use publish_refused::PublishRefused;
pub use sequence::{Sequence, SEQUENCE_LEN};
pub use servers::{Servers, MAX_SERVERS, SERVERS_VERSION};
pub use subscribe::{check_group_name, DeliveryMode, SubId, Subscribe, KEYED_FLAG, MAX_GROUP_LEN, QUEUE_FLAG};
pub use subscribed::Subscribed;
pub use token::{Token, TOKEN_LEN};
pub use unsubscribe::Unsubscribe;

use crate::error::WireError;
use crate::framing::{encode_frame, peek, split_body};

/// The protocol version this crate speaks: 2 since HELLO carries credentials (issue 43), 3
/// since the broker tells a client its cell's addresses (SERVERS, issue 40). A broker still
/// accepts versions 1 and 2, whose frames are the same but for HELLO (1) and SERVERS, which
/// it sends only to version 3 sessions ([`SERVERS_VERSION`]).
pub const PROTOCOL_VERSION: u16 = 3;

/// The oldest protocol version a broker accepts.
pub const PROTOCOL_MIN_VERSION: u16 = 1;

/// Bytes before a frame body: the length prefix and the type byte.
pub const HEADER_LEN: usize = 5;

/// The default maximum frame size (type byte and body): 8 MiB.
pub const DEFAULT_MAX_FRAME: usize = 8 * 1024 * 1024;

/// The type byte of each frame. Numbers are protocol and never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    /// Client opens a session.
    Hello = 0x01,
    /// Broker accepts it.
    Welcome = 0x02,
    /// Client publishes a message.
    Publish = 0x03,
    /// Client subscribes.
    Subscribe = 0x04,
    /// Client ends a subscription.
    Unsubscribe = 0x05,
    /// Broker delivers a message to a subscription.
    Deliver = 0x06,
    /// Round-trip probe (either direction).
    Ping = 0x07,
    /// Answer to a probe.
    Pong = 0x08,
    /// A refused frame; the connection closes after it.
    Error = 0x09,
    /// An orderly close.
    Disconnect = 0x0A,
    /// Client publishes a message that must be logged and delivered exactly once.
    GuaranteedPublish = 0x0B,
    /// Broker has logged a guaranteed publish.
    PublishAck = 0x0C,
    /// Broker will not log a guaranteed publish; the session stays open.
    PublishRefused = 0x0D,
    /// Broker delivers a message of a guaranteed subscription.
    GuaranteedDeliver = 0x0E,
    /// Broker reports ticks a guaranteed subscription may have missed for good.
    Gap = 0x0F,
    /// Client acknowledges guaranteed deliveries up to a tick.
    DeliveryAck = 0x10,
    /// Broker confirms a guaranteed subscription and its start ticks.
    Subscribed = 0x11,
    /// Client to broker over UDP: the address token a datagram starts with.
    Token = 0x12,
    /// Broker to client over UDP: the address token, in answer to a datagram without a valid
    /// one. A type of its own so that an answer is never mistaken for a request: a broker
    /// answers nothing that holds it, so two brokers cannot answer each other forever.
    TokenIssued = 0x13,
    /// Broker to client: nothing anywhere matches a request's subject.
    NoResponders = 0x14,
    /// Broker to client over UDP: the number of a datagram's first delivery, first in it.
    Sequence = 0x15,
    /// Broker to client: where else the client may connect (version 3).
    Servers = 0x16,
    /// GPUBLISH naming the pubend that acknowledged the publisher's last publish (its home).
    GuaranteedPublishHome = 0x17,
}

/// The highest type byte this version knows; the header check refuses anything above.
const LAST_FRAME_TYPE: u8 = FrameType::GuaranteedPublishHome as u8;

/// The pattern of every [`Frame`] only a broker sends (an answer, a delivery, a notice of its
/// own), written once: [`Frame::is_from_broker`] is this pattern, and a broker's session refuses
/// these frames with it as one arm of an exhaustive `match`, so neither list can drift from the
/// other and a new frame type must be placed on one side in both.
#[macro_export]
macro_rules! broker_frame {
    () => {
        $crate::Frame::Welcome(_)
            | $crate::Frame::Deliver(_)
            | $crate::Frame::Error(_)
            | $crate::Frame::PublishAck(_)
            | $crate::Frame::PublishRefused(_)
            | $crate::Frame::GuaranteedDeliver(_)
            | $crate::Frame::Gap(_)
            | $crate::Frame::Subscribed(_)
            | $crate::Frame::TokenIssued(_)
            | $crate::Frame::NoResponders(_)
            | $crate::Frame::Sequence(_)
            | $crate::Frame::Servers(_)
    };
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// See [`Hello`].
    Hello(Hello),
    /// See [`Welcome`].
    Welcome(Welcome),
    /// A message to publish; layout in [`Message`].
    Publish(Message),
    /// See [`Subscribe`].
    Subscribe(Subscribe),
    /// See [`Unsubscribe`].
    Unsubscribe(Unsubscribe),
    /// See [`Deliver`].
    Deliver(Deliver),
    /// See [`Ping`].
    Ping(Ping),
    /// See [`Pong`].
    Pong(Pong),
    /// See [`Notice`].
    Error(Notice),
    /// See [`Notice`].
    Disconnect(Notice),
    /// See [`GuaranteedPublish`].
    GuaranteedPublish(GuaranteedPublish),
    /// See [`PublishAck`].
    PublishAck(PublishAck),
    /// See [`PublishRefused`].
    PublishRefused(PublishRefused),
    /// See [`GuaranteedDeliver`].
    GuaranteedDeliver(GuaranteedDeliver),
    /// See [`Gap`].
    Gap(Gap),
    /// See [`DeliveryAck`].
    DeliveryAck(DeliveryAck),
    /// See [`Subscribed`].
    Subscribed(Subscribed),
    /// See [`Token`]: a client's, first in its datagram.
    Token(Token),
    /// See [`Token`]: the broker's answer giving a client its token.
    TokenIssued(Token),
    /// See [`NoResponders`].
    NoResponders(NoResponders),
    /// See [`Sequence`].
    Sequence(Sequence),
    /// See [`Servers`].
    Servers(Servers),
}

pub use welcome::Welcome;
mod welcome;

impl Frame {
    /// The type byte of this frame.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Hello(_) => FrameType::Hello,
            Frame::Welcome(_) => FrameType::Welcome,
            Frame::Publish(_) => FrameType::Publish,
            Frame::Subscribe(_) => FrameType::Subscribe,
            Frame::Unsubscribe(_) => FrameType::Unsubscribe,
            Frame::Deliver(_) => FrameType::Deliver,
            Frame::Ping(_) => FrameType::Ping,
            Frame::Pong(_) => FrameType::Pong,
            Frame::Error(_) => FrameType::Error,
            Frame::Disconnect(_) => FrameType::Disconnect,
            Frame::GuaranteedPublish(f) if f.home.is_some() => FrameType::GuaranteedPublishHome,
            Frame::GuaranteedPublish(_) => FrameType::GuaranteedPublish,
            Frame::PublishAck(_) => FrameType::PublishAck,
            Frame::PublishRefused(_) => FrameType::PublishRefused,
            Frame::GuaranteedDeliver(_) => FrameType::GuaranteedDeliver,
            Frame::Gap(_) => FrameType::Gap,
            Frame::DeliveryAck(_) => FrameType::DeliveryAck,
            Frame::Subscribed(_) => FrameType::Subscribed,
            Frame::Token(_) => FrameType::Token,
            Frame::TokenIssued(_) => FrameType::TokenIssued,
            Frame::NoResponders(_) => FrameType::NoResponders,
            Frame::Sequence(_) => FrameType::Sequence,
            Frame::Servers(_) => FrameType::Servers,
        }
    }

    /// Whether only a broker sends this frame (an answer, a delivery, a notice of its own):
    /// a datagram holding one is not a client's request, and a broker answers none of it.
    pub fn is_from_broker(&self) -> bool {
        // Exhaustive, so a new frame type is placed on one side here as well.
        match self {
            crate::broker_frame!() => true,
            Frame::Hello(_)
            | Frame::Publish(_)
            | Frame::Subscribe(_)
            | Frame::Unsubscribe(_)
            | Frame::Ping(_)
            | Frame::Pong(_)
            | Frame::Disconnect(_)
            | Frame::GuaranteedPublish(_)
            | Frame::DeliveryAck(_)
            | Frame::Token(_) => false,
        }
    }

    /// Appends the whole frame (length, type, body) to `out`. Fails only for a field that
    /// cannot be encoded (a topic over 65535 bytes); `out` is then left as it was.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), WireError> {
        encode_frame(out, self.frame_type() as u8, 0, |out| match self {
            Frame::Hello(f) => f.encode_body(out),
            Frame::Welcome(f) => f.encode_body(out),
            Frame::Publish(m) => {
                out.put_slice(m.as_bytes());
                Ok(())
            }
            Frame::Subscribe(f) => f.encode_body(out),
            Frame::Unsubscribe(f) => {
                f.encode_body(out);
                Ok(())
            }
            Frame::Deliver(f) => {
                f.encode_body(out);
                Ok(())
            }
            Frame::Ping(p) => {
                ping::encode_nonce(p.nonce, out);
                Ok(())
            }
            Frame::Pong(p) => {
                ping::encode_nonce(p.nonce, out);
                Ok(())
            }
            Frame::Error(n) | Frame::Disconnect(n) => n.encode_body(out),
            Frame::GuaranteedPublish(f) => f.encode_body(out),
            Frame::PublishAck(f) => {
                f.encode_body(out);
                Ok(())
            }
            Frame::PublishRefused(f) => f.encode_body(out),
            Frame::GuaranteedDeliver(f) => {
                f.encode_body(out);
                Ok(())
            }
            Frame::Gap(f) => {
                f.encode_body(out);
                Ok(())
            }
            Frame::DeliveryAck(f) => {
                f.encode_body(out);
                Ok(())
            }
            Frame::Subscribed(f) => f.encode_body(out),
            Frame::Token(f) | Frame::TokenIssued(f) => {
                f.encode_body(out);
                Ok(())
            }
            Frame::NoResponders(f) => f.encode_body(out),
            Frame::Sequence(f) => {
                f.encode_body(out);
                Ok(())
            }
            Frame::Servers(f) => f.encode_body(out),
        })
    }

    /// Encodes into a fresh buffer.
    pub fn to_bytes(&self) -> Result<Bytes, WireError> {
        let mut out = BytesMut::new();
        self.encode(&mut out)?;
        Ok(out.freeze())
    }

    /// Takes one whole frame off the front of `buf`. `Ok(None)` means the frame is not all
    /// there yet (nothing is consumed); an error means the stream is not valid tidings
    /// framing and should be closed. The frame's bytes are split off, not copied.
    pub fn decode(buf: &mut BytesMut, max_frame: usize) -> Result<Option<Frame>, WireError> {
        let Some((ty, len)) = peek_header(buf, max_frame)? else {
            return Ok(None);
        };
        Frame::decode_body(ty, split_body(buf, len)).map(Some)
    }

    /// Takes one frame off the front of a datagram. Unlike a stream, a datagram cannot grow,
    /// so a partial frame is an error here.
    pub fn decode_datagram(buf: &mut Bytes, max_frame: usize) -> Result<Frame, WireError> {
        match peek_header(buf, max_frame)? {
            Some((ty, len)) => {
                let mut frame = buf.split_to(4 + len);
                frame.advance(HEADER_LEN);
                Frame::decode_body(ty, frame)
            }
            None => Err(WireError::UnexpectedEof {
                frame: "datagram",
                field: "frame",
                offset: 0,
                need: needed(buf).unwrap_or(HEADER_LEN),
                have: buf.len(),
            }),
        }
    }

    /// Decodes a body whose type byte and exact length are known.
    pub fn decode_body(ty: u8, body: Bytes) -> Result<Frame, WireError> {
        Ok(match ty {
            0x01 => Frame::Hello(Hello::decode_body(&body)?),
            0x02 => Frame::Welcome(Welcome::decode_body(&body)?),
            0x03 => Frame::Publish(Message::decode(body)?),
            0x04 => Frame::Subscribe(Subscribe::decode_body(&body)?),
            0x05 => Frame::Unsubscribe(Unsubscribe::decode_body(&body)?),
            0x06 => Frame::Deliver(Deliver::decode_body(body)?),
            0x07 => Frame::Ping(Ping { nonce: ping::decode_nonce("PING", &body)? }),
            0x08 => Frame::Pong(Pong { nonce: ping::decode_nonce("PONG", &body)? }),
            0x09 => Frame::Error(Notice::decode_body("ERROR", &body)?),
            0x0A => Frame::Disconnect(Notice::decode_body("DISCONNECT", &body)?),
            0x0B => Frame::GuaranteedPublish(GuaranteedPublish::decode_body(body, false)?),
            0x0C => Frame::PublishAck(PublishAck::decode_body(&body)?),
            0x0D => Frame::PublishRefused(PublishRefused::decode_body(&body)?),
            0x0E => Frame::GuaranteedDeliver(GuaranteedDeliver::decode_body(body)?),
            0x0F => Frame::Gap(Gap::decode_body(&body)?),
            0x10 => Frame::DeliveryAck(DeliveryAck::decode_body(&body)?),
            0x11 => Frame::Subscribed(Subscribed::decode_body(&body)?),
            0x12 => Frame::Token(Token::decode_body(&body)?),
            0x13 => Frame::TokenIssued(Token::decode_body(&body)?),
            0x14 => Frame::NoResponders(NoResponders::decode_body(&body)?),
            0x15 => Frame::Sequence(Sequence::decode_body(&body)?),
            0x16 => Frame::Servers(Servers::decode_body("SERVERS", &body)?),
            0x17 => Frame::GuaranteedPublish(GuaranteedPublish::decode_body(body, true)?),
            other => return Err(WireError::UnknownFrameType(other)),
        })
    }
}

/// Reads a frame header: `Ok(Some((type, length)))` once the whole frame is in `buf`,
/// `Ok(None)` while more bytes are needed. Size and type are checked as soon as the header is
/// there, so an oversized or unknown frame fails before its body is buffered.
pub fn peek_header(buf: &[u8], max_frame: usize) -> Result<Option<(u8, usize)>, WireError> {
    peek(buf, max_frame, |ty| (0x01..=LAST_FRAME_TYPE).contains(&ty).then_some(ty))
}

/// How many more bytes the frame at the front of `buf` needs, when the header says.
pub fn needed(buf: &[u8]) -> Option<usize> {
    if buf.len() < 4 {
        return Some(4 - buf.len());
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    (4 + len).checked_sub(buf.len())
}

#[cfg(test)]
mod tests;

/// Feeds arbitrary bytes to the stream decoder the way a connection would, and checks that
/// every frame it accepts re-encodes to the same bytes. Never panics; the fuzz target and a
/// property test both call it.
pub fn check_decoder(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = Frame::decode(&mut buf, DEFAULT_MAX_FRAME) {
        let bytes = frame.to_bytes();
        let again = bytes.as_ref().ok().map(|b| Frame::decode(&mut BytesMut::from(&b[..]), DEFAULT_MAX_FRAME));
        assert!(matches!(again, Some(Ok(Some(ref f))) if *f == frame), "re-encoding changed {frame:?}");
    }
}
