//! The broker's configuration: one serde tree with defaults in code, so the broker runs with
//! no file at all, and `--print-config` shows exactly what is in force.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The default port for client TCP and UDP. Chosen to stay clear of NATS (4222), MQTT (1883),
/// Redis (6379) and AMQP (5672).
pub const DEFAULT_PORT: u16 = 6464;

/// The default port of the admin HTTP listener.
pub const DEFAULT_ADMIN_PORT: u16 = 6465;

/// Everything a broker needs to start.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This broker's name: in WELCOME frames, logs and (later) link handshakes.
    pub name: String,
    /// Where to listen.
    pub listen: Listen,
    /// The MQTT front door (issue 42), off unless given an address.
    pub mqtt: Mqtt,
    /// Per-session limits.
    pub limits: Limits,
    /// What happens to a subscriber that cannot keep up.
    pub slow_consumer: SlowConsumer,
    /// UDP session handling.
    pub udp: Udp,
    /// Links to other brokers: this broker's cell, its link listener, liveness and queues.
    pub cluster: Cluster,
    /// Brokers to dial (`[[peer]]` entries); links may be dialled from either side.
    pub peer: Vec<Peer>,
    /// Where the broker keeps what must survive a restart.
    pub storage: Storage,
    /// How much of each pubend's log may be kept for subscribers that are behind.
    pub retention: Retention,
    /// Where durable subscriptions keep what they still need (issue 40 part 4).
    pub durable: Durable,
    /// What the broker logs, and in what shape.
    pub log: Log,
    /// Guaranteed delivery: the liveness timer profile.
    pub guaranteed: crate::liveness::GuaranteedConfig,
    /// Logins and permissions (issue 43); off unless `users_file` is set.
    pub security: crate::security::SecurityConfig,
    /// TLS on the client listeners and links (issue 43); off unless `cert` is set.
    pub tls: crate::tls::TlsConfig,
}

/// Per-pubend limits on the log kept for subscribers that are behind (a durable subscriber
/// away holds everything after its checkpoint). Zero means no limit. What happens at a limit is
/// [`RetentionPolicy`]; either way nothing is lost silently.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Retention {
    /// Most bytes of records one pubend's log keeps (0: no limit).
    pub max_bytes: u64,
    /// Oldest record one pubend's log keeps, by its tick (0: no limit).
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// What a limit does.
    pub policy: RetentionPolicy,
    /// Under `backpressure`, how long a publish waits for room before it is refused.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            max_bytes: 0,
            max_age: Duration::ZERO,
            policy: RetentionPolicy::Backpressure,
            max_wait: Duration::from_secs(5),
        }
    }
}

/// What a pubend's log at its retention limit does.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RetentionPolicy {
    /// New publishes wait (their acknowledgements are held) until a subscriber that is behind
    /// catches up or is deleted, and are refused with `limit_exceeded` after `max_wait`.
    Backpressure,
    /// The oldest records are released early: a subscriber behind them gets one gap notice
    /// with the exact tick range it lost.
    Release,
}

/// The broker's log: a level or filter, and a shape for people or for log collectors.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// `error`, `warn`, `info`, `debug`, `trace`, or a filter such as
    /// `info,tidings_broker::cluster=debug`. `--log-level` and `RUST_LOG` override it.
    pub level: String,
    /// `text`: one line per event, coloured only on a terminal. `json`: one object per line.
    pub format: LogFormat,
}

impl Default for Log {
    fn default() -> Log {
        Log { level: "info".to_string(), format: LogFormat::Text }
    }
}

/// The shape of log lines.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// For people: a line per event.
    #[default]
    Text,
    /// For log collectors: a JSON object per line.
    Json,
}

