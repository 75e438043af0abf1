//! The typed selector tree, generic over how a property is named.
//!
//! A parsed [`super::Selector`] names properties by text (`P = Name`); the index compiles the parts
//! it must evaluate to interned ids, so a residue costs a few bytes and looks properties up without
//! hashing. The evaluator and the covering check work on either form.
//!
//! Invariants established by the checker: conditions and values never mix (a comparison's sides
//! are values, AND's operands are conditions); `And`/`Or` have at least two operands; `In` lists
//! are non-empty and all strings or all numbers; negative numeric literals are folded, so `-5` is
//! `Literal(Int(-5))`; the tree depth is bounded by [`super::MAX_SELECTOR_DEPTH`].

use super::like::LikePattern;

/// A property name as written in selector text.
pub(crate) type Name = Box<str>;

/// A constant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    Str(Box<str>),
    Int(i64),
    /// Always finite.
    Float(f64),
    Bool(bool),
}

/// `=`, `<>`, `<`, `<=`, `>`, `>=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Comparison {
    Equal,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl Comparison {
    /// The comparison with its sides swapped: `5 < x` is `x > 5`.
    pub(crate) fn mirrored(self) -> Comparison {
        match self {
            Comparison::Less => Comparison::Greater,
            Comparison::LessOrEqual => Comparison::GreaterOrEqual,
            Comparison::Greater => Comparison::Less,
            Comparison::GreaterOrEqual => Comparison::LessOrEqual,
            same => same,
        }
    }

    /// True for the ordering comparisons, which only numbers support.
    pub(crate) fn is_ordering(self) -> bool {
        !matches!(self, Comparison::Equal | Comparison::NotEqual)
    }
}

/// `+`, `-`, `*`, `/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arithmetic {
    Add,
    Subtract,
    Multiply,
    Divide,
}

/// A value-producing expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operand<P> {
    Literal(Literal),
    Property(P),
    Negate(Box<Operand<P>>),
    Arithmetic(Arithmetic, Box<Operand<P>>, Box<Operand<P>>),
}

/// A truth-producing expression (three-valued).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Condition<P> {
    /// `TRUE` or `FALSE`.
    Literal(bool),
    /// A property used as a condition: TRUE or FALSE if it is a boolean, else UNKNOWN.
    Property(P),
    Not(Box<Condition<P>>),
    And(Vec<Condition<P>>),
    Or(Vec<Condition<P>>),
    Compare(Comparison, Operand<P>, Operand<P>),
    /// `operand BETWEEN low AND high`.
    Between(Operand<P>, Operand<P>, Operand<P>),
    In(Operand<P>, Box<[Literal]>),
    Like(Operand<P>, LikePattern),
    IsNull(Operand<P>),
}

impl<P> Operand<P> {
    /// The same expression with properties renamed by `rename`.
    pub(crate) fn map<Q>(&self, rename: &mut impl FnMut(&P) -> Q) -> Operand<Q> {
        match self {
            Operand::Literal(literal) => Operand::Literal(literal.clone()),
            Operand::Property(property) => Operand::Property(rename(property)),
            Operand::Negate(inner) => Operand::Negate(Box::new(inner.map(rename))),
            Operand::Arithmetic(op, left, right) => {
                Operand::Arithmetic(*op, Box::new(left.map(rename)), Box::new(right.map(rename)))
            }
        }
    }

    /// Calls `visit` on every property named.
    pub(crate) fn for_each_property(&self, visit: &mut impl FnMut(&P)) {
        match self {
            Operand::Literal(_) => {}
            Operand::Property(property) => visit(property),
            Operand::Negate(inner) => inner.for_each_property(visit),
            Operand::Arithmetic(_, left, right) => {
                left.for_each_property(visit);
                right.for_each_property(visit);
            }
        }
    }
}

impl<P> Condition<P> {
    /// The same condition with properties renamed by `rename`.
    pub(crate) fn map<Q>(&self, rename: &mut impl FnMut(&P) -> Q) -> Condition<Q> {
        match self {
            Condition::Literal(value) => Condition::Literal(*value),
            Condition::Property(property) => Condition::Property(rename(property)),
            Condition::Not(inner) => Condition::Not(Box::new(inner.map(rename))),
            Condition::And(operands) => Condition::And(operands.iter().map(|c| c.map(rename)).collect()),
            Condition::Or(operands) => Condition::Or(operands.iter().map(|c| c.map(rename)).collect()),
            Condition::Compare(op, left, right) => Condition::Compare(*op, left.map(rename), right.map(rename)),
            Condition::Between(operand, low, high) => {
                Condition::Between(operand.map(rename), low.map(rename), high.map(rename))
            }
            Condition::In(operand, list) => Condition::In(operand.map(rename), list.clone()),
            Condition::Like(operand, pattern) => Condition::Like(operand.map(rename), pattern.clone()),
            Condition::IsNull(operand) => Condition::IsNull(operand.map(rename)),
        }
    }

    /// Calls `visit` on every property named.
    pub(crate) fn for_each_property(&self, visit: &mut impl FnMut(&P)) {
        match self {
            Condition::Literal(_) => {}
            Condition::Property(property) => visit(property),
            Condition::Not(inner) => inner.for_each_property(visit),
            Condition::And(operands) | Condition::Or(operands) => {
                operands.iter().for_each(|c| c.for_each_property(visit));
            }
            Condition::Compare(_, left, right) => {
                left.for_each_property(visit);
                right.for_each_property(visit);
            }
            Condition::Between(operand, low, high) => {
                operand.for_each_property(visit);
                low.for_each_property(visit);
                high.for_each_property(visit);
            }
            Condition::In(operand, _) | Condition::Like(operand, _) | Condition::IsNull(operand) => {
                operand.for_each_property(visit);
            }
        }
    }

    /// The operands of a top-level AND, or the condition itself: every one must be TRUE.
    pub(crate) fn conjuncts(&self) -> &[Condition<P>] {
        match self {
            Condition::And(operands) => operands,
            other => std::slice::from_ref(other),
        }
    }
}
