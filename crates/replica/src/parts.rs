//! Snapshot parts read back from a replica's journal (`journal`) and put together for the
//! write that names them: the shared parts this build writes (a first part, then next ones,
//! only the snapshot's bytes) and the `PART` records of journals written before (a header of
//! index, term and offset before the bytes); and the snapshots saved apart, in the snapshots'
//! store ([`Saved`]).

use std::collections::BTreeMap;

use tidings_store::ReadItem;

use crate::command::{DecodeError, Reader};
use crate::journal::{PartsRef, FIRST_PART, NEXT_PART};

/// The (index, term) the parts read so far name, `None` for parts that leave it to their write.
type Named = Option<(u64, u64)>;

/// Snapshot parts read back and not yet claimed by their write.
#[derive(Default)]
pub(crate) struct Parts {
    /// (index, term, bytes so far) of the snapshot whose parts are being read; index and term
    /// `None` for parts that do not name them (their write does).
    current: Option<(Named, Vec<u8>)>,
}

impl Parts {
    /// Takes one part record of a snapshot's bytes: the first starts a snapshot, a next one
    /// continues the current one (one without a first before it is dropped: its write will
    /// find it missing, damage).
    pub(crate) fn piece(&mut self, first: bool, bytes: &[u8]) {
        self.current = match self.current.take() {
            _ if first => Some((None, bytes.to_vec())),
            Some((None, mut data)) => {
                data.extend_from_slice(bytes);
                Some((None, data))
            }
            _ => None,
        };
    }

    /// Takes one part record (its bytes after the kind byte): offset 0 starts a snapshot, any
    /// other must continue the current one exactly, or the parts read so far are dropped (a
    /// write naming them will then find them missing: damage).
    pub(crate) fn take(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        let mut r = Reader(bytes);
        let (index, term, offset) = (r.word()?, r.word()?, r.word()?);
        let current = self.current.take();
        self.current = match current {
            _ if offset == 0 => Some((Some((index, term)), r.0.to_vec())),
            Some((Some((i, t)), mut data)) if (i, t, data.len() as u64) == (index, term, offset) => {
                data.extend_from_slice(r.0);
                Some((Some((i, t)), data))
            }
            _ => None,
        };
        Ok(())
    }

    /// The snapshot a write names, if the parts read are exactly it.
    pub(crate) fn claim(&mut self, (index, term, len, crc): PartsRef) -> Result<(u64, u64, bytes::Bytes), String> {
        match self.current.take() {
            Some((named, data))
                if named.is_none_or(|named| named == (index, term))
                    && data.len() as u64 == len
                    && crc32fast::hash(&data) == crc =>
            {
                Ok((index, term, data.into()))
            }
            _ => Err(format!("the parts of the snapshot at index {index} are missing or damaged")),
        }
    }
}

/// The snapshots a replica saved apart ([`crate::Journal::save`]), read back from the
/// snapshots' store: by index, the parts of the last one saved at that index, in order.
#[derive(Default)]
pub(crate) struct Saved {
    by_index: BTreeMap<u64, Vec<bytes::Bytes>>,
}

impl Saved {
    /// Puts the store's records back together: a first part starts a snapshot, a next part
    /// naming the same index continues it; anything else (a lost range, a part out of place)
    /// leaves the snapshot in progress short, so its checkpoint finds it damaged. Returns the
    /// last tick read too (lost ones included).
    pub(crate) fn read(items: Vec<ReadItem>) -> (u64, Saved) {
        let mut saved = Saved::default();
        let (mut last, mut open) = (0, None);
        for item in items {
            match item {
                ReadItem::Data(record) => {
                    last = record.tick.0;
                    let index = record.seq.0;
                    open = match record.publisher.0 {
                        FIRST_PART => {
                            saved.by_index.insert(index, vec![record.payload]);
                            Some(index)
                        }
                        NEXT_PART if open == Some(index) => {
                            saved.by_index.entry(index).or_default().push(record.payload);
                            open
                        }
                        _ => None,
                    };
                }
                ReadItem::Lost(range) => {
                    last = last.max(range.last.0);
                    open = None;
                }
            }
        }
        (last, saved)
    }

    /// The snapshot a checkpoint names, if the parts saved at its index are exactly it.
    pub(crate) fn claim(&mut self, (index, term, len, crc): PartsRef) -> Result<(u64, u64, bytes::Bytes), String> {
        let parts = self.by_index.remove(&index).unwrap_or_default();
        let data: bytes::Bytes = match parts.len() {
            1 => parts.into_iter().next().unwrap_or_default(),
            _ => parts.concat().into(),
        };
        if data.len() as u64 == len && crc32fast::hash(&data) == crc {
            Ok((index, term, data))
        } else {
            Err(format!("the snapshot at index {index} saved apart is missing or damaged"))
        }
    }
}
