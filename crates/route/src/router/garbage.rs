//! Large sets a topology change lets go of, freed a slice per input (issue 46): a link lost
//! beside 100,000 subscriptions dropped what it had been sent and the tree's advertised set
//! in one input, half a million allocations freed under the shell's lock (147 ms in a debug
//! build). Nothing reads them any more; they wait here, and every input frees up to
//! [`FREED_PER_INPUT`] of their filters (the shell ticks at once while any wait, see
//! [`super::Router::next_deadline`]).

use std::collections::BTreeSet;

use crate::filter::Filter;
use crate::minimized::Minimized;
use crate::summary::Scoped;

/// Filters freed per input.
pub(super) const FREED_PER_INPUT: usize = 4096;

/// Sets smaller than this are dropped at once: freeing them costs less than a slice.
const SMALL: usize = FREED_PER_INPUT;

/// What waits to be freed.
#[derive(Clone, Debug)]
pub(super) struct Garbage<F> {
    sets: Vec<BTreeSet<F>>,
    minimized: Vec<Minimized<F>>,
}

impl<F> Default for Garbage<F> {
    fn default() -> Self {
        Self { sets: Vec::new(), minimized: Vec::new() }
    }
}

impl<F: Filter> Garbage<F> {
    /// Takes a link's summary, one set per scope.
    pub(super) fn scoped(&mut self, scoped: Scoped<F>) {
        self.sets.extend(scoped.into_values().filter(|set| set.len() >= SMALL));
    }

    /// Takes an advertised set.
    pub(super) fn minimized(&mut self, set: Minimized<F>) {
        if set.distinct_inputs() >= SMALL {
            self.minimized.push(set);
        }
    }

    /// Whether anything waits.
    pub(super) fn pending(&self) -> bool {
        !self.sets.is_empty() || !self.minimized.is_empty()
    }

    /// Frees up to [`FREED_PER_INPUT`] filters.
    pub(super) fn free(&mut self) {
        let mut budget = FREED_PER_INPUT;
        while budget > 0 {
            if let Some(set) = self.sets.last_mut() {
                while budget > 0 && set.pop_last().is_some() {
                    budget -= 1;
                }
                if set.is_empty() {
                    self.sets.pop();
                }
            } else if let Some(set) = self.minimized.last_mut() {
                budget = budget.saturating_sub(set.shed(budget));
                if set.is_shed() {
                    self.minimized.pop();
                }
            } else {
                return;
            }
        }
    }
}
