//! LIKE patterns: `%` is any run of characters (possibly none), `_` is exactly one character, and
//! an optional ESCAPE character makes the next `%`, `_` or itself literal.
//!
//! A pattern is compiled to the segments between its `%`s. The first segment must match at the
//! start, the last at the end, and each middle one is found leftmost in what is left (leftmost is
//! always safe: it leaves the most room for the rest). Matching costs time linear in the text,
//! whatever a publisher puts in the property and whatever a subscriber puts in the pattern:
//! - a middle segment's leading and trailing `_`s only skip characters (`%___b%` is a `b` at
//!   least three characters in), so they cost nothing per text character;
//! - what is left, its *core*, is found with `str::find` when it has no `_` (linear), else by
//!   shift-and over one 64-bit word (one table lookup and three word operations per text
//!   character), which limits a core holding `_` to 64 characters: a longer one is refused
//!   when the selector is parsed, since searching it would cost the text times the pattern.

/// The longest middle-segment core that may hold `_` (one machine word of shift-and state).
pub(crate) const MAX_WILDCARD_CORE: usize = 64;

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
    /// How a middle segment is searched for (first and last are anchored and need none).
    search: Option<Search>,
}

/// A middle segment as `lead` skipped characters, a core, and `trail` skipped characters.
#[derive(Debug, Clone)]
struct Search {
    lead: usize,
    trail: usize,
    core: Core,
}

#[derive(Debug, Clone)]
enum Core {
    /// No `_` in the core: `str::find`.
    Literal(Box<str>),
    /// Shift-and: bit `i` of a character's mask says the core's `i`th part accepts it.
    ShiftAnd { len: usize, ascii: Box<[u64; 128]>, other: Box<[(char, u64)]>, any: u64 },
}

impl Search {
    fn new(parts: &[Part]) -> Result<Search, &'static str> {
        let lead = parts.iter().take_while(|p| **p == Part::AnyOne).count();
        let trail = parts[lead..].iter().rev().take_while(|p| **p == Part::AnyOne).count();
        let core = &parts[lead..parts.len() - trail];
        if core.iter().all(|p| *p != Part::AnyOne) {
            let text = core.iter().filter_map(|p| if let Part::Literal(c) = p { Some(*c) } else { None }).collect();
            return Ok(Search { lead, trail, core: Core::Literal(text) });
        }
        if core.len() > MAX_WILDCARD_CORE {
            return Err("between two % signs, `_` may be used only within 64 characters of literal text (longer would cost the text times the pattern to match)");
        }
        let mut any = 0u64;
        let mut ascii = Box::new([0u64; 128]);
        let mut other: Vec<(char, u64)> = Vec::new();
        for (i, part) in core.iter().enumerate() {
            match part {
                Part::AnyOne => any |= 1 << i,
                Part::Literal(c) if c.is_ascii() => ascii[*c as usize] |= 1 << i,
                Part::Literal(c) => match other.iter_mut().find(|(o, _)| o == c) {
                    Some((_, mask)) => *mask |= 1 << i,
                    None => other.push((*c, 1 << i)),
                },
            }
        }
        for mask in ascii.iter_mut() {
            *mask |= any;
        }
        for (_, mask) in other.iter_mut() {
            *mask |= any;
        }
        other.sort_unstable_by_key(|(c, _)| *c);
        Ok(Search { lead, trail, core: Core::ShiftAnd { len: core.len(), ascii, other: other.into(), any } })
    }

    /// The rest of `text` after the leftmost occurrence.
    fn skip_past<'a>(&self, text: &'a str) -> Option<&'a str> {
        let text = skip_chars(text, self.lead)?;
        let after_core = match &self.core {
            Core::Literal(core) => &text[text.find(&**core)? + core.len()..],
            Core::ShiftAnd { len, ascii, other, any } => {
                let last = 1u64 << (len - 1);
                let mut state = 0u64;
                let mut end = None;
                for (at, c) in text.char_indices() {
                    let mask = match c {
                        c if c.is_ascii() => ascii[c as usize],
                        c => other.binary_search_by_key(&c, |(o, _)| *o).map_or(*any, |i| other[i].1),
                    };
                    state = ((state << 1) | 1) & mask;
                    if state & last != 0 {
                        end = Some(at + c.len_utf8());
                        break;
                    }
                }
                &text[end?..]
            }
        };
        skip_chars(after_core, self.trail)
    }
}

