//! The selector lexer: text to tokens with spans.
//!
//! Keywords are case-insensitive, as in SQL. Identifiers are letters, digits, `_` and `$`, not
//! starting with a digit, or any text in double quotes (`"content-type"`, `""` for a quote).
//! Strings are in single quotes (`''` for a quote). Numbers are decimal: `42` is an integer,
//! `4.2`, `.5`, `4.` and `1e3` are floats.

use super::error::{SelectorError, Span};

/// One token of selector text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Token {
    /// A property name (bare or double-quoted).
    Identifier(Box<str>),
    /// A keyword (stored uppercase).
    Keyword(Keyword),
    /// A single-quoted string, quotes removed.
    Str(Box<str>),
    /// An unsigned integer literal; the parser applies a leading `-` (so `-9223372036854775808`
    /// fits), hence the wider type.
    Int(u64),
    /// A finite float literal.
    Float(f64),
    /// An operator or punctuation.
    Symbol(Symbol),
    /// The end of the text.
    End,
}

/// Reserved words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keyword {
    And,
    Or,
    Not,
    Between,
    In,
    Like,
    Escape,
    Is,
    Null,
    True,
    False,
}

impl Keyword {
    const ALL: [(&'static str, Keyword); 11] = [
        ("AND", Keyword::And),
        ("OR", Keyword::Or),
        ("NOT", Keyword::Not),
        ("BETWEEN", Keyword::Between),
        ("IN", Keyword::In),
        ("LIKE", Keyword::Like),
        ("ESCAPE", Keyword::Escape),
        ("IS", Keyword::Is),
        ("NULL", Keyword::Null),
        ("TRUE", Keyword::True),
        ("FALSE", Keyword::False),
    ];

    /// The keyword spelled `word` in any case, if it is one.
    pub(crate) fn from_word(word: &str) -> Option<Keyword> {
        Keyword::ALL.iter().find(|(name, _)| name.eq_ignore_ascii_case(word)).map(|(_, keyword)| *keyword)
    }

    /// The canonical (uppercase) spelling.
    pub(crate) fn as_str(self) -> &'static str {
        Keyword::ALL.iter().find(|(_, keyword)| *keyword == self).map_or("?", |(name, _)| name)
    }
}

/// Operators and punctuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Symbol {
    Equal,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Plus,
    Minus,
    Times,
    Divide,
    Open,
    Close,
    Comma,
}

impl Symbol {
    /// The symbol's text.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Symbol::Equal => "=",
            Symbol::NotEqual => "<>",
            Symbol::Less => "<",
            Symbol::LessOrEqual => "<=",
            Symbol::Greater => ">",
            Symbol::GreaterOrEqual => ">=",
            Symbol::Plus => "+",
            Symbol::Minus => "-",
            Symbol::Times => "*",
            Symbol::Divide => "/",
            Symbol::Open => "(",
            Symbol::Close => ")",
            Symbol::Comma => ",",
        }
    }
}

impl Token {
    /// How an error message names this token.
    pub(crate) fn describe(&self) -> String {
        match self {
            Token::Identifier(name) => format!("identifier {name}"),
            Token::Keyword(keyword) => format!("keyword {}", keyword.as_str()),
            Token::Str(text) => format!("string '{text}'"),
            Token::Int(value) => format!("number {value}"),
            Token::Float(value) => format!("number {value:?}"),
            Token::Symbol(symbol) => format!("'{}'", symbol.as_str()),
            Token::End => "the end of the selector".to_owned(),
        }
    }
}

/// True for characters that may start a bare identifier.
pub(crate) fn is_identifier_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == '$'
}

