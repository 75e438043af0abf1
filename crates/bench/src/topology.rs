//! The seed topologies (`topologies/*.toml`, schema in `docs/topologies.md`), read for what the experiments need to
//! know about them: which brokers exist and how many brokers lie on the path between two.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;

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
}

#[derive(Deserialize)]
struct File {
    name: String,
    #[serde(default)]
    broker: Vec<BrokerEntry>,
    #[serde(default)]
    link: Vec<LinkEntry>,
}

#[derive(Deserialize)]
struct BrokerEntry {
    name: String,
    cell: Option<String>,
}

#[derive(Deserialize)]
struct LinkEntry {
    between: [String; 2],
}

impl Topology {
    /// Reads a topology file.
    pub fn load(path: &Path) -> anyhow::Result<Topology> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Topology::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses a topology file's text.
    pub fn parse(text: &str) -> anyhow::Result<Topology> {
        let file: File = toml::from_str(text)?;
        let mut cells: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for b in &file.broker {
            cells.entry(b.cell.clone().unwrap_or_else(|| b.name.clone())).or_default().push(b.name.clone());
        }
        let mut links = BTreeSet::new();
        let mut add = |a: &String, b: &String| {
            if a != b {
                links.insert(if a < b { (a.clone(), b.clone()) } else { (b.clone(), a.clone()) });
            }
        };
        for members in cells.values() {
            for a in members {
                for b in members {
                    add(a, b);
                }
            }
        }
        for l in &file.link {
            let side = |cell: &String| {
                cells.get(cell).cloned().ok_or_else(|| anyhow::anyhow!("link to unknown cell {cell:?}"))
            };
            let (left, right) = (side(&l.between[0])?, side(&l.between[1])?);
            for a in &left {
                for b in &right {
                    add(a, b);
                }
            }
        }
        Ok(Topology { name: file.name, brokers: file.broker.into_iter().map(|b| b.name).collect(), links })
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
