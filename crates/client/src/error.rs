//! The client's error type.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tidings_wire::{Notice, ReasonCode, WireError};

/// Why a client operation failed.
///
/// Cloneable so that one failure (a lost connection, say) can be handed to every caller and
/// subscription it affects; the I/O error is shared behind an [`Arc`] for that reason.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// A socket operation failed.
    #[error("i/o error: {0}")]
    Io(Arc<io::Error>),
    /// A frame could not be encoded, or the broker sent bytes that are not a valid frame.
    #[error("wire error: {0}")]
    Wire(#[from] WireError),
    /// The broker answered with an ERROR frame (and closed the connection, over TCP).
    #[error("refused by the broker: {}", describe(*.reason, *.code, .text))]
    Refused {
        /// The reason, when this version knows the number.
        reason: Option<ReasonCode>,
        /// The reason number as sent.
        code: u16,
        /// The broker's explanation.
        text: String,
    },
    /// The broker closed the session with a DISCONNECT frame (it shuts down, for example).
    #[error("disconnected by the broker: {}", describe(*.reason, *.code, .text))]
    Disconnected {
        /// The reason, when this version knows the number.
        reason: Option<ReasonCode>,
        /// The reason number as sent.
        code: u16,
        /// The broker's explanation.
        text: String,
    },
    /// The connection ended without a word from the broker.
    #[error("connection lost")]
    ConnectionLost,
    /// The broker sent something the protocol does not allow at that point.
    #[error("protocol violation: {detail}")]
    Protocol {
        /// What was wrong.
        detail: String,
    },
    /// The broker speaks another protocol version.
    #[error("broker speaks protocol version {theirs}, this client speaks {ours}")]
    VersionMismatch {
        /// The version this client speaks.
        ours: u16,
        /// The version in the broker's WELCOME.
        theirs: u16,
    },
    /// The client was closed (by [`Client::close`](crate::Client::close) or by dropping
    /// every handle).
    #[error("the client is closed")]
    Closed,
    /// The operation needs something this client's transport does not offer (guaranteed
    /// publishing over UDP).
    #[error("{operation} is not available over {transport}")]
    Unsupported {
        /// What was asked.
        operation: &'static str,
        /// The transport that cannot do it.
        transport: &'static str,
    },
    /// An operation did not complete in time.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What was being waited for.
        operation: &'static str,
        /// How long the client waited.
        after: Duration,
    },
    /// The broker address resolved to nothing.
    #[error("no address found for {addr}")]
    NoAddress {
        /// The address as given to the builder.
        addr: String,
    },
    /// A request's subject matched no subscriber anywhere in the broker's network: the broker
    /// said so at once (NO_RESPONDERS), rather than the requester waiting for its timeout.
    #[error("no responders for {subject}")]
    NoResponders {
        /// The request's subject.
        subject: String,
    },
    /// TLS could not be set up (a missing or unreadable CA or certificate file), or its
    /// handshake failed (a broker certificate the CA did not sign, a plaintext port).
    #[error("tls: {detail}")]
    Tls {
        /// What went wrong.
        detail: String,
    },
    /// A reconnect reached a broker other than the one holding the client's durable
    /// subscriptions (a cell mate in its list): the client passes over it and tries on, since
    /// that broker would make them anew and empty.
    #[error("broker {broker} does not hold this client's durable subscriptions: they live at {home}")]
    NotHome {
        /// The broker reached.
        broker: String,
        /// The broker the durable subscriptions live at.
        home: String,
    },
    /// Reconnecting gave up after the configured number of attempts.
    #[error("gave up reconnecting after {attempts} attempts; last error: {last}")]
    ReconnectFailed {
        /// Attempts made.
        attempts: u32,
        /// The error of the last attempt.
        last: Box<ClientError>,
    },
}

fn describe(reason: Option<ReasonCode>, code: u16, text: &str) -> String {
    match reason {
        Some(r) => format!("{r}: {text}"),
        None => format!("reason {code}: {text}"),
    }
}

impl ClientError {
    /// The error for an ERROR frame.
    pub fn refused(notice: &Notice) -> ClientError {
        ClientError::Refused { reason: notice.reason(), code: notice.code, text: notice.text.clone() }
    }

    /// The error for a DISCONNECT frame.
    pub fn disconnected(notice: &Notice) -> ClientError {
        ClientError::Disconnected { reason: notice.reason(), code: notice.code, text: notice.text.clone() }
    }

    /// The broker's reason code, for errors that carry one.
    pub fn reason(&self) -> Option<ReasonCode> {
        match self {
            ClientError::Refused { reason, .. } | ClientError::Disconnected { reason, .. } => *reason,
            ClientError::ReconnectFailed { last, .. } => last.reason(),
            _ => None,
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Io(Arc::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_keeps_the_reason_code_and_text() {
        let e = ClientError::refused(&Notice::new(ReasonCode::InvalidPattern, "empty level"));
        assert_eq!(e.reason(), Some(ReasonCode::InvalidPattern));
        assert_eq!(e.to_string(), "refused by the broker: invalid_pattern (7): empty level");
    }

    #[test]
    fn unknown_reason_numbers_are_shown_as_numbers() {
        let e = ClientError::disconnected(&Notice { code: 999, text: "later".into() });
        assert_eq!(e.reason(), None);
        assert_eq!(e.to_string(), "disconnected by the broker: reason 999: later");
    }
}
