//! What `/state` shows of guaranteed delivery: every pubend with a stream here (hosted or
//! remote), its route and where its stream stands, and the number of guaranteed subscriptions.
//! The driver refreshes a snapshot at most every [`EVERY`], so the admin endpoint never waits
//! for (or locks) the engine.

use std::time::{Duration, Instant};

use serde::Serialize;
use tidings_delivery::PubendId;

use super::driver::Driver;

/// How often the snapshot is refreshed at most.
pub(super) const EVERY: Duration = Duration::from_millis(250);

/// Guaranteed delivery at this broker, for `/state`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GuaranteedState {
    /// Guaranteed subscriptions (subends).
    pub subends: usize,
    /// Every pubend with a stream here.
    pub pubends: Vec<PubendState>,
}

/// One pubend's stream at this broker.
#[derive(Clone, Debug, Serialize)]
pub struct PubendState {
    /// The pubend, as 16 hex digits.
    pub pubend: String,
    /// Whether this broker hosts it (its log is here).
    pub hosted: bool,
    /// Where acks and nacks go (broker names), empty at the home.
    pub upstream: Vec<String>,
    /// The brokers the stream is sent to (entries of child cells, and mates).
    pub children: Vec<String>,
    /// Every tick up to this one is final and delivered here.
    pub done: u64,
    /// The doubt horizon.
    pub horizon: u64,
    /// What this stream last acknowledged upstream (at the home: released).
    pub acked: u64,
    /// At the home: the log's release prefix.
    pub release: Option<u64>,
    /// At the home: the next tick a publish gets at the earliest.
    pub next_tick: Option<u64>,
    /// Payloads cached.
    pub cached: usize,
}

impl Driver {
    /// The snapshot the admin endpoint reads.
    pub(super) fn shared_state(&self) -> std::sync::Arc<parking_lot::Mutex<GuaranteedState>> {
        std::sync::Arc::clone(&self.state)
    }

    /// Refreshes the `/state` snapshot if it is older than [`EVERY`].
    pub(super) fn snapshot(&mut self) {
        if self.snapshot_at.is_some_and(|at| at.elapsed() < EVERY) {
            return;
        }
        self.snapshot_at = Some(Instant::now());
        let pubends = self.pubends().into_iter().filter_map(|pubend| self.pubend_state(pubend)).collect();
        *self.state.lock() = GuaranteedState { subends: self.subends.len(), pubends };
    }

    fn pubend_state(&self, pubend: PubendId) -> Option<PubendState> {
        let view = self.engine.inspect(pubend)?;
        let (upstream, children) = self.net.as_ref().map(|net| net.route_names(pubend)).unwrap_or_default();
        Some(PubendState {
            pubend: format!("{:016x}", pubend.0),
            hosted: self.hosted.contains(&pubend),
            upstream,
            children,
            done: view.done().0,
            horizon: view.horizon().0,
            acked: view.acked().0,
            release: view.release().map(|t| t.0),
            next_tick: view.next_tick().map(|t| t.0),
            cached: view.cached(),
        })
    }
}
