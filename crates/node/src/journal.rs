//! The boundary between the delivery core's store actions and `tidings-store`: what an opened
//! log recovered, submitting actions, reads, and turning completions back into inputs. The two
//! crates keep their own id types on purpose (the log format must not change because the core
//! did); the conversions live here only, for the broker's tokio driver and the simulator alike.

use std::collections::BTreeMap;

use bytes::Bytes;
use tidings_delivery::{PubendId, PublisherId, Recovered, StoreAction, StoreInput, Tick, TickRange};
use tidings_store as store;
use tidings_store::{Completion, OpKind, ReadItem, Store, StoreError, Token};
use tracing::{error, warn};

use crate::hush::Hush;

/// What opening the log found, in the core's terms.
#[derive(Debug, Default)]
pub struct Opened {
    /// Per pubend in the log, what the core is told at `StoreInput::Opened`.
    pub pubends: Vec<(PubendId, Recovered)>,
    /// Every logged publish still deduplicated: (pubend, (publisher, seq), its tick).
    pub dedup: Vec<(PubendId, (PublisherId, u64), Tick)>,
}

/// Converts what [`Store::open_with`] (or `open_stepped`) recovered, reading the ticks of the
/// records still in each pubend's log once (ranges that read finds damaged join the lost ones).
pub fn opened(store: &Store, recovered: store::Recovered) -> Result<Opened, StoreError> {
    let mut opened = Opened::default();
    for (id, log) in recovered.pubends {
        if !log.lost.is_empty() {
            error!(pubend = id.0, lost = ?log.lost, "the pubend log lost ticks to damage; subscribers get gap notices for them");
        }
        let (logged, damaged) = logged_ticks(store, id, &log)?;
        // High-water marks first (they outlive released records), then the unreleased records.
        let mut publishers: BTreeMap<PublisherId, u64> =
            log.publishers.iter().map(|(publisher, seq)| (PublisherId(publisher.0), seq.0)).collect();
        for ((publisher, seq), tick) in &log.dedup {
            let highest = publishers.entry(PublisherId(publisher.0)).or_insert(seq.0);
            *highest = (*highest).max(seq.0);
            opened.dedup.push((PubendId(id.0), (PublisherId(publisher.0), seq.0), Tick(tick.0)));
        }
        let lost = log.lost.iter().map(|r| range_of(*r)).chain(damaged).collect();
        let core = Recovered {
            lease: Tick(log.lease.0),
            release: Tick(log.released.0),
            logged,
            publishers: publishers.into_iter().collect(),
            lost,
        };
        opened.pubends.push((PubendId(id.0), core));
    }
    Ok(opened)
}

fn range_of(range: store::TickRange) -> TickRange {
    TickRange { from: Tick(range.first.0), to: Tick(range.last.0) }
}

/// The ticks of the records still in a pubend's log, and the ranges that read found damaged.
fn logged_ticks(
    store: &Store,
    id: store::PubendId,
    log: &store::PubendRecovery,
) -> Result<(Vec<Tick>, Vec<TickRange>), StoreError> {
    if log.highest <= log.released {
        return Ok((Vec::new(), Vec::new()));
    }
    let range = store::TickRange { first: store::Tick(log.released.0 + 1), last: log.highest };
    let (records, lost) = split(store.read(id, range, usize::MAX)?);
    Ok((records.into_iter().map(|(tick, _)| tick).collect(), lost))
}

/// Submits one store action (reads excepted: see [`read`]). An error means the store is closed.
pub fn submit(store: &Store, token: Token, action: &StoreAction) -> Result<(), StoreError> {
    match action {
        StoreAction::Append { pubend, tick, record, publisher, seq } => store.append(
            token,
            store::Record {
                pubend: store::PubendId(pubend.0),
                tick: store::Tick(tick.0),
                publisher: store::PublisherId(publisher.0),
                seq: store::PublisherSeq(*seq),
                payload: record.clone(),
            },
        ),
        StoreAction::LeaseRaise { pubend, up_to } => {
            store.raise_lease(token, store::PubendId(pubend.0), store::Tick(up_to.0))
        }
        StoreAction::ReleasePrefix { pubend, tick } => {
            store.release(token, store::PubendId(pubend.0), store::Tick(tick.0))
        }
        StoreAction::Void { pubend } => store.void(token, store::PubendId(pubend.0)),
        // Not the log's: the shell keeps ack leases beside it (the broker in its durable
        // store, the simulator on its disk).
        StoreAction::ReadRange { .. } | StoreAction::AckLease { .. } => Ok(()),
    }
}