/// True for characters that may continue a bare identifier.
pub(crate) fn is_identifier_part(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Splits `text` into tokens, ending with [`Token::End`].
pub(crate) fn tokenize(text: &str) -> Result<Vec<(Token, Span)>, SelectorError> {
    let mut lexer = Lexer { text, at: 0 };
    let mut tokens = Vec::new();
    loop {
        let (token, span) = lexer.next()?;
        let end = token == Token::End;
        tokens.push((token, span));
        if end {
            return Ok(tokens);
        }
    }
}

struct Lexer<'a> {
    text: &'a str,
    /// Byte offset of the next unread character.
    at: usize,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.text[self.at..].chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }

    fn eat_while(&mut self, keep: impl Fn(char) -> bool) {
        while self.peek().is_some_and(&keep) {
            self.bump();
        }
    }

    fn next(&mut self) -> Result<(Token, Span), SelectorError> {
        self.eat_while(char::is_whitespace);
        let start = self.at;
        let Some(c) = self.peek() else {
            return Ok((Token::End, Span::new(start, start)));
        };
        let token = match c {
            '\'' => Token::Str(self.quoted('\'', "string literal")?),
            '"' => Token::Identifier(self.quoted('"', "quoted identifier")?),
            c if c.is_ascii_digit() => self.number()?,
            '.' if self.peek_second().is_some_and(|c| c.is_ascii_digit()) => self.number()?,
            c if is_identifier_start(c) => {
                self.eat_while(is_identifier_part);
                let word = &self.text[start..self.at];
                Keyword::from_word(word).map_or_else(|| Token::Identifier(word.into()), Token::Keyword)
            }
            _ => Token::Symbol(self.symbol()?),
        };
        Ok((token, Span::new(start, self.at)))
    }

    /// Reads a `quote`-delimited text where a doubled quote stands for one.
    fn quoted(&mut self, quote: char, what: &'static str) -> Result<Box<str>, SelectorError> {
        let start = self.at;
        self.bump();
        let mut value = String::new();
        loop {
            match self.bump() {
                None => {
                    return Err(SelectorError::Unterminated { span: Span::new(start, self.at), what, quote });
                }
                Some(c) if c == quote && self.peek() == Some(quote) => {
                    self.bump();
                    value.push(quote);
                }
                Some(c) if c == quote => return Ok(value.into()),
                Some(c) => value.push(c),
            }
        }
    }

    fn number(&mut self) -> Result<Token, SelectorError> {
        let start = self.at;
        self.eat_while(|c| c.is_ascii_digit());
        let mut float = false;
        if self.peek() == Some('.') {
            float = true;
            self.bump();
            self.eat_while(|c| c.is_ascii_digit());
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let before_exponent = self.at;
            self.bump();
            if matches!(self.peek(), Some('+' | '-')) {
                self.bump();
            }
            if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                float = true;
                self.eat_while(|c| c.is_ascii_digit());
            } else {
                self.at = before_exponent;
            }
        }
        if let Some(c) = self.peek().filter(|c| is_identifier_part(*c) || *c == '.') {
            let span = Span::new(self.at, self.at + c.len_utf8());
            return Err(SelectorError::UnexpectedCharacter {
                span,
                found: c,
                expected: "an operator or a space after a number",
            });
        }
        let text = &self.text[start..self.at];
        let span = Span::new(start, self.at);
        if float {
            return match text.parse::<f64>() {
                Ok(value) if value.is_finite() => Ok(Token::Float(value)),
                _ => Err(SelectorError::NumberOutOfRange {
                    span,
                    found: text.to_owned(),
                    expected: "a float of at most about 1.8e308",
                }),
            };
        }
        match text.parse::<u64>() {
            Ok(value) if value <= 1 << 63 => Ok(Token::Int(value)),
            _ => Err(SelectorError::NumberOutOfRange {
                span,
                found: text.to_owned(),
                expected: "an integer between -9223372036854775808 and 9223372036854775807",
            }),
        }
    }

    fn symbol(&mut self) -> Result<Symbol, SelectorError> {
        let start = self.at;
        let c = self.bump().unwrap_or(' ');
        let symbol = match (c, self.peek()) {
            ('<', Some('>')) => Symbol::NotEqual,
            ('<', Some('=')) => Symbol::LessOrEqual,
            ('>', Some('=')) => Symbol::GreaterOrEqual,
            ('=', _) => Symbol::Equal,
            ('<', _) => Symbol::Less,
            ('>', _) => Symbol::Greater,
            ('+', _) => Symbol::Plus,
            ('-', _) => Symbol::Minus,
            ('*', _) => Symbol::Times,
            ('/', _) => Symbol::Divide,
            ('(', _) => Symbol::Open,
            (')', _) => Symbol::Close,
            (',', _) => Symbol::Comma,
            (found, _) => {
                return Err(SelectorError::UnexpectedCharacter {
                    span: Span::new(start, self.at),
                    found,
                    expected: "an identifier, a literal, an operator or a parenthesis",
                });
            }
        };
        if matches!(symbol, Symbol::NotEqual | Symbol::LessOrEqual | Symbol::GreaterOrEqual) {
            self.bump();
        }
        Ok(symbol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<Token> {
        tokenize(text).unwrap().into_iter().map(|(token, _)| token).collect()
    }

    #[test]
    fn keywords_are_case_insensitive_and_identifiers_keep_their_case() {
        assert_eq!(
            tokens("Price and NOT x"),
            [
                Token::Identifier("Price".into()),
                Token::Keyword(Keyword::And),
                Token::Keyword(Keyword::Not),
                Token::Identifier("x".into()),
                Token::End
            ]
        );
    }

    #[test]
    fn quotes_are_escaped_by_doubling() {
        assert_eq!(tokens("'it''s'"), [Token::Str("it's".into()), Token::End]);
        assert_eq!(tokens("\"a\"\"b\""), [Token::Identifier("a\"b".into()), Token::End]);
    }

    #[test]
    fn numbers_are_integers_unless_they_have_a_point_or_exponent() {
        assert_eq!(
            tokens("42 4.2 .5 4. 1e3 2E-2"),
            [
                Token::Int(42),
                Token::Float(4.2),
                Token::Float(0.5),
                Token::Float(4.0),
                Token::Float(1000.0),
                Token::Float(0.02),
                Token::End
            ]
        );
    }

    #[test]
    fn two_character_operators_are_single_tokens() {
        assert_eq!(
            tokens("<><=>=<>="),
            [
                Token::Symbol(Symbol::NotEqual),
                Token::Symbol(Symbol::LessOrEqual),
                Token::Symbol(Symbol::GreaterOrEqual),
                Token::Symbol(Symbol::NotEqual),
                Token::Symbol(Symbol::Equal),
                Token::End
            ]
        );
    }

    #[test]
    fn spans_cover_each_token() {
        let spans: Vec<Span> = tokenize("ab <= 'x'").unwrap().into_iter().map(|(_, span)| span).collect();
        assert_eq!(spans, [Span::new(0, 2), Span::new(3, 5), Span::new(6, 9), Span::new(9, 9)]);
    }

    #[test]
    fn lexical_errors_point_at_their_spot() {
        assert_eq!(
            tokenize("a = 'open"),
            Err(SelectorError::Unterminated { span: Span::new(4, 9), what: "string literal", quote: '\'' })
        );
        assert!(matches!(tokenize("a # b"), Err(SelectorError::UnexpectedCharacter { found: '#', .. })));
        assert!(matches!(tokenize("12abc"), Err(SelectorError::UnexpectedCharacter { found: 'a', .. })));
        assert!(matches!(tokenize("1.2.3"), Err(SelectorError::UnexpectedCharacter { found: '.', .. })));
        assert!(matches!(tokenize("9223372036854775809"), Err(SelectorError::NumberOutOfRange { .. })));
        assert!(matches!(tokenize("1e999"), Err(SelectorError::NumberOutOfRange { .. })));
        assert_eq!(tokens("9223372036854775808"), [Token::Int(1 << 63), Token::End]);
    }
}
