//! Black-box test harness for tidings: start real broker processes on ports the OS picks,
//! talk raw frames to them, read their metrics, and inject faults.
//!
//! [`BrokerProcess`] reads the broker's ready line, so there are no port races, and kills the
//! process on drop, so a failing test leaves nothing behind. [`RawConnection`] sends and expects
//! frames byte by byte, for the bad-input tests a well-behaved client cannot express.

mod process;
mod raw;

pub use process::{http_get, metric_value, BrokerProcess, Ready};
pub use raw::RawConnection;
