//! PUBLISH_REFUSED, broker to client. Layout: `publisher:u64 | seq:u64 | code:u16 | text:str16`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::frame::Notice;
use crate::ids::PublisherId;

/// A guaranteed publish the broker will not log (disk full, retention backpressure, a bad
/// pubend name). Unlike ERROR the session stays open: the refusal concerns this publish only,
/// and the publisher decides whether to retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishRefused {
    /// The publisher the refused publish came from.
    pub publisher: PublisherId,
    /// Its sequence number.
    pub seq: u64,
    /// Why, as a numbered reason with text.
    pub reason: Notice,
}

impl PublishRefused {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u64(self.publisher.0);
        out.put_u64(self.seq);
        self.reason.encode_body(out)
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<PublishRefused, WireError> {
        let mut r = Reader::new("PUBLISH_REFUSED", body);
        let publisher = PublisherId(r.u64("publisher")?);
        let seq = r.u64("seq")?;
        let reason = Notice::decode_body("PUBLISH_REFUSED", &body[r.position()..])?;
        Ok(PublishRefused { publisher, seq, reason })
    }
}
