//! Starting and stopping a broker: bind every listener, then serve until shut down.
//!
//! The only module on top: it builds the cores (cluster, guaranteed delivery, the subscription
//! table), the [`Context`] the session layer shares and the [`LinkContext`] the links share,
//! and hands each down; nothing below imports it.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use serde::Serialize;
use thiserror::Error;
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::broker_core::BrokerCore;
use crate::cluster::{Cluster, LinkContext, NetworkKey};
use crate::config::Config;
use crate::context::Context;
use crate::dispatch::Dispatcher;
use crate::guaranteed::{Guaranteed, GuaranteedError, GuaranteedMetrics, Inbox};
use crate::metrics::Metrics;
use crate::storage::DataDir;

/// The addresses a broker actually bound; with port 0 these carry the OS-chosen ports.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BoundAddresses {
    /// Client TCP, if enabled.
    pub tcp: Option<SocketAddr>,
    /// Client UDP, if enabled.
    pub udp: Option<SocketAddr>,
    /// Admin HTTP, if enabled.
    pub admin: Option<SocketAddr>,
    /// Broker-to-broker link listener, if enabled.
    pub cluster: Option<SocketAddr>,
    /// MQTT listener, if enabled.
    pub mqtt: Option<SocketAddr>,
    /// MQTT over WebSocket listener, if enabled.
    pub mqtt_ws: Option<SocketAddr>,
}

/// Why a broker could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// A listener could not bind.
    #[error("cannot bind {what} listener on {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address asked for.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The data directory cannot be used (another broker holds it, say).
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    /// The pubend log cannot be opened.
    #[error(transparent)]
    Guaranteed(#[from] GuaranteedError),
    /// The cluster key file cannot be used.
    #[error(transparent)]
    Key(#[from] crate::cluster::KeyError),
    /// The users file (`[security] users_file`) cannot be used.
    #[error(transparent)]
    Security(tidings_auth::AuthError),
    /// The certificate, key or CA of `[tls]` cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

/// A broker that is serving.
pub struct Running {
    /// What it bound.
    pub addresses: BoundAddresses,
    shared: Arc<Context>,
    /// The certificates in force, reloaded on SIGHUP.
    tls: Option<Arc<crate::tls::Tls>>,
}

#[derive(Serialize)]
struct ReadyLine<'a> {
    ready: bool,
    name: &'a str,
    pid: u32,
    #[serde(flatten)]
    addresses: &'a BoundAddresses,
    cell: &'a str,
    incarnation: u64,
}

impl Running {
    /// The one machine-readable line printed on stdout once every listener is bound:
    /// `{"ready":true,"name":...,"pid":...,"tcp":"IP:PORT","udp":...,"admin":...,"cluster":...,
    /// "cell":...,"incarnation":...}` (a disabled listener is `null`). Scripts and tests read ports from it, so there are no
    /// port races.
    pub fn ready_line(&self) -> String {
        let line = ReadyLine {
            ready: true,
            name: &self.shared.config.name,
            pid: std::process::id(),
            addresses: &self.addresses,
            cell: self.shared.config.cell(),
            incarnation: self.shared.core.cluster.incarnation().0,
        };
        serde_json::to_string(&line).unwrap_or_default()
    }

    /// Applies the live settings of `new` (a reloaded config file; `running` is what the broker
    /// runs with) and says which changed settings took effect and which wait for a restart.
    pub fn reload(&self, running: &Config, new: &Config) -> crate::live::Reload {
        self.reload_files();
        let outcome = crate::live::reload(&self.shared.live, running, new);
        self.shared.metrics.config_reloads.inc();
        outcome
    }

    /// Reads the users file (closing the sessions of users it removed or changed) and the TLS
    /// certificate, key and CA files (for connections made from now on) again, on SIGHUP; a
    /// file that does not load changes nothing and is logged.
    pub fn reload_files(&self) {
        if let Some(guard) = &self.shared.security {
            match guard.reload() {
                Ok(users) => tracing::info!(users, "SIGHUP: users file reloaded"),
                Err(error) => tracing::error!(%error, "SIGHUP: the users file is refused; the old one stays in force"),
            }
        }
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(()) => tracing::info!(cert = %tls.config.cert, "SIGHUP: TLS certificate, key and CA reloaded"),
                Err(error) => tracing::error!(%error, "SIGHUP: the TLS files are refused; the old ones stay in force"),
            }
        }
    }

    /// Asks every task to stop: clients get DISCONNECT(shutting_down), listeners close.
    pub fn shutdown(&self) {
        self.shared.shutdown.cancel();
    }

    /// Waits until every task has finished (after [`Running::shutdown`]).
    pub async fn wait(self) {
        self.shared.shutdown.cancelled().await;
        self.shared.tasks.close();
        // Writers flush their DISCONNECT frames; a client that never reads must not hold
        // the process hostage.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.shared.tasks.wait()).await;
    }

    /// The shared state, for tests and the admin view.
    pub fn context(&self) -> &Arc<Context> {
        &self.shared
    }
}

