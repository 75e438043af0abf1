//! Covering must be sound: when it says a wide filter covers a narrow one, no message may pass
//! the narrow filter and fail the wide one. It may be incomplete.

// Helpers outside `#[test]` functions may unwrap: their inputs are valid by construction.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tidings_matching::{covers, Filter, Pattern, Selector};
use tidings_wire::{Property, Value};

fn selector(text: &str) -> Selector {
    Selector::parse(text).unwrap()
}

fn filter(pattern: &str, selector: Option<&str>) -> Filter {
    Filter { pattern: Pattern::parse(pattern).unwrap(), selector: selector.map(|s| Selector::parse(s).unwrap()) }
}

fn selector_covers(wide: &str, narrow: &str) -> bool {
    selector(wide).covers(&selector(narrow))
}

#[test]
fn a_wider_pattern_without_selector_covers_anything_under_it() {
    assert!(covers(&filter("a.>", None), &filter("a.b", Some("x = 1"))));
    assert!(!covers(&filter("a.*", None), &filter("a.b.c", None)));
    assert!(!covers(&filter("a.>", Some("x = 1")), &filter("a.b", None)));
    assert!(covers(&filter("a.>", Some("TRUE")), &filter("a.b", None)));
    assert!(filter("a.b", Some("x > 1")).covers(&filter("a.b", Some("x > 2"))));
}

#[test]
fn numeric_ranges_cover_the_ranges_inside_them() {
    assert!(selector_covers("price > 10", "price > 20"));
    assert!(selector_covers("price > 10", "price >= 10.5"));
    assert!(selector_covers("price >= 10", "price > 10"));
    assert!(!selector_covers("price > 10", "price >= 10"));
    assert!(selector_covers("price > 10", "price = 11"));
    assert!(selector_covers("price BETWEEN 0 AND 100", "price > 5 AND price < 50"));
    assert!(selector_covers("price BETWEEN 0 AND 100", "price IN (3, 7.5)"));
    assert!(!selector_covers("price BETWEEN 0 AND 100", "price IN (3, 700)"));
    assert!(selector_covers("price <> 5", "price > 5"));
    assert!(selector_covers("price NOT BETWEEN 1 AND 2", "price < 0"));
    assert!(selector_covers("price IS NOT NULL", "price < 0"));
    assert!(selector_covers("10 < price", "price > 20"));
    assert!(!selector_covers("price > 10", "price <> 5"));
}

#[test]
fn string_and_boolean_facts_cover_what_they_force() {
    assert!(selector_covers("s IN ('a', 'b')", "s = 'a'"));
    assert!(selector_covers("s <> 'c'", "s IN ('a', 'b')"));
    assert!(selector_covers("s LIKE 'a%'", "s = 'abc'"));
    assert!(selector_covers("s NOT IN ('c')", "s = 'a'"));
    assert!(!selector_covers("s NOT IN (1)", "s = 'a'"), "NOT IN on a mistyped value is unknown");
    assert!(!selector_covers("s LIKE 'a%'", "s LIKE 'ab%'"), "not proven, so no");
    assert!(selector_covers("flag", "flag = TRUE AND x = 1"));
    assert!(selector_covers("flag = FALSE", "flag <> TRUE"));
}

#[test]
fn logic_is_followed_through_and_or() {
    assert!(selector_covers("a = 1", "a = 1 AND b = 2"));
    assert!(!selector_covers("a = 1 AND b = 2", "a = 1"));
    assert!(selector_covers("a = 1 OR b = 2", "a = 1"));
    assert!(selector_covers("a > 0", "a = 1 OR a = 2"));
    assert!(selector_covers("a > 0 AND (b = 'x' OR c)", "b = 'x' AND a = 3"));
    assert!(selector_covers("x = 1", "x = 1 AND x = 2"), "a contradiction is covered by anything");
    assert!(selector_covers("a LIKE '%' OR a NOT LIKE 'q'", "a LIKE '%' OR a NOT LIKE 'q'"));
    assert!(!selector_covers("NOT a = 1", "a = 2"), "NOT of an unanalysed condition is not proven");
}

/// Atomic predicates on properties `n`, `s` and `f` with literals of every type, so that
/// mistyped comparisons (which are UNKNOWN) come up too; ill-typed text is filtered out later.
#[test]
fn large_selectors_are_compared_in_product_time_not_exponential_time() {
    let ors = (0..200).map(|i| format!("a = {i}")).collect::<Vec<_>>().join(" OR ");
    let ands = (0..100).map(|i| format!("b{i} > {i}")).collect::<Vec<_>>().join(" AND ");
    assert!(selector_covers(&ors, &ors));
    assert!(selector_covers("a >= 0 AND a < 200", &ors));
    assert!(selector_covers(&ands, &format!("{ands} AND c = 1")));
    assert!(!selector_covers(&format!("({ors}) AND z = 1"), &format!("({ors}) AND ({ands})")));
}

/// Every atomic predicate on property `p` over a small set of literals of every type.
fn all_atoms() -> Vec<Selector> {
    let literals = ["0", "1", "1.5", "-1", "'a'", "'ab'", "'b'", "TRUE", "FALSE"];
    let few = ["0", "1", "1.5", "'a'", "'ab'", "TRUE"];
    let mut texts = vec!["p".to_owned(), "p IS NULL".to_owned(), "p IS NOT NULL".to_owned()];
    for op in ["=", "<>", "<", "<=", ">", ">="] {
        for literal in literals {
            texts.push(format!("p {op} {literal}"));
            texts.push(format!("{literal} {op} p"));
        }
    }
    for not in ["", "NOT "] {
        for a in few {
            for b in few {
                texts.push(format!("p {not}BETWEEN {a} AND {b}"));
                texts.push(format!("p {not}IN ({a}, {b})"));
            }
        }
        for pattern in ["'a%'", "'ab'", "'_'", "'%b'"] {
            texts.push(format!("p {not}LIKE {pattern}"));
        }
    }
    texts.iter().filter_map(|text| Selector::parse(text).ok()).collect()
}

