//! [`DropUnsyncedFs`]: the real file system, except that writes reach a file only when it is
//! synced. A process killed with SIGKILL then loses exactly what a power cut would lose (every
//! byte written since the last `fdatasync`), which a kill on the plain file system never shows:
//! the kernel keeps unsynced writes of a dead process. This lets fault tests check with real
//! broker processes that nothing acknowledged depended on an unsynced write. Slower (every
//! write is held twice) and for fault tests only; the broker turns it on with
//! `[storage] fault_drop_unsynced`.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::fs::{DirLock, Fs, LogFile, StdFs};

/// The real file system with unsynced writes kept in memory (see the module).
#[derive(Clone, Copy, Debug, Default)]
pub struct DropUnsyncedFs;

/// A file whose writes wait in memory, in order, until [`LogFile::sync_data`].
#[derive(Debug)]
struct HeldFile {
    file: Arc<dyn LogFile>,
    pending: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl HeldFile {
    fn pending(&self) -> MutexGuard<'_, Vec<(u64, Vec<u8>)>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl LogFile for HeldFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.pending().push((offset, buf.to_vec()));
        Ok(())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let pending = self.pending();
        let end = offset + buf.len() as u64;
        let on_disk = self.file.size()?;
        let held_end = pending.iter().map(|(at, bytes)| at + bytes.len() as u64).max().unwrap_or(0);
        if end > on_disk.max(held_end) {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        // What the file has, then every held write over it in the order it was made.
        let from_disk = on_disk.saturating_sub(offset).min(buf.len() as u64) as usize;
        self.file.read_exact_at(&mut buf[..from_disk], offset)?;
        buf[from_disk..].fill(0);
        for (at, bytes) in pending.iter() {
            let (lo, hi) = ((*at).max(offset), (at + bytes.len() as u64).min(end));
            if lo < hi {
                let dst = (lo - offset) as usize..(hi - offset) as usize;
                buf[dst].copy_from_slice(&bytes[(lo - at) as usize..(hi - at) as usize]);
            }
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut pending = self.pending();
        for (at, bytes) in pending.iter() {
            self.file.write_all_at(bytes, *at)?;
        }
        self.file.sync_data()?;
        pending.clear();
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        let held_end = self.pending().iter().map(|(at, bytes)| at + bytes.len() as u64).max().unwrap_or(0);
        Ok(self.file.size()?.max(held_end))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut pending = self.pending();
        pending.retain_mut(|(at, bytes)| {
            bytes.truncate(len.saturating_sub(*at) as usize);
            !bytes.is_empty()
        });
        self.file.set_len(len)
    }
}

impl Fs for DropUnsyncedFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        StdFs.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        StdFs.list(dir)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        Ok(Arc::new(HeldFile { file: StdFs.open(path)?, pending: Mutex::default() }))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        StdFs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFs.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdFs.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        StdFs.lock(path)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_write_reaches_the_file_only_when_synced_and_reads_see_it_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        let held = DropUnsyncedFs.open(&path).unwrap();
        held.write_all_at(b"hello", 0).unwrap();
        held.sync_data().unwrap();
        held.write_all_at(b"world!", 5).unwrap();
        held.write_all_at(b"W", 5).unwrap();
        let mut buf = [0; 11];
        held.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"helloWorld!");
        assert_eq!(held.size().unwrap(), 11);
        // The process dies here: only the synced bytes are in the file.
        drop(held);
        assert_eq!(std::fs::read(&path).unwrap(), b"hello");
        let again = DropUnsyncedFs.open(&path).unwrap();
        again.write_all_at(b" you", 5).unwrap();
        again.set_len(7).unwrap();
        again.sync_data().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello y");
        let mut past = [0; 8];
        assert!(again.read_exact_at(&mut past, 0).is_err(), "a read past the end fails");
    }
}
