//! The MQTT sessions of one listener by client identifier: which connection holds each (a new
//! connection with the same identifier takes the session over, MQTT-3.1.4-3), the client's
//! publishes still in the broker's hands between connections, and, for sessions that outlive
//! their connection, their subscriptions on disk (`<data>/mqtt/<hash>.json`) so they outlive the
//! broker too. The messages themselves are kept by the guaranteed engine: each QoS 1/2
//! subscription of such a session is a durable subscription whose name the file lets the next
//! connection (or the next broker process) resume. A session's QoS 2 publishes not yet
//! released are in a file of their own (`<hash>-qos2.json`), so a PUBLISH retried across a
//! broker restart is the same publish. The deliveries in flight to a session's client are in
//! the listener's table of them ([`super::inflight`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tidings_wire::mqtt::QoS;

use super::inflight::{Change, InflightStore};
use super::link::{Inbound, Link};
use super::wills::Wills;

/// How long a 3.1.1 session with clean session 0 is kept after its connection ends. 3.1.1 has
/// no session expiry; keeping such sessions for ever would let a client that never comes back
/// pin the pubend logs for ever, so they end after a week, as a 5.0 session with that expiry.
pub(super) const MQTT311_SESSION_EXPIRY: u32 = 7 * 24 * 3600;

/// How long a takeover waits for the connection it replaces to let go of the session.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// How often a takeover looks whether the connection it replaces has let go.
const TAKEOVER_POLL: Duration = Duration::from_millis(2);

/// What is on disk for a session that outlives its connection.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(super) struct Stored {
    /// The client identifier (the file name is its hash).
    pub(super) client_id: String,
    /// Each subscribed filter and its granted QoS (0, 1 or 2).
    pub(super) filters: Vec<(String, u8)>,
    /// Session expiry, seconds after the connection ends.
    pub(super) expiry: u32,
    /// The filters' 5.0 options, where any is set (absent from files of earlier versions).
    #[serde(default)]
    pub(super) options: Vec<(String, Kept)>,
    /// The user the session logged in as (with a users file): its durables are in that user's
    /// scope, so its expiry deletes them as that user.
    #[serde(default)]
    pub(super) user: Option<String>,
}

/// What a stored session keeps of a filter's 5.0 options: all but retain handling, which acts
/// only when the client subscribes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Kept {
    /// The subscription identifier.
    pub(super) identifier: Option<u32>,
    /// Leave out the session's own messages.
    pub(super) no_local: bool,
    /// Keep live messages' RETAIN flag.
    pub(super) retain_as_published: bool,
    /// A tidings selector (`tidings-where`).
    pub(super) selector: Option<String>,
}

impl Stored {
    /// The QoS of a stored filter.
    pub(super) fn qos(value: u8) -> QoS {
        match value {
            0 => QoS::AtMostOnce,
            1 => QoS::AtLeastOnce,
            _ => QoS::ExactlyOnce,
        }
    }
}

/// The file of a session's unreleased QoS 2 publishes (no [`Stored`] reads as one).
#[derive(Serialize, Deserialize)]
struct InboundFile {
    qos2_client: String,
    unreleased: Vec<(u16, u64)>,
}

/// The connection holding a session now.
#[derive(Clone)]
struct Live {
    generation: u64,
    /// Its link, told to close on a takeover ([`Link::kick`]): the reader already waits on
    /// it, where a token of its own was 112 bytes and a branch of the reader's wait held by
    /// every connection for a rare takeover (issue 42). Whether it has let go of its session
    /// is read from the entry (its `live` is gone), not signalled.
    link: Arc<Link>,
}

#[derive(Default)]
struct Entry {
    generation: u64,
    live: Option<Live>,
    /// Boxed, and none while a connection holds them: the table holds an entry per client,
    /// and each slot of it is paid for by every connection (issue 42).
    inbound: Option<Box<Inbound>>,
}

/// A connection's hold on its session (see [`Registry::take_over`]).
pub(super) struct Hold {
    /// This connection's generation: a will or an expiry timer of an older one finds the
    /// session has moved on.
    pub(super) generation: u64,
    /// The client's publishes still in the broker's hands.
    pub(super) inbound: Inbound,
}

/// The sessions of one listener.
pub(super) struct Registry {
    dir: PathBuf,
    /// The persistent sessions' deliveries in flight, and the wills waiting for their delay.
    pub(super) inflight: InflightStore,
    /// The wills waiting for their delay.
    pub(super) wills: Wills,
    clients: Mutex<HashMap<String, Entry>>,
    /// Generations are never reused, even for a client forgotten and back.
    generations: std::sync::atomic::AtomicU64,
}

impl Registry {
    /// The registry keeping its sessions under `<data>/mqtt`.
    pub(super) fn new(data: PathBuf) -> Registry {
        let dir = data.join("mqtt");
        let inflight = InflightStore::new(&dir);
        Registry { dir, inflight, wills: Wills::default(), clients: Mutex::new(HashMap::new()), generations: 1.into() }
    }

