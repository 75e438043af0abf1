//! An in-memory model of a pubend's store for simulations and tests: it carries out
//! [`StoreAction`]s, completes them when told to sync, and on a simulated crash loses every
//! append and lease raise not yet synced — exactly what a real log may lose.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::names::{PubendId, PublisherId, Tick, TickRange};
use crate::store::{Recovered, StoreAction, StoreInput};

/// One pubend's log.
#[derive(Clone, Debug, Default)]
struct MemLog {
    durable: BTreeMap<Tick, (Bytes, PublisherId, u64)>,
    unsynced: Vec<(Tick, Bytes, PublisherId, u64)>,
    lease: Tick,
    lease_unsynced: Option<Tick>,
    release: Tick,
    publishers: BTreeMap<PublisherId, u64>,
    /// Every record ever made durable, never deleted: the ground truth for checks.
    history: BTreeMap<Tick, Bytes>,
}

/// Logs of every pubend of one broker.
#[derive(Clone, Debug, Default)]
pub struct MemStore {
    logs: BTreeMap<PubendId, MemLog>,
    /// Ack leases of streams (not logs), synced and waiting for the next sync.
    ack_leases: BTreeMap<PubendId, Tick>,
    ack_leases_unsynced: BTreeMap<PubendId, Tick>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Carries out one action. Reads and releases complete at once (a read returns its
    /// [`StoreInput::ReadDone`]); appends and lease raises wait for [`Self::sync`].
    pub fn apply(&mut self, action: &StoreAction) -> Option<StoreInput> {
        match action {
            StoreAction::Append { pubend, tick, record, publisher, seq } => {
                self.logs.entry(*pubend).or_default().unsynced.push((*tick, record.clone(), *publisher, *seq));
                None
            }
            StoreAction::LeaseRaise { pubend, up_to } => {
                let log = self.logs.entry(*pubend).or_default();
                log.lease_unsynced = Some(log.lease_unsynced.unwrap_or(*up_to).max(*up_to));
                None
            }
            StoreAction::ReleasePrefix { pubend, tick } => {
                let log = self.logs.entry(*pubend).or_default();
                log.release = log.release.max(*tick);
                log.durable = log.durable.split_off(&tick.next());
                None
            }
            // At once, as if synced, with the appends before it (the model keeps no order
            // between a void and a crash): only the ground truth of what was ever durable stays.
            StoreAction::Void { pubend } => {
                let log = self.logs.entry(*pubend).or_default();
                *log = MemLog { history: std::mem::take(&mut log.history), ..MemLog::default() };
                None
            }
            StoreAction::ReadRange { pubend, range } => {
                let log = self.logs.get(pubend);
                let records = log
                    .map(|log| log.durable.range(range.from..=range.to).map(|(&t, (r, _, _))| (t, r.clone())).collect())
                    .unwrap_or_default();
                Some(StoreInput::ReadDone { pubend: *pubend, range: *range, records, lost: Vec::new() })
            }
            StoreAction::AckLease { pubend, up_to } => {
                let lease = self.ack_leases_unsynced.entry(*pubend).or_default();
                *lease = (*lease).max(*up_to);
                None
            }
        }
    }

    /// The ack leases a restarted broker finds, as the inputs that restore them.
    pub fn ack_leases(&self) -> Vec<StoreInput> {
        self.ack_leases.iter().map(|(&pubend, &lease)| StoreInput::AckLeaseDone { pubend, lease }).collect()
    }

    /// Makes every pending append and lease raise durable; returns their completions.
    pub fn sync(&mut self) -> Vec<StoreInput> {
        let mut done = Vec::new();
        for (&pubend, log) in &mut self.logs {
            if let Some(last) = log.unsynced.last().map(|record| record.0) {
                for (tick, record, publisher, seq) in log.unsynced.drain(..) {
                    log.history.insert(tick, record.clone());
                    let highest = log.publishers.entry(publisher).or_insert(seq);
                    *highest = (*highest).max(seq);
                    log.durable.insert(tick, (record, publisher, seq));
                }
                done.push(StoreInput::AppendDone { pubend, synced_up_to: last });
            }
            if let Some(lease) = log.lease_unsynced.take() {
                log.lease = log.lease.max(lease);
                done.push(StoreInput::LeaseDone { pubend, lease: log.lease });
            }
        }
        for (pubend, lease) in std::mem::take(&mut self.ack_leases_unsynced) {
            let synced = self.ack_leases.entry(pubend).or_default();
            *synced = (*synced).max(lease);
            done.push(StoreInput::AckLeaseDone { pubend, lease: *synced });
        }
        done
    }

    /// A crash: whatever was not synced is gone.
    pub fn crash(&mut self) {
        for log in self.logs.values_mut() {
            log.unsynced.clear();
            log.lease_unsynced = None;
        }
        self.ack_leases_unsynced.clear();
    }

    /// What the broker finds when it opens `pubend`'s log.
    pub fn open(&self, pubend: PubendId) -> StoreInput {
        let recovered = match self.logs.get(&pubend) {
            None => Recovered::default(),
            Some(log) => Recovered {
                lease: log.lease,
                release: log.release,
                logged: log.durable.keys().copied().collect(),
                publishers: log.publishers.iter().map(|(&p, &s)| (p, s)).collect(),
                lost: Vec::new(),
            },
        };
        StoreInput::Opened { pubend, recovered }
    }

    /// Every record of `pubend` ever made durable (released ones included), by tick.
    pub fn history(&self, pubend: PubendId) -> impl Iterator<Item = (Tick, &Bytes)> + '_ {
        self.logs.get(&pubend).into_iter().flat_map(|log| log.history.iter().map(|(&t, r)| (t, r)))
    }

    /// The durable release prefix of `pubend`.
    pub fn release(&self, pubend: PubendId) -> Tick {
        self.logs.get(&pubend).map_or(Tick(0), |log| log.release)
    }

    /// Records still held for `pubend` in `range`.
    pub fn held(&self, pubend: PubendId, range: TickRange) -> usize {
        self.logs.get(&pubend).map_or(0, |log| log.durable.range(range.from..=range.to).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(tick: u64) -> StoreAction {
        StoreAction::Append {
            pubend: PubendId(1),
            tick: Tick(tick),
            record: Bytes::from_static(b"m"),
            publisher: PublisherId(7),
            seq: tick,
        }
    }

    #[test]
    fn a_crash_loses_exactly_the_unsynced_appends() {
        let mut store = MemStore::new();
        store.apply(&append(10));
        assert_eq!(store.sync(), vec![StoreInput::AppendDone { pubend: PubendId(1), synced_up_to: Tick(10) }]);
        store.apply(&append(11));
        store.crash();
        let StoreInput::Opened { recovered, .. } = store.open(PubendId(1)) else { panic!("not opened") };
        assert_eq!(recovered.logged, vec![Tick(10)]);
        assert_eq!(recovered.publishers, vec![(PublisherId(7), 10)]);
    }

    #[test]
    fn release_deletes_records_but_history_keeps_them() {
        let mut store = MemStore::new();
        store.apply(&append(10));
        store.apply(&append(12));
        store.sync();
        store.apply(&StoreAction::ReleasePrefix { pubend: PubendId(1), tick: Tick(10) });
        assert_eq!(store.held(PubendId(1), TickRange { from: Tick(0), to: Tick(20) }), 1);
        assert_eq!(store.history(PubendId(1)).count(), 2);
    }
}
