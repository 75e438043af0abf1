//! What one place knows about one pubend's ticks (gd-protocol §3): a [`RangeMap`] of final
//! values (D, F, L; absent = Q) above a done prefix, with the join rules that keep knowledge
//! monotone.
//!
//! Invariants: no run at or below `done` (detail there is folded away after acknowledgement);
//! a final value never turns into Q or into another final value, except L into D or F, and D
//! into L where the pubend's log found the record unreadable ([`Knowledge::damage`]).

use crate::names::{Tick, TickRange};
use crate::ranges::{RangeMap, Run};

/// A final knowledge value. Q ("unknown") is the absence of a value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Know {
    /// The tick holds a message (that passes this stream's filter).
    Data,
    /// Nothing for this stream: silence, or a message filtered out upstream.
    Final,
    /// A message that can no longer be supplied (released early from the pubend log).
    Lost,
}

/// What a join learned: the newly final pieces, and whether it contradicted what was held.
#[derive(Clone, Debug, Default)]
pub struct Joined {
    /// Ranges whose value became final (or turned from L into D/F) by this join.
    pub new: Vec<TickRange>,
    /// A D was offered where F was held or the reverse: a protocol error, the old value kept.
    pub conflicts: u32,
}

/// One knowledge stream.
#[derive(Clone, Debug, Default)]
pub struct Knowledge {
    map: RangeMap<Know>,
    /// Every tick `<= done` is final and acknowledged downstream; no detail kept.
    done: Tick,
    /// Every tick above `done` and below this holds a value: the doubt horizon, kept up to date
    /// as values arrive. Walking to it from `done` costs a step per run, and a durable
    /// subscriber away holds `done` back under a backlog of a million messages (two runs each),
    /// which made every `horizon()` milliseconds long. Values above `done` never go back to Q,
    /// so the horizon only moves up and the walks add up to one pass over the stream.
    horizon: Tick,
}

impl Knowledge {
    /// An empty stream: everything Q, nothing done.
    pub fn new() -> Self {
        Self::default()
    }

    /// The done prefix (`Tick(0)`: nothing).
    pub fn done(&self) -> Tick {
        self.done
    }

    /// The value at `tick`; `None` is Q. Ticks at or below the done prefix report `Final`: they
    /// are final and need nothing more, whatever they held.
    pub fn get(&self, tick: Tick) -> Option<Know> {
        if tick <= self.done {
            return Some(Know::Final);
        }
        self.map.get(tick)
    }

