//! Typed property values: the tag=value pairs that content selectors read.

use std::fmt;

/// A property value as it travels on the wire. Selectors compare these with SQL typing rules,
/// so the type is part of the value rather than inferred from text at match time.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// UTF-8 text.
    Str(String),
    /// A signed 64-bit integer.
    Int(i64),
    /// An IEEE-754 double.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl Value {
    /// The one-byte type code used on the wire (see `docs/protocol.md`).
    pub fn type_code(&self) -> u8 {
        match self {
            Value::Str(_) => 0,
            Value::Int(_) => 1,
            Value::Float(_) => 2,
            Value::Bool(_) => 3,
        }
    }

    /// Types a command-line value by its look: integer, float, `true`/`false`, else string.
    /// A leading `'` or `"` pair forces a string (`'42'` is the text 42), so a user is never
    /// stuck with a number they meant as text.
    pub fn from_cli(text: &str) -> Value {
        let quoted = text.len() >= 2
            && ((text.starts_with('\'') && text.ends_with('\'')) || (text.starts_with('"') && text.ends_with('"')));
        if quoted {
            return Value::Str(text[1..text.len() - 1].to_string());
        }
        if let Ok(i) = text.parse::<i64>() {
            return Value::Int(i);
        }
        if text.contains(['.', 'e', 'E']) || text.eq_ignore_ascii_case("inf") {
            if let Ok(f) = text.parse::<f64>() {
                if f.is_finite() {
                    return Value::Float(f);
                }
            }
        }
        match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::Str(text.to_string()),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) => write!(f, "{s}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// One key=value pair of a message. A message keeps its properties as an ordered list, as the
/// publisher gave them; keys are expected to be unique, and the first wins when they are not.
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    /// The property name (an identifier in selector syntax).
    pub key: String,
    /// The typed value.
    pub value: Value,
}

impl Property {
    /// Builds a property from a key and anything convertible to a [`Value`].
    pub fn new(key: impl Into<String>, value: impl Into<Value>) -> Property {
        Property { key: key.into(), value: value.into() }
    }
}

/// Finds a property by name in an ordered list (first match wins). Messages carry few
/// properties (seed 004 uses six), so a linear scan beats building a map per message.
pub fn lookup<'a>(properties: &'a [Property], key: &str) -> Option<&'a Value> {
    properties.iter().find(|p| p.key == key).map(|p| &p.value)
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(i)
    }
}
impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::Float(x)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_values_are_typed_by_their_look() {
        assert_eq!(Value::from_cli("120"), Value::Int(120));
        assert_eq!(Value::from_cli("-3"), Value::Int(-3));
        assert_eq!(Value::from_cli("1.5"), Value::Float(1.5));
        assert_eq!(Value::from_cli("true"), Value::Bool(true));
        assert_eq!(Value::from_cli("IBM"), Value::Str("IBM".into()));
        assert_eq!(Value::from_cli("'42'"), Value::Str("42".into()));
        assert_eq!(Value::from_cli("nan"), Value::Str("nan".into()));
    }

    #[test]
    fn lookup_takes_the_first_of_duplicate_keys() {
        let props = vec![Property::new("a", 1i64), Property::new("a", 2i64)];
        assert_eq!(lookup(&props, "a"), Some(&Value::Int(1)));
        assert_eq!(lookup(&props, "b"), None);
    }
}
