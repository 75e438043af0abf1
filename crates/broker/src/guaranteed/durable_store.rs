//! Where durable subscriptions live on disk: one redb database, `<data dir>/durable.redb`,
//! beside the pubend log. redb because this is small keyed state updated in place (a name and
//! its filter; a checkpoint per name and pubend), which is what an embedded B-tree with
//! crash-safe, fsynced transactions is made for; the pubend log's segments are made for the
//! opposite (append-only records released as a prefix).
//!
//! It also keeps the retained values published guaranteed here (table `retained`: topic to
//! the value's encoded message section, as new subscriptions get it), so they come back after
//! a restart; see [`crate::retained`] and `super::retained_values`.
//!
//! Each write is one transaction with immediate durability: once [`DurableStore::write`]
//! returns, a crash keeps it. The driver calls it off its task (checkpoints) or rarely
//! (creating and deleting a name).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

const SUBSCRIPTIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("subscriptions");
const CHECKPOINTS: TableDefinition<(&str, u64), u64> = TableDefinition::new("checkpoints");
const RETAINED: TableDefinition<&str, &[u8]> = TableDefinition::new("retained");
/// Per stream (pubend id), the ack lease (see `super::ack_leases`).
const ACK_LEASES: TableDefinition<u64, u64> = TableDefinition::new("ack_leases");

/// What a durable name stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Record {
    /// The topic pattern.
    pub pattern: String,
    /// The selector text, if any.
    pub selector: Option<String>,
    /// When it was created (ms since the epoch): pubends first seen later are taken from a
    /// little before this.
    pub created_ms: u64,
    /// A guaranteed queue group's key property (`--queue-key`), if it is keyed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// One durable subscription as stored: its record and, per pubend, the last tick its
/// application acknowledged.
pub(super) type Stored = (String, Record, BTreeMap<u64, u64>);

/// Why the durable subscriptions' store failed.
#[derive(Debug, thiserror::Error)]
#[error("durable subscriptions store {path}: {message}")]
pub struct DurableStoreError {
    path: String,
    message: String,
}

/// The open database.
pub(super) struct DurableStore {
    db: redb::Database,
    path: PathBuf,
}

/// Changes written in one transaction.
#[derive(Debug, Default, Clone)]
pub(super) struct Batch {
    /// Names created (or replaced) with their records.
    pub created: Vec<(String, Record)>,
    /// Names deleted, with their checkpoints.
    pub deleted: Vec<String>,
    /// `(name, pubend, tick)`: checkpoints moved.
    pub checkpoints: Vec<(String, u64, u64)>,
    /// `(topic, value)`: retained values set (`Some`: the encoded value) or cleared, in order.
    pub retained: Vec<(String, Option<bytes::Bytes>)>,
    /// `(pubend, tick)`: ack leases raised (a lower one never lowers the stored one).
    pub ack_leases: Vec<(u64, u64)>,
}

impl DurableStore {
    /// Opens (creating if needed) `<dir>/durable.redb`.
    pub(super) fn open(dir: &Path) -> Result<DurableStore, DurableStoreError> {
        let path = dir.join("durable.redb");
        let db = redb::Database::create(&path).map_err(|e| error(&path, e))?;
        let store = DurableStore { db, path };
        // The tables exist from the start, so reads never meet a missing table.
        store.write(&Batch::default())?;
        Ok(store)
    }

    /// Every durable subscription, by name.
    pub(super) fn load(&self) -> Result<Vec<Stored>, DurableStoreError> {
        let e = |e: &dyn std::fmt::Display| error(&self.path, e);
        let txn = self.db.begin_read().map_err(|x| e(&x))?;
        let subscriptions = txn.open_table(SUBSCRIPTIONS).map_err(|x| e(&x))?;
        let checkpoints = txn.open_table(CHECKPOINTS).map_err(|x| e(&x))?;
        let mut out = Vec::new();
        for entry in subscriptions.iter().map_err(|x| e(&x))? {
            let (name, record) = entry.map_err(|x| e(&x))?;
            let name = name.value().to_string();
            let record: Record = serde_json::from_slice(record.value()).map_err(|x| e(&x))?;
            let mut ticks = BTreeMap::new();
            for entry in checkpoints.range((name.as_str(), 0)..=(name.as_str(), u64::MAX)).map_err(|x| e(&x))? {
                let (key, tick) = entry.map_err(|x| e(&x))?;
                ticks.insert(key.value().1, tick.value());
            }
            out.push((name, record, ticks));
        }
        Ok(out)
    }

