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

/// A record's `(publisher, seq)` and its tick: what the retry table learns of it.
pub type Logged = ((PublisherId, u64), Tick);

/// The appends of `records` at their ticks, and each one's `(publisher, seq)` and tick.
fn appends<'a>(
    pubend: PubendId,
    records: impl Iterator<Item = &'a tidings_replica::state::Record>,
) -> (Vec<StoreAction>, Vec<Logged>) {
    records
        .map(|record| {
            let (tick, publisher) = (Tick(record.tick), PublisherId(record.publisher));
            let payload = Bytes::from(record.payload.clone());
            let append = StoreAction::Append { pubend, tick, record: payload, publisher, seq: record.seq };
            (append, ((publisher, record.seq), tick))
        })
        .unzip()
}

/// What a log found at start and its group's state say together.
struct Bounds {
    /// The log's last tick (its release point if it holds no record).
    highest: Tick,
    /// The release point: the log's or the group's, the higher.
    release: Tick,
    /// The lease the pubend opens with: every tick the log holds stays behind it, kept or
    /// dropped, so none is given again; and the group's silence.
    lease: Tick,
    /// The ticks of the group's records, ascending.
    held: std::collections::BTreeSet<Tick>,
}

impl Bounds {
    fn of(state: &PubendReplica, found: &Recovered) -> Bounds {
        let highest = found.logged.last().copied().unwrap_or_default().max(found.release);
        Bounds {
            highest,
            release: found.release.max(Tick(state.released_up_to())),
            lease: found.lease.max(Tick(state.silent_up_to())).max(highest),
            held: state.records().map(|r| Tick(r.tick)).collect(),
        }
    }
}

/// What opening a pubend from a replica's state takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seed {
    /// Writes that give an empty log the group's state: every record still held, in tick
    /// order, then the lease (the silence the group made true) and the release point.
    pub writes: Vec<StoreAction>,
    /// What the core is told when the pubend opens, once the writes are synced.
    pub recovered: Recovered,
    /// Each record's `(publisher, seq)` and tick: a retry of one is answered with its tick.
    pub ticks: Vec<Logged>,
    /// Ticks of records the log holds that its group never committed ([`resume`]): never
    /// served, and a publisher's retry of one is a new publish, so the caller forgets them.
    pub dropped: Vec<Tick>,
    /// The group's record the log lacked below its last tick, when the log could not be
    /// resumed and is voided and seeded again instead ([`reopen`]): the writes start with
    /// [`StoreAction::Void`]. The caller logs it.
    pub voided: Option<Tick>,
}

/// The seed of `pubend`'s log from `state`. The log it writes into must hold nothing of
/// `pubend` (the store takes a pubend's ticks in growing order only).
pub fn seed(pubend: PubendId, state: &PubendReplica) -> Seed {
    let (lease, release) = (Tick(state.silent_up_to()), Tick(state.released_up_to()));
    let (writes, ticks) = appends(pubend, state.records());
    let (writes, recovered) = lease_and_release(pubend, state, writes, &ticks, (lease, release));
    Seed { writes, recovered, ticks, dropped: Vec::new(), voided: None }
}

/// `writes`, an empty log's appends of `ticks`, then the lease and the release point; and what
/// the core is told of the log they make: the group's records and publishers.
fn lease_and_release(
    pubend: PubendId,
    state: &PubendReplica,
    mut writes: Vec<StoreAction>,
    ticks: &[Logged],
    (lease, release): (Tick, Tick),
) -> (Vec<StoreAction>, Recovered) {
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
    (writes, recovered)
}

