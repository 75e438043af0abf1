//! The filter the simulation routes with: topic patterns over dot-separated topics, `*` for one
//! level and `>` for one or more trailing levels (the shape of `tidings-matching`'s patterns,
//! re-implemented here so route does not depend on it).

use serde::Serialize;
use tidings_route::{Filter, LinearIndex};

/// A topic pattern such as `a.*` or `b.>`, kept with its levels split once.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct Pattern {
    text: String,
    #[serde(skip)]
    levels: Vec<String>,
    /// The literal levels before the first wildcard (the covering key).
    #[serde(skip)]
    key: String,
}

impl Pattern {
    pub(crate) fn new(text: &str) -> Self {
        let levels: Vec<String> = text.split('.').map(str::to_string).collect();
        let key = levels.iter().take_while(|l| *l != "*" && *l != ">").cloned().collect::<Vec<_>>().join(".");
        Self { text: text.to_string(), levels, key }
    }
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Filter for Pattern {
    type Message = str;
    type Index = LinearIndex<Self>;

    fn matches(&self, topic: &str) -> bool {
        let mut levels = self.levels.iter();
        let mut topic = topic.split('.');
        loop {
            match (levels.next().map(String::as_str), topic.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(p), Some(t)) if p == t => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    fn covers(&self, other: &Self) -> bool {
        covers(&self.levels, &other.levels)
    }

    fn covering_key(&self) -> &str {
        &self.key
    }
}

fn covers(a: &[String], b: &[String]) -> bool {
    match (a.first().map(String::as_str), b.first().map(String::as_str)) {
        (Some(">"), Some(_)) => true,
        (Some(_), Some(">")) => false,
        (Some("*"), Some(_)) => covers(&a[1..], &b[1..]),
        (Some(x), Some(y)) if x == y => covers(&a[1..], &b[1..]),
        (None, None) => true,
        _ => false,
    }
}

/// Levels the simulation's topics and patterns are made of.
const LEVELS: [&str; 3] = ["a", "b", "c"];

/// Every topic of one to three levels over [`LEVELS`].
pub(crate) fn all_topics() -> Vec<String> {
    let mut topics: Vec<String> = LEVELS.iter().map(|l| l.to_string()).collect();
    for depth in 1..3 {
        let longer: Vec<String> = topics
            .iter()
            .filter(|t| t.split('.').count() == depth)
            .flat_map(|t| LEVELS.iter().map(move |l| format!("{t}.{l}")))
            .collect();
        topics.extend(longer);
    }
    topics
}

/// A random pattern of one to three levels; wildcards common enough that covering matters.
pub(crate) fn random_pattern(rng: &mut super::rng::Rng) -> Pattern {
    let depth = rng.between(1, 3);
    let mut levels = Vec::new();
    for level in 0..depth {
        let roll = rng.below(10);
        if level + 1 == depth && roll == 0 {
            levels.push(">".to_string());
        } else if roll < 3 {
            levels.push("*".to_string());
        } else {
            levels.push(LEVELS[rng.below(LEVELS.len())].to_string());
        }
    }
    Pattern::new(&levels.join("."))
}

/// Every pattern the generator can produce, for checking `covers` against `matches`.
pub(crate) fn all_patterns() -> Vec<Pattern> {
    let tokens = ["a", "b", "c", "*"];
    let mut patterns: Vec<String> = tokens.iter().chain([">"].iter()).map(|t| t.to_string()).collect();
    let mut frontier: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    for _ in 1..3 {
        let mut next = Vec::new();
        for prefix in &frontier {
            for token in tokens.iter().chain([">"].iter()) {
                let pattern = format!("{prefix}.{token}");
                patterns.push(pattern.clone());
                if *token != ">" {
                    next.push(pattern);
                }
            }
        }
        frontier = next;
    }
    patterns.iter().map(|p| Pattern::new(p)).collect()
}
