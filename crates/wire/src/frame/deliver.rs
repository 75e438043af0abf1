//! DELIVER, broker to subscriber. Layout: `id:u32 | missed:u32 | message section`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::frame::{FrameType, Message, SubId};

/// One message for one subscription. `missed` counts the messages this subscription lost to
/// the slow-consumer drop policy since its previous delivery, so loss is never silent.
#[derive(Debug, Clone, PartialEq)]
pub struct Deliver {
    /// The subscription that matched.
    pub id: SubId,
    /// Messages dropped for this subscription since its last delivery.
    pub missed: u32,
    /// The message, as published.
    pub message: Message,
}

/// Bytes of a DELIVER frame before its message section: length, type, id and missed.
pub const DELIVER_HEADER_LEN: usize = 4 + 1 + 4 + 4;

impl Deliver {
    /// Writes only the frame header for a delivery of `message`; the caller then writes
    /// `message.as_bytes()` (or hands it to a vectored write). This is how a broker sends one
    /// published buffer to many subscribers without copying it per subscriber.
    pub fn encode_header(id: SubId, missed: u32, message: &Message, out: &mut BytesMut) {
        let len = 1 + 4 + 4 + message.encoded_len();
        out.put_u32(len as u32);
        out.put_u8(FrameType::Deliver as u8);
        out.put_u32(id.0);
        out.put_u32(missed);
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u32(self.id.0);
        out.put_u32(self.missed);
        out.put_slice(self.message.as_bytes());
    }

    pub(crate) fn decode_body(body: Bytes) -> Result<Deliver, WireError> {
        let mut r = Reader::new("DELIVER", &body);
        let id = SubId(r.u32("id")?);
        let missed = r.u32("missed")?;
        let message = Message::decode(body.slice(r.position()..))?;
        Ok(Deliver { id, missed, message })
    }
}
