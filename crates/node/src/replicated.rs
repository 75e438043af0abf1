//! Opening a pubend from its replicated state (issue 40, `docs/replication.md`, "Serving from
//! the replicas"): a host whose disk was wiped, and later a successor taking a pubend over,
//! serve the pubend's stream from [`PubendReplica`], the state every replica of its Raft group
//! applied.
//!
//! The stream is not served from the replica directly. The group's records are written into
//! the broker's own pubend log first, at the ticks the group holds them at (the ticks the host's
//! engine gave them, so the ticks subscribers already know), then the core opens the pubend from
//! that log as after any restart ([`tidings_delivery::StoreInput::Opened`]). Nacks, reads,
//! silence and releases then run through the same code as for a pubend that never moved, and
//! a restart of the new host finds its log on its own disk.
//!
//! The caller opens the pubend only once every write of the [`Seed`] is synced: the store makes
//! a record readable only then, and the core would otherwise read a tick it calls D and find
//! nothing.

use bytes::Bytes;
use tidings_delivery::{PubendId, PublisherId, Recovered, StoreAction, Tick};
use tidings_replica::PubendReplica;

/// What opening a pubend from a replica's state takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seed {
    /// Writes that give an empty log the group's state: every record still held, in tick
    /// order, then the lease (the silence the group made true) and the release point.
    pub writes: Vec<StoreAction>,
    /// What the core is told when the pubend opens, once the writes are synced.
    pub recovered: Recovered,
    /// Each record's `(publisher, seq)` and tick: a retry of one is answered with its tick.
    pub ticks: Vec<((PublisherId, u64), Tick)>,
}

/// The seed of `pubend`'s log from `state`. The log it writes into must hold nothing of
/// `pubend` (the store takes a pubend's ticks in growing order only).
pub fn seed(pubend: PubendId, state: &PubendReplica) -> Seed {
    let mut writes = Vec::new();
    let mut ticks = Vec::new();
    for record in state.records() {
        let (tick, publisher) = (Tick(record.tick), PublisherId(record.publisher));
        let payload = Bytes::from(record.payload.clone());
        writes.push(StoreAction::Append { pubend, tick, record: payload, publisher, seq: record.seq });
        ticks.push(((publisher, record.seq), tick));
    }
    let (lease, release) = (Tick(state.silent_up_to()), Tick(state.released_up_to()));
    if lease > Tick(0) {
        writes.push(StoreAction::LeaseRaise { pubend, up_to: lease });
    }
    if release > Tick(0) {
        writes.push(StoreAction::ReleasePrefix { pubend, tick: release });
    }
    let recovered = Recovered {
        lease,
        release,
        logged: ticks.iter().map(|&(_, tick)| tick).collect(),
        publishers: state.publishers().into_iter().map(|(p, seq)| (PublisherId(p), seq)).collect(),
        lost: Vec::new(),
    };
    Seed { writes, recovered, ticks }
}

/// The seed that brings `pubend`'s own log, found at start as `found`, up to its group's state:
/// a host restarted with its log intact whose group a successor led meanwhile (takeover) adds
/// the records the successor logged past its log's last tick, and the group's silence as its
/// lease. A record the group holds at or below the log's last tick that the log lacks cannot
/// be added (the store takes a pubend's ticks in growing order only): `Err` names it, and the
/// pubend must not be opened from this log.
pub fn resume(pubend: PubendId, state: &PubendReplica, found: Recovered) -> Result<Seed, Tick> {
    let highest = found.logged.last().copied().unwrap_or_default().max(found.release);
    let mut writes = Vec::new();
    let mut ticks = Vec::new();
    for record in state.records() {
        let (tick, publisher) = (Tick(record.tick), PublisherId(record.publisher));
        if tick <= highest {
            if tick > found.release && found.logged.binary_search(&tick).is_err() {
                return Err(tick);
            }
            continue;
        }
        let payload = Bytes::from(record.payload.clone());
        writes.push(StoreAction::Append { pubend, tick, record: payload, publisher, seq: record.seq });
        ticks.push(((publisher, record.seq), tick));
    }
    let lease = found.lease.max(Tick(state.silent_up_to()));
    if lease > found.lease {
        writes.push(StoreAction::LeaseRaise { pubend, up_to: lease });
    }
    let mut publishers: std::collections::BTreeMap<PublisherId, u64> = found.publishers.iter().copied().collect();
    for (publisher, seq) in state.publishers() {
        let entry = publishers.entry(PublisherId(publisher)).or_default();
        *entry = (*entry).max(seq);
    }
    let mut logged = found.logged;
    logged.extend(ticks.iter().map(|&(_, tick)| tick));
    let recovered = Recovered { lease, logged, publishers: publishers.into_iter().collect(), ..found };
    Ok(Seed { writes, recovered, ticks })
}

#[cfg(test)]
mod tests;
