//! GDELIVER, broker to subscriber. Layout: `id:u32 | pubend:u64 | tick:u64 | message section`.

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
}

/// Bytes of a GDELIVER frame before its message section.
pub const GUARANTEED_DELIVER_HEADER_LEN: usize = 4 + 1 + 4 + 8 + 8;

impl GuaranteedDeliver {
    /// Writes only the frame header; the caller then writes `message.as_bytes()`, so one
    /// published buffer goes to many subscribers without a copy each.
    pub fn encode_header(id: SubId, pubend: PubendId, tick: Tick, message: &Message, out: &mut BytesMut) {
        let len = GUARANTEED_DELIVER_HEADER_LEN - 4 + message.encoded_len();
        out.put_u32(len as u32);
        out.put_u8(FrameType::GuaranteedDeliver as u8);
        out.put_u32(id.0);
        out.put_u64(pubend.0);
        out.put_u64(tick.0);
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u32(self.id.0);
        out.put_u64(self.pubend.0);
        out.put_u64(self.tick.0);
        out.put_slice(self.message.as_bytes());
    }

    pub(crate) fn decode_body(body: Bytes) -> Result<GuaranteedDeliver, WireError> {
        let mut r = Reader::new("GDELIVER", &body);
        let id = SubId(r.u32("id")?);
        let pubend = PubendId(r.u64("pubend")?);
        let tick = Tick(r.u64("tick")?);
        let message = Message::decode(body.slice(r.position()..))?;
        Ok(GuaranteedDeliver { id, pubend, tick, message })
    }
}
