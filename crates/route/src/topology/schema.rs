//! The topology file as written, exactly the schema of `docs/topologies.md`. Unknown
//! keys are errors, so a misspelt `adress` is reported instead of silently ignored.

use std::collections::BTreeMap;

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
    /// `[cells.<name>]`: settings for every broker of a cell.
    #[serde(default)]
    pub(super) cells: BTreeMap<String, SettingsEntry>,
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
    /// This broker's own `[storage]` keys, over its cell's. (The two keys of [`SettingsEntry`]
    /// are repeated, not `#[serde(flatten)]`ed: serde ignores `deny_unknown_fields` under a
    /// flatten, and a misspelt key must be refused.)
    #[serde(default)]
    pub(super) storage: StorageEntry,
    /// This broker's own `[durable]` keys, over its cell's.
    #[serde(default)]
    pub(super) durable: DurableEntry,
}

/// A `[cells.<name>]` table: the broker settings a topology may give, which are the ones that
/// make one cell differ from another in an experiment (replication of its pubends' logs,
/// where its durable subscriptions are stored).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SettingsEntry {
    #[serde(default)]
    pub(super) storage: StorageEntry,
    #[serde(default)]
    pub(super) durable: DurableEntry,
}

/// `storage`: the broker's `[storage]` keys a topology may set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StorageEntry {
    #[serde(default)]
    pub(super) replicas: Option<usize>,
}

/// `durable`: the broker's `[durable]` keys a topology may set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DurableEntry {
    #[serde(default)]
    pub(super) store: Option<String>,
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
