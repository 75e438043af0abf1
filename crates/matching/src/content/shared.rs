//! State the content indexes of all groups share: interned property names, interned atomic
//! predicates with a per-message memo, and the per-message view of the properties.
//!
//! Interning is what keeps a subscription small: in the seed 004 workload a million selectors
//! share the predicates `t1 = 'a'`, `t2 = 'b'` and `t3 = 'c'`, so each residue is three 4-byte
//! ids, and each shared predicate is evaluated at most once per message however many candidates
//! need it (the "predicate bit vector" of Fabret et al., SIGMOD 2001).

use rustc_hash::FxHashMap;
use tidings_wire::{PropertyLookup, ValueRef};

use crate::selector::{compare_value, evaluate, Comparison, Condition, Literal, Resolve, Truth};

/// An interned property name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PropertyId(u32);

/// An interned atomic predicate `property op literal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AtomId(u32);

/// Reference-counted interning of property names.
///
/// Invariant: `ids[name] == id` exactly when `names[id] == Some((name, count))` with `count > 0`.
#[derive(Debug, Default)]
pub(crate) struct Vocabulary {
    ids: FxHashMap<Box<str>, PropertyId>,
    names: Vec<Option<(Box<str>, u32)>>,
    free: Vec<PropertyId>,
}

impl Vocabulary {
    /// The id of `name`, taking one reference to it.
    pub(crate) fn intern(&mut self, name: &str) -> PropertyId {
        if let Some(&id) = self.ids.get(name) {
            if let Some(Some((_, count))) = self.names.get_mut(id.0 as usize) {
                *count += 1;
            }
            return id;
        }
        let id = self.free.pop().unwrap_or_else(|| {
            self.names.push(None);
            PropertyId(self.names.len() as u32 - 1)
        });
        self.names[id.0 as usize] = Some((name.into(), 1));
        self.ids.insert(name.into(), id);
        id
    }

    /// Drops one reference taken by [`Vocabulary::intern`].
    pub(crate) fn release(&mut self, id: PropertyId) {
        let Some(slot) = self.names.get_mut(id.0 as usize) else { return };
        let Some((_, count)) = slot else { return };
        *count -= 1;
        if *count == 0 {
            if let Some((name, _)) = slot.take() {
                self.ids.remove(&name);
            }
            self.free.push(id);
        }
    }

    /// The id of `name` if some selector uses it.
    pub(crate) fn get(&self, name: &str) -> Option<PropertyId> {
        self.ids.get(name).copied()
    }

    /// Number of distinct names in use.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }
}

/// Hashable form of a literal (floats by bit pattern: interning is syntactic).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum LiteralKey {
    Str(Box<str>),
    Int(i64),
    Float(u64),
    Bool(bool),
}

impl LiteralKey {
    fn of(literal: &Literal) -> LiteralKey {
        match literal {
            Literal::Str(text) => LiteralKey::Str(text.clone()),
            Literal::Int(i) => LiteralKey::Int(*i),
            Literal::Float(x) => LiteralKey::Float(x.to_bits()),
            Literal::Bool(b) => LiteralKey::Bool(*b),
        }
    }
}

/// One interned predicate with its reference count and its answer for the current message.
#[derive(Debug)]
struct Atom {
    property: PropertyId,
    op: Comparison,
    literal: Literal,
    references: u32,
}

/// Reference-counted interning of `property op literal` predicates.
#[derive(Debug, Default)]
pub(crate) struct AtomTable {
    ids: FxHashMap<(PropertyId, Comparison, LiteralKey), AtomId>,
    atoms: Vec<Option<Atom>>,
    free: Vec<AtomId>,
}

impl AtomTable {
    /// The id of `property op literal`, taking one reference. The caller's reference to
    /// `property` passes to the table (released when the atom is).
    pub(crate) fn intern(
        &mut self,
        property: PropertyId,
        op: Comparison,
        literal: &Literal,
        vocabulary: &mut Vocabulary,
    ) -> AtomId {
        let key = (property, op, LiteralKey::of(literal));
        if let Some(&id) = self.ids.get(&key) {
            if let Some(Some(atom)) = self.atoms.get_mut(id.0 as usize) {
                atom.references += 1;
            }
            vocabulary.release(property);
            return id;
        }
        let id = self.free.pop().unwrap_or_else(|| {
            self.atoms.push(None);
            AtomId(self.atoms.len() as u32 - 1)
        });
        let atom = Atom { property, op, literal: literal.clone(), references: 1 };
        self.atoms[id.0 as usize] = Some(atom);
        self.ids.insert(key, id);
        id
    }

