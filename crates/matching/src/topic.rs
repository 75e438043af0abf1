//! Topics (`plant.line3.temp`) and topic patterns (`plant.*.temp`, `plant.>`).
//!
//! A topic is a non-empty list of non-empty levels separated by `.`. A pattern is the same, except
//! that a level may be `*` (exactly one level) or, as the last level only, `>` (one or more
//! remaining levels). Both are validated once, at the edge, so that the index can treat every
//! string it sees as well formed and never re-check on the hot path.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Longest topic or pattern accepted, in bytes. Bounds the memory a single subscription or message
/// can make the index hold and keeps cache keys small.
pub const MAX_TOPIC_BYTES: usize = 1024;

/// Most levels a topic or pattern may have. Bounds the depth of the trie walk.
pub const MAX_TOPIC_LEVELS: usize = 64;

/// The separator between levels.
const SEPARATOR: char = '.';
/// The wildcard level that matches exactly one level.
const ONE_LEVEL: &str = "*";
/// The wildcard level that matches one or more remaining levels.
const REST_LEVELS: &str = ">";

/// Why a topic or pattern was rejected. Offsets are byte offsets into the input and levels are
/// counted from 0, so a caller can point at the spot.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopicError {
    /// The input was the empty string.
    #[error("a topic must have at least one level, found an empty string")]
    Empty,
    /// The input is longer than [`MAX_TOPIC_BYTES`].
    #[error("a topic may be at most {max} bytes long, found {length}")]
    TooLong {
        /// Length of the input in bytes.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// The input has more than [`MAX_TOPIC_LEVELS`] levels.
    #[error("a topic may have at most {max} levels, found {levels}")]
    TooManyLevels {
        /// Number of levels in the input.
        levels: usize,
        /// The limit.
        max: usize,
    },
    /// Two separators in a row, or a separator at the start or the end.
    #[error("level {level} (at byte {offset}) is empty; expected a name between the dots")]
    EmptyLevel {
        /// Index of the empty level.
        level: usize,
        /// Byte offset where the empty level starts.
        offset: usize,
    },
    /// A whitespace or control character inside a level.
    #[error("level {level} has the character {character:?} at byte {offset}; whitespace and control characters are not allowed")]
    InvalidCharacter {
        /// Index of the level holding the character.
        level: usize,
        /// Byte offset of the character.
        offset: usize,
        /// The offending character.
        character: char,
    },
    /// A `*` or `>` in a topic (only patterns may hold wildcards).
    #[error("level {level} has the wildcard {character:?} at byte {offset}; a topic names one place, only a pattern may hold wildcards")]
    WildcardInTopic {
        /// Index of the level holding the wildcard.
        level: usize,
        /// Byte offset of the wildcard.
        offset: usize,
        /// `*` or `>`.
        character: char,
    },
    /// A wildcard that shares its level with other characters, like `line*`.
    #[error(
        "level {level} has {character:?} at byte {offset} next to other characters; a wildcard must be a whole level"
    )]
    PartialWildcard {
        /// Index of the level holding the wildcard.
        level: usize,
        /// Byte offset of the wildcard.
        offset: usize,
        /// `*` or `>`.
        character: char,
    },
    /// A `>` level that is not the last level.
    #[error("'>' at level {level} (byte {offset}) is not the last level; it already matches every remaining level")]
    RestNotLast {
        /// Index of the `>` level.
        level: usize,
        /// Byte offset of the `>`.
        offset: usize,
    },
}

/// Whether wildcards are accepted while validating.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Topic,
    Pattern,
}

/// Checks `text` and reports the first problem found, scanning left to right.
fn validate(text: &str, kind: Kind) -> Result<(), TopicError> {
    if text.is_empty() {
        return Err(TopicError::Empty);
    }
    if text.len() > MAX_TOPIC_BYTES {
        return Err(TopicError::TooLong { length: text.len(), max: MAX_TOPIC_BYTES });
    }
    let levels = text.split(SEPARATOR).count();
    if levels > MAX_TOPIC_LEVELS {
        return Err(TopicError::TooManyLevels { levels, max: MAX_TOPIC_LEVELS });
    }
    let mut offset = 0;
    for (level, name) in text.split(SEPARATOR).enumerate() {
        validate_level(name, level, offset, levels, kind)?;
        offset += name.len() + SEPARATOR.len_utf8();
    }
    Ok(())
}

/// Checks one level that starts at byte `offset` of the whole input.
fn validate_level(name: &str, level: usize, offset: usize, levels: usize, kind: Kind) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::EmptyLevel { level, offset });
    }
    let whole_wildcard = name == ONE_LEVEL || name == REST_LEVELS;
    for (at, character) in name.char_indices() {
        let offset = offset + at;
        if character.is_whitespace() || character.is_control() {
            return Err(TopicError::InvalidCharacter { level, offset, character });
        }
        if character != '*' && character != '>' {
            continue;
        }
        if kind == Kind::Topic {
            return Err(TopicError::WildcardInTopic { level, offset, character });
        }
        if !whole_wildcard {
            return Err(TopicError::PartialWildcard { level, offset, character });
        }
    }
    if name == REST_LEVELS && level + 1 != levels {
        return Err(TopicError::RestNotLast { level, offset });
    }
    Ok(())
}

