//! Checks on a parsed topology file, each problem reported with its key path, all at once.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::schema::TopologyFile;

/// Why a topology file was refused.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, thiserror::Error)]
pub enum TopologyError {
    /// Not TOML, or not this schema (unknown or missing keys, wrong types); the message from the
    /// TOML parser names the line and column.
    #[error("topology file does not follow the schema: {message}")]
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// The file parsed but describes a network that cannot be started.
    #[error("topology {name:?} is invalid:\n{}", ProblemList(.problems))]
    Invalid {
        /// The topology's `name`.
        name: String,
        /// Every problem found, in file order.
        problems: Vec<TopologyProblem>,
    },
    /// A broker name asked about (on a command line, say) is not in the topology.
    #[error("no broker named {name:?} in topology {topology:?} (brokers: {known})")]
    UnknownBroker {
        /// The name asked for.
        name: String,
        /// The topology's `name`.
        topology: String,
        /// The brokers it does have, comma separated.
        known: String,
    },
}

struct ProblemList<'a>(&'a [TopologyProblem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, problem) in self.0.iter().enumerate() {
            if index > 0 {
                writeln!(f)?;
            }
            write!(f, "  - {problem}")?;
        }
        Ok(())
    }
}

/// One thing wrong with a topology. Key paths count from zero, in file order.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, thiserror::Error)]
pub enum TopologyProblem {
    /// A network needs at least one broker.
    #[error("no [[broker]] entries")]
    NoBrokers,
    /// A name must be usable on a command line and in a handshake.
    #[error("{path} = {value:?}: {reason}")]
    BadName {
        /// Where, e.g. `broker[2].cell`.
        path: String,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two brokers with one name.
    #[error("{path}: broker name {name:?} is already used by broker[{first}]")]
    DuplicateBroker {
        /// The later entry.
        path: String,
        /// The name.
        name: String,
        /// Index of the first broker with that name.
        first: usize,
    },
    /// Links name cells; a broker named like a cell it is not in makes a link ambiguous.
    #[error("{path}: broker {name:?} is in cell {cell:?}, but {name:?} is also the name of another cell")]
    NameIsForeignCell {
        /// The broker entry.
        path: String,
        /// The broker's name.
        name: String,
        /// The cell the broker is in.
        cell: String,
    },
    /// A link end, or a `[cells.<name>]` table, that names no cell.
    #[error("{path} = {name:?}: no cell or broker has this name")]
    UnknownCell {
        /// Where, e.g. `link[4].between[1]`.
        path: String,
        /// The unknown name.
        name: String,
    },
    /// A link from a cell to itself (its brokers are linked anyway).
    #[error("{path}: links cell {cell:?} to itself")]
    SelfLink {
        /// The link entry.
        path: String,
        /// The cell.
        cell: String,
    },
    /// The same pair of cells linked twice.
    #[error("{path}: cells {a:?} and {b:?} are already linked by link[{first}]")]
    DuplicateLink {
        /// The later entry.
        path: String,
        /// One cell.
        a: String,
        /// The other cell.
        b: String,
        /// Index of the first link between them.
        first: usize,
    },
    /// A broker setting (`[cells.<name>]`, or the broker's own) that its broker would refuse.
    #[error("{path}: {value}: {reason}")]
    BadSetting {
        /// The broker entry, e.g. `broker[9] (n10)`.
        path: String,
        /// The setting, as `key = value`.
        value: String,
        /// Why it cannot be.
        reason: String,
    },
    /// Some brokers could never reach others.
    #[error("the cells fall apart into {} disconnected groups: {}", .groups.len(), Groups(.groups))]
    Disconnected {
        /// Each group's cells, sorted; groups sorted by their first cell.
        groups: Vec<Vec<String>>,
    },
}

struct Groups<'a>(&'a [Vec<String>]);

impl fmt::Display for Groups<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let groups: Vec<String> = self.0.iter().map(|group| format!("{{{}}}", group.join(", "))).collect();
        f.write_str(&groups.join(" "))
    }
}