    /// Drops one reference taken by [`AtomTable::intern`].
    pub(crate) fn release(&mut self, id: AtomId, vocabulary: &mut Vocabulary) {
        let Some(slot) = self.atoms.get_mut(id.0 as usize) else { return };
        let Some(atom) = slot else { return };
        atom.references -= 1;
        if atom.references > 0 {
            return;
        }
        if let Some(atom) = slot.take() {
            self.ids.remove(&(atom.property, atom.op, LiteralKey::of(&atom.literal)));
            vocabulary.release(atom.property);
        }
        self.free.push(id);
    }

    /// The atom's truth for the message `view` describes, computed at most once per message:
    /// `memo` (the caller's, by atom id) remembers it for the message's epoch.
    pub(crate) fn truth(&self, id: AtomId, view: &MessageView<'_>, memo: &mut Vec<(u64, Truth)>) -> Truth {
        let Some(Some(atom)) = self.atoms.get(id.0 as usize) else {
            return Truth::Unknown;
        };
        let at = id.0 as usize;
        if memo.len() <= at {
            memo.resize(at + 1, (0, Truth::Unknown));
        }
        if memo[at].0 != view.epoch {
            memo[at] = (view.epoch, compare_value(atom.op, view.resolve(&atom.property), &atom.literal));
        }
        memo[at].1
    }

    /// Number of distinct predicates in use.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }
}

/// Atom ids of a residue: up to three inline (seed 004's residue is three), more on the heap.
/// Inline saves a pointer chase, a cache miss per candidate on a large index.
#[derive(Debug, Clone)]
pub(crate) enum AtomList {
    Inline(u8, [AtomId; 3]),
    Heap(Box<[AtomId]>),
}

impl AtomList {
    pub(crate) fn new(atoms: Vec<AtomId>) -> AtomList {
        match atoms.as_slice() {
            [] => AtomList::Inline(0, [AtomId(0); 3]),
            [a] => AtomList::Inline(1, [*a, AtomId(0), AtomId(0)]),
            [a, b] => AtomList::Inline(2, [*a, *b, AtomId(0)]),
            [a, b, c] => AtomList::Inline(3, [*a, *b, *c]),
            _ => AtomList::Heap(atoms.into()),
        }
    }

    pub(crate) fn as_slice(&self) -> &[AtomId] {
        match self {
            AtomList::Inline(len, ids) => &ids[..usize::from(*len)],
            AtomList::Heap(ids) => ids,
        }
    }

    /// Whether every atom is TRUE for the message.
    pub(crate) fn all_true(&self, atoms: &AtomTable, view: &MessageView<'_>, memo: &mut Vec<(u64, Truth)>) -> bool {
        self.as_slice().iter().all(|&atom| atoms.truth(atom, view, memo).is_true())
    }
}

/// What is left to check of a selector once its access predicate matched: interned atoms and any
/// other conjuncts, all of which must be TRUE.
#[derive(Debug)]
pub(crate) struct Residue {
    pub(crate) atoms: AtomList,
    pub(crate) rest: Option<Box<Condition<PropertyId>>>,
}

impl Residue {
    /// True when nothing is left to check: the access predicate was the whole selector.
    pub(crate) fn is_empty(&self) -> bool {
        self.atoms.as_slice().is_empty() && self.rest.is_none()
    }

    /// Whether every remaining conjunct is TRUE for the message.
    pub(crate) fn holds(&self, atoms: &AtomTable, view: &MessageView<'_>, memo: &mut Vec<(u64, Truth)>) -> bool {
        self.atoms.all_true(atoms, view, memo) && self.rest.as_deref().is_none_or(|rest| evaluate(rest, view).is_true())
    }

    /// Returns the references this residue holds.
    pub(crate) fn release(&self, atoms: &mut AtomTable, vocabulary: &mut Vocabulary) {
        for &atom in self.atoms.as_slice() {
            atoms.release(atom, vocabulary);
        }
        if let Some(rest) = &self.rest {
            rest.for_each_property(&mut |&property| vocabulary.release(property));
        }
    }
}

/// One message as the content indexes see it: its properties by interned id.
pub(crate) struct MessageView<'a> {
    /// A list of properties or a view of an encoded message's; a trait object so the content
    /// index is compiled once, at the cost of an indirect call per resolved property.
    pub(crate) properties: &'a dyn PropertyLookup,
    /// Where each property some selector names sits in `properties`.
    pub(crate) resolved: &'a Resolved,
    /// Distinguishes this message from every earlier one (memo and dedupe stamps).
    pub(crate) epoch: u64,
}

/// The current message's properties that some selector names, by interned id: a list to walk
/// and a table by id, so resolving a message is linear in its properties and each lookup
/// constant, however many properties a publisher sends or selectors name (a list searched per
/// property made 65,535 properties against 227 selectors cost 0.8 s a message).
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// `(id, position in properties)`, first of duplicate keys only, as
    /// [`tidings_wire::lookup`] does.
    list: Vec<(PropertyId, u32)>,
    /// By id: the generation that set it and the position. Stamped rather than cleared, so a
    /// message costs nothing for the ids it does not have.
    slots: Vec<(u64, u32)>,
    generation: u64,
}

