//! A tidings broker driven from outside, as an operator's tools and the experiments drive it:
//! its admin port ([`http_get`]), its metrics ([`Snapshot`], the workspace's one Prometheus
//! reader), its process ([`BrokerProcess`], [`send_signal`]) and a fault point on one of its
//! links ([`FaultProxy`]).
//!
//! Production code (`tidings info`, `tidings net`, `tidings bench`) needs these, and so do the
//! tests; keeping them here lets the CLI link them without linking the test harness
//! (`tidings-testkit`, which re-exports them). No async runtime: plain threads and blocking
//! sockets, so the code under test never shares a runtime with what drives it.

mod fault_log;
mod http;
mod metrics;
mod process;
mod proxy;
mod signal;

pub use fault_log::{append_fault_event, FAULT_LOG};
pub use http::{http_get, http_get_as, http_request, http_request_as, AdminClient, StatusError};
pub use metrics::{metric_total, metric_value, scrape, Sample, Snapshot};
pub use process::{resident_bytes, test_key_text, write_private, BrokerProcess, Ready};
pub use proxy::{FaultProxy, ProxyMode, ProxyStats, Shape};
pub use signal::{process_alive, send_signal, Signal};