/// A validated topic: the name a message is published under.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic(String);

impl Topic {
    /// Validates `text` as a topic, so that later stages can trust it.
    pub fn parse(text: &str) -> Result<Topic, TopicError> {
        validate(text, Kind::Topic)?;
        Ok(Topic(text.to_owned()))
    }

    /// The topic as text, in the form it was parsed from.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The levels, in order; the index walks its trie with these.
    pub fn levels(&self) -> impl Iterator<Item = &str> + '_ {
        self.0.split(SEPARATOR)
    }
}

impl FromStr for Topic {
    type Err = TopicError;

    fn from_str(text: &str) -> Result<Topic, TopicError> {
        Topic::parse(text)
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// One level of a pattern, as the trie sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternLevel<'a> {
    /// Matches exactly this level.
    Literal(&'a str),
    /// `*`: matches any one level.
    OneLevel,
    /// `>`: matches one or more remaining levels (always last).
    RestLevels,
}

/// A validated topic pattern: what a subscription asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pattern(String);

impl Pattern {
    /// Validates `text` as a pattern, so that the index can trust it.
    pub fn parse(text: &str) -> Result<Pattern, TopicError> {
        validate(text, Kind::Pattern)?;
        Ok(Pattern(text.to_owned()))
    }

    /// The pattern as text, in the form it was parsed from.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The levels, in order, with wildcards recognised.
    pub fn levels(&self) -> impl Iterator<Item = PatternLevel<'_>> + '_ {
        self.0.split(SEPARATOR).map(|level| match level {
            ONE_LEVEL => PatternLevel::OneLevel,
            REST_LEVELS => PatternLevel::RestLevels,
            literal => PatternLevel::Literal(literal),
        })
    }

    /// True when the pattern has no wildcard and so matches exactly one topic; the cache uses it
    /// to invalidate one entry instead of scanning.
    pub fn is_literal(&self) -> bool {
        self.levels().all(|level| matches!(level, PatternLevel::Literal(_)))
    }

    /// Whether `topic` (assumed valid) is matched by this pattern. The reference semantics that
    /// the index must agree with.
    pub fn matches(&self, topic: &str) -> bool {
        let mut topic_levels = topic.split(SEPARATOR);
        for level in self.levels() {
            match (level, topic_levels.next()) {
                (_, None) => return false,
                (PatternLevel::RestLevels, Some(_)) => return true,
                (PatternLevel::OneLevel, Some(_)) => {}
                (PatternLevel::Literal(literal), Some(name)) if literal == name => {}
                (PatternLevel::Literal(_), Some(_)) => return false,
            }
        }
        topic_levels.next().is_none()
    }

    /// Whether every topic matched by `other` is also matched by `self` (exact, not just
    /// conservative: pattern covering is decidable level by level).
    pub fn covers(&self, other: &Pattern) -> bool {
        let mut narrow = other.levels();
        for wide in self.levels() {
            match (wide, narrow.next()) {
                (_, None) => return false,
                (PatternLevel::RestLevels, Some(_)) => return true,
                (PatternLevel::OneLevel, Some(PatternLevel::RestLevels)) => return false,
                (PatternLevel::OneLevel, Some(_)) => {}
                (PatternLevel::Literal(a), Some(PatternLevel::Literal(b))) if a == b => {}
                (PatternLevel::Literal(_), Some(_)) => return false,
            }
        }
        narrow.next().is_none()
    }
}

impl FromStr for Pattern {
    type Err = TopicError;

    fn from_str(text: &str) -> Result<Pattern, TopicError> {
        Pattern::parse(text)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Pattern {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<Topic> for Pattern {
    /// Every topic is also the pattern that matches exactly itself.
    fn from(topic: Topic) -> Pattern {
        Pattern(topic.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> Pattern {
        Pattern::parse(text).unwrap()
    }

    #[test]
    fn well_formed_topics_parse_and_keep_their_text() {
        let topic = Topic::parse("plant.line3.temp").unwrap();
        assert_eq!(topic.as_str(), "plant.line3.temp");
        assert_eq!(topic.levels().collect::<Vec<_>>(), ["plant", "line3", "temp"]);
        assert_eq!(topic.to_string(), "plant.line3.temp");
        assert!(Topic::parse("ünïcödé.ok-_:#").is_ok());
    }

    #[test]
    fn empty_topics_and_levels_are_rejected_with_their_position() {
        assert_eq!(Topic::parse(""), Err(TopicError::Empty));
        assert_eq!(Topic::parse("."), Err(TopicError::EmptyLevel { level: 0, offset: 0 }));
        assert_eq!(Topic::parse("a..b"), Err(TopicError::EmptyLevel { level: 1, offset: 2 }));
        assert_eq!(Topic::parse("a.b."), Err(TopicError::EmptyLevel { level: 2, offset: 4 }));
        assert_eq!(Pattern::parse(".a"), Err(TopicError::EmptyLevel { level: 0, offset: 0 }));
    }

    #[test]
    fn wildcards_are_rejected_in_topics() {
        assert_eq!(Topic::parse("a.*"), Err(TopicError::WildcardInTopic { level: 1, offset: 2, character: '*' }));
        assert_eq!(Topic::parse("a.b>"), Err(TopicError::WildcardInTopic { level: 1, offset: 3, character: '>' }));
    }

    #[test]
    fn whitespace_and_control_characters_are_rejected() {
        assert_eq!(Topic::parse("a.b c"), Err(TopicError::InvalidCharacter { level: 1, offset: 3, character: ' ' }));
        assert_eq!(Pattern::parse("a\t"), Err(TopicError::InvalidCharacter { level: 0, offset: 1, character: '\t' }));
        assert!(matches!(Topic::parse("a\u{7f}"), Err(TopicError::InvalidCharacter { .. })));
    }

    #[test]
    fn wildcards_must_be_whole_levels_and_rest_must_be_last() {
        assert_eq!(Pattern::parse("a.b*"), Err(TopicError::PartialWildcard { level: 1, offset: 3, character: '*' }));
        assert_eq!(Pattern::parse(">>"), Err(TopicError::PartialWildcard { level: 0, offset: 0, character: '>' }));
        assert_eq!(Pattern::parse("a.>.b"), Err(TopicError::RestNotLast { level: 1, offset: 2 }));
        assert!(Pattern::parse("*.*.>").is_ok());
    }

    #[test]
    fn length_and_level_limits_are_enforced() {
        let long = "a".repeat(MAX_TOPIC_BYTES + 1);
        assert_eq!(Topic::parse(&long), Err(TopicError::TooLong { length: MAX_TOPIC_BYTES + 1, max: MAX_TOPIC_BYTES }));
        assert!(Topic::parse(&"a".repeat(MAX_TOPIC_BYTES)).is_ok());
        let deep = vec!["a"; MAX_TOPIC_LEVELS + 1].join(".");
        assert_eq!(Pattern::parse(&deep), Err(TopicError::TooManyLevels { levels: 65, max: MAX_TOPIC_LEVELS }));
        assert!(Pattern::parse(&vec!["*"; MAX_TOPIC_LEVELS].join(".")).is_ok());
    }

    #[test]
    fn error_messages_name_the_spot_and_the_rule() {
        let message = Topic::parse("a..b").unwrap_err().to_string();
        assert_eq!(message, "level 1 (at byte 2) is empty; expected a name between the dots");
        let message = Pattern::parse("a.>.b").unwrap_err().to_string();
        assert!(message.contains("not the last level"), "{message}");
    }

    #[test]
    fn one_level_wildcard_matches_exactly_one_level() {
        assert!(pattern("a.*").matches("a.b"));
        assert!(!pattern("a.*").matches("a.b.c"));
        assert!(!pattern("a.*").matches("a"));
        assert!(pattern("*.b.*").matches("x.b.y"));
        assert!(!pattern("*.b.*").matches("x.c.y"));
    }

    #[test]
    fn rest_wildcard_matches_one_or_more_remaining_levels() {
        assert!(!pattern("a.>").matches("a"));
        assert!(pattern("a.>").matches("a.b"));
        assert!(pattern("a.>").matches("a.b.c"));
        assert!(pattern(">").matches("a"));
        assert!(pattern(">").matches("a.b.c.d"));
        assert!(!pattern("b.>").matches("a.b.c"));
    }

    #[test]
    fn literal_patterns_match_only_their_own_topic() {
        assert!(pattern("a.b").matches("a.b"));
        assert!(!pattern("a.b").matches("a.b.c"));
        assert!(!pattern("a.b.c").matches("a.b"));
        assert!(pattern("a.b").is_literal());
        assert!(!pattern("a.*").is_literal());
    }

    #[test]
    fn pattern_covering_is_decided_level_by_level() {
        assert!(pattern(">").covers(&pattern("a.*.>")));
        assert!(pattern("a.>").covers(&pattern("a.*")));
        assert!(pattern("a.*").covers(&pattern("a.b")));
        assert!(pattern("*.*").covers(&pattern("*.b")));
        assert!(!pattern("a.*").covers(&pattern("a.>")));
        assert!(!pattern("a.b").covers(&pattern("a.*")));
        assert!(!pattern("a.>").covers(&pattern("a")));
        assert!(!pattern("a").covers(&pattern("a.b")));
        assert!(pattern("a.b").covers(&pattern("a.b")));
    }
}
