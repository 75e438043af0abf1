//! CLOSE, sent before a deliberate close of a link. Layout: `reason:str16`.

use bytes::BytesMut;

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;

/// Why the sender is closing the link (a refused handshake, a protocol error, shutdown), so
/// the other side's log says more than "connection lost".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// Human-readable reason.
    pub reason: String,
}

impl Close {
    /// A close with this reason, cut to what a `str16` holds (at a character boundary).
    pub fn new(reason: &str) -> Close {
        let mut end = reason.len().min(usize::from(u16::MAX));
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        Close { reason: reason[..end].to_string() }
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        put_str16(out, "reason", &self.reason)
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Close, WireError> {
        let mut r = Reader::new("CLOSE", body);
        let reason = r.str16("reason")?.to_string();
        r.finish()?;
        Ok(Close { reason })
    }
}
