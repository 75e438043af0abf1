//! The messages of the guaranteed-delivery protocol between brokers (gd-protocol §7). The broker
//! converts them to and from the binary frames of `wire::peer`; the core never sees bytes on a
//! wire, only these values.

use bytes::Bytes;

use crate::names::{PubendId, Tick, TickRange, TreeTag};

/// Whether a silence reports nothing-for-you or messages that can no longer be supplied.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SilenceKind {
    /// The ticks hold nothing for the receiver (F).
    Final,
    /// The ticks held messages released before the receiver got them (L).
    Lost,
}

/// One protocol message for one pubend's stream.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Message {
    /// Downstream: `[final_from, tick - 1]` are F, `tick` is D carrying `payload`,
    /// `[tick + 1, final_to]` are F. `payload` is the whole published message as the broker
    /// encodes it: everything a filter reads (topic, properties) is inside it.
    Data {
        /// The stream.
        pubend: PubendId,
        /// The data tick.
        tick: Tick,
        /// First tick of the silence before `tick` (`== tick` if none).
        final_from: Tick,
        /// Last tick of the silence after `tick` (`== tick` if none).
        final_to: Tick,
        /// A retransmission answering curiosity: relayed only to ostreams curious for it.
        requested_only: bool,
        /// The tree the F brackets were judged under (the sender stamps it as it sends).
        tree: TreeTag,
        /// The message.
        payload: Bytes,
    },
    /// Downstream: the ranges are F (or L).
    Silence {
        /// The stream.
        pubend: PubendId,
        /// Sorted, disjoint ranges.
        ranges: Vec<TickRange>,
        /// F or L.
        kind: SilenceKind,
        /// A retransmission answering curiosity.
        requested_only: bool,
        /// The tree an F was judged under (the sender stamps it as it sends; L ignores it).
        tree: TreeTag,
    },
    /// Upstream: every tick `<= ack_prefix` is acknowledged (A), every tick `<= release_prefix`
    /// may be released from the pubend log.
    Ack {
        /// The stream.
        pubend: PubendId,
        /// The acknowledged prefix.
        ack_prefix: Tick,
        /// The releasable prefix (`<= ack_prefix`).
        release_prefix: Tick,
    },
    /// Upstream: curiosity (C) for these ticks.
    Nack {
        /// The stream.
        pubend: PubendId,
        /// Sorted, disjoint ranges.
        ranges: Vec<TickRange>,
    },
    /// Downstream: "I have sent through `tick`; tell me what you have".
    AckExpected {
        /// The stream.
        pubend: PubendId,
        /// The highest tick sent.
        tick: Tick,
    },
}

impl Message {
    /// Stamps the tree a downstream message's F was judged under; other messages are left as
    /// they are.
    pub(crate) fn stamp_tree(&mut self, stamp: TreeTag) {
        if let Message::Data { tree, .. } | Message::Silence { tree, .. } = self {
            *tree = stamp;
        }
    }

    /// The stream the message belongs to.
    pub fn pubend(&self) -> PubendId {
        match self {
            Message::Data { pubend, .. }
            | Message::Silence { pubend, .. }
            | Message::Ack { pubend, .. }
            | Message::Nack { pubend, .. }
            | Message::AckExpected { pubend, .. } => *pubend,
        }
    }
}
