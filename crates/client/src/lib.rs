//! The async Rust client for tidings: publish, subscribe, ping, over TCP or UDP.
//!
//! Every byte on the wire is encoded and decoded by [`tidings_wire`]; this crate has no codec
//! of its own and depends on no other tidings crate. It is a shell around sockets: the pure
//! parts (the reconnect [`Backoff`] schedule, the subscription registry) take their inputs and
//! are unit-tested without a broker.
//!
//! # Where to start reading
//!
//! - [`ClientBuilder`] (`builder.rs`): every setting and its default; [`Client::connect`] for the
//!   defaults.
//! - [`Client`] (`client.rs`): the handle; `publish*`, `subscribe*`, `ping`, `flush`, `close`.
//! - [`Subscription`] (`subscription.rs`): a [`futures::Stream`] of [`Delivery`] values.
//! - `tcp/` — the TCP connection: a shared write buffer (`tcp/outbox.rs`) that `publish`
//!   encodes into and one writer drains with a single write per batch; the reader, and the
//!   reconnect loop (`tcp/driver.rs`).
//! - `udp.rs` — the UDP transport: one datagram per publish, retried requests, keepalive.
//! - `shared.rs` — state both transports share: the registry of subscriptions
//!   (`registry.rs`), the PING waiters (`waiters.rs`), and what to do with each inbound frame.
//!   Deliveries from one socket read are grouped per subscription (`inbox.rs`) and handed
//!   over as one batch: one wake-up per read, not per message.
//!
//! # Semantics in one place
//!
//! - **Publishing** is fire-and-forget: `publish` returns once the frame is in the write
//!   buffer. [`Client::flush`] is the barrier that says it reached the broker and was handled.
//!   When more than [`ClientBuilder::max_pending_bytes`] are waiting to be written, `publish`
//!   waits for the writer (backpressure).
//! - **Guaranteed publishing** ([`Client::publish_guaranteed`], [`Client::send_guaranteed`])
//!   waits for the broker's PUBLISH_ACK, sent only once the message is on disk: the [`Receipt`]
//!   names its pubend and tick. Up to [`ClientBuilder::guaranteed_window`] publishes are in
//!   flight; each carries this client's [`PublisherId`] and a sequence number, so after a
//!   reconnect the ones not yet acknowledged are sent again and the broker, which recognises
//!   them, logs none twice. TCP only.
//! - **Subscribing** sends SUBSCRIBE then PING; the subscription is active when the PONG comes
//!   back. A refusal (bad pattern or selector) is returned as [`ClientError::Refused`] with
//!   the broker's reason code and text. Deliveries wait in a per-subscription buffer
//!   ([`ClientBuilder::subscription_capacity`]); when it is full the reader stops reading, so
//!   a slow consumer slows the broker's sending to this client rather than losing messages
//!   here (the broker's own slow-consumer policy then applies, see [`Delivery::missed`]).
//! - **Reconnecting** (TCP, on by default): when the connection drops for any reason other than
//!   [`Client::close`] — including a broker ERROR about one bad request, or a DISCONNECT because
//!   the broker shuts down — the client reconnects with exponential [`Backoff`] and jitter, says
//!   HELLO again and re-sends SUBSCRIBE for every live subscription. Subscription streams
//!   survive. Frames still in the write buffer when the connection dropped are lost
//!   (best effort, reported by [`ConnectionEvent::Disconnected`], not by a later `flush`);
//!   calls made during the outage wait up to [`ClientBuilder::reconnect_wait`] for the
//!   connection to come back, then fail with [`ClientError::Timeout`]. Calls waiting for a
//!   PONG when the connection drops fail with its error (a `subscribe` instead waits for the
//!   reconnect, which re-sends its SUBSCRIBE). [`Client::events`] reports each step. With
//!   [`ClientBuilder::no_reconnect`] the first drop closes the client.
//! - **UDP** has no connection to lose: requests are re-sent until answered, a keepalive
//!   re-sends every SUBSCRIBE (and a PING) each third of [`ClientBuilder::udp_ttl`], and a
//!   broker that restarts gets the subscriptions back from the next keepalive.
//! - **Requests** ([`Client::request`]): the first one subscribes this client's inbox
//!   (`_INBOX.<random>.>`); each request is published with a unique reply subject under it
//!   (the `$reply_to` property) and waits for the first message published there
//!   ([`Client::reply`] answers one). When nothing anywhere subscribes to the subject, the
//!   broker answers NO_RESPONDERS at once and the request fails with
//!   [`ClientError::NoResponders`].
//! - **Ending**: subscription streams end when the client is closed (every [`Client`] handle
//!   and [`Subscription`] dropped, or [`Client::close`]), when reconnecting gives up, or when
//!   the broker refused that subscription; [`Subscription::error`] then says why.
//!
//! # Example
//!
//! ```no_run
//! use futures::StreamExt;
//! use tidings_client::Client;
//!
//! # async fn demo() -> Result<(), tidings_client::ClientError> {
//! let client = Client::connect("127.0.0.1:4222").await?;
//! let mut temps = client.subscribe("plant.*.temp").await?;
//! client.publish("plant.line3.temp", "21.5").await?;
//! if let Some(delivery) = temps.next().await {
//!     println!("{} = {:?} after {:?}", delivery.topic, delivery.payload, delivery.latency());
//! }
//! client.close().await?;
//! # Ok(())
//! # }
//! ```

mod backoff;
mod builder;
mod checkpoint;
mod client;
mod delivery;
mod error;
mod event;
mod failover;
mod inbox;
mod publisher;
mod registry;
mod request;
mod shared;
mod standing;
mod subscription;
mod tcp;
mod tls;
mod udp;
mod waiters;

pub use backoff::Backoff;
pub use builder::{ClientBuilder, Transport};
pub use checkpoint::{Checkpoint, CheckpointError};
pub use client::{Client, PendingAck};
pub use delivery::{Delivery, Event, GapNotice, Position};
pub use error::ClientError;
pub use event::ConnectionEvent;
pub use publisher::Receipt;
pub use subscription::{Acks, SubscribeOptions, Subscription};
pub use tidings_wire::{DeliveryMode, Message, Property, PubendId, PublisherId, ReasonCode, SubId, Tick, Value};

use std::time::{SystemTime, UNIX_EPOCH};

/// The clock behind [`Delivery::sent_us`] and [`Delivery::received_us`]: wall-clock
/// microseconds since the Unix epoch (0 if the system clock is set before 1970).
///
/// Publishers stamp messages with it, subscriptions stamp deliveries with it as they yield
/// them (and the reader when it reads the socket, [`Delivery::read_us`]), so on one host (or
/// hosts with synchronised clocks) `received_us - sent_us` is the end-to-end latency.
///
/// ```
/// // Some time after September 2020.
/// assert!(tidings_client::now_us() > 1_600_000_000_000_000);
/// ```
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}