    /// Takes `client_id`'s session for a new connection, closing the connection holding it and
    /// waiting (a bounded time) until that one let go of its durable subscriptions.
    /// `link` is the new connection's, told to close when a later one takes the session over.
    pub(super) async fn take_over(&self, client_id: &str, link: &Arc<Link>) -> Hold {
        let old = self.clients.lock().get(client_id).and_then(|entry| entry.live.clone());
        if let Some(old) = old {
            old.link.kick();
            let deadline = tokio::time::Instant::now() + TAKEOVER_WAIT;
            while self.held_by(client_id, old.generation) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(TAKEOVER_POLL).await;
            }
        }
        let mut clients = self.clients.lock();
        let entry = clients.entry(client_id.to_string()).or_default();
        entry.generation = self.generations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        entry.live = Some(Live { generation: entry.generation, link: Arc::clone(link) });
        Hold { generation: entry.generation, inbound: entry.inbound.take().map(|inbound| *inbound).unwrap_or_default() }
    }

    /// The connection of `generation` (its [`Hold`]'s) has let go of its native subscriptions;
    /// if its session goes on (`keep`), its client's publishes wait in the registry for the
    /// next connection, else the client is forgotten.
    pub(super) fn release(&self, client_id: &str, generation: u64, inbound: Inbound, keep: bool) {
        let mut clients = self.clients.lock();
        if let Some(entry) = clients.get_mut(client_id) {
            if entry.live.as_ref().is_some_and(|live| live.generation == generation) {
                entry.live = None;
            }
            if entry.generation == generation {
                entry.inbound = Some(Box::new(inbound));
                if !keep {
                    clients.remove(client_id);
                }
            }
        }
    }

    /// Whether the connection of `generation` still holds `client_id`'s session.
    fn held_by(&self, client_id: &str, generation: u64) -> bool {
        let clients = self.clients.lock();
        clients.get(client_id).and_then(|entry| entry.live.as_ref()).is_some_and(|live| live.generation == generation)
    }

    /// Whether no connection took `client_id`'s session since the one of `generation`.
    pub(super) fn unchanged_since(&self, client_id: &str, generation: u64) -> bool {
        self.clients.lock().get(client_id).is_none_or(|entry| entry.generation == generation && entry.live.is_none())
    }

    /// Forgets a session that ended (clean start, or expired), in memory and on disk.
    pub(super) fn forget(&self, client_id: &str) {
        let mut clients = self.clients.lock();
        if clients.get(client_id).is_some_and(|entry| entry.live.is_none()) {
            clients.remove(client_id);
        }
        drop(clients);
        let _ = std::fs::remove_file(self.path(client_id));
        let _ = std::fs::remove_file(self.inbound_path(client_id));
        sync_dir(&self.dir);
        if self.has_inflight() {
            self.inflight.enqueue(vec![Change::Forget(session_prefix(client_id))]);
        }
    }

    /// Whether the table of deliveries in flight was ever written (it is made at first use).
    pub(super) fn has_inflight(&self) -> bool {
        self.dir.join("inflight.redb").exists()
    }

    fn path(&self, client_id: &str) -> PathBuf {
        self.dir.join(format!("{:016x}.json", client_hash(client_id)))
    }

    fn inbound_path(&self, client_id: &str) -> PathBuf {
        self.dir.join(format!("{:016x}-qos2.json", client_hash(client_id)))
    }

    /// Writes a persistent session's QoS 2 publishes not yet released (packet identifier and
    /// the sequence number it was given), so a PUBLISH the client retries after a broker
    /// restart is the same publish, which the log answers once. Written when a publish comes
    /// and when it is released, before the PUBREC or PUBCOMP that follows: a temporary file,
    /// synced, renamed over the old one, and the directory synced (a power cut must not lose
    /// a publish the client was told is recorded, nor bring back one it was told is released,
    /// whose packet identifier it may use again for a new publish).
    pub(super) fn save_inbound(&self, client_id: &str, entries: &[(u16, u64)]) -> std::io::Result<()> {
        use std::io::Write;
        let path = self.inbound_path(client_id);
        if entries.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                Err(_) => Ok(()),
                Ok(()) => {
                    sync_dir(&self.dir);
                    Ok(())
                }
            };
        }
        std::fs::create_dir_all(&self.dir)?;
        let temporary = path.with_extension("tmp");
        let stored = InboundFile { qos2_client: client_id.to_string(), unreleased: entries.to_vec() };
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&serde_json::to_vec(&stored).map_err(std::io::Error::other)?)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        sync_dir(&self.dir);
        Ok(())
    }

    /// What [`Registry::save_inbound`] last wrote for `client_id`.
    pub(super) fn load_inbound(&self, client_id: &str) -> Vec<(u16, u64)> {
        let Ok(text) = std::fs::read(self.inbound_path(client_id)) else { return Vec::new() };
        match serde_json::from_slice::<InboundFile>(&text) {
            Ok(file) if file.qos2_client == client_id => file.unreleased,
            _ => Vec::new(),
        }
    }

    /// The stored session of `client_id`, if any.
    pub(super) fn load(&self, client_id: &str) -> Option<Stored> {
        let text = std::fs::read(self.path(client_id)).ok()?;
        serde_json::from_slice::<Stored>(&text).ok().filter(|stored| stored.client_id == client_id)
    }

    /// Every stored session (at start, to run their expiry timers again).
    pub(super) fn load_all(&self) -> Vec<Stored> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(|entry| std::fs::read(entry.ok()?.path()).ok())
            .filter_map(|text| serde_json::from_slice::<Stored>(&text).ok())
            .collect()
    }

    /// Writes a session durably (before SUBACK: a broker killed after it must still know the
    /// subscription): a temporary file, synced, renamed over the old one.
    pub(super) fn save(&self, stored: &Stored) -> std::io::Result<()> {
        use std::io::Write;
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(&stored.client_id);
        let temporary = path.with_extension("tmp");
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&serde_json::to_vec(stored).map_err(std::io::Error::other)?)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        sync_dir(&self.dir);
        Ok(())
    }
}

