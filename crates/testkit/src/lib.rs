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
//!
//! The pieces production code also needs (broker processes, signals, the admin port, the
//! metrics reader, the fault proxy) live in `tidings-admin` and are re-exported here, so the
//! CLI and the experiments link them without linking this harness.

mod neighbour;
mod raw;

use std::sync::mpsc;
use std::time::Duration;

pub use neighbour::{attack, Neighbour, NeighbourReport};
pub use raw::RawConnection;
pub use tidings_admin::{
    http_get, http_request, metric_total, metric_value, process_alive, send_signal, test_key_text, write_private,
    BrokerProcess, FaultProxy, ProxyMode, ProxyStats, Ready, Signal, Snapshot,
};

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

/// Waits at most `timeout` for `child` (reading its output while it runs, so a long output
/// cannot fill the pipe and stall it); kills it and panics past that, failing the test.
pub fn finish_within(child: std::process::Child, timeout: Duration) -> std::process::Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(out)) => out,
        Ok(Err(error)) => panic!("waiting for process {pid} failed: {error}"),
        Err(_) => {
            let _ = send_signal(pid, Signal::Kill);
            panic!("process {pid} did not finish within {timeout:?}");
        }
    }
}

/// The one lock a test binary's measuring tests share: a test that times a neighbour beside
/// one attack, or runs a network of brokers, holds it for its whole run, so another test's
/// brokers (debug builds, on a machine that may have two cores) do not become the attack it
/// measures. Poisoning is ignored: a failed test must not fail the ones after it.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
