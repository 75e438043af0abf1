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
//!
//! Each tree gets a [`TreeId`]: a digest of its parents and entry candidates, which is exactly
//! what brokers must agree on for a message to enter every cell at most once.

use std::collections::VecDeque;

use crate::link_state::Graph;
use crate::names::{BrokerName, CellName, TreeId, ViewId};
use crate::rendezvous::{fnv1a, mix, Target};

/// The whole of one tree over the graph's cell indices: every reachable cell's parent and depth,
/// and every bundle's entry candidates.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub(crate) struct TreeShape {
    /// Per cell: its parent (`None` for the root and for unreachable cells).
    pub(crate) parent: Vec<Option<usize>>,
    /// Per cell: hops from the root (`None` when unreachable).
    pub(crate) depth: Vec<Option<u32>>,
    /// Per cell but the root: the brokers a message may enter it through.
    pub(crate) entries: Vec<Vec<usize>>,
}

impl TreeShape {
    fn children(&self) -> Vec<Vec<usize>> {
        let mut children = vec![Vec::new(); self.parent.len()];
        for (child, parent) in self.parent.iter().enumerate() {
            if let Some(parent) = parent {
                children[*parent].push(child);
            }
        }
        children
    }
}

/// Where this broker's cell sits in one tree, with what the data path needs precomputed.
#[derive(Clone, Debug)]
pub(crate) struct Place {
    pub(crate) id: TreeId,
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
    pub(crate) trees: std::collections::BTreeMap<CellName, Place>,
    /// Cell mates we share a two-way link with, sorted.
    pub(crate) mates: Vec<BrokerName>,
    /// A member of our cell is reachable but not linked to us: we cannot hear its local
    /// interest, so we must not vouch for our cell's whole subtree (its summary would leave
    /// that member's subscribers out, and a parent would judge their messages F).
    pub(crate) cell_split: bool,
}

impl RouteTable {
    pub(crate) fn build(view: ViewId, me: BrokerName, cell: CellName, graph: Graph) -> Self {
        let mut trees = std::collections::BTreeMap::new();
        let mut mates = Vec::new();
        let mut cell_split = false;
        if let (Some(me_index), Some(cell_index)) = (graph.broker_index(&me), graph.cell_index(&cell)) {
            let edges = graph.cell_edges();
            let cell_hash: Vec<u64> = graph.cells.iter().map(|c| fnv1a(c.as_str().as_bytes())).collect();
            let broker_hash: Vec<u64> = graph.brokers.iter().map(|b| fnv1a(b.as_str().as_bytes())).collect();
            // Every cell of the graph is reachable from ours: the graph holds reachable brokers only.
            for root in 0..graph.cells.len() {
                let mut shape = shortest_path_tree(&edges, root);
                let children = shape.children();
                shape.entries = (0..graph.cells.len())
                    .map(|child| match shape.parent[child] {
                        Some(parent) => entry_targets(&graph, parent, child, &children[child]),
                        None => Vec::new(),
                    })
                    .collect();
                let id = tree_id(&shape, root, &cell_hash, &broker_hash);
                let own_children = children[cell_index]
                    .iter()
                    .map(|child| ChildBundle {
                        cell: graph.cells[*child].clone(),
                        targets: shape.entries[*child].iter().map(|b| Target::new(graph.brokers[*b].clone())).collect(),
                    })
                    .collect();
                let parent = shape.parent[cell_index].map(|p| graph.cells[p].clone());
                trees.insert(graph.cells[root].clone(), Place { id, parent, children: own_children, shape });
            }
            mates = graph.members[cell_index]
                .iter()
                .filter(|mate| **mate != me_index && graph.linked(me_index, **mate))
                .map(|mate| graph.brokers[*mate].clone())
                .collect();
            cell_split = mates.len() + 1 < graph.members[cell_index].len();
        }
        Self { view, me, cell, graph, trees, mates, cell_split }
    }

    /// The cell a broker belongs to, as its own advert says.
    pub(crate) fn cell_of(&self, broker: &BrokerName) -> Option<&CellName> {
        self.graph.cell_of(broker)
    }
}

