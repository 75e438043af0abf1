//! Topology files: the brokers of a network, their cells, and the links between cells, in the
//! schema of `docs/topologies.md`. The launcher (`tidings net up FILE`) parses a file
//! here, refuses it with every problem listed, and otherwise asks who each broker must dial.
//!
//! The file is only the *intended* network: at run time routing learns the actual one from link
//! state, so a broker missing from the file is not a routing error, only a launcher one.

mod schema;
mod settings;
mod validate;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::liveness::LivenessSettings;
use crate::names::{BrokerName, CellName, Incarnation};
use crate::router::RouterSettings;
use schema::TopologyFile;
pub use settings::BrokerSettings;
pub use validate::{TopologyError, TopologyProblem};

/// A validated topology: every name unique, every link between known cells, all connected.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct Topology {
    name: String,
    description: String,
    brokers: Vec<BrokerSpec>,
    cells: BTreeMap<CellName, Vec<BrokerName>>,
    cell_links: Vec<CellLink>,
}

/// One broker of the file.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct BrokerSpec {
    /// Its unique name.
    pub name: BrokerName,
    /// Its cell: the `cell` key, or its own name.
    pub cell: CellName,
    /// The hierarchical label, for reports only.
    pub address: Option<String>,
    /// What the file sets for it (`[cells.<name>]` and its own keys).
    pub settings: BrokerSettings,
}

/// One `[[link]]`: a bundle between two cells, as the file orders them.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct CellLink {
    /// The first cell of `between`.
    pub a: CellName,
    /// The second cell of `between`.
    pub b: CellName,
}

/// A link bundle with its broker-to-broker links: every broker of one cell with every broker of
/// the other.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct Bundle {
    /// The two cells, as the file orders them.
    pub cells: CellLink,
    /// Broker pairs, the first of each in `cells.a`, sorted.
    pub links: Vec<(BrokerName, BrokerName)>,
}

impl Topology {
    /// Parses and validates a topology file's text. Reading the file is the caller's business:
    /// this crate does no I/O.
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        let file: TopologyFile =
            toml::from_str(text).map_err(|error| TopologyError::Syntax { message: error.to_string() })?;
        let problems = validate::problems(&file);
        if !problems.is_empty() {
            return Err(TopologyError::Invalid { name: file.name, problems });
        }
        let brokers: Vec<BrokerSpec> = file
            .broker
            .iter()
            .map(|entry| BrokerSpec {
                name: BrokerName::new(&entry.name),
                cell: CellName::new(entry.cell_name()),
                address: entry.address.clone(),
                settings: BrokerSettings::of(entry, file.cells.get(entry.cell_name())),
            })
            .collect();
        let mut cells: BTreeMap<CellName, Vec<BrokerName>> = BTreeMap::new();
        for broker in &brokers {
            cells.entry(broker.cell.clone()).or_default().push(broker.name.clone());
        }
        for members in cells.values_mut() {
            members.sort();
        }
        let cell_links = file
            .link
            .iter()
            .map(|link| CellLink { a: CellName::new(&link.between[0]), b: CellName::new(&link.between[1]) })
            .collect();
        Ok(Topology { name: file.name, description: file.description, brokers, cells, cell_links })
    }

    /// The topology's short name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its one-line description (empty when the file has none).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Every broker, in file order (the order a launcher starts them in).
    pub fn brokers(&self) -> &[BrokerSpec] {
        &self.brokers
    }

    /// One broker by name, or an error that lists the names there are.
    pub fn broker(&self, name: &str) -> Result<&BrokerSpec, TopologyError> {
        self.brokers.iter().find(|broker| broker.name.as_str() == name).ok_or_else(|| TopologyError::UnknownBroker {
            name: name.to_owned(),
            topology: self.name.clone(),
            known: self.brokers.iter().map(|b| b.name.as_str()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Every cell with its brokers, sorted.
    pub fn cells(&self) -> &BTreeMap<CellName, Vec<BrokerName>> {
        &self.cells
    }

    /// The `[[link]]` entries, in file order.
    pub fn cell_links(&self) -> &[CellLink] {
        &self.cell_links
    }

    /// The `[[link]]` entries with their broker-to-broker links.
    pub fn bundles(&self) -> Vec<Bundle> {
        self.cell_links
            .iter()
            .map(|cells| {
                let mut links = Vec::new();
                for a in self.members(&cells.a) {
                    for b in self.members(&cells.b) {
                        links.push((a.clone(), b.clone()));
                    }
                }
                Bundle { cells: cells.clone(), links }
            })
            .collect()
    }

    /// Every broker-to-broker connection of the network, each once with the lower name first,
    /// sorted: cell mates with each other, and the brokers of linked cells.
    pub fn connections(&self) -> Vec<(BrokerName, BrokerName)> {
        let mut pairs = BTreeSet::new();
        for members in self.cells.values() {
            for (index, a) in members.iter().enumerate() {
                for b in &members[index + 1..] {
                    pairs.insert(ordered(a, b));
                }
            }
        }
        for bundle in self.bundles() {
            for (a, b) in &bundle.links {
                pairs.insert(ordered(a, b));
            }
        }
        pairs.into_iter().collect()
    }

    /// The brokers this broker keeps links with: its cell mates and every broker of every cell
    /// linked to its cell.
    pub fn expected_peers(&self, broker: &str) -> Result<BTreeSet<BrokerName>, TopologyError> {
        let me = self.broker(broker)?;
        let mut peers: BTreeSet<BrokerName> =
            self.members(&me.cell).iter().filter(|b| **b != me.name).cloned().collect();
        for link in &self.cell_links {
            let other = if link.a == me.cell {
                &link.b
            } else if link.b == me.cell {
                &link.a
            } else {
                continue;
            };
            peers.extend(self.members(other).iter().cloned());
        }
        Ok(peers)
    }

    /// The router settings for one broker of this topology (departed links' interest not
    /// held; set [`RouterSettings::departed_interest_ms`] for guaranteed delivery).
    pub fn router_settings(
        &self,
        broker: &str,
        incarnation: Incarnation,
        liveness: LivenessSettings,
    ) -> Result<RouterSettings, TopologyError> {
        let spec = self.broker(broker)?;
        Ok(RouterSettings {
            name: spec.name.clone(),
            cell: spec.cell.clone(),
            incarnation,
            liveness,
            departed_interest_ms: 0,
        })
    }

    fn members(&self, cell: &CellName) -> &[BrokerName] {
        self.cells.get(cell).map_or(&[], Vec::as_slice)
    }
}

fn ordered(a: &BrokerName, b: &BrokerName) -> (BrokerName, BrokerName) {
    if a < b {
        (a.clone(), b.clone())
    } else {
        (b.clone(), a.clone())
    }
}

#[cfg(test)]
mod tests;
