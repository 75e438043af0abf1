//! The seed topologies (`topologies/*.toml`, schema in `docs/topologies.md`) as the experiments
//! see them: which brokers exist, which pairs are linked, and how many brokers lie on the path
//! between two. The file is parsed and validated by `tidings-route`, the parser the launcher
//! and the brokers use, so a file the bench runs is a file `tidings net up` accepts (unknown
//! keys included).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use anyhow::Context as _;

/// A broker network as a topology file describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Short name.
    pub name: String,
    /// Broker names, in file order.
    pub brokers: Vec<String>,
    /// Broker-level links: brokers of a cell with each other, and every broker of one linked
    /// cell with every broker of the other. Each pair once, smaller name first.
    pub links: BTreeSet<(String, String)>,
    /// Each broker's cell (its own name when the file gives none).
    pub cells: BTreeMap<String, String>,
    /// Brokers that store their durable subscriptions in their cell (`store = "cell"`): a
    /// durable subscriber there reads a relay pubend's ticks, not its publishers'.
    pub relaying: BTreeSet<String>,
}

impl Topology {
    /// Reads a topology file.
    pub fn load(path: &Path) -> anyhow::Result<Topology> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Topology::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses a topology file's text (through `tidings_route::Topology::parse`).
    pub fn parse(text: &str) -> anyhow::Result<Topology> {
        let file = tidings_route::Topology::parse(text)?;
        let text = |name: &tidings_route::BrokerName| name.as_str().to_string();
        Ok(Topology {
            name: file.name().to_string(),
            brokers: file.brokers().iter().map(|b| text(&b.name)).collect(),
            links: file.connections().iter().map(|(a, b)| (text(a), text(b))).collect(),
            cells: file.brokers().iter().map(|b| (text(&b.name), b.cell.as_str().to_string())).collect(),
            relaying: file
                .brokers()
                .iter()
                .filter(|b| b.settings.durable_store.as_deref() == Some("cell"))
                .map(|b| text(&b.name))
                .collect(),
        })
    }

    /// The brokers of `cell`, in file order (a cell's brokers replicate its pubends' logs).
    pub fn cell(&self, cell: &str) -> Vec<String> {
        self.brokers.iter().filter(|b| self.cells.get(*b).is_some_and(|c| c == cell)).cloned().collect()
    }

    /// Brokers on the shortest path from `from` to `to`, both included (1 when they are the
    /// same broker); `None` when either is unknown or unreachable.
    pub fn brokers_on_path(&self, from: &str, to: &str) -> Option<usize> {
        if !self.brokers.iter().any(|b| b == from) {
            return None;
        }
        let mut distance: BTreeMap<&str, usize> = BTreeMap::from([(from, 1)]);
        let mut queue = VecDeque::from([from]);
        while let Some(at) = queue.pop_front() {
            let d = distance[at];
            if at == to {
                return Some(d);
            }
            for (a, b) in &self.links {
                let next = if a == at {
                    b.as_str()
                } else if b == at {
                    a.as_str()
                } else {
                    continue;
                };
                if !distance.contains_key(next) {
                    distance.insert(next, d + 1);
                    queue.push_back(next);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CELLS: &str = r#"
        name = "cells"
        [[broker]]
        name = "p"
        [[broker]]
        name = "b1"
        cell = "IB"
        [[broker]]
        name = "b2"
        cell = "IB"
        [[broker]]
        name = "s"
        [[link]]
        between = ["p", "IB"]
        [[link]]
        between = ["IB", "s"]
    "#;

    #[test]
    fn cells_expand_into_link_bundles() {
        let t = Topology::parse(CELLS).unwrap();
        assert_eq!(t.brokers, ["p", "b1", "b2", "s"]);
        // b1-b2 (cell), p-b1, p-b2, b1-s, b2-s.
        assert_eq!(t.links.len(), 5);
        assert_eq!(t.cell("IB"), ["b1", "b2"]);
        assert_eq!(t.cell("p"), ["p"], "a broker without a cell is a cell of its own");
        assert_eq!(t.brokers_on_path("p", "s"), Some(3));
        assert_eq!(t.brokers_on_path("p", "p"), Some(1));
        assert_eq!(t.brokers_on_path("p", "nowhere"), None);
    }

    #[test]
    fn a_link_to_an_unknown_cell_is_an_error() {
        let text = "name = \"x\"\n[[broker]]\nname = \"a\"\n[[link]]\nbetween = [\"a\", \"b\"]\n";
        assert!(Topology::parse(text).is_err());
    }

    #[test]
    fn every_shipped_topology_loads_and_an_unknown_key_is_refused() {
        let files: Vec<_> = std::fs::read_dir(crate::paths::topologies())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "toml"))
            .collect();
        assert!(files.len() >= 5, "{files:?}");
        for file in &files {
            let t = Topology::load(file).unwrap_or_else(|e| panic!("{}: {e:#}", file.display()));
            assert!(!t.brokers.is_empty(), "{}", file.display());
        }
        assert!(Topology::parse("name = \"x\"\n[[broker]]\nname = \"a\"\nadress = \"1\"\n").is_err());
        let double = Topology::load(&crate::paths::topologies().join("gryphon-fig3-double.toml")).unwrap();
        assert_eq!(
            double.relaying.iter().collect::<Vec<_>>(),
            ["s1", "s2", "s3"],
            "SUB stores its durables in the cell"
        );
        assert!(Topology::load(&crate::paths::topologies().join("gryphon-fig3.toml")).unwrap().relaying.is_empty());
    }

    #[test]
    fn the_narada_files_have_the_path_lengths_the_seed_gives() {
        let dir = crate::paths::topologies();
        let sparse = Topology::load(&dir.join("narada-22-sparse.toml")).unwrap();
        let dense = Topology::load(&dir.join("narada-22-dense.toml")).unwrap();
        let path = |t: &Topology, to| t.brokers_on_path("n22", to);
        assert_eq!(
            [path(&sparse, "n22"), path(&sparse, "n1"), path(&sparse, "n7"), path(&sparse, "n10")],
            [Some(1), Some(2), Some(6), Some(9)]
        );
        assert_eq!([path(&dense, "n10"), path(&dense, "n7")], [Some(4), Some(4)]);
        assert_eq!(sparse.brokers.len(), 22);
    }
}
