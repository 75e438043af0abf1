//! The data path: per message, which neighbours get a copy. Everything that does not depend on
//! the message is precomputed in `DataRoutes` (see `routes`) whenever routes or summaries
//! change, so a message costs one tree lookup, one summary test per child cell (through the
//! filter type's [`FilterIndex`], so a test costs the filters that could match) and one hash
//! per entry candidate.

use super::routes::{ChildRoute, MateRoute, TreeRoutes};
use super::Router;
use crate::filter::{Filter, FilterIndex};
use crate::message::{Arrival, DataHeader, DataSend, DropReason, Forwarding, Hop, LocalDelivery, Verdict};
use crate::names::{BrokerName, CellName, PubendId, TreeId};
use crate::rendezvous::choose;

impl<F: Filter> Router<F> {
    /// Decides where one data message goes from this broker; `out` is cleared first.
    ///
    /// A message enters each cell of its tree once, at the broker the parent cell's hashing
    /// chose. That broker delivers locally, hands a copy to each linked cell mate with matching
    /// local interest, and sends one copy into each child cell whose summary matches, directly
    /// or, when it has no link to the chosen entry broker, sideways through a mate that has one.
    pub fn route(&self, arrival: Arrival<'_>, message: &F::Message, out: &mut Forwarding) {
        self.route_as(arrival, message, false, out);
    }

    /// As [`Router::route`], and also lists in [`Forwarding::filtered`] the children the
    /// message is filtered from (verdict F), each with the hop a copy would have taken: where
    /// guaranteed delivery sends silence for the tick. Every copy in `sends` carries its verdict
    /// (D, or unsure when the child's summary is not vouched yet).
    pub fn route_with_verdicts(&self, arrival: Arrival<'_>, message: &F::Message, out: &mut Forwarding) {
        self.route_as(arrival, message, true, out);
    }

    fn route_as(&self, arrival: Arrival<'_>, message: &F::Message, verdicts: bool, out: &mut Forwarding) {
        out.clear();
        match arrival {
            Arrival::Published { pubend } => {
                let root = &self.table.cell;
                match self.routes.trees.get(root) {
                    Some(generations) => self.enter(pubend, root, &generations.current, message, verdicts, out),
                    None => out.dropped = Some(DropReason::UnknownRoot),
                }
            }
            Arrival::Received { from, header } => self.route_received(from, header, message, verdicts, out),
        }
    }

    fn route_received(
        &self,
        from: &BrokerName,
        header: &DataHeader,
        message: &F::Message,
        verdicts: bool,
        out: &mut Forwarding,
    ) {
        let Some(generations) = self.routes.trees.get(&header.root) else {
            out.dropped = Some(DropReason::UnknownRoot);
            return;
        };
        let Some(tree) = generations.get(header.tree) else {
            out.dropped = Some(DropReason::UnknownTreeId);
            return;
        };
        match &header.hop {
            Hop::Down => {
                if tree.parent.is_none() || self.table.cell_of(from) != tree.parent.as_ref() {
                    out.dropped = Some(DropReason::NotFromParent);
                    return;
                }
                self.enter(header.pubend, &header.root, tree, message, verdicts, out);
            }
            Hop::Within { deliver, across } => {
                if !self.routes.mates.iter().any(|mate| mate.name == *from) {
                    out.dropped = Some(DropReason::NotFromMate);
                    return;
                }
                out.deliver_locally = *deliver == LocalDelivery::Deliver;
                for cell in across {
                    let Some(child) = tree.children.iter().find(|child| child.cell == *cell) else { continue };
                    let verdict = self.own_verdict((&header.root, tree), child, message, verdicts);
                    if !child.known || (verdict == Verdict::Filtered && !verdicts) {
                        continue;
                    }
                    // Sideways hops are never repeated: without our own link, the copy stops.
                    match choose(header.pubend, &child.targets) {
                        Some(index) if child.direct[index] => {
                            let target = &child.targets[index].broker;
                            let send = self.send(target, header.pubend, &header.root, tree.id, Hop::Down, verdict);
                            push(out, send);
                        }
                        _ => out.unreachable += u32::from(verdict == Verdict::Deliver),
                    }
                }
            }
        }
    }

