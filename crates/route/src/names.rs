//! Newtypes for the values routing talks about, so a broker name is never confused with a cell
//! name and a time is never confused with a count.
//!
//! Names are reference-counted strings: the data path copies a cell name into every forwarded
//! header, and an `Arc<str>` clone is a counter increment rather than an allocation.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps a name; topology validation, not this constructor, decides what is legal.
            pub fn new(name: impl AsRef<str>) -> Self {
                Self(Arc::from(name.as_ref()))
            }

            /// The name as text, for logs, hashing and comparisons with configuration.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:?}", &*self.0)
            }
        }

        impl From<&str> for $name {
            fn from(name: &str) -> Self {
                Self::new(name)
            }
        }

        impl From<String> for $name {
            fn from(name: String) -> Self {
                Self(Arc::from(name))
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

name_type!(
    /// The unique name of one broker process; the identity every link handshake announces.
    BrokerName
);

name_type!(
    /// The name of a cell: a group of fully interconnected brokers that back each other up. A
    /// broker without an explicit cell is a cell of one, named after itself.
    CellName
);

/// The identity of a publishing endpoint. Rendezvous hashing on it pins all of one pubend's
/// traffic to one link of each bundle, so downstream soft state lives at one broker per cell.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PubendId(pub u64);

impl PubendId {
    /// The stable id of the pubend `name` hosted by `broker`: a pinned hash of both names, so a
    /// broker that restarts with the same pubend names gets the same ids (guaranteed-delivery
    /// streams, acks and logs are keyed by it and must survive the restart). Distinct
    /// (broker, name) pairs collide only by 64-bit hash accident.
    /// The one derivation is `tidings_wire::PubendId::derive` (clients derive it too); a
    /// `name` given here is never empty (the broker maps `""` to its default name first).
    pub fn derive(broker: &BrokerName, name: &str) -> PubendId {
        PubendId(tidings_wire::PubendId::derive(broker.as_str(), name).0)
    }
}

/// A pubend's tick: a point on its stream, as the guaranteed-delivery core numbers it. Route
/// only carries ticks (in barrier answers); it never interprets them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Tick(pub u64);

/// The identity of one subscription barrier: the broker that started it and its number there
/// (numbers grow within one incarnation; the origin's incarnation is not needed because a
/// restarted broker has no pending barriers to confuse).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct BarrierId {
    /// The broker that sent the barrier.
    pub origin: BrokerName,
    /// Its number at that broker.
    pub number: u64,
}

/// A broker's restart counter, announced in the link handshake and in its link-state adverts.
/// It must grow on every restart so that the new process's adverts supersede the old ones.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Incarnation(pub u64);

/// A point in time in milliseconds from an origin the shell chooses. The core never reads a
/// clock: the shell passes `now` in, which is what makes simulated runs replayable.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// The later time `self + duration_ms`, saturating instead of wrapping so a huge timeout
    /// means "never" rather than "immediately".
    pub fn after(self, duration_ms: u64) -> Millis {
        Millis(self.0.saturating_add(duration_ms))
    }
}

/// A digest of a broker's whole link-state database: when it changes, routes are recomputed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ViewId(pub u64);

/// A digest of one tree: every cell's parent and, for every bundle of the tree, the brokers a
/// message may enter the child cell through. Brokers with the same `TreeId` for a root make the
/// same choices for its messages, so every data hop carries it and a receiver routes the message
/// only under a tree with that id; that is what keeps delivery loop-free and duplicate-free
/// while routes change.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TreeId(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_serialize_as_plain_strings() {
        let json = serde_json::to_string(&BrokerName::new("b1")).unwrap();
        assert_eq!(json, "\"b1\"");
        let back: CellName = serde_json::from_str("\"IB1\"").unwrap();
        assert_eq!(back.as_str(), "IB1");
    }

    #[test]
    fn a_pubend_id_depends_only_on_its_broker_and_name() {
        let a = PubendId::derive(&BrokerName::new("b1"), "orders");
        assert_eq!(a, PubendId::derive(&BrokerName::new("b1"), "orders"), "same names, same id (a restart)");
        assert_ne!(a, PubendId::derive(&BrokerName::new("b2"), "orders"));
        assert_ne!(a, PubendId::derive(&BrokerName::new("b1"), "order"));
        // Pinned: the id is part of persisted state and of the wire, so it must not drift.
        assert_eq!(a, PubendId(2_861_153_369_876_119_371), "pinned value");
    }

    #[test]
    fn a_huge_timeout_saturates_instead_of_wrapping() {
        assert_eq!(Millis(u64::MAX - 1).after(10), Millis(u64::MAX));
    }
}
