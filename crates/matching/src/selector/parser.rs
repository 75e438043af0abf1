//! Recursive-descent parser from tokens to an untyped tree with spans.
//!
//! Precedence, loosest first: `OR`, `AND`, `NOT`, predicates (`= <> < <= > >=`, `BETWEEN`, `IN`,
//! `LIKE`, `IS NULL`; not associative), `+ -`, `* /`, unary `+ -`. Operator chains are built in
//! loops, AND/OR chains as one n-ary node. Each recursion into a nested expression (a parenthesis,
//! NOT, a unary sign) is counted, and each node records the depth of its subtree, so neither the
//! parser nor any later recursive walk can be driven past [`super::MAX_SELECTOR_DEPTH`].

use super::ast::{Arithmetic, Comparison};
use super::error::{SelectorError, Span};
use super::lexer::{Keyword, Symbol, Token};
use super::MAX_SELECTOR_DEPTH;

/// A node of the untyped tree; the checker turns it into the typed one.
#[derive(Debug)]
pub(crate) struct Expr {
    pub(crate) kind: Kind,
    pub(crate) span: Span,
    /// Height of this subtree, 1 for a leaf.
    depth: usize,
}

/// What an [`Expr`] is.
#[derive(Debug)]
pub(crate) enum Kind {
    Identifier(Box<str>),
    Str(Box<str>),
    /// Unsigned; the checker applies a leading minus.
    Int(u64),
    Float(f64),
    Bool(bool),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Compare(Comparison, Box<Expr>, Box<Expr>),
    Between {
        operand: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    In {
        operand: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
    Like {
        operand: Box<Expr>,
        pattern: Box<Expr>,
        escape: Option<Box<Expr>>,
        negated: bool,
    },
    IsNull {
        operand: Box<Expr>,
        negated: bool,
    },
    Negate(Box<Expr>),
    UnaryPlus(Box<Expr>),
    Arithmetic(Arithmetic, Box<Expr>, Box<Expr>),
}

/// Parses a whole token list (ending with [`Token::End`]).
pub(crate) fn parse(tokens: &[(Token, Span)]) -> Result<Expr, SelectorError> {
    let mut parser = Parser { tokens, at: 0, nesting: 0 };
    let expr = parser.or()?;
    if !parser.at_end() {
        return Err(parser.unexpected("AND, OR or the end of the selector"));
    }
    Ok(expr)
}

struct Parser<'a> {
    tokens: &'a [(Token, Span)],
    at: usize,
    /// Current recursion depth through parentheses, NOT and unary signs.
    nesting: usize,
}

/// The depth of a node over `children`, or an error if the tree gets too deep.
fn depth_over(span: Span, children: &[&Expr]) -> Result<usize, SelectorError> {
    let depth = 1 + children.iter().map(|child| child.depth).max().unwrap_or(0);
    if depth > MAX_SELECTOR_DEPTH {
        return Err(SelectorError::TooDeep { span, max: MAX_SELECTOR_DEPTH });
    }
    Ok(depth)
}

fn leaf(kind: Kind, span: Span) -> Expr {
    Expr { kind, span, depth: 1 }
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        self.tokens.get(self.at).map_or(&Token::End, |(token, _)| token)
    }

    fn span(&self) -> Span {
        self.tokens.get(self.at).or(self.tokens.last()).map_or(Span::new(0, 0), |(_, span)| *span)
    }

    fn at_end(&self) -> bool {
        *self.peek() == Token::End
    }

    fn advance(&mut self) -> (Token, Span) {
        let current = (self.peek().clone(), self.span());
        if self.at < self.tokens.len() {
            self.at += 1;
        }
        current
    }

    fn eat_keyword(&mut self, keyword: Keyword) -> bool {
        let found = *self.peek() == Token::Keyword(keyword);
        if found {
            self.advance();
        }
        found
    }

    fn eat_symbol(&mut self, symbol: Symbol) -> bool {
        let found = *self.peek() == Token::Symbol(symbol);
        if found {
            self.advance();
        }
        found
    }

    fn unexpected(&self, expected: &str) -> SelectorError {
        SelectorError::UnexpectedToken {
            span: self.span(),
            found: self.peek().describe(),
            expected: expected.to_owned(),
        }
    }