    /// The retained values kept here, by topic, as encoded message sections.
    pub(super) fn load_retained(&self) -> Result<Vec<(String, bytes::Bytes)>, DurableStoreError> {
        let e = |e: &dyn std::fmt::Display| error(&self.path, e);
        let txn = self.db.begin_read().map_err(|x| e(&x))?;
        let table = txn.open_table(RETAINED).map_err(|x| e(&x))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|x| e(&x))? {
            let (topic, value) = entry.map_err(|x| e(&x))?;
            out.push((topic.value().to_string(), bytes::Bytes::copy_from_slice(value.value())));
        }
        Ok(out)
    }

    /// Every stream's ack lease, by pubend id.
    pub(super) fn load_ack_leases(&self) -> Result<Vec<(u64, u64)>, DurableStoreError> {
        let e = |e: &dyn std::fmt::Display| error(&self.path, e);
        let txn = self.db.begin_read().map_err(|x| e(&x))?;
        let table = txn.open_table(ACK_LEASES).map_err(|x| e(&x))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|x| e(&x))? {
            let (pubend, lease) = entry.map_err(|x| e(&x))?;
            out.push((pubend.value(), lease.value()));
        }
        Ok(out)
    }

    /// Writes `batch` in one durable transaction (deletions first, then creations, then
    /// checkpoints of names that still exist, then retained values in order).
    pub(super) fn write(&self, batch: &Batch) -> Result<(), DurableStoreError> {
        let e = |e: &dyn std::fmt::Display| error(&self.path, e);
        let mut txn = self.db.begin_write().map_err(|x| e(&x))?;
        txn.set_durability(redb::Durability::Immediate).map_err(|x| e(&x))?;
        {
            let mut subscriptions = txn.open_table(SUBSCRIPTIONS).map_err(|x| e(&x))?;
            let mut checkpoints = txn.open_table(CHECKPOINTS).map_err(|x| e(&x))?;
            for name in &batch.deleted {
                subscriptions.remove(name.as_str()).map_err(|x| e(&x))?;
                checkpoints
                    .retain_in((name.as_str(), 0)..=(name.as_str(), u64::MAX), |_, _| false)
                    .map_err(|x| e(&x))?;
            }
            for (name, record) in &batch.created {
                let bytes = serde_json::to_vec(record).map_err(|x| e(&x))?;
                subscriptions.insert(name.as_str(), bytes.as_slice()).map_err(|x| e(&x))?;
            }
            for (name, pubend, tick) in &batch.checkpoints {
                if subscriptions.get(name.as_str()).map_err(|x| e(&x))?.is_some() {
                    checkpoints.insert((name.as_str(), *pubend), *tick).map_err(|x| e(&x))?;
                }
            }
            let mut retained = txn.open_table(RETAINED).map_err(|x| e(&x))?;
            for (topic, value) in &batch.retained {
                match value {
                    Some(value) => retained.insert(topic.as_str(), value.as_ref()).map(drop),
                    None => retained.remove(topic.as_str()).map(drop),
                }
                .map_err(|x| e(&x))?;
            }
            let mut leases = txn.open_table(ACK_LEASES).map_err(|x| e(&x))?;
            for &(pubend, tick) in &batch.ack_leases {
                let stored = leases.get(pubend).map_err(|x| e(&x))?.map_or(0, |v| v.value());
                leases.insert(pubend, tick.max(stored)).map_err(|x| e(&x))?;
            }
        }
        txn.commit().map_err(|x| e(&x))
    }
}

fn error(path: &Path, e: impl std::fmt::Display) -> DurableStoreError {
    DurableStoreError { path: path.display().to_string(), message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pattern: &str) -> Record {
        Record { pattern: pattern.into(), selector: Some("x > 1".into()), created_ms: 7, key: None }
    }

    #[test]
    fn names_and_checkpoints_survive_a_reopen_and_deletion_takes_both() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = DurableStore::open(dir.path()).unwrap();
            let batch = Batch {
                created: vec![("a".into(), record("a.>")), ("b".into(), record("b"))],
                checkpoints: vec![("a".into(), 1, 10), ("a".into(), 2, 20), ("b".into(), 1, 5), ("gone".into(), 1, 1)],
                ..Batch::default()
            };
            store.write(&batch).unwrap();
            store.write(&Batch { checkpoints: vec![("a".into(), 1, 11)], ..Batch::default() }).unwrap();
        }
        let store = DurableStore::open(dir.path()).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.len(), 2, "a checkpoint for an unknown name creates nothing");
        assert_eq!(loaded[0], ("a".into(), record("a.>"), BTreeMap::from([(1, 11), (2, 20)])));
        store.write(&Batch { deleted: vec!["a".into()], ..Batch::default() }).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded, vec![("b".into(), record("b"), BTreeMap::from([(1, 5)]))]);
    }

    #[test]
    fn ack_leases_survive_a_reopen_and_never_go_down() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = DurableStore::open(dir.path()).unwrap();
            store.write(&Batch { ack_leases: vec![(1, 100), (2, 7)], ..Batch::default() }).unwrap();
            store.write(&Batch { ack_leases: vec![(1, 50)], ..Batch::default() }).unwrap();
            store.write(&Batch { ack_leases: vec![(2, 9)], ..Batch::default() }).unwrap();
        }
        let store = DurableStore::open(dir.path()).unwrap();
        assert_eq!(store.load_ack_leases().unwrap(), [(1, 100), (2, 9)]);
    }

    #[test]
    fn retained_values_survive_a_reopen_in_the_order_written_and_a_clearing_removes_one() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = DurableStore::open(dir.path()).unwrap();
            let retained = vec![
                ("a".into(), Some(bytes::Bytes::from_static(b"1"))),
                ("b".into(), Some(bytes::Bytes::from_static(b"2"))),
                ("a".into(), Some(bytes::Bytes::from_static(b"3"))),
                ("b".into(), None),
            ];
            store.write(&Batch { retained, ..Batch::default() }).unwrap();
        }
        let store = DurableStore::open(dir.path()).unwrap();
        assert_eq!(store.load_retained().unwrap(), vec![("a".to_string(), bytes::Bytes::from_static(b"3"))]);
    }
}
