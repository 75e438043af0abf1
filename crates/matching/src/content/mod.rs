//! The content index of one pattern group: subscriptions with selectors, filed by an access
//! predicate so that a message reaches only the subscriptions whose access predicate it
//! satisfies, and only their residues are evaluated.
//!
//! Selectors with no indexable predicate (`a <> 1`, `name LIKE 'x%'`, `NOT ...`) are kept in a
//! list and evaluated for every message of the group; [`crate::MatchStats`] counts them so an
//! operator can see when that list grows.

mod buckets;
mod plan;
mod shared;

use rustc_hash::FxHashMap;

pub(crate) use shared::{AtomTable, MessageView, PropertyId, Resolved, Vocabulary};

use self::buckets::{AccessKey, Member, Moved, PropertyIndex};
use self::shared::{AtomList, Residue};
use crate::selector::Selector;

/// What one matching caller writes while it reads the shared index: work counters (the index
/// folds them into its statistics), each predicate's truth for the current message, and which
/// entries the current group already reached. Kept by the caller, so many callers can match
/// through one index at once (a broker's sessions each have their own).
#[derive(Debug, Default, Clone)]
pub(crate) struct Work {
    pub(crate) index_hits: u64,
    pub(crate) unindexed_checks: u64,
    pub(crate) selector_evaluations: u64,
    /// By atom id: the message epoch whose truth is remembered, and that truth.
    pub(crate) memo: Vec<(u64, crate::selector::Truth)>,
    /// By entry slot: the visit (`visit`) that last reached the entry; stops a second visit
    /// through another key of the same access set.
    seen: Vec<u64>,
    visit: u64,
}

/// The hot part of an entry, kept in its bucket member when the entry has one access key and
/// only shared atoms to check: the subscriber and those atoms.
#[derive(Debug, Clone)]
pub(crate) struct Direct<S> {
    subscriber: S,
    atoms: AtomList,
}

/// How an entry is found.
#[derive(Debug)]
enum Filing {
    /// In the buckets of these keys, at these positions.
    Indexed(Box<[(AccessKey, u32)]>),
    /// In the unindexed list, at this position.
    Unindexed(u32),
}

#[derive(Debug)]
struct Entry<S> {
    subscriber: S,
    filing: Filing,
    residue: Residue,
}

/// Subscriptions with selectors for one pattern.
#[derive(Debug)]
pub(crate) struct ContentIndex<S> {
    /// Slab of entries; free slots are listed in `free`.
    entries: Vec<Option<Entry<S>>>,
    free: Vec<u32>,
    properties: FxHashMap<PropertyId, PropertyIndex<Direct<S>>>,
    unindexed: Vec<u32>,
    len: usize,
}

impl<S> Default for ContentIndex<S> {
    fn default() -> Self {
        ContentIndex {
            entries: Vec::new(),
            free: Vec::new(),
            properties: FxHashMap::default(),
            unindexed: Vec::new(),
            len: 0,
        }
    }
}

impl<S> ContentIndex<S> {
    /// Adds a subscription; returns its slot. Costs the selector's size, nothing proportional to
    /// the number of subscriptions.
    pub(crate) fn insert(
        &mut self,
        selector: &Selector,
        subscriber: S,
        vocabulary: &mut Vocabulary,
        atoms: &mut AtomTable,
    ) -> u32
    where
        S: Clone,
    {
        let conjuncts = selector.condition().conjuncts();
        let cost = |name: &str, kind: &_| {
            vocabulary.get(name).and_then(|id| self.properties.get(&id)).map_or(0, |index| index.cost(kind))
        };
        let access = plan::best_access(conjuncts, &cost);
        let skip = access.as_ref().and_then(|(position, candidate)| candidate.exact.then_some(*position));
        let keys: Vec<AccessKey> = access
            .map(|(_, candidate)| candidate.keys)
            .unwrap_or_default()
            .into_iter()
            .map(|(name, kind)| AccessKey { property: vocabulary.intern(name), kind })
            .collect();
        let residue = plan::residue(conjuncts, skip, vocabulary, atoms);

        let slot = self.free.pop().unwrap_or_else(|| {
            self.entries.push(None);
            self.entries.len() as u32 - 1
        });
        let filing = if keys.is_empty() {
            self.unindexed.push(slot);
            Filing::Unindexed(self.unindexed.len() as u32 - 1)
        } else {
            let mut filed = Vec::with_capacity(keys.len());
            let direct = (keys.len() == 1 && residue.rest.is_none())
                .then(|| Direct { subscriber: subscriber.clone(), atoms: residue.atoms.clone() });
            for (link, key) in keys.into_iter().enumerate() {
                let member = Member { slot, link: link as u32, direct: direct.clone() };
                let position = self.properties.entry(key.property).or_default().add(&key.kind, member);
                filed.push((key, position));
            }
            Filing::Indexed(filed.into())
        };
        self.entries[slot as usize] = Some(Entry { subscriber, filing, residue });
        self.len += 1;
        slot
    }

