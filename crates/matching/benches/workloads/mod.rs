//! Workloads shared by the time and memory benchmarks: each builds the subscriptions and a
//! stream of events, deterministically (a fixed-seed generator, no clock, no OS randomness).

// Each benchmark binary uses a different part of this module.
#![allow(dead_code)]

use tidings_matching::{Pattern, Selector, SubscriptionIndex};
use tidings_wire::Property;

/// xorshift64*: enough randomness to spread values, fully reproducible.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

/// One subscription of a workload.
pub(crate) struct Subscription {
    pub(crate) pattern: Pattern,
    pub(crate) selector: Option<Selector>,
}

/// One published message.
pub(crate) struct Event {
    pub(crate) topic: String,
    pub(crate) properties: Vec<Property>,
}

pub(crate) fn pattern(text: &str) -> Pattern {
    Pattern::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

pub(crate) fn selector(text: &str) -> Selector {
    Selector::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

/// Seed 004 (Pallickara's thesis, ch. 8): events of six tag=value pairs; every subscription fixes
/// the first three tags and selects on the fourth, so about one subscription matches an event.
pub(crate) fn seed004_subscriptions(count: usize) -> Vec<Subscription> {
    let events = pattern("events");
    (0..count)
        .map(|k| Subscription {
            pattern: events.clone(),
            selector: Some(selector(&format!("t1 = 'a' AND t2 = 'b' AND t3 = 'c' AND t4 = {k}"))),
        })
        .collect()
}

pub(crate) fn seed004_events(subscriptions: usize, count: usize) -> Vec<Event> {
    let mut rng = Rng::new(4);
    (0..count)
        .map(|_| Event {
            topic: "events".to_owned(),
            properties: vec![
                Property::new("t1", "a"),
                Property::new("t2", "b"),
                Property::new("t3", "c"),
                Property::new("t4", rng.below(subscriptions as u64) as i64),
                Property::new("t5", format!("v{}", rng.below(100))),
                Property::new("t6", rng.below(1000) as i64),
            ],
        })
        .collect()
}

/// Range workload: `price > x` with `x` spread evenly over `0..count`; an event's price is
/// uniform over the same span, so it matches half the subscriptions on average.
pub(crate) fn range_subscriptions(count: usize) -> Vec<Subscription> {
    let quotes = pattern("quotes");
    (0..count)
        .map(|x| Subscription { pattern: quotes.clone(), selector: Some(selector(&format!("price > {x}"))) })
        .collect()
}

pub(crate) fn range_events(subscriptions: usize, count: usize) -> Vec<Event> {
    let mut rng = Rng::new(7);
    (0..count)
        .map(|_| Event {
            topic: "quotes".to_owned(),
            properties: vec![
                Property::new("symbol", "IBM"),
                Property::new("price", rng.below(subscriptions as u64 * 100) as f64 / 100.0),
            ],
        })
        .collect()
}

/// A mixed workload over topics `market.<exchange>.<symbol>`: wildcard and literal patterns;
/// selectors by equality with a range, IN lists, BETWEEN, OR, no selector, and a few that no
/// predicate can index (evaluated for every message of their pattern).
pub(crate) fn mixed_subscriptions(count: usize) -> Vec<Subscription> {
    let mut rng = Rng::new(11);
    let symbols = (count / 20).max(10) as u64;
    (0..count)
        .map(|i| {
            let exchange = ["nyse", "lse", "tse"][rng.below(3) as usize];
            let symbol = rng.below(symbols);
            let pattern_text = match rng.below(100) {
                0 => "market.>".to_owned(),
                1..=29 => format!("market.*.s{symbol}"),
                30..=39 => format!("market.{exchange}.>"),
                _ => format!("market.{exchange}.s{symbol}"),
            };
            let price = rng.below(1000);
            let selector_text = match i % 200 {
                0 => Some(format!("note LIKE '%{}%'", rng.below(100))),
                1..=9 => None,
                10..=89 => Some(format!("symbol = 's{symbol}' AND price > {price}")),
                90..=119 => Some(format!("region IN ('eu', 'us') AND volume >= {}", rng.below(10_000))),
                120..=159 => Some(format!("price BETWEEN {price} AND {}", price + 5)),
                160..=179 => Some(format!("(symbol = 's{symbol}' OR symbol = 's{}') AND urgent", rng.below(symbols))),
                _ => Some(format!("trader = 't{}' AND price < {price}.5", rng.below(count as u64))),
            };
            Subscription { pattern: pattern(&pattern_text), selector: selector_text.map(|text| selector(&text)) }
        })
        .collect()
}

pub(crate) fn mixed_events(subscriptions: usize, count: usize) -> Vec<Event> {
    let mut rng = Rng::new(13);
    let symbols = (subscriptions / 20).max(10) as u64;
    (0..count)
        .map(|_| {
            let exchange = ["nyse", "lse", "tse"][rng.below(3) as usize];
            let symbol = rng.below(symbols);
            Event {
                topic: format!("market.{exchange}.s{symbol}"),
                properties: vec![
                    Property::new("symbol", format!("s{symbol}")),
                    Property::new("price", rng.below(100_000) as f64 / 100.0),
                    Property::new("volume", rng.below(10_000) as i64),
                    Property::new("region", ["eu", "us", "apac"][rng.below(3) as usize]),
                    Property::new("urgent", rng.below(4) == 0),
                    Property::new("trader", format!("t{}", rng.below(subscriptions as u64))),
                ],
            }
        })
        .collect()
}

/// An index holding `subscriptions`, with subscriber `i` for the i-th.
pub(crate) fn build(subscriptions: &[Subscription]) -> SubscriptionIndex<u32> {
    let mut index = SubscriptionIndex::new();
    for (i, subscription) in subscriptions.iter().enumerate() {
        index.insert(subscription.pattern.clone(), subscription.selector.clone(), i as u32);
    }
    index
}

/// The reference: test every subscription's pattern and selector.
pub(crate) fn naive_matches(subscriptions: &[Subscription], event: &Event, out: &mut Vec<u32>) {
    for (i, subscription) in subscriptions.iter().enumerate() {
        if subscription.pattern.matches(&event.topic)
            && subscription.selector.as_ref().is_none_or(|s| s.matches(&event.properties))
        {
            out.push(i as u32);
        }
    }
}