/// The broker's data directory: its incarnation counter today, the pubend log later. One
/// broker at a time: a lock file keeps a second process off the same directory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    /// The directory; empty means `tidings-data/<name>` under the working directory. Created
    /// if missing.
    pub dir: String,
    /// When the pubend log syncs before acknowledging a guaranteed publish: `always` (the
    /// default, also when empty: nothing acknowledged is lost to a crash or a power loss),
    /// `batch` or `batch:<N>ms` (a power loss may lose up to the interval), `never` (only a
    /// process crash is survived). See `docs/store.md`.
    pub fsync: String,
    /// Fault testing only: the pubend log holds every write in memory until it is synced, so
    /// killing the broker (SIGKILL) loses exactly what a power cut would. Slower; the broker
    /// warns at start when it is on.
    pub fault_drop_unsynced: bool,
    /// Fault testing only: this broker's guaranteed delivery reads the clock this far ahead of
    /// the machine's (default `0s`), so one machine can run brokers whose clocks differ, as two
    /// machines' do: ticks come from each broker's clock. The broker warns at start when it is
    /// set.
    #[serde(with = "humantime_serde")]
    pub fault_clock_ahead: Duration,
    /// Under `fsync = "always"`, the period at which the log writer paces its syncs while
    /// publishes arrive steadily in small groups (`0s` turns it off; default 2 ms): after such
    /// a sync it takes the next group one period after that sync began, so one sync carries
    /// several publishes and none waits longer than a period. Acknowledgements still wait for
    /// the sync. At 2,000 msg/s the guaranteed publisher's CPU cost at its broker is about half
    /// of what it is without (`bench overhead`). A publish after a quiet spell, a large group,
    /// and publishers that each wait for their acks (sleeps that save no sync turn pacing off
    /// for a second) are synced at once.
    #[serde(with = "humantime_serde")]
    pub linger: Duration,
    /// How many brokers of the cell hold each pubend's log (a Raft group, issue 40:
    /// `docs/replication.md`): a guaranteed publish is acknowledged once a majority of them
    /// synced it, so a lost disk loses nothing acknowledged. 0 (the default) means 3 if the
    /// cell has 3 brokers or more, else all of them; with no cell mate linked when a pubend is
    /// created, or with 1, the pubend lives on this broker alone, as before replication.
    pub replicas: usize,
    /// Bytes of raft log entries after which a replica compacts its group's log into a snapshot
    /// of the pubend's state (default 8 MiB, at least twice the last snapshot's size: see
    /// `docs/replication.md`, "Compaction"). Lower, a replica holds less memory and journal and
    /// a restarted one more often catches up from a snapshot rather than the log.
    pub replica_compact_bytes: u64,
    /// Bytes of snapshot data per REPLICA frame when a replica sends a mate a snapshot (default
    /// 1 MiB, at most 4 MiB less 64 KiB): a larger snapshot goes in chunks, reassembled and
    /// verified whole before it is installed (`docs/replication.md`, "Snapshots in chunks").
    pub replica_snapshot_chunk: usize,
    /// The largest snapshot of a pubend's state a replica takes or accepts (default 1 GiB): a
    /// larger state is not compacted until releases shrink it (`snapshots_too_large`).
    pub replica_max_snapshot: usize,
    /// Bytes of one snapshot's chunks a replica keeps unacknowledged by the mate it sends them
    /// to (default 8 MiB; at least one chunk): a large snapshot leaves as the mate takes it, so
    /// the link it shares with other groups' heartbeats and appends never holds more than this
    /// of it (`docs/replication.md`, "Snapshots in chunks").
    pub replica_snapshot_window: usize,
}

/// `[durable]`: where a durable subscription's messages wait for it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Durable {
    /// `"publisher"` (the default, also when empty): a durable subscription's messages wait in
    /// their publishers' pubends, in the publishers' cell (single replication). `"cell"`: each
    /// new durable subscription made here gets a relay that republishes what it matches into a
    /// pubend of this broker, replicated in this cell, and the subscription reads from there,
    /// so its catch-up survives the publishers' cell being unreachable (the seed's double
    /// replication; `docs/replication.md`, "Durable subscriptions stored in the cell"). Needs
    /// a cell with replication (`cluster.cell` and links, `storage.replicas` not 1).
    pub store: String,
}

impl Durable {
    /// Whether durable subscriptions are stored in this broker's cell.
    pub fn in_cell(&self) -> bool {
        self.store == "cell"
    }
}

/// What the replica groups take from `[storage]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaSizes {
    /// `replicas`.
    pub replicas: usize,
    /// `replica_compact_bytes`.
    pub compact_bytes: u64,
    /// `replica_snapshot_chunk`.
    pub snapshot_chunk: usize,
    /// `replica_max_snapshot`.
    pub max_snapshot: usize,
    /// `replica_snapshot_window`.
    pub snapshot_window: usize,
}

impl Default for Storage {
    fn default() -> Storage {
        Storage {
            dir: String::new(),
            fsync: String::new(),
            fault_drop_unsynced: false,
            fault_clock_ahead: Duration::ZERO,
            linger: Duration::from_millis(2),
            replicas: 0,
            replica_compact_bytes: tidings_replica::COMPACT_BYTES,
            replica_snapshot_chunk: tidings_replica::CHUNK_BYTES,
            replica_max_snapshot: tidings_replica::MAX_SNAPSHOT,
            replica_snapshot_window: tidings_replica::SNAPSHOT_WINDOW,
        }
    }
}

impl Storage {
    /// The replica groups' sizes, in one value for the driver.
    pub fn replica_sizes(&self) -> ReplicaSizes {
        ReplicaSizes {
            replicas: self.replicas,
            compact_bytes: self.replica_compact_bytes,
            snapshot_chunk: self.replica_snapshot_chunk,
            max_snapshot: self.replica_max_snapshot,
            snapshot_window: self.replica_snapshot_window,
        }
    }
}

impl Storage {
    /// The fsync policy in force.
    pub fn fsync_policy(&self) -> Result<tidings_store::FsyncPolicy, String> {
        match self.fsync.as_str() {
            "" => Ok(tidings_store::FsyncPolicy::Always),
            text => text.parse(),
        }
    }

    /// The pubend log's options.
    pub fn log_options(&self) -> tidings_store::Options {
        let fsync = self.fsync_policy().unwrap_or_default();
        tidings_store::Options { fsync, linger: self.linger, ..tidings_store::Options::default() }
    }
}

