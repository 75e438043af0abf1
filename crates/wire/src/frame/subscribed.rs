//! SUBSCRIBED, broker to subscriber. Layout: `id:u32 | count:u16 | (pubend:u64 | tick:u64) x count`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::frame::SubId;
use crate::ids::{PubendId, Tick};

/// A guaranteed subscription is in force: every broker between it and each publisher's broker
/// holds it, so every matching message from the listed start tick of each pubend on will
/// arrive. Pubends that appear later start at their first tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribed {
    /// The subscription confirmed.
    pub id: SubId,
    /// Per known pubend, the first tick the subscription covers.
    pub starts: Vec<(PubendId, Tick)>,
}

impl Subscribed {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        let count = u16::try_from(self.starts.len()).map_err(|_| WireError::TooLong {
            field: "starts",
            len: self.starts.len(),
            max: usize::from(u16::MAX),
        })?;
        out.put_u32(self.id.0);
        out.put_u16(count);
        for (pubend, tick) in &self.starts {
            out.put_u64(pubend.0);
            out.put_u64(tick.0);
        }
        Ok(())
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Subscribed, WireError> {
        let mut r = Reader::new("SUBSCRIBED", body);
        let id = SubId(r.u32("id")?);
        let count = r.u16("count")?;
        let mut starts = Vec::with_capacity(usize::from(count).min(body.len() / 16));
        for _ in 0..count {
            let pubend = PubendId(r.u64("pubend")?);
            starts.push((pubend, Tick(r.u64("tick")?)));
        }
        r.finish()?;
        Ok(Subscribed { id, starts })
    }
}
