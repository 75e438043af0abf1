//! Numbered reason codes carried by ERROR and DISCONNECT frames.
//!
//! These numbers are protocol: clients in other languages switch on them. A number, once
//! retired, is never reused; new reasons take the next free number.

use std::fmt;

/// Why the broker refused something or closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ReasonCode {
    /// A normal, requested close.
    Normal = 0,
    /// The bytes were not a well-formed frame.
    MalformedFrame = 1,
    /// The frame exceeded the broker's maximum frame size.
    FrameTooLarge = 2,
    /// The type byte named no known frame.
    UnknownFrameType = 3,
    /// A frame other than HELLO arrived before the handshake.
    HandshakeRequired = 4,
    /// The client's protocol version is not supported.
    UnsupportedVersion = 5,
    /// A topic was empty, too long, had an empty level or a wildcard.
    InvalidTopic = 6,
    /// A subscription pattern was malformed.
    InvalidPattern = 7,
    /// A SUBSCRIBE reused an id that is still active on this session.
    DuplicateSubscriptionId = 8,
    /// An UNSUBSCRIBE named an id that is not active.
    UnknownSubscriptionId = 9,
    /// The selector text did not parse or type-check.
    InvalidSelector = 10,
    /// The subscriber could not keep up and the policy is to disconnect it.
    SlowConsumer = 11,
    /// The broker is shutting down.
    ShuttingDown = 12,
    /// The delivery mode is unknown or not available on this broker.
    UnsupportedDeliveryMode = 13,
    /// A second HELLO on a session that already completed its handshake.
    DuplicateHello = 14,
    /// A per-session limit (subscriptions, for example) was reached.
    LimitExceeded = 15,
    /// The broker failed internally; the client did nothing wrong.
    Internal = 16,
    /// The peer sent a frame that is valid but not allowed in this direction (a DELIVER to
    /// the broker, say).
    UnexpectedFrame = 17,
    /// The broker could not log a guaranteed publish (a full disk, a failed write); nothing of
    /// it was kept, and the publisher may retry later.
    StorageUnavailable = 18,
    /// The durable subscription name is held by another session right now.
    DurableInUse = 19,
    /// A durable subscription of that name exists with another pattern or selector (delete it
    /// with UNSUBSCRIBE first), or the name is not a valid durable name.
    DurableMismatch = 20,
    /// A queue group name that is empty, too long, or has a wildcard, space or control
    /// character: members find each other by the name, so it must be a plain one.
    InvalidQueueGroup = 21,
    /// The broker requires a login and the HELLO's credentials were missing, unknown or wrong
    /// (which of these is not said, so as not to tell which user names exist).
    NotAuthenticated = 22,
    /// The user may not publish or subscribe to that topic (or use that durable name).
    NotAuthorized = 23,
}

impl ReasonCode {
    /// Every code, in number order (for docs and exhaustive tests).
    pub const ALL: [ReasonCode; 24] = [
        ReasonCode::Normal,
        ReasonCode::MalformedFrame,
        ReasonCode::FrameTooLarge,
        ReasonCode::UnknownFrameType,
        ReasonCode::HandshakeRequired,
        ReasonCode::UnsupportedVersion,
        ReasonCode::InvalidTopic,
        ReasonCode::InvalidPattern,
        ReasonCode::DuplicateSubscriptionId,
        ReasonCode::UnknownSubscriptionId,
        ReasonCode::InvalidSelector,
        ReasonCode::SlowConsumer,
        ReasonCode::ShuttingDown,
        ReasonCode::UnsupportedDeliveryMode,
        ReasonCode::DuplicateHello,
        ReasonCode::LimitExceeded,
        ReasonCode::Internal,
        ReasonCode::UnexpectedFrame,
        ReasonCode::StorageUnavailable,
        ReasonCode::DurableInUse,
        ReasonCode::DurableMismatch,
        ReasonCode::InvalidQueueGroup,
        ReasonCode::NotAuthenticated,
        ReasonCode::NotAuthorized,
    ];

    /// The number on the wire.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// Maps a wire number back; `None` for numbers this version does not know (a newer
    /// broker's reason), which a client should show as a number rather than reject.
    pub fn from_code(code: u16) -> Option<ReasonCode> {
        ReasonCode::ALL.get(usize::from(code)).copied()
    }

    /// A stable snake_case name, for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            ReasonCode::Normal => "normal",
            ReasonCode::MalformedFrame => "malformed_frame",
            ReasonCode::FrameTooLarge => "frame_too_large",
            ReasonCode::UnknownFrameType => "unknown_frame_type",
            ReasonCode::HandshakeRequired => "handshake_required",
            ReasonCode::UnsupportedVersion => "unsupported_version",
            ReasonCode::InvalidTopic => "invalid_topic",
            ReasonCode::InvalidPattern => "invalid_pattern",
            ReasonCode::DuplicateSubscriptionId => "duplicate_subscription_id",
            ReasonCode::UnknownSubscriptionId => "unknown_subscription_id",
            ReasonCode::InvalidSelector => "invalid_selector",
            ReasonCode::SlowConsumer => "slow_consumer",
            ReasonCode::ShuttingDown => "shutting_down",
            ReasonCode::UnsupportedDeliveryMode => "unsupported_delivery_mode",
            ReasonCode::DuplicateHello => "duplicate_hello",
            ReasonCode::LimitExceeded => "limit_exceeded",
            ReasonCode::Internal => "internal",
            ReasonCode::UnexpectedFrame => "unexpected_frame",
            ReasonCode::StorageUnavailable => "storage_unavailable",
            ReasonCode::DurableInUse => "durable_in_use",
            ReasonCode::DurableMismatch => "durable_mismatch",
            ReasonCode::InvalidQueueGroup => "invalid_queue_group",
            ReasonCode::NotAuthenticated => "not_authenticated",
            ReasonCode::NotAuthorized => "not_authorized",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_maps_back_to_itself() {
        for (i, code) in ReasonCode::ALL.iter().enumerate() {
            assert_eq!(usize::from(code.code()), i);
            assert_eq!(ReasonCode::from_code(code.code()), Some(*code));
        }
        assert_eq!(ReasonCode::from_code(999), None);
    }
}
