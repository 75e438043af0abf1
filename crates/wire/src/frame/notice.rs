//! ERROR and DISCONNECT. Layout of both: `code:u16 | text:str16`.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;
use crate::reason::ReasonCode;

/// A numbered reason with human text. ERROR reports a refused frame (the broker then closes
/// the connection); DISCONNECT announces an orderly close by either side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The reason number; see [`ReasonCode`]. Kept raw so a newer peer's codes survive.
    pub code: u16,
    /// Human-readable detail.
    pub text: String,
}

impl Notice {
    /// A notice for a known reason.
    pub fn new(reason: ReasonCode, text: impl Into<String>) -> Notice {
        Notice { code: reason.code(), text: text.into() }
    }

    /// The reason, if this version knows the number.
    pub fn reason(&self) -> Option<ReasonCode> {
        ReasonCode::from_code(self.code)
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u16(self.code);
        // Reason text is for people; cut it rather than fail the close it explains.
        let mut end = self.text.len().min(1024);
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        put_str16(out, "text", &self.text[..end])
    }

    pub(crate) fn decode_body(frame: &'static str, body: &[u8]) -> Result<Notice, WireError> {
        let mut r = Reader::new(frame, body);
        let code = r.u16("code")?;
        let text = r.str16("text")?.to_string();
        r.finish()?;
        Ok(Notice { code, text })
    }
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason() {
            Some(r) => write!(f, "{r}: {}", self.text),
            None => write!(f, "reason {}: {}", self.code, self.text),
        }
    }
}
