//! Deleting a released segment a slice at a time, so the file system's work for it never
//! stalls the live log's syncs.
//!
//! Unlinking a full 64 MiB segment frees all of its blocks in one file system transaction (and,
//! on a file system mounted with `discard`, trims them in one request the device serves before
//! anything else). Every `fdatasync` of the live segment issued meanwhile waited for it: on
//! ext4 on this project's test machine, syncs of 0.2 ms took 10-11 ms each time a segment went
//! during a durable subscriber's catch-up (`tidings bench catch-up`, the writer's syncs timed
//! one by one), and every live guaranteed message waited behind them. Deleted a slice at a
//! time, each slice's transaction is small: the syncs at a deletion took 3-5 ms, and the live
//! p99 during the catch-up went from 15-34 ms (median 22) to 12-38 ms (median 14) over four
//! alternated runs of each build (2026-11-28): most of what is left comes from elsewhere.
//!
//! The file is first renamed out of the log's name space (`NNN.deleting`), so a crash halfway
//! leaves no shortened segment for recovery to take as damage; the next open removes what is
//! left. RocksDB deletes large files in chunks for the same reason (`bytes_max_delete_chunk`).
//! Unlike an unlinked file, a cut one no longer serves a read that located its records before
//! the release: such a read fails, and the core, which asks for a range again after a failed
//! read, finds those ticks released (nobody needed them any more).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fs::Fs;

/// What one truncation step frees.
pub(crate) const SLICE: u64 = 4 << 20;

/// The pause after each slice: a 64 MiB segment goes in about a fifth of a second, faster than
/// a catch-up releases them.
pub(crate) const PAUSE: Duration = Duration::from_millis(10);

/// The suffix of a segment being deleted.
pub(crate) const SUFFIX: &str = ".deleting";

/// The name a segment at `path` has while it is deleted.
pub(crate) fn deleting_path(path: &Path) -> PathBuf {
    path.with_extension(&SUFFIX[1..])
}

/// Deletes the released segment at `path`: small files at once, larger ones renamed, cut
/// `slice` bytes at a time (each cut synced, so each is its own file system transaction) with
/// `pause` between cuts, then removed.
pub(crate) fn remove_gradually(fs: &dyn Fs, path: &Path, slice: u64, pause: Duration) -> std::io::Result<()> {
    let file = fs.open(path)?;
    let mut len = file.size()?;
    if len <= slice {
        drop(file);
        return fs.remove(path);
    }
    let dying = deleting_path(path);
    fs.rename(path, &dying)?;
    while len > slice {
        len -= slice;
        file.set_len(len)?;
        file.sync_data()?;
        std::thread::sleep(pause);
    }
    drop(file);
    fs.remove(&dying)
}

/// Removes what deletions cut short by a crash left in `dir`.
pub(crate) fn remove_leftovers(fs: &dyn Fs, dir: &Path, names: &[String]) {
    for name in names.iter().filter(|name| name.ends_with(SUFFIX)) {
        if let Err(error) = fs.remove(&dir.join(name)) {
            tracing::warn!(%error, name, "could not remove a half-deleted segment");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::memfs::MemFs;

    /// Writes a file of `len` bytes named `name` under `/log`.
    fn file(fs: &MemFs, name: &str, len: usize) -> PathBuf {
        let path = Path::new("/log").join(name);
        fs.open(&path).unwrap().write_all_at(&vec![1; len], 0).unwrap();
        path
    }

    #[test]
    fn a_large_segment_is_cut_slice_by_slice_under_another_name_then_removed() {
        let fs = MemFs::new();
        let dir = Path::new("/log");
        let path = file(&fs, "00000000000000000007.log", 10_000);
        file(&fs, "00000000000000000008.log", 100);
        // Watch the file from another thread while it is cut: it shrinks in steps, never under
        // its segment name.
        let watcher = {
            let fs = fs.clone();
            let dying = deleting_path(&path);
            std::thread::spawn(move || {
                let mut sizes = Vec::new();
                for _ in 0..2_000 {
                    if let Some(contents) = fs.contents(&dying) {
                        sizes.push(contents.len());
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                sizes
            })
        };
        remove_gradually(&fs, &path, 3_000, Duration::from_millis(20)).unwrap();
        assert_eq!(fs.list_names(dir), vec!["00000000000000000008.log".to_string()]);
        let mut sizes = watcher.join().unwrap();
        sizes.dedup();
        assert!(sizes.contains(&7_000) && sizes.contains(&4_000), "not cut in slices: {sizes:?}");
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "grew while cut: {sizes:?}");
    }

    #[test]
    fn a_small_segment_is_removed_at_once_and_leftovers_go_at_the_next_open() {
        let fs = MemFs::new();
        let dir = Path::new("/log");
        let path = file(&fs, "00000000000000000003.log", 100);
        remove_gradually(&fs, &path, 3_000, Duration::ZERO).unwrap();
        assert!(fs.list_names(dir).is_empty());
        file(&fs, "00000000000000000004.deleting", 10);
        file(&fs, "00000000000000000005.log", 10);
        remove_leftovers(&fs, dir, &fs.list_names(dir));
        assert_eq!(fs.list_names(dir), vec!["00000000000000000005.log".to_string()]);
    }
}
