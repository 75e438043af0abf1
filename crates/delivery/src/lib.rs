//! The guaranteed-delivery core of tidings (placeholder map, completed below).

pub mod cache;
pub mod knowledge;
pub mod memstore;
pub mod message;
pub mod names;
pub mod nrt;
pub mod ranges;
pub mod settings;
pub mod store;

mod engine;
mod error;

pub use engine::{Action, ChildLink, Counters, Engine, Input, Matcher, StreamRoute, StreamView, UpstreamCell, Verdict};
pub use error::DeliveryError;
pub use knowledge::Know;
pub use message::{Message, SilenceKind};
pub use names::{BrokerId, CellId, Millis, PubendId, PublisherId, SubendId, Tick, TickRange};
pub use settings::Settings;
pub use store::{Recovered, StoreAction, StoreInput};
