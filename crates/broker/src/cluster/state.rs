//! The `/state` view: what this broker's shell knows about its links, next to the router's
//! own snapshot (links, link-state database, trees, summaries).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use serde::Serialize;
use tidings_route::{BrokerName, CellName, Incarnation, RouterSnapshot};

use super::{Cluster, Direction, RouteFilter};

/// The whole `/state` document.
#[derive(Serialize)]
pub struct ClusterState {
    /// This broker.
    pub name: BrokerName,
    /// Its cell.
    pub cell: CellName,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// Milliseconds since start (the router's clock).
    pub now_ms: u64,
    /// When routes last changed, in the same clock (0: never).
    pub last_route_change_ms: u64,
    /// What this broker tells its native clients of its cell (SERVERS): its own client
    /// addresses, then those of every cell mate that linked to it since it started (`servers.rs`).
    pub told_servers: Vec<String>,
    /// Why this broker's cell refused it (it was forgotten there: `tidings cell forget`), while
    /// it does; `null` otherwise.
    pub forgotten_here: Option<String>,
    /// Up link connections as the shell sees them.
    pub connections: Vec<ConnectionState>,
    /// The router's view (filters shown as their pattern and selector texts).
    pub router: RouterSnapshot<RouteFilter>,
}

/// One up link connection.
#[derive(Serialize)]
pub struct ConnectionState {
    /// The peer.
    pub peer: BrokerName,
    /// Which side dialled.
    pub direction: Direction,
    /// The peer's socket address.
    pub remote: Option<SocketAddr>,
    /// Milliseconds the connection has been up.
    pub up_ms: u64,
    /// Data messages waiting in its queue.
    pub queued_messages: usize,
    /// Data bytes waiting in its queue.
    pub queued_bytes: usize,
    /// Data messages received.
    pub messages_in: u64,
    /// Data bytes received.
    pub bytes_in: u64,
    /// Data messages written.
    pub messages_out: u64,
    /// Data bytes written.
    pub bytes_out: u64,
    /// Data messages dropped for a full queue.
    pub drops: u64,
    /// The client addresses the peer sent (peer frame SERVERS; only a cell mate's are kept,
    /// and told to clients).
    pub client_addresses: Vec<String>,
}

impl Cluster {
    /// The current `/state` document, with one page of every filter list.
    pub fn state(&self, page: tidings_route::FilterPage) -> ClusterState {
        let core = self.core.read();
        let connections = core
            .links
            .iter()
            .map(|(peer, entry)| {
                let (queued_messages, queued_bytes) = entry.queue.backlog();
                let counters = entry.queue.counters();
                ConnectionState {
                    peer: peer.clone(),
                    direction: entry.direction,
                    remote: entry.remote,
                    up_ms: entry.since.elapsed().as_millis() as u64,
                    queued_messages,
                    queued_bytes,
                    messages_in: counters.messages_in.get(),
                    bytes_in: counters.bytes_in.get(),
                    messages_out: counters.messages_out.get(),
                    bytes_out: counters.bytes_out.get(),
                    drops: counters.drops.get(),
                    client_addresses: self.mate_servers(&core, peer),
                }
            })
            .collect();
        let router = core.router.snapshot_page(page);
        ClusterState {
            name: self.name.clone(),
            cell: self.cell.clone(),
            incarnation: self.incarnation,
            now_ms: self.now().0,
            last_route_change_ms: self.last_route_change.load(Ordering::Relaxed),
            told_servers: self.servers.borrow().to_vec(),
            forgotten_here: self.forgotten_here(),
            connections,
            router,
        }
    }
}
