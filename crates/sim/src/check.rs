//! Invariants, judged against ground truth computed here (which brokers run, which connections
//! are open, who subscribed to what), never against what the routers believe.
//!
//! - Always: a message reaches a broker at most once and a subscriber at most once (checked
//!   as it happens, in `data`).
//! - Whenever the network is *quiet* (no routing control frame in flight, every link settled,
//!   no broker stalled, every cell's live brokers linked with each other, one view per
//!   connected group): every data hop goes down the specified
//!   tree into a branch with interest (no-interest branches get nothing), and a message
//!   published then reaches every matching subscriber of its group exactly once, unless a
//!   fault or churn ends the quiet before it landed.
//! - At the phase checkpoints: trees are the specified ones and views agree.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tidings_route::{CellName, Filter, Hop, LocalDelivery};

use crate::layer::Layer;
use crate::net::{HopRecord, Net, Packet};
use crate::rng::Rng;

type Edges = BTreeMap<CellName, BTreeSet<CellName>>;

/// Ground truth: connected groups of live brokers and the cell graph between them.
pub struct Reference {
    /// Each node's group (`None`: crashed).
    pub component: Vec<Option<usize>>,
    /// Each group's cells.
    pub cells: Vec<BTreeSet<CellName>>,
    /// Cell adjacency over open connections.
    pub edges: Edges,
}

/// The ground truth of the network now.
pub fn reference<L: Layer>(net: &Net<L>) -> Reference {
    let n = net.nodes.len();
    let mut neighbours: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut edges: Edges = BTreeMap::new();
    for (&(a, b), wire) in &net.wires {
        if wire.conn.as_ref().is_some_and(|c| !c.silent) && net.alive(a) && net.alive(b) {
            neighbours[a].push(b);
            neighbours[b].push(a);
            let (ca, cb) = (&net.nodes[a].cell, &net.nodes[b].cell);
            if ca != cb {
                edges.entry(ca.clone()).or_default().insert(cb.clone());
                edges.entry(cb.clone()).or_default().insert(ca.clone());
            }
        }
    }
    let mut component = vec![None; n];
    let mut cells = Vec::new();
    for start in (0..n).filter(|i| net.alive(*i)) {
        if component[start].is_some() {
            continue;
        }
        let id = cells.len();
        let mut members = BTreeSet::new();
        let mut queue = VecDeque::from([start]);
        component[start] = Some(id);
        while let Some(node) = queue.pop_front() {
            members.insert(net.nodes[node].cell.clone());
            for &next in &neighbours[node] {
                if component[next].is_none() {
                    component[next] = Some(id);
                    queue.push_back(next);
                }
            }
        }
        cells.push(members);
    }
    Reference { component, cells, edges }
}

/// The specified tree: breadth-first from the root, each cell's parent its lowest-named
/// neighbour one hop closer.
pub fn reference_tree(edges: &Edges, root: &CellName) -> BTreeMap<CellName, CellName> {
    let mut depth = BTreeMap::from([(root.clone(), 0usize)]);
    let mut queue = VecDeque::from([root.clone()]);
    while let Some(cell) = queue.pop_front() {
        for next in edges.get(&cell).into_iter().flatten() {
            if !depth.contains_key(next) {
                depth.insert(next.clone(), depth[&cell] + 1);
                queue.push_back(next.clone());
            }
        }
    }
    let mut parent = BTreeMap::new();
    for (cell, d) in &depth {
        if let Some(p) = edges.get(cell).into_iter().flatten().find(|n| depth.get(*n) == Some(&(d.wrapping_sub(1)))) {
            parent.insert(cell.clone(), p.clone());
        }
    }
    parent
}

