//! The selector language through its public face: semantics, canonical printing, every error
//! path, and the limits that keep a hostile selector from hurting the broker.

// Helpers outside `#[test]` functions may unwrap: their inputs are fixed and valid.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tidings_matching::{Selector, SelectorError, Span, Truth, MAX_SELECTOR_BYTES, MAX_SELECTOR_DEPTH};
use tidings_wire::{Property, Value};

fn message() -> Vec<Property> {
    vec![
        Property::new("symbol", "IBM"),
        Property::new("price", 120i64),
        Property::new("ratio", 0.5),
        Property::new("urgent", true),
        Property::new("note", "it's 50% off"),
    ]
}

fn truth(selector: &str) -> Truth {
    Selector::parse(selector).unwrap().evaluate(&message())
}

fn error(selector: &str) -> SelectorError {
    Selector::parse(selector).unwrap_err()
}

#[test]
fn comparisons_follow_sql_with_numeric_promotion() {
    assert_eq!(truth("symbol = 'IBM'"), Truth::True);
    assert_eq!(truth("symbol <> 'IBM'"), Truth::False);
    assert_eq!(truth("price = 120.0"), Truth::True);
    assert_eq!(truth("price > 119.5 AND price < 120.5"), Truth::True);
    assert_eq!(truth("ratio * 2 = 1"), Truth::True);
    assert_eq!(truth("price / 7 = 17"), Truth::True, "integer division truncates");
    assert_eq!(truth("price / 0 = 1"), Truth::Unknown, "division by zero is unknown");
    assert_eq!(truth("-price < 0 AND +price > 0"), Truth::True);
    assert_eq!(truth("9223372036854775807 + price > 0"), Truth::Unknown, "overflow is unknown");
    assert_eq!(truth("urgent = TRUE"), Truth::True);
    assert_eq!(truth("urgent"), Truth::True);
    assert_eq!(truth("200 > price"), Truth::True);
}

#[test]
fn numbers_compare_exactly_and_integer_arithmetic_stays_integral() {
    assert_eq!(truth("9007199254740993 = 9007199254740992.0"), Truth::False);
    assert_eq!(truth("9007199254740992 = 9007199254740992.0"), Truth::True);
    assert_eq!(truth("7 / 2 = 3"), Truth::True);
    assert_eq!(truth("-7 / 2 = -3"), Truth::True);
    assert_eq!(truth("7.0 / 2 = 3.5"), Truth::True);
    assert_eq!(truth("1.0 / 0 = 1"), Truth::Unknown);
    assert_eq!(truth("price BETWEEN 200 AND 100"), Truth::False);
}

#[test]
fn missing_and_mistyped_properties_are_unknown() {
    assert_eq!(truth("missing = 1"), Truth::Unknown);
    assert_eq!(truth("symbol = 1"), Truth::Unknown);
    assert_eq!(truth("price = 'IBM'"), Truth::Unknown);
    assert_eq!(truth("symbol > price"), Truth::Unknown);
    assert_eq!(truth("symbol"), Truth::Unknown, "a string is not a condition");
    assert_eq!(truth("missing IS NULL"), Truth::True);
    assert_eq!(truth("price IS NOT NULL"), Truth::True);
    assert_eq!(truth("symbol LIKE 'I%' AND price LIKE '1%'"), Truth::Unknown);
}

#[test]
fn logic_is_three_valued() {
    assert_eq!(truth("missing = 1 AND price = 0"), Truth::False);
    assert_eq!(truth("missing = 1 AND price = 120"), Truth::Unknown);
    assert_eq!(truth("missing = 1 OR price = 120"), Truth::True);
    assert_eq!(truth("missing = 1 OR price = 0"), Truth::Unknown);
    assert_eq!(truth("NOT missing = 1"), Truth::Unknown);
    assert_eq!(truth("NOT price = 0"), Truth::True);
    assert_eq!(truth("missing NOT IN ('a')"), Truth::Unknown);
    assert_eq!(truth("missing NOT BETWEEN 1 AND 2"), Truth::Unknown);
}

