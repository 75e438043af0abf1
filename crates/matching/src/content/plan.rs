//! Planning a selector for the index: which predicate gives access to it, and what is left to
//! evaluate once the access predicate matched (the residue).
//!
//! An access set is a set of keys such that the selector can only be TRUE if the message
//! satisfies at least one of them. Every top-level conjunct that is an indexable predicate gives
//! one (`p = v`, `p > v`, `p BETWEEN a AND b`, `p IN (..)`, a boolean `p`), and an OR gives the
//! union of its operands' sets when each has one. Of the candidates, the planner takes the
//! cheapest given the buckets as they are now, so a predicate shared by many subscriptions (like
//! `t1 = 'a'` in seed 004) is avoided in favour of a selective one (`t4 = 17`), which is the
//! clustering-by-access-predicate scheme of Fabret et al. (SIGMOD 2001). When the chosen
//! conjunct is exactly its keys (everything but BETWEEN and OR), it leaves the residue.

use super::buckets::{EqualKey, Inclusion, KeyKind};
use super::shared::{AtomList, AtomTable, PropertyId, Residue, Vocabulary};
use crate::selector::{Comparison, Condition, Literal, Name, Number, Operand, OrderedNumber};

/// A candidate access set, with property names not yet interned.
#[derive(Debug)]
pub(crate) struct Candidate<'a> {
    pub(crate) keys: Vec<(&'a str, KeyKind)>,
    /// True when the conjunct is TRUE exactly when one of the keys is satisfied.
    pub(crate) exact: bool,
}

/// The cheapest access set among `conjuncts`, with the position of the conjunct it came from.
/// `cost` estimates how many subscriptions a message satisfying a key would reach.
pub(crate) fn best_access<'a>(
    conjuncts: &'a [Condition<Name>],
    cost: &impl Fn(&str, &KeyKind) -> usize,
) -> Option<(usize, Candidate<'a>)> {
    let mut best: Option<(usize, usize, Candidate<'a>)> = None;
    for (position, conjunct) in conjuncts.iter().enumerate() {
        let Some(candidate) = access(conjunct, cost) else { continue };
        let total: usize = candidate.keys.iter().map(|(property, kind)| 1 + cost(property, kind)).sum();
        if best.as_ref().is_none_or(|(best_total, _, _)| total < *best_total) {
            best = Some((total, position, candidate));
        }
    }
    best.map(|(_, position, candidate)| (position, candidate))
}

fn access<'a>(condition: &'a Condition<Name>, cost: &impl Fn(&str, &KeyKind) -> usize) -> Option<Candidate<'a>> {
    let single = |property: &'a Name, kind: KeyKind| Candidate { keys: vec![(&**property, kind)], exact: true };
    match condition {
        Condition::Property(property) => Some(single(property, KeyKind::Equal(EqualKey::Bool(true)))),
        Condition::Compare(op, Operand::Property(property), Operand::Literal(literal)) => {
            comparison_key(*op, literal).map(|kind| single(property, kind))
        }
        Condition::Compare(op, Operand::Literal(literal), Operand::Property(property)) => {
            comparison_key(op.mirrored(), literal).map(|kind| single(property, kind))
        }
        Condition::Between(Operand::Property(property), Operand::Literal(low), Operand::Literal(_)) => {
            let threshold = ordered(literal_number(low)?)?;
            Some(Candidate { keys: vec![(&**property, KeyKind::Above(threshold, Inclusion::Inclusive))], exact: false })
        }
        Condition::In(Operand::Property(property), list) => {
            let mut keys: Vec<(&str, KeyKind)> = Vec::with_capacity(list.len());
            for literal in list.iter() {
                let kind = KeyKind::Equal(equal_key(literal)?);
                if !keys.iter().any(|(_, seen)| *seen == kind) {
                    keys.push((property, kind));
                }
            }
            Some(Candidate { keys, exact: true })
        }
        Condition::Or(operands) => {
            let mut keys = Vec::new();
            for operand in operands {
                let (_, candidate) = best_access(operand.conjuncts(), cost)?;
                keys.extend(candidate.keys);
            }
            Some(Candidate { keys, exact: false })
        }
        _ => None,
    }
}

fn comparison_key(op: Comparison, literal: &Literal) -> Option<KeyKind> {
    match op {
        Comparison::Equal => Some(KeyKind::Equal(equal_key(literal)?)),
        Comparison::NotEqual => None,
        Comparison::Greater => Some(KeyKind::Above(ordered(literal_number(literal)?)?, Inclusion::Strict)),
        Comparison::GreaterOrEqual => Some(KeyKind::Above(ordered(literal_number(literal)?)?, Inclusion::Inclusive)),
        Comparison::Less => Some(KeyKind::Below(ordered(literal_number(literal)?)?, Inclusion::Strict)),
        Comparison::LessOrEqual => Some(KeyKind::Below(ordered(literal_number(literal)?)?, Inclusion::Inclusive)),
    }
}

fn literal_number(literal: &Literal) -> Option<Number> {
    match literal {
        Literal::Int(i) => Some(Number::Int(*i)),
        Literal::Float(x) => Some(Number::Float(*x)),
        Literal::Str(_) | Literal::Bool(_) => None,
    }
}

fn ordered(number: Number) -> Option<OrderedNumber> {
    OrderedNumber::new(number)
}

/// The equality key a literal is filed under; numbers share keys across int and float.
pub(crate) fn equal_key(literal: &Literal) -> Option<EqualKey> {
    match literal {
        Literal::Str(text) => Some(EqualKey::Str(text.clone())),
        Literal::Bool(flag) => Some(EqualKey::Bool(*flag)),
        Literal::Int(_) | Literal::Float(_) => Some(EqualKey::Number(literal_number(literal)?.key()?)),
    }
}

/// Builds the residue of `conjuncts` without the one at `skip`, interning what it names.
pub(crate) fn residue(
    conjuncts: &[Condition<Name>],
    skip: Option<usize>,
    vocabulary: &mut Vocabulary,
    atoms: &mut AtomTable,
) -> Residue {
    let mut atom_ids = Vec::new();
    let mut rest: Vec<Condition<PropertyId>> = Vec::new();
    for (position, conjunct) in conjuncts.iter().enumerate() {
        if Some(position) == skip || *conjunct == Condition::Literal(true) {
            continue;
        }
        let atom = match conjunct {
            Condition::Compare(op, Operand::Property(property), Operand::Literal(literal)) => {
                Some((*op, property, literal))
            }
            Condition::Compare(op, Operand::Literal(literal), Operand::Property(property)) => {
                Some((op.mirrored(), property, literal))
            }
            _ => None,
        };
        match atom {
            Some((op, property, literal)) => {
                let property = vocabulary.intern(property);
                atom_ids.push(atoms.intern(property, op, literal, vocabulary));
            }
            None => rest.push(conjunct.map(&mut |name: &Name| vocabulary.intern(name))),
        }
    }
    let rest = match rest.len() {
        0 => None,
        1 => rest.pop().map(Box::new),
        _ => Some(Box::new(Condition::And(rest))),
    };
    Residue { atoms: AtomList::new(atom_ids), rest }
}
