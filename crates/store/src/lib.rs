//! The pubend log on disk: where a guaranteed publish is kept before it is acknowledged.
//!
//! Map:
//! - [`Store`] (`store.rs`): open a directory (locked against a second broker), recover, submit
//!   appends / lease raises / releases / voids (a pubend's log emptied, in order with its
//!   appends), read ranges. Completions come back through a
//!   [`CompletionSink`] from a dedicated writer thread, so async brokers and synchronous
//!   callers both consume them; no async runtime here. [`Store::open_stepped`] opens it without
//!   the thread: [`Store::step`] commits one group on the caller's thread, when a deterministic
//!   simulator says.
//! - `writer.rs`: group commit. Everything queued while the previous group was being written
//!   and synced becomes the next group: one positioned write, one `fdatasync`.
//! - `codec.rs`: the record format, a CRC-32 per record. `recovery.rs`: open-time scan, torn-tail
//!   cut, damage reported as lost ranges. `catalog.rs`: the in-memory index.
//! - `delete.rs`: released segments deleted a slice at a time, off the writer thread.
//! - [`Fs`]/[`LogFile`] (`fs.rs`): the file I/O seam; [`MemFs`] (`memfs.rs`) loses unsynced bytes
//!   on a simulated power loss and injects `ENOSPC`.
//! - `measure.rs`: the append benchmark behind `tidings bench store` and the criterion benches.
//!
//! It must not depend on the delivery core: the broker converts between the two at the boundary.
//! Start reading at `store.rs`; the format and the crash guarantees are in `docs/store.md`.

mod catalog;
mod codec;
mod delete;
mod error;
mod fs;
mod linger;
pub mod measure;
mod memfs;
mod policy;
mod queue;
mod recovery;
mod reserve;
mod stepped;
mod store;
mod types;
mod unsynced;
mod writer;

pub use catalog::PUBLISHERS_KEPT;
pub use error::StoreError;
pub use fs::{DirLock, Fs, LogFile, StdFs};
pub use memfs::MemFs;
pub use policy::{FsyncPolicy, DEFAULT_BATCH_INTERVAL};
pub use recovery::{PubendRecovery, Recovered};
pub use store::{Completion, CompletionSink, OpKind, Options, ReadItem, Store, StoreStats, WRITER_THREAD};
pub use types::{PubendId, PublisherId, PublisherSeq, Record, Tick, TickRange, Token};
pub use unsynced::DropUnsyncedFs;