/// Broker-to-broker settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Cluster {
    /// Listener for links from other brokers (`HOST:PORT`); empty turns it off (the broker can
    /// still dial its `[[peer]]` entries).
    pub listen: String,
    /// This broker's cell; empty means a cell of one, named after the broker.
    pub cell: String,
    /// The network's shared secret key: a file of at least 32 bytes that every broker of the
    /// network holds. Links prove possession of it in their handshake (never sending it), and a
    /// peer that cannot is refused. Empty: no key (then `insecure` must be set to link).
    pub key_file: String,
    /// Link without authentication: anyone who reaches the link listener is believed. Only for
    /// test networks on loopback; a broker with a listener or peers and neither a key nor this
    /// flag refuses to start.
    pub insecure: bool,
    /// Time between heartbeats on every link.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// A link that stays silent for this many heartbeat intervals is declared down.
    pub missed_heartbeats: u32,
    /// First delay before redialling a lost peer; doubles per failure up to `reconnect_max`,
    /// and up to twice this while the peer was up within the last 10 s (a healed link is
    /// back within about two of these).
    #[serde(with = "humantime_serde")]
    pub reconnect_min: Duration,
    /// Longest delay between redials.
    #[serde(with = "humantime_serde")]
    pub reconnect_max: Duration,
    /// Most data messages queued on one link; beyond, messages are dropped and counted
    /// (`tidings_link_drops`), and the link stays up.
    pub link_queue_messages: usize,
    /// Most data bytes queued on one link.
    pub link_queue_bytes: usize,
    /// The broker that keeps every guaranteed queue group of the network (its work queue and
    /// durable subscription): members at other brokers are leased to along the path to it,
    /// relayed by the brokers between (docs/protocol.md, "Guaranteed queue groups"). Every broker of the network names
    /// the same one; empty: a broker with links refuses guaranteed queue group members.
    pub queue_home: String,
    /// The client TCP addresses (`host:port`, comma-separated) this broker tells its cell
    /// mates, which tell their clients (SERVERS, `docs/replication.md`, "Clients"), as NATS's
    /// `client_advertise`: set it when clients reach the broker at an address it cannot see
    /// (NAT, a proxy, a DNS name). Empty: the client listener's bound address, and for a
    /// wildcard listener (`0.0.0.0`, `::`) the IP address of this broker's end of each link
    /// with that listener's port (the address the mate itself reaches it at). `"none"` tells
    /// no address.
    pub client_advertise: String,
}

/// A broker to dial.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// Its cluster listener, `HOST:PORT`.
    pub address: String,
}

impl Default for Cluster {
    fn default() -> Cluster {
        Cluster {
            listen: String::new(),
            cell: String::new(),
            key_file: String::new(),
            insecure: false,
            heartbeat_interval: Duration::from_millis(250),
            missed_heartbeats: 3,
            reconnect_min: Duration::from_millis(100),
            // A peer up within the last 10 s is redialled every 0.1-0.2 s, so a healed link is
            // back within 0.2 s (`cluster/redial.rs`); one gone for longer lands in [0.4, 0.8] s
            // of the last failure and costs at most 2.5 connection attempts a second.
            reconnect_max: Duration::from_millis(800),
            link_queue_messages: 65_536,
            link_queue_bytes: 64 * 1024 * 1024,
            queue_home: String::new(),
            client_advertise: String::new(),
        }
    }
}

impl Config {
    /// The cell this broker announces: `cluster.cell`, or the broker's name.
    pub fn cell(&self) -> &str {
        if self.cluster.cell.is_empty() {
            &self.name
        } else {
            &self.cluster.cell
        }
    }

    /// The data directory in force: `storage.dir`, or `tidings-data/<name>`.
    pub fn data_dir(&self) -> std::path::PathBuf {
        if self.storage.dir.is_empty() {
            Path::new("tidings-data").join(&self.name)
        } else {
            std::path::PathBuf::from(&self.storage.dir)
        }
    }

    /// `[durable] store = "cell"` needs a cell whose pubends are replicated (its cell and
    /// links may come from the command line: see [`Config::validate_start`]).
    fn validate_durable(&self, problems: &mut Vec<String>) {
        match self.durable.store.as_str() {
            "" | "publisher" => {}
            "cell" => {
                if self.storage.replicas == 1 {
                    problems.push(
                        "durable.store: \"cell\" needs replication in the cell (storage.replicas is 1: the copy would live on this broker alone)"
                            .to_string(),
                    );
                }
            }
            other => problems.push(format!("durable.store: {other:?} is neither \"publisher\" nor \"cell\"")),
        }
    }

