//! File I/O behind two small traits, so tests (and the simulator) can swap the disk for
//! [`crate::MemFs`], which loses unsynced bytes on a simulated power loss and runs out of space
//! on demand. [`StdFs`] is the real thing: positioned writes, `fdatasync`, and an `flock`ed
//! `LOCK` file.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One open log file. Writes are positioned; the store never relies on a file cursor.
pub trait LogFile: Send + Sync + fmt::Debug {
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Makes every byte written so far durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// The file's length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Cuts (or extends) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// A held directory lock; dropping it releases the lock. `Sync` so that a [`crate::Store`] can
/// be shared with readers on other threads.
pub trait DirLock: Send + Sync + fmt::Debug {}

/// The directory operations the store needs.
pub trait Fs: Send + Sync + fmt::Debug {
    /// Creates `dir` and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens `path` for reading and writing, creating it if missing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogFile>>;
    /// Deletes `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to` (atomically, replacing `to`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes `dir`'s entries (created and removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path`, failing with `WouldBlock` if anyone holds it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>>;
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFs;

#[derive(Debug)]
struct StdFile(File);

impl LogFile for StdFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

/// An `flock` on an open `LOCK` file: refused to any other open file description, so a second
/// broker process (or a second store in the same process) cannot share the directory. The
/// kernel drops it when the process dies, so a crash never leaves a stale lock behind.
#[derive(Debug)]
struct FlockGuard {
    _file: File,
    _path: PathBuf,
}

impl DirLock for FlockGuard {}

impl Fs for StdFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        Ok(Arc::new(StdFile(file)))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
        Ok(Box::new(FlockGuard { _file: file, _path: path.to_path_buf() }))
    }
}
