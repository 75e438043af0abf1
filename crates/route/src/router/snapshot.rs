//! The router's view as plain serializable data, for the admin `/state` endpoint, metrics and
//! the simulator's cross-broker checks.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Router;
use crate::filter::Filter;
use crate::link_state::LinkStateAdvert;
use crate::names::{BrokerName, CellName, Incarnation, Millis, TreeId, ViewId};
use crate::summary::{size, Scope, Scoped};
use crate::tree::TreeShape;

/// Everything one broker knows about routing, at one moment.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct RouterSnapshot<F> {
    /// This broker.
    pub name: BrokerName,
    /// Its cell.
    pub cell: CellName,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// The link-state view the trees below were computed from.
    pub view: ViewId,
    /// Up links.
    pub links: Vec<LinkSnapshot>,
    /// The link-state database, one advert per known broker.
    pub adverts: Vec<LinkStateAdvert>,
    /// Per publishing cell reachable from here: the tree and our cell's place in it.
    pub trees: BTreeMap<CellName, TreeSnapshot<F>>,
    /// Local interest, minimized.
    pub local: Vec<F>,
    /// Per up link: the summary it advertised to us.
    pub received: BTreeMap<BrokerName, Vec<ScopeSnapshot<F>>>,
    /// Per up link: the summary we advertised on it.
    pub sent: BTreeMap<BrokerName, Vec<ScopeSnapshot<F>>>,
    /// Counters and sizes.
    pub metrics: RouterMetrics,
}

/// One up link.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct LinkSnapshot {
    /// The peer.
    pub peer: BrokerName,
    /// Its cell.
    pub cell: CellName,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// When the link came up.
    pub up_since: Millis,
    /// When we last heard from the peer.
    pub last_heard: Millis,
}

/// One tree as this broker computed it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct TreeSnapshot<F> {
    /// The tree's digest, carried by data headers.
    pub id: TreeId,
    /// Parent of every cell of the tree but the root; equal on every broker with the same view.
    pub parent_of: BTreeMap<CellName, CellName>,
    /// Entry candidates of every cell of the tree but the root.
    pub entries: BTreeMap<CellName, Vec<BrokerName>>,
    /// Hops from the root of every cell of the tree.
    pub depth_of: BTreeMap<CellName, u32>,
    /// Our cell's parent (`None` at the root).
    pub parent: Option<CellName>,
    /// Our cell's children.
    pub children: Vec<ChildSnapshot<F>>,
}

/// One child cell of ours in one tree.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct ChildSnapshot<F> {
    /// The child cell.
    pub cell: CellName,
    /// Brokers a message may enter it through (rendezvous hashing picks one per pubend).
    pub entry_candidates: Vec<BrokerName>,
    /// Interest behind it, from our own links into it.
    pub summary: Vec<F>,
    /// Whether its brokers vouched for that summary in this tree; until they do, copies go in
    /// whatever the summary says.
    pub synced: bool,
}

/// One scope of a link's summary.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct ScopeSnapshot<F> {
    /// The scope.
    pub scope: Scope,
    /// Its filters.
    pub filters: Vec<F>,
}

/// Numbers for the broker's Prometheus exporter.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize)]
pub struct RouterMetrics {
    /// How often trees were recomputed (each link-state view change).
    pub route_recomputations: u64,
    /// Adverts accepted as newer than what we held.
    pub adverts_accepted: u64,
    /// Summary deltas sent, over all links.
    pub summary_deltas_sent: u64,
    /// Links declared down for missed heartbeats.
    pub links_declared_dead: u64,
    /// Distinct local filters.
    pub local_filters: usize,
    /// Per up link: filters in the summary it advertised to us, over all scopes.
    pub summary_size_received: BTreeMap<BrokerName, usize>,
    /// Per up link: filters in the summary we advertised on it, over all scopes.
    pub summary_size_sent: BTreeMap<BrokerName, usize>,
    /// Adverts waiting for a path that can vouch for them, per origin: (version, senders).
    pub adverts_waiting: BTreeMap<BrokerName, ((Incarnation, u64), Vec<BrokerName>)>,
}

/// Which filters of each list a snapshot shows: a broker with 100,000 subscriptions must not
/// answer `/state` with every one of them by default. Sizes are always in [`RouterMetrics`].
/// A list is paged in its own deterministic order: summaries sorted, minimized sets (local
/// interest, children's summaries) by covering key, then sorted.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FilterPage {
    /// Filters skipped at the start of each (sorted) list.
    pub offset: usize,
    /// Most filters shown per list.
    pub limit: usize,
}

impl FilterPage {
    /// Every filter.
    pub const ALL: FilterPage = FilterPage { offset: 0, limit: usize::MAX };

    /// The page of `filters`, in their list's own order, cloning only the page: the snapshot
    /// is taken under the shell's lock, and selecting the smallest of 100,000 filters to show
    /// them sorted held it (and every message forwarded behind it) for 100-300 ms of a debug
    /// build's `/state`. The order is deterministic: the minimized sets' (filters by covering
    /// key, then sorted), the summaries' (sorted).
    fn of<'a, F: Clone + 'a>(self, filters: impl Iterator<Item = &'a F>) -> Vec<F> {
        filters.skip(self.offset).take(self.limit).cloned().collect()
    }
}

