//! The broker's open connections and their subscriptions, for `/connz` and `/subsz` (as
//! nats-server's endpoints of those names): who is connected, over what, since when, with which
//! subscriptions, how deep its queue is and what it sent, received and lost. Sessions register
//! here when they open and leave when they drop; the admin listener reads a page at a time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::outbox::Outbox;

/// Which transport a session runs over; they differ in handshake and renewal rules. Defined
/// here, below the sessions, because every connection's entry names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A TCP connection: HELLO first, then anything.
    Tcp,
    /// A UDP client address: HELLO optional; an identical SUBSCRIBE renews.
    Udp,
}

impl Transport {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}

/// The protocols a connection may speak, as `/connz`, `/subsz` and the metric label name them:
/// an operator must tell MQTT clients (and which MQTT) from native ones, which the transport
/// alone does not say.
pub const PROTOCOLS: [&str; 5] = ["native", "mqtt/3.1.1", "mqtt/5", "mqtt-ws/3.1.1", "mqtt-ws/5"];

/// A protocol, by its place in [`PROTOCOLS`]; a number, so a connection's entry keeps it in an
/// atomic byte (an MQTT connection learns its version at CONNECT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocol(u8);

impl Protocol {
    /// tidings' own frames (TCP or UDP).
    pub const NATIVE: Protocol = Protocol(0);

    /// The MQTT protocol of a connection whose CONNECT said 5.0 (`v5`) or 3.1.1, over
    /// WebSocket or not.
    pub fn mqtt(websocket: bool, v5: bool) -> Protocol {
        Protocol(1 + u8::from(v5) + 2 * u8::from(websocket))
    }

    /// Its name in [`PROTOCOLS`].
    pub fn label(self) -> &'static str {
        PROTOCOLS.get(usize::from(self.0)).copied().unwrap_or(PROTOCOLS[0])
    }
}

/// Every open connection (a TCP connection or a UDP client address), by id.
#[derive(Default)]
pub struct Connections {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

/// One open connection's entry.
pub struct Conn {
    id: u64,
    transport: Transport,
    /// A [`Protocol`] by number: an MQTT connection learns its version at CONNECT.
    protocol: AtomicU8,
    started_ms: u64,
    outbox: Arc<Outbox>,
    /// Frames read from the client.
    pub frames_in: AtomicU64,
    subscriptions: Mutex<BTreeMap<u32, SubInfo>>,
}

/// One subscription as `/subsz` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SubInfo {
    /// The client's id for it.
    pub id: u32,
    /// Its topic pattern.
    pub pattern: String,
    /// Its selector, if any.
    pub selector: Option<String>,
    /// `best-effort`, `guaranteed` or `durable`.
    pub mode: &'static str,
    /// A durable subscription's name.
    pub durable: Option<String>,
    /// The queue group it is a member of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// One connection as `/connz` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ConnInfo {
    /// The broker's id for the connection (unique while it runs).
    pub id: u64,
    /// `tcp` or `udp`.
    pub transport: &'static str,
    /// One of [`PROTOCOLS`]: `native`, `mqtt/3.1.1`, `mqtt/5`, `mqtt-ws/3.1.1`, `mqtt-ws/5`.
    pub protocol: &'static str,
    /// The client's address and, once it said HELLO, its name.
    pub client: String,
    /// Seconds since it connected.
    pub uptime_s: u64,
    /// Subscriptions it holds.
    pub subscriptions: usize,
    /// Frames and bytes queued for it now.
    pub queued: usize,
    /// See `queued`.
    pub queued_bytes: usize,
    /// Frames read from it.
    pub frames_in: u64,
    /// Messages and bytes written to it.
    pub messages_out: u64,
    /// See `messages_out`.
    pub bytes_out: u64,
    /// Deliveries dropped for it (its queue was full).
    pub dropped: u64,
    /// UDP: deliveries lost because the socket would not send their datagram.
    pub send_failed: u64,
}

/// A page of a list, with the list's full length.
#[derive(Clone, Debug, Serialize)]
pub struct Page<T> {
    /// Entries in the whole list.
    pub total: usize,
    /// The first entry's place in it.
    pub offset: usize,
    /// At most this many are shown.
    pub limit: usize,
    /// The entries shown.
    pub items: Vec<T>,
}

/// `/subsz`: a page of subscriptions, and every queue group with members here.
#[derive(Clone, Debug, Serialize)]
pub struct Subsz {
    /// The page of subscriptions.
    #[serde(flatten)]
    pub page: Page<SubEntry>,
    /// Queue groups by name, each with its members (all of them, whatever the page), so an
    /// operator sees at once which workers share a group's messages at this broker.
    pub groups: BTreeMap<String, Vec<GroupMember>>,
}

/// A queue group member as `/subsz` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct GroupMember {
    /// The connection's id (as `/connz` shows it).
    pub connection: u64,
    /// The client's name, from its HELLO.
    pub client: String,
    /// The client's id for the subscription.
    pub id: u32,
    /// The member's topic pattern.
    pub pattern: String,
}

