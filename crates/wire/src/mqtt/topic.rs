//! MQTT topic names and filters: their rules (4.7), MQTT's matching rule, and the mapping onto
//! tidings topics and patterns that lets MQTT and native clients share one topic space.
//!
//! The mapping, level by level (`/` becomes `.`):
//! - a literal level is kept, except that `%`, `.`, `*`, `>`, whitespace and control characters
//!   are written `%XX` (uppercase hex, one escape per UTF-8 byte), as tidings levels may hold
//!   none of them and `%` must stay unambiguous;
//! - an empty level (`/a`, `a//b`, `a/`) becomes the level `%`, which no escaped level can be;
//! - `+` becomes `*`;
//! - a final `#` matches the parent level and any number of levels below it, while tidings'
//!   `>` needs at least one: `a/#` becomes the two patterns `a` and `a.>`; `#` alone becomes `>`.
//!
//! A filter whose first level is a wildcard never matches a name that starts with `$`
//! (MQTT-4.7.2-1); tidings' `*` and `>` do, so [`TidingsFilter::admits`] filters those out.
//! The reverse mapping accepts exactly the image of the forward one, so that an MQTT client is
//! never sent a name its filter does not match.

use super::error::MqttError;

/// The level separator in MQTT.
const SEPARATOR: char = '/';
/// MQTT's one-level wildcard.
const ONE_LEVEL: &str = "+";
/// MQTT's multi-level wildcard (last level only).
const MULTI_LEVEL: &str = "#";
/// The prefix of a shared subscription's filter (MQTT 5.0, 4.8.2).
const SHARE_PREFIX: &str = "$share/";
/// Starts an escape in a tidings level, and alone stands for an empty MQTT level.
const ESCAPE: char = '%';

/// Checks a topic name: non-empty and without wildcards (MQTT-4.7.3-1, MQTT-3.3.2-2).
pub fn validate_name(name: &str) -> Result<(), MqttError> {
    match name.is_empty() || name.contains(['+', '#']) {
        true => Err(MqttError::InvalidTopicName(name.to_string())),
        false => Ok(()),
    }
}

/// Checks a topic filter, shared (`$share/group/filter`) or not: non-empty, `+` and `#` only as
/// whole levels, `#` only last (MQTT-4.7.1-1, MQTT-4.7.1-2); a share name non-empty and free of
/// wildcards (MQTT-4.8.2-1, MQTT-4.8.2-2).
pub fn validate_filter(filter: &str) -> Result<(), MqttError> {
    let invalid = || MqttError::InvalidTopicFilter(filter.to_string());
    let inner = match split_shared(filter) {
        Some((group, inner)) if !group.is_empty() && !group.contains(['+', '#']) => inner,
        Some(_) => return Err(invalid()),
        None if filter.starts_with(SHARE_PREFIX) => return Err(invalid()),
        None => filter,
    };
    if inner.is_empty() {
        return Err(invalid());
    }
    let levels: Vec<&str> = inner.split(SEPARATOR).collect();
    for (index, level) in levels.iter().enumerate() {
        let wildcard = level.contains(['+', '#']);
        let whole = *level == ONE_LEVEL || (*level == MULTI_LEVEL && index + 1 == levels.len());
        if wildcard && !whole {
            return Err(invalid());
        }
    }
    Ok(())
}

/// Splits `$share/group/filter` into the group and the filter; `None` for a filter that is not
/// shared or has no `/` after the group.
pub fn split_shared(filter: &str) -> Option<(&str, &str)> {
    filter.strip_prefix(SHARE_PREFIX)?.split_once(SEPARATOR)
}

/// Whether the filter is a shared subscription's.
pub fn is_shared(filter: &str) -> bool {
    filter.starts_with(SHARE_PREFIX)
}

/// MQTT's own matching rule (4.7) for a valid, non-shared filter and a valid name: the
/// reference the mapped forms must agree with.
pub fn mqtt_matches(filter: &str, name: &str) -> bool {
    if name.starts_with('$') && (filter.starts_with(ONE_LEVEL) || filter.starts_with(MULTI_LEVEL)) {
        return false;
    }
    let mut names = name.split(SEPARATOR);
    for level in filter.split(SEPARATOR) {
        if level == MULTI_LEVEL {
            return true;
        }
        match names.next() {
            Some(_) if level == ONE_LEVEL => {}
            Some(found) if found == level => {}
            _ => return false,
        }
    }
    names.next().is_none()
}

/// Whether tidings levels must escape the character.
fn needs_escape(character: char) -> bool {
    matches!(character, '%' | '.' | '*' | '>') || character.is_whitespace() || character.is_control()
}

/// Writes one literal MQTT level as a tidings level.
fn push_level(out: &mut String, level: &str) {
    if level.is_empty() {
        out.push(ESCAPE);
        return;
    }
    for character in level.chars() {
        if !needs_escape(character) {
            out.push(character);
            continue;
        }
        let mut bytes = [0; 4];
        for byte in character.encode_utf8(&mut bytes).bytes() {
            out.push(ESCAPE);
            out.push_str(&format!("{byte:02X}"));
        }
    }
}

/// The tidings topic for an MQTT topic name (valid per [`validate_name`]). Total and injective;
/// the broker still checks the result against tidings' length and depth limits.
pub fn name_to_tidings(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    for (index, level) in name.split(SEPARATOR).enumerate() {
        if index > 0 {
            out.push('.');
        }
        push_level(&mut out, level);
    }
    out
}

