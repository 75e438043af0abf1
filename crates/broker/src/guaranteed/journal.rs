//! The boundary between the delivery core's store actions and `tidings-store`: opening and
//! recovering the pubend log, submitting actions, and turning completions back into inputs.
//! The two crates keep their own id types on purpose (the log format must not change because
//! the core did); the conversions live here only.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prometheus_client::metrics::histogram::Histogram;
use tidings_delivery::{PubendId, PublisherId, Recovered, StoreAction, StoreInput, Tick, TickRange};
use tidings_store as store;
use tidings_store::{Completion, OpKind, Options, ReadItem, Store, StoreError, Token};
use tokio::sync::mpsc;
use tracing::{error, warn};

use super::{Command, GuaranteedError};

use super::assigned::Assigned;

/// What opening the log found, in the core's terms.
pub(crate) struct Opened {
    pub(crate) store: Arc<Store>,
    pub(crate) pubends: Vec<(PubendId, Recovered)>,
    pub(crate) assigned: Assigned,
}

/// Hands the writer thread's completions to the driver and times its syncs.
struct Sink {
    tx: mpsc::UnboundedSender<Command>,
    fsync_seconds: Histogram,
}

impl store::CompletionSink for Sink {
    fn complete(&mut self, group: Vec<Completion>) {
        let _ = self.tx.send(Command::Completed(group));
    }

    fn synced(&mut self, took: Duration) {
        self.fsync_seconds.observe(took.as_secs_f64());
    }
}

/// Opens the log in `dir` on `fs`; completions are sent to the driver as
/// [`Command::Completed`], and each sync's time goes to `fsync_seconds`.
pub(crate) fn open(
    dir: &Path,
    (options, fs): (Options, Arc<dyn store::Fs>),
    tx: mpsc::UnboundedSender<Command>,
    fsync_seconds: Histogram,
) -> Result<Opened, GuaranteedError> {
    let sink = Sink { tx, fsync_seconds };
    let fail = |source| GuaranteedError::Store { dir: dir.display().to_string(), source };
    let (store, recovered) = Store::open_with(fs, dir, options, sink).map_err(fail)?;
    let mut pubends = Vec::new();
    let mut assigned = Assigned::default();
    for (id, log) in recovered.pubends {
        if !log.lost.is_empty() {
            error!(pubend = id.0, lost = ?log.lost, "the pubend log lost ticks to damage; subscribers get gap notices for them");
        }
        let (logged, damaged) = logged_ticks(&store, id, &log).map_err(fail)?;
        let mut publishers = BTreeMap::new();
        for ((publisher, seq), tick) in &log.dedup {
            let highest = publishers.entry(PublisherId(publisher.0)).or_insert(seq.0);
            *highest = (*highest).max(seq.0);
            assigned.insert(PubendId(id.0), (PublisherId(publisher.0), seq.0), Tick(tick.0));
        }
        let lost =
            log.lost.iter().map(|r| TickRange { from: Tick(r.first.0), to: Tick(r.last.0) }).chain(damaged).collect();
        let core = Recovered {
            lease: Tick(log.lease.0),
            release: Tick(log.released.0),
            logged,
            publishers: publishers.into_iter().collect(),
            lost,
        };
        pubends.push((PubendId(id.0), core));
    }
    Ok(Opened { store: Arc::new(store), pubends, assigned })
}

/// The ticks of the records still in a pubend's log (read once at start), and the ranges that
/// read found damaged (they join the recovery's lost ranges).
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
pub(crate) fn submit(store: &Store, token: Token, action: &StoreAction) -> Result<(), StoreError> {
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
        StoreAction::ReadRange { .. } => Ok(()),
    }
}

/// Reads a range on tokio's blocking pool; the records come back as [`Command::ReadDone`].
/// Ranges the store found damaged come back as `lost`: the core turns them into L (gap notices
/// to the subscribers owed them) rather than asking again forever. A failed read (an I/O error,
/// not damage) returns nothing and the core asks again later.
pub(crate) fn read(store: Arc<Store>, pubend: PubendId, range: TickRange, tx: mpsc::UnboundedSender<Command>) {
    tokio::task::spawn_blocking(move || {
        let wanted = store::TickRange { first: store::Tick(range.from.0), last: store::Tick(range.to.0) };
        let (records, lost) = match store.read(store::PubendId(pubend.0), wanted, usize::MAX) {
            Ok(items) => split(items),
            Err(error) => {
                warn!(%error, pubend = pubend.0, "reading the pubend log failed");
                (Vec::new(), Vec::new())
            }
        };
        if !lost.is_empty() {
            error!(
                pubend = pubend.0,
                ?lost,
                "records of the pubend log are damaged; subscribers get gap notices for them"
            );
        }
        let _ = tx.send(Command::ReadDone { pubend, range, records, lost });
    });
}

/// A read's records, and the tick ranges it found damaged, in the core's terms.
fn split(items: Vec<ReadItem>) -> (Vec<(Tick, Bytes)>, Vec<TickRange>) {
    let mut records = Vec::new();
    let mut lost = Vec::new();
    for item in items {
        match item {
            ReadItem::Data(record) => records.push((Tick(record.tick.0), record.payload)),
            ReadItem::Lost(r) => lost.push(TickRange { from: Tick(r.first.0), to: Tick(r.last.0) }),
        }
    }
    (records, lost)
}

/// Turns one group of completions into core inputs, in order: consecutive successful appends of
/// a pubend become one `AppendDone` (it covers every earlier append), and a failed append is
/// reported before any later success of its pubend. Returns the inputs and the number of
/// appends in the group.
pub(crate) fn inputs(group: &[Completion]) -> (Vec<StoreInput>, usize) {
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
                static HUSH: crate::hush::Hush = crate::hush::Hush::new();
                if let Some(held) = HUSH.pass() {
                    warn!(%error, pubend = pubend.0, tick = tick.0, "a guaranteed publish could not be logged (and {held} more since the last warning)");
                }
                if let Some(synced_up_to) = synced.remove(&pubend) {
                    out.push(StoreInput::AppendDone { pubend, synced_up_to });
                }
                out.push(StoreInput::AppendFailed { pubend, tick });
            }
            (OpKind::Lease, Ok(())) => out.push(StoreInput::LeaseDone { pubend, lease: tick }),
            (OpKind::Lease | OpKind::Release, Err(error)) => {
                static HUSH: crate::hush::Hush = crate::hush::Hush::new();
                if let Some(held) = HUSH.pass() {
                    error!(%error, pubend = pubend.0, kind = ?completion.kind, "the pubend log refused a write (and {held} more since the last report)");
                }
                // A failed release is retried by the next one (the prefix only grows); a failed
                // lease must be asked for again.
                if completion.kind == OpKind::Lease {
                    out.push(StoreInput::LeaseFailed { pubend });
                }
            }
            (OpKind::Release, Ok(())) => {}
        }
    }
    out.extend(synced.into_iter().map(|(pubend, synced_up_to)| StoreInput::AppendDone { pubend, synced_up_to }));
    (out, appends)
}

/// The average bytes of the `records` records found in the log under `dir` (its segment files'
/// size over their count; 0 with none): what retention counts each of them as.
pub(crate) fn average_record_bytes(dir: &std::path::Path, records: usize) -> u64 {
    if records == 0 {
        return 0;
    }
    let bytes: u64 = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|e| e == "log"))
        .filter_map(|entry| entry.metadata().ok())
        .map(|metadata| metadata.len())
        .sum();
    bytes / records as u64
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
