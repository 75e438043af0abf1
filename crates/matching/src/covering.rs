//! Covering: does every message one filter accepts also pass another? Link summaries drop the
//! filters that a wider one covers, so this must never say yes wrongly; it may say no when it
//! cannot tell (the summary is then just a little larger).
//!
//! Patterns are compared exactly ([`Pattern::covers`]). Selectors are compared by implication,
//! structurally: an OR on the narrow side must be covered branch by branch, an AND on the wide
//! side conjunct by conjunct, an OR on the wide side by some branch; and an atomic predicate of
//! the wide side on property `p` is implied when the facts that the narrow side's conjuncts force
//! about `p` (a numeric interval, a set of strings, a boolean, presence) leave no value that fails
//! it. Implication in three-valued logic is about TRUE only: a narrow selector that is TRUE
//! forces each of its conjuncts TRUE, and a TRUE comparison forces its property to exist with the
//! compared type.

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::selector::{Comparison, Condition, Literal, Name, Number, Operand, OrderedNumber, Selector};
use crate::topic::Pattern;

/// What a subscription asks for: a topic pattern and, optionally, a selector.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// Which topics.
    pub pattern: Pattern,
    /// Which messages on those topics; `None` accepts all.
    pub selector: Option<Selector>,
}

impl Filter {
    /// Whether every message `narrow` accepts is accepted by `self`; see [`covers`].
    pub fn covers(&self, narrow: &Filter) -> bool {
        covers(self, narrow)
    }
}

/// Conservatively decides whether every message matching `narrow` also matches `wide`: `true`
/// is always right, `false` may only mean "could not prove it".
pub fn covers(wide: &Filter, narrow: &Filter) -> bool {
    if !wide.pattern.covers(&narrow.pattern) {
        return false;
    }
    match (&wide.selector, &narrow.selector) {
        (None, _) => true,
        (Some(wide), None) => implies(&Condition::Literal(true), wide.condition()),
        (Some(wide), Some(narrow)) => wide.covers(narrow),
    }
}

impl Selector {
    /// Conservatively decides whether `narrow` TRUE implies `self` TRUE for every message.
    pub fn covers(&self, narrow: &Selector) -> bool {
        implies(narrow.condition(), self.condition())
    }
}

/// Whether `narrow` TRUE forces `wide` TRUE. Recursion follows the trees, whose depth the parser
/// bounds.
fn implies(narrow: &Condition<Name>, wide: &Condition<Name>) -> bool {
    if narrow == wide || *narrow == Condition::Literal(false) || *wide == Condition::Literal(true) {
        return true;
    }
    if let Condition::Or(branches) = narrow {
        return branches.iter().all(|branch| implies(branch, wide));
    }
    let mut facts = Vec::new();
    flatten(narrow, &mut facts);
    implied_by(narrow, &facts, wide)
}

/// Whether `narrow` (not an OR), whose conjuncts are `facts`, forces `wide` TRUE. The facts are
/// gathered once and reused over all of `wide`, so the cost is the product of the two sizes.
fn implied_by(narrow: &Condition<Name>, facts: &[&Condition<Name>], wide: &Condition<Name>) -> bool {
    if narrow == wide || *wide == Condition::Literal(true) {
        return true;
    }
    match wide {
        Condition::And(conjuncts) => conjuncts.iter().all(|conjunct| implied_by(narrow, facts, conjunct)),
        Condition::Or(branches) => branches.iter().any(|branch| implied_by(narrow, facts, branch)),
        atomic => facts.contains(&atomic) || implied_by_facts(facts, atomic),
    }
}

/// The conjuncts of `condition`, through nested ANDs.
fn flatten<'a>(condition: &'a Condition<Name>, out: &mut Vec<&'a Condition<Name>>) {
    match condition {
        Condition::And(conjuncts) => conjuncts.iter().for_each(|c| flatten(c, out)),
        other => out.push(other),
    }
}

/// `property op literal`, with the literal on the right, if `condition` is one.
fn property_comparison(condition: &Condition<Name>) -> Option<(&str, Comparison, &Literal)> {
    match condition {
        Condition::Compare(op, Operand::Property(p), Operand::Literal(l)) => Some((p, *op, l)),
        Condition::Compare(op, Operand::Literal(l), Operand::Property(p)) => Some((p, op.mirrored(), l)),
        _ => None,
    }
}

fn literal_number(literal: &Literal) -> Option<OrderedNumber> {
    match literal {
        Literal::Int(i) => OrderedNumber::new(Number::Int(*i)),
        Literal::Float(x) => OrderedNumber::new(Number::Float(*x)),
        Literal::Str(_) | Literal::Bool(_) => None,
    }
}

/// One end of an interval; `strict` excludes the value itself.
#[derive(Debug, Clone, Copy)]
struct End {
    value: OrderedNumber,
    strict: bool,
}

