//! The engine bake-off: fjall and redb driven by the same group-commit shape as the store (one
//! writer thread takes everything queued, commits it as one durable batch, then acknowledges it),
//! so the comparison is between engines, not between batching strategies.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Report, Tally, Workload};

/// A storage engine that can make a batch of (tick, payload) durable in one commit.
pub trait Engine: Send + 'static {
    /// The name in the report.
    fn name(&self) -> String;
    /// Makes the whole group durable before returning.
    fn commit(&mut self, group: &[(u64, Bytes)]) -> Result<(), String>;
}

/// fjall: one keyspace, keys are big-endian ticks, each group one `WriteBatch` committed with
/// `PersistMode::SyncData` (the journal is fdatasync'ed before the commit returns).
pub struct Fjall {
    db: fjall::Database,
    keyspace: fjall::Keyspace,
}

impl Fjall {
    /// Opens a fresh database in `dir`.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let db = fjall::Database::builder(dir).open().map_err(|e| e.to_string())?;
        let keyspace = db.keyspace("pubend", fjall::KeyspaceCreateOptions::default).map_err(|e| e.to_string())?;
        Ok(Fjall { db, keyspace })
    }
}

impl Engine for Fjall {
    fn name(&self) -> String {
        "fjall 3 (SyncData batch)".into()
    }
    fn commit(&mut self, group: &[(u64, Bytes)]) -> Result<(), String> {
        let mut batch = self.db.batch().durability(Some(fjall::PersistMode::SyncData));
        for (tick, payload) in group {
            batch.insert(&self.keyspace, tick.to_be_bytes(), payload.as_ref());
        }
        batch.commit().map_err(|e| e.to_string())
    }
}

const TABLE: redb::TableDefinition<'static, u64, &[u8]> = redb::TableDefinition::new("pubend");

/// redb: one table keyed by tick, each group one write transaction with `Durability::Immediate`.
pub struct Redb {
    db: redb::Database,
}

impl Redb {
    /// Creates a fresh database file in `dir`.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let db = redb::Database::create(dir.join("pubend.redb")).map_err(|e| e.to_string())?;
        Ok(Redb { db })
    }
}

impl Engine for Redb {
    fn name(&self) -> String {
        "redb 4 (Immediate)".into()
    }
    fn commit(&mut self, group: &[(u64, Bytes)]) -> Result<(), String> {
        let mut txn = self.db.begin_write().map_err(|e| e.to_string())?;
        txn.set_durability(redb::Durability::Immediate).map_err(|e| e.to_string())?;
        {
            let mut table = txn.open_table(TABLE).map_err(|e| e.to_string())?;
            for (tick, payload) in group {
                table.insert(tick, payload.as_ref()).map_err(|e| e.to_string())?;
            }
        }
        txn.commit().map_err(|e| e.to_string())
    }
}

#[derive(Default)]
struct Pending {
    items: Vec<(u64, Bytes)>,
    closed: bool,
}

type Queue = Arc<(Mutex<Pending>, Condvar)>;

fn take_group(queue: &Queue) -> Option<Vec<(u64, Bytes)>> {
    let (lock, ready) = &**queue;
    let mut pending = lock.lock().unwrap_or_else(PoisonError::into_inner);
    while pending.items.is_empty() && !pending.closed {
        pending = ready.wait(pending).unwrap_or_else(PoisonError::into_inner);
    }
    if pending.items.is_empty() {
        return None;
    }
    Some(std::mem::take(&mut pending.items))
}

fn push(queue: &Queue, items: impl Iterator<Item = (u64, Bytes)>) {
    let (lock, ready) = &**queue;
    lock.lock().unwrap_or_else(PoisonError::into_inner).items.extend(items);
    ready.notify_one();
}

fn close(queue: &Queue) {
    let (lock, ready) = &**queue;
    lock.lock().unwrap_or_else(PoisonError::into_inner).closed = true;
    ready.notify_one();
}

/// Runs the closed loop of [`super::store_appends`] against `engine`.
pub fn engine_appends(mut engine: Box<dyn Engine>, workload: &Workload) -> Result<Report, String> {
    let label = engine.name();
    let queue: Queue = Arc::default();
    let (acks, groups) = channel::<Result<usize, String>>();
    let writer_queue = Arc::clone(&queue);
    let writer = std::thread::spawn(move || {
        while let Some(group) = take_group(&writer_queue) {
            let result = engine.commit(&group).map(|()| group.len());
            let failed = result.is_err();
            if acks.send(result).is_err() || failed {
                break;
            }
        }
    });
    let payload = Bytes::from(vec![0x5a; workload.payload]);
    let mut submitted = VecDeque::with_capacity(workload.in_flight);
    let mut tally = Tally::new();
    let (mut tick, mut group_count, mut max_group) = (0u64, 0u64, 0u64);
    let more = |tick: u64, tally: &Tally| tick < workload.max_appends && tally.started.elapsed() < workload.duration;
    while more(tick, &tally) || !submitted.is_empty() {
        if more(tick, &tally) {
            let room = (workload.in_flight - submitted.len()) as u64;
            let batch = room.min(workload.max_appends - tick);
            let first = tick + 1;
            tick += batch;
            push(&queue, (first..=tick).map(|t| (t, payload.clone())));
            let now = Instant::now();
            submitted.extend((0..batch).map(|_| now));
        }
        let acked = groups.recv_timeout(Duration::from_secs(60)).map_err(|e| e.to_string())??;
        group_count += 1;
        max_group = max_group.max(acked as u64);
        for at in submitted.drain(..acked.min(submitted.len())) {
            tally.ack(at);
        }
    }
    close(&queue);
    writer.join().map_err(|_| "the engine's writer panicked".to_string())?;
    Ok(tally.report(&label, workload.in_flight, group_count, max_group, group_count))
}
