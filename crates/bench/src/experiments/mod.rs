//! The seed experiments, one module each, and what they share.

pub mod content;
pub mod failures;
pub mod fanout;
pub mod flood_rows;
pub mod hops;
pub mod matching;
pub mod narada;
pub mod network;
pub mod overhead;
pub mod persistent;
pub mod proxy;
pub mod seed002;
pub mod sizes;
pub mod subscribers;

use crate::suite::Check;

/// Declares an experiment's checks: a struct of [`Tally`]s, each given its name by `Default`,
/// and `into_checks` in declaration order, so that a check is named where it is declared.
macro_rules! checks {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($field:ident: $text:expr,)* }) => {
        $(#[$meta])*
        $vis struct $name {
            $($field: $crate::experiments::Tally,)*
        }

        impl Default for $name {
            fn default() -> $name {
                $name { $($field: $crate::experiments::Tally::new($text),)* }
            }
        }

        impl $name {
            /// The checks, in declaration order, to return in an outcome.
            $vis fn into_checks(self) -> Vec<$crate::suite::Check> {
                vec![$(self.$field.check(),)*]
            }
        }
    };
}
pub(crate) use checks;

/// Collects one property over many points: it holds when it held at every point.
#[derive(Debug, Clone)]
pub struct Tally {
    name: String,
    points: usize,
    failures: Vec<String>,
    notes: Vec<String>,
}

impl Tally {
    /// A property called `name`.
    pub fn new(name: &str) -> Tally {
        Tally { name: name.to_string(), points: 0, failures: Vec::new(), notes: Vec::new() }
    }

    /// Records one point: `held`, and what was compared there.
    pub fn record(&mut self, held: bool, point: impl Into<String>) {
        self.points += 1;
        if !held {
            self.failures.push(point.into());
        }
    }

    /// Adds a remark to the check's detail (for instance which points had nothing to check).
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The check: held at every point (and at least one point was checked).
    pub fn check(self) -> Check {
        let mut detail = if self.points == 0 {
            "no point was checked".to_string()
        } else if self.failures.is_empty() {
            format!("held at all {} points", self.points)
        } else {
            format!("failed at {} of {} points: {}", self.failures.len(), self.points, self.failures.join("; "))
        };
        for n in &self.notes {
            detail.push_str(&format!(" ({n})"));
        }
        Check::new(self.name, self.points > 0 && self.failures.is_empty(), detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_holds_only_when_every_point_held() {
        let mut t = Tally::new("order");
        t.record(true, "n=10");
        assert!(t.clone().check().passed);
        t.record(false, "n=100: 3 out of order");
        let c = t.check();
        assert!(!c.passed);
        assert_eq!(c.detail, "failed at 1 of 2 points: n=100: 3 out of order");
    }

    #[test]
    fn a_tally_with_nothing_checked_does_not_pass() {
        assert!(!Tally::new("x").check().passed);
    }
}
