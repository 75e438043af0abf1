//! Serve orders: a durable subend catching up on a stream whose log is at this broker is served
//! by the shell's cursor, outside the engine's turns ([`crate::Action::Serve`]), while the
//! engine stays the authority on what it may receive. An order covers ticks already final here
//! and at or below what the caught-up subends were handed (`Subends::delivered`), so nothing in
//! it can change any more: the engine lists its D runs (the cursor reads and filters them) and
//! L runs (gaps, told in order), leaves the F runs out, and moves the subend's pointer only as
//! the cursor reports ([`crate::Input::SubendServed`]). The subend stays lagging meanwhile, so
//! live delivery skips it; once a report reaches the caught-up pointer it rejoins live delivery
//! at the next tick: no tick missed or repeated at the seam (docs/catch-up.md).

use std::collections::{BTreeMap, BTreeSet};

use super::{gap_notice, Member, Subends};
use crate::engine::types::{Action, ServeOrder, ServeRun};
use crate::engine::Ctx;
use crate::error::DeliveryError;
use crate::knowledge::{Know, Knowledge};
use crate::names::{PubendId, SubendId, Tick, TickRange};

/// The order a subend is being served, as the engine remembers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Running {
    pub(crate) id: u64,
    pub(crate) to: Tick,
}

/// The serve orders of one stream's subends.
#[derive(Clone, Debug, Default)]
pub(crate) struct Orders {
    running: BTreeMap<SubendId, Running>,
    /// Subends whose last order stopped short (a record missing or damaged, the connection
    /// gone): replayed by the engine until they catch up or are attached again.
    declined: BTreeSet<SubendId>,
    next_id: u64,
}

/// What a report of the cursor means for the subend's pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Report {
    /// Not the subend's current order (cancelled, or stale): nothing moves.
    Stale,
    /// The pointer moves to `through`; `done`: the order ended.
    Served { through: Tick, done: bool },
}

impl Orders {
    /// The order `subend` is being served, if any.
    pub(crate) fn running(&self, subend: SubendId) -> Option<Running> {
        self.running.get(&subend).copied()
    }

    /// Whether `subend` is replayed by the engine rather than served.
    pub(crate) fn declined(&self, subend: SubendId) -> bool {
        self.declined.contains(&subend)
    }

    /// Forgets `subend`'s order and its refusal (rewound, caught up or gone); returns the
    /// order's id if one was running (the shell must cancel it).
    pub(crate) fn forget(&mut self, subend: SubendId) -> Option<u64> {
        self.declined.remove(&subend);
        self.running.remove(&subend).map(|running| running.id)
    }

    /// Records the order planned for `subend`.
    pub(crate) fn start(&mut self, order: &ServeOrder) {
        self.running.insert(order.subend, Running { id: order.id, to: order.to });
    }

    /// A fresh order id.
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The cursor's report on order `id` for `subend`, whose pointer is `pointer`.
    pub(crate) fn report(&mut self, subend: SubendId, id: u64, pointer: Tick, (through, done): (Tick, bool)) -> Report {
        let Some(running) = self.running.get(&subend).copied().filter(|r| r.id == id) else { return Report::Stale };
        let through = through.min(running.to).max(pointer);
        if done {
            self.running.remove(&subend);
            if through < running.to {
                self.declined.insert(subend);
            }
        }
        Report::Served { through, done }
    }
}

/// Plans an order serving `(pointer, until]` to `subend` (started at `start`): its D and L runs
/// at or above `start`, cut after `messages` D ticks. Every tick of the range must be final.
/// Returns the runs and the order's last tick (`until`, or the last D tick taken).
pub(crate) fn plan(
    know: &Knowledge,
    (pointer, until): (Tick, Tick),
    start: Tick,
    messages: u64,
) -> (Vec<ServeRun>, Tick) {
    let mut runs = Vec::new();
    let Some(range) = TickRange::new(pointer.next(), until) else { return (runs, until.max(pointer)) };
    let mut left = messages.max(1);
    for run in know.runs(range) {
        let Some(piece) = TickRange::new(run.range.from.max(start), run.range.to) else { continue };
        match run.value {
            Know::Final => {}
            Know::Lost => runs.push(ServeRun { range: piece, lost: true }),
            Know::Data if piece.len() > left => {
                let cut = TickRange { from: piece.from, to: Tick(piece.from.0 + left - 1) };
                runs.push(ServeRun { range: cut, lost: false });
                return (runs, cut.to);
            }
            Know::Data => {
                left -= piece.len();
                runs.push(ServeRun { range: piece, lost: false });
                if left == 0 {
                    return (runs, piece.to);
                }
            }
        }
    }
    (runs, until)
}

