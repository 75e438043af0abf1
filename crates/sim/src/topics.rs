//! What the simulated clients publish and subscribe to, with the production filter
//! (`tidings_route::matching`, i.e. `tidings-matching`'s patterns and selectors): topics of one
//! to three levels over `a`, `b`, `c`, each message with an integer property `k`, and
//! subscriptions whose patterns use `*` and `>` often enough that covering matters, some with a
//! selector on `k`.

use bytes::Bytes;
use tidings_matching::{Pattern, Selector};
use tidings_route::matching::{Probe, RouteFilter};
use tidings_route::Filter;
use tidings_wire::{Message, Property};

use crate::rng::Rng;

/// Levels topics and patterns are made of.
const LEVELS: [&str; 3] = ["a", "b", "c"];

/// A published message's content: its topic and property `k`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    /// The topic.
    pub topic: String,
    /// The value of property `k`.
    pub k: i64,
}

impl Content {
    /// The message as the broker would hold it, wrapped for routing decisions.
    pub fn probe(&self) -> Probe {
        let properties = [Property::new("k", self.k)];
        match Message::new(&self.topic, &properties, Bytes::new(), 0) {
            Ok(message) => Probe::new(&message),
            Err(error) => panic!("simulated topic {:?} is invalid: {error}", self.topic),
        }
    }

    /// Whether a subscription with this filter wants the message.
    pub fn wanted_by(&self, filter: &RouteFilter) -> bool {
        filter.matches(&self.probe())
    }
}

/// Every topic of one to three levels over [`LEVELS`].
pub fn all_topics() -> Vec<String> {
    let mut topics: Vec<String> = LEVELS.iter().map(|l| l.to_string()).collect();
    for depth in 1..3 {
        let longer: Vec<String> = topics
            .iter()
            .filter(|t| t.split('.').count() == depth)
            .flat_map(|t| LEVELS.iter().map(move |l| format!("{t}.{l}")))
            .collect();
        topics.extend(longer);
    }
    topics
}

/// A random message.
pub fn random_content(rng: &mut Rng) -> Content {
    let topics = all_topics();
    let topic = rng.pick(&topics).cloned().unwrap_or_else(|| "a".to_string());
    Content { topic, k: rng.below(10) as i64 }
}

/// A filter from a pattern text and optional selector text; panics on invalid text (the
/// generator only makes valid ones).
pub fn filter(pattern: &str, selector: Option<&str>) -> RouteFilter {
    let pattern = Pattern::parse(pattern).unwrap_or_else(|e| panic!("pattern {pattern:?}: {e}"));
    let selector = selector.map(|s| Selector::parse(s).unwrap_or_else(|e| panic!("selector {s:?}: {e}")));
    RouteFilter::new(pattern, selector)
}

/// A random subscription filter: one to three levels, wildcards common, a selector on `k`
/// one time in five.
pub fn random_filter(rng: &mut Rng) -> RouteFilter {
    let depth = rng.between(1, 3);
    let mut levels = Vec::new();
    for level in 0..depth {
        let roll = rng.below(10);
        if level + 1 == depth && roll == 0 {
            levels.push(">".to_string());
        } else if roll < 3 {
            levels.push("*".to_string());
        } else {
            levels.push(LEVELS[rng.below(LEVELS.len())].to_string());
        }
    }
    let selector = rng.chance(20).then(|| format!("k > {}", rng.below(9)));
    filter(&levels.join("."), selector.as_deref())
}