#[test]
fn every_pair_of_atoms_on_one_property_is_covered_soundly() {
    let values = [
        Value::Int(-1),
        Value::Int(0),
        Value::Int(1),
        Value::Int(2),
        Value::Float(0.5),
        Value::Float(1.5),
        Value::Float(f64::NAN),
        Value::from("a"),
        Value::from("ab"),
        Value::from("b"),
        Value::from("abc"),
        Value::Bool(true),
        Value::Bool(false),
    ];
    let mut messages: Vec<Vec<Property>> = values.iter().map(|v| vec![Property::new("p", v.clone())]).collect();
    messages.push(Vec::new());
    let atoms = all_atoms();
    let mut proven = 0;
    for wide in &atoms {
        for narrow in &atoms {
            if !wide.covers(narrow) {
                continue;
            }
            proven += 1;
            for message in &messages {
                assert!(
                    !narrow.matches(message) || wide.matches(message),
                    "{wide} claimed to cover {narrow} but {message:?} passes only the narrow one"
                );
            }
        }
    }
    assert!(proven > atoms.len() * 3, "covering proved only {proven} pairs of {} atoms", atoms.len());
}

fn predicate() -> impl Strategy<Value = String> {
    let property = prop_oneof![Just("n"), Just("s"), Just("f")];
    let literal = prop_oneof![
        Just("0"),
        Just("1"),
        Just("2"),
        Just("1.5"),
        Just("-1"),
        Just("'a'"),
        Just("'b'"),
        Just("'ab'"),
        Just("TRUE"),
        Just("FALSE")
    ]
    .boxed();
    let op = prop_oneof![Just("="), Just("<>"), Just("<"), Just("<="), Just(">"), Just(">=")];
    let not = prop_oneof![Just(""), Just("NOT ")];
    prop_oneof![
        4 => (property.clone(), op, literal.clone()).prop_map(|(p, op, v)| format!("{p} {op} {v}")),
        1 => (literal.clone(), Just("<"), property.clone()).prop_map(|(v, op, p)| format!("{v} {op} {p}")),
        2 => (property.clone(), not.clone(), literal.clone(), literal.clone())
            .prop_map(|(p, not, a, b)| format!("{p} {not}BETWEEN {a} AND {b}")),
        2 => (property.clone(), not.clone(), literal.clone(), literal.clone())
            .prop_map(|(p, not, a, b)| format!("{p} {not}IN ({a}, {b})")),
        1 => (property.clone(), not.clone(), prop_oneof![Just("'a%'"), Just("'ab'"), Just("'_'")])
            .prop_map(|(p, not, pattern)| format!("{p} {not}LIKE {pattern}")),
        1 => property.clone().prop_map(str::to_owned),
        1 => (property, not).prop_map(|(p, not)| format!("{p} IS {not}NULL")),
    ]
    .boxed()
}

fn condition() -> impl Strategy<Value = String> {
    predicate()
        .prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 2..4).prop_map(|p| p.join(" AND ")),
                prop::collection::vec(inner.clone(), 2..3).prop_map(|p| format!("({})", p.join(" OR "))),
                inner.prop_map(|p| format!("NOT ({p})")),
            ]
        })
        .boxed()
}

/// A wide selector and a narrow one that is often (but not always) a strengthening of it; pairs
/// of atoms on one property exercise the interval and set reasoning.
fn pair() -> impl Strategy<Value = (Selector, Selector)> {
    let texts = prop_oneof![
        (condition(), condition(), 0..3u8).prop_map(|(wide, extra, how)| match how {
            0 => (wide.clone(), format!("({wide}) AND ({extra})")),
            1 => (format!("({wide}) OR ({extra})"), wide),
            _ => (wide, extra),
        }),
        (predicate(), predicate()),
        (predicate(), predicate(), predicate()).prop_map(|(wide, a, b)| (wide, format!("{a} AND {b}"))),
    ];
    texts.prop_filter_map("both sides must type-check", |(wide, narrow)| {
        Some((Selector::parse(&wide).ok()?, Selector::parse(&narrow).ok()?))
    })
}

fn message() -> impl Strategy<Value = Vec<Property>> {
    let value = prop_oneof![
        (-2i64..4).prop_map(Value::Int),
        prop_oneof![Just(1.5), Just(0.5), Just(f64::NAN)].prop_map(Value::Float),
        prop_oneof![Just("a"), Just("b"), Just("ab"), Just("abc")].prop_map(Value::from),
        any::<bool>().prop_map(Value::Bool),
    ];
    let key = prop_oneof![Just("n"), Just("s"), Just("f")];
    prop::collection::vec((key, value).prop_map(|(k, v)| Property::new(k, v)), 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn covering_never_claims_a_message_the_wide_selector_rejects(
        (wide, narrow) in pair(),
        messages in prop::collection::vec(message(), 24),
    ) {
        if wide.covers(&narrow) {
            for properties in &messages {
                prop_assert!(
                    !narrow.matches(properties) || wide.matches(properties),
                    "{} claimed to cover {} but {:?} passes only the narrow one", wide, narrow, properties
                );
            }
        }
    }
}
