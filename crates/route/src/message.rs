//! What routing puts on the wire and what the data path gets back. These are plain data with
//! serde derives; the byte encoding belongs to the broker's wire format, not here.

use serde::{Deserialize, Serialize};

use crate::link_state::LinkStateAdvert;
use crate::names::{BarrierId, BrokerName, CellName, PubendId, Tick, TreeId};
use crate::summary::SummaryDelta;

/// A control message from one broker's router to a neighbour's router.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum PeerMessage<F> {
    /// Proof of life; any message counts, this one is sent when nothing else is due.
    Heartbeat,
    /// Link-state adverts: our own when it changes, everything we know when a link comes up,
    /// and whatever we accepted from others (flooding).
    Adverts(Vec<LinkStateAdvert>),
    /// Changes to the summary this link carries (see [`crate::Scope`]).
    Summary(Vec<SummaryDelta<F>>),
    /// Sent after the summary changes it vouches for: for each listed root, the sender's
    /// `Tree(root)` summary is complete for the tree with this id (its own child cells, and
    /// toward its parent cell also its cell mates, have said the same). The first one after a
    /// link comes up also vouches for the `Local` scope. Until then the receiver sends copies
    /// the summary it holds cannot rule out, so a new or moved route loses nothing while its
    /// summaries travel.
    Synced(Vec<(CellName, TreeId)>),
    /// A subscription barrier climbing the tree of `root` (see the router's barrier module):
    /// sent behind the summary deltas it vouches for, answered with [`PeerMessage::BarrierAck`]
    /// once every broker above the receiver (toward `root`'s cell) holds them too.
    Barrier {
        /// The sender's round: its name and round number.
        id: BarrierId,
        /// The publishing cell whose tree the barrier climbs.
        root: CellName,
        /// Whether the receiver also asks its own cell mates (false when the sender is a
        /// mate, so barriers never circle inside a cell).
        relay_to_mates: bool,
    },
    /// The answer to a [`PeerMessage::Barrier`]: everything above the receiver holds the deltas.
    BarrierAck {
        /// The barrier answered.
        id: BarrierId,
        /// Per pubend hosted in `root`'s cell (as far as answered), its next tick when the
        /// barrier reached its broker.
        ticks: Vec<(PubendId, Tick)>,
    },
}

/// The routing header of a data message between brokers. The shell puts it in the frame next to
/// the payload and hands it back to [`crate::Router::route`] on the receiving side.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct DataHeader {
    /// The publishing endpoint; rendezvous hashing on it picks the link of each bundle.
    pub pubend: PubendId,
    /// The publishing cell: the root of the tree the message travels down.
    pub root: CellName,
    /// The tree every hop so far routed under. A receiver that no longer (or not yet) knows this
    /// tree drops the message, so a message never mixes two trees (no loop, no duplicate).
    pub tree: TreeId,
    /// How the receiver must treat the message.
    pub hop: Hop,
    /// The queue groups this copy serves, and no other copy does: the receiver gives the
    /// message to one member of each, its own or, failing that, one further down (see
    /// `router::groups`). Empty for a message no queue group wants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// The role of one data hop.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Hop {
    /// Across a bundle from the parent cell: the receiver is its cell's entry point and does all
    /// of the cell's work (local delivery, cell mates, child cells).
    Down,
    /// Inside a cell from the entry broker: deliver to local subscribers if asked, and send the
    /// message across the listed child-cell bundles on the entry broker's behalf (sideways
    /// routing). Never forwarded inside the cell again.
    Within {
        /// Whether the receiver delivers to its own subscribers.
        deliver: LocalDelivery,
        /// Child cells the receiver sends the message down to.
        across: Vec<CellName>,
    },
}

/// Whether a broker hands a message to its own subscribers.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum LocalDelivery {
    /// Match the message against local subscriptions and deliver.
    Deliver,
    /// Another broker of the cell took care of local delivery; this copy only passes through.
    Skip,
}

/// How a data message reached this broker.
#[derive(Clone, Copy, Debug)]
pub enum Arrival<'a> {
    /// A local publisher sent it: this broker's cell is the root.
    Published {
        /// The publisher's pubend.
        pubend: PubendId,
    },
    /// A neighbour forwarded it with this header.
    Received {
        /// The neighbour it came from.
        from: &'a BrokerName,
        /// The header it carried.
        header: &'a DataHeader,
    },
}

/// One copy to send: the peer and the header to put on it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct DataSend {
    /// The neighbour to send the copy to.
    pub to: BrokerName,
    /// The header the copy carries.
    pub header: DataHeader,
    /// Why the copy goes (or, in [`Forwarding::filtered`], why it does not).
    pub verdict: Verdict,
}

/// The forwarding verdict for one child (a child cell, or a cell mate's local subscribers), in
/// the terms of guaranteed delivery (gd-protocol §5): D becomes F on a filter edge.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub enum Verdict {
    /// The child's vouched summary matches: send the message (D).
    Deliver,
    /// The child's summary is vouched and does not match: filtered (F). Guaranteed delivery
    /// sends silence for the tick instead; best effort sends nothing.
    Filtered,
    /// The child's summary is not yet vouched for the current tree (`Synced` pending), so it
    /// cannot rule the message out: send it, as for D.
    Unsure,
}

/// Why a data message went no further than this broker.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub enum DropReason {
    /// The sender routed under a tree this broker does not hold (routes are changing).
    UnknownTreeId,
    /// The root cell is not reachable in this broker's view.
    UnknownRoot,
    /// A `Down` hop came from a broker that is not in our parent cell for that root.
    NotFromParent,
    /// A `Within` hop came from a broker that is not a linked cell mate.
    NotFromMate,
}

/// The forwarding decision for one data message. Caller-owned and reused: `route` clears it.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize)]
pub struct Forwarding {
    /// Whether this broker delivers the message to its own matching subscribers.
    pub deliver_locally: bool,
    /// Copies to send, at most one per neighbour.
    pub sends: Vec<DataSend>,
    /// Set when the message was refused rather than routed (for metrics and logs).
    pub dropped: Option<DropReason>,
    /// Copies a matching downstream was owed (verdict [`Verdict::Deliver`]) that had no link
    /// to go by: its entry broker is not linked to this one and no mate can carry it. Best
    /// effort loses them, so the broker counts them as route drops (a loss no one counts is a
    /// loss no operator can see).
    pub unreachable: u32,
    /// Children the message is filtered from (verdict [`Verdict::Filtered`]), with the hop a copy
    /// would have taken: where guaranteed delivery sends silence. Filled only by
    /// [`crate::Router::route_with_verdicts`]; best effort never pays for it.
    pub filtered: Vec<DataSend>,
}

impl Forwarding {
    /// Resets the decision for the next message, keeping the allocation.
    pub fn clear(&mut self) {
        self.deliver_locally = false;
        self.sends.clear();
        self.dropped = None;
        self.unreachable = 0;
        self.filtered.clear();
    }
}
