//! The tidings wire format: frames and their codec, shared by the broker and every client.
//!
//! No I/O, no async, no tokio: a decoder takes bytes and says either "here is a frame and how
//! many bytes it used" or "need more". Start with [`frame`] for the frame set and [`codec`] for
//! framing; `docs/protocol.md` is the byte-level description for third-party clients.

pub mod value;

pub use value::{lookup, Property, Value};