    /// Our cell's work for a message that entered it here.
    fn enter(
        &self,
        pubend: PubendId,
        root: &CellName,
        tree: &TreeRoutes<F>,
        message: &F::Message,
        verdicts: bool,
        out: &mut Forwarding,
    ) {
        out.deliver_locally = true;
        let mut sideways: Vec<(usize, CellName, Verdict)> = Vec::new();
        for child in &tree.children {
            let verdict = self.own_verdict((root, tree), child, message, verdicts);
            if verdict == Verdict::Filtered && !verdicts {
                continue;
            }
            let Some(index) = choose(pubend, &child.targets) else {
                out.unreachable += u32::from(verdict == Verdict::Deliver);
                continue;
            };
            let target = &child.targets[index].broker;
            if child.direct[index] {
                push(out, self.send(target, pubend, root, tree.id, Hop::Down, verdict));
                continue;
            }
            // Unknown to us: a helper's own summary decides, if it vouched for it.
            let mate_verdict = |mate: &MateRoute<F>| {
                child_verdict(true, mate.down_synced.contains(root), || {
                    mate.down.get(root).is_some_and(|down| down.any_match(message))
                })
            };
            let mates = &self.routes.mates;
            let wants = |mate: &MateRoute<F>| child.known || mate_verdict(mate) != Verdict::Filtered;
            match mates.iter().position(|mate| mate.links.contains(target) && wants(mate)) {
                Some(helper) => {
                    let verdict = if child.known { verdict } else { mate_verdict(&mates[helper]) };
                    sideways.push((helper, child.cell.clone(), verdict));
                }
                None => {
                    // No mate links to the entry broker (a known child's copy finds a helper
                    // whenever one does).
                    out.unreachable += u32::from(verdict == Verdict::Deliver);
                    if verdicts {
                        if let Some(helper) = mates.iter().position(|mate| mate.links.contains(target)) {
                            sideways.push((helper, child.cell.clone(), Verdict::Filtered));
                        }
                    }
                }
            }
        }
        for (index, mate) in self.routes.mates.iter().enumerate() {
            let local = child_verdict(true, mate.local_synced, || mate.local.any_match(message));
            let deliver = if local == Verdict::Filtered { LocalDelivery::Skip } else { LocalDelivery::Deliver };
            let mine = || sideways.iter().filter(move |(helper, ..)| *helper == index);
            let across: Vec<CellName> =
                mine().filter(|(.., v)| *v != Verdict::Filtered).map(|(_, cell, _)| cell.clone()).collect();
            let verdict = strongest(local, mine().map(|(.., v)| *v));
            if deliver == LocalDelivery::Deliver || !across.is_empty() {
                out.sends.push(self.send(&mate.name, pubend, root, tree.id, Hop::Within { deliver, across }, verdict));
            } else if verdicts {
                let filtered: Vec<CellName> = mine().map(|(_, cell, _)| cell.clone()).collect();
                let hop = Hop::Within { deliver: LocalDelivery::Skip, across: filtered };
                out.filtered.push(self.send(&mate.name, pubend, root, tree.id, hop, Verdict::Filtered));
            }
        }
    }

    fn send(
        &self,
        to: &BrokerName,
        pubend: PubendId,
        root: &CellName,
        tree: TreeId,
        hop: Hop,
        verdict: Verdict,
    ) -> DataSend {
        DataSend {
            to: to.clone(),
            header: DataHeader { pubend, root: root.clone(), tree, hop, groups: Vec::new() },
            verdict,
        }
    }
}

impl<F: Filter> Router<F> {
    /// A child cell's verdict by our own summary of it; for guaranteed delivery (`verdicts`),
    /// an F it gives becomes `Unsure` while a linked mate with a link into the child holds
    /// matching interest below it for `root` that none of our own summaries of its other
    /// children explains. A start barrier's answer may reach us through such a mate while the
    /// child's own delta to us is still on its way (or lost on a link that has not yet been
    /// declared down): the mate's summary then holds the new subscription and ours does not, and
    /// an F judged by ours alone would skip a tick the subscriber is owed (simulator seed 223,
    /// everything at once). Interest our summary of another child of the mate's holds (or a
    /// child we have no summary of might hold) explains it, so a settled network still sends a
    /// message only toward interest. Best effort keeps the one-summary test.
    pub(super) fn own_verdict(
        &self,
        (root, tree): (&CellName, &TreeRoutes<F>),
        child: &ChildRoute<F>,
        message: &F::Message,
        verdicts: bool,
    ) -> Verdict {
        let verdict = child_verdict(child.known, child.synced, || child.index.any_match(message));
        if !verdicts || verdict != Verdict::Filtered {
            return verdict;
        }
        let explained = |mate: &MateRoute<F>| {
            tree.children.iter().any(|other| {
                other.cell != child.cell
                    && self.links_into(mate, &other.cell)
                    && (!other.known || other.index.any_match(message))
            })
        };
        let unexplained = self
            .mates_into(child)
            .any(|mate| mate.down.get(root).is_some_and(|down| down.any_match(message)) && !explained(mate));
        if unexplained {
            Verdict::Unsure
        } else {
            verdict
        }
    }

    /// Linked cell mates with a link into `child`: whose summaries of what lies below them for a
    /// root include that child's interest.
    pub(super) fn mates_into<'a>(&'a self, child: &'a ChildRoute<F>) -> impl Iterator<Item = &'a MateRoute<F>> + 'a {
        self.routes.mates.iter().filter(move |mate| self.links_into(mate, &child.cell))
    }

    /// Whether `mate` has a link to any broker of `cell` (not only to the entry candidates we
    /// would choose: its summary holds what any of its links into the cell told it).
    fn links_into(&self, mate: &MateRoute<F>, cell: &CellName) -> bool {
        mate.links.iter().any(|broker| self.table.graph.cell_of(broker) == Some(cell))
    }
}

/// A child's verdict: unknown or unvouched summaries cannot rule a message out.
pub(super) fn child_verdict(known: bool, synced: bool, matches: impl FnOnce() -> bool) -> Verdict {
    if !known || !synced {
        Verdict::Unsure
    } else if matches() {
        Verdict::Deliver
    } else {
        Verdict::Filtered
    }
}

/// The verdict of one copy to a mate that carries several children: a copy goes if any of them
/// wants it; it is "unsure" if none surely does but one cannot tell.
fn strongest(first: Verdict, rest: impl Iterator<Item = Verdict>) -> Verdict {
    std::iter::once(first).chain(rest).fold(Verdict::Filtered, |held, next| match (held, next) {
        (Verdict::Deliver, _) | (_, Verdict::Deliver) => Verdict::Deliver,
        (Verdict::Unsure, _) | (_, Verdict::Unsure) => Verdict::Unsure,
        _ => Verdict::Filtered,
    })
}

/// Files a copy under `sends` or, when filtered, under `filtered`.
fn push(out: &mut Forwarding, send: DataSend) {
    if send.verdict == Verdict::Filtered {
        out.filtered.push(send);
    } else {
        out.sends.push(send);
    }
}
