//! The topic trie: from a topic to the groups of subscriptions whose pattern matches it.
//!
//! Each node is one level. A node has a map of literal next levels, one dedicated child for `*`,
//! the group of patterns that end at this node, and the group of patterns that end with `>` right
//! after it. Matching a topic walks at most two children per level (its literal and `*`), so the
//! cost follows the number of patterns that could match, not the number of subscriptions.
//!
//! The trie knows nothing about subscribers: a pattern leads to one [`GroupId`], and the index
//! keeps the group's subscriptions. Many subscriptions to one pattern cost the trie nothing more.

use rustc_hash::FxHashMap;

use crate::topic::{Pattern, PatternLevel};

/// Names the group of all subscriptions that share one pattern. Dense, so groups live in a `Vec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct GroupId(pub(crate) u32);

/// One level of the trie.
///
/// Invariant: apart from the root, every node leads to at least one group (empty nodes are pruned
/// on removal), so the walk never wanders through dead branches.
#[derive(Debug, Default, Clone)]
struct Node {
    /// Children by literal level name.
    literal: FxHashMap<Box<str>, Node>,
    /// The child for a `*` level.
    one_level: Option<Box<Node>>,
    /// The group of the pattern that ends at this node.
    here: Option<GroupId>,
    /// The group of the pattern that is this node's path followed by `>`.
    rest: Option<GroupId>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.literal.is_empty() && self.one_level.is_none() && self.here.is_none() && self.rest.is_none()
    }
}

/// Maps patterns to groups and topics to the groups that match them.
#[derive(Debug, Default, Clone)]
pub(crate) struct TopicTrie {
    root: Node,
}

impl TopicTrie {
    /// The group of exactly this pattern, if it has one.
    pub(crate) fn get(&self, pattern: &Pattern) -> Option<GroupId> {
        let mut node = &self.root;
        for level in pattern.levels() {
            node = match level {
                PatternLevel::Literal(name) => node.literal.get(name)?,
                PatternLevel::OneLevel => node.one_level.as_deref()?,
                PatternLevel::RestLevels => return node.rest,
            };
        }
        node.here
    }

    /// Records that `pattern` leads to `group`, replacing any previous group.
    pub(crate) fn insert(&mut self, pattern: &Pattern, group: GroupId) {
        let mut node = &mut self.root;
        for level in pattern.levels() {
            node = match level {
                PatternLevel::Literal(name) => node.literal.entry(name.into()).or_default(),
                PatternLevel::OneLevel => node.one_level.get_or_insert_with(Box::default),
                PatternLevel::RestLevels => {
                    node.rest = Some(group);
                    return;
                }
            };
        }
        node.here = Some(group);
    }

    /// Forgets `pattern`, pruning nodes that no longer lead anywhere, and returns its group.
    pub(crate) fn remove(&mut self, pattern: &Pattern) -> Option<GroupId> {
        let levels: Vec<PatternLevel<'_>> = pattern.levels().collect();
        remove_below(&mut self.root, &levels)
    }

    /// Appends the group of every pattern that matches `topic` (a valid topic). Each group is
    /// appended at most once, in a fixed order for a given trie.
    pub(crate) fn collect(&self, topic: &str, out: &mut Vec<GroupId>) {
        collect_below(&self.root, topic, out);
    }

    /// Whether `accept` says yes to the group of some pattern that matches `topic` (a valid
    /// topic); the walk stops at the first yes.
    pub(crate) fn any(&self, topic: &str, accept: &mut impl FnMut(GroupId) -> bool) -> bool {
        any_below(&self.root, topic, accept)
    }
}

/// [`TopicTrie::any`] below `node` for the non-empty `topic` remaining; the same walk as
/// [`collect_below`], stopping early.
fn any_below(node: &Node, topic: &str, accept: &mut impl FnMut(GroupId) -> bool) -> bool {
    if node.rest.is_some_and(&mut *accept) {
        return true;
    }
    let (level, remaining) = match topic.split_once('.') {
        Some((level, remaining)) => (level, Some(remaining)),
        None => (topic, None),
    };
    let children = [node.literal.get(level), node.one_level.as_deref()];
    children.into_iter().flatten().any(|child| match remaining {
        None => child.here.is_some_and(&mut *accept),
        Some(remaining) => any_below(child, remaining, accept),
    })
}