/// What the narrow side's conjuncts force about one property.
#[derive(Debug, Default)]
struct Domain<'a> {
    present: bool,
    number: bool,
    low: Option<End>,
    high: Option<End>,
    string: bool,
    /// The property is one of these strings (when `Some`).
    strings: Option<Vec<Cow<'a, str>>>,
    boolean: Option<bool>,
    contradiction: bool,
}

impl<'a> Domain<'a> {
    fn of(facts: &[&'a Condition<Name>], property: &str) -> Domain<'a> {
        let mut domain = Domain::default();
        for fact in facts {
            domain.learn(fact, property);
        }
        let kinds = [domain.number, domain.string, domain.boolean.is_some()];
        domain.contradiction |= kinds.iter().filter(|k| **k).count() > 1 || domain.interval_is_empty();
        domain.contradiction |= domain.strings.as_ref().is_some_and(Vec::is_empty);
        domain
    }

    fn learn(&mut self, fact: &'a Condition<Name>, property: &str) {
        let is_property = |operand: &Operand<Name>| matches!(operand, Operand::Property(p) if &**p == property);
        if let Some((p, op, literal)) = property_comparison(fact) {
            if p == property {
                self.learn_comparison(op, literal);
            }
            return;
        }
        match fact {
            Condition::Property(p) if &**p == property => self.learn_boolean(true),
            Condition::Between(operand, Operand::Literal(low), Operand::Literal(high)) if is_property(operand) => {
                self.learn_comparison(Comparison::GreaterOrEqual, low);
                self.learn_comparison(Comparison::LessOrEqual, high);
            }
            Condition::In(operand, list) if is_property(operand) => self.learn_in(list),
            Condition::Like(operand, pattern) if is_property(operand) => {
                self.present = true;
                self.string = true;
                if let (text, true) = pattern.literal_prefix() {
                    self.narrow_strings(vec![Cow::Owned(text)]);
                }
            }
            Condition::Not(inner) if matches!(&**inner, Condition::IsNull(operand) if is_property(operand)) => {
                self.present = true;
            }
            _ => {}
        }
    }

    fn learn_comparison(&mut self, op: Comparison, literal: &'a Literal) {
        self.present = true;
        match literal {
            Literal::Str(text) => {
                self.string = true;
                if op == Comparison::Equal {
                    self.narrow_strings(vec![Cow::Borrowed(text)]);
                }
            }
            Literal::Bool(value) => match op {
                Comparison::Equal => self.learn_boolean(*value),
                Comparison::NotEqual => self.learn_boolean(!*value),
                _ => {}
            },
            Literal::Int(_) | Literal::Float(_) => {
                self.number = true;
                let Some(value) = literal_number(literal) else { return };
                let (low, high) = match op {
                    Comparison::Equal => (Some(End { value, strict: false }), Some(End { value, strict: false })),
                    Comparison::Greater => (Some(End { value, strict: true }), None),
                    Comparison::GreaterOrEqual => (Some(End { value, strict: false }), None),
                    Comparison::Less => (None, Some(End { value, strict: true })),
                    Comparison::LessOrEqual => (None, Some(End { value, strict: false })),
                    Comparison::NotEqual => (None, None),
                };
                if let Some(low) = low {
                    self.low = Some(tighter(self.low, low, Ordering::Greater));
                }
                if let Some(high) = high {
                    self.high = Some(tighter(self.high, high, Ordering::Less));
                }
            }
        }
    }

    fn learn_in(&mut self, list: &'a [Literal]) {
        self.present = true;
        let strings: Vec<Cow<'a, str>> = list
            .iter()
            .filter_map(|l| match l {
                Literal::Str(text) => Some(Cow::Borrowed(&**text)),
                _ => None,
            })
            .collect();
        if !strings.is_empty() {
            self.string = true;
            self.narrow_strings(strings);
            return;
        }
        // Numbers: the hull of the list is a sound over-approximation.
        let numbers: Vec<OrderedNumber> = list.iter().filter_map(literal_number).collect();
        if let (Some(min), Some(max)) = (numbers.iter().min(), numbers.iter().max()) {
            self.number = true;
            self.low = Some(tighter(self.low, End { value: *min, strict: false }, Ordering::Greater));
            self.high = Some(tighter(self.high, End { value: *max, strict: false }, Ordering::Less));
        }
    }

    fn learn_boolean(&mut self, value: bool) {
        self.present = true;
        if self.boolean.is_some_and(|known| known != value) {
            self.contradiction = true;
        }
        self.boolean = Some(value);
    }

    fn narrow_strings(&mut self, allowed: Vec<Cow<'a, str>>) {
        self.strings = Some(match self.strings.take() {
            None => allowed,
            Some(known) => known.into_iter().filter(|s| allowed.contains(s)).collect(),
        });
    }

    fn interval_is_empty(&self) -> bool {
        match (self.low, self.high) {
            (Some(low), Some(high)) => match low.value.cmp(&high.value) {
                Ordering::Greater => true,
                Ordering::Equal => low.strict || high.strict,
                Ordering::Less => false,
            },
            _ => false,
        }
    }

    /// Every number the domain allows satisfies `x op value`.
    fn numbers_satisfy(&self, op: Comparison, value: OrderedNumber) -> bool {
        if !self.number {
            return false;
        }
        let above = |end: Option<End>, strictly: bool| {
            end.is_some_and(|e| match e.value.cmp(&value) {
                Ordering::Greater => true,
                Ordering::Equal => !strictly || e.strict,
                Ordering::Less => false,
            })
        };
        let below = |end: Option<End>, strictly: bool| {
            end.is_some_and(|e| match e.value.cmp(&value) {
                Ordering::Less => true,
                Ordering::Equal => !strictly || e.strict,
                Ordering::Greater => false,
            })
        };
        match op {
            Comparison::Greater => above(self.low, true),
            Comparison::GreaterOrEqual => above(self.low, false),
            Comparison::Less => below(self.high, true),
            Comparison::LessOrEqual => below(self.high, false),
            Comparison::Equal => above(self.low, false) && below(self.high, false),
            Comparison::NotEqual => above(self.low, true) || below(self.high, true),
        }
    }
}

/// The tighter of an existing end and a new one; `direction` is `Greater` for lower ends.
fn tighter(current: Option<End>, new: End, direction: Ordering) -> End {
    let Some(current) = current else { return new };
    match new.value.cmp(&current.value) {
        Ordering::Equal => End { value: new.value, strict: new.strict || current.strict },
        ordering if ordering == direction => new,
        _ => current,
    }
}

/// Whether the facts force the atomic condition `wide` TRUE.
fn implied_by_facts(facts: &[&Condition<Name>], wide: &Condition<Name>) -> bool {
    let Some(property) = subject(wide) else { return false };
    let domain = Domain::of(facts, property);
    if domain.contradiction {
        return true;
    }
    if let Some((_, op, literal)) = property_comparison(wide) {
        return match literal {
            Literal::Int(_) | Literal::Float(_) => {
                literal_number(literal).is_some_and(|v| domain.numbers_satisfy(op, v))
            }
            Literal::Str(text) => match op {
                Comparison::Equal => domain.strings.as_ref().is_some_and(|s| s.iter().all(|x| **x == **text)),
                Comparison::NotEqual => domain.strings.as_ref().is_some_and(|s| s.iter().all(|x| **x != **text)),
                _ => false,
            },
            Literal::Bool(value) => match op {
                Comparison::Equal => domain.boolean == Some(*value),
                Comparison::NotEqual => domain.boolean == Some(!*value),
                _ => false,
            },
        };
    }
    match wide {
        Condition::Property(_) => domain.boolean == Some(true),
        Condition::Between(_, Operand::Literal(low), Operand::Literal(high)) => {
            let (Some(low), Some(high)) = (literal_number(low), literal_number(high)) else { return false };
            domain.numbers_satisfy(Comparison::GreaterOrEqual, low)
                && domain.numbers_satisfy(Comparison::LessOrEqual, high)
        }
        Condition::In(_, list) => {
            let strings = domain.strings.as_ref();
            strings.is_some_and(|s| s.iter().all(|x| list.iter().any(|l| matches!(l, Literal::Str(t) if **t == **x))))
                || list.iter().filter_map(literal_number).any(|v| domain.numbers_satisfy(Comparison::Equal, v))
        }
        Condition::Like(_, pattern) => domain.strings.as_ref().is_some_and(|s| s.iter().all(|x| pattern.matches(x))),
        Condition::Not(inner) => match &**inner {
            Condition::IsNull(_) => domain.present,
            Condition::In(_, list) => {
                // NOT IN is TRUE only for a value of the list's type that is not in the list.
                let strings_only = list.iter().all(|l| matches!(l, Literal::Str(_)));
                strings_only
                    && domain.strings.as_ref().is_some_and(|s| {
                        s.iter().all(|x| !list.iter().any(|l| matches!(l, Literal::Str(t) if **t == **x)))
                    })
            }
            Condition::Between(_, Operand::Literal(low), Operand::Literal(high)) => {
                let (Some(low), Some(high)) = (literal_number(low), literal_number(high)) else { return false };
                domain.numbers_satisfy(Comparison::Less, low) || domain.numbers_satisfy(Comparison::Greater, high)
            }
            _ => false,
        },
        _ => false,
    }
}

/// The one property an atomic condition is about, when it is about a bare property.
fn subject(condition: &Condition<Name>) -> Option<&str> {
    if let Some((property, _, _)) = property_comparison(condition) {
        return Some(property);
    }
    let operand = match condition {
        Condition::Property(property) => return Some(property),
        Condition::Between(operand, ..) | Condition::In(operand, _) | Condition::Like(operand, _) => operand,
        Condition::Not(inner) => match &**inner {
            Condition::IsNull(operand) | Condition::In(operand, _) | Condition::Between(operand, ..) => operand,
            _ => return None,
        },
        _ => return None,
    };
    match operand {
        Operand::Property(property) => Some(property),
        _ => None,
    }
}