fn load_key(path: &std::path::Path) -> Result<NetworkKey, StartError> {
    let key = NetworkKey::load(path)?;
    if NetworkKey::readable_by_others(path) {
        warn!(path = %path.display(), "the cluster key file is readable by other users; chmod 600 it");
    }
    Ok(key)
}

async fn bind_tcp(what: &'static str, addr: &str) -> Result<Option<TcpListener>, StartError> {
    if addr.is_empty() {
        return Ok(None);
    }
    TcpListener::bind(addr).await.map(Some).map_err(|source| StartError::Bind { what, addr: addr.to_string(), source })
}

/// Binds every listener and starts serving. Returns once all are bound.
pub async fn start(config: Config) -> Result<Running, StartError> {
    config.validate()?;
    config.validate_start()?;
    let key = match config.cluster.key_file.as_str() {
        "" => None,
        path => Some(load_key(std::path::Path::new(path))?),
    };
    let data = DataDir::open(&config.data_dir())?;
    let tcp = bind_tcp("client TCP", &config.listen.tcp).await?;
    let admin = bind_tcp("admin HTTP", &config.listen.admin).await?;
    let cluster = bind_tcp("cluster link", &config.cluster.listen).await?;
    let mqtt = bind_tcp("MQTT", &config.mqtt.listen).await?;
    let mqtt_ws = bind_tcp("MQTT over WebSocket", &config.mqtt.websocket).await?;
    let mut registry = Registry::default();
    let security = crate::security::Guard::new(&config.security, &mut registry).map_err(StartError::Security)?;
    if security.is_some() && !config.listen.udp.is_empty() {
        tracing::warn!(udp = %config.listen.udp, "UDP is off: it has no login, and security.users_file is set");
    }
    let tls = crate::tls::Tls::load(&config.tls)?;
    let tls_required = config.tls.tcp_on();
    if tls_required && !config.listen.udp.is_empty() {
        tracing::warn!(udp = %config.listen.udp, "UDP is off: it has no encryption, and the client listener requires TLS");
    }
    let udp = if config.listen.udp.is_empty() || security.is_some() || tls_required {
        None
    } else {
        let socket = UdpSocket::bind(&config.listen.udp).await.map_err(|source| StartError::Bind {
            what: "client UDP",
            addr: config.listen.udp.clone(),
            source,
        })?;
        crate::udp::size_buffers(&socket, &config.udp);
        Some(Arc::new(socket))
    };
    let addresses = BoundAddresses {
        tcp: tcp.as_ref().and_then(|l| l.local_addr().ok()),
        udp: udp.as_ref().and_then(|s| s.local_addr().ok()),
        admin: admin.as_ref().and_then(|l| l.local_addr().ok()),
        cluster: cluster.as_ref().and_then(|l| l.local_addr().ok()),
        mqtt: mqtt.as_ref().and_then(|l| l.local_addr().ok()),
        mqtt_ws: mqtt_ws.as_ref().and_then(|l| l.local_addr().ok()),
    };
    let metrics = Metrics::new(&mut registry);
    let budget = crate::budget::QueueBudget::new(config.limits.max_queued_bytes);
    let prefixed = registry.sub_registry_with_prefix("tidings");
    prefixed.register("queued_bytes", "Bytes queued to all clients together", budget.gauge.clone());
    prefixed.register(
        "reading_bytes",
        "Bytes held for frames being read, past each connection's first read chunk",
        budget.reading_gauge.clone(),
    );
    prefixed.register(
        "queue_budget_cuts",
        "Connections cut because the queued bytes of all clients passed limits.max_queued_bytes",
        budget.cuts.clone(),
    );
    let gd_metrics = GuaranteedMetrics::new(&mut registry);
    // The driver's inbox first: the cluster sends its events into it from the start.
    let inbox = Inbox::new();
    let network = Cluster::new(&config, metrics.clone(), data.incarnation(), key, inbox.sender())
        .advertising(&config.cluster.client_advertise, addresses.tcp);
    let network = Arc::new(network);
    if config.storage.fault_drop_unsynced {
        tracing::warn!(
            "storage.fault_drop_unsynced is on: unsynced log writes are held in memory (fault testing only)"
        );
    }
    if !config.storage.fault_clock_ahead.is_zero() {
        let ahead = humantime::format_duration(config.storage.fault_clock_ahead);
        tracing::warn!(%ahead, "storage.fault_clock_ahead is set: guaranteed delivery runs ahead of the clock (fault testing only)");
        crate::guaranteed::set_clock_ahead(config.storage.fault_clock_ahead);
    }
    let storage = (
        config.storage.log_options(),
        config.retention.clone(),
        (config.storage.fault_drop_unsynced, config.storage.replica_sizes(), config.durable.in_cell()),
        config.guaranteed,
    );
    let (guaranteed, driver) =
        Guaranteed::start(data.path(), &config.name, storage, gd_metrics, (Arc::clone(&network), inbox))?;
    let dispatcher = Arc::new(Dispatcher::new(metrics.clone(), config.limits.max_retained_bytes));
    // The retained values published guaranteed here before a restart, before any client is
    // served (see `crate::retained`).
    let (values, hook) = guaranteed.retained_on_disk();
    let restored = dispatcher.restore_retained(values, hook);
    if restored > 0 {
        tracing::info!(restored, "retained values kept on disk restored");
    }
    let links = Arc::new(LinkContext {
        cluster: Arc::clone(&network),
        dispatcher: Arc::clone(&dispatcher),
        config: config.clone(),
        metrics: metrics.clone(),
        budget: Arc::clone(&budget),
        shutdown: CancellationToken::new(),
        tasks: TaskTracker::new(),
    });
    let core =
        Arc::new(BrokerCore::new(dispatcher, network, guaranteed, config.limits.max_match_time, metrics.clone()));
    let shared = Arc::new(Context {
        live: crate::live::Live::new(&config),
        core,
        data,
        config,
        metrics,
        registry,
        shutdown: links.shutdown.clone(),
        tasks: links.tasks.clone(),
        connections: crate::connz::Connections::default(),
        budget,
        security,
    });
    shared.tasks.spawn(driver.run(shared.shutdown.clone()));
    let links_tls = tls.clone().filter(|t| t.links());
    if let Some(listener) = tcp {
        let tls = tls.clone().filter(|t| t.config.tcp_on());
        shared.tasks.spawn(crate::tcp::accept_loop(listener, Arc::clone(&shared), tls));
    }
    crate::mqtt::start(&shared, mqtt, mqtt_ws, tls.clone().filter(|t| t.config.mqtt_on()));
    if let Some(socket) = udp {
        shared.tasks.spawn(crate::udp::serve(socket, Arc::clone(&shared)));
    }
    if let Some(listener) = cluster {
        shared.tasks.spawn(crate::cluster::accept_loop(listener, Arc::clone(&links), links_tls.clone()));
    }
    for peer in &shared.config.peer {
        shared.tasks.spawn(crate::cluster::dial_loop(peer.address.clone(), Arc::clone(&links), links_tls.clone()));
    }
    shared.tasks.spawn(crate::cluster::link_reporter(Arc::clone(&links.cluster), shared.shutdown.clone()));
    shared.tasks.spawn(crate::cluster::ticker(links));
    if let Some(listener) = admin {
        if listener.local_addr().is_ok_and(|a| !a.ip().is_loopback()) && shared.security.is_none() {
            // /state and /metrics say a lot about the clients and the network, to anyone.
            let admin = &shared.config.listen.admin;
            warn!(%admin, "the admin port has no login (no users file) and listens beyond loopback");
        }
        let tls = tls.clone().filter(|t| t.config.admin_on());
        shared.tasks.spawn(crate::admin::serve(listener, Arc::clone(&shared), tls));
    }
    let show = |a: Option<SocketAddr>| a.map_or_else(|| "off".to_string(), |a| a.to_string());
    info!(
        name = %shared.config.name,
        tcp = %show(addresses.tcp),
        udp = %show(addresses.udp),
        admin = %show(addresses.admin),
        cluster = %show(addresses.cluster),
        mqtt = %show(addresses.mqtt),
        mqtt_ws = %show(addresses.mqtt_ws),
        data = %shared.data.path().display(),
        "broker started"
    );
    Ok(Running { addresses, shared, tls })
}