/// The order for `subend` of `pubend`, with a fresh id.
pub(crate) fn order(
    orders: &mut Orders,
    (pubend, subend): (PubendId, SubendId),
    pointer: Tick,
    (runs, to): (Vec<ServeRun>, Tick),
) -> ServeOrder {
    let order = ServeOrder { id: orders.next_id(), pubend, subend, from: pointer.next(), to, runs };
    orders.start(&order);
    order
}

impl Subends {
    /// Moves lagging `subend`'s pointer to `to`; at what the caught-up subends were handed, and
    /// ready, it joins them: live delivery takes it from the next tick on.
    pub(super) fn moved(&mut self, subend: SubendId, to: Tick) {
        if to >= self.delivered && self.ready(subend) {
            self.lagging.remove(&subend);
            self.orders.forget(subend);
        } else {
            self.lagging.insert(subend, to);
        }
    }

    /// Serves lagging durable `subend` by an order for `(pointer, delivered]` rather than a
    /// replay: ticks below the done prefix are told as a gap first (as a replay tells them),
    /// an order with only L runs is told here at once, any other goes to the shell.
    pub(super) fn serve(
        &mut self,
        subend: SubendId,
        member: Member,
        pointer: Tick,
        pubend: PubendId,
        know: &Knowledge,
        ctx: &mut Ctx<'_>,
    ) {
        let until = self.delivered;
        if let Some(lost) = TickRange::new(pointer.next(), know.done().min(until)) {
            gap_notice(subend, &member, pubend, lost, ctx);
        }
        let pointer = pointer.max(know.done().min(until));
        let Some(start) = member.start else { return };
        let (runs, to) = plan(know, (pointer, until), start, ctx.settings.serve_order_messages);
        if runs.iter().all(|run| run.lost) {
            for run in runs {
                gap_notice(subend, &member, pubend, run.range, ctx);
            }
            self.moved(subend, to);
            return;
        }
        self.lagging.insert(subend, pointer);
        let order = order(&mut self.orders, (pubend, subend), pointer, (runs, to));
        ctx.out.push(Action::Serve(order));
    }

    /// The shell served order `id` to `subend` through `through` ([`crate::Input::SubendServed`]);
    /// true when the order ended (the next one, or the replay, is due). The ticks served were
    /// final when ordered, and final ticks stay final: a report over a tick not final is a
    /// broken shell or core, refused.
    pub(crate) fn served(
        &mut self,
        (pubend, subend, id): (PubendId, SubendId, u64),
        report: (Tick, bool),
        know: &Knowledge,
        ctx: &mut Ctx<'_>,
    ) -> bool {
        let Some(&pointer) = self.lagging.get(&subend) else { return false };
        let Report::Served { through, done } = self.orders.report(subend, id, pointer, report) else { return false };
        let mut unknown = Vec::new();
        if let Some(range) = TickRange::new(pointer.next(), through) {
            know.unknown(range, &mut unknown);
        }
        if let Some(&range) = unknown.first() {
            debug_assert!(false, "served {subend:?} through {through:?}, but {range:?} is not final");
            ctx.out.push(Action::Rejected { error: DeliveryError::ServedNotFinal { subend, tick: range.from } });
            self.cancel(pubend, subend, ctx);
            return false;
        }
        match done {
            true => self.moved(subend, through),
            false => drop(self.lagging.insert(subend, through)),
        }
        done
    }

