//! GDELIVER, broker to subscriber. Layout: `id:u32 | pubend:u64 | tick:u64 | message section`.
//! The tick's top bit is the `redelivered` flag ([`REDELIVERED_FLAG`]): ticks are microseconds of a
//! broker's clock and stay far below 2^63, and a flag there needs no new field, so the frame
//! of every subscription that never sees the flag is unchanged.

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::frame::{FrameType, Message, SubId};
use crate::ids::{PubendId, Tick};

/// One message of a guaranteed subscription. Per pubend, ticks only increase and none that
/// matches is skipped without a GAP, so a client can check exactly-once order itself and
/// acknowledge by tick.
#[derive(Debug, Clone, PartialEq)]
pub struct GuaranteedDeliver {
    /// The subscription that matched.
    pub id: SubId,
    /// The stream the message belongs to.
    pub pubend: PubendId,
    /// Its place in that stream.
    pub tick: Tick,
    /// The message, as published.
    pub message: Message,
    /// Another member of a guaranteed queue group had this message and left without
    /// acknowledging it (work-queue redelivery): it may have been partly processed.
    pub redelivered: bool,
}

/// The bit of GDELIVER's `tick` field that flags a redelivery; the tick is the other 63 bits.
pub const REDELIVERED_FLAG: u64 = 1 << 63;

/// Bytes of a GDELIVER frame before its message section.
pub const GUARANTEED_DELIVER_HEADER_LEN: usize = 4 + 1 + 4 + 8 + 8;

impl GuaranteedDeliver {
    /// Writes only the frame header; the caller then writes `message.as_bytes()`, so one
    /// published buffer goes to many subscribers without a copy each. `tick` is written as
    /// given: a redelivery passes it with [`REDELIVERED_FLAG`] set (see [`Self::wire_tick`]).
    pub fn encode_header(id: SubId, pubend: PubendId, tick: Tick, message: &Message, out: &mut BytesMut) {
        let len = GUARANTEED_DELIVER_HEADER_LEN - 4 + message.encoded_len();
        out.put_u32(len as u32);
        out.put_u8(FrameType::GuaranteedDeliver as u8);
        out.put_u32(id.0);
        out.put_u64(pubend.0);
        out.put_u64(tick.0);
    }

    /// The tick field as sent: `tick` with the [`REDELIVERED_FLAG`] bit set for a redelivery.
    pub fn wire_tick(tick: Tick, redelivered: bool) -> Tick {
        Tick(if redelivered { tick.0 | REDELIVERED_FLAG } else { tick.0 & !REDELIVERED_FLAG })
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u32(self.id.0);
        out.put_u64(self.pubend.0);
        out.put_u64(Self::wire_tick(self.tick, self.redelivered).0);
        out.put_slice(self.message.as_bytes());
    }

    pub(crate) fn decode_body(body: Bytes) -> Result<GuaranteedDeliver, WireError> {
        let mut r = Reader::new("GDELIVER", &body);
        let id = SubId(r.u32("id")?);
        let pubend = PubendId(r.u64("pubend")?);
        let raw = r.u64("tick")?;
        let (tick, redelivered) = (Tick(raw & !REDELIVERED_FLAG), raw & REDELIVERED_FLAG != 0);
        let message = Message::decode(body.slice(r.position()..))?;
        Ok(GuaranteedDeliver { id, pubend, tick, message, redelivered })
    }
}
