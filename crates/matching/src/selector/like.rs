//! LIKE patterns: `%` is any run of characters (possibly none), `_` is exactly one character, and
//! an optional ESCAPE character makes the next `%`, `_` or itself literal.
//!
//! Matching is the classic single-backtrack wildcard walk: linear in the text for patterns with
//! one `%`, and at worst text length times pattern length, so no pattern can make it exponential.

/// One element of a compiled pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Literal(char),
    AnyOne,
    AnyRun,
}

/// A compiled LIKE pattern, keeping its source so that it prints back unchanged.
#[derive(Debug, Clone)]
pub(crate) struct LikePattern {
    text: Box<str>,
    escape: Option<char>,
    parts: Box<[Part]>,
}

impl PartialEq for LikePattern {
    /// Two patterns are the same when written the same; `parts` follow from the text.
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.escape == other.escape
    }
}

impl LikePattern {
    /// Compiles `text` with an optional escape character; the error says what is wrong.
    pub(crate) fn compile(text: &str, escape: Option<char>) -> Result<LikePattern, &'static str> {
        let mut parts = Vec::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            let part = if Some(c) == escape {
                match chars.next() {
                    None => return Err("the pattern ends with its escape character"),
                    Some(next) if next == '%' || next == '_' || Some(next) == escape => Part::Literal(next),
                    Some(_) => return Err("the escape character must be followed by %, _ or itself"),
                }
            } else {
                match c {
                    '%' => Part::AnyRun,
                    '_' => Part::AnyOne,
                    c => Part::Literal(c),
                }
            };
            // Consecutive `%` are one `%`; keeping one makes the walk simpler.
            if !(part == Part::AnyRun && parts.last() == Some(&Part::AnyRun)) {
                parts.push(part);
            }
        }
        Ok(LikePattern { text: text.into(), escape, parts: parts.into() })
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
        let parts = &self.parts;
        let (mut part, mut at) = (0usize, 0usize);
        // Where to resume after the last `%`: the part after it and the text position it took.
        let mut resume: Option<(usize, usize)> = None;
        loop {
            let next_char = subject[at..].chars().next();
            match (parts.get(part), next_char) {
                (Some(Part::AnyRun), _) => {
                    part += 1;
                    resume = Some((part, at));
                    continue;
                }
                (Some(Part::AnyOne), Some(c)) => {
                    part += 1;
                    at += c.len_utf8();
                    continue;
                }
                (Some(Part::Literal(want)), Some(c)) if *want == c => {
                    part += 1;
                    at += c.len_utf8();
                    continue;
                }
                (None, None) => return true,
                _ => {}
            }
            // Mismatch: let the last `%` swallow one more character, or fail.
            let Some((resume_part, resume_at)) = resume else {
                return false;
            };
            let Some(c) = subject[resume_at..].chars().next() else {
                return false;
            };
            resume = Some((resume_part, resume_at + c.len_utf8()));
            part = resume_part;
            at = resume_at + c.len_utf8();
        }
    }

    /// The literal prefix before the first wildcard, and whether the pattern is exactly that
    /// text (no wildcard at all); covering uses it.
    pub(crate) fn literal_prefix(&self) -> (String, bool) {
        let mut prefix = String::new();
        for part in self.parts.iter() {
            match part {
                Part::Literal(c) => prefix.push(*c),
                Part::AnyOne | Part::AnyRun => return (prefix, false),
            }
        }
        (prefix, true)
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
    }

    #[test]
    fn the_escape_character_makes_wildcards_literal() {
        let pattern = LikePattern::compile("100!%!_!!", Some('!')).unwrap();
        assert!(pattern.matches("100%_!"));
        assert!(!pattern.matches("100x_!"));
        assert_eq!(pattern.literal_prefix(), ("100%_!".to_owned(), true));
    }

    #[test]
    fn misused_escapes_are_rejected() {
        assert!(LikePattern::compile("ab!", Some('!')).is_err());
        assert!(LikePattern::compile("a!b", Some('!')).is_err());
    }
}
