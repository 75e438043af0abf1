//! The index must answer exactly as a naive loop over all subscriptions does, with or without
//! its cache, whatever the order of subscribes, unsubscribes and publishes, and whatever the
//! selectors and message properties (including missing, mistyped and duplicated properties).
//! Selectors and the index must also answer the same whether they read owned properties or the
//! borrowed view of an encoded message, which is what the broker hands them.

// Test helpers outside `#[test]` functions may unwrap: generated input is valid by construction.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tidings_matching::{Pattern, Selector, SubscriptionId, SubscriptionIndex};
use tidings_wire::{Message, Property, Value};

#[derive(Debug, Clone)]
enum Op {
    Subscribe(Pattern, Option<Selector>, u32),
    /// Unsubscribes the live subscription at this position (modulo the count).
    Unsubscribe(usize),
    Publish(String, Vec<Property>),
}

fn level() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("a"), Just("b"), Just("c")]
}

fn topic() -> impl Strategy<Value = String> {
    prop::collection::vec(level(), 1..4).prop_map(|levels| levels.join("."))
}

fn pattern() -> impl Strategy<Value = Pattern> {
    let one = prop_oneof![3 => level(), 1 => Just("*")];
    (prop::collection::vec(one, 1..4), any::<bool>()).prop_map(|(mut levels, rest)| {
        if rest {
            *levels.last_mut().unwrap() = ">";
        }
        Pattern::parse(&levels.join(".")).unwrap()
    })
}

/// Predicates over properties `n` (numeric), `s` (string), `f` (boolean) and `m` (any), with
/// values chosen so that they often hit.
fn predicate() -> impl Strategy<Value = String> {
    let number = prop_oneof![Just("0"), Just("1"), Just("2"), Just("2.0"), Just("2.5"), Just("-1")];
    let word = prop_oneof![Just("'x'"), Just("'y'"), Just("'z'")];
    let op = prop_oneof![Just("="), Just("<>"), Just("<"), Just("<="), Just(">"), Just(">=")];
    prop_oneof![
        (op.clone(), number.clone()).prop_map(|(op, v)| format!("n {op} {v}")),
        (op, number.clone()).prop_map(|(op, v)| format!("{v} {op} n")),
        word.clone().prop_map(|v| format!("s = {v}")),
        word.clone().prop_map(|v| format!("{v} = s")),
        word.clone().prop_map(|v| format!("s <> {v}")),
        (number.clone(), number.clone()).prop_map(|(a, b)| format!("n BETWEEN {a} AND {b}")),
        (number.clone(), number.clone()).prop_map(|(a, b)| format!("n NOT BETWEEN {a} AND {b}")),
        (number.clone(), number.clone()).prop_map(|(a, b)| format!("n IN ({a}, {b})")),
        (word.clone(), word.clone()).prop_map(|(a, b)| format!("s IN ({a}, {b})")),
        (word.clone(), word).prop_map(|(a, b)| format!("s NOT IN ({a}, {b})")),
        Just("s LIKE 'x%'".to_owned()),
        Just("s LIKE '_'".to_owned()),
        Just("f".to_owned()),
        Just("f = FALSE".to_owned()),
        Just("n IS NULL".to_owned()),
        Just("m IS NOT NULL".to_owned()),
        Just("m = 1".to_owned()),
        Just("m = 'x'".to_owned()),
        number.clone().prop_map(|v| format!("n + 1 > {v}")),
        number.prop_map(|v| format!("n * 2 = {v}")),
        Just("n = m".to_owned()),
        Just("TRUE".to_owned()),
    ]
}

fn selector_text() -> impl Strategy<Value = String> {
    predicate().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(|parts| parts.join(" AND ")),
            prop::collection::vec(inner.clone(), 2..3).prop_map(|parts| format!("({})", parts.join(" OR "))),
            inner.prop_map(|part| format!("NOT ({part})")),
        ]
    })
}

fn selector() -> impl Strategy<Value = Option<Selector>> {
    prop_oneof![1 => Just(None), 3 => selector_text().prop_map(|text| Some(Selector::parse(&text).unwrap()))]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (-1i64..4).prop_map(Value::Int),
        2 => prop_oneof![Just(0.0), Just(2.0), Just(2.5), Just(-1.0), Just(f64::NAN)].prop_map(Value::Float),
        2 => prop_oneof![Just("x"), Just("y"), Just("xa")].prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::Bool),
    ]
}

