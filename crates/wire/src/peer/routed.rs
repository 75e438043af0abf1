//! ROUTED, a best-effort message with its routing header. Layout:
//! `pubend:u64 | tree:u64 | root:str16 | hop:u8 [hop 1: deliver:u8 | count:u32 | count × cell:str16]
//! [groups flag: count:u32 | count × group:str16] | message section`.
//!
//! The hop byte's [`GROUPS_FLAG`] bit says a list of queue groups follows the hop: the groups
//! this copy, and no other copy of the message, is to serve (at the receiver, or below it).
//! The publisher's broker decides once which branch serves each group; brokers downstream
//! only narrow the choice within the branch they were given, so one member of each group
//! gets the message network-wide. A frame without the bit serves no group.
//!
//! The message section runs to the end of the frame and is the client PUBLISH's bytes verbatim,
//! so a broker forwards a message to every link without re-encoding or copying it.

use std::borrow::Borrow;

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::{put_count, put_str16, Reader};
use crate::error::WireError;
use crate::frame::Message;
use crate::framing::encode_frame;
use crate::peer::{PeerFrameType, PubendId, TreeId};

/// Where a best-effort message is in its routing tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteHeader {
    /// The publishing endpoint; rendezvous hashing on it picks the link of each bundle.
    pub pubend: PubendId,
    /// The publishing cell: the root of the tree the message travels down.
    pub root: String,
    /// The tree every hop so far routed under.
    pub tree: TreeId,
    /// How the receiver treats the message.
    pub hop: Hop,
    /// The queue groups this copy serves (see the module doc); empty for most messages.
    pub groups: Vec<String>,
}

/// The hop byte's bit saying a list of queue groups follows the hop.
pub(crate) const GROUPS_FLAG: u8 = 0x80;

/// The role of one hop (see `route::Hop`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hop {
    /// Across a bundle from the parent cell (hop byte 0).
    Down,
    /// Inside a cell from its entry broker (hop byte 1).
    Within {
        /// Whether the receiver delivers to its own subscribers.
        deliver: bool,
        /// Child cells the receiver sends the message down to.
        across: Vec<String>,
    },
}

/// A borrowed [`Hop`], for encoding straight from the router's own header without copying
/// its cell names.
#[derive(Debug, Clone, Copy)]
pub enum HopRef<'a, S> {
    /// See [`Hop::Down`].
    Down,
    /// See [`Hop::Within`].
    Within {
        /// Whether the receiver delivers to its own subscribers.
        deliver: bool,
        /// Child cells the receiver sends the message down to.
        across: &'a [S],
    },
}

/// A best-effort message between brokers.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    /// Its routing header.
    pub header: RouteHeader,
    /// The published message section.
    pub message: Message,
}

impl Routed {
    /// Appends everything of a ROUTED frame before the message section (length, type, header)
    /// to `out`; the caller then sends the section's `section_len` bytes. Allocates nothing
    /// when `out` has room. On error `out` is left as it was.
    pub fn encode_prefix<S: Borrow<str>, G: Borrow<str>>(
        (pubend, tree, root): (PubendId, TreeId, &str),
        hop: HopRef<'_, S>,
        groups: &[G],
        section_len: usize,
        out: &mut BytesMut,
    ) -> Result<(), WireError> {
        encode_frame(out, PeerFrameType::Routed as u8, section_len, |out| {
            encode_header((pubend, tree, root), hop, groups, out)
        })
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        let h = &self.header;
        let hop = match &h.hop {
            Hop::Down => HopRef::Down,
            Hop::Within { deliver, across } => HopRef::Within { deliver: *deliver, across: across.as_slice() },
        };
        encode_header((h.pubend, h.tree, &h.root), hop, &h.groups, out)?;
        out.put_slice(self.message.as_bytes());
        Ok(())
    }

    pub(crate) fn decode_body(body: Bytes) -> Result<Routed, WireError> {
        let mut r = Reader::new("ROUTED", &body);
        let pubend = PubendId(r.u64("pubend")?);
        let tree = TreeId(r.u64("tree")?);
        let root = r.str16("root")?.to_string();
        let hop_byte = r.u8("hop")?;
        let hop = match hop_byte & !GROUPS_FLAG {
            0 => Hop::Down,
            1 => {
                let deliver = r.bool("deliver")?;
                let count = r.count("across", 2)?;
                let mut across = Vec::with_capacity(count);
                for _ in 0..count {
                    across.push(r.str16("cell")?.to_string());
                }
                Hop::Within { deliver, across }
            }
            _ => return Err(WireError::InvalidField { frame: "ROUTED", field: "hop", value: u64::from(hop_byte) }),
        };
        let mut groups = Vec::new();
        if hop_byte & GROUPS_FLAG != 0 {
            let count = r.count("groups", 2)?;
            groups.reserve(count);
            for _ in 0..count {
                groups.push(r.str16("group")?.to_string());
            }
        }
        let message = Message::decode(body.slice(r.position()..))?;
        Ok(Routed { header: RouteHeader { pubend, root, tree, hop, groups }, message })
    }
}

fn encode_header<S: Borrow<str>, G: Borrow<str>>(
    (pubend, tree, root): (PubendId, TreeId, &str),
    hop: HopRef<'_, S>,
    groups: &[G],
    out: &mut BytesMut,
) -> Result<(), WireError> {
    out.put_u64(pubend.0);
    out.put_u64(tree.0);
    put_str16(out, "root", root)?;
    let flag = if groups.is_empty() { 0 } else { GROUPS_FLAG };
    match hop {
        HopRef::Down => out.put_u8(flag),
        HopRef::Within { deliver, across } => {
            out.put_u8(1 | flag);
            out.put_u8(u8::from(deliver));
            put_count(out, "across", across.len())?;
            for cell in across {
                put_str16(out, "cell", cell.borrow())?;
            }
        }
    }
    if !groups.is_empty() {
        put_count(out, "groups", groups.len())?;
        for group in groups {
            put_str16(out, "group", group.borrow())?;
        }
    }
    Ok(())
}