    /// Removes the subscription in `slot`, returning what it held.
    pub(crate) fn remove(&mut self, slot: u32, vocabulary: &mut Vocabulary, atoms: &mut AtomTable) -> Option<S> {
        let entry = self.entries.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        self.len -= 1;
        let Entry { subscriber, filing, residue } = entry;
        match filing {
            Filing::Unindexed(position) => {
                let position = position as usize;
                self.unindexed.swap_remove(position);
                if let Some(&moved) = self.unindexed.get(position) {
                    if let Some(Some(Entry { filing: Filing::Unindexed(at), .. })) =
                        self.entries.get_mut(moved as usize)
                    {
                        *at = position as u32;
                    }
                }
            }
            Filing::Indexed(mut keys) => {
                for link in 0..keys.len() {
                    let (property, position) = (keys[link].0.property, keys[link].1);
                    // An entry filed twice in one bucket (`n = 2 OR n = 2.0`) can have its own
                    // later member moved into the freed position: it is out of `entries` now,
                    // so its positions are fixed here.
                    if let Some(moved) = self.unfile(&keys[link].0, position) {
                        if moved.slot == slot {
                            if let Some((_, at)) = keys.get_mut(moved.link as usize) {
                                *at = position;
                            }
                        }
                    }
                    vocabulary.release(property);
                }
            }
        }
        residue.release(atoms, vocabulary);
        Some(subscriber)
    }

    /// Takes the member at `position` out of `key`'s bucket and fixes up the member moved there;
    /// returns the moved member when its entry is not in `entries` (the one being removed).
    fn unfile(&mut self, key: &AccessKey, position: u32) -> Option<Moved> {
        let index = self.properties.get_mut(&key.property)?;
        let moved = index.remove(&key.kind, position);
        if index.is_empty() {
            self.properties.remove(&key.property);
        }
        let moved = moved?;
        match self.entries.get_mut(moved.slot as usize) {
            Some(Some(Entry { filing: Filing::Indexed(keys), .. })) => {
                if let Some((_, at)) = keys.get_mut(moved.link as usize) {
                    *at = position;
                }
                None
            }
            _ => Some(moved),
        }
    }

    /// Appends the subscriber of every entry whose selector is TRUE for the message.
    pub(crate) fn deliver(&self, view: &MessageView<'_>, atoms: &AtomTable, work: &mut Work, out: &mut Vec<S>)
    where
        S: Clone,
    {
        let ContentIndex { entries, properties, unindexed, .. } = self;
        work.visit += 1;
        for &(property, position) in view.resolved.list() {
            let (Some(index), Some(found)) = (properties.get(&property), view.properties.value_at(position)) else {
                continue;
            };
            index.for_each_satisfied(found, &mut |member| {
                work.index_hits += 1;
                match &member.direct {
                    Some(direct) => deliver_direct(direct, view, atoms, work, out),
                    None => consider(entries, member.slot, view, atoms, work, out),
                }
            });
        }
        for &slot in unindexed.iter() {
            work.unindexed_checks += 1;
            consider(entries, slot, view, atoms, work, out);
        }
    }

    /// Number of subscriptions.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Number of subscriptions evaluated for every message.
    pub(crate) fn unindexed_len(&self) -> usize {
        self.unindexed.len()
    }
}

/// Checks a candidate from its bucket member alone (see [`Direct`]).
fn deliver_direct<S: Clone>(
    direct: &Direct<S>,
    view: &MessageView<'_>,
    atoms: &AtomTable,
    work: &mut Work,
    out: &mut Vec<S>,
) {
    if !direct.atoms.as_slice().is_empty() {
        work.selector_evaluations += 1;
        if !direct.atoms.all_true(atoms, view, &mut work.memo) {
            return;
        }
    }
    out.push(direct.subscriber.clone());
}

/// Checks one candidate: skip if already seen for this message, else evaluate its residue.
fn consider<S: Clone>(
    entries: &[Option<Entry<S>>],
    slot: u32,
    view: &MessageView<'_>,
    atoms: &AtomTable,
    work: &mut Work,
    out: &mut Vec<S>,
) {
    let Some(Some(entry)) = entries.get(slot as usize) else { return };
    // Only an entry filed under several keys can be reached twice; skipping the stamp for the
    // others saves a write per candidate when a range reaches thousands of them.
    let filed_many = matches!(&entry.filing, Filing::Indexed(keys) if keys.len() > 1);
    if filed_many {
        let at = slot as usize;
        if work.seen.len() <= at {
            work.seen.resize(at + 1, 0);
        }
        if work.seen[at] == work.visit {
            return;
        }
        work.seen[at] = work.visit;
    }
    if !entry.residue.is_empty() {
        work.selector_evaluations += 1;
        if !entry.residue.holds(atoms, view, &mut work.memo) {
            return;
        }
    }
    out.push(entry.subscriber.clone());
}

#[cfg(test)]
mod tests {
    use tidings_wire::Property;

    use super::*;

    /// A content index with its shared tables, and a message counter for epochs.
    #[derive(Default)]
    struct Fixture {
        index: ContentIndex<u32>,
        vocabulary: Vocabulary,
        atoms: AtomTable,
        epoch: u64,
    }

