//! Shortest-path trees over the cell graph, one per publishing cell, and this broker's place in
//! each: its cell's parent, its cell's children, and for every child the brokers a message may
//! enter through.
//!
//! Every broker computes these from its link-state graph alone, with explicit tie-breaks, so two
//! brokers with the same database build the same trees:
//! - every cell link costs one hop;
//! - a cell's parent is its lowest-named neighbour one hop closer to the root;
//! - a message enters a child cell at the broker the pubend hashes to among the child's brokers
//!   that have an up link from the parent cell, preferring brokers that are *complete* (linked to
//!   every live cell mate and to every entry candidate of their own children), so sideways hops
//!   only last until link state has spread.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::link_state::Graph;
use crate::names::{BrokerName, CellName, ViewId};
use crate::rendezvous::Target;

/// The whole of one tree: every reachable cell's parent and depth.
#[derive(Clone, Debug, Default)]
pub(crate) struct TreeShape {
    /// Parent of every reachable cell except the root.
    pub(crate) parent_of: BTreeMap<CellName, CellName>,
    /// Hops from the root for every reachable cell, the root included (0).
    pub(crate) depth_of: BTreeMap<CellName, u32>,
}

impl TreeShape {
    fn children_of(&self, cell: &CellName) -> Vec<CellName> {
        self.parent_of.iter().filter(|(_, parent)| *parent == cell).map(|(child, _)| child.clone()).collect()
    }
}

/// Where this broker's cell sits in one tree, with what the data path needs precomputed.
#[derive(Clone, Debug)]
pub(crate) struct Place {
    pub(crate) parent: Option<CellName>,
    pub(crate) children: Vec<ChildBundle>,
    pub(crate) shape: TreeShape,
}

/// A child cell of our cell in one tree and the brokers a message may enter it through.
#[derive(Clone, Debug)]
pub(crate) struct ChildBundle {
    pub(crate) cell: CellName,
    /// Entry candidates (complete ones if any, else all with an up link from our cell), sorted.
    pub(crate) targets: Vec<Target>,
}

/// Everything routing derives from one link-state view.
#[derive(Clone, Debug)]
pub(crate) struct RouteTable {
    pub(crate) view: ViewId,
    pub(crate) me: BrokerName,
    pub(crate) cell: CellName,
    pub(crate) graph: Graph,
    /// Our place in the tree of every cell we can reach, keyed by that (root) cell.
    pub(crate) trees: BTreeMap<CellName, Place>,
    /// Cell mates we share a two-way link with, sorted.
    pub(crate) mates: Vec<BrokerName>,
}

impl RouteTable {
    pub(crate) fn build(view: ViewId, me: BrokerName, cell: CellName, graph: Graph) -> Self {
        let edges = graph.cell_edges();
        let reachable = bfs_depths(&edges, &cell);
        let mut trees = BTreeMap::new();
        for root in reachable.keys() {
            let shape = shortest_path_tree(&edges, root);
            let parent = shape.parent_of.get(&cell).cloned();
            let children = shape
                .children_of(&cell)
                .into_iter()
                .map(|child| {
                    let grandchildren = shape.children_of(&child);
                    let targets = entry_targets(&graph, &cell, &child, &grandchildren);
                    ChildBundle { cell: child, targets }
                })
                .collect();
            trees.insert(root.clone(), Place { parent, children, shape });
        }
        let mates =
            graph.members(&cell).iter().filter(|mate| **mate != me && graph.linked(&me, mate)).cloned().collect();
        Self { view, me, cell, graph, trees, mates }
    }

    /// The cell a broker belongs to, as its own advert says.
    pub(crate) fn cell_of(&self, broker: &BrokerName) -> Option<&CellName> {
        self.graph.cell_of.get(broker)
    }
}

