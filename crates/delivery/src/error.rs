//! Errors of the delivery core, reported as [`crate::Action::Rejected`]: the input changed
//! nothing, and the shell logs it.

use crate::names::{PubendId, SubendId, Tick};

/// A refused input.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum DeliveryError {
    /// A publish for a pubend this broker does not host (or whose log is not open yet).
    #[error("publish on {pubend:?}, which is not open here")]
    PubendNotOpen {
        /// The stream.
        pubend: PubendId,
    },
    /// A subend input for a subend the stream does not know.
    #[error("{subend:?} is not attached to {pubend:?}")]
    UnknownSubend {
        /// The stream.
        pubend: PubendId,
        /// The subend.
        subend: SubendId,
    },
    /// A start tick below what the stream still holds: messages between it and `done` were
    /// acknowledged before the subend pinned them, so it starts after them.
    #[error("{subend:?} asked to start at {start:?}, below the stream's done prefix {done:?}")]
    StartBelowDone {
        /// The subend.
        subend: SubendId,
        /// Its requested start.
        start: Tick,
        /// The stream's done prefix.
        done: Tick,
    },
    /// A serve order reported served over a tick that is not final here: impossible while
    /// final ticks stay final (gd-protocol I1), so the report is refused and the order cancelled.
    #[error("{subend:?} was reported served through {tick:?}, which is not final")]
    ServedNotFinal {
        /// The subend.
        subend: SubendId,
        /// The first tick not final.
        tick: Tick,
    },
}