#[test]
fn between_in_and_like_behave_as_in_sql() {
    assert_eq!(truth("price BETWEEN 100 AND 120"), Truth::True);
    assert_eq!(truth("price NOT BETWEEN 100 AND 120"), Truth::False);
    assert_eq!(truth("price BETWEEN 121 AND 100"), Truth::False);
    assert_eq!(truth("symbol IN ('HP', 'IBM')"), Truth::True);
    assert_eq!(truth("symbol NOT IN ('HP', 'IBM')"), Truth::False);
    assert_eq!(truth("price IN (1, 120.0)"), Truth::True);
    assert_eq!(truth("symbol LIKE 'I_M'"), Truth::True);
    assert_eq!(truth("symbol NOT LIKE '%B%'"), Truth::False);
    assert_eq!(truth("note LIKE '%50!%%' ESCAPE '!'"), Truth::True);
    assert_eq!(truth("note LIKE '%50!%x' ESCAPE '!'"), Truth::False);
}

#[test]
fn keywords_are_case_insensitive_and_quoted_identifiers_reach_any_property() {
    assert_eq!(truth("price between 100 and 120 or not urgent"), Truth::True);
    let properties = vec![Property::new("content-type", "json"), Property::new("AND", 1i64)];
    let selector = Selector::parse("\"content-type\" = 'json' AND \"AND\" = 1").unwrap();
    assert!(selector.matches(&properties));
    assert_eq!(selector.to_string(), "\"content-type\" = 'json' AND \"AND\" = 1");
}

#[test]
fn the_first_of_duplicate_properties_wins() {
    let properties = vec![Property::new("a", 1i64), Property::new("a", 2i64)];
    assert!(Selector::parse("a = 1").unwrap().matches(&properties));
    assert!(!Selector::parse("a = 2").unwrap().matches(&properties));
}

#[test]
fn nan_and_infinite_property_values_do_not_break_comparisons() {
    let nan = vec![Property::new("x", Value::Float(f64::NAN))];
    assert_eq!(Selector::parse("x = x").unwrap().evaluate(&nan), Truth::Unknown);
    assert_eq!(Selector::parse("x > 0").unwrap().evaluate(&nan), Truth::Unknown);
    let infinite = vec![Property::new("x", Value::Float(f64::INFINITY))];
    assert_eq!(Selector::parse("x > 9223372036854775807").unwrap().evaluate(&infinite), Truth::True);
    assert_eq!(Selector::parse("x + 1 > 0").unwrap().evaluate(&infinite), Truth::Unknown);
}

#[test]
fn printing_is_canonical() {
    let cases = [
        ("a=1 and b<>'x' or not c", "a = 1 AND b <> 'x' OR NOT c"),
        ("(a = 1 or b = 2) and c = 3", "(a = 1 OR b = 2) AND c = 3"),
        ("a = 1 and (b = 2 and c = 3)", "a = 1 AND (b = 2 AND c = 3)"),
        ("a - (b - c) = a - b - c", "a - (b - c) = a - b - c"),
        ("-(-a) = - 5", "-(-a) = -5"),
        ("a not between 1 and 2", "a NOT BETWEEN 1 AND 2"),
        ("not (a in ('x'))", "a NOT IN ('x')"),
        ("a is not null", "a IS NOT NULL"),
        ("not a is null", "a IS NOT NULL"),
        ("a like 'x!_%' escape '!'", "a LIKE 'x!_%' ESCAPE '!'"),
        ("x = 1e3 and y = .5 and z = 'it''s'", "x = 1000.0 AND y = 0.5 AND z = 'it''s'"),
        ("x = -9223372036854775808", "x = -9223372036854775808"),
        ("(((a)))", "a"),
    ];
    for (input, canonical) in cases {
        let selector = Selector::parse(input).unwrap();
        assert_eq!(selector.to_string(), canonical, "{input}");
        assert_eq!(Selector::parse(canonical).unwrap(), selector, "{input}");
    }
}

