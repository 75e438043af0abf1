//! SUBSCRIBE. Layout: `id:u32 | mode:u8 | pattern:str16 | selector:str16` (empty selector = none),
//! then, for mode 2 only, `durable:str16`: a guaranteed subscription with a durable name.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;

/// The client-chosen number that names a subscription within its session. DELIVER frames carry
/// it so a client with many subscriptions knows which one matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubId(pub u32);

/// How a subscription wants its messages. Reserved now so that guaranteed delivery can be added
/// without a new frame type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DeliveryMode {
    /// At most once, as fast as possible.
    BestEffort = 0,
    /// Exactly once and in order, across broker failures (gd-protocol.md).
    Guaranteed = 1,
}

/// Asks for every message whose topic matches `pattern` and, if given, whose properties make
/// `selector` true.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Client-chosen id, unique among the session's active subscriptions.
    pub id: SubId,
    /// Best effort or guaranteed.
    pub mode: DeliveryMode,
    /// Topic pattern (`a.*.c`, `a.>`).
    pub pattern: String,
    /// Selector text over message properties; `None` matches every message of the pattern.
    pub selector: Option<String>,
    /// A durable subscription's name (guaranteed mode only; mode byte 2 on the wire): the
    /// broker keeps it, and what it matches, while no client holds it, and a client that comes
    /// back with the name resumes after the last message it acknowledged.
    pub durable: Option<String>,
}

/// The mode byte of a guaranteed subscription with a durable name.
const DURABLE: u8 = 2;

impl Subscribe {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u32(self.id.0);
        match (&self.durable, self.mode) {
            (Some(_), DeliveryMode::Guaranteed) => out.put_u8(DURABLE),
            (Some(_), DeliveryMode::BestEffort) => {
                return Err(WireError::InvalidField { frame: "SUBSCRIBE", field: "mode", value: 0 })
            }
            (None, mode) => out.put_u8(mode as u8),
        }
        put_str16(out, "pattern", &self.pattern)?;
        put_str16(out, "selector", self.selector.as_deref().unwrap_or(""))?;
        match &self.durable {
            Some(name) => put_str16(out, "durable", name),
            None => Ok(()),
        }
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Subscribe, WireError> {
        let mut r = Reader::new("SUBSCRIBE", body);
        let id = SubId(r.u32("id")?);
        let byte = r.u8("mode")?;
        let mode = match byte {
            0 => DeliveryMode::BestEffort,
            1 | DURABLE => DeliveryMode::Guaranteed,
            v => return Err(WireError::InvalidField { frame: "SUBSCRIBE", field: "mode", value: u64::from(v) }),
        };
        let pattern = r.str16("pattern")?.to_string();
        let selector = r.str16("selector")?;
        let selector = (!selector.is_empty()).then(|| selector.to_string());
        let durable = match byte {
            DURABLE => Some(r.str16("durable")?.to_string()),
            _ => None,
        };
        r.finish()?;
        Ok(Subscribe { id, mode, pattern, selector, durable })
    }
}
