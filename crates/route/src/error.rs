//! Errors of the routing core. Each is reported as [`crate::Action::Rejected`] and leaves the
//! router's state as it was; the shell logs it and, where a [`crate::Action::CloseLink`]
//! accompanies it, drops the link so that the next connection starts in sync.

use serde::Serialize;

use crate::names::{BrokerName, Incarnation};
use crate::summary::Scope;

/// A refused input.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, thiserror::Error)]
pub enum RouteError {
    /// The shell reported a link to this broker itself (a dial to our own address).
    #[error("a link to ourselves ({peer}) was reported up")]
    LinkToSelf {
        /// Our own name, as the handshake announced it.
        peer: BrokerName,
    },
    /// A handshake announced an incarnation older than the one already linked: a stale
    /// connection from before the peer restarted.
    #[error("link to {peer} came up with incarnation {offered:?}, older than the current {current:?}")]
    StaleIncarnation {
        /// The peer.
        peer: BrokerName,
        /// The incarnation of the link we keep.
        current: Incarnation,
        /// The incarnation the refused handshake announced.
        offered: Incarnation,
    },
    /// A control message arrived from a peer that has no up link (it raced a link-down).
    #[error("message from {peer}, which has no up link")]
    UnknownPeer {
        /// The sender.
        peer: BrokerName,
    },
    /// A summary delta does not fit what we hold for the link: the two ends disagree, and only a
    /// fresh link can put them back in sync.
    #[error("summary from {peer} does not apply to scope {scope:?}; the link must be re-established")]
    SummaryOutOfSync {
        /// The sender.
        peer: BrokerName,
        /// The first scope that did not fit.
        scope: Scope,
    },
    /// Only cell mates exchange local interest; anyone else sending it is confused.
    #[error("{peer} sent its local interest but is not in our cell")]
    LocalScopeFromOtherCell {
        /// The sender.
        peer: BrokerName,
    },
    /// An unsubscribe for a filter with no local subscription.
    #[error("unsubscribe of {filter}, which has no local subscription")]
    NotSubscribed {
        /// The filter, as its `Debug` form.
        filter: String,
    },
    /// A peer exceeded a size limit; its link is closed.
    #[error("{peer} exceeded the {limit:?} size limit; closing the link")]
    LimitExceeded {
        /// The sender.
        peer: BrokerName,
        /// Which limit.
        limit: Limit,
    },
    /// An advert under our own name from a newer incarnation: two brokers share a name, or our
    /// incarnation number went backwards across a restart.
    #[error("an advert for {origin} (us) claims incarnation {claimed:?}, above our {ours:?}")]
    ForeignOwnAdvert {
        /// Our name.
        origin: BrokerName,
        /// Our incarnation.
        ours: Incarnation,
        /// The incarnation the advert claims.
        claimed: Incarnation,
    },
}

/// What a peer exceeded (see [`crate::limits`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub enum Limit {
    /// Too many adverts in one message, links in one advert, or origins in all.
    Adverts,
    /// Too many filters or scopes in one message, or held for the link.
    Summary,
}

/// Why the router wants a link closed.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub enum CloseReason {
    /// Nothing arrived for the configured number of heartbeat intervals.
    MissedHeartbeats,
    /// The link was refused (see the accompanying [`crate::Action::Rejected`]).
    Refused,
    /// The peer sent something that cannot be reconciled on this link.
    OutOfSync,
    /// The peer sent more than a size limit allows.
    LimitExceeded(Limit),
}
