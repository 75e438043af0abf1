//! SUBSCRIBE. Layout: `id:u32 | mode:u8 | pattern:str16 | selector:str16` (empty selector = none),
//! then, for mode 2 only, `durable:str16`: a guaranteed subscription with a durable name; then,
//! when the mode byte has its [`QUEUE_FLAG`] bit set, `group:str16`: the queue group the
//! subscription joins; then, when the mode byte also has its [`KEYED_FLAG`] bit set,
//! `key:str16`: the property whose value keeps a group's messages on one member. The optional
//! fields are versioned by the mode byte, so a broker that predates one refuses it as an
//! unknown mode instead of reading past it.

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
    /// The queue group this subscription joins: each matching message goes to one member of
    /// the group network-wide instead of to every member (a pool of workers sharing a topic).
    pub group: Option<String>,
    /// With `group`: the property whose value picks the member (messages with the same value go
    /// to the same member while it lives), instead of taking turns.
    pub queue_key: Option<String>,
}

/// The mode byte of a guaranteed subscription with a durable name.
const DURABLE: u8 = 2;

/// The mode byte's bit saying a queue group name ends the frame.
pub const QUEUE_FLAG: u8 = 0x80;

/// The mode byte's bit saying a queue key property follows the group name (only with
/// [`QUEUE_FLAG`]).
pub const KEYED_FLAG: u8 = 0x40;

/// The longest queue group name, in bytes: group names travel in routing summaries and in the
/// header of every message forwarded to a group, so they are kept short.
pub const MAX_GROUP_LEN: usize = 64;

/// Why a queue group name is refused, if it is: a name is what members agree on across the
/// network, so it must be non-empty, short, and free of pattern wildcards and spaces (a `*` or
/// `>` in it reads as if it could match several groups, which it cannot).
pub fn check_group_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a queue group name cannot be empty".into());
    }
    if name.len() > MAX_GROUP_LEN {
        return Err(format!("queue group name is {} bytes, more than the {MAX_GROUP_LEN} allowed", name.len()));
    }
    if let Some(bad) = name.chars().find(|c| matches!(c, '*' | '>')) {
        return Err(format!("queue group name {name:?} has the wildcard {bad:?}: a group name is a plain name"));
    }
    if let Some(bad) = name.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("queue group name {name:?} has the character {bad:?}: no spaces or control characters"));
    }
    Ok(())
}

impl Subscribe {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u32(self.id.0);
        let flag = match (&self.group, &self.queue_key) {
            (Some(_), Some(_)) => QUEUE_FLAG | KEYED_FLAG,
            (Some(_), None) => QUEUE_FLAG,
            (None, Some(_)) => {
                return Err(WireError::InvalidField { frame: "SUBSCRIBE", field: "queue_key", value: 0 })
            }
            (None, None) => 0,
        };
        match (&self.durable, self.mode) {
            (Some(_), DeliveryMode::Guaranteed) => out.put_u8(DURABLE | flag),
            (Some(_), DeliveryMode::BestEffort) => {
                return Err(WireError::InvalidField { frame: "SUBSCRIBE", field: "mode", value: 0 })
            }
            (None, mode) => out.put_u8(mode as u8 | flag),
        }
        put_str16(out, "pattern", &self.pattern)?;
        put_str16(out, "selector", self.selector.as_deref().unwrap_or(""))?;
        if let Some(name) = &self.durable {
            put_str16(out, "durable", name)?;
        }
        if let Some(group) = &self.group {
            put_str16(out, "group", group)?;
        }
        match &self.queue_key {
            Some(key) => put_str16(out, "queue_key", key),
            None => Ok(()),
        }
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Subscribe, WireError> {
        let mut r = Reader::new("SUBSCRIBE", body);
        let id = SubId(r.u32("id")?);
        let byte = r.u8("mode")?;
        if byte & KEYED_FLAG != 0 && byte & QUEUE_FLAG == 0 {
            return Err(WireError::InvalidField { frame: "SUBSCRIBE", field: "mode", value: u64::from(byte) });
        }
        let flags = QUEUE_FLAG | KEYED_FLAG;
        let mode = match byte & !flags {
            0 => DeliveryMode::BestEffort,
            1 | DURABLE => DeliveryMode::Guaranteed,
            _ => return Err(WireError::InvalidField { frame: "SUBSCRIBE", field: "mode", value: u64::from(byte) }),
        };
        let pattern = r.str16("pattern")?.to_string();
        let selector = r.str16("selector")?;
        let selector = (!selector.is_empty()).then(|| selector.to_string());
        let durable = match byte & !flags {
            DURABLE => Some(r.str16("durable")?.to_string()),
            _ => None,
        };
        let group = match byte & QUEUE_FLAG {
            0 => None,
            _ => Some(r.str16("group")?.to_string()),
        };
        let queue_key = match byte & KEYED_FLAG {
            0 => None,
            _ => Some(r.str16("queue_key")?.to_string()),
        };
        r.finish()?;
        Ok(Subscribe { id, mode, pattern, selector, durable, group, queue_key })
    }
}
