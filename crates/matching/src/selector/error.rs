//! Selector errors: where, what was found, what was expected; and a caret renderer for the CLI.

use std::fmt;

use thiserror::Error;

/// A byte range of the selector text, `start..end`. Points errors at their spot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte (equal to `start` for a point, such as the end of input).
    pub end: usize,
}

impl Span {
    /// A span from `start` to `end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span holding both.
    pub(crate) fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// Why a selector was rejected. Every variant but [`SelectorError::TooLong`] carries the span it
/// is about, so a client can be told exactly where its selector went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectorError {
    /// The text is longer than the limit; checked before anything else, so a huge selector costs
    /// the broker nothing.
    #[error("a selector may be at most {max} bytes long, found {length}")]
    TooLong {
        /// Length of the text in bytes.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// Nesting (parentheses, NOT, arithmetic) deeper than the limit.
    #[error("at {span}: the selector nests deeper than {max} levels")]
    TooDeep {
        /// Where the limit was crossed.
        span: Span,
        /// The limit.
        max: usize,
    },
    /// A character that starts no token.
    #[error("at {span}: unexpected character {found:?}; expected {expected}")]
    UnexpectedCharacter {
        /// The character.
        span: Span,
        /// The character found.
        found: char,
        /// What could have been there.
        expected: &'static str,
    },
    /// A string literal or quoted identifier with no closing quote.
    #[error("at {span}: {what} is not closed; expected a closing {quote}")]
    Unterminated {
        /// From the opening quote to the end of the text.
        span: Span,
        /// "string literal" or "quoted identifier".
        what: &'static str,
        /// The missing quote character.
        quote: char,
    },
    /// A number that does not fit its type (integer beyond 64 bits, float beyond f64).
    #[error("at {span}: the number {found} is out of range; expected {expected}")]
    NumberOutOfRange {
        /// The literal.
        span: Span,
        /// The literal's text.
        found: String,
        /// The range that is accepted.
        expected: &'static str,
    },
    /// A token where the grammar wants something else.
    #[error("at {span}: expected {expected}, found {found}")]
    UnexpectedToken {
        /// The token found.
        span: Span,
        /// A description of the token found.
        found: String,
        /// A description of what the grammar accepts here.
        expected: String,
    },
    /// A well-formed expression of the wrong type for its place, such as `'a' + 1`.
    #[error("at {span}: type error: expected {expected}, found {found}")]
    TypeMismatch {
        /// The offending expression.
        span: Span,
        /// Its type ("a string", "a condition", ...).
        found: String,
        /// The type the context needs.
        expected: String,
    },
    /// A LIKE pattern or ESCAPE clause that cannot be used.
    #[error("at {span}: invalid LIKE pattern: {reason}")]
    InvalidLike {
        /// The pattern or escape literal.
        span: Span,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl SelectorError {
    /// The part of the text the error is about, if it is about a part.
    pub fn span(&self) -> Option<Span> {
        match self {
            SelectorError::TooLong { .. } => None,
            SelectorError::TooDeep { span, .. }
            | SelectorError::UnexpectedCharacter { span, .. }
            | SelectorError::Unterminated { span, .. }
            | SelectorError::NumberOutOfRange { span, .. }
            | SelectorError::UnexpectedToken { span, .. }
            | SelectorError::TypeMismatch { span, .. }
            | SelectorError::InvalidLike { span, .. } => Some(*span),
        }
    }

    /// Renders the error for a terminal: the message, the offending line of `source` (the text
    /// that was parsed), and carets under the spot. This is what `tidings sub --selector` prints.
    ///
    /// ```text
    /// error: at 8..11: expected a value, found keyword AND
    ///   |
    ///   | price > AND 3
    ///   |         ^^^
    /// ```
    pub fn render(&self, source: &str) -> String {
        let mut text = format!("error: {self}\n");
        let Some(span) = self.span() else {
            return text;
        };
        let start = floor_char_boundary(source, span.start);
        let line_start = source[..start].rfind('\n').map_or(0, |at| at + 1);
        let line_end = source[start..].find('\n').map_or(source.len(), |at| start + at);
        let line = &source[line_start..line_end];
        let end = floor_char_boundary(source, span.end.min(line_end).max(start));
        let column = display_width(&source[line_start..start]);
        let width = display_width(&source[start..end]).max(1);
        text.push_str("  |\n");
        text.push_str(&format!("  | {}\n", line.replace('\t', " ")));
        text.push_str(&format!("  | {}{}\n", " ".repeat(column), "^".repeat(width)));
        text
    }
}

/// The largest char boundary of `text` at or before `at` (clamped to the text).
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Columns a terminal uses for `text`, counting one per character (good enough for carets under
/// the ASCII selectors people type; wide characters shift the caret, never panic).
fn display_width(text: &str) -> usize {
    text.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caret_sits_under_the_offending_token() {
        let error = SelectorError::UnexpectedToken {
            span: Span::new(8, 11),
            found: "keyword AND".into(),
            expected: "a value".into(),
        };
        let rendered = error.render("price > AND 3");
        assert_eq!(
            rendered,
            "error: at 8..11: expected a value, found keyword AND\n  |\n  | price > AND 3\n  |         ^^^\n"
        );
    }

    #[test]
    fn the_end_of_input_gets_a_single_caret_after_the_text() {
        let error = SelectorError::UnexpectedToken {
            span: Span::new(7, 7),
            found: "the end of the selector".into(),
            expected: "a value".into(),
        };
        assert!(error.render("price >").ends_with("  | price >\n  |        ^\n"));
    }

    #[test]
    fn only_the_offending_line_of_a_multi_line_selector_is_shown() {
        let error = SelectorError::UnexpectedCharacter { span: Span::new(9, 10), found: '#', expected: "a token" };
        let rendered = error.render("a = 1\nOR #");
        assert!(rendered.ends_with("  | OR #\n  |    ^\n"), "{rendered}");
    }

    #[test]
    fn errors_without_a_spot_render_only_the_message() {
        let error = SelectorError::TooLong { length: 9000, max: 4096 };
        assert_eq!(error.span(), None);
        assert_eq!(error.render("..."), "error: a selector may be at most 4096 bytes long, found 9000\n");
    }

    #[test]
    fn spans_off_a_character_boundary_or_past_the_end_do_not_panic() {
        let error = SelectorError::TypeMismatch { span: Span::new(1, 99), found: "x".into(), expected: "y".into() };
        let rendered = error.render("é = 1");
        assert!(rendered.contains("  | é = 1\n"), "{rendered}");
    }
}
