//! Wills waiting for their delay (5.0 Will Delay Interval), kept durably so the delay outlives
//! a broker restart: a client that died and a broker killed before the delay ran out must not
//! lose the will, and a client that came back before it ran out must not get it sent anyway.
//!
//! A will with a delay is written, synced, to the listener's `<data>/mqtt/inflight.redb`
//! (table `wills`, by client identifier: its wall-clock due time, its sequence number and the
//! will itself as a 5.0 CONNECT packet, so every will property goes through the codec both ways)
//! before the connection lets go of its session; a new connection to the session takes the
//! record away (synced), and the will's publication takes it away once sent. At start, each
//! record's timer runs again for the time left (at once when overdue).
//!
//! The due time is the earlier of the will delay and the session expiry (MQTT-3.1.3-9), both
//! counted from the moment the connection ended, in Unix time: it holds across a restart, as
//! a monotonic clock would not.

use std::collections::HashMap;
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tidings_wire::mqtt::{Connect, Packet, Properties, ProtocolVersion, Will};

use super::inflight::{Change, InflightStore};

/// A will on its way out: whose, as which user, when, and under which sequence number (the
/// publisher sequence number of a QoS 1/2 will, so a will sent again after a crash between
/// its publication and its record's removal is the same publish).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pending {
    /// The client identifier of the session the will belongs to.
    pub(super) client_id: String,
    /// The user the connection logged in as: the will is published as that user.
    pub(super) user: Option<String>,
    /// The will.
    pub(super) will: Will,
    /// When it is due, milliseconds of Unix time.
    pub(super) due_ms: u64,
    /// Its publisher sequence number, and its identity in the table of pending wills.
    pub(super) seq: u64,
    /// Whether it waits (a delay): only those are kept durably and may be cancelled.
    pub(super) delayed: bool,
}

impl Pending {
    /// The will of `client_id`'s connection that ended at `now_us` (Unix microseconds), due
    /// `delay` seconds later (already the earlier of the will delay and the session expiry).
    pub(super) fn new(client_id: String, user: Option<String>, will: Will, delay: u32, now_us: u64) -> Pending {
        let due_ms = now_us / 1000 + u64::from(delay) * 1000;
        Pending { client_id, user, will, due_ms, seq: now_us, delayed: delay > 0 }
    }

    /// How long until it is due at `now_ms`; zero when overdue.
    pub(super) fn left(&self, now_ms: u64) -> Duration {
        Duration::from_millis(self.due_ms.saturating_sub(now_ms))
    }

    /// The record's value: the will as the CONNECT packet that carried it (5.0 encoding).
    fn record(&self) -> Option<Vec<u8>> {
        let connect = Connect {
            version: ProtocolVersion::V5,
            clean_start: false,
            keep_alive: 0,
            properties: Properties::default(),
            client_id: self.client_id.clone(),
            will: Some(self.will.clone()),
            username: self.user.clone(),
            password: None,
        };
        let mut out = BytesMut::new();
        Packet::Connect(Box::new(connect)).encode(ProtocolVersion::V5, &mut out).ok()?;
        Some(out.to_vec())
    }

    /// A record read back; `None` if it is not one (then it is dropped, not published).
    fn from_record(due_ms: u64, seq: u64, bytes: &[u8]) -> Option<Pending> {
        let mut buf = BytesMut::from(bytes);
        match Packet::decode(&mut buf, ProtocolVersion::V5, usize::MAX) {
            Ok(Some(Packet::Connect(connect))) => Some(Pending {
                will: connect.will?,
                client_id: connect.client_id,
                user: connect.username,
                due_ms,
                seq,
                delayed: true,
            }),
            _ => None,
        }
    }
}

/// Removes the record of `client_id`'s will `seq` (cancelled), synced before this returns: a
/// client back within the delay must not get its will sent after a restart.
pub(super) async fn forget(store: &InflightStore, client_id: &str, seq: u64) {
    if let Err(error) = store.commit(vec![Change::ForgetWill(client_id.to_string(), seq)]).await {
        tracing::warn!(%error, "a cancelled MQTT will's record not removed");
    }
}

/// Now, in milliseconds of Unix time.
pub(super) fn now_ms() -> u64 {
    super::session::now_us() / 1000
}

/// The delayed wills of one listener not yet sent nor cancelled: client identifier to the
/// sequence number of its will. Empty unless a client with a will delay went away, so it costs
/// a connection nothing.
#[derive(Default)]
pub(super) struct Wills {
    pending: Mutex<HashMap<String, u64>>,
}

impl Wills {
    /// Keeps `pending` until it is sent or cancelled: in memory, and in `store`, synced before
    /// this returns (a broker killed after the connection let go must still know the will).
    pub(super) async fn keep(&self, store: &InflightStore, pending: &Pending) {
        self.pending.lock().insert(pending.client_id.clone(), pending.seq);
        let Some(record) = pending.record() else { return };
        let change = Change::KeepWill(pending.client_id.clone(), (pending.due_ms, pending.seq), record);
        if let Err(error) = store.commit(vec![change]).await {
            tracing::warn!(%error, "an MQTT will with a delay not written: it does not outlive a restart");
        }
    }