/// Every router's links are exactly the open connections, and no connection is half dead.
pub fn links_settled<L: Layer>(net: &Net<L>) -> Result<(), String> {
    for (node, n) in net.nodes.iter().enumerate() {
        let Some(router) = &n.router else { continue };
        let believed: BTreeSet<&str> = router.peers().map(|p| p.as_str()).collect();
        let open: BTreeSet<&str> = net
            .wires
            .iter()
            .filter(|((a, b), w)| (*a == node || *b == node) && w.conn.as_ref().is_some_and(|c| !c.silent))
            .map(|((a, b), _)| net.nodes[if *a == node { *b } else { *a }].name.as_str())
            .collect();
        if believed != open {
            return Err(format!("{} believes links {believed:?} but {open:?} are open", n.name));
        }
    }
    if net.wires.values().any(|w| w.conn.as_ref().is_some_and(|c| c.silent)) {
        return Err("a silently broken connection is still open".into());
    }
    Ok(())
}

/// Brokers of one connected group share a view.
fn views_agree<L: Layer>(net: &Net<L>, reference: &Reference) -> bool {
    let mut views = BTreeMap::new();
    for (node, component) in reference.component.iter().enumerate() {
        let (Some(component), Some(router)) = (component, net.router(node)) else { continue };
        if *views.entry(*component).or_insert(router.view()) != router.view() {
            return false;
        }
    }
    true
}

/// Whether every cell's live brokers are linked with each other, as cells assume.
pub fn cells_whole<L: Layer>(net: &Net<L>) -> bool {
    net.wires.iter().all(|((a, b), w)| {
        !w.intra_cell || !net.alive(*a) || !net.alive(*b) || w.conn.as_ref().is_some_and(|c| !c.silent)
    })
}

/// Whether the network is quiet (see the module doc); the reference when it is.
pub fn quiet<L: Layer>(net: &Net<L>) -> Option<Reference> {
    if net.nodes.iter().any(|n| n.stalled) {
        return None;
    }
    let control_in_flight = net.wires.values().filter_map(|w| w.conn.as_ref()).any(|conn| {
        conn.queues
            .iter()
            .flatten()
            .any(|q| matches!(&q.frame, Packet::Control(m) if !matches!(m, tidings_route::PeerMessage::Heartbeat)))
    });
    if control_in_flight || !cells_whole(net) || links_settled(net).is_err() {
        return None;
    }
    let truth = reference(net);
    views_agree(net, &truth).then_some(truth)
}

/// Brokers of one group share a view, and every broker's trees are the specified ones.
pub fn trees_agree<L: Layer>(net: &Net<L>, reference: &Reference) -> Result<(), String> {
    let mut first_of_component: BTreeMap<usize, usize> = BTreeMap::new();
    for (node, n) in net.nodes.iter().enumerate() {
        let (Some(router), Some(component)) = (&n.router, reference.component[node]) else { continue };
        let snapshot = router.snapshot();
        let roots: BTreeSet<CellName> = snapshot.trees.keys().cloned().collect();
        if roots != reference.cells[component] {
            let cells = &reference.cells[component];
            return Err(format!("{} has trees for {roots:?}, its group has cells {cells:?}", n.name));
        }
        for (root, tree) in &snapshot.trees {
            let expected = reference_tree(&reference.edges, root);
            if tree.parent_of != expected {
                return Err(format!("{}: tree of {root} is {:?}, expected {expected:?}", n.name, tree.parent_of));
            }
        }
        let first = *first_of_component.entry(component).or_insert(node);
        let Some(other) = net.router(first) else { continue };
        if other.view() != router.view() {
            return Err(format!("{} and {} are connected but hold different views", n.name, net.nodes[first].name));
        }
        let theirs = other.snapshot();
        for (root, tree) in &snapshot.trees {
            if theirs.trees.get(root).map(|t| (&t.id, &t.entries)) != Some((&tree.id, &tree.entries)) {
                return Err(format!("{} and {} disagree on the bundles of tree {root}", n.name, net.nodes[first].name));
            }
        }
    }
    Ok(())
}

/// Delivers everything in flight, including what deliveries cause: rounds of one frame from
/// each busy connection direction, in a random order per round; time moves on to the next
/// due frame when nothing is due.
pub fn drain<L: Layer>(net: &mut Net<L>, rng: &mut Rng) {
    loop {
        let mut busy = net.busy();
        if busy.is_empty() {
            match net.next_due() {
                Some(due) => {
                    let wait = due.0.saturating_sub(net.now.0).max(1);
                    net.advance(wait);
                    continue;
                }
                None => return,
            }
        }
        rng.shuffle(&mut busy);
        for (key, direction) in busy {
            net.deliver(key, direction);
        }
    }
}

