//! Helpers shared by the store's integration tests.
#![allow(dead_code, unreachable_pub, clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tidings_store::{
    Completion, Fs, Options, PubendId, PublisherId, PublisherSeq, ReadItem, Record, Recovered, Store, StoreError, Tick,
    TickRange, Token,
};

/// A store whose completions land in a channel.
pub struct Harness {
    pub store: Store,
    pub recovered: Recovered,
    pub done: Receiver<Completion>,
}

pub fn open(fs: Arc<dyn Fs>, dir: &Path, options: Options) -> Result<Harness, StoreError> {
    let (tx, done) = channel();
    let sink = move |group: Vec<Completion>| {
        for completion in group {
            let _ = tx.send(completion);
        }
    };
    let (store, recovered) = Store::open_with(fs, dir, options, sink)?;
    Ok(Harness { store, recovered, done })
}

pub fn record(pubend: u64, tick: u64, payload: &[u8]) -> Record {
    Record {
        pubend: PubendId(pubend),
        tick: Tick(tick),
        publisher: PublisherId(pubend * 1000 + 1),
        seq: PublisherSeq(tick),
        payload: Bytes::copy_from_slice(payload),
    }
}

/// A payload that names its record, so a read-back can be checked byte for byte.
pub fn payload(pubend: u64, tick: u64, len: usize) -> Vec<u8> {
    let mut bytes = format!("p{pubend}t{tick}:").into_bytes();
    let fill = (tick as u8).wrapping_mul(31).wrapping_add(pubend as u8);
    bytes.resize(len.max(bytes.len()), fill);
    bytes
}

impl Harness {
    /// Waits for `n` completions.
    pub fn wait(&self, n: usize) -> Vec<Completion> {
        (0..n).map(|_| self.done.recv_timeout(Duration::from_secs(20)).expect("a completion in time")).collect()
    }

    /// Appends records and waits for all their completions.
    pub fn append_all(&self, records: &[Record]) -> Vec<Completion> {
        for (index, record) in records.iter().enumerate() {
            self.store.append(Token(index as u64), record.clone()).expect("submitted");
        }
        self.wait(records.len())
    }

    /// Appends records in groups of at most `group`, waiting for each group.
    pub fn append_in_groups(&self, records: &[Record], group: usize) -> Vec<Completion> {
        records.chunks(group).flat_map(|chunk| self.append_all(chunk)).collect()
    }

    pub fn lease(&self, pubend: u64, tick: u64) -> Completion {
        self.store.raise_lease(Token(0), PubendId(pubend), Tick(tick)).expect("submitted");
        self.wait(1).remove(0)
    }

    pub fn release(&self, pubend: u64, tick: u64) -> Completion {
        self.store.release(Token(0), PubendId(pubend), Tick(tick)).expect("submitted");
        self.wait(1).remove(0)
    }

    /// Every item of the pubend from tick 0 up.
    pub fn read_all(&self, pubend: u64) -> Vec<ReadItem> {
        let range = TickRange { first: Tick(0), last: Tick(u64::MAX) };
        self.store.read(PubendId(pubend), range, usize::MAX).expect("read")
    }

    /// The data records of the pubend, panicking on a lost range.
    pub fn records(&self, pubend: u64) -> Vec<Record> {
        self.read_all(pubend)
            .into_iter()
            .map(|item| match item {
                ReadItem::Data(record) => record,
                ReadItem::Lost(range) => panic!("unexpected lost range {range:?}"),
            })
            .collect()
    }
}
