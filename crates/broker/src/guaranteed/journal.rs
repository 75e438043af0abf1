//! The broker's side of the boundary between the delivery core and `tidings-store`: opening the
//! log with a sink that hands the writer thread's completions to the driver, and reads on
//! tokio's blocking pool. The conversions themselves are `tidings_node::journal`, shared with
//! the simulator.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use tidings_delivery::{PubendId, Recovered, StoreInput, TickRange};
use tidings_store as store;
use tidings_store::{Completion, Options, Store};
use tokio::sync::mpsc;

pub(crate) use tidings_node::journal::submit;

use super::{Command, GuaranteedError};

/// What opening the log found, in the core's terms.
pub(crate) struct Opened {
    pub(crate) store: Arc<Store>,
    pub(crate) pubends: Vec<(PubendId, Recovered)>,
    /// Every logged publish still deduplicated (what a retry is answered from).
    pub(crate) dedup: Vec<(PubendId, tidings_node::publishes::Key, tidings_delivery::Tick)>,
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
    let opened = tidings_node::journal::opened(&store, recovered).map_err(fail)?;
    Ok(Opened { store: Arc::new(store), pubends: opened.pubends, dedup: opened.dedup })
}

/// Reads a range on tokio's blocking pool; the records come back as [`Command::ReadDone`]
/// (see `tidings_node::journal::read`).
pub(crate) fn read(store: Arc<Store>, pubend: PubendId, range: TickRange, tx: mpsc::UnboundedSender<Command>) {
    tokio::task::spawn_blocking(move || {
        if let StoreInput::ReadDone { pubend, range, records, lost } =
            tidings_node::journal::read(&store, pubend, range)
        {
            let _ = tx.send(Command::ReadDone { pubend, range, records, lost });
        }
    });
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
