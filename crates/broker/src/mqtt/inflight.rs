//! The durable table of a persistent MQTT session's deliveries in flight, so that after a broker
//! restart each goes again with its packet identifier and DUP 1, and a QoS 2 one whose PUBREC
//! came goes as PUBREL, never as a new PUBLISH (MQTT-4.4.0-1).
//!
//! Where: `<data>/mqtt/inflight.redb`, one redb database for every session of the listener.
//! redb (the engine `durable.redb` already uses) because this is small keyed state updated in
//! place with crash-safe fsynced transactions; a file per session rewritten per delivery would
//! cost a file, a rename and two fsyncs per batch. Its own file because `durable.redb` belongs
//! to the guaranteed driver's task and a redb database opens once per process.
//!
//! What, keyed by durable subscription name, pubend and tick:
//! - `inflight`: the packet identifier and whether PUBREC came (PUBREL due), written (synced)
//!   before the PUBLISH or the PUBREL goes to the client;
//! - `acked`, by name and pubend: the highest tick the client is done with, written with the
//!   next sync (lazily: losing it only makes a finished delivery go again with its identifier,
//!   DUP 1 or PUBREL, which the client answers without taking it as new). The entries at or
//!   below it go in the same transaction. It outlives the durable subscription's own checkpoint
//!   write (which is periodic): after a restart, a tick at or below it is acknowledged upstream
//!   at once, not sent again, so a QoS 2 delivery the client completed is not a new message.
//!
//! - `wills`, by client identifier: a will waiting for its delay ([`super::wills`]), its due
//!   time (Unix milliseconds), its sequence number and the will as a 5.0 CONNECT packet.
//!
//! Writes go to one thread that commits all waiting ones in one transaction (one fsync for
//! every session's batch that came meanwhile).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::OnceLock;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

const INFLIGHT: TableDefinition<(&str, u64, u64), (u16, bool)> = TableDefinition::new("inflight");
const ACKED: TableDefinition<(&str, u64), u64> = TableDefinition::new("acked");
const WILLS: TableDefinition<&str, (u64, u64, &[u8])> = TableDefinition::new("wills");

/// A kept will: client identifier, (due time in Unix milliseconds, sequence number), record.
pub(super) type WillRecord = (String, (u64, u64), Vec<u8>);

/// One change to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// `(name, pubend, tick)` is in flight with this packet identifier; `true`: PUBREL due.
    Put((String, u64, u64), u16, bool),
    /// The client is done with every tick of `(name, pubend)` up to this one.
    Acked((String, u64), u64),
    /// Every entry of this name goes (a subscription that ended).
    ForgetName(String),
    /// Every entry of the names starting with this prefix goes (a session that ended).
    Forget(String),
    /// The client's will waits: (due time, sequence number) and the will's record.
    KeepWill(String, (u64, u64), Vec<u8>),
    /// The client's will of this sequence number goes (sent or cancelled); a newer one stays.
    ForgetWill(String, u64),
}

/// A delivery's place: durable subscription name, pubend and tick.
pub(super) type Key = (String, u64, u64);

/// What a session had on disk: its deliveries in flight and how far each subscription's
/// client is done.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Loaded {
    /// `((name, pubend, tick), (packet identifier, PUBREL due))`.
    pub(super) inflight: Vec<(Key, (u16, bool))>,
    /// `((name, pubend), tick)`.
    pub(super) acked: Vec<((String, u64), u64)>,
}

/// Where the writer says a write is done: an async task waits on a oneshot, a load (which
/// must see every write asked for before it) blocks on a channel.
enum Reply {
    Task(tokio::sync::oneshot::Sender<Result<(), String>>),
    Blocking(mpsc::Sender<Result<(), String>>),
}

impl Reply {
    fn send(self, result: Result<(), String>) {
        let _ = match self {
            Reply::Task(reply) => reply.send(result).map_err(drop),
            Reply::Blocking(reply) => reply.send(result).map_err(drop),
        };
    }
}

/// The open table and its writer thread, opened at first use (a broker whose clients keep no
/// session never creates the file).
pub(super) struct InflightStore {
    path: PathBuf,
    opened: OnceLock<Result<Opened, String>>,
}

