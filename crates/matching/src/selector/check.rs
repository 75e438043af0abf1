//! The type checker: from the untyped tree to the typed one, or a type error with its span.
//!
//! Static types are known for literals and for expressions built from them; a property's type is
//! only known when a message arrives, so a property fits anywhere and a mismatch at run time is
//! UNKNOWN. What is rejected here is what can never be TRUE: `'a' + 1`, `'a' < 'b'` (strings and
//! booleans only support `=` and `<>`), `'a' = 1`, a condition used as a value or the reverse.

use super::ast::{Condition, Literal, Name, Operand};
use super::error::{SelectorError, Span};
use super::like::LikePattern;
use super::parser::{Expr, Kind};

/// What an expression is known to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Number,
    Str,
    Bool,
    /// A property: any type, known only per message.
    Any,
}

impl Type {
    fn describe(self) -> &'static str {
        match self {
            Type::Number => "a number",
            Type::Str => "a string",
            Type::Bool => "a boolean",
            Type::Any => "a property",
        }
    }

    /// Whether values of the two types can ever be compared.
    fn compatible(self, other: Type) -> bool {
        self == Type::Any || other == Type::Any || self == other
    }
}

fn mismatch(span: Span, found: &str, expected: &str) -> SelectorError {
    SelectorError::TypeMismatch { span, found: found.to_owned(), expected: expected.to_owned() }
}

/// Checks the top of a selector, which must be a condition.
pub(crate) fn check(expr: Expr) -> Result<Condition<Name>, SelectorError> {
    condition(expr)
}

fn condition(expr: Expr) -> Result<Condition<Name>, SelectorError> {
    let span = expr.span;
    Ok(match expr.kind {
        Kind::Identifier(name) => Condition::Property(name),
        Kind::Bool(value) => Condition::Literal(value),
        Kind::Not(inner) => Condition::Not(Box::new(condition(*inner)?)),
        Kind::And(operands) => Condition::And(operands.into_iter().map(condition).collect::<Result<_, _>>()?),
        Kind::Or(operands) => Condition::Or(operands.into_iter().map(condition).collect::<Result<_, _>>()?),
        Kind::Compare(comparison, left, right) => {
            let (left_span, right_span) = (left.span, right.span);
            let (left, left_type) = operand(*left)?;
            let (right, right_type) = operand(*right)?;
            if !left_type.compatible(right_type) {
                let side = left_type.describe();
                let expected = format!("{side} to compare with {} on the left", side.replacen("a ", "the ", 1));
                return Err(mismatch(right_span, right_type.describe(), &expected));
            }
            if comparison.is_ordering() {
                for (ty, span) in [(left_type, left_span), (right_type, right_span)] {
                    if matches!(ty, Type::Str | Type::Bool) {
                        let expected = "a number (strings and booleans only support = and <>)";
                        return Err(mismatch(span, ty.describe(), expected));
                    }
                }
            }
            Condition::Compare(comparison, left, right)
        }
        Kind::Between { operand: value, low, high, negated } => {
            let value = numeric(*value, "a number before BETWEEN")?;
            let low = numeric(*low, "a number as the lower bound")?;
            let high = numeric(*high, "a number as the upper bound")?;
            negate_if(negated, Condition::Between(value, low, high))
        }
        Kind::In { operand: value, list, negated } => in_list(*value, list, negated)?,
        Kind::Like { operand: value, pattern, escape, negated } => like(*value, *pattern, escape, negated)?,
        Kind::IsNull { operand: value, negated } => negate_if(negated, Condition::IsNull(operand(*value)?.0)),
        Kind::Str(_) => return Err(mismatch(span, "a string", "a condition")),
        Kind::Int(_) | Kind::Float(_) | Kind::Negate(_) | Kind::UnaryPlus(_) | Kind::Arithmetic(..) => {
            return Err(mismatch(span, "a number", "a condition"));
        }
    })
}

/// `NOT x` for the negated predicate forms (`NOT BETWEEN`, `NOT IN`, `NOT LIKE`, `IS NOT NULL`),
/// which mean exactly that in three-valued logic.
fn negate_if(negated: bool, condition: Condition<Name>) -> Condition<Name> {
    if negated {
        Condition::Not(Box::new(condition))
    } else {
        condition
    }
}

fn numeric(expr: Expr, expected: &str) -> Result<Operand<Name>, SelectorError> {
    let span = expr.span;
    let (value, ty) = operand(expr)?;
    match ty {
        Type::Number | Type::Any => Ok(value),
        other => Err(mismatch(span, other.describe(), expected)),
    }
}

