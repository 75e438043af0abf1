//! NACK, upstream curiosity about missing ticks. Layout:
//! `pubend:u64 | count:u32 | count × (first:u64 | last:u64)`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::peer::ids::{put_ranges, read_ranges};
use crate::peer::{PubendId, TickRange};

/// The receiver should send what it knows of these ticks of `pubend` (gd-protocol §4: C
/// curiosity); it answers with DATA or SILENCE marked `requested_only`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    /// The stream.
    pub pubend: PubendId,
    /// The ticks asked for, sorted and disjoint.
    pub ranges: Vec<TickRange>,
}

impl Nack {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u64(self.pubend.0);
        put_ranges(out, &self.ranges)
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Nack, WireError> {
        let mut r = Reader::new("NACK", body);
        let pubend = PubendId(r.u64("pubend")?);
        let ranges = read_ranges(&mut r, "NACK")?;
        r.finish()?;
        Ok(Nack { pubend, ranges })
    }
}
