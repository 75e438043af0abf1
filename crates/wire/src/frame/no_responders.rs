//! NO_RESPONDERS, broker to client. Layout: `reply_to:str16`.

use bytes::BytesMut;

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;

/// The answer to a request (a PUBLISH carrying a reply subject) that nothing anywhere in the
/// network would receive: no local subscription matched and no neighbour's routing summary
/// wanted it. Sent at once by the publisher's broker, so a requester learns it in a round trip
/// rather than after its timeout. `reply_to` is the request's reply subject, which the client
/// made unique per request, so it names the request that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoResponders {
    /// The reply subject of the request nobody would answer.
    pub reply_to: String,
}

impl NoResponders {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        put_str16(out, "reply_to", &self.reply_to)
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<NoResponders, WireError> {
        let mut r = Reader::new("NO_RESPONDERS", body);
        let reply_to = r.str16("reply_to")?.to_string();
        r.finish()?;
        Ok(NoResponders { reply_to })
    }
}
