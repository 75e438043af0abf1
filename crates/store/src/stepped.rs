//! The stepped store: the log without its writer thread, for a deterministic simulator. The
//! caller decides when a group is committed ([`Store::step`]); the commit is the writer
//! thread's own code (`GroupWriter::commit_group`), run on the caller's thread.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::error::StoreError;
use crate::fs::Fs;
use crate::recovery::Recovered;
use crate::store::{Completion, CompletionSink, Options, Store};
use crate::writer::GroupWriter;

/// A stepped store's writer (its own type only to keep `Store`'s `Debug`).
pub(crate) struct Stepped(Mutex<GroupWriter>);

impl std::fmt::Debug for Stepped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stepped")
    }
}

/// Gathers one stepped group's completions (sync times are not reported: there is no clock
/// worth reading in a simulation).
struct Collect(Vec<Completion>);

impl CompletionSink for Collect {
    fn complete(&mut self, group: Vec<Completion>) {
        self.0.extend(group);
    }
}

impl Store {
    /// Opens the log like [`Store::open_with`], but without a writer thread: nothing is written
    /// until the caller runs [`Store::step`], which commits one group on the caller's thread and
    /// returns its completions. A deterministic simulator schedules the steps on its own clock
    /// (a thread's timing is not reproducible). Released segments are deleted within the step,
    /// and `linger` is ignored (the caller chooses when a group is taken). Dropping a stepped
    /// store is a crash of its process: queued operations are lost and nothing more is synced.
    pub fn open_stepped(fs: Arc<dyn Fs>, dir: &Path, options: Options) -> Result<(Store, Recovered), StoreError> {
        let options = Options { linger: Duration::ZERO, ..options };
        let ((mut store, recovered), writer) = Self::open_parts(fs, dir, options, true)?;
        store.stepped = Some(Stepped(Mutex::new(writer)));
        Ok((store, recovered))
    }

    /// Commits everything queued as one group (the writer thread's own code path) and returns
    /// its completions in submission order; empty when nothing is queued. Only a store opened
    /// with [`Store::open_stepped`] has anything to step: on another it returns nothing.
    pub fn step(&self) -> Vec<Completion> {
        let Some(Stepped(writer)) = &self.stepped else { return Vec::new() };
        let mut writer = writer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ops = Vec::new();
        self.shared.queue.take_now(&mut ops);
        let mut sink = Collect(Vec::new());
        writer.commit_group(ops, &mut sink);
        sink.0
    }
}
