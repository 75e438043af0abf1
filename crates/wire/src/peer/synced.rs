//! SYNCED, the sender's summaries are complete for these trees. Layout:
//! `count:u32 | count × (root:str16 | tree:u64)`.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_count, put_str16, Reader};
use crate::error::WireError;
use crate::peer::TreeId;

/// For each listed root cell, the sender's summary is complete for the tree with this id
/// (see `route::PeerMessage::Synced`); until then the receiver sends what it cannot rule out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedTree {
    /// The tree's root cell.
    pub root: String,
    /// The tree the summary is complete for.
    pub tree: TreeId,
}

pub(crate) fn encode_body(trees: &[SyncedTree], out: &mut BytesMut) -> Result<(), WireError> {
    put_count(out, "trees", trees.len())?;
    for synced in trees {
        put_str16(out, "root", &synced.root)?;
        out.put_u64(synced.tree.0);
    }
    Ok(())
}

pub(crate) fn decode_body(body: &[u8]) -> Result<Vec<SyncedTree>, WireError> {
    let mut r = Reader::new("SYNCED", body);
    let count = r.count("trees", 10)?;
    let mut trees = Vec::with_capacity(count);
    for _ in 0..count {
        let root = r.str16("root")?.to_string();
        let tree = TreeId(r.u64("tree")?);
        trees.push(SyncedTree { root, tree });
    }
    r.finish()?;
    Ok(trees)
}
