//! PUBLISH_ACK, broker to client. Layout: `publisher:u64 | seq:u64 | pubend:u64 | tick:u64`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::ids::{PubendId, PublisherId, Tick};

/// The broker's promise: the publish `(publisher, seq)` is in the pubend's log on disk (the
/// sync covering it returned) at `tick`, and will reach every matching guaranteed subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishAck {
    /// The publisher the acknowledged publish came from.
    pub publisher: PublisherId,
    /// Its sequence number.
    pub seq: u64,
    /// The pubend that logged it.
    pub pubend: PubendId,
    /// Its place in the pubend's stream.
    pub tick: Tick,
}

impl PublishAck {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u64(self.publisher.0);
        out.put_u64(self.seq);
        out.put_u64(self.pubend.0);
        out.put_u64(self.tick.0);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<PublishAck, WireError> {
        let mut r = Reader::new("PUBLISH_ACK", body);
        let publisher = PublisherId(r.u64("publisher")?);
        let seq = r.u64("seq")?;
        let pubend = PubendId(r.u64("pubend")?);
        let tick = Tick(r.u64("tick")?);
        r.finish()?;
        Ok(PublishAck { publisher, seq, pubend, tick })
    }
}
