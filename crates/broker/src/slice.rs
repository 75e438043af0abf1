//! How long a connection's task computes before it lets others run. A task works through
//! every frame of a read (64 KiB: thousands of SUBSCRIBEs or summary deltas) without an await,
//! and while it does, the tasks queued on its worker (other clients' sessions) and the
//! runtime's socket polling wait; a neighbour's round trip waited behind a bulk subscription.

use std::time::{Duration, Instant};

/// Computing time between yields: far above one frame's work, far below what anyone notices.
const SLICE: Duration = Duration::from_millis(2);

/// Frames between looks at the clock, so the publish path reads it rarely.
const LOOK_EVERY: u32 = 32;

/// A task's current slice of computing time.
pub(crate) struct Slice {
    started: Instant,
    frames: u32,
}

impl Slice {
    /// A slice starting now (at each read).
    pub(crate) fn new() -> Slice {
        Slice { started: Instant::now(), frames: 0 }
    }

    /// Counts a frame handled; true when the slice is spent and the task should yield (the
    /// next slice starts then).
    pub(crate) fn spent(&mut self) -> bool {
        self.frames = self.frames.wrapping_add(1);
        if !self.frames.is_multiple_of(LOOK_EVERY) || self.started.elapsed() < SLICE {
            return false;
        }
        self.started = Instant::now();
        true
    }
}