    fn validate_cluster(&self, problems: &mut Vec<String>) {
        let c = &self.cluster;
        let linked = !c.listen.is_empty() || !self.peer.is_empty();
        if linked && c.key_file.is_empty() && !c.insecure {
            problems.push(
                "cluster.key_file: links need the network's shared key (`--cluster-key FILE`); \
                 `cluster.insecure = true` (`--cluster-insecure`) links without one, for test networks only"
                    .to_string(),
            );
        }
        if !c.key_file.is_empty() && c.insecure {
            problems.push("cluster.insecure: cannot be set together with cluster.key_file".to_string());
        }
        if !c.listen.is_empty() && c.listen.parse::<SocketAddr>().is_err() {
            problems.push(format!("cluster.listen: {:?} is not HOST:PORT (an IP address and a port)", c.listen));
        }
        if c.heartbeat_interval < Duration::from_millis(10) {
            problems.push("cluster.heartbeat_interval: must be at least 10ms".to_string());
        }
        if c.missed_heartbeats == 0 {
            problems.push("cluster.missed_heartbeats: must be at least 1".to_string());
        }
        if c.reconnect_min.is_zero() || c.reconnect_max < c.reconnect_min {
            problems.push("cluster.reconnect_min: must be above zero and at most cluster.reconnect_max".to_string());
        }
        if c.link_queue_messages == 0 {
            problems.push("cluster.link_queue_messages: must be at least 1".to_string());
        }
        if c.link_queue_bytes < self.limits.max_frame {
            problems.push(format!(
                "cluster.link_queue_bytes: {} is below limits.max_frame ({})",
                c.link_queue_bytes, self.limits.max_frame
            ));
        }
        for (index, peer) in self.peer.iter().enumerate() {
            let port_ok = peer
                .address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !port_ok {
                problems.push(format!("peer[{index}].address: {:?} is not HOST:PORT", peer.address));
            }
        }
    }
}

/// Listener addresses. An empty string turns a listener off.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Listen {
    /// Client TCP listener (`HOST:PORT`; port 0 lets the OS pick).
    pub tcp: String,
    /// Client UDP listener; same frames in datagrams.
    pub udp: String,
    /// Admin HTTP listener: `/metrics`, `/healthz`.
    pub admin: String,
}

/// The MQTT listeners, over TCP and over WebSocket. Off by default (both empty): parts of 5.0
/// are not served yet, so they are offered only where an operator asks for them, rather than
/// taking port 1883 from a broker that does more (see `docs/mqtt.md`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Mqtt {
    /// `HOST:PORT` for MQTT clients (1883 is MQTT's port; 0 lets the OS pick); empty is off.
    pub listen: String,
    /// `HOST:PORT` for MQTT over WebSocket (browsers and MQTT.js; 8083 is customary, 0 lets
    /// the OS pick); empty is off. Any path is served (`ws://HOST:PORT/mqtt` is usual).
    pub websocket: String,
    /// The longest keep alive, in seconds, a 5.0 client may have: one asking for more is told
    /// this one in CONNACK (Server Keep Alive), so a dead client's session and will are noticed
    /// within one and a half times it. 0 leaves every client its own.
    pub max_keep_alive: u16,
    /// `HOST:PORT` of another broker that 5.0 clients are sent to (Server Reference): when
    /// this one is at its connection limit (CONNACK 0x9C Use another server instead of a
    /// closed socket) and when it shuts down (DISCONNECT 0x9C instead of 0x8B). Empty: none.
    pub server_reference: String,
    /// The broker moved for good to `server_reference`: every 5.0 CONNECT is answered CONNACK
    /// 0x9D Server moved with it, and a 3.1.1 one 0x03 Server unavailable (3.1.1 cannot say
    /// where).
    pub moved: bool,
}

impl Default for Mqtt {
    fn default() -> Mqtt {
        Mqtt {
            listen: String::new(),
            websocket: String::new(),
            max_keep_alive: 60,
            server_reference: String::new(),
            moved: false,
        }
    }
}

/// Whether `reference` is `HOST:PORT`: a host name, an IPv4 address or a bracketed IPv6 one,
/// and a port from 1. A typo must stop the broker at start, not send every client nowhere.
fn is_host_port(reference: &str) -> bool {
    let Some((host, port)) = reference.rsplit_once(':') else { return false };
    let port_ok = port.parse::<u16>().is_ok_and(|port| port > 0);
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && !label.starts_with('-')
                        && !label.ends_with('-')
                        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
        }
    };
    port_ok && host_ok
}