/// The MQTT topic name a tidings topic stands for, or `None` when the topic is not the mapping
/// of any name (a native topic with `/`, a stray `%` or an escape that was not needed), since
/// such a topic would reach MQTT clients whose filters do not match it.
pub fn tidings_to_name(topic: &str) -> Option<String> {
    let mut name = String::with_capacity(topic.len());
    for (index, level) in topic.split('.').enumerate() {
        if index > 0 {
            name.push(SEPARATOR);
        }
        if level == "%" {
            continue;
        }
        name.push_str(&unescape(level)?);
    }
    (name_to_tidings(&name) == topic && validate_name(&name).is_ok()).then_some(name)
}

/// Undoes `%XX` escapes in one level.
fn unescape(level: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(level.len());
    let mut rest = level.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte != b'%' {
            bytes.push(byte);
            rest = tail;
            continue;
        }
        let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
        bytes.push(u8::from_str_radix(hex, 16).ok()?);
        rest = &tail[2..];
    }
    String::from_utf8(bytes).ok()
}

/// The tidings form of an MQTT filter: one or two patterns, and whether `$` names must be left
/// out because the filter starts with a wildcard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TidingsFilter {
    /// The patterns to subscribe; a message matching any of them is a candidate.
    pub patterns: Vec<String>,
    /// True when the MQTT filter's first level is `+` or `#`.
    pub excludes_dollar_topics: bool,
}

impl TidingsFilter {
    /// Whether a tidings topic matched by one of the patterns is matched by the MQTT filter.
    pub fn admits(&self, topic: &str) -> bool {
        !(self.excludes_dollar_topics && topic.starts_with('$'))
    }
}

/// The tidings patterns for a valid, non-shared MQTT filter (use [`split_shared`] first).
pub fn filter_to_tidings(filter: &str) -> TidingsFilter {
    let excludes_dollar_topics = filter.starts_with(ONE_LEVEL) || filter.starts_with(MULTI_LEVEL);
    let (prefix, multi) = match filter.strip_suffix(MULTI_LEVEL) {
        Some(prefix) => (prefix.strip_suffix(SEPARATOR), true),
        None => (Some(filter), false),
    };
    let mut pattern = String::with_capacity(filter.len() + 8);
    for (index, level) in prefix.into_iter().flat_map(|prefix| prefix.split(SEPARATOR)).enumerate() {
        if index > 0 {
            pattern.push('.');
        }
        match level {
            ONE_LEVEL => pattern.push('*'),
            literal => push_level(&mut pattern, literal),
        }
    }
    let patterns = match (multi, pattern.is_empty()) {
        (false, _) => vec![pattern],
        (true, true) => vec![">".to_string()],
        (true, false) => vec![format!("{pattern}.>"), pattern],
    };
    TidingsFilter { patterns, excludes_dollar_topics }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_level_by_level_with_escapes() {
        assert_eq!(name_to_tidings("sensors/kitchen/temp"), "sensors.kitchen.temp");
        assert_eq!(name_to_tidings("/a"), "%.a");
        assert_eq!(name_to_tidings("a//b"), "a.%.b");
        assert_eq!(name_to_tidings("a/"), "a.%");
        assert_eq!(name_to_tidings("v1.2/*/>"), "v1%2E2.%2A.%3E");
        assert_eq!(name_to_tidings("50%/a b"), "50%25.a%20b");
        assert_eq!(name_to_tidings("$SYS/uptime"), "$SYS.uptime");
    }

    #[test]
    fn filters_map_hash_to_the_parent_and_the_levels_below() {
        let map = |filter| filter_to_tidings(filter).patterns;
        assert_eq!(map("a/+/c"), ["a.*.c"]);
        assert_eq!(map("a/#"), ["a.>", "a"]);
        assert_eq!(map("#"), [">"]);
        assert_eq!(map("+/#"), ["*.>", "*"]);
        assert_eq!(map("/#"), ["%.>", "%"]);
        assert!(filter_to_tidings("+/x").excludes_dollar_topics);
        assert!(!filter_to_tidings("$SYS/#").excludes_dollar_topics);
    }

    #[test]
    fn reverse_mapping_refuses_topics_outside_the_image() {
        assert_eq!(tidings_to_name("a.%.b").as_deref(), Some("a//b"));
        assert_eq!(tidings_to_name("v1%2E2").as_deref(), Some("v1.2"));
        assert_eq!(tidings_to_name("a/b"), None);
        assert_eq!(tidings_to_name("100%"), None);
        assert_eq!(tidings_to_name("%61"), None, "an escape that was not needed");
        assert_eq!(tidings_to_name("%2B"), None, "a + would make a wildcard");
    }

    #[test]
    fn filters_follow_the_spec_rules() {
        for good in ["#", "+", "a/+/b", "a/#", "/", "$share/g/a/#", "+/+"] {
            assert_eq!(validate_filter(good), Ok(()), "{good}");
        }
        for bad in ["", "a#", "a/#/b", "a+/b", "$share/g", "$share//a", "$share/g+/a", "$share/g/"] {
            assert!(validate_filter(bad).is_err(), "{bad}");
        }
        assert!(validate_name("a/+").is_err());
        assert!(validate_name("").is_err());
        assert!(mqtt_matches("a/#", "a"));
        assert!(!mqtt_matches("#", "$SYS/x"));
        assert!(mqtt_matches("$SYS/#", "$SYS/x"));
        assert!(mqtt_matches("+/+", "/"));
    }
}