fn bfs_depths(edges: &BTreeMap<CellName, BTreeSet<CellName>>, root: &CellName) -> BTreeMap<CellName, u32> {
    let mut depth = BTreeMap::from([(root.clone(), 0u32)]);
    let mut queue = VecDeque::from([root.clone()]);
    while let Some(cell) = queue.pop_front() {
        let next = depth.get(&cell).copied().unwrap_or(0) + 1;
        for neighbour in edges.get(&cell).into_iter().flatten() {
            if !depth.contains_key(neighbour) {
                depth.insert(neighbour.clone(), next);
                queue.push_back(neighbour.clone());
            }
        }
    }
    depth
}

/// The shortest-path tree rooted at `root`: each cell's parent is its lowest-named neighbour one
/// hop closer to the root. The result depends only on the edges, never on traversal order.
pub(crate) fn shortest_path_tree(edges: &BTreeMap<CellName, BTreeSet<CellName>>, root: &CellName) -> TreeShape {
    let depth_of = bfs_depths(edges, root);
    let mut parent_of = BTreeMap::new();
    for (cell, depth) in &depth_of {
        if *depth == 0 {
            continue;
        }
        let parent =
            edges.get(cell).into_iter().flatten().find(|neighbour| depth_of.get(*neighbour) == Some(&(depth - 1)));
        if let Some(parent) = parent {
            parent_of.insert(cell.clone(), parent.clone());
        }
    }
    TreeShape { parent_of, depth_of }
}

/// Brokers of `child` that a message from `parent` may enter through: those with an up link
/// from some broker of `parent`, narrowed to the complete ones when there are any.
fn entry_targets(graph: &Graph, parent: &CellName, child: &CellName, grandchildren: &[CellName]) -> Vec<Target> {
    let candidates = reachable_from(graph, parent, child);
    let onward: Vec<Vec<BrokerName>> =
        grandchildren.iter().map(|grandchild| reachable_from(graph, child, grandchild)).collect();
    let complete: Vec<BrokerName> = candidates
        .iter()
        .filter(|candidate| {
            let mates_ok = graph
                .members(child)
                .iter()
                .filter(|mate| mate != candidate && graph.is_live(mate))
                .all(|mate| graph.linked(candidate, mate));
            let onward_ok = onward.iter().flatten().all(|next| graph.linked(candidate, next));
            mates_ok && onward_ok
        })
        .cloned()
        .collect();
    let chosen = if complete.is_empty() { candidates } else { complete };
    chosen.into_iter().map(Target::new).collect()
}

/// Brokers of `to` with a two-way link from at least one broker of `from`, sorted.
fn reachable_from(graph: &Graph, from: &CellName, to: &CellName) -> Vec<BrokerName> {
    let senders = graph.members(from);
    graph
        .members(to)
        .iter()
        .filter(|receiver| senders.iter().any(|sender| graph.linked(sender, receiver)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(pairs: &[(&str, &str)]) -> BTreeMap<CellName, BTreeSet<CellName>> {
        let mut edges: BTreeMap<CellName, BTreeSet<CellName>> = BTreeMap::new();
        for (a, b) in pairs {
            edges.entry((*a).into()).or_default().insert((*b).into());
            edges.entry((*b).into()).or_default().insert((*a).into());
        }
        edges
    }

    #[test]
    fn equal_cost_paths_are_broken_towards_the_lower_named_parent() {
        // A square: R - X - D and R - Y - D; D has two parents at depth 1 and takes X.
        let square = edges(&[("R", "Y"), ("R", "X"), ("Y", "D"), ("X", "D")]);
        let tree = shortest_path_tree(&square, &"R".into());
        assert_eq!(tree.parent_of[&CellName::new("D")], CellName::new("X"));
        assert_eq!(tree.depth_of[&CellName::new("D")], 2);
    }

    #[test]
    fn unreachable_cells_are_not_in_the_tree() {
        let split = edges(&[("A", "B"), ("C", "D")]);
        let tree = shortest_path_tree(&split, &"A".into());
        assert!(!tree.depth_of.contains_key(&CellName::new("C")));
        assert_eq!(tree.children_of(&"A".into()), vec![CellName::new("B")]);
    }
}
