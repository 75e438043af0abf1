//! An in-memory [`Fs`] for fault tests and the simulator. It remembers which bytes were synced:
//! [`MemFs::power_loss`] keeps the synced image plus an in-order prefix of the unsynced writes,
//! the last of them torn at a random byte, as a disk cache losing power would. A capacity turns
//! writes past it into `ENOSPC` (the part that fits is written first, as a real short write).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::fs::{DirLock, Fs, LogFile};

/// The in-memory file system. Clones share the same files.
#[derive(Clone, Debug, Default)]
pub struct MemFs {
    state: Arc<Mutex<MemState>>,
    space: Arc<Mutex<Space>>,
}

#[derive(Debug, Default)]
struct MemState {
    files: BTreeMap<PathBuf, Arc<MemFile>>,
    locks: BTreeSet<PathBuf>,
}

#[derive(Debug, Default)]
struct Space {
    capacity: Option<u64>,
    used: u64,
    /// Between a power loss and [`MemFs::restart`] the machine is off: writes and syncs fail.
    off: bool,
    /// Syncs fail with EIO (a dying disk) while set.
    failing_syncs: bool,
}

#[derive(Debug)]
enum Change {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Contents {
    synced: Vec<u8>,
    current: Vec<u8>,
    unsynced: Vec<Change>,
}

#[derive(Debug)]
struct MemFile {
    contents: Mutex<Contents>,
    space: Arc<Mutex<Space>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn powered_off() -> io::Error {
    io::Error::other("the simulated machine lost power")
}

fn apply(image: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write { offset, bytes } => {
            let start = *offset as usize;
            if image.len() < start + bytes.len() {
                image.resize(start + bytes.len(), 0);
            }
            image[start..start + bytes.len()].copy_from_slice(bytes);
        }
        Change::SetLen(len) => image.resize(*len as usize, 0),
    }
}

impl MemFs {
    /// A new, empty file system with unlimited space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Limits the bytes all files may hold together (`None`: unlimited).
    pub fn set_capacity(&self, capacity: Option<u64>) {
        lock(&self.space).capacity = capacity;
    }

    /// Simulates a power loss: every file keeps its synced bytes plus a prefix of its unsynced
    /// changes in order, the last kept write torn at a random length (chosen by `seed`). From then
    /// on writes and syncs fail (the machine is off) until [`MemFs::restart`], so a store still
    /// running cannot write after the fact; drop it, restart, and open a new one.
    pub fn power_loss(&self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        lock(&self.space).off = true;
        let state = lock(&self.state);
        let mut used = 0;
        for file in state.files.values() {
            let mut contents = lock(&file.contents);
            let mut image = std::mem::take(&mut contents.synced);
            let changes = std::mem::take(&mut contents.unsynced);
            let kept = rng.usize(0..=changes.len());
            for (index, change) in changes.iter().take(kept).enumerate() {
                match change {
                    Change::Write { offset, bytes } if index + 1 == kept => {
                        let torn = rng.usize(0..=bytes.len());
                        let change = Change::Write { offset: *offset, bytes: bytes[..torn].to_vec() };
                        apply(&mut image, &change);
                    }
                    change => apply(&mut image, change),
                }
            }
            used += image.len() as u64;
            contents.current = image.clone();
            contents.synced = image;
        }
        lock(&self.space).used = used;
    }

    /// Makes every sync fail with an I/O error (or work again).
    pub fn fail_syncs(&self, failing: bool) {
        lock(&self.space).failing_syncs = failing;
    }

    /// Powers the machine back on after [`MemFs::power_loss`].
    pub fn restart(&self) {
        lock(&self.space).off = false;
    }

    /// The current (not necessarily synced) bytes of `path`, for tests that damage files.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = lock(&self.state);
        let file = state.files.get(path)?;
        let contents = lock(&file.contents);
        Some(contents.current.clone())
    }

    /// The names of the files in `dir`, sorted.
    pub fn list_names(&self, dir: &Path) -> Vec<String> {
        self.list(dir).unwrap_or_default()
    }

