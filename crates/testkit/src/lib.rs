//! Black-box test harness for tidings: start real broker processes on ports the OS picks,
//! talk raw frames to them, read their metrics, and inject faults.
//!
//! [`BrokerProcess`] reads the broker's ready line, so there are no port races, and kills the
//! process on drop, so a failing test leaves nothing behind; each gets its own data directory
//! and the test process's network key in a scratch directory removed on drop. [`RawConnection`] sends and expects
//! frames byte by byte, for the bad-input tests a well-behaved client cannot express.
//! [`FaultProxy`] sits on one link and stalls or cuts it. [`send_signal`] stops, continues or
//! ends any process by id (through `rustix`, no unsafe code and no `kill(1)`). [`Neighbour`]
//! is a well-behaved client beside an attack, timing its own round trips.

mod neighbour;
mod process;
mod proxy;
mod raw;

pub use neighbour::{attack, Neighbour, NeighbourReport};
pub use process::{
    finish_within, http_get, http_request, metric_total, metric_value, send_signal, test_key_text, write_private,
    BrokerProcess, Ready, Signal,
};
pub use proxy::{FaultProxy, ProxyMode, ProxyStats};
pub use raw::RawConnection;

/// Polls `check` every 20 ms until it holds, panicking with `what` after `timeout`: the one
/// way tests wait for a broker to reach a state (a metric, a page of `/connz`) without sleeping
/// a guessed time.
pub fn wait_until(what: &str, timeout: std::time::Duration, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !check() {
        assert!(std::time::Instant::now() < deadline, "{what} (waited {timeout:?})");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
