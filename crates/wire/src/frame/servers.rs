//! SERVERS, the broker's list of where else a client may connect: the client TCP addresses of
//! the broker and of its linked cell mates (issue 40). Layout: `count:u16 | count × address:str16`,
//! at most [`MAX_SERVERS`] entries, each `host:port` as a client writes it in `--server`.
//!
//! The same body is the peer frame SERVERS (peer protocol 7), by which a broker tells each
//! linked broker its own client addresses: one layout, one codec.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;

/// The most addresses one SERVERS frame carries: a cell is a handful of brokers, and a client
/// keeps a bounded list whatever it is told.
pub const MAX_SERVERS: usize = 64;

/// The first client protocol version whose sessions are sent SERVERS: an older client closes
/// its connection on an unknown type byte, so a broker sends it only to clients that said 3 or
/// later in their HELLO.
pub const SERVERS_VERSION: u16 = 3;

/// Where a client may reach the broker's cell, so that a client given one address can fail
/// over to a mate (`docs/replication.md`, "Clients"). Sent after WELCOME and again whenever
/// the list changes; each frame replaces the last.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Servers {
    /// Client TCP addresses, `host:port`, the sender's own first.
    pub addresses: Vec<String>,
}

impl Servers {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        if self.addresses.len() > MAX_SERVERS {
            return Err(WireError::TooLong { field: "addresses", len: self.addresses.len(), max: MAX_SERVERS });
        }
        out.put_u16(self.addresses.len() as u16);
        for address in &self.addresses {
            put_str16(out, "address", address)?;
        }
        Ok(())
    }

    pub(crate) fn decode_body(frame: &'static str, body: &[u8]) -> Result<Servers, WireError> {
        let mut r = Reader::new(frame, body);
        let count = r.u16("count")?;
        if usize::from(count) > MAX_SERVERS {
            return Err(WireError::InvalidField { frame, field: "count", value: u64::from(count) });
        }
        let addresses = (0..count).map(|_| r.str16("address").map(str::to_string)).collect::<Result<_, _>>()?;
        r.finish()?;
        Ok(Servers { addresses })
    }
}