/// The seed that brings `pubend`'s own log, found at start as `found` (or kept when this broker
/// lost the group's lead and closed the pubend), up to its group's state: the group's state is
/// the truth (gd-protocol §10).
///
/// - A record of the log that the group does not hold above its release point was synced here
///   but never committed (the host died, or was deposed, before a quorum had it): no subscriber
///   got it, a successor told its tick silent, and a retry of its publish was logged at another
///   tick. It is dropped from what the core is told ([`Seed::dropped`]), so its tick is F under
///   the lease, never D, and its publisher's sequence number is not taken as logged.
/// - The records a successor logged past the log's last tick are added, the group's silence
///   and release point raise the lease and the release, and the publishers' highest sequence
///   numbers are the group's.
///
/// A record the group holds at or below the log's last tick that the log lacks cannot be added
/// (the store takes a pubend's ticks in growing order only): `Err` names it, and the pubend
/// must not be opened from this log ([`reopen`] voids and re-seeds it then).
pub fn resume(pubend: PubendId, state: &PubendReplica, found: Recovered) -> Result<Seed, Tick> {
    let Bounds { highest, release, lease, held } = Bounds::of(state, &found);
    let lacks = |tick: &Tick| *tick > found.release && found.logged.binary_search(tick).is_err();
    if let Some(tick) = held.iter().copied().take_while(|tick| *tick <= highest).find(lacks) {
        return Err(tick);
    }
    let (mut writes, ticks) = appends(pubend, state.records().filter(|record| Tick(record.tick) > highest));
    if lease > found.lease {
        writes.push(StoreAction::LeaseRaise { pubend, up_to: lease });
    }
    if release > found.release {
        writes.push(StoreAction::ReleasePrefix { pubend, tick: release });
    }
    let (mut logged, dropped): (Vec<Tick>, Vec<Tick>) =
        found.logged.into_iter().filter(|&tick| tick > release).partition(|tick| held.contains(tick));
    logged.extend(ticks.iter().map(|&(_, tick)| tick));
    let publishers = state.publishers().into_iter().map(|(p, seq)| (PublisherId(p), seq)).collect();
    let recovered = Recovered { lease, release, logged, publishers, lost: found.lost };
    Ok(Seed { writes, recovered, ticks, dropped, voided: None })
}

/// How a replicated pubend whose log was found at start (or kept when this broker lost the
/// group's lead) is opened once its group serves here: [`resume`]d when the log can be brought
/// up to the group's state, else voided and seeded again from it ([`reseed`]). The group's
/// state is the truth either way.
pub fn reopen(pubend: PubendId, state: &PubendReplica, found: Recovered) -> Seed {
    match resume(pubend, state, found.clone()) {
        Ok(seed) => seed,
        Err(tick) => reseed(pubend, state, found, tick),
    }
}

/// The seed that replaces `pubend`'s log, found as `found`, with its group's state: the log
/// lacks the group's record at `lacked`, below its last tick, and the store takes a pubend's
/// ticks in growing order only, so that record cannot be added. This happens when a successor
/// logged records at ticks below this log's last one (the ticks come from each broker's clock,
/// and two machines' clocks differ) after this broker synced records the group never committed.
///
/// The writes are a [`StoreAction::Void`] of the whole log, then the group's records above the
/// release point (the log's or the group's, the higher), the lease and the release point. What
/// the core is told is the group's state alone:
/// - the log's records the group does not hold are dropped ([`Seed::dropped`]): never served,
///   and a publisher's retry of one is a new publish;
/// - the lease covers every tick the log held (as in [`resume`]), so none is given again: a
///   dropped record's tick is F under it, never D;
/// - the log's lost ranges go with it: a tick the group holds is served from the group, one it
///   does not was never committed.
pub fn reseed(pubend: PubendId, state: &PubendReplica, found: Recovered, lacked: Tick) -> Seed {
    let Bounds { release, lease, held, .. } = Bounds::of(state, &found);
    let (seeded, ticks) = appends(pubend, state.records().filter(|record| Tick(record.tick) > release));
    let writes = std::iter::once(StoreAction::Void { pubend }).chain(seeded).collect();
    let (writes, recovered) = lease_and_release(pubend, state, writes, &ticks, (lease, release));
    let dropped = found.logged.into_iter().filter(|tick| *tick > release && !held.contains(tick)).collect();
    Seed { writes, recovered, ticks, dropped, voided: Some(lacked) }
}

#[cfg(test)]
mod tests;
