//! GPUBLISH, client to broker. Layout: `publisher:u64 | seq:u64 | pubend:str16 | message section`
//! (an empty pubend name means the broker's default pubend). GPUBLISH_HOME, the same with
//! `home:u64` after `seq`: the pubend that acknowledged the publisher's last publish of that
//! name, so a broker it moved to logs its retries there or refuses them, never in a pubend of
//! its own where they would be new (`docs/replication.md`, "Clients").

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;
use crate::frame::Message;
use crate::ids::{PubendId, PublisherId};

/// A publish that must be logged before it is acknowledged and then reach every matching
/// guaranteed subscriber exactly once. `(publisher, seq)` makes a retry after a lost
/// PUBLISH_ACK harmless: the broker answers it with the tick it already gave.
#[derive(Debug, Clone, PartialEq)]
pub struct GuaranteedPublish {
    /// The publisher's id, the same for every publish of one publisher.
    pub publisher: PublisherId,
    /// The publisher's sequence number, increasing by one per new message.
    pub seq: u64,
    /// The pubend to publish on, by name; empty for the broker's default pubend.
    pub pubend: String,
    /// The pubend (by id) that acknowledged this publisher's last publish of that name, if
    /// any: where its publishes not acknowledged yet may already be logged. Sent as
    /// GPUBLISH_HOME; `None` as GPUBLISH.
    pub home: Option<PubendId>,
    /// The message, as for PUBLISH.
    pub message: Message,
}

impl GuaranteedPublish {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u64(self.publisher.0);
        out.put_u64(self.seq);
        if let Some(home) = self.home {
            out.put_u64(home.0);
        }
        put_str16(out, "pubend", &self.pubend)?;
        out.put_slice(self.message.as_bytes());
        Ok(())
    }

    /// Decodes a GPUBLISH body, or a GPUBLISH_HOME's when `with_home`.
    pub(crate) fn decode_body(body: Bytes, with_home: bool) -> Result<GuaranteedPublish, WireError> {
        let mut r = Reader::new(if with_home { "GPUBLISH_HOME" } else { "GPUBLISH" }, &body);
        let publisher = PublisherId(r.u64("publisher")?);
        let seq = r.u64("seq")?;
        let home = match with_home {
            true => Some(PubendId(r.u64("home")?)),
            false => None,
        };
        let pubend = r.str16("pubend")?.to_string();
        let message = Message::decode(body.slice(r.position()..))?;
        Ok(GuaranteedPublish { publisher, seq, pubend, home, message })
    }
}