/// Cells of the subtree under `top` in the tree given by `parent_of`.
fn subtree(parent_of: &BTreeMap<CellName, CellName>, top: &CellName, cells: &BTreeSet<CellName>) -> BTreeSet<CellName> {
    cells
        .iter()
        .filter(|cell| {
            let mut walk = Some(*cell);
            while let Some(at) = walk {
                if at == top {
                    return true;
                }
                walk = parent_of.get(at);
            }
            false
        })
        .cloned()
        .collect()
}

/// Judges the data hops of a step taken in a quiet network: down the specified tree, into a
/// branch with interest; a mate asked to deliver has interest.
pub fn judge_hops<L: Layer>(net: &Net<L>, reference: &Reference, hops: &[HopRecord]) -> Result<(), String> {
    for hop in hops {
        let content = &net.messages[hop.msg].content;
        let probe = &net.messages[hop.msg].probe;
        let interested = |node: usize| net.nodes[node].subs.values().any(|f| f.matches(probe));
        let who = |node: usize| net.nodes[node].name.to_string();
        let msg = hop.msg;
        match &hop.header.hop {
            Hop::Down => {
                let root = &hop.header.root;
                let parent_of = reference_tree(&reference.edges, root);
                let (from_cell, to_cell) = (&net.nodes[hop.from].cell, &net.nodes[hop.to].cell);
                if parent_of.get(to_cell) != Some(from_cell) {
                    return Err(format!(
                        "message {msg} went {} -> {}, not down the tree of {root}",
                        who(hop.from),
                        who(hop.to)
                    ));
                }
                let group = reference.component[hop.from];
                let cells = group.map(|g| reference.cells[g].clone()).unwrap_or_default();
                let below = subtree(&parent_of, to_cell, &cells);
                let wanted = (0..net.nodes.len()).any(|k| {
                    net.alive(k)
                        && reference.component[k] == group
                        && below.contains(&net.nodes[k].cell)
                        && interested(k)
                });
                if !wanted {
                    return Err(format!(
                        "message {msg} ({content:?}) sent {} -> {} into a branch without interest ({:?})",
                        who(hop.from),
                        who(hop.to),
                        hop.verdict
                    ));
                }
            }
            Hop::Within { deliver: LocalDelivery::Deliver, across } if across.is_empty() && !interested(hop.to) => {
                return Err(format!(
                    "message {msg} ({content:?}) handed to cell mate {} without interest",
                    who(hop.to)
                ));
            }
            Hop::Within { .. } => {}
        }
    }
    Ok(())
}

/// The subscribers a message published now at `publisher` must reach exactly once.
pub fn expected_receivers<L: Layer>(net: &Net<L>, reference: &Reference, msg: usize) -> BTreeSet<u64> {
    let record = &net.messages[msg];
    let group = reference.component[record.publisher];
    let mut expected = BTreeSet::new();
    for (node, n) in net.nodes.iter().enumerate() {
        if !net.alive(node) || group.is_none() || reference.component[node] != group {
            continue;
        }
        expected.extend(n.subs.iter().filter(|(_, f)| f.matches(&record.probe)).map(|(id, _)| *id));
    }
    expected
}

/// Whether a landed message reached exactly the expected subscribers, once each.
pub fn judge_landed<L: Layer>(net: &Net<L>, msg: usize, expected: &BTreeSet<u64>) -> Result<(), String> {
    let got: BTreeSet<u64> = net.deliveries.range((msg, 0)..(msg + 1, 0)).map(|((_, sub), _)| *sub).collect();
    if &got != expected {
        let record = &net.messages[msg];
        return Err(format!(
            "message {msg} ({:?}) from {} published in a quiet network reached subscribers {got:?}, expected {expected:?}",
            record.content, net.nodes[record.publisher].name
        ));
    }
    Ok(())
}