#[test]
fn unexpected_tokens_say_what_was_found_and_what_was_expected() {
    assert_eq!(
        error("price > AND 3"),
        SelectorError::UnexpectedToken {
            span: Span::new(8, 11),
            found: "keyword AND".into(),
            expected: "an identifier, a literal, NOT or '('".into()
        }
    );
    assert!(matches!(error("a = 1 b"), SelectorError::UnexpectedToken { span: Span { start: 6, end: 7 }, .. }));
    assert!(matches!(error("a = 1 = 2"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("(a = 1"), SelectorError::UnexpectedToken { span: Span { start: 6, end: 6 }, .. }));
    assert!(matches!(error(""), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a BETWEEN 1 OR 2"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a IN 'x'"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a IN ('x' 'y')"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a IN (b)"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a IN (-'x')"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a LIKE b"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a LIKE 'x' ESCAPE b"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a IS 1"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a IS NOT 1"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("a NOT = 1"), SelectorError::UnexpectedToken { .. }));
    assert!(matches!(error("NULL = a"), SelectorError::UnexpectedToken { .. }));
}

#[test]
fn lexical_errors_point_at_the_character() {
    assert_eq!(
        error("a = 'open"),
        SelectorError::Unterminated { span: Span::new(4, 9), what: "string literal", quote: '\'' }
    );
    assert!(matches!(error("\"open = 1"), SelectorError::Unterminated { what: "quoted identifier", .. }));
    assert!(matches!(
        error("a = #"),
        SelectorError::UnexpectedCharacter { found: '#', span: Span { start: 4, end: 5 }, .. }
    ));
    assert!(matches!(error("a = 1x"), SelectorError::UnexpectedCharacter { found: 'x', .. }));
    assert!(matches!(error("a = 99999999999999999999"), SelectorError::NumberOutOfRange { .. }));
    assert!(matches!(error("a = 9223372036854775808"), SelectorError::NumberOutOfRange { .. }));
    assert!(matches!(error("a = -(-9223372036854775808)"), SelectorError::NumberOutOfRange { .. }));
    assert!(matches!(error("a = 1e400"), SelectorError::NumberOutOfRange { .. }));
}

#[test]
fn type_errors_name_both_types() {
    assert_eq!(
        error("'a' = 1"),
        SelectorError::TypeMismatch {
            span: Span::new(6, 7),
            found: "a number".into(),
            expected: "a string to compare with the string on the left".into()
        }
    );
    assert!(matches!(error("'a' < b"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("TRUE > b"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("'a' + 1 = b"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("-'a' = b"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("+TRUE = b"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("'a' BETWEEN 1 AND 2"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("a BETWEEN 'x' AND 2"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("a BETWEEN 1 AND 'y'"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("a IN ('x', 1)"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("a IN (TRUE)"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("1 IN ('x')"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("TRUE IN (1)"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("1 LIKE 'x'"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("a = (b = 1)"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("a AND 1"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("'text'"), SelectorError::TypeMismatch { .. }));
    assert!(matches!(error("a + 1"), SelectorError::TypeMismatch { .. }));
}

#[test]
fn bad_like_patterns_are_rejected_where_they_are() {
    assert_eq!(
        error("a LIKE 'x' ESCAPE 'ab'"),
        SelectorError::InvalidLike { span: Span::new(18, 22), reason: "ESCAPE must be exactly one character" }
    );
    assert!(matches!(
        error("a LIKE 'x!' ESCAPE '!'"),
        SelectorError::InvalidLike { span: Span { start: 7, end: 11 }, .. }
    ));
    assert!(matches!(error("a LIKE 'x!y' ESCAPE '!'"), SelectorError::InvalidLike { .. }));
}

#[test]
fn overlong_selectors_are_rejected_before_parsing() {
    let long = format!("a = '{}'", "x".repeat(MAX_SELECTOR_BYTES));
    assert_eq!(error(&long), SelectorError::TooLong { length: long.len(), max: MAX_SELECTOR_BYTES });
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let parens = format!("{}a = 1{}", "(".repeat(MAX_SELECTOR_BYTES / 2 - 4), ")".repeat(MAX_SELECTOR_BYTES / 2 - 4));
    assert!(matches!(error(&parens), SelectorError::TooDeep { max: MAX_SELECTOR_DEPTH, .. }));
    let nots = format!("{}a", "NOT ".repeat(1000));
    assert!(matches!(error(&nots), SelectorError::TooDeep { .. }));
    let signs = format!("a = {}1", "-".repeat(4000));
    assert!(matches!(error(&signs), SelectorError::TooDeep { .. }));
    let sums = format!("a = 1{}", " + 1".repeat(1000));
    assert!(matches!(error(&sums), SelectorError::TooDeep { .. }));
    let fine = format!("{}a = 1{}", "(".repeat(MAX_SELECTOR_DEPTH - 1), ")".repeat(MAX_SELECTOR_DEPTH - 1));
    assert!(Selector::parse(&fine).is_ok());
}

#[test]
fn long_flat_chains_are_not_deep() {
    let ors = (0..300).map(|i| format!("id = {i}")).collect::<Vec<_>>().join(" OR ");
    let selector = Selector::parse(&ors).unwrap();
    assert!(selector.matches(&[Property::new("id", 299i64)]));
}

#[test]
fn errors_render_with_a_caret_under_the_spot() {
    let source = "price > AND 3";
    assert_eq!(
        error(source).render(source),
        "error: at 8..11: expected an identifier, a literal, NOT or '(', found keyword AND\n  |\n  | price > AND 3\n  |         ^^^\n"
    );
}

/// Selector text from a grammar that mixes every construct, valid or not.
fn selector_text() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("a".to_owned()),
        Just("\"b c\"".to_owned()),
        Just("'it''s'".to_owned()),
        (-5i64..5).prop_map(|i| i.to_string()),
        prop_oneof![Just(0.5f64), Just(-2.25), Just(1e300), Just(-0.0)].prop_map(|x| format!("{x:?}")),
        Just("TRUE".to_owned()),
    ]
    .boxed();
    let arithmetic = (value.clone(), prop_oneof![Just("+"), Just("-"), Just("*"), Just("/")], value.clone())
        .prop_map(|(a, op, b)| format!("{a} {op} {b}"))
        .boxed();
    let operand = prop_oneof![value.clone(), arithmetic.clone(), arithmetic.prop_map(|e| format!("-({e})"))].boxed();
    let op = prop_oneof![Just("="), Just("<>"), Just("<"), Just(">="), Just(">"), Just("<=")];
    let predicate = prop_oneof![
        (operand.clone(), op, operand.clone()).prop_map(|(a, op, b)| format!("{a} {op} {b}")),
        (operand.clone(), operand.clone(), operand.clone())
            .prop_map(|(a, b, c)| format!("{a} NOT BETWEEN {b} AND {c}")),
        (value.clone(), value.clone()).prop_map(|(a, b)| format!("a IN ({a}, {b})")),
        Just("b LIKE 'x!%_' ESCAPE '!'".to_owned()),
        Just("b NOT LIKE '%'".to_owned()),
        Just("a IS NOT NULL".to_owned()),
        value,
    ]
    .boxed();
    predicate.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} AND {b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} OR {b}")),
            inner.clone().prop_map(|a| format!("NOT {a}")),
            inner.prop_map(|a| format!("({a})")),
        ]
    })
}

proptest! {
    #[test]
    fn printing_and_parsing_again_gives_the_same_selector(text in selector_text()) {
        if let Ok(selector) = Selector::parse(&text) {
            let printed = selector.to_string();
            let reparsed = Selector::parse(&printed);
            prop_assert_eq!(reparsed.as_ref(), Ok(&selector), "{} printed as {}", text, printed);
            prop_assert_eq!(reparsed.unwrap().to_string(), printed);
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_parser(text in "[ -~]{0,64}") {
        tidings_matching::selector::fuzz_parse(text.as_bytes());
    }
}
