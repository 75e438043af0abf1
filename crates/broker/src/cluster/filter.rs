//! The real subscription filter for routing. It lives in `tidings-route` (feature `matching`)
//! so the simulator and the broker route with the same code; re-exported here for the shell.

pub use tidings_route::matching::{FilterText, Probe, RouteFilter};