/// Removes the pattern made of `levels` under `node`; prunes emptied children on the way back.
fn remove_below(node: &mut Node, levels: &[PatternLevel<'_>]) -> Option<GroupId> {
    let Some((first, rest)) = levels.split_first() else {
        return node.here.take();
    };
    match first {
        PatternLevel::RestLevels => node.rest.take(),
        PatternLevel::Literal(name) => {
            let child = node.literal.get_mut(*name)?;
            let removed = remove_below(child, rest);
            if child.is_empty() {
                node.literal.remove(*name);
            }
            removed
        }
        PatternLevel::OneLevel => {
            let child = node.one_level.as_deref_mut()?;
            let removed = remove_below(child, rest);
            if child.is_empty() {
                node.one_level = None;
            }
            removed
        }
    }
}

/// Collects matches for the non-empty `topic` remaining below `node`. Recursion depth is bounded
/// by the number of levels, which validation caps.
fn collect_below(node: &Node, topic: &str, out: &mut Vec<GroupId>) {
    out.extend(node.rest);
    let (level, remaining) = match topic.split_once('.') {
        Some((level, remaining)) => (level, Some(remaining)),
        None => (topic, None),
    };
    if let Some(child) = node.literal.get(level) {
        visit(child, remaining, out);
    }
    if let Some(child) = node.one_level.as_deref() {
        visit(child, remaining, out);
    }
}

/// Continues the walk at `child` with the levels left after it, if any.
fn visit(child: &Node, remaining: Option<&str>, out: &mut Vec<GroupId>) {
    match remaining {
        None => out.extend(child.here),
        Some(remaining) => collect_below(child, remaining, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> Pattern {
        Pattern::parse(text).unwrap()
    }

    fn collected(trie: &TopicTrie, topic: &str) -> Vec<u32> {
        let mut out = Vec::new();
        trie.collect(topic, &mut out);
        let mut ids: Vec<u32> = out.into_iter().map(|group| group.0).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn topics_reach_every_matching_pattern_once() {
        let mut trie = TopicTrie::default();
        for (id, text) in ["a.b.c", "a.*.c", "a.>", ">", "*.*", "a.b", "*.b.>"].iter().enumerate() {
            trie.insert(&pattern(text), GroupId(id as u32));
        }
        assert_eq!(collected(&trie, "a.b.c"), [0, 1, 2, 3, 6]);
        assert_eq!(collected(&trie, "a.b"), [2, 3, 4, 5]);
        assert_eq!(collected(&trie, "a"), [3]);
        assert_eq!(collected(&trie, "x.b.y.z"), [3, 6]);
    }

    #[test]
    fn removing_a_pattern_prunes_its_branch_and_keeps_the_others() {
        let mut trie = TopicTrie::default();
        trie.insert(&pattern("a.b.c"), GroupId(0));
        trie.insert(&pattern("a.*"), GroupId(1));
        trie.insert(&pattern("a.>"), GroupId(2));
        assert_eq!(trie.get(&pattern("a.*")), Some(GroupId(1)));
        assert_eq!(trie.remove(&pattern("a.b.c")), Some(GroupId(0)));
        assert_eq!(trie.remove(&pattern("a.b.c")), None);
        assert!(!trie.root.literal["a"].literal.contains_key("b"));
        assert_eq!(trie.remove(&pattern("a.*")), Some(GroupId(1)));
        assert_eq!(trie.remove(&pattern("a.>")), Some(GroupId(2)));
        assert!(trie.root.is_empty());
    }

    #[test]
    fn unknown_patterns_have_no_group() {
        let mut trie = TopicTrie::default();
        trie.insert(&pattern("a.b"), GroupId(0));
        assert_eq!(trie.get(&pattern("a")), None);
        assert_eq!(trie.get(&pattern("a.>")), None);
        assert_eq!(trie.get(&pattern("a.*")), None);
        assert_eq!(trie.remove(&pattern("x.y")), None);
    }
}
