//! [`Chunks`]: an ordered map from covering key to group, held as runs of keys ("chunks")
//! behind shared pointers, so that a copy of a [`Minimized`](super::Minimized) set costs a
//! pointer per chunk and a change afterwards copies at most the one chunk it touches.
//!
//! Why (issue 46): a tree that appears gets an advertised set that starts as a copy of the
//! local interest (`router/reshape.rs`, [`super::Minimized::from_kept_of`]); at 100,000
//! subscriptions of one covering key each, copying two plain maps of 100,000 groups held the
//! router for about 90 ms in a release build. The alternatives weighed: a view of the local
//! set with an overlay of the other inputs would make every later local change a question of
//! which sets read it (and the streamed first summary walks the set by cursor); building the
//! copy in slices would leave the tree's routes provisional meanwhile; a persistent map crate
//! brings a copyleft licence and changes the cost of every set. Chunks keep the sets' own
//! layout (a `BTreeMap` per chunk) and make the copy O(keys / [`MAX_CHUNK`]) pointer copies;
//! the first change of a shared chunk copies it ([`Arc::make_mut`]), at most
//! [`MAX_CHUNK`] groups, so the copy's cost is paid a chunk at a time by the changes that
//! need it, and chunks no change touches stay shared for good.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// Keys past which a chunk is split in two: a pointer copy per this many groups for a copy,
/// and at most this many groups copied by the first change of a shared chunk.
pub(super) const MAX_CHUNK: usize = 512;

type Chunk<V> = BTreeMap<String, V>;

/// An ordered map from key to group in shared chunks. Every chunk is non-empty, is stored
/// under its first key, and holds keys below the next chunk's first key. Chunks emptied by
/// removals go; small ones are not merged (a set never holds more chunks than it held keys
/// divided by half a chunk at its largest, plus the ones removals thinned).
#[derive(Debug)]
pub(super) struct Chunks<V> {
    chunks: BTreeMap<String, Arc<Chunk<V>>>,
}

impl<V> Default for Chunks<V> {
    fn default() -> Self {
        Self { chunks: BTreeMap::new() }
    }
}

impl<V> Clone for Chunks<V> {
    /// Shares every chunk: no group is copied.
    fn clone(&self) -> Self {
        Self { chunks: self.chunks.clone() }
    }
}

/// Bounds up to and including `key`.
fn through(key: &str) -> (Bound<&str>, Bound<&str>) {
    (Bound::Unbounded, Bound::Included(key))
}

impl<V: Clone> Chunks<V> {
    /// The group under `key`.
    pub(super) fn get(&self, key: &str) -> Option<&V> {
        self.get_key_value(key).map(|(_, group)| group)
    }

    /// The stored key and group under `key`.
    pub(super) fn get_key_value(&self, key: &str) -> Option<(&String, &V)> {
        let (_, chunk) = self.chunks.range::<str, _>(through(key)).next_back()?;
        chunk.get_key_value(key)
    }

    /// The group under `key`, to change: its chunk is copied first if another map shares it.
    pub(super) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let (_, chunk) = self.chunks.range_mut::<str, _>(through(key)).next_back()?;
        if !chunk.contains_key(key) {
            return None;
        }
        Arc::make_mut(chunk).get_mut(key)
    }

    /// Sets the group under `key`, splitting its chunk if it grows past [`MAX_CHUNK`].
    pub(super) fn insert(&mut self, key: String, group: V) {
        let Some((_, chunk)) = self.chunks.range_mut::<str, _>(through(&key)).next_back() else {
            // Below every chunk: the first chunk takes it and is stored under it.
            let mut chunk = self.chunks.pop_first().map(|(_, chunk)| chunk).unwrap_or_default();
            let upper = split(Arc::make_mut(&mut chunk), key.clone(), group);
            self.chunks.insert(key, chunk);
            self.chunks.extend(upper);
            return;
        };
        let upper = split(Arc::make_mut(chunk), key, group);
        self.chunks.extend(upper);
    }

    /// Takes the group under `key` out.
    pub(super) fn remove(&mut self, key: &str) -> Option<V> {
        let (first, chunk) = self.chunks.range_mut::<str, _>(through(key)).next_back()?;
        if !chunk.contains_key(key) {
            return None;
        }
        let rekey = first.as_str() == key;
        let group = Arc::make_mut(chunk).remove(key);
        if rekey {
            // The chunk was stored under `key`: store it under its new first key, or drop it.
            if let Some(chunk) = self.chunks.remove(key) {
                if let Some(first) = chunk.keys().next().cloned() {
                    self.chunks.insert(first, chunk);
                }
            }
        }
        group
    }

    /// Takes the last chunk out whole: for letting go of a set a chunk at a time without
    /// copying the chunks it shares.
    pub(super) fn pop_last_chunk(&mut self) -> Option<Arc<Chunk<V>>> {
        self.chunks.pop_last().map(|(_, chunk)| chunk)
    }

    /// Whether no key is held.
    pub(super) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Every key and group, in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.chunks.values().flat_map(|chunk| chunk.iter())
    }

    /// Every group, in key order.
    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, group)| group)
    }

    /// The keys and groups between `low` and `high`, in key order; `low` must not lie past
    /// `high` (as for [`BTreeMap::range`]).
    pub(super) fn range<'m>(
        &'m self,
        low: Bound<&str>,
        high: Bound<&str>,
    ) -> impl Iterator<Item = (&'m String, &'m V)> + 'm {
        // The chunk holding `low` may start before it.
        let start = match low {
            Bound::Unbounded => None,
            Bound::Included(key) | Bound::Excluded(key) => {
                self.chunks.range::<str, _>(through(key)).next_back().map(|(first, _)| first.as_str())
            }
        };
        let from = start.map_or(Bound::Unbounded, Bound::Included);
        let pieces: Vec<_> =
            self.chunks.range::<str, _>((from, high)).map(|(_, chunk)| chunk.range::<str, _>((low, high))).collect();
        pieces.into_iter().flatten()
    }
}

/// Inserts `group` under `key` into `chunk`; if that makes it hold more than [`MAX_CHUNK`]
/// keys, moves its upper half out, returned with its first key.
fn split<V>(chunk: &mut Chunk<V>, key: String, group: V) -> Option<(String, Arc<Chunk<V>>)> {
    chunk.insert(key, group);
    if chunk.len() <= MAX_CHUNK {
        return None;
    }
    let middle = chunk.keys().nth(chunk.len() / 2)?.clone();
    let upper = chunk.split_off(&middle);
    Some((middle, Arc::new(upper)))
}

#[cfg(test)]
mod tests;