/// Limits that keep one client from exhausting the broker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest frame accepted, type byte and body, in bytes.
    pub max_frame: usize,
    /// Most active subscriptions one session may hold.
    pub max_subscriptions_per_session: usize,
    /// Most client TCP connections at once; a connection past it is refused with ERROR
    /// `limit_exceeded`. Capped at start below the process's open-file limit, so the admin
    /// port and the data directory always have descriptors.
    pub max_connections: usize,
    /// Most client TCP connections from one source address at once; 0 (the default): an
    /// eighth of `max_connections` as in force after the open-file cap, so one host can never
    /// shut everyone else out (a fixed default above the capped total once could). Set it
    /// for a known gateway; it may not exceed `max_connections`.
    pub max_connections_per_address: usize,
    /// Most new client TCP connections accepted per second (0: no bound), with a burst of a
    /// twentieth of a second's worth. Setting a connection up costs the broker about 0.2 ms of
    /// a core; 4,000 opened as fast as one client can put a neighbour's p99 at 6 ms against
    /// 0.3 ms idle on two cores. Connections past the rate wait in the kernel's listen backlog
    /// (a reconnect storm of 10,000 clients takes 10 s at the default), as EMQX's
    /// `max_conn_rate` does.
    pub max_connection_rate: u32,
    /// A connection that has not completed HELLO within this is closed. Before HELLO a frame
    /// may be at most 4 KiB, whatever `max_frame` says: an unknown peer buffers little.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: std::time::Duration,
    /// A frame that has not arrived whole this long after its first byte closes its connection
    /// (clients with ERROR `limit_exceeded`, links with CLOSE), before and after HELLO. Half a
    /// frame is memory held for the sender: without a bound, 150 connections each holding
    /// half of an 8 MiB frame kept 1.2 GiB for as long as they liked. 10 s lets a whole
    /// `max_frame` (8 MiB) through at 7 Mbit/s; a slower client needs a larger value or
    /// smaller frames. Time a broker spends not reading (holding a publisher back for a
    /// congested subscriber, at most `slow_consumer.max_stall`) counts too.
    #[serde(with = "humantime_serde")]
    pub frame_timeout: std::time::Duration,
    /// Most bytes queued to all clients together (0: no bound but each queue's own). Past it
    /// the connections holding the most are cut, slowest first, with reason `slow_consumer`.
    pub max_queued_bytes: usize,
    /// Memory freed goes back to the operating system at once (the allocator's purge delay is
    /// 0), so a burst (a stalled subscriber's queue) does not stay resident after it. It costs
    /// about a tenth of best-effort throughput (`tidings bench tput --subs 4`: 506-603 k
    /// against 569-651 k msg/s); `false` keeps the allocator's lazy default, under which a
    /// burst's pages stayed resident while the threads that freed them were idle. Transparent
    /// huge pages are turned off with it: each page given back and touched again would be a
    /// 2 MiB fault (see `purge_freed_memory_at_once` in the CLI).
    pub return_freed_memory: bool,
    /// A published message whose matching took longer than this (its topic's subscriptions'
    /// selectors against its properties) closes its publisher's connection with ERROR
    /// `limit_exceeded` (0: never). Matching runs beside every other session's, never under
    /// a lock that stops them, but it holds one of the broker's threads: a client sending
    /// messages built to be costly (a long text against many LIKE selectors) is cut at its
    /// first such message instead of taking a core for as long as it likes.
    #[serde(with = "humantime_serde")]
    pub max_match_time: std::time::Duration,
    /// Most bytes of retained values (`pub --retain`) the broker keeps, all topics together.
    /// Every broker of a network keeps every retained value, so this bounds each of them; a
    /// retained publish past it is refused at its publisher's broker with ERROR
    /// `limit_exceeded`, and changes nothing.
    pub max_retained_bytes: usize,
    /// Threads that run the broker's sessions, links and listeners (0: one per core, tokio's
    /// default). Set it to leave cores to other processes on a shared machine, or to measure
    /// how the broker scales with cores (`tidings bench tput --server-threads N`); the
    /// guaranteed-delivery driver and disk syncs have threads of their own besides.
    pub worker_threads: usize,
}

/// What the broker does when a subscriber's outbound queue is full.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OverflowPolicy {
    /// Drop the message for that subscriber only, count it, and report the count in the
    /// subscriber's next delivery.
    Drop,
    /// Close the subscriber's connection with reason `slow_consumer`.
    Disconnect,
    /// Drop the oldest delivery queued for that client to make room, count it, and report the
    /// count in the next delivery to its subscription. UDP clients use it (`[udp]
    /// queue_messages`): a late datagram is worth less than a new one, and a queue that keeps
    /// the oldest turns a slow reader into seconds of latency and then loses it all anyway.
    DropOldest,
}

/// Bounds on each subscriber's outbound queue and the overflow policy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SlowConsumer {
    /// Most messages queued for one subscriber connection.
    pub max_messages: usize,
    /// Most payload-and-header bytes queued for one subscriber connection.
    pub max_bytes: usize,
    /// What to do on overflow.
    pub policy: OverflowPolicy,
    /// How long a publisher may be held back while a subscriber's queue is past half full,
    /// before that subscriber is treated as slow. Back-pressure absorbs bursts without loss;
    /// this bound keeps a stuck subscriber from stalling its publishers for longer.
    #[serde(with = "humantime_serde")]
    pub max_stall: Duration,
}