    /// Cancels `subend`'s running order, if any: the shell stops it before anything else.
    pub(super) fn cancel(&mut self, pubend: PubendId, subend: SubendId, ctx: &mut Ctx<'_>) {
        if let Some(order) = self.orders.forget(subend) {
            ctx.out.push(Action::ServeCancel { pubend, subend, order });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::Joined;

    fn know(runs: &[(u64, u64, Know)]) -> Knowledge {
        let mut know = Knowledge::new();
        for &(from, to, value) in runs {
            know.join(TickRange { from: Tick(from), to: Tick(to) }, value, &mut Joined::default());
        }
        know
    }

    fn run(from: u64, to: u64, lost: bool) -> ServeRun {
        ServeRun { range: TickRange { from: Tick(from), to: Tick(to) }, lost }
    }

    #[test]
    fn a_plan_lists_d_and_l_runs_in_order_and_leaves_f_out() {
        let k = know(&[(1, 3, Know::Data), (4, 9, Know::Final), (10, 10, Know::Lost), (11, 12, Know::Data)]);
        assert_eq!(
            plan(&k, (Tick(0), Tick(12)), Tick(1), 100),
            (vec![run(1, 3, false), run(10, 10, true), run(11, 12, false)], Tick(12))
        );
        // From the pointer on, and never below the subend's start.
        assert_eq!(plan(&k, (Tick(2), Tick(12)), Tick(1), 100).0[0], run(3, 3, false));
        assert_eq!(plan(&k, (Tick(0), Tick(12)), Tick(11), 100), (vec![run(11, 12, false)], Tick(12)));
    }

    #[test]
    fn a_plan_stops_after_its_messages_and_ends_at_the_last_taken() {
        let k = know(&[(1, 3, Know::Data), (4, 9, Know::Final), (10, 14, Know::Data)]);
        assert_eq!(plan(&k, (Tick(0), Tick(14)), Tick(1), 3), (vec![run(1, 3, false)], Tick(3)));
        assert_eq!(plan(&k, (Tick(0), Tick(14)), Tick(1), 5), (vec![run(1, 3, false), run(10, 11, false)], Tick(11)));
        // Only F: nothing to serve, the whole range is passed.
        assert_eq!(plan(&k, (Tick(3), Tick(9)), Tick(1), 5), (vec![], Tick(9)));
    }

    #[test]
    fn reports_of_a_cancelled_or_stale_order_move_nothing() {
        let mut orders = Orders::default();
        let first = order(&mut orders, (PubendId(1), SubendId(1)), Tick(0), (vec![run(1, 5, false)], Tick(5)));
        assert_eq!(orders.forget(SubendId(1)), Some(first.id));
        assert_eq!(orders.report(SubendId(1), first.id, Tick(0), (Tick(5), true)), Report::Stale);
        let second = order(&mut orders, (PubendId(1), SubendId(1)), Tick(0), (vec![run(1, 5, false)], Tick(5)));
        assert_ne!(first.id, second.id);
        assert_eq!(orders.report(SubendId(1), first.id, Tick(0), (Tick(5), true)), Report::Stale);
        // Progress, then the end; a report past the order is held to it.
        assert_eq!(
            orders.report(SubendId(1), second.id, Tick(0), (Tick(3), false)),
            Report::Served { through: Tick(3), done: false }
        );
        assert_eq!(
            orders.report(SubendId(1), second.id, Tick(3), (Tick(9), true)),
            Report::Served { through: Tick(5), done: true }
        );
        assert!(orders.running(SubendId(1)).is_none() && !orders.declined(SubendId(1)));
    }

    #[test]
    fn an_order_stopped_short_hands_the_subend_back_to_the_replay() {
        let mut orders = Orders::default();
        let o = order(&mut orders, (PubendId(1), SubendId(1)), Tick(0), (vec![run(1, 5, false)], Tick(5)));
        assert_eq!(
            orders.report(SubendId(1), o.id, Tick(0), (Tick(2), true)),
            Report::Served { through: Tick(2), done: true }
        );
        assert!(orders.declined(SubendId(1)));
        assert_eq!(orders.forget(SubendId(1)), None);
        assert!(!orders.declined(SubendId(1)));
    }
}
