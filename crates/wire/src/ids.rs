//! Identifiers of guaranteed delivery that cross the wire, shared by the client protocol and the
//! broker-to-broker protocol so both speak of the same stream and slot with the same types.

/// One slot of a pubend's stream: microseconds of the publishing broker's clock, made strictly
/// increasing (gd-protocol.md §2.2). The order of ticks is the publisher order of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Tick(pub u64);

/// A publishing endpoint: the persistent source of one ordered stream, hosted by one broker.
/// Derived from the broker's name and the pubend's name, so it is the same across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PubendId(pub u64);

/// The pubend a guaranteed publish with an empty pubend name goes to.
pub const DEFAULT_PUBEND: &str = "default";

impl PubendId {
    /// The id of the pubend `name` (`""` is [`DEFAULT_PUBEND`]) hosted by the broker named
    /// `broker`: a pinned hash of both names, so a broker that restarts with the same pubend
    /// names gets the same ids, and a client that knows its broker's name (WELCOME) knows the
    /// pubend its first publish goes to before any acknowledgement names it.
    pub fn derive(broker: &str, name: &str) -> PubendId {
        let name = if name.is_empty() { DEFAULT_PUBEND } else { name };
        let broker_hash = crate::hash::fnv1a(broker.as_bytes());
        let name_hash = crate::hash::fnv1a(name.as_bytes());
        PubendId(crate::hash::mix(broker_hash ^ crate::hash::mix(name_hash ^ name.len() as u64)))
    }
}

/// A publisher's own id, chosen by the client (random per process by default). With the
/// publisher's sequence number it lets the broker drop a retried publish it already logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublisherId(pub u64);

impl std::fmt::Display for Tick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::fmt::Display for PubendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::fmt::Display for PublisherId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}