/// UDP session settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Udp {
    /// A UDP client's subscriptions expire after this long without a datagram from it.
    #[serde(with = "humantime_serde")]
    pub session_ttl: Duration,
    /// Most deliveries queued for one UDP client; past it the oldest is dropped (and counted in
    /// its subscription's `missed`). At 1,000 msg/s, 256 is a quarter second of latency at most.
    pub queue_messages: usize,
    /// The client UDP socket's receive buffer, in bytes (`SO_RCVBUF`; the kernel caps it at
    /// `net.core.rmem_max`, and the broker says so at start).
    pub recv_buffer: usize,
    /// The client UDP socket's send buffer, in bytes (`SO_SNDBUF`; capped at
    /// `net.core.wmem_max`).
    pub send_buffer: usize,
    /// Most UDP sessions open at once; a new client past it gets ERROR `limit_exceeded`. Each
    /// session holds a queue and a writer task, and only clients that proved their address
    /// (an address token) get one.
    pub max_sessions: usize,
    /// Largest datagram the broker packs deliveries into, in bytes. Deliveries queued for one
    /// client go out several to a datagram up to this size (each a whole frame, as clients
    /// read them), so a busy subscriber costs a system call and a socket buffer slot per
    /// datagram, not per message; a delivery larger than this goes alone (up to 65,507). The
    /// default fits one Ethernet frame, so no datagram is fragmented on a LAN; on loopback or
    /// with jumbo frames it may be larger.
    pub max_datagram: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            name: "tidings".to_string(),
            listen: Listen::default(),
            mqtt: Mqtt::default(),
            limits: Limits::default(),
            slow_consumer: SlowConsumer::default(),
            udp: Udp::default(),
            cluster: Cluster::default(),
            peer: Vec::new(),
            storage: Storage::default(),
            retention: Retention::default(),
            durable: Durable::default(),
            log: Log::default(),
            guaranteed: Default::default(),
            security: Default::default(),
            tls: Default::default(),
        }
    }
}

impl Default for Listen {
    fn default() -> Listen {
        Listen {
            tcp: format!("127.0.0.1:{DEFAULT_PORT}"),
            udp: format!("127.0.0.1:{DEFAULT_PORT}"),
            admin: format!("127.0.0.1:{DEFAULT_ADMIN_PORT}"),
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_frame: tidings_wire::DEFAULT_MAX_FRAME,
            max_subscriptions_per_session: 65_536,
            max_connections: 50_000,
            max_connections_per_address: 0,
            max_connection_rate: 1_000,
            handshake_timeout: std::time::Duration::from_secs(10),
            frame_timeout: std::time::Duration::from_secs(10),
            max_queued_bytes: 512 * 1024 * 1024,
            return_freed_memory: true,
            max_match_time: std::time::Duration::from_millis(500),
            max_retained_bytes: 64 * 1024 * 1024,
            worker_threads: 0,
        }
    }
}

impl Default for SlowConsumer {
    fn default() -> SlowConsumer {
        SlowConsumer {
            max_messages: 65_536,
            max_bytes: 64 * 1024 * 1024,
            policy: OverflowPolicy::Drop,
            max_stall: Duration::from_millis(500),
        }
    }
}

impl Default for Udp {
    fn default() -> Udp {
        Udp {
            session_ttl: Duration::from_secs(30),
            queue_messages: 256,
            recv_buffer: 8 << 20,
            send_buffer: 8 << 20,
            max_sessions: 100_000,
            max_datagram: 1472,
        }
    }
}

/// A configuration that cannot be used, with every problem found.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, which names the key and line.
        message: String,
    },
    /// Values that parse but make no sense, each with its key path.
    #[error("invalid configuration:\n{}", .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<String>),
}

