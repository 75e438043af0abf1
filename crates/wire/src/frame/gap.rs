//! GAP, broker to subscriber. Layout: `id:u32 | pubend:u64 | from:u64 | to:u64`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::frame::SubId;
use crate::ids::{PubendId, Tick};

/// The ticks `from..=to` of a pubend can no longer be supplied (released from the log by a
/// retention policy, or unreadable on disk). Messages there may have matched this
/// subscription: a gap says "possibly missed", never silently nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The subscription concerned.
    pub id: SubId,
    /// The stream with the gap.
    pub pubend: PubendId,
    /// First lost tick.
    pub from: Tick,
    /// Last lost tick (inclusive).
    pub to: Tick,
}

impl Gap {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u32(self.id.0);
        out.put_u64(self.pubend.0);
        out.put_u64(self.from.0);
        out.put_u64(self.to.0);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Gap, WireError> {
        let mut r = Reader::new("GAP", body);
        let id = SubId(r.u32("id")?);
        let pubend = PubendId(r.u64("pubend")?);
        let from = Tick(r.u64("from")?);
        let to = Tick(r.u64("to")?);
        r.finish()?;
        if from > to {
            return Err(WireError::InvalidField { frame: "GAP", field: "to", value: to.0 });
        }
        Ok(Gap { id, pubend, from, to })
    }
}
