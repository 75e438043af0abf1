//! Three-valued evaluation of a selector against a message's properties, as in SQL.
//!
//! A missing property, or one whose type does not fit the operation, is UNKNOWN (SQL's NULL);
//! NOT UNKNOWN is UNKNOWN, FALSE AND UNKNOWN is FALSE, TRUE OR UNKNOWN is TRUE. A message is
//! delivered only when its selector is TRUE.

use std::cmp::Ordering;

use tidings_wire::{PropertyLookup, ValueRef};

use super::ast::{Arithmetic, Comparison, Condition, Literal, Name, Operand};
use super::number::Number;

/// A truth value of three-valued logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Truth {
    /// The selector holds.
    True,
    /// The selector does not hold.
    False,
    /// The selector cannot be decided (a property is missing or of another type), which, for
    /// delivery, counts as not holding.
    Unknown,
}

impl Truth {
    /// TRUE or FALSE.
    pub fn from_bool(value: bool) -> Truth {
        if value {
            Truth::True
        } else {
            Truth::False
        }
    }

    /// True only for [`Truth::True`].
    pub fn is_true(self) -> bool {
        self == Truth::True
    }
}

impl std::ops::Not for Truth {
    type Output = Truth;

    /// Three-valued NOT: UNKNOWN stays UNKNOWN.
    fn not(self) -> Truth {
        match self {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unknown => Truth::Unknown,
        }
    }
}

/// Where the evaluator finds property values: a message's properties by name (a list or a view
/// of the encoded message), or the index's per-message table by interned id.
pub(crate) trait Resolve<P> {
    /// The value of `property`, if the message has it.
    fn resolve(&self, property: &P) -> Option<ValueRef<'_>>;
}

impl<L: PropertyLookup + ?Sized> Resolve<Name> for L {
    fn resolve(&self, property: &Name) -> Option<ValueRef<'_>> {
        self.lookup(property)
    }
}

/// A value during evaluation; borrowed from the message or the selector.
#[derive(Debug, Clone, Copy)]
enum Scalar<'a> {
    Str(&'a str),
    Number(Number),
    Bool(bool),
}

