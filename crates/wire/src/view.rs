//! Properties read in place: a borrowed view of a message's encoded properties, and the lookup
//! trait that selectors and the matching index read through.
//!
//! Why: decoding a message's properties into owned [`Property`] values costs an allocation per
//! key and per string value, on every publish that some selector has to see. The view borrows
//! keys and strings from the message buffer and decodes numbers in place, so matching allocates
//! nothing per message. Both the view and a `[Property]` list implement [`PropertyLookup`], so
//! callers that build properties by hand (tests, clients) keep using lists.

use crate::cursor::Reader;
use crate::error::WireError;
use crate::value::{Property, Value};

/// A property value borrowed from a message buffer or from a [`Value`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// UTF-8 text.
    Str(&'a str),
    /// A signed 64-bit integer.
    Int(i64),
    /// An IEEE-754 double.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl Value {
    /// This value, borrowed.
    pub fn borrowed(&self) -> ValueRef<'_> {
        match self {
            Value::Str(text) => ValueRef::Str(text),
            Value::Int(i) => ValueRef::Int(*i),
            Value::Float(x) => ValueRef::Float(*x),
            Value::Bool(b) => ValueRef::Bool(*b),
        }
    }
}

impl ValueRef<'_> {
    /// An owned copy.
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Str(text) => Value::Str(text.to_string()),
            ValueRef::Int(i) => Value::Int(i),
            ValueRef::Float(x) => Value::Float(x),
            ValueRef::Bool(b) => Value::Bool(b),
        }
    }
}

/// Where a selector finds a message's property values. The matching index resolves each
/// property name once per message through [`PropertyLookup::for_each_key`] and later reads the
/// value by the position it was given, so a view need not search twice.
pub trait PropertyLookup {
    /// The value of the first property named `key` (the first of duplicate keys wins).
    fn lookup(&self, key: &str) -> Option<ValueRef<'_>>;

    /// Calls `visit(position, key)` for every property, in order. `position` is only meaningful
    /// to [`PropertyLookup::value_at`] of the same properties.
    fn for_each_key(&self, visit: &mut dyn FnMut(u32, &str));

    /// The value at a `position` that [`PropertyLookup::for_each_key`] reported.
    fn value_at(&self, position: u32) -> Option<ValueRef<'_>>;
}

impl PropertyLookup for [Property] {
    fn lookup(&self, key: &str) -> Option<ValueRef<'_>> {
        crate::value::lookup(self, key).map(Value::borrowed)
    }

    fn for_each_key(&self, visit: &mut dyn FnMut(u32, &str)) {
        for (position, property) in self.iter().enumerate() {
            visit(position as u32, &property.key);
        }
    }

    fn value_at(&self, position: u32) -> Option<ValueRef<'_>> {
        self.get(position as usize).map(|p| p.value.borrowed())
    }
}

/// Arrays and vectors of properties read as the slice they hold, so a caller can pass `&list`
/// whatever owns it.
macro_rules! lookup_through_slice {
    ($([$($generics:tt)*] $owner:ty),*) => {$(
        impl<$($generics)*> PropertyLookup for $owner {
            fn lookup(&self, key: &str) -> Option<ValueRef<'_>> {
                self.as_slice().lookup(key)
            }

            fn for_each_key(&self, visit: &mut dyn FnMut(u32, &str)) {
                self.as_slice().for_each_key(visit);
            }

            fn value_at(&self, position: u32) -> Option<ValueRef<'_>> {
                self.as_slice().value_at(position)
            }
        }
    )*};
}

lookup_through_slice!([const N: usize] [Property; N], [] Vec<Property>);

/// A reference reads as what it points to; being sized, it can stand behind a `dyn
/// PropertyLookup` even when its target is a slice.
impl<L: PropertyLookup + ?Sized> PropertyLookup for &L {
    fn lookup(&self, key: &str) -> Option<ValueRef<'_>> {
        (**self).lookup(key)
    }

    fn for_each_key(&self, visit: &mut dyn FnMut(u32, &str)) {
        (**self).for_each_key(visit);
    }

    fn value_at(&self, position: u32) -> Option<ValueRef<'_>> {
        (**self).value_at(position)
    }
}

/// The properties section of an encoded message, read in place.
///
/// Invariant: `bytes` holds exactly `count` well-formed properties (checked when the message
/// was decoded), so reading cannot fail. Without `unsafe`, text is re-checked as UTF-8 when it
/// is read; for the short ASCII keys and values of properties that is a few nanoseconds, far
/// below the allocations it replaces.
#[derive(Debug, Clone, Copy)]
pub struct PropertiesRef<'a> {
    bytes: &'a [u8],
    count: u16,
}