/// A `/subsz` entry: a subscription and its connection.
#[derive(Clone, Debug, Serialize)]
pub struct SubEntry {
    /// The connection's id (as `/connz` shows it).
    pub connection: u64,
    /// The connection's protocol ([`PROTOCOLS`]): an MQTT client's subscriptions are its
    /// filters mapped onto native subscriptions, shown with their native patterns.
    pub protocol: &'static str,
    /// The subscription.
    #[serde(flatten)]
    pub subscription: SubInfo,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Connections {
    /// Registers a new connection; it stays listed until [`Connections::close`].
    pub fn open(&self, transport: Transport, outbox: Arc<Outbox>) -> Arc<Conn> {
        let id = self.next.fetch_add(1, Relaxed) + 1;
        let conn = Arc::new(Conn {
            id,
            transport,
            protocol: AtomicU8::new(Protocol::NATIVE.0),
            started_ms: now_ms(),
            outbox,
            frames_in: AtomicU64::new(0),
            subscriptions: Mutex::default(),
        });
        self.open.lock().insert(id, Arc::clone(&conn));
        conn
    }

    /// The connection ended.
    pub fn close(&self, conn: &Conn) {
        self.open.lock().remove(&conn.id);
    }

    /// The connections from the `offset`th, at most `limit`, oldest first.
    pub fn page(&self, offset: usize, limit: usize) -> Page<ConnInfo> {
        // The entries are copied out first: the lock is held for the copy, not the encoding.
        let (total, shown): (usize, Vec<Arc<Conn>>) = {
            let open = self.open.lock();
            (open.len(), open.values().skip(offset).take(limit).cloned().collect())
        };
        Page { total, offset, limit, items: shown.iter().map(|c| c.info()).collect() }
    }

    /// The subscriptions from the `offset`th, at most `limit`, by connection then id; only
    /// those whose pattern contains `pattern` when it is given.
    pub fn subscriptions(&self, offset: usize, limit: usize, pattern: Option<&str>) -> Page<SubEntry> {
        let conns: Vec<Arc<Conn>> = self.open.lock().values().cloned().collect();
        let all = conns.iter().flat_map(|conn| {
            let subs: Vec<SubInfo> = conn.subscriptions.lock().values().cloned().collect();
            let protocol = conn.protocol().label();
            subs.into_iter().map(move |subscription| SubEntry { connection: conn.id, protocol, subscription })
        });
        let wanted: Vec<SubEntry> =
            all.filter(|e| pattern.is_none_or(|p| e.subscription.pattern.contains(p))).collect();
        let total = wanted.len();
        Page { total, offset, limit, items: wanted.into_iter().skip(offset).take(limit).collect() }
    }

    /// `/subsz`: the page [`Connections::subscriptions`] gives, and the queue groups.
    pub fn subsz(&self, offset: usize, limit: usize, pattern: Option<&str>) -> Subsz {
        let page = self.subscriptions(offset, limit, pattern);
        let conns: Vec<Arc<Conn>> = self.open.lock().values().cloned().collect();
        let mut groups: BTreeMap<String, Vec<GroupMember>> = BTreeMap::new();
        for conn in conns {
            let client = conn.outbox.client.lock().clone();
            for sub in conn.subscriptions.lock().values() {
                if let Some(group) = &sub.group {
                    let member = GroupMember {
                        connection: conn.id,
                        client: client.clone(),
                        id: sub.id,
                        pattern: sub.pattern.clone(),
                    };
                    groups.entry(group.clone()).or_default().push(member);
                }
            }
        }
        Subsz { page, groups }
    }
}

impl Conn {
    /// The protocol the connection speaks now.
    pub fn protocol(&self) -> Protocol {
        Protocol(self.protocol.load(Relaxed))
    }

    /// Sets the protocol (an MQTT connection at CONNECT); the one it replaces.
    pub fn set_protocol(&self, protocol: Protocol) -> Protocol {
        Protocol(self.protocol.swap(protocol.0, Relaxed))
    }

    /// A subscription was made.
    pub fn subscribed(&self, sub: SubInfo) {
        self.subscriptions.lock().insert(sub.id, sub);
    }

    /// A subscription ended.
    pub fn unsubscribed(&self, id: u32) {
        self.subscriptions.lock().remove(&id);
    }

    fn info(&self) -> ConnInfo {
        let (queued, queued_bytes) = self.outbox.depth();
        let counts = &self.outbox.counts;
        ConnInfo {
            id: self.id,
            transport: self.transport.label(),
            protocol: self.protocol().label(),
            client: self.outbox.client.lock().clone(),
            uptime_s: now_ms().saturating_sub(self.started_ms) / 1000,
            subscriptions: self.subscriptions.lock().len(),
            queued,
            queued_bytes,
            frames_in: self.frames_in.load(Relaxed),
            messages_out: counts.messages_out.load(Relaxed),
            bytes_out: counts.bytes_out.load(Relaxed),
            dropped: counts.dropped.load(Relaxed),
            send_failed: counts.send_failed.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protocol_has_its_own_label() {
        let labels: Vec<&str> = [(false, false), (false, true), (true, false), (true, true)]
            .into_iter()
            .map(|(websocket, v5)| Protocol::mqtt(websocket, v5).label())
            .collect();
        assert_eq!(labels, ["mqtt/3.1.1", "mqtt/5", "mqtt-ws/3.1.1", "mqtt-ws/5"]);
        assert_eq!(Protocol::NATIVE.label(), "native");
    }
}