impl<'a> Scalar<'a> {
    fn of_value(value: ValueRef<'a>) -> Scalar<'a> {
        match value {
            ValueRef::Str(text) => Scalar::Str(text),
            ValueRef::Int(i) => Scalar::Number(Number::Int(i)),
            ValueRef::Float(x) => Scalar::Number(Number::Float(x)),
            ValueRef::Bool(b) => Scalar::Bool(b),
        }
    }

    fn of_literal(literal: &'a Literal) -> Scalar<'a> {
        match literal {
            Literal::Str(text) => Scalar::Str(text),
            Literal::Int(i) => Scalar::Number(Number::Int(*i)),
            Literal::Float(x) => Scalar::Number(Number::Float(*x)),
            Literal::Bool(b) => Scalar::Bool(*b),
        }
    }
}

/// Evaluates `condition` with property values from `message`.
pub(crate) fn evaluate<P, R: Resolve<P> + ?Sized>(condition: &Condition<P>, message: &R) -> Truth {
    match condition {
        Condition::Literal(value) => Truth::from_bool(*value),
        Condition::Property(property) => match message.resolve(property) {
            Some(ValueRef::Bool(value)) => Truth::from_bool(value),
            _ => Truth::Unknown,
        },
        Condition::Not(inner) => !evaluate(inner, message),
        Condition::And(operands) => {
            let mut result = Truth::True;
            for operand in operands {
                match evaluate(operand, message) {
                    Truth::False => return Truth::False,
                    Truth::Unknown => result = Truth::Unknown,
                    Truth::True => {}
                }
            }
            result
        }
        Condition::Or(operands) => {
            let mut result = Truth::False;
            for operand in operands {
                match evaluate(operand, message) {
                    Truth::True => return Truth::True,
                    Truth::Unknown => result = Truth::Unknown,
                    Truth::False => {}
                }
            }
            result
        }
        Condition::Compare(op, left, right) => match (value(left, message), value(right, message)) {
            (Some(left), Some(right)) => compare(*op, left, right),
            _ => Truth::Unknown,
        },
        Condition::Between(operand, low, high) => {
            between(value(operand, message), value(low, message), value(high, message))
        }
        Condition::In(operand, list) => in_list(value(operand, message), list),
        Condition::Like(operand, pattern) => match value(operand, message) {
            Some(Scalar::Str(text)) => Truth::from_bool(pattern.matches(text)),
            _ => Truth::Unknown,
        },
        Condition::IsNull(operand) => Truth::from_bool(value(operand, message).is_none()),
    }
}

/// Evaluates a comparison of a property's value with a literal; the index's shared predicates
/// use it.
pub(crate) fn compare_value(op: Comparison, value: Option<ValueRef<'_>>, literal: &Literal) -> Truth {
    match value {
        Some(value) => compare(op, Scalar::of_value(value), Scalar::of_literal(literal)),
        None => Truth::Unknown,
    }
}

fn between(operand: Option<Scalar<'_>>, low: Option<Scalar<'_>>, high: Option<Scalar<'_>>) -> Truth {
    let above = match (operand, low) {
        (Some(operand), Some(low)) => compare(Comparison::GreaterOrEqual, operand, low),
        _ => Truth::Unknown,
    };
    let below = match (operand, high) {
        (Some(operand), Some(high)) => compare(Comparison::LessOrEqual, operand, high),
        _ => Truth::Unknown,
    };
    match (above, below) {
        (Truth::False, _) | (_, Truth::False) => Truth::False,
        (Truth::True, Truth::True) => Truth::True,
        _ => Truth::Unknown,
    }
}

fn in_list(operand: Option<Scalar<'_>>, list: &[Literal]) -> Truth {
    let Some(operand) = operand else {
        return Truth::Unknown;
    };
    let mut result = Truth::False;
    for literal in list {
        match compare(Comparison::Equal, operand, Scalar::of_literal(literal)) {
            Truth::True => return Truth::True,
            Truth::Unknown => result = Truth::Unknown,
            Truth::False => {}
        }
    }
    result
}

fn value<'a, P, R: Resolve<P> + ?Sized>(operand: &'a Operand<P>, message: &'a R) -> Option<Scalar<'a>> {
    match operand {
        Operand::Literal(literal) => Some(Scalar::of_literal(literal)),
        Operand::Property(property) => message.resolve(property).map(Scalar::of_value),
        Operand::Negate(inner) => match value(inner, message)? {
            Scalar::Number(Number::Int(i)) => i.checked_neg().map(|n| Scalar::Number(Number::Int(n))),
            Scalar::Number(Number::Float(x)) => finite(-x),
            Scalar::Str(_) | Scalar::Bool(_) => None,
        },
        Operand::Arithmetic(op, left, right) => match (value(left, message)?, value(right, message)?) {
            (Scalar::Number(left), Scalar::Number(right)) => arithmetic(*op, left, right),
            _ => None,
        },
    }
}

/// Integer arithmetic stays integral; overflow and division by zero are UNKNOWN. Anything with a
/// float is computed in floats; a non-finite result is UNKNOWN.
fn arithmetic(op: Arithmetic, left: Number, right: Number) -> Option<Scalar<'static>> {
    if let (Number::Int(a), Number::Int(b)) = (left, right) {
        let result = match op {
            Arithmetic::Add => a.checked_add(b),
            Arithmetic::Subtract => a.checked_sub(b),
            Arithmetic::Multiply => a.checked_mul(b),
            Arithmetic::Divide => a.checked_div(b),
        };
        return result.map(|n| Scalar::Number(Number::Int(n)));
    }
    let (a, b) = (left.as_f64(), right.as_f64());
    finite(match op {
        Arithmetic::Add => a + b,
        Arithmetic::Subtract => a - b,
        Arithmetic::Multiply => a * b,
        Arithmetic::Divide => a / b,
    })
}

fn finite(x: f64) -> Option<Scalar<'static>> {
    x.is_finite().then_some(Scalar::Number(Number::Float(x)))
}

fn compare(op: Comparison, left: Scalar<'_>, right: Scalar<'_>) -> Truth {
    let ordering = match (left, right) {
        (Scalar::Number(a), Scalar::Number(b)) => a.compare(b),
        (Scalar::Str(a), Scalar::Str(b)) if !op.is_ordering() => Some(a.cmp(b)),
        (Scalar::Bool(a), Scalar::Bool(b)) if !op.is_ordering() => Some(a.cmp(&b)),
        _ => None,
    };
    let Some(ordering) = ordering else {
        return Truth::Unknown;
    };
    Truth::from_bool(match op {
        Comparison::Equal => ordering == Ordering::Equal,
        Comparison::NotEqual => ordering != Ordering::Equal,
        Comparison::Less => ordering == Ordering::Less,
        Comparison::LessOrEqual => ordering != Ordering::Greater,
        Comparison::Greater => ordering == Ordering::Greater,
        Comparison::GreaterOrEqual => ordering != Ordering::Less,
    })
}