fn check_name(path: String, value: &str, problems: &mut Vec<TopologyProblem>) {
    let reason = if value.is_empty() {
        Some("must not be empty")
    } else if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("must not contain spaces or control characters")
    } else {
        None
    };
    if let Some(reason) = reason {
        problems.push(TopologyProblem::BadName { path, value: value.to_owned(), reason });
    }
}

/// Every problem of the file, in file order; empty when it can be started.
pub(super) fn problems(file: &TopologyFile) -> Vec<TopologyProblem> {
    let mut problems = Vec::new();
    if file.broker.is_empty() {
        problems.push(TopologyProblem::NoBrokers);
    }
    let mut first_use: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, broker) in file.broker.iter().enumerate() {
        check_name(format!("broker[{index}].name"), &broker.name, &mut problems);
        if let Some(cell) = &broker.cell {
            check_name(format!("broker[{index}].cell"), cell, &mut problems);
        }
        if let Some(address) = &broker.address {
            check_name(format!("broker[{index}].address"), address, &mut problems);
        }
        match first_use.get(broker.name.as_str()) {
            Some(first) => problems.push(TopologyProblem::DuplicateBroker {
                path: format!("broker[{index}]"),
                name: broker.name.clone(),
                first: *first,
            }),
            None => {
                first_use.insert(&broker.name, index);
            }
        }
    }
    let cells: BTreeSet<&str> = file.broker.iter().map(|b| b.cell_name()).collect();
    for (index, broker) in file.broker.iter().enumerate() {
        if broker.cell_name() != broker.name && cells.contains(broker.name.as_str()) {
            problems.push(TopologyProblem::NameIsForeignCell {
                path: format!("broker[{index}]"),
                name: broker.name.clone(),
                cell: broker.cell_name().to_owned(),
            });
        }
    }
    check_links(file, &cells, &mut problems);
    super::settings::problems(file, &mut problems);
    if !file.broker.is_empty() {
        let groups = connected_groups(file, &cells);
        if groups.len() > 1 {
            problems.push(TopologyProblem::Disconnected { groups });
        }
    }
    problems
}

fn check_links(file: &TopologyFile, cells: &BTreeSet<&str>, problems: &mut Vec<TopologyProblem>) {
    let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (index, link) in file.link.iter().enumerate() {
        let [a, b] = &link.between;
        let mut known = true;
        for (end, name) in [a, b].into_iter().enumerate() {
            if !cells.contains(name.as_str()) {
                known = false;
                problems.push(TopologyProblem::UnknownCell {
                    path: format!("link[{index}].between[{end}]"),
                    name: name.clone(),
                });
            }
        }
        if a == b {
            problems.push(TopologyProblem::SelfLink { path: format!("link[{index}]"), cell: a.clone() });
            continue;
        }
        if !known {
            continue;
        }
        let key = if a < b { (a.as_str(), b.as_str()) } else { (b.as_str(), a.as_str()) };
        match seen.get(&key) {
            Some(first) => problems.push(TopologyProblem::DuplicateLink {
                path: format!("link[{index}]"),
                a: a.clone(),
                b: b.clone(),
                first: *first,
            }),
            None => {
                seen.insert(key, index);
            }
        }
    }
}

/// Groups of cells connected by links (links to unknown cells ignored), sorted.
fn connected_groups(file: &TopologyFile, cells: &BTreeSet<&str>) -> Vec<Vec<String>> {
    let mut group_of: BTreeMap<&str, usize> = cells.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    // Relabel until stable: cell graphs are small, and this needs no union-find bookkeeping.
    let mut changed = true;
    while changed {
        changed = false;
        for link in &file.link {
            let [a, b] = &link.between;
            let (Some(ga), Some(gb)) = (group_of.get(a.as_str()).copied(), group_of.get(b.as_str()).copied()) else {
                continue;
            };
            if ga != gb {
                let low = ga.min(gb);
                for group in group_of.values_mut() {
                    if *group == ga || *group == gb {
                        *group = low;
                    }
                }
                changed = true;
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (cell, group) in group_of {
        groups.entry(group).or_default().push(cell.to_owned());
    }
    let mut groups: Vec<Vec<String>> = groups.into_values().collect();
    groups.sort();
    groups
}
