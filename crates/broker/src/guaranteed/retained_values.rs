//! Retained values published guaranteed, kept on disk by their publisher's broker so that it
//! has them again after a restart (SIGKILL included).
//!
//! Where: the `retained` table of the durable store (redb, beside the durable subscriptions),
//! not the pubend log. The log is a stream released as a prefix once every subscriber
//! acknowledged it, which is the wrong shape for "the last value per topic, for ever": keeping
//! one record per topic out of the log's truncation would pin whole segments. A keyed table
//! updated in place is what a topic's last value is.
//!
//! When: a GPUBLISH carrying a retained value (`$retain`, or an MQTT QoS 1/2 retained
//! publish) is written to the table, in one durable transaction, *before* its record is handed
//! to the log; its PUBLISH_ACK follows the log's sync, so a value whose publish was
//! acknowledged is on disk. One redb commit (an fsync) per such publish, on the driver's task:
//! retained values are a topic's state, published far less often than its stream.
//!
//! After: the session applies the value to the in-memory store ([`crate::retained`]), which
//! marks the topic durable and hands every later change of it (a newer best-effort value, one
//! from another broker, a clearing) to this driver, in the order it applied them. Those are
//! written at the end of the driver's turn, in one transaction: the copy on disk follows the
//! one in memory, so a restart never brings back a value older than one already served here
//! (except one changed less than a turn before the crash, best effort as it came).

use std::collections::HashMap;

use bytes::Bytes;
use tidings_wire::{Frame, GuaranteedPublish, Message, Notice, PublishRefused, ReasonCode};
use tracing::warn;

use super::driver::Driver;
use super::durable_store::{Batch, DurableStore};
use crate::outbox::Outbox;

/// What the driver knows of the retained values on disk.
#[derive(Default)]
pub(super) struct KeptValues {
    /// Per topic, the value on disk once `pending` is written (the encoded, flagged message;
    /// `None`: none). A topic missing is not known (a write of it failed): its next change is
    /// written whatever it is.
    on_disk: HashMap<String, Option<Bytes>>,
    /// Changes that came from the in-memory store, to write at the end of the turn, in order.
    pending: Vec<(String, Option<Bytes>)>,
}

/// The values on disk at start, decoded (a record that no longer decodes is left out).
pub(super) fn load(store: &DurableStore) -> Result<(KeptValues, Vec<Message>), super::GuaranteedError> {
    let mut kept = KeptValues::default();
    let mut values = Vec::new();
    for (topic, bytes) in store.load_retained()? {
        match Message::decode(bytes.clone()) {
            Ok(message) if message.topic() == topic => values.push(message),
            _ => {
                warn!(topic, "a retained value on disk does not decode; left out");
                continue;
            }
        }
        kept.on_disk.insert(topic, Some(bytes));
    }
    Ok((kept, values))
}

impl KeptValues {
    /// Records a change to write; none if the disk has that value already.
    fn change(&mut self, topic: String, value: Option<Bytes>) -> bool {
        if self.on_disk.get(&topic) == Some(&value) {
            return false;
        }
        self.on_disk.insert(topic.clone(), value.clone());
        self.pending.push((topic, value));
        true
    }
}

impl Driver {
    /// Writes the retained value `copy` of `publish` (as the session is about to apply it) and
    /// what waits before it, durably, before the publish goes on; false (the publish refused
    /// with `storage_unavailable`) if the write failed.
    pub(super) fn keep_retained(
        &mut self,
        copy: &Message,
        publish: &GuaranteedPublish,
        reply: &std::sync::Arc<Outbox>,
    ) -> bool {
        let value = match copy.payload().is_empty() {
            true => None,
            false => crate::retained::flagged(copy).map(|m| m.as_bytes().clone()),
        };
        if !self.kept.change(copy.topic().to_string(), value) && self.kept.pending.is_empty() {
            return true;
        }
        if let Err(error) = self.write_retained() {
            let reason =
                Notice::new(ReasonCode::StorageUnavailable, format!("cannot keep the retained value: {error}"));
            self.refusals.refused(tidings_delivery::PublisherId(publish.publisher.0), publish.seq, reply);
            let refused = PublishRefused { publisher: publish.publisher, seq: publish.seq, reason };
            reply.push_frame(&Frame::PublishRefused(refused));
            self.metrics.publishes_refused.inc();
            return false;
        }
        true
    }

    /// A durable topic's value changed in the in-memory store: written at the end of the turn.
    pub(super) fn retained_changed(&mut self, topic: String, value: Option<Bytes>) {
        self.kept.change(topic, value);
    }

    /// Writes the changes that wait (once per turn).
    pub(super) fn flush_retained(&mut self) {
        if self.kept.pending.is_empty() {
            return;
        }
        if let Err(error) = self.write_retained() {
            warn!(%error, "cannot write retained values to disk; the older ones come back after a restart");
        }
    }

    fn write_retained(&mut self) -> Result<(), super::durable_store::DurableStoreError> {
        let batch = Batch { retained: std::mem::take(&mut self.kept.pending), ..Batch::default() };
        self.metrics.retained_writes.inc();
        let written = self.durables.store.write(&batch);
        if written.is_err() {
            // What is on disk for these topics is not known now: their next change is written.
            for (topic, _) in &batch.retained {
                self.kept.on_disk.remove(topic);
            }
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_written_once_and_a_topic_not_known_is_written_whatever_its_value() {
        let mut kept = KeptValues::default();
        let one = Some(Bytes::from_static(b"1"));
        assert!(kept.change("a".into(), one.clone()));
        assert!(!kept.change("a".into(), one), "the disk has it already (once written)");
        assert!(kept.change("a".into(), None), "a clearing is a change");
        assert!(!kept.change("a".into(), None));
        assert!(kept.change("b".into(), None), "not known: written even as a clearing");
        assert_eq!(kept.pending.len(), 3);
    }
}
