//! Partial link bundles: a topology file links whole cells (every broker of one to every
//! broker of the other), so with every link up a pubend's entry broker always has a link of
//! its own into each child cell's entry. Real bundles are partial (and links fail), and then
//! the cell's work goes through cell mates: data sideways to the mate that holds the link,
//! acks and nacks back the same way (gd-protocol §11.3). Thinning the bundles at the start of
//! a run makes that the steady state rather than a transient of faults.

use std::collections::BTreeMap;

use crate::gd::layer::GdLayer;
use crate::net::Net;
use crate::rng::Rng;

/// Drops a random subset of each cross-cell bundle's links, keeping at least one per bundle
/// (cells stay fully meshed inside, so every broker still reaches every other).
pub(super) fn thin_bundles(net: &mut Net<GdLayer>, rng: &mut Rng) {
    let mut bundles: BTreeMap<(String, String), Vec<(usize, usize)>> = BTreeMap::new();
    for (&(a, b), wire) in &net.wires {
        if wire.intra_cell {
            continue;
        }
        let (x, y) = (net.nodes[a].cell.to_string(), net.nodes[b].cell.to_string());
        bundles.entry((x.clone().min(y.clone()), x.max(y))).or_default().push((a, b));
    }
    for mut links in bundles.into_values() {
        rng.shuffle(&mut links);
        let keep = rng.between(1, links.len().saturating_sub(1).max(1));
        for key in links.into_iter().skip(keep) {
            net.wires.remove(&key);
        }
    }
}