    impl Fixture {
        fn insert(&mut self, selector: &str, subscriber: u32) -> u32 {
            let selector = Selector::parse(selector).unwrap();
            self.index.insert(&selector, subscriber, &mut self.vocabulary, &mut self.atoms)
        }

        fn remove(&mut self, slot: u32) -> Option<u32> {
            self.index.remove(slot, &mut self.vocabulary, &mut self.atoms)
        }

        fn deliver(&mut self, properties: &[Property]) -> (Vec<u32>, Work) {
            self.epoch += 1;
            let mut resolved = Resolved::default();
            MessageView::resolve_into(&properties, &self.vocabulary, &mut resolved);
            let view = MessageView { properties: &properties, resolved: &resolved, epoch: self.epoch };
            let (mut out, mut work) = (Vec::new(), Work::default());
            self.index.deliver(&view, &self.atoms, &mut work, &mut out);
            out.sort_unstable();
            (out, work)
        }
    }

    #[test]
    fn a_shared_predicate_is_passed_over_for_a_selective_one() {
        let mut fixture = Fixture::default();
        for k in 0..100 {
            fixture.insert(&format!("t1 = 'a' AND t4 = {k}"), k);
        }
        let (out, work) = fixture.deliver(&[Property::new("t1", "a"), Property::new("t4", 42i64)]);
        assert_eq!(out, [42]);
        assert!(work.index_hits <= 2, "only the first subscription is filed under t1: {work:?}");
        assert_eq!(fixture.atoms.len(), 2, "t1 = 'a' is one shared predicate, plus the first one's t4 = 0");
    }

    #[test]
    fn a_subscription_reached_by_two_keys_is_delivered_once() {
        let mut fixture = Fixture::default();
        fixture.insert("a = 1 OR b = 2", 7);
        let (out, work) = fixture.deliver(&[Property::new("a", 1i64), Property::new("b", 2i64)]);
        assert_eq!(out, [7]);
        assert_eq!(work.index_hits, 2);
        assert_eq!(work.selector_evaluations, 1);
    }

    #[test]
    fn an_exact_access_predicate_leaves_nothing_to_evaluate() {
        let mut fixture = Fixture::default();
        fixture.insert("price > 10", 1);
        fixture.insert("symbol IN ('IBM', 'HP')", 2);
        let (out, work) = fixture.deliver(&[Property::new("price", 11.5), Property::new("symbol", "HP")]);
        assert_eq!(out, [1, 2]);
        assert_eq!(work.selector_evaluations, 0);
    }

    #[test]
    fn unindexable_selectors_are_checked_for_every_message() {
        let mut fixture = Fixture::default();
        let slot = fixture.insert("a <> 1", 1);
        fixture.insert("b LIKE 'x%'", 2);
        assert_eq!(fixture.index.unindexed_len(), 2);
        let (out, work) = fixture.deliver(&[Property::new("a", 2i64)]);
        assert_eq!(out, [1]);
        assert_eq!(work.unindexed_checks, 2);
        assert_eq!(fixture.remove(slot), Some(1));
        assert_eq!(fixture.index.unindexed_len(), 1);
        let (out, _) = fixture.deliver(&[Property::new("b", "xy")]);
        assert_eq!(out, [2]);
    }

    #[test]
    fn an_entry_filed_twice_in_one_bucket_leaves_nothing_behind() {
        let mut fixture = Fixture::default();
        fixture.insert("n = 5", 1);
        fixture.insert("n = 2", 3);
        let twice = fixture.insert("n = 2 OR n = 2.0", 2);
        assert_eq!(fixture.remove(twice), Some(2));
        // The freed slot is reused by an unindexed entry; a stale member would deliver it twice.
        fixture.insert("n IS NOT NULL", 4);
        let (out, _) = fixture.deliver(&[Property::new("n", 2i64)]);
        assert_eq!(out, [3, 4]);
        let (out, _) = fixture.deliver(&[Property::new("n", 5i64)]);
        assert_eq!(out, [1, 4]);
    }

    #[test]
    fn removal_keeps_the_other_members_of_a_bucket_reachable() {
        let mut fixture = Fixture::default();
        let slots: Vec<u32> = (0..4).map(|i| fixture.insert("s = 'x' AND n > 0", i)).collect();
        assert_eq!(fixture.remove(slots[0]), Some(0));
        assert_eq!(fixture.remove(slots[0]), None);
        assert_eq!(fixture.remove(slots[2]), Some(2));
        let (out, _) = fixture.deliver(&[Property::new("s", "x"), Property::new("n", 1i64)]);
        assert_eq!(out, [1, 3]);
        fixture.remove(slots[1]);
        fixture.remove(slots[3]);
        assert_eq!(fixture.index.len(), 0);
        assert!(fixture.index.properties.is_empty(), "emptied buckets are pruned");
        assert_eq!(fixture.vocabulary.len(), 0, "names are released with their last user");
        assert_eq!(fixture.atoms.len(), 0, "predicates are released with their last user");
    }
}