struct Opened {
    db: std::sync::Arc<redb::Database>,
    writer: mpsc::Sender<(Vec<Change>, Option<Reply>)>,
    /// Joined on drop, so the database is closed (and may open again) once the store is gone.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        // The writer stops when its channel closes: a channel of its own replaces this one.
        self.writer = mpsc::channel().0;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl InflightStore {
    /// The table at `<dir>/inflight.redb`, not opened yet.
    pub(super) fn new(dir: &Path) -> InflightStore {
        InflightStore { path: dir.join("inflight.redb"), opened: OnceLock::new() }
    }

    fn opened(&self) -> Result<&Opened, String> {
        self.opened.get_or_init(|| open(&self.path)).as_ref().map_err(Clone::clone)
    }

    /// Writes `changes` durably; returns once they are synced.
    pub(super) async fn commit(&self, changes: Vec<Change>) -> Result<(), String> {
        let (reply, done) = tokio::sync::oneshot::channel();
        let opened = self.opened()?;
        opened.writer.send((changes, Some(Reply::Task(reply)))).map_err(|_| "the writer has stopped".to_string())?;
        done.await.map_err(|_| "the writer has stopped".to_string())?
    }

    /// Writes `changes` with the next commit, without waiting (a session forgotten).
    pub(super) fn enqueue(&self, changes: Vec<Change>) {
        if let Ok(opened) = self.opened() {
            let _ = opened.writer.send((changes, None));
        }
    }

    /// A read transaction that sees every write asked for before.
    fn read_after_writes(&self) -> Result<redb::ReadTransaction, String> {
        let opened = self.opened()?;
        let (reply, done) = mpsc::channel();
        opened.writer.send((Vec::new(), Some(Reply::Blocking(reply)))).map_err(|_| "the writer has stopped")?;
        done.recv().map_err(|_| "the writer has stopped")??;
        opened.db.begin_read().map_err(|e| e.to_string())
    }

    /// What is on disk for the names starting with `prefix` (a session's), once every write
    /// asked for before is done (a session forgotten just before must not come back).
    pub(super) fn load(&self, prefix: &str) -> Result<Loaded, String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let txn = self.read_after_writes()?;
        let end = format!("{prefix}\u{7f}");
        let mut loaded = Loaded::default();
        let inflight = txn.open_table(INFLIGHT).map_err(|x| e(&x))?;
        for entry in inflight.range((prefix, 0, 0)..(end.as_str(), 0, 0)).map_err(|x| e(&x))? {
            let (key, value) = entry.map_err(|x| e(&x))?;
            let (name, pubend, tick) = key.value();
            loaded.inflight.push(((name.to_string(), pubend, tick), value.value()));
        }
        let acked = txn.open_table(ACKED).map_err(|x| e(&x))?;
        for entry in acked.range((prefix, 0)..(end.as_str(), 0)).map_err(|x| e(&x))? {
            let (key, tick) = entry.map_err(|x| e(&x))?;
            let (name, pubend) = key.value();
            loaded.acked.push(((name.to_string(), pubend), tick.value()));
        }
        Ok(loaded)
    }

    /// Every kept will, once every write asked for before is done.
    pub(super) fn load_wills(&self) -> Result<Vec<WillRecord>, String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let txn = self.read_after_writes()?;
        let wills = txn.open_table(WILLS).map_err(|x| e(&x))?;
        let mut loaded = Vec::new();
        for entry in wills.iter().map_err(|x| e(&x))? {
            let (client_id, value) = entry.map_err(|x| e(&x))?;
            let (due_ms, seq, record) = value.value();
            loaded.push((client_id.value().to_string(), (due_ms, seq), record.to_vec()));
        }
        Ok(loaded)
    }
}

fn open(path: &Path) -> Result<Opened, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let db = std::sync::Arc::new(redb::Database::create(path).map_err(|e| e.to_string())?);
    // The tables exist from the start, so reads never meet a missing table.
    write(&db, &[])?;
    let (writer, requests) = mpsc::channel();
    let thread_db = std::sync::Arc::clone(&db);
    let thread = std::thread::Builder::new()
        .name("mqtt-inflight".into())
        .spawn(move || run_writer(&thread_db, &requests))
        .map_err(|e| e.to_string())?;
    Ok(Opened { db, writer, thread: Some(thread) })
}

/// The writer thread: every request waiting is written in one transaction.
fn run_writer(db: &redb::Database, requests: &mpsc::Receiver<(Vec<Change>, Option<Reply>)>) {
    while let Ok(first) = requests.recv() {
        let mut changes = first.0;
        let mut replies: Vec<Reply> = first.1.into_iter().collect();
        while let Ok((more, reply)) = requests.try_recv() {
            changes.extend(more);
            replies.extend(reply);
        }
        let result = write(db, &changes);
        if let Err(error) = &result {
            tracing::warn!(%error, "the MQTT deliveries in flight could not be written");
        }
        for reply in replies {
            reply.send(result.clone());
        }
    }
}

