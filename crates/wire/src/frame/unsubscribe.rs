//! UNSUBSCRIBE. Layout: `id:u32`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::frame::SubId;

/// Ends one subscription of the session; the others stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsubscribe {
    /// The id given at SUBSCRIBE.
    pub id: SubId,
}

impl Unsubscribe {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u32(self.id.0);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Unsubscribe, WireError> {
        let mut r = Reader::new("UNSUBSCRIBE", body);
        let id = SubId(r.u32("id")?);
        r.finish()?;
        Ok(Unsubscribe { id })
    }
}
