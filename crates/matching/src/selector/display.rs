//! Canonical selector text: keywords in capitals, one space around operators, parentheses only
//! where precedence needs them. Parsing the printed text gives back the same tree.

use std::fmt::{self, Write};

use super::ast::{Arithmetic, Comparison, Condition, Literal, Name, Operand};
use super::lexer::{is_identifier_part, is_identifier_start, Keyword};

/// Binding strength, loosest first; a child weaker than its slot needs parentheses.
const OR: u8 = 1;
const AND: u8 = 2;
const NOT: u8 = 3;
const PREDICATE: u8 = 4;
const SUM: u8 = 5;
const PRODUCT: u8 = 6;
const UNARY: u8 = 7;
const ATOM: u8 = 8;

pub(crate) fn write_condition(f: &mut fmt::Formatter<'_>, condition: &Condition<Name>, slot: u8) -> fmt::Result {
    let strength = condition_strength(condition);
    if strength < slot {
        f.write_char('(')?;
    }
    match condition {
        Condition::Literal(value) => f.write_str(if *value { "TRUE" } else { "FALSE" })?,
        Condition::Property(name) => write_name(f, name)?,
        Condition::Not(inner) => write_not(f, inner)?,
        Condition::And(operands) => write_chain(f, operands, " AND ", NOT)?,
        Condition::Or(operands) => write_chain(f, operands, " OR ", AND)?,
        Condition::Compare(op, left, right) => {
            write_operand(f, left, SUM)?;
            write!(f, " {} ", comparison_text(*op))?;
            write_operand(f, right, SUM)?;
        }
        Condition::Between(..) | Condition::In(..) | Condition::Like(..) | Condition::IsNull(_) => {
            write_predicate(f, condition, "")?;
        }
    }
    if strength < slot {
        f.write_char(')')?;
    }
    Ok(())
}

fn condition_strength(condition: &Condition<Name>) -> u8 {
    match condition {
        Condition::Literal(_) | Condition::Property(_) => ATOM,
        Condition::Not(inner) if is_negatable_predicate(inner) => PREDICATE,
        Condition::Not(_) => NOT,
        Condition::And(_) => AND,
        Condition::Or(_) => OR,
        _ => PREDICATE,
    }
}

/// Predicates with a negated spelling: `NOT (x IN (..))` prints as `x NOT IN (..)`.
fn is_negatable_predicate(condition: &Condition<Name>) -> bool {
    matches!(condition, Condition::Between(..) | Condition::In(..) | Condition::Like(..) | Condition::IsNull(_))
}

fn write_not(f: &mut fmt::Formatter<'_>, inner: &Condition<Name>) -> fmt::Result {
    if is_negatable_predicate(inner) {
        return write_predicate(f, inner, "NOT ");
    }
    f.write_str("NOT ")?;
    write_condition(f, inner, NOT)
}

fn write_chain(f: &mut fmt::Formatter<'_>, operands: &[Condition<Name>], separator: &str, slot: u8) -> fmt::Result {
    for (i, operand) in operands.iter().enumerate() {
        if i > 0 {
            f.write_str(separator)?;
        }
        // Strictly stronger: a nested chain of the same operator keeps its parentheses.
        write_condition(f, operand, slot)?;
    }
    Ok(())
}