fn operand(expr: Expr) -> Result<(Operand<Name>, Type), SelectorError> {
    let span = expr.span;
    Ok(match expr.kind {
        Kind::Identifier(name) => (Operand::Property(name), Type::Any),
        Kind::Str(text) => (Operand::Literal(Literal::Str(text)), Type::Str),
        Kind::Bool(value) => (Operand::Literal(Literal::Bool(value)), Type::Bool),
        Kind::Float(value) => (Operand::Literal(Literal::Float(value)), Type::Number),
        Kind::Int(magnitude) => match i64::try_from(magnitude) {
            Ok(value) => (Operand::Literal(Literal::Int(value)), Type::Number),
            Err(_) => return Err(out_of_range(span, magnitude)),
        },
        Kind::Negate(inner) => (negate(*inner, span)?, Type::Number),
        Kind::UnaryPlus(inner) => (numeric(*inner, "a number after unary +")?, Type::Number),
        Kind::Arithmetic(op, left, right) => {
            let left = numeric(*left, "a number in arithmetic")?;
            let right = numeric(*right, "a number in arithmetic")?;
            (Operand::Arithmetic(op, Box::new(left), Box::new(right)), Type::Number)
        }
        Kind::Not(_)
        | Kind::And(_)
        | Kind::Or(_)
        | Kind::Compare(..)
        | Kind::Between { .. }
        | Kind::In { .. }
        | Kind::Like { .. }
        | Kind::IsNull { .. } => return Err(mismatch(span, "a condition", "a value")),
    })
}

fn out_of_range(span: Span, magnitude: u64) -> SelectorError {
    SelectorError::NumberOutOfRange {
        span,
        found: magnitude.to_string(),
        expected: "an integer between -9223372036854775808 and 9223372036854775807",
    }
}

/// Unary minus; folded into numeric literals so that `-5` is one literal and prints back as one.
fn negate(inner: Expr, span: Span) -> Result<Operand<Name>, SelectorError> {
    if let Kind::Int(magnitude) = inner.kind {
        let value = 0i128 - i128::from(magnitude);
        return i64::try_from(value)
            .map(|v| Operand::Literal(Literal::Int(v)))
            .map_err(|_| out_of_range(span, magnitude));
    }
    match numeric(inner, "a number after unary -")? {
        Operand::Literal(Literal::Int(value)) => match value.checked_neg() {
            Some(negated) => Ok(Operand::Literal(Literal::Int(negated))),
            None => Err(out_of_range(span, value.unsigned_abs())),
        },
        Operand::Literal(Literal::Float(value)) => Ok(Operand::Literal(Literal::Float(-value))),
        other => Ok(Operand::Negate(Box::new(other))),
    }
}

/// A literal of an IN list (the parser only lets literals, possibly signed, through).
fn list_literal(expr: Expr) -> Result<(Literal, Type, Span), SelectorError> {
    let span = expr.span;
    match operand(expr)? {
        (Operand::Literal(literal), ty) => Ok((literal, ty, span)),
        (_, _) => Err(mismatch(span, "an expression", "a literal")),
    }
}

fn in_list(value: Expr, list: Vec<Expr>, negated: bool) -> Result<Condition<Name>, SelectorError> {
    let value_span = value.span;
    let (value, value_type) = operand(value)?;
    let mut literals = Vec::with_capacity(list.len());
    let mut list_type = value_type;
    for item in list {
        let (literal, ty, span) = list_literal(item)?;
        if ty == Type::Bool {
            return Err(mismatch(span, "a boolean", "a string or a number in an IN list"));
        }
        if !list_type.compatible(ty) {
            let expected = format!("{} like the rest of the IN test", list_type.describe());
            return Err(mismatch(span, ty.describe(), &expected));
        }
        list_type = ty;
        literals.push(literal);
    }
    if value_type == Type::Bool {
        return Err(mismatch(value_span, "a boolean", "a string or a number before IN"));
    }
    Ok(negate_if(negated, Condition::In(value, literals.into())))
}

fn like(
    value: Expr,
    pattern: Expr,
    escape: Option<Box<Expr>>,
    negated: bool,
) -> Result<Condition<Name>, SelectorError> {
    let value_span = value.span;
    let (value, value_type) = operand(value)?;
    if !matches!(value_type, Type::Str | Type::Any) {
        return Err(mismatch(value_span, value_type.describe(), "a string before LIKE"));
    }
    let escape_char = match escape.map(|e| (e.kind, e.span)) {
        None => None,
        Some((Kind::Str(text), span)) => {
            let mut chars = text.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Some(c),
                _ => return Err(SelectorError::InvalidLike { span, reason: "ESCAPE must be exactly one character" }),
            }
        }
        Some((_, span)) => return Err(mismatch(span, "a value", "a one-character string after ESCAPE")),
    };
    let Kind::Str(text) = pattern.kind else {
        return Err(mismatch(pattern.span, "a value", "a string literal pattern after LIKE"));
    };
    let compiled = LikePattern::compile(&text, escape_char)
        .map_err(|reason| SelectorError::InvalidLike { span: pattern.span, reason })?;
    Ok(negate_if(negated, Condition::Like(value, compiled)))
}
