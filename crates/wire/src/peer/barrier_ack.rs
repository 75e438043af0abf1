//! BARRIER_ACK, the publisher side's answer to a barrier. Layout:
//! `origin:str16 | id:u64 | count:u32 | count × (pubend:u64 | next_tick:u64)`.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_count, put_str16, Reader};
use crate::error::WireError;
use crate::peer::{BarrierId, PubendId, Tick};

/// The answer to [`crate::peer::Barrier`] `id` of `origin`: for each pubend of the answering
/// broker, the next tick it will assign. From those ticks on, every matching message reaches
/// the subscriptions the barrier covered, so the subscriber's broker starts them there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarrierAck {
    /// The broker that started the barrier.
    pub origin: String,
    /// The barrier answered.
    pub id: BarrierId,
    /// Each pubend's next tick.
    pub starts: Vec<PubendStart>,
}

/// Where one pubend's stream starts for the subscriptions behind a barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PubendStart {
    /// The stream.
    pub pubend: PubendId,
    /// The next tick it will assign.
    pub next_tick: Tick,
}

impl BarrierAck {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        put_str16(out, "origin", &self.origin)?;
        out.put_u64(self.id.0);
        put_count(out, "starts", self.starts.len())?;
        for start in &self.starts {
            out.put_u64(start.pubend.0);
            out.put_u64(start.next_tick.0);
        }
        Ok(())
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<BarrierAck, WireError> {
        let mut r = Reader::new("BARRIER_ACK", body);
        let origin = r.str16("origin")?.to_string();
        let id = BarrierId(r.u64("id")?);
        let count = r.count("starts", 16)?;
        let mut starts = Vec::with_capacity(count);
        for _ in 0..count {
            let pubend = PubendId(r.u64("pubend")?);
            let next_tick = Tick(r.u64("next_tick")?);
            starts.push(PubendStart { pubend, next_tick });
        }
        r.finish()?;
        Ok(BarrierAck { origin, id, starts })
    }
}
