//! ADVERTS, link-state adverts flooded between brokers. Layout:
//! `count:u32 | count × (origin:str16 | cell:str16 | incarnation:u64 | sequence:u64 | links:u32 | links × (peer:str16 | peer_cell:str16) | pubends:u32 | pubends × pubend:u64)`.
//!
//! The pubend list names the guaranteed-delivery pubends the origin hosts, so that every broker
//! learns each pubend's home (which its routes are rooted at) from the adverts it floods anyway.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_count, put_str16, Reader};
use crate::error::WireError;
use crate::peer::Incarnation;
use crate::PubendId;

/// One broker's statement of its up links (see `route::LinkStateAdvert`); every broker keeps
/// the newest of each origin and derives the same graph from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advert {
    /// The broker the advert describes.
    pub origin: String,
    /// The origin's cell.
    pub cell: String,
    /// The origin's incarnation: a restarted broker's adverts supersede its old ones.
    pub incarnation: Incarnation,
    /// Grows with every change within one incarnation.
    pub sequence: u64,
    /// The origin's up links.
    pub links: Vec<AdvertLink>,
    /// The guaranteed-delivery pubends the origin hosts.
    pub pubends: Vec<PubendId>,
}

/// One link in an advert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertLink {
    /// The broker at the other end.
    pub peer: String,
    /// That broker's cell.
    pub peer_cell: String,
}

/// Smallest encoded advert: two empty names, two `u64`s and empty link and pubend lists.
const MIN_ADVERT: usize = 2 + 2 + 8 + 8 + 4 + 4;

pub(crate) fn encode_body(adverts: &[Advert], out: &mut BytesMut) -> Result<(), WireError> {
    put_count(out, "adverts", adverts.len())?;
    for advert in adverts {
        put_str16(out, "origin", &advert.origin)?;
        put_str16(out, "cell", &advert.cell)?;
        out.put_u64(advert.incarnation.0);
        out.put_u64(advert.sequence);
        put_count(out, "links", advert.links.len())?;
        for link in &advert.links {
            put_str16(out, "peer", &link.peer)?;
            put_str16(out, "peer_cell", &link.peer_cell)?;
        }
        put_count(out, "pubends", advert.pubends.len())?;
        for pubend in &advert.pubends {
            out.put_u64(pubend.0);
        }
    }
    Ok(())
}

pub(crate) fn decode_body(body: &[u8]) -> Result<Vec<Advert>, WireError> {
    let mut r = Reader::new("ADVERTS", body);
    let count = r.count("adverts", MIN_ADVERT)?;
    let mut adverts = Vec::with_capacity(count);
    for _ in 0..count {
        let origin = r.str16("origin")?.to_string();
        let cell = r.str16("cell")?.to_string();
        let incarnation = Incarnation(r.u64("incarnation")?);
        let sequence = r.u64("sequence")?;
        let link_count = r.count("links", 4)?;
        let mut links = Vec::with_capacity(link_count);
        for _ in 0..link_count {
            let peer = r.str16("peer")?.to_string();
            let peer_cell = r.str16("peer_cell")?.to_string();
            links.push(AdvertLink { peer, peer_cell });
        }
        let pubend_count = r.count("pubends", 8)?;
        let mut pubends = Vec::with_capacity(pubend_count);
        for _ in 0..pubend_count {
            pubends.push(PubendId(r.u64("pubend")?));
        }
        adverts.push(Advert { origin, cell, incarnation, sequence, links, pubends });
    }
    r.finish()?;
    Ok(adverts)
}