    fn expect_keyword(&mut self, keyword: Keyword, expected: &str) -> Result<(), SelectorError> {
        if self.eat_keyword(keyword) {
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn expect_symbol(&mut self, symbol: Symbol, expected: &str) -> Result<(), SelectorError> {
        if self.eat_symbol(symbol) {
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    /// Runs `inner` one nesting level deeper, refusing past the limit.
    fn nested<T>(&mut self, inner: impl FnOnce(&mut Self) -> Result<T, SelectorError>) -> Result<T, SelectorError> {
        if self.nesting >= MAX_SELECTOR_DEPTH {
            return Err(SelectorError::TooDeep { span: self.span(), max: MAX_SELECTOR_DEPTH });
        }
        self.nesting += 1;
        let result = inner(self);
        self.nesting -= 1;
        result
    }

    fn or(&mut self) -> Result<Expr, SelectorError> {
        self.chain(Keyword::Or, Parser::and, Kind::Or)
    }

    fn and(&mut self) -> Result<Expr, SelectorError> {
        self.chain(Keyword::And, Parser::not, Kind::And)
    }

    /// `operand (keyword operand)*` as one n-ary node.
    fn chain(
        &mut self,
        keyword: Keyword,
        operand: fn(&mut Self) -> Result<Expr, SelectorError>,
        build: fn(Vec<Expr>) -> Kind,
    ) -> Result<Expr, SelectorError> {
        let first = operand(self)?;
        if *self.peek() != Token::Keyword(keyword) {
            return Ok(first);
        }
        let mut operands = vec![first];
        while self.eat_keyword(keyword) {
            operands.push(operand(self)?);
        }
        let span = operands[0].span.to(operands[operands.len() - 1].span);
        let depth = depth_over(span, &operands.iter().collect::<Vec<_>>())?;
        Ok(Expr { kind: build(operands), span, depth })
    }

    fn not(&mut self) -> Result<Expr, SelectorError> {
        let start = self.span();
        if !self.eat_keyword(Keyword::Not) {
            return self.predicate();
        }
        let inner = self.nested(Parser::not)?;
        let span = start.to(inner.span);
        let depth = depth_over(span, &[&inner])?;
        Ok(Expr { kind: Kind::Not(Box::new(inner)), span, depth })
    }

    fn predicate(&mut self) -> Result<Expr, SelectorError> {
        let left = self.sum()?;
        let comparison = match self.peek() {
            Token::Symbol(Symbol::Equal) => Some(Comparison::Equal),
            Token::Symbol(Symbol::NotEqual) => Some(Comparison::NotEqual),
            Token::Symbol(Symbol::Less) => Some(Comparison::Less),
            Token::Symbol(Symbol::LessOrEqual) => Some(Comparison::LessOrEqual),
            Token::Symbol(Symbol::Greater) => Some(Comparison::Greater),
            Token::Symbol(Symbol::GreaterOrEqual) => Some(Comparison::GreaterOrEqual),
            _ => None,
        };
        if let Some(comparison) = comparison {
            self.advance();
            let right = self.sum()?;
            let span = left.span.to(right.span);
            let depth = depth_over(span, &[&left, &right])?;
            return Ok(Expr { kind: Kind::Compare(comparison, Box::new(left), Box::new(right)), span, depth });
        }
        if self.eat_keyword(Keyword::Is) {
            let negated = self.eat_keyword(Keyword::Not);
            let end = self.span();
            self.expect_keyword(Keyword::Null, if negated { "NULL" } else { "NOT or NULL" })?;
            let span = left.span.to(end);
            let depth = depth_over(span, &[&left])?;
            return Ok(Expr { kind: Kind::IsNull { operand: Box::new(left), negated }, span, depth });
        }
        let negated = self.eat_keyword(Keyword::Not);
        match self.peek() {
            Token::Keyword(Keyword::Between) => self.between(left, negated),
            Token::Keyword(Keyword::In) => self.in_list(left, negated),
            Token::Keyword(Keyword::Like) => self.like(left, negated),
            _ if negated => Err(self.unexpected("BETWEEN, IN or LIKE after NOT")),
            _ => Ok(left),
        }
    }

    fn between(&mut self, operand: Expr, negated: bool) -> Result<Expr, SelectorError> {
        self.advance();
        let low = self.sum()?;
        self.expect_keyword(Keyword::And, "AND between the bounds of BETWEEN")?;
        let high = self.sum()?;
        let span = operand.span.to(high.span);
        let depth = depth_over(span, &[&operand, &low, &high])?;
        let kind = Kind::Between { operand: Box::new(operand), low: Box::new(low), high: Box::new(high), negated };
        Ok(Expr { kind, span, depth })
    }

    fn in_list(&mut self, operand: Expr, negated: bool) -> Result<Expr, SelectorError> {
        self.advance();
        self.expect_symbol(Symbol::Open, "'(' to open the IN list")?;
        let mut list = vec![self.literal()?];
        while self.eat_symbol(Symbol::Comma) {
            list.push(self.literal()?);
        }
        let end = self.span();
        self.expect_symbol(Symbol::Close, "',' or ')' in the IN list")?;
        let span = operand.span.to(end);
        let mut children: Vec<&Expr> = list.iter().collect();
        children.push(&operand);
        let depth = depth_over(span, &children)?;
        Ok(Expr { kind: Kind::In { operand: Box::new(operand), list, negated }, span, depth })
    }

    /// A literal in an IN list: a string, a number with an optional sign, TRUE or FALSE.
    fn literal(&mut self) -> Result<Expr, SelectorError> {
        let start = self.span();
        let expected = "a string, number or boolean literal";
        match self.peek() {
            Token::Symbol(Symbol::Minus) | Token::Symbol(Symbol::Plus) => {
                let (sign, _) = self.advance();
                if !matches!(self.peek(), Token::Int(_) | Token::Float(_)) {
                    return Err(self.unexpected("a number after the sign"));
                }
                let number = self.primary()?;
                let span = start.to(number.span);
                let build = if sign == Token::Symbol(Symbol::Minus) { Kind::Negate } else { Kind::UnaryPlus };
                Ok(Expr { kind: build(Box::new(number)), span, depth: 2 })
            }
            Token::Str(_) | Token::Int(_) | Token::Float(_) | Token::Keyword(Keyword::True | Keyword::False) => {
                self.primary()
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    fn like(&mut self, operand: Expr, negated: bool) -> Result<Expr, SelectorError> {
        self.advance();
        let pattern = self.string_literal("a string literal pattern after LIKE")?;
        let mut end = pattern.span;
        let escape = if self.eat_keyword(Keyword::Escape) {
            let escape = self.string_literal("a one-character string literal after ESCAPE")?;
            end = escape.span;
            Some(Box::new(escape))
        } else {
            None
        };
        let span = operand.span.to(end);
        let depth = depth_over(span, &[&operand, &pattern])?;
        let kind = Kind::Like { operand: Box::new(operand), pattern: Box::new(pattern), escape, negated };
        Ok(Expr { kind, span, depth })
    }

    fn string_literal(&mut self, expected: &str) -> Result<Expr, SelectorError> {
        match self.peek() {
            Token::Str(_) => self.primary(),
            _ => Err(self.unexpected(expected)),
        }
    }

    fn sum(&mut self) -> Result<Expr, SelectorError> {
        self.binary(Parser::product, |symbol| match symbol {
            Symbol::Plus => Some(Arithmetic::Add),
            Symbol::Minus => Some(Arithmetic::Subtract),
            _ => None,
        })
    }

    fn product(&mut self) -> Result<Expr, SelectorError> {
        self.binary(Parser::unary, |symbol| match symbol {
            Symbol::Times => Some(Arithmetic::Multiply),
            Symbol::Divide => Some(Arithmetic::Divide),
            _ => None,
        })
    }

    /// A left-associative chain of binary arithmetic operators.
    fn binary(
        &mut self,
        operand: fn(&mut Self) -> Result<Expr, SelectorError>,
        operator: fn(Symbol) -> Option<Arithmetic>,
    ) -> Result<Expr, SelectorError> {
        let mut left = operand(self)?;
        while let Token::Symbol(symbol) = self.peek() {
            let Some(op) = operator(*symbol) else { break };
            self.advance();
            let right = operand(self)?;
            let span = left.span.to(right.span);
            let depth = depth_over(span, &[&left, &right])?;
            left = Expr { kind: Kind::Arithmetic(op, Box::new(left), Box::new(right)), span, depth };
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, SelectorError> {
        let start = self.span();
        let build = match self.peek() {
            Token::Symbol(Symbol::Minus) => Kind::Negate,
            Token::Symbol(Symbol::Plus) => Kind::UnaryPlus,
            _ => return self.primary(),
        };
        self.advance();
        let inner = self.nested(Parser::unary)?;
        let span = start.to(inner.span);
        let depth = depth_over(span, &[&inner])?;
        Ok(Expr { kind: build(Box::new(inner)), span, depth })
    }

    fn primary(&mut self) -> Result<Expr, SelectorError> {
        let span = self.span();
        let kind = match self.peek() {
            Token::Identifier(name) => Kind::Identifier(name.clone()),
            Token::Str(text) => Kind::Str(text.clone()),
            Token::Int(value) => Kind::Int(*value),
            Token::Float(value) => Kind::Float(*value),
            Token::Keyword(Keyword::True) => Kind::Bool(true),
            Token::Keyword(Keyword::False) => Kind::Bool(false),
            Token::Symbol(Symbol::Open) => {
                self.advance();
                let inner = self.nested(Parser::or)?;
                self.expect_symbol(Symbol::Close, "')' or an operator")?;
                return Ok(inner);
            }
            _ => return Err(self.unexpected("an identifier, a literal, NOT or '('")),
        };
        self.advance();
        Ok(leaf(kind, span))
    }
}
