//! What the cluster tells the layer above it: link-ups, routing's guaranteed-delivery actions,
//! and the guaranteed-delivery frames its links carry. The cluster knows nothing of who listens;
//! `server` hands it the sending end of a channel at construction (the guaranteed driver's
//! inbox, whose command type converts from [`Event`]), so the events go in the order the cluster
//! sends them, interleaved with the driver's other commands exactly as they happen.

use tidings_route::{BrokerName, CellName, GdAction};
use tidings_wire::peer::{Group, PeerFrame, Replica, Sideways};
use tokio::sync::mpsc::UnboundedSender;

/// One thing the cluster reports.
pub enum Event {
    /// A link handshake with `peer` completed (before any frame of that link is read).
    PeerUp {
        /// The peer.
        peer: BrokerName,
        /// Its cell.
        cell: CellName,
        /// Its incarnation, so a restarted peer is told apart.
        incarnation: u64,
    },
    /// The link to `peer` went down (its current connection closed; a replaced connection is
    /// followed by [`Event::PeerUp`] instead).
    PeerDown {
        /// The peer.
        peer: BrokerName,
    },
    /// One of routing's guaranteed-delivery actions.
    Routing(GdAction),
    /// A GROUP frame (a guaranteed queue group's member traffic) from linked peer `from`.
    Group {
        /// The peer it came from.
        from: BrokerName,
        /// The frame.
        frame: Group,
    },
    /// A SIDEWAYS frame brought by linked peer `carrier`.
    Sideways {
        /// The peer that brought it.
        carrier: BrokerName,
        /// The frame.
        frame: Sideways,
    },
    /// A message of a pubend's Raft group from linked peer `from` (a cell mate).
    Replica {
        /// The peer it came from.
        from: BrokerName,
        /// The frame.
        frame: Replica,
    },
    /// A guaranteed-delivery frame (DATA, SILENCE, ACK, NACK or ACK_EXPECTED, see
    /// [`is_guaranteed`]) from linked peer `from`, in arrival order.
    Guaranteed {
        /// The peer it came from.
        from: BrokerName,
        /// The frame.
        frame: PeerFrame,
    },
}

/// Whether a link frame is guaranteed-delivery traffic, to be handed on as
/// [`Event::Guaranteed`] rather than read by the router.
pub fn is_guaranteed(frame: &PeerFrame) -> bool {
    matches!(
        frame,
        PeerFrame::Data(_) | PeerFrame::Silence(_) | PeerFrame::Ack(_) | PeerFrame::Nack(_) | PeerFrame::AckExpected(_)
    )
}

/// Where the cluster's events go. Sending never blocks, and is called with the router's lock
/// held, so it must not call back into the cluster.
pub trait EventSink: Send + Sync {
    /// Hands on one event; one that cannot be delivered (the listener stopped, at shutdown) is
    /// dropped, as nothing is promised then.
    fn send(&self, event: Event);
}

/// The usual sink: an unbounded channel of any message type an [`Event`] converts into (an
/// event that does not convert is the listener's to report, and goes no further).
impl<T: TryFrom<Event> + Send> EventSink for UnboundedSender<T> {
    fn send(&self, event: Event) {
        if let Ok(message) = T::try_from(event) {
            let _ = UnboundedSender::send(self, message);
        }
    }
}