/// `text` without its first `n` characters, if it has that many.
fn skip_chars(text: &str, n: usize) -> Option<&str> {
    if n == 0 {
        return Some(text);
    }
    let (at, c) = text.char_indices().nth(n - 1)?;
    Some(&text[at + c.len_utf8()..])
}

impl Segment {
    fn new(parts: Vec<Part>, middle: bool) -> Result<Segment, &'static str> {
        let literal = parts
            .iter()
            .map(|part| match part {
                Part::Literal(c) => Some(*c),
                Part::AnyOne => None,
            })
            .collect::<Option<String>>()
            .map(String::into_boxed_str);
        let search = if middle { Some(Search::new(&parts)?) } else { None };
        Ok(Segment { parts: parts.into(), literal, search })
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
                '%' => segments.push(std::mem::take(&mut parts)),
                '_' => parts.push(Part::AnyOne),
                c => parts.push(Part::Literal(c)),
            }
        }
        segments.push(parts);
        let last = segments.len() - 1;
        let segments = segments
            .into_iter()
            .enumerate()
            .map(|(i, parts)| Segment::new(parts, i > 0 && i < last))
            .collect::<Result<Box<[Segment]>, _>>()?;
        Ok(LikePattern { text: text.into(), escape, segments })
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
            match segment.search.as_ref().and_then(|search| search.skip_past(remaining)) {
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
    fn adversarial_patterns_and_subjects_cost_linear_time() {
        // A long literal piece against a near miss, and the attack's 4,000 `_` then `b` (its
        // underscores only skip characters) against 65,000 characters without a b.
        for (filler, repeat, subject) in [("a", 2000, 200_000), ("_", 4000, 65_000)] {
            let pattern = LikePattern::compile(&format!("%{}b%", filler.repeat(repeat)), None).unwrap();
            let subject = "a".repeat(subject);
            assert!(!pattern.matches(&subject));
            assert!(pattern.matches(&format!("{subject}b")));
        }
        let pattern = LikePattern::compile(&format!("%{}b%", "_".repeat(4000)), None).unwrap();
        assert!(!pattern.matches(&format!("{}b", "a".repeat(3999))), "the b must come after 4,000 characters");
        assert!(pattern.matches(&format!("{}b", "a".repeat(4000))));
        assert!(like("%a__%", "xxabc"));
        assert!(!like("%a__%", "xxab"));
    }

    #[test]
    fn a_wildcard_core_longer_than_a_word_is_refused_and_one_of_a_word_matches() {
        let long = format!("%a{}b%", "_".repeat(63));
        assert!(LikePattern::compile(&long, None).unwrap_err().contains("64 characters"));
        let word = format!("%a{}b%", "_".repeat(62));
        let pattern = LikePattern::compile(&word, None).unwrap();
        assert!(pattern.matches(&format!("xa{}bx", "c".repeat(62))));
        assert!(!pattern.matches(&format!("xa{}bx", "c".repeat(61))));
        assert!(like(&format!("a{}b", "_".repeat(100)), &format!("a{}b", "x".repeat(100))), "anchored: no limit");
        assert!(like("%é_ü%", "aébüc"));
        assert!(!like("%é_ü%", "aébxc"));
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
        fn matching_agrees_with_the_textbook_dynamic_program(pattern in "[abé%_]{0,10}", subject in "[abcé]{0,12}") {
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
