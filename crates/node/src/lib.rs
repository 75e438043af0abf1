//! One broker's guaranteed-delivery node, sans-IO: the shell decisions around the delivery core
//! that the broker's tokio driver (`tidings-broker`, `guaranteed/`) and the deterministic
//! simulator (`tidings-sim`, `gd/`) both run, so a simulated run judges the broker's own code,
//! not a model of it.
//!
//! Map:
//! - [`edges`]: the filter verdicts toward downstream cells and cell mates, from routing's
//!   vouched summaries.
//! - [`gate`]: the seam between the core and a pubend's replica group: a PUBLISH_ACK waits for the
//!   host's sync and the group's commit, and subscribers get only what both hold.
//! - [`journal`]: the core's store actions and inputs in `tidings-store`'s terms, both ways
//!   (what an opened log recovered, submits, reads, completions).
//! - [`local`]: the local subscriptions' index, which subends a message matches.
//! - [`publishes`]: the retry table and when a publish is acknowledged (after its group
//!   commit's sync; a retry after a lost PUBLISH_ACK with its first attempt's tick).
//! - [`starts`]: where a subscription starts once its barrier is confirmed (never below
//!   what the stream here can still serve).
//! - [`durables`]: durable subscribers' checkpoints (when an acknowledgement is written and
//!   when the core may act on it) and the order subends attach to a stream in.
//! - [`replicated`]: opening a pubend from its replicated state (a wiped host, a successor):
//!   the store writes that give the log the group's records, and what the core is told then.
//! - [`work_queue`]: a guaranteed queue group at one broker: its subend's deliveries leased to
//!   one member each, acknowledged one by one, given back (flagged) when a member leaves.
//! - [`hush`]: rate-limited warnings (a fault hitting every message says so once, with a count).
//!
//! Nothing here runs a thread, a timer or a socket: callers bring their own time and I/O.

pub mod durables;
pub mod edges;
pub mod gate;
pub mod hush;
pub mod journal;
pub mod local;
pub mod publishes;
pub mod replicated;
pub mod starts;
pub mod work_queue;
