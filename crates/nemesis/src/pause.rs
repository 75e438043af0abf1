//! Waiting that a stop cuts short: the fault tracks and the client faults sleep through it, so
//! a run ended by SIGTERM stops within one step.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Sleeps `d` in short steps; false as soon as `stop` is set.
pub(crate) fn pause(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    false
}
