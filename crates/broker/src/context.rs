//! What the session layer (client sessions, the TCP and UDP transports, the admin listener)
//! shares, built by [`crate::server`] and passed down. Sessions import this and the broker core
//! ([`crate::broker_core`]), never the server: `server` is the only module on top.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::broker_core::BrokerCore;
use crate::budget::QueueBudget;
use crate::config::Config;
use crate::connz::Connections;
use crate::live::Live;
use crate::metrics::Metrics;
use crate::storage::DataDir;

/// State every task of a broker shares.
pub struct Context {
    /// The configuration the broker started with.
    pub config: Config,
    /// The settings a reload may change, read where they are needed.
    pub live: Live,
    /// Metric handles.
    pub metrics: Metrics,
    /// The registry `/metrics` renders.
    pub registry: Registry,
    /// Subscribe, publish, acknowledge, durable: what sessions ask of the broker.
    pub core: Arc<BrokerCore>,
    /// The locked data directory (held for the life of the broker).
    pub data: DataDir,
    /// Cancelled to shut everything down.
    pub shutdown: CancellationToken,
    /// Every task the broker spawned, so shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Open connections and their subscriptions, for `/connz` and `/subsz`.
    pub connections: Connections,
    /// The bytes queued to all clients together (`[limits] max_queued_bytes`).
    pub budget: Arc<QueueBudget>,
    /// Logins and permissions, when `[security] users_file` is set.
    pub security: Option<Arc<crate::security::Guard>>,
}
