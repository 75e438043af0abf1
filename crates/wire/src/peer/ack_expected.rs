//! ACK_EXPECTED, a sender asks for acknowledgement. Layout: `pubend:u64 | tick:u64`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::peer::{PubendId, Tick};

/// "I have sent `pubend` through `tick`; tell me what you have" (gd-protocol §7, timer AET):
/// how a sender finds a lost tail that no later message would reveal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckExpected {
    /// The stream.
    pub pubend: PubendId,
    /// The last tick sent (inclusive).
    pub tick: Tick,
}

impl AckExpected {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u64(self.pubend.0);
        out.put_u64(self.tick.0);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<AckExpected, WireError> {
        let mut r = Reader::new("ACK_EXPECTED", body);
        let pubend = PubendId(r.u64("pubend")?);
        let tick = Tick(r.u64("tick")?);
        r.finish()?;
        Ok(AckExpected { pubend, tick })
    }
}
