//! Invariants of a converged network, judged against a reference computed here from the
//! simulator's ground truth (which brokers are up, which connections are open), not from what
//! the routers believe.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tidings_route::{CellName, Filter};

use super::net::Net;
use super::rng::Rng;
use super::topic::all_topics;

type Edges = BTreeMap<CellName, BTreeSet<CellName>>;

/// Ground truth: connected groups of live brokers and the cell graph between them.
pub(crate) struct Reference {
    pub(crate) component: Vec<Option<usize>>,
    pub(crate) cells: Vec<BTreeSet<CellName>>,
    pub(crate) edges: Edges,
}

pub(crate) fn reference(net: &Net) -> Reference {
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
pub(crate) fn reference_tree(edges: &Edges, root: &CellName) -> BTreeMap<CellName, CellName> {
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
pub(crate) fn links_settled(net: &Net) -> Result<(), String> {
    for (node, n) in net.nodes.iter().enumerate() {
        let Some(router) = &n.router else { continue };
        let believed: BTreeSet<String> = router.peers().map(|p| p.to_string()).collect();
        let open: BTreeSet<String> = net
            .wires
            .iter()
            .filter(|((a, b), w)| (*a == node || *b == node) && w.conn.as_ref().is_some_and(|c| !c.silent))
            .map(|((a, b), _)| net.nodes[if *a == node { *b } else { *a }].name.to_string())
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

/// Brokers of one connected group share a view, and every broker's trees are the specified ones.
pub(crate) fn trees_agree(net: &Net, reference: &Reference) -> Result<(), String> {
    let mut first_of_component: BTreeMap<usize, usize> = BTreeMap::new();
    for (node, n) in net.nodes.iter().enumerate() {
        let (Some(router), Some(component)) = (&n.router, reference.component[node]) else { continue };
        let snapshot = router.snapshot();
        let roots: BTreeSet<CellName> = snapshot.trees.keys().cloned().collect();
        if roots != reference.cells[component] {
            return Err(format!(
                "{} has trees for {roots:?}, its group has cells {:?}",
                n.name, reference.cells[component]
            ));
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

/// Delivers everything in flight, including what deliveries cause: rounds of one packet from
/// each busy connection direction, in a random order per round.
pub(crate) fn drain(net: &mut Net, rng: &mut Rng) {
    loop {
        let mut busy = net.busy();
        if busy.is_empty() {
            return;
        }
        for i in (1..busy.len()).rev() {
            busy.swap(i, rng.below(i + 1));
        }
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

/// Publishes from several brokers on several topics into the settled network and checks each
/// message: delivered exactly once to every matching subscriber of the publisher's group and to
/// nobody else, and sent into a child cell or to a cell mate only where there is interest.
pub(crate) fn probe(net: &mut Net, rng: &mut Rng, reference: &Reference) -> Result<usize, String> {
    let topics = all_topics();
    let live: Vec<usize> = (0..net.nodes.len()).filter(|i| net.alive(*i)).collect();
    let mut probes = 0;
    for _ in 0..live.len().min(6) {
        let Some(&publisher) = rng.pick(&live) else { break };
        for _ in 0..4 {
            let topic = rng.pick(&topics).cloned().unwrap_or_default();
            net.recording = true;
            net.down_hops.clear();
            net.within_delivers.clear();
            let msg = net.publish(publisher, rng.below(16) as u64, &topic);
            drain(net, rng);
            net.recording = false;
            check_message(net, reference, msg, publisher, &topic)?;
            probes += 1;
        }
    }
    Ok(probes)
}

fn check_message(net: &Net, reference: &Reference, msg: usize, publisher: usize, topic: &str) -> Result<(), String> {
    let group = reference.component[publisher];
    let interested = |node: usize| net.nodes[node].subs.values().any(|f| f.matches(topic));
    let who = |node: usize| net.nodes[node].name.to_string();
    for (node, n) in net.nodes.iter().enumerate() {
        let reachable = net.alive(node) && reference.component[node] == group;
        for (sub, filter) in &n.subs {
            let expected = u32::from(reachable && filter.matches(topic));
            let got = net.deliveries.get(&(msg, *sub)).copied().unwrap_or(0);
            if got != expected {
                return Err(format!(
                    "message {msg} on {topic} from {}: subscriber {sub} ({filter:?}) at {} got it {got} times, expected {expected}",
                    who(publisher),
                    n.name
                ));
            }
        }
    }
    let root = &net.nodes[publisher].cell;
    let parent_of = reference_tree(&reference.edges, root);
    let cells = group.map(|g| reference.cells[g].clone()).unwrap_or_default();
    for hop in net.down_hops.iter().filter(|h| h.msg == msg) {
        let (from_cell, to_cell) = (&net.nodes[hop.from].cell, &net.nodes[hop.to].cell);
        if &hop.root != root || parent_of.get(to_cell) != Some(from_cell) {
            return Err(format!(
                "message {msg} went {} -> {}, not down the tree of {root}",
                who(hop.from),
                who(hop.to)
            ));
        }
        let below = subtree(&parent_of, to_cell, &cells);
        let wanted = (0..net.nodes.len()).any(|k| net.alive(k) && below.contains(&net.nodes[k].cell) && interested(k));
        if !wanted {
            return Err(format!(
                "message {msg} on {topic} sent {} -> {} into a branch without interest",
                who(hop.from),
                who(hop.to)
            ));
        }
    }
    for (m, to) in &net.within_delivers {
        if *m == msg && !interested(*to) {
            return Err(format!("message {msg} on {topic} handed to cell mate {} without interest", who(*to)));
        }
    }
    Ok(())
}