fn scopes<F: Clone>(summary: &Scoped<F>, page: FilterPage) -> Vec<ScopeSnapshot<F>> {
    summary
        .iter()
        .map(|(scope, filters)| ScopeSnapshot { scope: scope.clone(), filters: page.of(filters.iter()) })
        .collect()
}

impl<F: Filter> Router<F> {
    fn named_parents(&self, shape: &TreeShape) -> BTreeMap<CellName, CellName> {
        let cells = &self.table.graph.cells;
        shape.parent.iter().enumerate().filter_map(|(c, p)| Some((cells[c].clone(), cells[(*p)?].clone()))).collect()
    }

    fn named_depths(&self, shape: &TreeShape) -> BTreeMap<CellName, u32> {
        let cells = &self.table.graph.cells;
        shape.depth.iter().enumerate().filter_map(|(c, d)| Some((cells[c].clone(), (*d)?))).collect()
    }

    fn named_entries(&self, shape: &TreeShape) -> BTreeMap<CellName, Vec<BrokerName>> {
        let graph = &self.table.graph;
        shape
            .entries
            .iter()
            .enumerate()
            .filter(|(_, entries)| !entries.is_empty())
            .map(|(c, entries)| (graph.cells[c].clone(), entries.iter().map(|b| graph.brokers[*b].clone()).collect()))
            .collect()
    }

    /// Counters and summary sizes, cheap enough to scrape.
    pub fn metrics(&self) -> RouterMetrics {
        let sizes = |map: &BTreeMap<BrokerName, Scoped<F>>| -> BTreeMap<BrokerName, usize> {
            map.iter().map(|(peer, summary)| (peer.clone(), size(summary))).collect()
        };
        RouterMetrics {
            route_recomputations: self.counters.route_recomputations,
            adverts_accepted: self.counters.adverts_accepted,
            summary_deltas_sent: self.counters.summary_deltas_sent,
            links_declared_dead: self.counters.links_declared_dead,
            local_filters: self.local.distinct_inputs(),
            summary_size_received: sizes(&self.received),
            summary_size_sent: sizes(&self.sent),
            adverts_waiting: self
                .pending_adverts
                .iter()
                .map(|(origin, (advert, from))| (origin.clone(), (advert.version(), from.iter().cloned().collect())))
                .collect(),
        }
    }

    /// The full view, for comparing brokers in tests (serialize it with any serde format whose
    /// map keys may be strings).
    pub fn snapshot(&self) -> RouterSnapshot<F> {
        self.snapshot_page(FilterPage::ALL)
    }

    /// The view with one page of every filter list, for `/state`.
    pub fn snapshot_page(&self, page: FilterPage) -> RouterSnapshot<F> {
        let links = self
            .links
            .iter()
            .map(|(peer, link)| LinkSnapshot {
                peer: peer.clone(),
                cell: link.cell.clone(),
                incarnation: link.incarnation,
                up_since: link.up_since,
                last_heard: link.clock.last_heard,
            })
            .collect();
        let trees = self
            .table
            .trees
            .iter()
            .map(|(root, place)| {
                let routes = self.routes.trees.get(root).map(|generations| &generations.current);
                let children = place
                    .children
                    .iter()
                    .map(|bundle| ChildSnapshot {
                        cell: bundle.cell.clone(),
                        entry_candidates: bundle.targets.iter().map(|t| t.broker.clone()).collect(),
                        summary: routes
                            .and_then(|r| r.children.iter().find(|c| c.cell == bundle.cell))
                            .map(|c| page.of(c.summary.kept()))
                            .unwrap_or_default(),
                        synced: routes
                            .and_then(|r| r.children.iter().find(|c| c.cell == bundle.cell))
                            .is_some_and(|c| c.synced),
                    })
                    .collect();
                let tree = TreeSnapshot {
                    id: place.id,
                    entries: self.named_entries(&place.shape),
                    parent_of: self.named_parents(&place.shape),
                    depth_of: self.named_depths(&place.shape),
                    parent: place.parent.clone(),
                    children,
                };
                (root.clone(), tree)
            })
            .collect();
        let per_link =
            |map: &BTreeMap<BrokerName, Scoped<F>>| map.iter().map(|(p, s)| (p.clone(), scopes(s, page))).collect();
        RouterSnapshot {
            name: self.settings.name.clone(),
            cell: self.settings.cell.clone(),
            incarnation: self.settings.incarnation,
            view: self.table.view,
            links,
            adverts: self.db.adverts().cloned().collect(),
            trees,
            local: page.of(self.local.kept()),
            received: per_link(&self.received),
            sent: per_link(&self.sent),
            metrics: self.metrics(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FilterPage;

    #[test]
    fn a_page_is_the_filters_from_its_offset_in_the_lists_order() {
        let filters: Vec<u32> = (0..500u32).map(|i| i.wrapping_mul(2_654_435_761) % 1000).collect();
        for (offset, limit) in [(0, 100), (0, 0), (450, 100), (499, 1), (500, 10), (0, usize::MAX), (7, 3)] {
            let page = FilterPage { offset, limit };
            let want: Vec<u32> = filters.iter().skip(offset).take(limit).copied().collect();
            assert_eq!(page.of(filters.iter()), want, "offset {offset} limit {limit}");
        }
    }
}
