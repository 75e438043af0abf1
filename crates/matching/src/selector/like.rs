//! LIKE patterns: `%` is any run of characters (possibly none), `_` is exactly one character, and
//! an optional ESCAPE character makes the next `%`, `_` or itself literal.
//!
//! A pattern is compiled to the segments between its `%`s. The first segment must match at the
//! start, the last at the end, and each middle one is found leftmost in what is left (leftmost is
//! always safe: it leaves the most room for the rest). A segment without `_` is found with
//! `str::find`, which is linear, so the usual patterns (`'abc%'`, `'%abc%'`, `'a%b%c'`) cost time
//! linear in the text and pattern, whatever a publisher puts in the property; only a middle
//! segment holding `_` is searched position by position (text length times segment length).

/// One element of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Literal(char),
    AnyOne,
}

/// The text between two `%` (or the ends of the pattern).
#[derive(Debug, Clone)]
struct Segment {
    parts: Box<[Part]>,
    /// The segment as text when it has no `_`, for a linear-time search.
    literal: Option<Box<str>>,
}

impl Segment {
    fn new(parts: Vec<Part>) -> Segment {
        let literal = parts
            .iter()
            .map(|part| match part {
                Part::Literal(c) => Some(*c),
                Part::AnyOne => None,
            })
            .collect::<Option<String>>()
            .map(String::into_boxed_str);
        Segment { parts: parts.into(), literal }
    }

    /// If `text` starts with this segment, the rest of `text`.
    fn strip_prefix<'a>(&self, text: &'a str) -> Option<&'a str> {
        if let Some(literal) = &self.literal {
            return text.strip_prefix(&**literal);
        }
        let mut chars = text.chars();
        for part in self.parts.iter() {
            let c = chars.next()?;
            if matches!(part, Part::Literal(want) if *want != c) {
                return None;
            }
        }
        Some(chars.as_str())
    }

    /// Whether `text` ends with this segment.
    fn is_suffix_of(&self, text: &str) -> bool {
        if let Some(literal) = &self.literal {
            return text.ends_with(&**literal);
        }
        let mut chars = text.chars().rev();
        self.parts.iter().rev().all(|part| match (part, chars.next()) {
            (_, None) => false,
            (Part::AnyOne, Some(_)) => true,
            (Part::Literal(want), Some(c)) => *want == c,
        })
    }

    /// The rest of `text` after the leftmost occurrence of this segment.
    fn skip_past<'a>(&self, text: &'a str) -> Option<&'a str> {
        if let Some(literal) = &self.literal {
            let at = text.find(&**literal)?;
            return Some(&text[at + literal.len()..]);
        }
        let mut rest = text;
        loop {
            if let Some(after) = self.strip_prefix(rest) {
                return Some(after);
            }
            let mut chars = rest.chars();
            chars.next()?;
            rest = chars.as_str();
        }
    }
}

/// A compiled LIKE pattern, keeping its source so that it prints back unchanged.
///
/// Invariant: `segments` is never empty; there is one more segment than there are `%` runs.
#[derive(Debug, Clone)]
pub(crate) struct LikePattern {
    text: Box<str>,
    escape: Option<char>,
    segments: Box<[Segment]>,
}

impl PartialEq for LikePattern {
    /// Two patterns are the same when written the same; `segments` follow from the text.
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.escape == other.escape
    }
}