    /// Opens (creating) `path`; a shortcut for tests.
    pub fn open_file(&self, path: &str) -> Arc<dyn LogFile> {
        let opened = Fs::open(self, Path::new(path));
        opened.unwrap_or_else(|_| unreachable!("MemFs::open never fails"))
    }

    /// Writes `bytes` at `offset` of `path` and marks them synced (what a crash left behind).
    pub fn overwrite(&self, path: &Path, offset: u64, bytes: &[u8]) {
        let state = lock(&self.state);
        if let Some(file) = state.files.get(path) {
            let mut contents = lock(&file.contents);
            let change = Change::Write { offset, bytes: bytes.to_vec() };
            apply(&mut contents.current, &change);
            apply(&mut contents.synced, &change);
        }
    }

    /// Overwrites bytes of `path` in place and marks them synced (bit rot on the platter).
    pub fn corrupt(&self, path: &Path, offset: usize, xor: u8) {
        let state = lock(&self.state);
        if let Some(file) = state.files.get(path) {
            let mut contents = lock(&file.contents);
            if let Some(byte) = contents.current.get_mut(offset) {
                *byte ^= xor;
            }
            if let Some(byte) = contents.synced.get_mut(offset) {
                *byte ^= xor;
            }
        }
    }
}

impl LogFile for MemFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut contents = lock(&self.contents);
        let end = offset + buf.len() as u64;
        let growth = end.saturating_sub(contents.current.len() as u64);
        let mut space = lock(&self.space);
        if space.off {
            return Err(powered_off());
        }
        let room = space.capacity.map_or(u64::MAX, |cap| cap.saturating_sub(space.used));
        let fits = if growth > room { buf.len() - (growth - room) as usize } else { buf.len() };
        let change = Change::Write { offset, bytes: buf[..fits].to_vec() };
        let before = contents.current.len() as u64;
        apply(&mut contents.current, &change);
        space.used += contents.current.len() as u64 - before;
        contents.unsynced.push(change);
        if fits < buf.len() {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        Ok(())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let contents = lock(&self.contents);
        let start = offset as usize;
        let bytes = contents
            .current
            .get(start..start + buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut contents = lock(&self.contents);
        let space = lock(&self.space);
        if space.off {
            return Err(powered_off());
        }
        if space.failing_syncs {
            return Err(io::Error::other("injected fdatasync failure"));
        }
        drop(space);
        contents.synced = contents.current.clone();
        contents.unsynced.clear();
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(lock(&self.contents).current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut contents = lock(&self.contents);
        let mut space = lock(&self.space);
        if space.off {
            return Err(powered_off());
        }
        let before = contents.current.len() as u64;
        let change = Change::SetLen(len);
        apply(&mut contents.current, &change);
        contents.unsynced.push(change);
        space.used = (space.used + len).saturating_sub(before);
        Ok(())
    }
}

#[derive(Debug)]
struct MemLock {
    state: Arc<Mutex<MemState>>,
    path: PathBuf,
}

impl DirLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        lock(&self.state).locks.remove(&self.path);
    }
}

impl Fs for MemFs {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = lock(&self.state);
        let names = state
            .files
            .keys()
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name()?.to_str().map(str::to_owned))
            .collect();
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        let mut state = lock(&self.state);
        let file = state.files.entry(path.to_path_buf()).or_insert_with(|| {
            Arc::new(MemFile { contents: Mutex::new(Contents::default()), space: Arc::clone(&self.space) })
        });
        Ok(Arc::clone(file) as Arc<dyn LogFile>)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let file = lock(&self.state).files.remove(path).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let len = lock(&file.contents).current.len() as u64;
        let mut space = lock(&self.space);
        space.used = space.used.saturating_sub(len);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        let file = state.files.remove(from).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        state.files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        if !lock(&self.state).locks.insert(path.to_path_buf()) {
            return Err(io::Error::from(io::ErrorKind::WouldBlock));
        }
        Ok(Box::new(MemLock { state: Arc::clone(&self.state), path: path.to_path_buf() }))
    }
}