impl Config {
    /// Reads a TOML file; keys not given keep their defaults.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Config::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse { path: path.display().to_string(), message },
            other => other,
        })
    }

    /// The checks of the whole configuration a broker starts with (its file and command line
    /// together), beyond [`Config::validate`]: `[durable] store = "cell"` needs a cell of
    /// several brokers, so a cell name and links.
    pub fn validate_start(&self) -> Result<(), ConfigError> {
        let linked = !self.cluster.listen.is_empty() || !self.peer.is_empty();
        if self.durable.in_cell() && (self.cluster.cell.is_empty() || !linked) {
            let why = "durable.store: \"cell\" needs a cell of several brokers whose pubends are replicated \
                       (cluster.cell and links to its mates)";
            return Err(ConfigError::Invalid(vec![why.to_string()]));
        }
        Ok(())
    }

    /// Parses TOML text and validates it.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: "<config>".into(), message: e.to_string() })?;
        config.validate()?;
        Ok(config)
    }

    /// The effective configuration as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render configuration: {e}\n"))
    }

    /// Checks every value and reports all problems at once, each with its key path.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        if self.retention.policy == RetentionPolicy::Backpressure
            && (self.retention.max_bytes > 0 || !self.retention.max_age.is_zero())
            && self.retention.max_wait.is_zero()
        {
            problems.push("retention.max_wait: must be above zero with the backpressure policy".to_string());
        }
        for (key, value) in [
            ("listen.tcp", &self.listen.tcp),
            ("listen.udp", &self.listen.udp),
            ("listen.admin", &self.listen.admin),
            ("mqtt.listen", &self.mqtt.listen),
            ("mqtt.websocket", &self.mqtt.websocket),
        ] {
            if !value.is_empty() && value.parse::<SocketAddr>().is_err() {
                problems
                    .push(format!("{key}: {value:?} is not HOST:PORT (an IP address and a port; empty turns it off)"));
            }
        }
        let reference = &self.mqtt.server_reference;
        if !reference.is_empty() && !is_host_port(reference) {
            problems.push(format!(
                "mqtt.server_reference: {reference:?} is not HOST:PORT (a host name, an IPv4 address or [IPv6], and a port)"
            ));
        }
        if self.mqtt.moved && reference.is_empty() {
            problems.push("mqtt.moved: needs mqtt.server_reference, the address clients are sent to".to_string());
        }
        if self.listen.tcp.is_empty() && self.listen.udp.is_empty() {
            problems.push("listen: at least one of tcp and udp must be set".to_string());
        }
        if self.log.level.trim().is_empty() {
            problems.push("log.level: must name a level (error, warn, info, debug, trace) or a filter".to_string());
        }
        if self.name.is_empty() || self.name.len() > 255 {
            problems.push("name: must be 1 to 255 bytes".to_string());
        }
        if self.limits.max_frame < 64 || self.limits.max_frame > u32::MAX as usize {
            problems.push(format!("limits.max_frame: {} is outside 64 ..= {}", self.limits.max_frame, u32::MAX));
        }
        if self.limits.max_subscriptions_per_session == 0 {
            problems.push("limits.max_subscriptions_per_session: must be at least 1".to_string());
        }
        if self.limits.max_connections == 0 {
            problems.push("limits.max_connections: must be at least 1".to_string());
        }
        if self.limits.max_connections_per_address > self.limits.max_connections {
            problems.push(format!(
                "limits.max_connections_per_address: {} is above limits.max_connections ({}): one address could take every place",
                self.limits.max_connections_per_address, self.limits.max_connections
            ));
        }
        if self.limits.handshake_timeout.is_zero() || self.limits.frame_timeout.is_zero() {
            problems.push("limits.handshake_timeout, limits.frame_timeout: must be above zero".to_string());
        }
        if let Err(e) = self.storage.fsync_policy() {
            problems.push(format!("storage.fsync: {e}"));
        }
        if self.storage.replicas > tidings_wire::peer::MAX_REPLICA_VOTERS {
            problems.push(format!(
                "storage.replicas: {} is above {}, the most voters a group's frames carry",
                self.storage.replicas,
                tidings_wire::peer::MAX_REPLICA_VOTERS
            ));
        }
        if self.slow_consumer.max_messages == 0 {
            problems.push("slow_consumer.max_messages: must be at least 1".to_string());
        }
        if self.slow_consumer.max_bytes < self.limits.max_frame {
            problems.push(format!(
                "slow_consumer.max_bytes: {} is below limits.max_frame ({}), so a large message could never be queued",
                self.slow_consumer.max_bytes, self.limits.max_frame
            ));
        }
        if self.limits.max_queued_bytes != 0 && self.limits.max_queued_bytes < self.slow_consumer.max_bytes {
            problems.push(format!(
                "limits.max_queued_bytes: {} is below slow_consumer.max_bytes ({}): one queue could exhaust it",
                self.limits.max_queued_bytes, self.slow_consumer.max_bytes
            ));
        }
        if !(512..=65_507).contains(&self.udp.max_datagram) {
            problems.push("udp.max_datagram: must be 512 to 65507 bytes".to_string());
        }
        if self.udp.queue_messages == 0 {
            problems.push("udp.queue_messages: must be at least 1".to_string());
        }
        if self.udp.session_ttl < Duration::from_millis(100) {
            problems.push("udp.session_ttl: must be at least 100ms".to_string());
        }
        self.validate_cluster(&mut problems);
        self.validate_durable(&mut problems);
        problems.extend(self.tls.problems());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_store_cell_needs_a_replicated_cell_and_other_values_are_refused() {
        let cell = Config::from_toml("[durable]\nstore = \"cell\"\n").unwrap();
        let err = cell.validate_start().unwrap_err().to_string();
        assert!(err.contains("durable.store") && err.contains("cluster.cell"), "{err}");
        let mut linked = cell.clone();
        linked.cluster.cell = "S".into();
        linked.cluster.listen = "127.0.0.1:0".into();
        assert!(linked.validate_start().is_ok());
        let err = Config::from_toml("[durable]\nstore = \"cell\"\n[storage]\nreplicas = 1\n").unwrap_err().to_string();
        assert!(err.contains("storage.replicas is 1"), "{err}");
        let err = Config::from_toml("[durable]\nstore = \"disk\"\n").unwrap_err().to_string();
        assert!(err.contains("neither"), "{err}");
        assert!(!Config::default().durable.in_cell());
        assert!(Config::default().validate_start().is_ok());
    }

    #[test]
    fn tls_is_off_by_default_and_half_settings_are_named() {
        let off = Config::default();
        assert!(!off.tls.enabled() && !off.tls.tcp_on() && !off.tls.mqtt_on());
        let err = Config::from_toml("[tls]\ncert = \"c.pem\"\n").unwrap_err().to_string();
        assert!(err.contains("tls.cert and tls.key"), "{err}");
        let err =
            Config::from_toml("[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nlinks = true\n").unwrap_err().to_string();
        assert!(err.contains("tls.links"), "{err}");
        let on = Config::from_toml("[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nmqtt = false\n").unwrap();
        assert!(on.tls.tcp_on() && !on.tls.mqtt_on());
    }

    #[test]
    fn an_empty_file_gives_the_defaults() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn printed_config_parses_back_to_itself() {
        let c = Config::default();
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let err = Config::from_toml("[listen]\ntcpp = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("tcpp"), "{err}");
    }

    #[test]
    fn udp_queues_and_buffers_are_settings() {
        let c = Config::from_toml("[udp]\nqueue_messages = 64\nrecv_buffer = 1048576\n").unwrap();
        assert_eq!((c.udp.queue_messages, c.udp.recv_buffer, c.udp.send_buffer), (64, 1 << 20, 8 << 20));
        let err = Config::from_toml("[udp]\nqueue_messages = 0\n").unwrap_err().to_string();
        assert!(err.contains("udp.queue_messages"), "{err}");
    }

    #[test]
    fn every_invalid_value_is_reported_at_once() {
        let err = Config::from_toml("[listen]\ntcp = \"nope\"\nadmin = \"bad\"\n[slow_consumer]\nmax_messages = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("listen.tcp") && err.contains("listen.admin") && err.contains("max_messages"), "{err}");
    }

    #[test]
    fn peers_and_cluster_settings_parse_and_print() {
        let c = Config::from_toml(
            "[cluster]\nlisten = \"127.0.0.1:0\"\ncell = \"IB1\"\nheartbeat_interval = \"100ms\"\nkey_file = \"k\"\n\
             [[peer]]\naddress = \"127.0.0.1:7000\"\n[[peer]]\naddress = \"localhost:7001\"\n",
        )
        .unwrap();
        assert_eq!(c.peer.len(), 2);
        assert_eq!(c.cell(), "IB1");
        assert_eq!(c.cluster.heartbeat_interval, Duration::from_millis(100));
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn bad_peer_addresses_and_cluster_values_are_reported_with_their_keys() {
        let err = Config::from_toml("[cluster]\nmissed_heartbeats = 0\n[[peer]]\naddress = \"nope\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("peer[0].address") && err.contains("cluster.missed_heartbeats"), "{err}");
        let err = Config::from_toml("[[peer]]\naddres = \"x:1\"\n").unwrap_err().to_string();
        assert!(err.contains("addres"), "{err}");
    }

    #[test]
    fn links_without_a_key_need_the_explicit_insecure_flag() {
        let err = Config::from_toml("[cluster]\nlisten = \"127.0.0.1:0\"\n").unwrap_err().to_string();
        assert!(err.contains("cluster.key_file") && err.contains("insecure"), "{err}");
        let err = Config::from_toml("[[peer]]\naddress = \"127.0.0.1:1\"\n").unwrap_err().to_string();
        assert!(err.contains("cluster.key_file"), "{err}");
        assert!(Config::from_toml("[cluster]\nlisten = \"127.0.0.1:0\"\ninsecure = true\n").is_ok());
        assert!(Config::from_toml("[cluster]\nlisten = \"127.0.0.1:0\"\nkey_file = \"k\"\n").is_ok());
        let err = Config::from_toml("[cluster]\nkey_file = \"k\"\ninsecure = true\n").unwrap_err().to_string();
        assert!(err.contains("cluster.insecure"), "{err}");
        assert!(Config::from_toml("").is_ok(), "a lone broker needs neither");
    }

    #[test]
    fn the_data_dir_defaults_to_one_per_broker_name() {
        let c = Config::from_toml("name = \"b7\"\n").unwrap();
        assert_eq!(c.data_dir(), Path::new("tidings-data/b7"));
        let c = Config::from_toml("[storage]\ndir = \"/var/lib/t\"\n").unwrap();
        assert_eq!(c.data_dir(), Path::new("/var/lib/t"));
    }

    #[test]
    fn the_fsync_policy_defaults_to_always_and_a_bad_one_is_refused() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.storage.fsync_policy(), Ok(tidings_store::FsyncPolicy::Always));
        let c = Config::from_toml("[storage]\nfsync = \"batch:5ms\"\n").unwrap();
        assert!(c.validate().is_ok());
        assert!(matches!(c.storage.fsync_policy(), Ok(tidings_store::FsyncPolicy::Batch(_))));
        let error = Config::from_toml("[storage]\nfsync = \"sometimes\"\n").unwrap_err();
        assert!(error.to_string().contains("storage.fsync"), "{error}");
    }

    #[test]
    fn durations_are_written_as_text() {
        let c = Config::from_toml(
            "[udp]\nsession_ttl = \"2s\"\n[slow_consumer]\nmax_stall = \"5ms\"\npolicy = \"disconnect\"\n",
        )
        .unwrap();
        assert_eq!(c.udp.session_ttl, Duration::from_secs(2));
        assert_eq!(c.slow_consumer.max_stall, Duration::from_millis(5));
        assert_eq!(c.slow_consumer.policy, OverflowPolicy::Disconnect);
    }
}