impl LikePattern {
    /// Compiles `text` with an optional escape character; the error says what is wrong.
    pub(crate) fn compile(text: &str, escape: Option<char>) -> Result<LikePattern, &'static str> {
        let mut segments = Vec::new();
        let mut parts = Vec::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if Some(c) == escape {
                match chars.next() {
                    None => return Err("the pattern ends with its escape character"),
                    Some(next) if next == '%' || next == '_' || Some(next) == escape => parts.push(Part::Literal(next)),
                    Some(_) => return Err("the escape character must be followed by %, _ or itself"),
                }
                continue;
            }
            match c {
                // Consecutive `%` are one `%`: an empty middle segment would match anywhere.
                '%' if parts.is_empty() && !segments.is_empty() => {}
                '%' => segments.push(Segment::new(std::mem::take(&mut parts))),
                '_' => parts.push(Part::AnyOne),
                c => parts.push(Part::Literal(c)),
            }
        }
        segments.push(Segment::new(parts));
        Ok(LikePattern { text: text.into(), escape, segments: segments.into() })
    }

    /// The pattern as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The escape character, if any.
    pub(crate) fn escape(&self) -> Option<char> {
        self.escape
    }

    /// Whether the whole of `subject` matches.
    pub(crate) fn matches(&self, subject: &str) -> bool {
        let Some((first, rest)) = self.segments.split_first() else {
            return subject.is_empty();
        };
        let Some((last, middle)) = rest.split_last() else {
            return first.strip_prefix(subject).is_some_and(str::is_empty);
        };
        let Some(mut remaining) = first.strip_prefix(subject) else {
            return false;
        };
        for segment in middle {
            match segment.skip_past(remaining) {
                Some(after) => remaining = after,
                None => return false,
            }
        }
        last.is_suffix_of(remaining)
    }

    /// The literal prefix before the first wildcard, and whether the pattern is exactly that
    /// text (no wildcard at all); covering uses it.
    pub(crate) fn literal_prefix(&self) -> (String, bool) {
        let mut prefix = String::new();
        let Some(first) = self.segments.first() else {
            return (prefix, true);
        };
        for part in first.parts.iter() {
            match part {
                Part::Literal(c) => prefix.push(*c),
                Part::AnyOne => return (prefix, false),
            }
        }
        (prefix, self.segments.len() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(pattern: &str, subject: &str) -> bool {
        LikePattern::compile(pattern, None).unwrap().matches(subject)
    }

    #[test]
    fn percent_matches_any_run_and_underscore_one_character() {
        assert!(like("abc", "abc"));
        assert!(!like("abc", "abcd"));
        assert!(like("a%", "a"));
        assert!(like("a%", "abc"));
        assert!(like("%c", "abc"));
        assert!(like("%b%", "abc"));
        assert!(!like("%x%", "abc"));
        assert!(like("a_c", "abc"));
        assert!(!like("a_c", "ac"));
        assert!(like("_é_", "aéb"));
        assert!(like("%", ""));
        assert!(!like("_", ""));
        assert!(like("%a%a%a%b", "aaaaaaaaaaaaaaab"));
        assert!(!like("%a%a%a%b", "aaaaaaaaaaaaaaaa"));
        assert!(like("a%%c", "abbc"));
        assert!(like("%%", "x"));
        assert!(!like("ab%ba", "aba"));
        assert!(like("ab%ba", "abba"));
        assert!(like("%a_c%", "xxabcxx"));
        assert!(like("%a_c", "abcabc"));
        assert!(!like("%a_c", "abcabd"));
        assert!(like("_%_", "ab"));
        assert!(!like("_%_", "a"));
    }

    #[test]
    fn an_adversarial_subject_costs_linear_time() {
        let pattern = LikePattern::compile(&format!("%{}b%", "a".repeat(2000)), None).unwrap();
        let subject = "a".repeat(200_000);
        assert!(!pattern.matches(&subject));
        assert!(pattern.matches(&format!("{subject}b")));
    }

    #[test]
    fn the_escape_character_makes_wildcards_literal() {
        let pattern = LikePattern::compile("100!%!_!!", Some('!')).unwrap();
        assert!(pattern.matches("100%_!"));
        assert!(!pattern.matches("100x_!"));
        assert_eq!(pattern.literal_prefix(), ("100%_!".to_owned(), true));
    }

    /// The textbook dynamic program over characters, as a reference.
    fn reference(pattern: &[char], subject: &[char]) -> bool {
        let mut matched = vec![vec![false; subject.len() + 1]; pattern.len() + 1];
        matched[0][0] = true;
        for p in 1..=pattern.len() {
            for s in 0..=subject.len() {
                matched[p][s] = match pattern[p - 1] {
                    '%' => matched[p - 1][s] || (s > 0 && matched[p][s - 1]),
                    '_' => s > 0 && matched[p - 1][s - 1],
                    c => s > 0 && subject[s - 1] == c && matched[p - 1][s - 1],
                };
            }
        }
        matched[pattern.len()][subject.len()]
    }

    proptest::proptest! {
        #[test]
        fn matching_agrees_with_the_textbook_dynamic_program(pattern in "[ab%_]{0,8}", subject in "[abc]{0,10}") {
            let chars: Vec<char> = pattern.chars().collect();
            let text: Vec<char> = subject.chars().collect();
            proptest::prop_assert_eq!(like(&pattern, &subject), reference(&chars, &text), "{} LIKE {}", subject, pattern);
        }
    }

    #[test]
    fn misused_escapes_are_rejected() {
        assert!(LikePattern::compile("ab!", Some('!')).is_err());
        assert!(LikePattern::compile("a!b", Some('!')).is_err());
    }
}
