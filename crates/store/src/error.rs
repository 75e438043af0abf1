//! Errors of the store. Every variant is `Clone` because one failed write fails a whole group
//! and each member's completion carries the error.

use std::io;
use std::path::PathBuf;

/// What went wrong in the store.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// The disk (or the injected capacity) is full; the operation was not logged. Nothing acknowledged
    /// earlier is affected, reads continue, and a later append may succeed once release frees space.
    #[error("no space left on the device while {op}; the operation was not logged")]
    NoSpace {
        /// What the store was doing.
        op: &'static str,
    },
    /// Another I/O error.
    #[error("I/O error while {op}: {kind}: {message}")]
    Io {
        /// What the store was doing.
        op: &'static str,
        /// The error kind.
        kind: io::ErrorKind,
        /// The error text.
        message: String,
    },
    /// A sync failed earlier. After a failed fsync the kernel may have dropped dirty pages, so
    /// nothing written since the last good sync can be trusted; the store refuses all further
    /// writes until it is reopened (which re-reads and checks the log).
    #[error("the store failed a sync earlier and accepts no more writes; reopen it")]
    Poisoned,
    /// The directory is already open by another store (this or another process).
    #[error("{path} is locked by another store (another broker using the same data directory?)")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A record's checksum or framing is wrong: the bytes on disk are not what was written.
    #[error("corrupt record in segment {segment} at offset {offset}")]
    Corrupt {
        /// The segment number.
        segment: u64,
        /// The byte offset of the record in the segment.
        offset: u64,
    },
    /// An append's tick is not above the pubend's previous tick (ticks are assigned in log order).
    #[error("tick {tick} is not above the pubend's last tick {last}")]
    TickNotIncreasing {
        /// The tick submitted.
        tick: u64,
        /// The pubend's last tick.
        last: u64,
    },
    /// A record is larger than the format allows.
    #[error("record of {len} bytes is larger than the limit of {limit}")]
    TooLarge {
        /// The encoded size.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
}

impl StoreError {
    /// Classifies an I/O error; ENOSPC (and EDQUOT) become [`StoreError::NoSpace`].
    pub fn io(op: &'static str, error: &io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => StoreError::NoSpace { op },
            kind => StoreError::Io { op, kind, message: error.to_string() },
        }
    }
}
