//! Space held back for releases. On a full disk a release is the only way out, but a release is
//! itself a record that needs space, and its segments may only be deleted once it is durable. So
//! the store keeps a `RESERVE` file of zeros; a release that hits `ENOSPC` deletes it and retries,
//! and the reserve is rebuilt once segments have been deleted.

use std::path::PathBuf;
use std::sync::Arc;

use crate::fs::Fs;

/// The reserve file.
#[derive(Debug)]
pub(crate) struct Reserve {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) path: PathBuf,
    pub(crate) bytes: u64,
    pub(crate) present: bool,
}

impl Reserve {
    /// Creates the reserve if it is missing; on failure (a full disk) it stays missing.
    pub(crate) fn ensure(&mut self) {
        if self.present || self.bytes == 0 {
            return;
        }
        let zeros = vec![0; self.bytes as usize];
        let made = self.fs.open(&self.path).and_then(|file| {
            file.write_all_at(&zeros, 0)?;
            file.sync_data()
        });
        match made {
            Ok(()) => self.present = true,
            Err(error) => {
                tracing::warn!(%error, "no room for the release reserve; a full disk may need help");
                let _ = self.fs.remove(&self.path);
            }
        }
    }

    /// Deletes the reserve to make room for a release; false if there was none.
    pub(crate) fn free(&mut self) -> bool {
        if !self.present {
            return false;
        }
        self.present = false;
        tracing::warn!("disk full: using the release reserve");
        self.fs.remove(&self.path).is_ok()
    }
}