/// Syncs a directory, so a rename or removal in it outlives a power cut.
fn sync_dir(dir: &std::path::Path) {
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
}

/// The start of every durable subscription name of `client_id`'s session ([`durable_name`]):
/// its entries in the table of deliveries in flight.
pub(super) fn session_prefix(client_id: &str) -> String {
    format!("mqtt-{:016x}-", client_hash(client_id))
}

/// A client identifier's hash: its publisher id, and part of its durable subscriptions' names.
pub(super) fn client_hash(client_id: &str) -> u64 {
    tidings_wire::hash::fnv1a(client_id.as_bytes())
}

/// The durable subscription name of pattern `index` of `filter` in `client_id`'s session:
/// stable, so the next connection resumes it, and within the native name rules (letters,
/// digits, `-`, at most 128 bytes) whatever the filter holds.
pub(super) fn durable_name(client_id: &str, filter: &str, index: usize) -> String {
    format!("mqtt-{:016x}-{:016x}-{index}", client_hash(client_id), tidings_wire::hash::fnv1a(filter.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_session_loads_back_under_its_client_only() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(dir.path().to_path_buf());
        assert_eq!(registry.load("c"), None);
        let stored = Stored {
            client_id: "c".into(),
            filters: vec![("a/#".into(), 1)],
            expiry: 60,
            options: Vec::new(),
            user: None,
        };
        registry.save(&stored).unwrap();
        assert_eq!(registry.load("c"), Some(stored.clone()));
        assert_eq!(registry.load_all(), vec![stored]);
        registry.forget("c");
        assert_eq!(registry.load("c"), None);
    }

    #[test]
    fn unreleased_qos2_publishes_load_back_apart_from_the_session_and_go_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(dir.path().to_path_buf());
        let stored = Stored { client_id: "c".into(), filters: Vec::new(), expiry: 60, options: Vec::new(), user: None };
        registry.save(&stored).unwrap();
        registry.save_inbound("c", &[(7, 1000), (9, 1001)]).unwrap();
        assert_eq!(registry.load_inbound("c"), vec![(7, 1000), (9, 1001)]);
        assert_eq!(registry.load_inbound("d"), Vec::new());
        assert_eq!(registry.load_all(), vec![stored], "not read as a session");
        registry.save_inbound("c", &[]).unwrap();
        assert_eq!(registry.load_inbound("c"), Vec::new());
        registry.save_inbound("c", &[(7, 1000)]).unwrap();
        registry.forget("c");
        assert_eq!(registry.load_inbound("c"), Vec::new());
    }

    #[tokio::test]
    async fn a_second_connection_takes_the_session_and_its_publishes_over() {
        let registry = Registry::new(std::path::PathBuf::from("/nonexistent"));
        let (link, link2) = (Arc::new(Link::default()), Arc::new(Link::default()));
        let first = registry.take_over("c", &link).await;
        let generation = first.generation;
        let inbound = Inbound { last_seq: 7, ..Inbound::default() };
        let release = async {
            link.acks.notified().await;
            assert!(link.state.lock().kicked, "the first connection is told to close");
            registry.release("c", generation, inbound, true);
        };
        let (second, ()) = tokio::join!(registry.take_over("c", &link2), release);
        assert_eq!(second.inbound.last_seq, 7, "the client's publishes move to the new connection");
        assert!(!registry.unchanged_since("c", generation));
        assert!(!link2.state.lock().kicked);
        registry.release("c", second.generation, Inbound::default(), false);
        assert!(registry.clients.lock().is_empty(), "a session that ends is forgotten");
        assert!(durable_name("c", "a/#", 1).len() <= 128);
        assert_ne!(durable_name("c", "a/#", 0), durable_name("d", "a/#", 0));
    }
}
