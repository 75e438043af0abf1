//! GROUP, a guaranteed queue group's traffic between a member's broker and the group's home
//! broker (docs/protocol.md, "Guaranteed queue groups"). Layout:
//! `origin:str16 | dest:str16 | kind:u8 | member:u64 | body`, where `origin` and `dest` are the
//! brokers at the two ends (brokers between them hand the frame on toward `dest`), `member` is
//! the member's number at its own broker and the body is, by kind:
//! 1 JOIN `group:str16 | pattern:str16 | selector:str16 | key:str16` (an empty selector or key:
//! none), 2 JOINED (empty), 3 REFUSED `code:u16 | reason:str16`, 4 LEAVE (empty),
//! 5 LEASE `pubend:u64 | tick:u64 | redelivered:u8 | message section`, 6 ACK `pubend:u64 | tick:u64`,
//! 7 RESET (empty, `member` 0): what passed between `origin` and `dest` may have been lost.
//!
//! Why one frame with kinds: the seven travel together between the same two ends, in the
//! links' guaranteed lanes (in order, never dropped), and only brokers that speak peer protocol
//! version 6 ([`GROUP_VERSION`]) are sent any. Why the two ends in every frame: a member's
//! broker need not be linked to the home; every broker on the way hands the frame on along its
//! shortest path to `dest`, and a broker that loses a link the frames of two ends went over
//! tells each end it can still reach (RESET), so both ends start again.

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;
use crate::frame::Message;
use crate::peer::{PubendId, Tick};

/// The first peer protocol version with this GROUP (version 5's had no ends and was not
/// relayed): an older broker closes a link on the unknown type byte or layout, so GROUP goes
/// only over links that negotiated this, and one arriving on an older link is not read.
pub const GROUP_VERSION: u16 = 6;

const JOIN: u8 = 1;
const JOINED: u8 = 2;
const REFUSED: u8 = 3;
const LEAVE: u8 = 4;
const LEASE: u8 = 5;
const ACK: u8 = 6;
const RESET: u8 = 7;

/// One message about one remote member of a guaranteed queue group.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The broker that sent it (for a RESET: the end whose traffic may have been lost).
    pub origin: String,
    /// The broker it is for; others hand it on.
    pub dest: String,
    /// The member, as its own broker numbers it (its subscription's subend there).
    pub member: u64,
    /// What is said about it.
    pub body: GroupBody,
}

/// What a member's broker and the group's home tell each other.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupBody {
    /// Member's broker -> home: the member joins `group` with this filter (and key).
    Join {
        /// The group's name.
        group: String,
        /// The members' pattern.
        pattern: String,
        /// Their selector, if any.
        selector: Option<String>,
        /// The property a keyed group is keyed by.
        key: Option<String>,
    },
    /// Home -> member's broker: the member is in the group (its SUBSCRIBED may go).
    Joined,
    /// Home -> member's broker: the join was refused (another filter, storage), with why.
    Refused {
        /// The reason code the member's client gets (as for a local join refused).
        code: u16,
        /// Why, for the member's client.
        reason: String,
    },
    /// Member's broker -> home: the member left (unsubscribed or its session closed).
    Leave,
    /// Home -> member's broker: a message leased to the member.
    Lease {
        /// Its pubend.
        pubend: PubendId,
        /// Its tick.
        tick: Tick,
        /// Another member had it before (or may have, after a restart).
        redelivered: bool,
        /// The published message section, verbatim.
        message: Message,
    },
    /// Member's broker -> home: the member acknowledged one message (not a prefix).
    Ack {
        /// Its pubend.
        pubend: PubendId,
        /// Its tick.
        tick: Tick,
    },
    /// Either way, from an end or a broker between: what passed between `origin` and `dest`
    /// may have been lost (a link on their path went down or the path moved), so `dest`
    /// forgets what it holds of `origin` (the home: its members leave; a member's broker: its
    /// members join again).
    Reset,
}

fn put_opt(out: &mut BytesMut, field: &'static str, value: &Option<String>) -> Result<(), WireError> {
    put_str16(out, field, value.as_deref().unwrap_or(""))
}

fn opt(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

impl Group {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        let start = out.len();
        let result = self.encode_into(out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_into(&self, out: &mut BytesMut) -> Result<(), WireError> {
        let kind = match &self.body {
            GroupBody::Join { .. } => JOIN,
            GroupBody::Joined => JOINED,
            GroupBody::Refused { .. } => REFUSED,
            GroupBody::Leave => LEAVE,
            GroupBody::Lease { .. } => LEASE,
            GroupBody::Ack { .. } => ACK,
            GroupBody::Reset => RESET,
        };
        put_str16(out, "origin", &self.origin)?;
        put_str16(out, "dest", &self.dest)?;
        out.put_u8(kind);
        out.put_u64(self.member);
        match &self.body {
            GroupBody::Join { group, pattern, selector, key } => {
                put_str16(out, "group", group)?;
                put_str16(out, "pattern", pattern)?;
                put_opt(out, "selector", selector)?;
                put_opt(out, "key", key)?;
            }
            GroupBody::Refused { code, reason } => {
                out.put_u16(*code);
                put_str16(out, "reason", reason)?;
            }
            GroupBody::Joined | GroupBody::Leave | GroupBody::Reset => {}
            GroupBody::Lease { pubend, tick, redelivered, message } => {
                out.put_u64(pubend.0);
                out.put_u64(tick.0);
                out.put_u8(u8::from(*redelivered));
                out.put_slice(message.as_bytes());
            }
            GroupBody::Ack { pubend, tick } => {
                out.put_u64(pubend.0);
                out.put_u64(tick.0);
            }
        }
        Ok(())
    }

    pub(crate) fn decode_body(body: Bytes) -> Result<Group, WireError> {
        let mut r = Reader::new("GROUP", &body);
        let origin = r.str16("origin")?.to_string();
        let dest = r.str16("dest")?.to_string();
        let kind = r.u8("kind")?;
        let member = r.u64("member")?;
        let body = match kind {
            JOIN => {
                let group = r.str16("group")?.to_string();
                let pattern = r.str16("pattern")?.to_string();
                let selector = opt(r.str16("selector")?);
                let key = opt(r.str16("key")?);
                GroupBody::Join { group, pattern, selector, key }
            }
            JOINED => GroupBody::Joined,
            REFUSED => GroupBody::Refused { code: r.u16("code")?, reason: r.str16("reason")?.to_string() },
            LEAVE => GroupBody::Leave,
            LEASE => {
                let pubend = PubendId(r.u64("pubend")?);
                let tick = Tick(r.u64("tick")?);
                let redelivered = r.bool("redelivered")?;
                let message = Message::decode(body.slice(r.position()..))?;
                return Ok(Group {
                    origin,
                    dest,
                    member,
                    body: GroupBody::Lease { pubend, tick, redelivered, message },
                });
            }
            ACK => GroupBody::Ack { pubend: PubendId(r.u64("pubend")?), tick: Tick(r.u64("tick")?) },
            RESET => GroupBody::Reset,
            other => return Err(WireError::InvalidField { frame: "GROUP", field: "kind", value: u64::from(other) }),
        };
        r.finish()?;
        Ok(Group { origin, dest, member, body })
    }
}
