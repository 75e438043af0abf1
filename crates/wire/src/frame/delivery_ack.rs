//! DELIVERY_ACK, subscriber to broker. Layout: `id:u32 | pubend:u64 | tick:u64`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::frame::SubId;
use crate::ids::{PubendId, Tick};

/// The application has taken every delivery of this subscription from `pubend` up to and
/// including `tick` (cumulative). The broker may then stop holding those messages for it, and a
/// resumed or durable subscription restarts after this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryAck {
    /// The subscription acknowledging.
    pub id: SubId,
    /// The stream acknowledged.
    pub pubend: PubendId,
    /// The last tick taken.
    pub tick: Tick,
}

impl DeliveryAck {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u32(self.id.0);
        out.put_u64(self.pubend.0);
        out.put_u64(self.tick.0);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<DeliveryAck, WireError> {
        let mut r = Reader::new("DELIVERY_ACK", body);
        let id = SubId(r.u32("id")?);
        let pubend = PubendId(r.u64("pubend")?);
        let tick = Tick(r.u64("tick")?);
        r.finish()?;
        Ok(DeliveryAck { id, pubend, tick })
    }
}
