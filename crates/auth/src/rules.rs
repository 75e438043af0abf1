//! Topic rules compiled into a trie, so that the check a delivery makes per message costs a walk
//! over the topic's levels, not a loop over a user's rules (a user may have a thousand).

use rustc_hash::FxHashMap;
use tidings_matching::{Pattern, PatternLevel};

/// A set of topic patterns that answers "does any of them match this topic?" in time bounded by
/// the topic's depth (times the `*` branches the rules themselves create), not by their number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    patterns: Vec<Pattern>,
    root: Node,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Node {
    /// FxHash, not SipHash: the keys are the users file's, not a client's, so there is no
    /// flooding to resist, and hashing the topic's level is most of a lookup's cost.
    literal: FxHashMap<String, Node>,
    one_level: Option<Box<Node>>,
    /// A rule ends here with `>`: one or more further levels match.
    rest: bool,
    /// A rule ends exactly here.
    end: bool,
}

impl RuleSet {
    /// Compiles `patterns` (already validated as tidings patterns).
    pub fn new(patterns: Vec<Pattern>) -> RuleSet {
        let mut root = Node::default();
        for pattern in &patterns {
            let mut node = &mut root;
            for level in pattern.levels() {
                match level {
                    PatternLevel::Literal(name) => node = node.literal.entry(name.to_string()).or_default(),
                    PatternLevel::OneLevel => node = node.one_level.get_or_insert_with(Box::default),
                    PatternLevel::RestLevels => {
                        node.rest = true;
                        break;
                    }
                }
            }
            if !pattern.as_str().ends_with('>') {
                node.end = true;
            }
        }
        RuleSet { patterns, root }
    }

    /// Whether there is no rule at all (a delivery check can then be skipped).
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The rules as written, for logs and `/connz`.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Whether some rule matches `topic` (a valid topic: no wildcard).
    pub fn matches(&self, topic: &str) -> bool {
        walk(&self.root, Some(topic))
    }

    /// Whether one rule alone matches every topic `pattern` matches (rules that only together
    /// cover it are not seen: the answer may be a conservative no).
    pub fn covers(&self, pattern: &Pattern) -> bool {
        self.patterns.iter().any(|rule| rule.covers(pattern))
    }

    /// Whether some topic is matched by both `pattern` and a rule.
    pub fn overlaps(&self, pattern: &Pattern) -> bool {
        self.patterns.iter().any(|rule| overlap(rule, pattern))
    }
}

/// Walks the levels left in `rest` (`None`: the topic has ended), without allocating: this
/// runs once per delivery.
fn walk(node: &Node, rest: Option<&str>) -> bool {
    let Some(rest) = rest else {
        return node.end;
    };
    if node.rest {
        return true;
    }
    let (first, after) = match rest.split_once('.') {
        Some((first, after)) => (first, Some(after)),
        None => (rest, None),
    };
    if let Some(next) = node.literal.get(first) {
        if walk(next, after) {
            return true;
        }
    }
    node.one_level.as_ref().is_some_and(|next| walk(next, after))
}

/// Whether two patterns share a topic, level by level: `>` takes one or more levels, `*` one.
pub fn overlap(a: &Pattern, b: &Pattern) -> bool {
    let (mut a, mut b) = (a.levels(), b.levels());
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (None, Some(_)) | (Some(_), None) => return false,
            (Some(PatternLevel::RestLevels), Some(_)) | (Some(_), Some(PatternLevel::RestLevels)) => return true,
            (Some(PatternLevel::Literal(x)), Some(PatternLevel::Literal(y))) if x != y => return false,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(rules: &[&str]) -> RuleSet {
        RuleSet::new(rules.iter().filter_map(|r| Pattern::parse(r).ok()).collect())
    }

    #[test]
    fn the_trie_agrees_with_the_patterns_on_examples() {
        let rules = set(&["a.b", "a.*.c", "x.>", "*"]);
        for (topic, want) in [
            ("a.b", true),
            ("a.z.c", true),
            ("a.z", false),
            ("x", true),
            ("x.y.z", true),
            ("y.z", false),
            ("q", true),
            ("q.r", false),
        ] {
            assert_eq!(rules.matches(topic), want, "{topic}");
        }
    }

    #[test]
    fn overlap_follows_the_level_rules() {
        let p = |s: &str| Pattern::parse(s).ok();
        let cases = [("a.>", "a", false), ("a.>", "a.b.c", true), ("*.b", "a.*", true), ("a.b", "a.c", false)];
        for (x, y, want) in cases {
            let (Some(x), Some(y)) = (p(x), p(y)) else { panic!("bad pattern in test") };
            assert_eq!(overlap(&x, &y), want, "{x} {y}");
            assert_eq!(overlap(&y, &x), want, "{y} {x}");
        }
    }
}
