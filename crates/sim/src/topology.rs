//! The networks the simulator runs: random ones with cycles and multi-broker cells, and the
//! seed experiments' networks, read from the repository's `topologies/` directory.

use std::collections::BTreeSet;
use std::path::PathBuf;

use tidings_route::Topology;

use crate::rng::Rng;

/// The seed networks under `topologies/`, smallest first.
pub const SEED_TOPOLOGIES: [&str; 4] =
    ["two-brokers.toml", "gryphon-fig3.toml", "narada-22-sparse.toml", "narada-22-dense.toml"];

/// The repository's `topologies/` directory.
pub fn topologies_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../topologies")
}

/// Reads one of the repository's topology files.
pub fn seed_topology(file: &str) -> Result<Topology, String> {
    let path = topologies_dir().join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Topology::parse(&text).map_err(|e| format!("{file}: {e}"))
}

/// A random network as a topology file: one to six cells of one to three brokers, a random
/// spanning tree of cell links plus extra links that make cycles. Cell names are shuffled
/// letters so that name order and creation order differ (tie-breaks must not depend on either).
pub fn random_topology(rng: &mut Rng) -> Topology {
    let mut letters: Vec<char> = "QDKAXMBT".chars().collect();
    rng.shuffle(&mut letters);
    let cells = rng.between(1, 6);
    let mut text = String::from("name = \"random\"\n");
    let mut cell_names = Vec::new();
    let mut linked = BTreeSet::new();
    for (index, letter) in letters.iter().take(cells).enumerate() {
        let size = if rng.chance(40) { 1 } else { rng.between(2, 3) };
        let lone = size == 1 && rng.chance(50);
        let cell = if lone { format!("{}1", letter.to_ascii_lowercase()) } else { letter.to_string() };
        for member in 1..=size {
            text += &format!("[[broker]]\nname = \"{}{member}\"\n", letter.to_ascii_lowercase());
            if !lone {
                text += &format!("cell = \"{cell}\"\n");
            }
        }
        if index > 0 {
            let other = rng.below(index);
            linked.insert((other, index));
            text += &format!("[[link]]\nbetween = [\"{}\", \"{cell}\"]\n", cell_names[other]);
        }
        cell_names.push(cell);
    }
    for a in 0..cells {
        for b in a + 1..cells {
            if rng.chance(20) && !linked.contains(&(a, b)) {
                text += &format!("[[link]]\nbetween = [\"{}\", \"{}\"]\n", cell_names[a], cell_names[b]);
            }
        }
    }
    Topology::parse(&text).unwrap_or_else(|e| panic!("generated topology is invalid: {e}\n{text}"))
}