impl<'a> PropertiesRef<'a> {
    /// Wraps a validated properties section of `count` properties.
    pub(crate) fn new(bytes: &'a [u8], count: u16) -> PropertiesRef<'a> {
        PropertiesRef { bytes, count }
    }

    /// Number of properties.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// True when the message has no properties.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The properties in order, as `(key, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, ValueRef<'a>)> + 'a {
        let mut reader = Reader::new("message", self.bytes);
        (0..self.len()).map_while(move |index| read_entry(&mut reader, index).ok())
    }

    /// Calls `visit(offset, key, reader)` for each property, `reader` placed at its value, until
    /// `visit` returns false; `offset` is where the entry starts. A value `visit` left unread is
    /// stepped over.
    fn for_each_entry(&self, mut visit: impl FnMut(u32, &'a str, &mut Reader<'a>) -> bool) {
        let mut reader = Reader::new("message", self.bytes);
        for _ in 0..self.len() {
            let offset = reader.position() as u32;
            let Ok(key) = reader.str16("property key") else { return };
            if !visit(offset, key, &mut reader) || skip_value(&mut reader).is_none() {
                return;
            }
        }
    }
}

impl PropertyLookup for PropertiesRef<'_> {
    fn lookup(&self, key: &str) -> Option<ValueRef<'_>> {
        let mut found = None;
        self.for_each_entry(|_, name, reader| {
            if name == key {
                found = read_value(reader, 0).ok();
                return false;
            }
            true
        });
        found
    }

    fn for_each_key(&self, visit: &mut dyn FnMut(u32, &str)) {
        self.for_each_entry(|offset, key, _| {
            visit(offset, key);
            true
        });
    }

    fn value_at(&self, position: u32) -> Option<ValueRef<'_>> {
        let mut reader = Reader::new("message", self.bytes.get(position as usize..)?);
        read_entry(&mut reader, 0).ok().map(|(_, value)| value)
    }
}

/// Reads the property at `index` of a message without copying it; the message decoder validates
/// with it too, so checking a publish allocates nothing.
pub(crate) fn read_entry<'a>(reader: &mut Reader<'a>, index: usize) -> Result<(&'a str, ValueRef<'a>), WireError> {
    let key = reader.str16("property key")?;
    Ok((key, read_value(reader, index)?))
}

/// Reads a type byte and the value it announces.
fn read_value<'a>(reader: &mut Reader<'a>, index: usize) -> Result<ValueRef<'a>, WireError> {
    Ok(match reader.u8("property type")? {
        0 => ValueRef::Str(reader.str16("property value")?),
        1 => ValueRef::Int(reader.u64("property value")? as i64),
        2 => ValueRef::Float(f64::from_bits(reader.u64("property value")?)),
        3 => ValueRef::Bool(reader.bool("property value")?),
        code => return Err(WireError::UnknownValueType { index, code }),
    })
}

/// Steps over a value without checking its text again.
fn skip_value(reader: &mut Reader<'_>) -> Option<()> {
    let width = match reader.u8("property type").ok()? {
        0 => usize::from(reader.u16("property value").ok()?),
        1 | 2 => 8,
        3 => 1,
        _ => return None,
    };
    reader.skip("property value", width).ok()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::Message;

    fn sample() -> Message {
        let properties = [
            Property::new("sym", "IBM"),
            Property::new("price", 120i64),
            Property::new("ratio", 0.5),
            Property::new("live", true),
            Property::new("sym", "HP"),
        ];
        Message::new("a.b", &properties, Bytes::new(), 0).unwrap()
    }

    #[test]
    fn the_view_reads_what_decoding_returns() {
        let message = sample();
        let owned: Vec<(String, Value)> = message.properties().into_iter().map(|p| (p.key, p.value)).collect();
        let viewed: Vec<(String, Value)> =
            message.property_view().iter().map(|(key, value)| (key.to_string(), value.to_value())).collect();
        assert_eq!(viewed, owned);
        assert_eq!(message.property_view().len(), 5);
    }

    #[test]
    fn lookup_agrees_with_the_owned_list_and_takes_the_first_of_duplicates() {
        let message = sample();
        let (view, owned) = (message.property_view(), message.properties());
        for key in ["sym", "price", "ratio", "live", "missing", ""] {
            assert_eq!(view.lookup(key), owned.lookup(key), "{key}");
        }
        assert_eq!(view.lookup("sym"), Some(ValueRef::Str("IBM")));
    }

    #[test]
    fn positions_from_for_each_key_read_back_their_values() {
        let message = sample();
        let view = message.property_view();
        let mut seen = Vec::new();
        view.for_each_key(&mut |position, key| seen.push((key.to_string(), view.value_at(position))));
        let expected: Vec<_> = view.iter().map(|(key, value)| (key.to_string(), Some(value))).collect();
        assert_eq!(seen, expected);
    }
}