impl Resolved {
    /// The resolved properties in message order.
    pub(crate) fn list(&self) -> &[(PropertyId, u32)] {
        &self.list
    }

    fn position(&self, id: PropertyId) -> Option<u32> {
        match self.slots.get(id.0 as usize) {
            Some(&(generation, position)) if generation == self.generation => Some(position),
            _ => None,
        }
    }
}

impl MessageView<'_> {
    /// Fills `resolved` with the properties of `properties` that `vocabulary` knows.
    pub(crate) fn resolve_into(properties: &dyn PropertyLookup, vocabulary: &Vocabulary, resolved: &mut Resolved) {
        resolved.list.clear();
        resolved.generation += 1;
        let generation = resolved.generation;
        properties.for_each_key(&mut |position, key| {
            let Some(id) = vocabulary.get(key) else { return };
            let index = id.0 as usize;
            if resolved.slots.len() <= index {
                resolved.slots.resize(index + 1, (0, 0));
            }
            if resolved.slots[index].0 != generation {
                resolved.slots[index] = (generation, position);
                resolved.list.push((id, position));
            }
        });
    }
}

impl Resolve<PropertyId> for MessageView<'_> {
    fn resolve(&self, property: &PropertyId) -> Option<ValueRef<'_>> {
        self.properties.value_at(self.resolved.position(*property)?)
    }
}

#[cfg(test)]
mod tests {
    use tidings_wire::Property;

    use super::*;

    #[test]
    fn names_are_freed_with_their_last_reference_and_their_ids_reused() {
        let mut vocabulary = Vocabulary::default();
        let a = vocabulary.intern("a");
        assert_eq!(vocabulary.intern("a"), a);
        vocabulary.release(a);
        assert_eq!(vocabulary.get("a"), Some(a));
        vocabulary.release(a);
        assert_eq!(vocabulary.get("a"), None);
        assert_eq!(vocabulary.intern("b"), a, "the freed id is reused");
    }

    #[test]
    fn equal_predicates_are_one_atom_evaluated_once_per_message() {
        let mut vocabulary = Vocabulary::default();
        let mut atoms = AtomTable::default();
        let name = vocabulary.intern("t1");
        let first = atoms.intern(name, Comparison::Equal, &Literal::Str("a".into()), &mut vocabulary);
        let name = vocabulary.intern("t1");
        let second = atoms.intern(name, Comparison::Equal, &Literal::Str("a".into()), &mut vocabulary);
        assert_eq!(first, second);
        assert_eq!(atoms.len(), 1);

        let properties = [Property::new("t1", "a")];
        let mut resolved = Resolved::default();
        MessageView::resolve_into(&properties, &vocabulary, &mut resolved);
        let view = MessageView { properties: &properties, resolved: &resolved, epoch: 1 };
        let mut memo = Vec::new();
        assert_eq!(atoms.truth(first, &view, &mut memo), Truth::True);
        let other = [Property::new("t1", "b")];
        MessageView::resolve_into(&other, &vocabulary, &mut resolved);
        let stale = MessageView { properties: &other, resolved: &resolved, epoch: 1 };
        assert_eq!(atoms.truth(first, &stale, &mut memo), Truth::True, "same epoch: the memo answers");
        let fresh = MessageView { properties: &other, resolved: &resolved, epoch: 2 };
        assert_eq!(atoms.truth(first, &fresh, &mut memo), Truth::False);

        atoms.release(first, &mut vocabulary);
        atoms.release(second, &mut vocabulary);
        assert_eq!(atoms.len(), 0);
        assert_eq!(vocabulary.len(), 0);
    }

    #[test]
    fn only_the_first_of_duplicate_properties_is_resolved() {
        let mut vocabulary = Vocabulary::default();
        let id = vocabulary.intern("a");
        let properties = [Property::new("x", 0i64), Property::new("a", 1i64), Property::new("a", 2i64)];
        let mut resolved = Resolved::default();
        MessageView::resolve_into(&properties, &vocabulary, &mut resolved);
        assert_eq!(resolved.list(), [(id, 1)]);
        assert_eq!(resolved.position(id), Some(1));
        // The next message does not see the previous one's positions.
        MessageView::resolve_into(&[Property::new("x", 0i64)], &vocabulary, &mut resolved);
        assert_eq!((resolved.list(), resolved.position(id)), (&[][..], None));
    }

    #[test]
    fn short_atom_lists_are_inline() {
        assert!(matches!(AtomList::new(vec![AtomId(1), AtomId(2), AtomId(3)]), AtomList::Inline(3, _)));
        let long = AtomList::new((0..5).map(AtomId).collect());
        assert!(matches!(long, AtomList::Heap(_)));
        assert_eq!(long.as_slice().len(), 5);
    }
}