/// The digest data headers carry: parents and entry candidates, with pinned hashes.
fn tree_id(shape: &TreeShape, root: usize, cell_hash: &[u64], broker_hash: &[u64]) -> TreeId {
    let mut hash = mix(cell_hash[root]);
    for (cell, parent) in shape.parent.iter().enumerate() {
        let Some(parent) = parent else { continue };
        hash = mix(hash ^ cell_hash[cell]);
        hash = mix(hash ^ cell_hash[*parent]);
        for entry in &shape.entries[cell] {
            hash = mix(hash ^ broker_hash[*entry]);
        }
        hash = mix(hash ^ shape.entries[cell].len() as u64);
    }
    TreeId(hash)
}

/// The shortest-path tree rooted at `root` over cells numbered in name order, with neighbour
/// lists sorted: each cell's parent is its lowest-numbered (so lowest-named) neighbour one hop
/// closer to the root. The result depends only on the edges, never on traversal order.
pub(crate) fn shortest_path_tree(edges: &[Vec<usize>], root: usize) -> TreeShape {
    let mut depth: Vec<Option<u32>> = vec![None; edges.len()];
    depth[root] = Some(0);
    let mut queue = VecDeque::from([root]);
    while let Some(cell) = queue.pop_front() {
        let next = depth[cell].map_or(0, |d| d + 1);
        for neighbour in &edges[cell] {
            if depth[*neighbour].is_none() {
                depth[*neighbour] = Some(next);
                queue.push_back(*neighbour);
            }
        }
    }
    let parent = (0..edges.len())
        .map(|cell| match depth[cell] {
            Some(d) if d > 0 => edges[cell].iter().copied().find(|n| depth[*n] == Some(d - 1)),
            _ => None,
        })
        .collect();
    TreeShape { parent, depth, entries: Vec::new() }
}

/// Brokers of `child` that a message from `parent` may enter through: those with an up link
/// from some broker of `parent`, narrowed to the complete ones when there are any.
fn entry_targets(graph: &Graph, parent: usize, child: usize, grandchildren: &[usize]) -> Vec<usize> {
    let candidates = reachable_from(graph, parent, child);
    let onward: Vec<usize> = grandchildren.iter().flat_map(|g| reachable_from(graph, child, *g)).collect();
    let complete: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|candidate| {
            let mates_ok = graph.members[child]
                .iter()
                .filter(|mate| **mate != *candidate && !graph.links[**mate].is_empty())
                .all(|mate| graph.linked(*candidate, *mate));
            mates_ok && onward.iter().all(|next| graph.linked(*candidate, *next))
        })
        .collect();
    if complete.is_empty() {
        candidates
    } else {
        complete
    }
}

/// Brokers of cell `to` with a two-way link from at least one broker of cell `from`, sorted.
fn reachable_from(graph: &Graph, from: usize, to: usize) -> Vec<usize> {
    let senders = &graph.members[from];
    graph.members[to]
        .iter()
        .copied()
        .filter(|receiver| senders.iter().any(|sender| graph.linked(*sender, *receiver)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cells named by single letters, numbered alphabetically as the graph would number them.
    fn edges(cells: &str, pairs: &[(char, char)]) -> Vec<Vec<usize>> {
        let index = |c: char| cells.find(c).unwrap();
        let mut edges = vec![Vec::new(); cells.len()];
        for (a, b) in pairs {
            edges[index(*a)].push(index(*b));
            edges[index(*b)].push(index(*a));
        }
        edges.iter_mut().for_each(|e| e.sort());
        edges
    }

    #[test]
    fn equal_cost_paths_are_broken_towards_the_lower_named_parent() {
        // A square: R - Y - D and R - X - D; D has two parents at depth 1 and takes X.
        let square = edges("DRXY", &[('R', 'Y'), ('R', 'X'), ('Y', 'D'), ('X', 'D')]);
        let tree = shortest_path_tree(&square, 1);
        assert_eq!(tree.parent[0], Some(2), "D's parent is X");
        assert_eq!(tree.depth[0], Some(2));
    }

    #[test]
    fn unreachable_cells_are_not_in_the_tree() {
        let split = edges("ABCD", &[('A', 'B'), ('C', 'D')]);
        let tree = shortest_path_tree(&split, 0);
        assert_eq!(tree.depth[2], None);
        assert_eq!(tree.children()[0], vec![1]);
    }
}
