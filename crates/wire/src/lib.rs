//! The tidings wire format: frames and their codec, shared by the broker and every client.
//!
//! No I/O, no async, no tokio: a decoder takes bytes and says either "here is a frame" or
//! "need more" (`Ok(None)`). Start with [`frame`] for the frame set and the framing rule;
//! [`Message`] is the section PUBLISH and DELIVER share, and [`PropertiesRef`] reads its
//! properties in place for matching; [`ReasonCode`] numbers every refusal. [`peer`] is the
//! broker-to-broker frame set (link handshake, routing control, best-effort and guaranteed
//! data), in the same framing with its own type numbers.
//! `docs/protocol.md` describes the same bytes for authors of clients in other languages, and
//! the golden-byte tests in `frame/tests.rs` hold the two together. [`hash`] holds the hash and
//! SplitMix64 functions whose outputs brokers must agree on (rendezvous hashing) or replay (seeds).

mod cursor;
pub mod error;
pub mod frame;
mod framing;
pub mod hash;
pub mod ids;
pub mod mqtt;
pub mod peer;
pub mod reason;
#[cfg(any(test, feature = "proptest"))]
pub mod strategies;
pub mod value;
pub mod view;

pub use error::WireError;
pub use frame::{
    check_decoder, check_group_name, peek_header, Deliver, DeliveryAck, DeliveryMode, Frame, FrameType, Gap,
    GuaranteedDeliver, GuaranteedPublish, Hello, HelloAuth, Message, NoResponders, Notice, Ping, Pong, PublishAck,
    PublishRefused, Sequence, Servers, SubId, Subscribe, Subscribed, Token, Unsubscribe, Welcome, DEFAULT_MAX_FRAME,
    DELIVER_HEADER_LEN, GUARANTEED_DELIVER_HEADER_LEN, HEADER_LEN, HELLO_AUTH_VERSION, KEYED_FLAG, MAX_GROUP_LEN,
    MAX_SERVERS, PROTOCOL_MIN_VERSION, PROTOCOL_VERSION, QUEUE_FLAG, REDELIVERED_FLAG, REPLY_TO, RETAIN, RETAINED,
    RETAIN_ONLY, SEQUENCE_LEN, SERVERS_VERSION, TOKEN_LEN,
};
pub use ids::{PubendId, PublisherId, Tick};
pub use reason::ReasonCode;
pub use value::{lookup, Property, Value};
pub use view::{PropertiesRef, PropertyLookup, ValueRef};
