//! The routing core of tidings: which brokers a message travels to, along which links.
//!
//! Pure and deterministic: no tokio, sockets, clocks, threads, random sources or file I/O.
//! Time comes in as [`Millis`], randomness as a seed, and every map whose order can reach an
//! output is a `BTreeMap`, so a simulated run is a function of its seed.
//!
//! Map of the crate, in reading order:
//! - [`topology`] parses and validates topology files (brokers, cells, links) for the launcher.
//! - [`Router`] (in `router/`) is one broker's state machine: feed it [`Input`]s with
//!   [`Router::handle`], carry out the [`Action`]s, and ask [`Router::route`] per data message.
//! - `link_state`: adverts of up links flooded to every broker, and the graph they give.
//! - `tree`: one shortest-path tree over cells per publishing cell, with fixed tie-breaks, and
//!   its [`TreeId`].
//! - `summary`: per-link, per-tree interest summaries and the deltas that keep them in sync.
//! - `rendezvous`: the pinned hash that picks one entry broker of a bundle per pubend.
//! - [`limits`]: size limits on adverts and summaries, and the advert age-out.
//! - `liveness`: heartbeat timing, missed-heartbeat verdicts and reconnect backoff.
//! - [`filter`]: the [`Filter`] trait routing is generic over, covering, and the
//!   [`FilterIndex`] the data path tests summaries with.
//! - [`matching`] (feature `matching`): the production filter, a topic pattern and selector
//!   from `tidings-matching`, with its topic-trie index and the message probe it tests.
//! - `minimized`: a multiset of filters kept minimized by covering as filters come and go, so a
//!   subscription change costs what it can affect, not every subscription.
//!
//! How a shell drives one router:
//! - After a link handshake (name, cell, incarnation): [`Input::LinkUp`]. When the connection
//!   closes: [`Input::LinkDown`] with the incarnation of that handshake.
//! - Every control frame from a peer: [`Input::Received`] with the decoded [`PeerMessage`];
//!   any other frame from it (data): [`Input::Heard`], so a busy link is not declared dead.
//! - Local subscribe and unsubscribe: [`Input::Subscribe`] / [`Input::Unsubscribe`].
//! - At [`Router::next_deadline`]: [`Input::Tick`] (heartbeats, missed-heartbeat verdicts).
//! - Carry out the actions: [`Action::Send`] a control frame, [`Action::CloseLink`] (then
//!   redial with [`ReconnectBackoff`]), log [`Action::Rejected`], and on
//!   [`Action::RoutesChanged`] tell whoever keeps per-route state (guaranteed delivery).
//! - Per data message: [`Router::route`] with [`Arrival::Published`] for a local publisher or
//!   [`Arrival::Received`] with the [`DataHeader`] the frame carried; deliver locally if
//!   [`Forwarding::deliver_locally`], and send each [`DataSend`] with its header.
//! - For `/state` and metrics: [`Router::snapshot`] and [`Router::metrics`].
//!
//! What guaranteed delivery asks of it (all additive; a best-effort shell ignores
//! [`Action::Guaranteed`]):
//! - [`Router::pubend_route`]: for one pubend, its upstream candidates, children (cell, entry
//!   broker, direct or via a mate) and cell mates, without a message. [`Input::TrackPubend`]
//!   makes view changes report [`GdAction::PubendsMoved`] for the pubends whose route moved.
//! - [`Router::route_with_verdicts`]: the forwarding decision with a [`Verdict`] per child:
//!   D and unsure copies in `sends`, filtered children (where silence goes) in `filtered`.
//! - [`Router::child_cell_verdict`] and [`Router::mate_verdict`]: the same verdicts per
//!   downstream of a pubend's stream without an arriving copy, for filter edges that judge
//!   stored ticks (nack answers, silence); [`Router::child_cell_in_tree`] and
//!   [`Router::mate_in_tree`]: whether a downstream is in the pubend's tree at all (its
//!   vouched summary is not empty), so its acks are waited for.
//! - [`Router::request_barrier`]: confirms a burst of subscriptions once every broker up to
//!   every publisher's broker holds their summaries ([`PeerMessage::Barrier`] /
//!   [`PeerMessage::BarrierAck`], [`GdAction::NextTicksWanted`] answered by
//!   [`Input::NextTicks`], then [`GdAction::BarrierConfirmed`] with each pubend's start tick).
//! - [`PubendId::derive`]: stable pubend ids from the broker's and the pubend's names.
//!
//! Link state from peers is believed only from paths that can vouch for it (a neighbour
//! speaks for itself; other origins only through peers no farther from them), ages out when
//! not renewed, and is bounded by [`limits`]; see the router's `links` module.
//!
//! Why messages arrive exactly once: a message travels down one tree, and every hop carries the
//! [`TreeId`] it was routed under; a broker routes it only under a tree with that id (its
//! current one, or the one just before, so messages in flight survive one change) and drops it
//! otherwise. All brokers that share a tree id make the same choices, so each cell is entered
//! once, at one broker, which alone delivers to the cell; sideways copies are never forwarded
//! sideways again.

pub mod filter;
pub mod limits;
#[cfg(feature = "matching")]
pub mod matching;
pub mod topology;

mod error;
mod link_state;
mod liveness;
mod message;
mod minimized;
mod names;
mod rendezvous;
mod router;
mod summary;
mod tree;

pub use error::{CloseReason, Limit, RouteError};
pub use filter::{Filter, FilterIndex, LinearIndex};
pub use link_state::{AdvertisedLink, LinkStateAdvert};
pub use liveness::{LivenessSettings, ReconnectBackoff};
pub use message::{Arrival, DataHeader, DataSend, DropReason, Forwarding, Hop, LocalDelivery, PeerMessage, Verdict};
pub use names::{BarrierId, BrokerName, CellName, Incarnation, Millis, PubendId, Tick, TreeId, ViewId};
pub use router::{
    Action, ChildSnapshot, FilterPage, GdAction, Input, LinkSnapshot, PubendChild, PubendRef, PubendRoute, Router,
    RouterMetrics, RouterSettings, RouterSnapshot, ScopeSnapshot, TreeSnapshot, Via,
};
pub use summary::{Scope, SummaryDelta};
pub use topology::Topology;