    /// The runs of final values in `range` above the done prefix (Q ticks are left out).
    pub fn runs(&self, range: TickRange) -> impl Iterator<Item = Run<Know>> + '_ {
        self.map.runs(range)
    }

    /// Runs in `range`, highest first.
    pub fn runs_rev(&self, range: TickRange) -> impl Iterator<Item = Run<Know>> + '_ {
        self.map.runs_rev(range)
    }

    /// The Q ranges inside `range` (above the done prefix), appended to `out`.
    pub fn unknown(&self, range: TickRange, out: &mut Vec<TickRange>) {
        if range.to <= self.done {
            return;
        }
        let from = range.from.max(self.done.next());
        self.map.absent(TickRange { from, to: range.to }, out);
    }

    /// The doubt horizon: the first Q tick above the done prefix.
    pub fn horizon(&self) -> Tick {
        self.horizon.max(self.done.next())
    }

    /// The first Q tick at or above `from` (and above the done prefix): a subend's doubt
    /// horizon, which need not wait for ticks below its start that nobody asked for.
    pub fn horizon_from(&self, from: Tick) -> Tick {
        let from = from.max(self.done.next());
        match from <= self.horizon() {
            // Everything from the done prefix up to the horizon holds a value.
            true => self.horizon(),
            false => self.map.first_absent_from(from).unwrap_or(Tick(u64::MAX)),
        }
    }

    /// Moves the cached horizon over the values that now follow it.
    fn settle_horizon(&mut self) {
        let from = self.horizon();
        self.horizon = self.map.first_absent_from(from).unwrap_or(Tick(u64::MAX));
    }

    /// The highest tick holding a final value (the unknown horizon `u`), at least `done`.
    pub fn highest_known(&self) -> Tick {
        self.map.last_tick().unwrap_or(self.done).max(self.done)
    }

    /// Joins `value` over `range` (§3 rules). Pieces at or below the done prefix are ignored.
    pub fn join(&mut self, range: TickRange, value: Know, joined: &mut Joined) {
        let Some(range) = TickRange::new(range.from.max(self.done.next()), range.to) else {
            return;
        };
        let mut upgraded = Vec::new();
        for run in self.map.runs(range) {
            match (run.value, value) {
                (Know::Lost, Know::Data | Know::Final) => upgraded.push(run.range),
                (Know::Data, Know::Final) | (Know::Final, Know::Data) => joined.conflicts += 1,
                _ => {}
            }
        }
        for piece in upgraded {
            self.map.insert(piece, value);
            joined.new.push(piece);
        }
        self.map.fill(range, value, &mut joined.new);
        self.settle_horizon();
    }

    /// Turns the D ticks in `range` into L: their record was found damaged when the log read
    /// it, so no one can ever supply the message. The one change of a final value besides L
    /// into D/F; without it a tick known D whose payload is gone would be nacked forever (an
    /// L answer never overwrites a D in [`Self::join`]). The changed pieces go to `joined.new`.
    pub fn damage(&mut self, range: TickRange, joined: &mut Joined) {
        let Some(range) = TickRange::new(range.from.max(self.done.next()), range.to) else {
            return;
        };
        let data: Vec<TickRange> =
            self.map.runs(range).filter(|run| run.value == Know::Data).map(|run| run.range).collect();
        for piece in data {
            self.map.insert(piece, Know::Lost);
            joined.new.push(piece);
        }
    }

    /// Folds every tick `<= tick` into the done prefix, dropping its detail.
    pub fn advance_done(&mut self, tick: Tick) {
        if tick > self.done {
            self.done = tick;
            self.map.clear_through(tick);
            self.settle_horizon();
        }
    }

    /// Runs held (the stream's size).
    pub fn run_count(&self) -> usize {
        self.map.run_count()
    }

    /// Approximate bytes held by the runs.
    pub fn approx_bytes(&self) -> usize {
        self.map.approx_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(from: u64, to: u64) -> TickRange {
        TickRange { from: Tick(from), to: Tick(to) }
    }

    #[test]
    fn data_never_overwrites_final_and_the_conflict_is_counted() {
        let mut k = Knowledge::new();
        let mut j = Joined::default();
        k.join(r(1, 10), Know::Final, &mut j);
        let mut j = Joined::default();
        k.join(r(5, 5), Know::Data, &mut j);
        assert_eq!(j.conflicts, 1);
        assert!(j.new.is_empty());
        assert_eq!(k.get(Tick(5)), Some(Know::Final));
    }

    #[test]
    fn lost_is_upgraded_by_data_and_the_upgrade_is_reported_as_new() {
        let mut k = Knowledge::new();
        let mut j = Joined::default();
        k.join(r(1, 10), Know::Lost, &mut j);
        let mut j = Joined::default();
        k.join(r(4, 4), Know::Data, &mut j);
        assert_eq!(j.new, vec![r(4, 4)]);
        assert_eq!(k.get(Tick(4)), Some(Know::Data));
        assert_eq!(k.get(Tick(5)), Some(Know::Lost));
    }

    #[test]
    fn damage_turns_only_data_into_lost() {
        let mut k = Knowledge::new();
        let mut j = Joined::default();
        k.join(r(1, 4), Know::Final, &mut j);
        k.join(r(5, 5), Know::Data, &mut j);
        k.join(r(6, 9), Know::Final, &mut j);
        let mut j = Joined::default();
        k.damage(r(1, 9), &mut j);
        assert_eq!(j.new, vec![r(5, 5)]);
        assert_eq!(k.get(Tick(5)), Some(Know::Lost));
        assert_eq!(k.get(Tick(4)), Some(Know::Final));
        assert_eq!(k.get(Tick(6)), Some(Know::Final));
    }

    #[test]
    fn the_horizon_walks_over_final_ticks_and_stops_at_the_first_gap() {
        let mut k = Knowledge::new();
        let mut j = Joined::default();
        k.join(r(1, 4), Know::Final, &mut j);
        k.join(r(5, 5), Know::Data, &mut j);
        k.join(r(8, 9), Know::Final, &mut j);
        assert_eq!(k.horizon(), Tick(6));
        assert_eq!(k.highest_known(), Tick(9));
        k.advance_done(Tick(5));
        assert_eq!(k.horizon(), Tick(6));
        assert_eq!(k.run_count(), 1);
    }

    proptest::proptest! {
        /// The cached horizon agrees with a walk tick by tick, whatever order values and done
        /// prefixes come in.
        #[test]
        fn the_kept_horizon_is_the_first_unknown_tick_above_done(
            ops in proptest::collection::vec((0u8..4, 1u64..80, 0u64..12), 1..60),
        ) {
            let mut k = Knowledge::new();
            let mut j = Joined::default();
            for (kind, from, len) in ops {
                match kind {
                    0 => k.join(r(from, from + len), Know::Final, &mut j),
                    1 => k.join(r(from, from + len), Know::Data, &mut j),
                    2 => k.join(r(from, from + len), Know::Lost, &mut j),
                    _ => k.advance_done(Tick(from)),
                }
                let walked = (k.done().0 + 1..).find(|&t| k.get(Tick(t)).is_none()).map(Tick);
                proptest::prop_assert_eq!(Some(k.horizon()), walked);
                for at in [1, 20, 40, 60, 90] {
                    let walked = (at.max(k.done().0 + 1)..).find(|&t| k.get(Tick(t)).is_none()).map(Tick);
                    proptest::prop_assert_eq!(Some(k.horizon_from(Tick(at))), walked);
                }
            }
        }
    }
}