/// Writes `changes` in order, in one durable transaction.
fn write(db: &redb::Database, changes: &[Change]) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut txn = db.begin_write().map_err(|x| e(&x))?;
    txn.set_durability(redb::Durability::Immediate).map_err(|x| e(&x))?;
    {
        let mut inflight = txn.open_table(INFLIGHT).map_err(|x| e(&x))?;
        let mut acked = txn.open_table(ACKED).map_err(|x| e(&x))?;
        let mut wills = txn.open_table(WILLS).map_err(|x| e(&x))?;
        // Of several marks of one subscription and pubend in the batch, the highest.
        let mut marks: BTreeMap<(&str, u64), u64> = BTreeMap::new();
        for change in changes {
            match change {
                Change::Put((name, pubend, tick), packet, released) => {
                    inflight.insert((name.as_str(), *pubend, *tick), (*packet, *released)).map_err(|x| e(&x))?;
                }
                Change::Acked((name, pubend), tick) => {
                    let mark = marks.entry((name.as_str(), *pubend)).or_default();
                    *mark = (*mark).max(*tick);
                }
                Change::ForgetName(name) => {
                    marks.retain(|(of, _), _| of != name);
                    let range = (name.as_str(), 0, 0)..=(name.as_str(), u64::MAX, u64::MAX);
                    inflight.retain_in(range, |_, _| false).map_err(|x| e(&x))?;
                    let range = (name.as_str(), 0)..=(name.as_str(), u64::MAX);
                    acked.retain_in(range, |_, _| false).map_err(|x| e(&x))?;
                }
                Change::Forget(prefix) => {
                    marks.retain(|(name, _), _| !name.starts_with(prefix.as_str()));
                    let end = format!("{prefix}\u{7f}");
                    let range = (prefix.as_str(), 0, 0)..(end.as_str(), 0, 0);
                    inflight.retain_in(range, |_, _| false).map_err(|x| e(&x))?;
                    acked.retain_in((prefix.as_str(), 0)..(end.as_str(), 0), |_, _| false).map_err(|x| e(&x))?;
                }
                Change::KeepWill(client_id, (due_ms, seq), record) => {
                    wills.insert(client_id.as_str(), (*due_ms, *seq, record.as_slice())).map_err(|x| e(&x))?;
                }
                Change::ForgetWill(client_id, seq) => {
                    let kept = wills.get(client_id.as_str()).map_err(|x| e(&x))?.map(|value| value.value().1);
                    if kept == Some(*seq) {
                        wills.remove(client_id.as_str()).map_err(|x| e(&x))?;
                    }
                }
            }
        }
        for ((name, pubend), tick) in marks {
            let old = acked.get((name, pubend)).map_err(|x| e(&x))?.map_or(0, |old| old.value());
            acked.insert((name, pubend), old.max(tick)).map_err(|x| e(&x))?;
            inflight.retain_in((name, pubend, 0)..=(name, pubend, tick), |_, _| false).map_err(|x| e(&x))?;
        }
    }
    txn.commit().map_err(|x| e(&x))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(name: &str, tick: u64, packet: u16, released: bool) -> Change {
        Change::Put((name.into(), 1, tick), packet, released)
    }

    #[tokio::test]
    async fn deliveries_survive_a_reopen_and_a_mark_takes_those_at_or_below_it() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = InflightStore::new(dir.path());
            store.commit(vec![put("mqtt-a-1", 10, 7, false), put("mqtt-a-1", 11, 8, false)]).await.unwrap();
            store.commit(vec![put("mqtt-a-1", 11, 8, true), put("mqtt-b-1", 3, 1, false)]).await.unwrap();
        }
        let store = InflightStore::new(dir.path());
        let loaded = store.load("mqtt-a-").unwrap();
        let entry = |tick, packet, released| (("mqtt-a-1".to_string(), 1, tick), (packet, released));
        assert_eq!(loaded.inflight, vec![entry(10, 7, false), entry(11, 8, true)], "another session's apart");
        store.commit(vec![Change::Acked(("mqtt-a-1".into(), 1), 10)]).await.unwrap();
        store.commit(vec![Change::Acked(("mqtt-a-1".into(), 1), 4)]).await.unwrap();
        let loaded = store.load("mqtt-a-").unwrap();
        assert_eq!(loaded.inflight, vec![entry(11, 8, true)]);
        assert_eq!(loaded.acked, vec![(("mqtt-a-1".to_string(), 1), 10)], "a mark never goes back");
        store.commit(vec![put("mqtt-a-10", 1, 9, false), Change::ForgetName("mqtt-a-1".into())]).await.unwrap();
        assert_eq!(store.load("mqtt-a-").unwrap().inflight, vec![(("mqtt-a-10".to_string(), 1, 1), (9, false))]);
        store.commit(vec![Change::Forget("mqtt-a-".into())]).await.unwrap();
        assert_eq!(store.load("mqtt-a-").unwrap(), Loaded::default());
        assert_eq!(store.load("mqtt-b-").unwrap().inflight.len(), 1);
    }
}
