//! HELLO, the client's first frame. Layout: `version:u16 | client_name:str16`.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;

/// Opens a session: names the client (for logs and metrics) and the protocol version it
/// speaks, so the broker can refuse a version it does not know instead of misreading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version the client speaks.
    pub version: u16,
    /// A free-form client name.
    pub client_name: String,
}

impl Hello {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u16(self.version);
        put_str16(out, "client_name", &self.client_name)
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Hello, WireError> {
        let mut r = Reader::new("HELLO", body);
        let version = r.u16("version")?;
        let client_name = r.str16("client_name")?.to_string();
        r.finish()?;
        Ok(Hello { version, client_name })
    }
}
