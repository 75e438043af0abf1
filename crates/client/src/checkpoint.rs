//! A guaranteed subscription's checkpoint token, after Gryphon's: per pubend, the last tick the
//! application holds. The application keeps it with its output (in the same transaction, or
//! right after writing it) and gives it back with
//! [`SubscribeOptions::resume_from`](crate::SubscribeOptions::resume_from) when it subscribes
//! again. The broker's own record of a durable subscription's progress trails what it handed
//! over (acknowledgements are batched, and a broker killed before syncing them forgets the
//! last ones), so without a token of its own the application would be given again what it had
//! already written out.

use std::collections::BTreeMap;

use thiserror::Error;
use tidings_wire::{PubendId, Tick};

use crate::delivery::Position;

/// First line of [`Checkpoint::to_text`], naming the format and its version.
const HEADER: &str = "tidings-checkpoint 1";

/// Per pubend, the last tick the application holds (every tick at or below it, in that
/// pubend's stream, is taken care of).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    last: BTreeMap<PubendId, Tick>,
}

/// A checkpoint's text that does not parse.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("checkpoint line {line}: {what}")]
pub struct CheckpointError {
    /// The line (1-based).
    pub line: usize,
    /// What is wrong with it.
    pub what: String,
}

impl Checkpoint {
    /// An empty checkpoint: nothing held yet.
    pub fn new() -> Checkpoint {
        Checkpoint::default()
    }

    /// Whether the application holds `position` already.
    pub fn holds(&self, position: Position) -> bool {
        self.last.get(&position.pubend).is_some_and(|&last| position.tick <= last)
    }

    /// The application now holds everything of `pubend` through `tick` (never moves back).
    pub fn advance(&mut self, pubend: PubendId, tick: Tick) {
        let last = self.last.entry(pubend).or_insert(tick);
        *last = (*last).max(tick);
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// Each pubend with the last tick held, in pubend order.
    pub fn iter(&self) -> impl Iterator<Item = (PubendId, Tick)> + '_ {
        self.last.iter().map(|(&pubend, &tick)| (pubend, tick))
    }

    /// The token as text to store: a header line, then `PUBEND TICK` per line (pubend in 16
    /// hex digits, tick in decimal).
    pub fn to_text(&self) -> String {
        let mut text = format!("{HEADER}\n");
        for (pubend, tick) in self.iter() {
            text.push_str(&format!("{pubend} {}\n", tick.0));
        }
        text
    }

    /// Reads what [`to_text`](Self::to_text) wrote.
    pub fn parse(text: &str) -> Result<Checkpoint, CheckpointError> {
        let mut lines = text.lines().enumerate();
        let bad = |line: usize, what: &str| CheckpointError { line: line + 1, what: what.to_string() };
        match lines.next() {
            Some((_, HEADER)) => {}
            _ => return Err(bad(0, &format!("expected {HEADER:?}"))),
        }
        let mut checkpoint = Checkpoint::new();
        for (n, line) in lines.filter(|(_, line)| !line.trim().is_empty()) {
            let mut fields = line.split_whitespace();
            let (Some(pubend), Some(tick), None) = (fields.next(), fields.next(), fields.next()) else {
                return Err(bad(n, "expected PUBEND TICK"));
            };
            let pubend = u64::from_str_radix(pubend, 16).map_err(|_| bad(n, "the pubend is not 16 hex digits"))?;
            let tick = tick.parse::<u64>().map_err(|_| bad(n, "the tick is not a number"))?;
            checkpoint.advance(PubendId(pubend), Tick(tick));
        }
        Ok(checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pubend: u64, tick: u64) -> Position {
        Position { pubend: PubendId(pubend), tick: Tick(tick) }
    }

    #[test]
    fn it_holds_every_tick_through_the_last_of_its_pubend_and_nothing_of_another() {
        let mut c = Checkpoint::new();
        c.advance(PubendId(1), Tick(10));
        c.advance(PubendId(1), Tick(7));
        assert!(c.holds(at(1, 10)) && c.holds(at(1, 3)));
        assert!(!c.holds(at(1, 11)), "above the last tick");
        assert!(!c.holds(at(2, 1)), "another pubend");
    }

    #[test]
    fn its_text_round_trips_and_bad_text_is_refused_with_the_line() {
        let mut c = Checkpoint::new();
        c.advance(PubendId(0xabc), Tick(1_795_734_490_000_000));
        c.advance(PubendId(1), Tick(5));
        assert_eq!(Checkpoint::parse(&c.to_text()), Ok(c));
        assert_eq!(Checkpoint::parse("").unwrap_err().line, 1);
        assert_eq!(Checkpoint::parse("tidings-checkpoint 1\n01 5\nzz 3\n").unwrap_err().line, 3);
        assert_eq!(Checkpoint::parse("tidings-checkpoint 1\n01 x\n").unwrap_err().line, 2);
    }
}
