//! Ack leases on disk: how far this broker may acknowledge each stream upstream
//! ([`tidings_delivery::StoreAction::AckLease`]). They live in the durable store (redb, beside
//! the checkpoints: small keyed state updated in place), written off the driver's task in one
//! transaction per turn, one write at a time; the core holds its Acks until the write is
//! synced. At start they are fed back before any subscription, so a subscription made after a
//! restart starts above what the broker's earlier life acknowledged
//! (`Engine::start_floor`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidings_delivery::{Input, PubendId, StoreInput, Tick};
use tracing::warn;

use super::driver::Driver;
use super::durable_store::Batch;
use super::Command;

/// A failed write is tried again after this long (a full disk: Acks wait meanwhile).
const RETRY: Duration = Duration::from_secs(1);

/// Leases asked for and not yet written, and whether a write is under way.
#[derive(Default)]
pub(super) struct AckLeases {
    asked: BTreeMap<PubendId, Tick>,
    writing: bool,
    retry_at: Option<Instant>,
}

impl Driver {
    /// The core asked for `pubend`'s ack lease to reach `up_to`: written with the next flush.
    pub(super) fn ask_ack_lease(&mut self, pubend: PubendId, up_to: Tick) {
        let asked = self.ack_leases.asked.entry(pubend).or_default();
        *asked = (*asked).max(up_to);
    }

    /// Starts writing the leases asked for since the last write, unless one is under way.
    pub(super) fn flush_ack_leases(&mut self) {
        let leases = &mut self.ack_leases;
        if leases.writing || leases.asked.is_empty() || leases.retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        let saved = std::mem::take(&mut leases.asked);
        leases.writing = true;
        let batch = Batch { ack_leases: saved.iter().map(|(p, t)| (p.0, t.0)).collect(), ..Batch::default() };
        let store = Arc::clone(&self.durables.store);
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let result = store.write(&batch).map_err(|e| e.to_string());
            let _ = tx.send(Command::AckLeasesSaved { saved, result });
        });
    }

    /// A lease write finished: the Acks it covers may go; a failed one is asked again.
    pub(super) fn ack_leases_saved(&mut self, saved: BTreeMap<PubendId, Tick>, result: Result<(), String>) {
        self.ack_leases.writing = false;
        if let Err(error) = result {
            warn!(%error, "cannot write the ack leases; acknowledgements upstream wait (their logs stay pinned)");
            self.ack_leases.retry_at = Some(Instant::now() + RETRY);
            for (pubend, up_to) in saved {
                self.ask_ack_lease(pubend, up_to);
            }
            return;
        }
        self.ack_leases.retry_at = None;
        for (pubend, lease) in saved {
            self.feed(Input::Store(StoreInput::AckLeaseDone { pubend, lease }));
        }
    }

    /// Feeds the core every ack lease found at start (before any subscription is made).
    pub(super) fn restore_ack_leases(&mut self) -> Result<(), super::GuaranteedError> {
        let leases = self.durables.store.load_ack_leases().map_err(super::GuaranteedError::Durable)?;
        for (pubend, lease) in leases {
            self.feed(Input::Store(StoreInput::AckLeaseDone { pubend: PubendId(pubend), lease: Tick(lease) }));
        }
        Ok(())
    }
}