/// Writes BETWEEN / IN / LIKE / IS NULL, with `not` ("" or "NOT ") in its SQL place.
fn write_predicate(f: &mut fmt::Formatter<'_>, condition: &Condition<Name>, not: &str) -> fmt::Result {
    match condition {
        Condition::Between(operand, low, high) => {
            write_operand(f, operand, SUM)?;
            write!(f, " {not}BETWEEN ")?;
            write_operand(f, low, SUM)?;
            f.write_str(" AND ")?;
            write_operand(f, high, SUM)
        }
        Condition::In(operand, list) => {
            write_operand(f, operand, SUM)?;
            write!(f, " {not}IN (")?;
            for (i, literal) in list.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_literal(f, literal)?;
            }
            f.write_char(')')
        }
        Condition::Like(operand, pattern) => {
            write_operand(f, operand, SUM)?;
            write!(f, " {not}LIKE ")?;
            write_string(f, pattern.text())?;
            match pattern.escape() {
                Some(escape) => {
                    f.write_str(" ESCAPE ")?;
                    write_string(f, escape.encode_utf8(&mut [0; 4]))
                }
                None => Ok(()),
            }
        }
        Condition::IsNull(operand) => {
            write_operand(f, operand, SUM)?;
            write!(f, " IS {not}NULL")
        }
        other => write_condition(f, other, ATOM),
    }
}

fn write_operand(f: &mut fmt::Formatter<'_>, operand: &Operand<Name>, slot: u8) -> fmt::Result {
    let strength = match operand {
        Operand::Literal(_) | Operand::Property(_) => ATOM,
        Operand::Negate(_) => UNARY,
        Operand::Arithmetic(Arithmetic::Add | Arithmetic::Subtract, ..) => SUM,
        Operand::Arithmetic(Arithmetic::Multiply | Arithmetic::Divide, ..) => PRODUCT,
    };
    if strength < slot {
        f.write_char('(')?;
    }
    match operand {
        Operand::Literal(literal) => write_literal(f, literal)?,
        Operand::Property(name) => write_name(f, name)?,
        Operand::Negate(inner) => {
            // `-(-x)`, never `--x`, which reads as an SQL comment.
            f.write_char('-')?;
            write_operand(f, inner, ATOM)?;
        }
        Operand::Arithmetic(op, left, right) => {
            let (text, left_slot, right_slot) = match op {
                Arithmetic::Add => ("+", SUM, PRODUCT),
                Arithmetic::Subtract => ("-", SUM, PRODUCT),
                Arithmetic::Multiply => ("*", PRODUCT, UNARY),
                Arithmetic::Divide => ("/", PRODUCT, UNARY),
            };
            write_operand(f, left, left_slot)?;
            write!(f, " {text} ")?;
            write_operand(f, right, right_slot)?;
        }
    }
    if strength < slot {
        f.write_char(')')?;
    }
    Ok(())
}

fn comparison_text(op: Comparison) -> &'static str {
    match op {
        Comparison::Equal => "=",
        Comparison::NotEqual => "<>",
        Comparison::Less => "<",
        Comparison::LessOrEqual => "<=",
        Comparison::Greater => ">",
        Comparison::GreaterOrEqual => ">=",
    }
}

pub(crate) fn write_literal(f: &mut impl Write, literal: &Literal) -> fmt::Result {
    match literal {
        Literal::Str(text) => write_string(f, text),
        Literal::Int(value) => write!(f, "{value}"),
        // `{:?}` is the shortest text that parses back to the same f64, and always has a `.` or
        // an exponent, so it reads back as a float.
        Literal::Float(value) => write!(f, "{value:?}"),
        Literal::Bool(value) => f.write_str(if *value { "TRUE" } else { "FALSE" }),
    }
}

fn write_string(f: &mut impl Write, text: &str) -> fmt::Result {
    f.write_char('\'')?;
    f.write_str(&text.replace('\'', "''"))?;
    f.write_char('\'')
}

/// Bare when it lexes back as the same identifier, double-quoted otherwise.
pub(crate) fn write_name(f: &mut impl Write, name: &str) -> fmt::Result {
    let mut chars = name.chars();
    let bare = chars.next().is_some_and(is_identifier_start)
        && chars.all(is_identifier_part)
        && Keyword::from_word(name).is_none();
    if bare {
        f.write_str(name)
    } else {
        f.write_char('"')?;
        f.write_str(&name.replace('"', "\"\""))?;
        f.write_char('"')
    }
}
