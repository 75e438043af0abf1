//! The topology file as written, exactly the schema of `docs/topologies.md`. Unknown
//! keys are errors, so a misspelt `adress` is reported instead of silently ignored.

use serde::Deserialize;

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TopologyFile {
    pub(super) name: String,
    #[serde(default)]
    pub(super) description: String,
    #[serde(default)]
    pub(super) broker: Vec<BrokerEntry>,
    #[serde(default)]
    pub(super) link: Vec<LinkEntry>,
}

/// One `[[broker]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BrokerEntry {
    pub(super) name: String,
    #[serde(default)]
    pub(super) cell: Option<String>,
    #[serde(default)]
    pub(super) address: Option<String>,
}

impl BrokerEntry {
    /// A lone broker's cell is its own name.
    pub(super) fn cell_name(&self) -> &str {
        self.cell.as_deref().unwrap_or(&self.name)
    }
}

/// One `[[link]]` table: a bundle between two cells.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LinkEntry {
    pub(super) between: [String; 2],
}
