//! The child cells of each pubend's stream, remembered across restarts (`gd-children.json` in
//! the data directory).
//!
//! Why: right after a restart, links come up one by one, and a stream's route lists only the
//! children already linked. A pubend's log releases what those children acknowledged, and a
//! child cell that links a moment later starts after that release: what it missed is answered
//! F, a silent loss. Seeded with the children of the previous life, the stream keeps waiting
//! for those still unreachable (see `Net::keep_unreachable_children`) until routing lists them
//! again or places them elsewhere. A broker restarted with an empty data directory remembers
//! nothing (its children are then only those linked in time).

use std::collections::BTreeMap;
use std::path::PathBuf;

use tidings_delivery::PubendId;
use tidings_route::{BrokerName, CellName};
use tracing::warn;

/// One remembered child: its cell and the broker the stream entered it through.
pub(super) type Child = (CellName, BrokerName);

/// The remembered children per pubend, and the file they live in.
pub(super) struct Remembered {
    path: PathBuf,
    children: BTreeMap<u64, Vec<Child>>,
}

impl Remembered {
    /// Reads the file (a missing or unreadable one remembers nothing).
    pub(super) fn load(path: PathBuf) -> Remembered {
        let children = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<BTreeMap<u64, Vec<Child>>>(&bytes).ok())
            .unwrap_or_default();
        Remembered { path, children }
    }

    /// The children of `pubend` in the previous life (or as last fed in this one).
    pub(super) fn get(&self, pubend: PubendId) -> Option<&[Child]> {
        self.children.get(&pubend.0).map(Vec::as_slice)
    }

    /// Records the children just fed for `pubend`, writing the file when they changed.
    pub(super) fn update(&mut self, pubend: PubendId, children: Vec<Child>) {
        if self.children.get(&pubend.0) == Some(&children) {
            return;
        }
        self.children.insert(pubend.0, children);
        if let Err(error) = self.save() {
            warn!(path = %self.path.display(), %error, "cannot remember the streams' child cells");
        }
    }

    /// Writes the file whole (a temporary file renamed over it).
    fn save(&self) -> std::io::Result<()> {
        let json = serde_json::to_vec(&self.children).map_err(std::io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_written_in_one_life_are_read_back_in_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gd-children.json");
        let mut first = Remembered::load(path.clone());
        assert!(first.get(PubendId(7)).is_none(), "a new data directory remembers nothing");
        let children =
            vec![(CellName::new("IB1"), BrokerName::new("b1")), (CellName::new("IB2"), BrokerName::new("b3"))];
        first.update(PubendId(7), children.clone());
        let second = Remembered::load(path);
        assert_eq!(second.get(PubendId(7)), Some(children.as_slice()));
    }
}