fn properties() -> impl Strategy<Value = Vec<Property>> {
    let key = prop_oneof![Just("n"), Just("s"), Just("f"), Just("m"), Just("other")];
    prop::collection::vec((key, value()).prop_map(|(k, v)| Property::new(k, v)), 0..6)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (pattern(), selector(), 0..1000u32).prop_map(|(p, s, id)| Op::Subscribe(p, s, id)),
        1 => any::<usize>().prop_map(Op::Unsubscribe),
        3 => (topic(), properties()).prop_map(|(t, p)| Op::Publish(t, p)),
    ]
}

struct Naive {
    id: SubscriptionId,
    pattern: Pattern,
    selector: Option<Selector>,
    subscriber: u32,
}

/// Applies `ops` to an index with the given cache size and to a plain list, comparing answers.
fn check(cache: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut index = SubscriptionIndex::with_cache_capacity(cache);
    let mut naive: Vec<Naive> = Vec::new();
    for op in ops {
        match op {
            Op::Subscribe(pattern, selector, subscriber) => {
                let id = index.insert(pattern.clone(), selector.clone(), *subscriber);
                naive.push(Naive { id, pattern: pattern.clone(), selector: selector.clone(), subscriber: *subscriber });
            }
            Op::Unsubscribe(at) if !naive.is_empty() => {
                let gone = naive.swap_remove(at % naive.len());
                prop_assert_eq!(index.remove(gone.id), Some(gone.subscriber));
                prop_assert_eq!(index.remove(gone.id), None);
            }
            Op::Unsubscribe(_) => {}
            Op::Publish(topic, properties) => {
                let mut got = Vec::new();
                index.matches(topic, properties, &mut got);
                got.sort_unstable();
                let mut want: Vec<u32> = naive
                    .iter()
                    .filter(|n| n.pattern.matches(topic) && n.selector.as_ref().is_none_or(|s| s.matches(properties)))
                    .map(|n| n.subscriber)
                    .collect();
                want.sort_unstable();
                prop_assert_eq!(got, want, "topic {} properties {:?}", topic, properties);
            }
        }
        prop_assert_eq!(index.len(), naive.len());
        prop_assert_eq!(index.has_selectors(), naive.iter().any(|n| n.selector.is_some()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_index_without_a_cache_agrees_with_a_naive_loop(ops in prop::collection::vec(op(), 1..120)) {
        check(0, &ops)?;
    }

    #[test]
    fn the_index_with_a_cache_agrees_with_a_naive_loop(ops in prop::collection::vec(op(), 1..120)) {
        check(tidings_matching::DEFAULT_CACHE_CAPACITY, &ops)?;
    }

    #[test]
    fn the_index_with_a_tiny_evicting_cache_agrees_with_a_naive_loop(ops in prop::collection::vec(op(), 1..120)) {
        check(3, &ops)?;
    }
}

/// The properties encoded as a published message would carry them.
fn encoded(topic: &str, properties: &[Property]) -> Message {
    Message::new(topic, properties, bytes::Bytes::new(), 0).unwrap()
}

/// Applies `ops` to one index, asking it about each publish both through the owned properties
/// and through the view of their encoding.
fn check_view(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut index = SubscriptionIndex::new();
    let mut live = Vec::new();
    for op in ops {
        match op {
            Op::Subscribe(pattern, selector, subscriber) => {
                live.push(index.insert(pattern.clone(), selector.clone(), *subscriber));
            }
            Op::Unsubscribe(at) if !live.is_empty() => {
                index.remove(live.swap_remove(at % live.len()));
            }
            Op::Unsubscribe(_) => {}
            Op::Publish(topic, properties) => {
                let message = encoded(topic, properties);
                let (mut owned, mut viewed) = (Vec::new(), Vec::new());
                index.matches(topic, properties, &mut owned);
                index.matches(topic, &message.property_view(), &mut viewed);
                owned.sort_unstable();
                viewed.sort_unstable();
                prop_assert_eq!(owned, viewed, "topic {} properties {:?}", topic, properties);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_selector_over_the_encoded_view_equals_it_over_the_owned_properties(
        text in selector_text(),
        properties in properties(),
    ) {
        let selector = Selector::parse(&text).unwrap();
        let message = encoded("t", &properties);
        let owned = selector.evaluate(&properties);
        prop_assert_eq!(selector.evaluate(&message.property_view()), owned, "{} over {:?}", text, properties);
        prop_assert_eq!(selector.evaluate(&message.properties()), owned);
    }

    #[test]
    fn the_index_over_the_encoded_view_equals_it_over_the_owned_properties(
        ops in prop::collection::vec(op(), 1..120),
    ) {
        check_view(&ops)?;
    }
}
