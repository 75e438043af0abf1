//! Broker settings in a topology file: `[cells.<name>]` for every broker of a cell, and the
//! same keys in a `[[broker]]` for one broker, over its cell's. One network can then have a
//! publishers' cell whose pubends are replicated beside brokers whose are not, or one cell that
//! stores its durable subscriptions itself (`bench persistent`, seed 004's single and double
//! replication), where a launcher's command line gives every broker the same configuration.

use std::collections::BTreeMap;

use serde::Serialize;

use super::schema::{BrokerEntry, SettingsEntry, TopologyFile};
use super::validate::TopologyProblem;

/// What a topology file sets for one broker beyond its name, cell and links; `None` leaves the
/// broker's own configuration (its file, its defaults) in force.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize)]
pub struct BrokerSettings {
    /// `[storage] replicas`: how many brokers of the cell hold each of its pubends' logs.
    pub replicas: Option<usize>,
    /// `[durable] store`: `"publisher"` or `"cell"`, where its durable subscriptions' messages
    /// wait.
    pub durable_store: Option<String>,
}

impl BrokerSettings {
    /// The broker's own keys over its cell's.
    pub(super) fn of(broker: &BrokerEntry, cell: Option<&SettingsEntry>) -> BrokerSettings {
        let cell = cell.cloned().unwrap_or_default();
        BrokerSettings {
            replicas: broker.storage.replicas.or(cell.storage.replicas),
            durable_store: broker.durable.store.clone().or(cell.durable.store),
        }
    }

    /// Whether the file sets nothing for this broker.
    pub fn is_empty(&self) -> bool {
        *self == BrokerSettings::default()
    }
}

/// The settings' problems: a `[cells.X]` no broker is in, and values a broker would refuse at
/// start (so `net up` starts nothing rather than some of the network).
pub(super) fn problems(file: &TopologyFile, problems: &mut Vec<TopologyProblem>) {
    let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
    for broker in &file.broker {
        *sizes.entry(broker.cell_name()).or_default() += 1;
    }
    for name in file.cells.keys() {
        if !sizes.contains_key(name.as_str()) {
            problems.push(TopologyProblem::UnknownCell { path: format!("cells.{name}"), name: name.clone() });
        }
    }
    for (index, broker) in file.broker.iter().enumerate() {
        let cell = broker.cell_name();
        let settings = BrokerSettings::of(broker, file.cells.get(cell));
        let size = sizes.get(cell).copied().unwrap_or(1);
        let mut bad = |value: String, reason: String| {
            problems.push(TopologyProblem::BadSetting {
                path: format!("broker[{index}] ({})", broker.name),
                value,
                reason,
            })
        };
        if let Some(replicas) = settings.replicas.filter(|&r| r > size) {
            bad(format!("storage.replicas = {replicas}"), format!("cell {cell:?} has {size} brokers"));
        }
        // `replicas = 1` turns a broker's replica groups off altogether, its mates' included.
        let counted_in = file
            .broker
            .iter()
            .filter(|b| b.cell_name() == cell && b.name != broker.name)
            .find(|mate| BrokerSettings::of(mate, file.cells.get(cell)).replicas != Some(1));
        if let (Some(1), Some(mate)) = (settings.replicas, counted_in) {
            let why = format!("it takes no part in its mates' replica groups, which {} counts it in", mate.name);
            bad("storage.replicas = 1".into(), why);
        }
        match settings.durable_store.as_deref() {
            None | Some("publisher") => {}
            Some("cell") if size < 2 => {
                bad("durable.store = \"cell\"".into(), format!("cell {cell:?} has no other broker to replicate in"))
            }
            Some("cell") if settings.replicas == Some(1) => bad(
                "durable.store = \"cell\"".into(),
                "storage.replicas = 1 keeps the copy on this broker alone".into(),
            ),
            Some("cell") => {}
            Some(other) => bad(format!("durable.store = {other:?}"), "neither \"publisher\" nor \"cell\"".into()),
        }
    }
}
