//! Rate-limited warnings: a fault that hits every message (a full disk refusing each publish)
//! must say so once, with a count, not flood the log with one line per message.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

/// One kind of warning, let through at most once per [`Hush::EVERY_MS`]; the ones held back in
/// between are counted and reported with the next one let through.
#[derive(Debug, Default)]
pub struct Hush {
    last_ms: AtomicU64,
    held: AtomicU64,
}

impl Hush {
    /// At most one warning of a kind per this many milliseconds.
    pub const EVERY_MS: u64 = 1000;

    /// A new, silent limiter (for a `static`).
    pub const fn new() -> Hush {
        Hush { last_ms: AtomicU64::new(0), held: AtomicU64::new(0) }
    }

    /// `Some(n)` when this occurrence is to be logged, `n` being how many were held back since
    /// the last one; `None` when it is held back.
    pub fn pass(&self) -> Option<u64> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let last = self.last_ms.load(Relaxed);
        if now.saturating_sub(last) >= Self::EVERY_MS
            && self.last_ms.compare_exchange(last, now, Relaxed, Relaxed).is_ok()
        {
            return Some(self.held.swap(0, Relaxed));
        }
        self.held.fetch_add(1, Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_passes_the_rest_of_the_second_are_counted_for_the_next() {
        let hush = Hush::new();
        assert_eq!(hush.pass(), Some(0));
        assert_eq!(hush.pass(), None);
        assert_eq!(hush.pass(), None);
        hush.last_ms.store(0, Relaxed); // a second later
        assert_eq!(hush.pass(), Some(2));
    }
}
