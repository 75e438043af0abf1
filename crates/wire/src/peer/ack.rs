//! ACK, upstream acknowledgement and release. Layout: `pubend:u64 | ack_prefix:u64 | release_prefix:u64`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::peer::{PubendId, Tick};

/// Everything below `ack_prefix` is known (D delivered or F) downstream, and everything below
/// `release_prefix` may be dropped from the pubend log (gd-protocol §4, §9). Both prefixes are
/// exclusive, so `Tick(0)` says "nothing yet".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The stream.
    pub pubend: PubendId,
    /// Ticks below this are acknowledged.
    pub ack_prefix: Tick,
    /// Ticks below this may be released.
    pub release_prefix: Tick,
}

impl Ack {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u64(self.pubend.0);
        out.put_u64(self.ack_prefix.0);
        out.put_u64(self.release_prefix.0);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Ack, WireError> {
        let mut r = Reader::new("ACK", body);
        let pubend = PubendId(r.u64("pubend")?);
        let ack_prefix = Tick(r.u64("ack_prefix")?);
        let release_prefix = Tick(r.u64("release_prefix")?);
        r.finish()?;
        Ok(Ack { pubend, ack_prefix, release_prefix })
    }
}
