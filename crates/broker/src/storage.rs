//! The broker's data directory: what must survive a restart, kept by one process at a time.
//!
//! Today it holds the incarnation counter (`incarnation`, decimal text): read, advanced and
//! written back durably on every start. A new life's incarnation is the larger of the previous
//! one plus one and the wall clock in microseconds since the Unix epoch: the counter keeps it
//! growing on a directory that survives, whatever the clock says; the clock keeps it growing when
//! the directory is lost (an empty restart), where a counter alone would start again at 1 and
//! peers would take the new life for the old one, trusting acks and curiosity it no longer holds
//! (issue 38, failure A). Only a lost directory *and* a clock stepped back past the previous
//! start can repeat a number. A `lock` file, held with an
//! exclusive advisory lock (`flock`) for the life of the process, keeps a second broker off the
//! directory: two processes sharing one counter (and, later, one pubend log) would corrupt both.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

const LOCK_FILE: &str = "lock";
const INCARNATION_FILE: &str = "incarnation";

/// Why the data directory cannot be used.
#[derive(Debug, Error)]
pub enum StorageError {
    /// Another process holds the directory's lock.
    #[error("data directory {dir} is in use by another broker (its lock file {dir}/lock is held); give each broker its own --data directory")]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// A file operation failed.
    #[error("data directory {dir}: cannot {what}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The incarnation file holds something other than a number.
    #[error("data directory {dir}: the incarnation file holds {text:?}, not a number")]
    BadIncarnation {
        /// The directory.
        dir: PathBuf,
        /// What it holds.
        text: String,
    },
}

/// An open, locked data directory. The lock is released when this is dropped (or the process
/// ends, however it ends).
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    incarnation: u64,
    _lock: File,
}

impl DataDir {
    /// Creates `path` if missing, takes its lock, and advances the incarnation counter.
    pub fn open(path: &Path) -> Result<DataDir, StorageError> {
        let io = |what: &'static str| move |source| StorageError::Io { dir: path.to_path_buf(), what, source };
        std::fs::create_dir_all(path).map_err(io("create it"))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.join(LOCK_FILE))
            .map_err(io("open its lock file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(StorageError::Locked { dir: path.to_path_buf() }),
            Err(TryLockError::Error(e)) => return Err(io("lock it")(e)),
        }
        let incarnation = next_incarnation(path)?;
        Ok(DataDir { path: path.to_path_buf(), incarnation, _lock: lock })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This life's incarnation: larger than the previous start's on this directory, and than any
    /// earlier life's while the wall clock moves forward.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
}

/// Reads the counter, advances it (see the module doc) and writes it back so that it survives a
/// crash at any point: write a temporary file, sync it, rename it over the old one, sync the
/// directory.
fn next_incarnation(dir: &Path) -> Result<u64, StorageError> {
    let io = |what: &'static str| move |source| StorageError::Io { dir: dir.to_path_buf(), what, source };
    let previous = match std::fs::read_to_string(dir.join(INCARNATION_FILE)) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .map_err(|_| StorageError::BadIncarnation { dir: dir.to_path_buf(), text: text.clone() })?,
        Err(e) if e.kind() == ErrorKind::NotFound => 0,
        Err(e) => return Err(io("read the incarnation file")(e)),
    };
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX));
    let next = previous.saturating_add(1).max(clock);
    let temp = dir.join(format!("{INCARNATION_FILE}.tmp"));
    let mut file = File::create(&temp).map_err(io("create the incarnation file"))?;
    file.write_all(format!("{next}\n").as_bytes()).map_err(io("write the incarnation file"))?;
    file.sync_all().map_err(io("sync the incarnation file"))?;
    std::fs::rename(&temp, dir.join(INCARNATION_FILE)).map_err(io("replace the incarnation file"))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io("sync the directory"))?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_incarnation_grows_on_every_open_and_a_second_open_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("b1");
        let first = DataDir::open(&dir).unwrap();
        let one = first.incarnation();
        assert!(matches!(DataDir::open(&dir), Err(StorageError::Locked { .. })));
        drop(first);
        let two = DataDir::open(&dir).unwrap().incarnation();
        assert!(two > one, "{two} after {one}");
        assert_eq!(std::fs::read_to_string(dir.join("incarnation")).unwrap(), format!("{two}\n"));
    }

    #[test]
    fn a_counter_ahead_of_the_clock_still_grows_by_one() {
        let root = tempfile::tempdir().unwrap();
        let ahead = u64::MAX / 2;
        std::fs::write(root.path().join("incarnation"), format!("{ahead}\n")).unwrap();
        assert_eq!(DataDir::open(root.path()).unwrap().incarnation(), ahead + 1);
    }

    #[test]
    fn a_life_on_an_emptied_directory_announces_more_than_the_life_before_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("b1");
        let before = DataDir::open(&dir).unwrap().incarnation();
        std::fs::remove_dir_all(&dir).unwrap();
        let after = DataDir::open(&dir).unwrap().incarnation();
        assert!(after > before, "{after} after {before} on an emptied directory");
    }

    #[test]
    fn a_corrupt_counter_is_refused_rather_than_reset() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("incarnation"), "x").unwrap();
        assert!(matches!(DataDir::open(root.path()), Err(StorageError::BadIncarnation { .. })));
    }
}