/// Reads a range (blocking: the broker runs it on a blocking pool, the simulator in line) and
/// answers it as the core's `ReadDone`. Ranges the store found damaged come back as `lost`: the
/// core turns them into L (gap notices to the subscribers owed them) rather than asking again
/// forever. A failed read (an I/O error, not damage) returns nothing and the core asks again.
pub fn read(store: &Store, pubend: PubendId, range: TickRange) -> StoreInput {
    let wanted = store::TickRange { first: store::Tick(range.from.0), last: store::Tick(range.to.0) };
    let (records, lost) = match store.read(store::PubendId(pubend.0), wanted, usize::MAX) {
        Ok(items) => split(items),
        Err(error) => {
            warn!(%error, pubend = pubend.0, "reading the pubend log failed");
            (Vec::new(), Vec::new())
        }
    };
    if !lost.is_empty() {
        error!(pubend = pubend.0, ?lost, "records of the pubend log are damaged; subscribers get gap notices for them");
    }
    StoreInput::ReadDone { pubend, range, records, lost }
}

/// A read's records, and the tick ranges it found damaged, in the core's terms.
pub fn split(items: Vec<ReadItem>) -> (Vec<(Tick, Bytes)>, Vec<TickRange>) {
    let mut records = Vec::new();
    let mut lost = Vec::new();
    for item in items {
        match item {
            ReadItem::Data(record) => records.push((Tick(record.tick.0), record.payload)),
            ReadItem::Lost(r) => lost.push(range_of(r)),
        }
    }
    (records, lost)
}

/// Turns one group of completions into core inputs, in order: consecutive successful appends of
/// a pubend become one `AppendDone` (it covers every earlier append), and a failed append is
/// reported before any later success of its pubend. Returns the inputs and the number of
/// appends in the group.
pub fn inputs(group: &[Completion]) -> (Vec<StoreInput>, usize) {
    let mut out = Vec::new();
    let mut synced: BTreeMap<PubendId, Tick> = BTreeMap::new();
    let mut appends = 0;
    for completion in group {
        let pubend = PubendId(completion.pubend.0);
        let tick = Tick(completion.tick.0);
        match (completion.kind, &completion.result) {
            (OpKind::Append, Ok(())) => {
                appends += 1;
                synced.insert(pubend, tick);
            }
            (OpKind::Append, Err(error)) => {
                appends += 1;
                static HUSH: Hush = Hush::new();
                if let Some(held) = HUSH.pass() {
                    warn!(%error, pubend = pubend.0, tick = tick.0, "a guaranteed publish could not be logged (and {held} more since the last warning)");
                }
                if let Some(synced_up_to) = synced.remove(&pubend) {
                    out.push(StoreInput::AppendDone { pubend, synced_up_to });
                }
                out.push(StoreInput::AppendFailed { pubend, tick });
            }
            (OpKind::Lease, Ok(())) => out.push(StoreInput::LeaseDone { pubend, lease: tick }),
            (OpKind::Lease | OpKind::Release | OpKind::Void, Err(error)) => {
                static HUSH: Hush = Hush::new();
                if let Some(held) = HUSH.pass() {
                    error!(%error, pubend = pubend.0, kind = ?completion.kind, "the pubend log refused a write (and {held} more since the last report)");
                }
                // A failed release is retried by the next one (the prefix only grows); a failed
                // lease must be asked for again.
                if completion.kind == OpKind::Lease {
                    out.push(StoreInput::LeaseFailed { pubend });
                }
            }
            // A void's completion is its seed's (the shell takes it out first, `seeded`).
            (OpKind::Release | OpKind::Void, Ok(())) => {}
        }
    }
    out.extend(synced.into_iter().map(|(pubend, synced_up_to)| StoreInput::AppendDone { pubend, synced_up_to }));
    (out, appends)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(tick: u64, result: Result<(), StoreError>) -> Completion {
        Completion {
            token: Token(tick),
            kind: OpKind::Append,
            pubend: store::PubendId(1),
            tick: store::Tick(tick),
            result,
        }
    }

    #[test]
    fn a_failed_append_is_reported_after_the_successes_before_it_and_before_those_after() {
        let full = Err(StoreError::NoSpace { op: "appending" });
        let (inputs, appends) = inputs(&[done(1, Ok(())), done(2, Ok(())), done(3, full), done(4, Ok(()))]);
        let p = PubendId(1);
        assert_eq!(appends, 4);
        assert_eq!(
            inputs,
            vec![
                StoreInput::AppendDone { pubend: p, synced_up_to: Tick(2) },
                StoreInput::AppendFailed { pubend: p, tick: Tick(3) },
                StoreInput::AppendDone { pubend: p, synced_up_to: Tick(4) },
            ]
        );
    }
}
