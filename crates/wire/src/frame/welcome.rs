//! WELCOME, the broker's answer to HELLO. Layout: `version:u16 | max_frame:u32 | server_name:str16`.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;

/// Completes the handshake and tells the client the limits it must respect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The protocol version the session will use.
    pub version: u16,
    /// The largest frame (type byte and body) the broker accepts.
    pub max_frame: u32,
    /// The broker's name.
    pub server_name: String,
}

impl Welcome {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u16(self.version);
        out.put_u32(self.max_frame);
        put_str16(out, "server_name", &self.server_name)
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Welcome, WireError> {
        let mut r = Reader::new("WELCOME", body);
        let version = r.u16("version")?;
        let max_frame = r.u32("max_frame")?;
        let server_name = r.str16("server_name")?.to_string();
        r.finish()?;
        Ok(Welcome { version, max_frame, server_name })
    }
}
