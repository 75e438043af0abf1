//! Content selectors: SQL-92 / JMS-style conditions over a message's typed properties, such as
//! `symbol = 'IBM' AND price BETWEEN 100 AND 120`. The grammar and typing rules are in
//! `docs/selectors.md`.
//!
//! The parser is hand-written recursive descent (`lexer`, then `parser`, then `check`) rather
//! than a parsing crate: the grammar is a dozen productions; a hand-written parser reports each
//! error with its exact span, what it found and what it expected, in the project's own
//! [`SelectorError`] without adapter code; it bounds its own recursion (a parser combinator's
//! recursion is the host stack, and a deeply nested selector must fail cleanly rather than
//! overflow it); and the matching crate keeps a dependency tree that `cargo tree` can check at a
//! glance. The cost is about 900 lines (lexer, parser, checker) that the round-trip, error-path and
//! fuzz tests keep honest.

mod ast;
mod check;
mod display;
mod error;
mod eval;
mod lexer;
mod like;
mod number;
mod parser;

use std::fmt;
use std::str::FromStr;

use tidings_wire::{Property, PropertyLookup};

pub(crate) use ast::{Comparison, Condition, Literal, Name, Operand};
pub use error::{SelectorError, Span};
pub use eval::Truth;
pub(crate) use eval::{compare_value, evaluate, Resolve};
pub(crate) use number::{Number, NumberKey, OrderedNumber};

/// Longest selector text accepted, in bytes. Bounds parse time and the memory one subscription
/// can make a broker hold; JMS selectors in practice are far shorter.
pub const MAX_SELECTOR_BYTES: usize = 4096;

/// Deepest nesting accepted (parentheses, NOT, arithmetic, predicate trees). Bounds the stack
/// every recursive walk of a selector uses, whatever the input.
pub const MAX_SELECTOR_DEPTH: usize = 64;

/// A parsed, type-checked content selector.
///
/// Equality is structural on the canonical form: `a=1 and B>2` equals `a = 1 AND B > 2`.
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    condition: Condition<Name>,
}

impl Selector {
    /// Parses and type-checks `text`. On error, [`SelectorError::render`] shows where.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        if text.len() > MAX_SELECTOR_BYTES {
            return Err(SelectorError::TooLong { length: text.len(), max: MAX_SELECTOR_BYTES });
        }
        let tokens = lexer::tokenize(text)?;
        let tree = parser::parse(&tokens)?;
        let condition = check::check(tree)?;
        Ok(Selector { condition })
    }

    /// The selector's three-valued truth for a message with `properties` (the first of duplicate
    /// keys wins, as in [`tidings_wire::lookup`]): a list of properties or a view of an encoded
    /// message's, which costs no allocation.
    pub fn evaluate<L: PropertyLookup + ?Sized>(&self, properties: &L) -> Truth {
        evaluate(&self.condition, properties)
    }

    /// Whether a message with `properties` is delivered: the selector is TRUE.
    pub fn matches<L: PropertyLookup + ?Sized>(&self, properties: &L) -> bool {
        self.evaluate(properties).is_true()
    }

    /// The typed tree, for the index and covering.
    pub(crate) fn condition(&self) -> &Condition<Name> {
        &self.condition
    }
}

impl FromStr for Selector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Selector, SelectorError> {
        Selector::parse(text)
    }
}

impl fmt::Display for Selector {
    /// Canonical text that [`Selector::parse`] turns back into an equal selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        display::write_condition(f, &self.condition, 0)
    }
}

/// Fuzzing entry point (`fuzz/fuzz_targets/selector_parse.rs` is a shim over it): parses any
/// bytes and, on success, checks that the canonical text parses back to the same selector and
/// that evaluation does not panic. Panics when a property is violated, which is what a fuzzer
/// looks for; never call it in the broker.
pub fn fuzz_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(selector) = Selector::parse(text) else {
        return;
    };
    let printed = selector.to_string();
    match Selector::parse(&printed) {
        Ok(reparsed) => assert!(reparsed == selector, "{text:?} printed as {printed:?} parsed differently"),
        Err(error) => panic!("{text:?} printed as {printed:?} which does not parse: {error}"),
    }
    let message =
        [Property::new("a", 1i64), Property::new("b", "x"), Property::new("c", 2.5), Property::new("d", true)];
    let _ = selector.evaluate(&message);
}