    /// A new connection took `client_id`'s session: its pending will is not sent. Returns its
    /// sequence number, whose record [`forget`] removes; `None` (the usual case, checked
    /// without waiting) when the client left no will waiting.
    pub(super) fn cancel(&self, client_id: &str) -> Option<u64> {
        self.pending.lock().remove(client_id)
    }

    /// Whether the will `seq` of `client_id` is still to be sent; taken if so (sent once).
    pub(super) fn take(&self, client_id: &str, seq: u64) -> bool {
        let mut pending = self.pending.lock();
        if pending.get(client_id) != Some(&seq) {
            return false;
        }
        pending.remove(client_id);
        true
    }

    /// The wills `store` kept, each registered as pending (at start; none without a store).
    pub(super) fn load(&self, store: &InflightStore) -> Vec<Pending> {
        let records = match store.load_wills() {
            Ok(records) => records,
            Err(error) => {
                tracing::warn!(%error, "the MQTT wills with a delay could not be read");
                return Vec::new();
            }
        };
        let mut loaded = Vec::new();
        for (client_id, (due_ms, seq), bytes) in records {
            match Pending::from_record(due_ms, seq, &bytes).filter(|pending| pending.client_id == client_id) {
                Some(pending) => {
                    self.pending.lock().insert(client_id, seq);
                    loaded.push(pending);
                }
                None => {
                    tracing::warn!(client_id, "an unreadable MQTT will record; dropped");
                    store.enqueue(vec![Change::ForgetWill(client_id, seq)]);
                }
            }
        }
        loaded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tidings_wire::mqtt::QoS;

    fn will() -> Will {
        let properties = Properties {
            will_delay_interval: Some(3),
            message_expiry_interval: Some(30),
            content_type: Some("text/plain".into()),
            user_properties: vec![("k".into(), "v".into())],
            ..Properties::default()
        };
        Will {
            qos: QoS::ExactlyOnce,
            retain: true,
            properties,
            topic: "a/b".into(),
            payload: Bytes::from_static(b"gone"),
        }
    }

    #[test]
    fn a_will_is_due_at_its_delay_in_unix_time_and_at_once_when_overdue() {
        let pending = Pending::new("c".into(), None, will(), 3, 1_000_000_000);
        assert_eq!(pending.due_ms, 1_003_000);
        assert_eq!(pending.left(1_000_500), Duration::from_millis(2_500));
        assert_eq!(pending.left(1_003_000), Duration::ZERO);
        assert_eq!(pending.left(2_000_000), Duration::ZERO, "overdue: at once");
        assert!(pending.delayed);
        assert!(!Pending::new("c".into(), None, will(), 0, 5).delayed);
    }

    #[test]
    fn a_record_reads_back_as_the_same_will_with_every_property() {
        let pending = Pending::new("client/1".into(), Some("alice".into()), will(), 3, 7_000_123);
        let record = pending.record().unwrap();
        assert_eq!(Pending::from_record(pending.due_ms, pending.seq, &record), Some(pending.clone()));
        assert_eq!(Pending::from_record(1, 2, &record[..record.len() - 1]), None, "a truncated record");
        assert_eq!(Pending::from_record(1, 2, b"junk"), None);
    }

    #[tokio::test]
    async fn a_kept_will_is_loaded_after_a_reopen_until_cancelled_or_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (
            Pending::new("c1".into(), None, will(), 3, 1_000_000),
            Pending::new("c2".into(), Some("u".into()), will(), 5, 2_000_000),
        );
        {
            let (store, wills) = (InflightStore::new(dir.path()), Wills::default());
            wills.keep(&store, &first).await;
            wills.keep(&store, &second).await;
        }
        let (store, wills) = (InflightStore::new(dir.path()), Wills::default());
        assert_eq!(wills.load(&store), vec![first.clone(), second.clone()], "both outlive the store");
        assert_eq!(wills.cancel("c1"), Some(first.seq));
        forget(&store, "c1", first.seq).await;
        assert!(!wills.take("c1", first.seq), "a cancelled will is not sent");
        assert!(!wills.take("c2", second.seq + 1), "another will of the client is not this one");
        assert!(wills.take("c2", second.seq));
        assert!(!wills.take("c2", second.seq), "taken once");
        store.commit(vec![Change::ForgetWill("c2".into(), second.seq)]).await.unwrap();
        drop(store);
        let (store, wills) = (InflightStore::new(dir.path()), Wills::default());
        assert_eq!(wills.load(&store), Vec::new(), "neither comes back");
        assert_eq!(wills.cancel("c1"), None);
    }

    #[tokio::test]
    async fn removing_an_older_will_leaves_a_newer_one_of_the_same_client() {
        let dir = tempfile::tempdir().unwrap();
        let store = InflightStore::new(dir.path());
        let (old, new) = (
            Pending::new("c".into(), None, will(), 3, 1_000_000),
            Pending::new("c".into(), None, will(), 3, 9_000_000),
        );
        let wills = Wills::default();
        wills.keep(&store, &old).await;
        wills.keep(&store, &new).await;
        store.commit(vec![Change::ForgetWill("c".into(), old.seq)]).await.unwrap();
        assert_eq!(Wills::default().load(&store), vec![new]);
    }
}
