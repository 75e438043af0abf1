//! Where the suite finds what ships with the project: the example topologies (`topologies/`)
//! and the peer harness with its committed results (`bench/peers/`). A clone of the project
//! alone runs every README command, from its root or from anywhere after `cargo install`.

use std::path::{Path, PathBuf};

/// The repository root this crate was built from.
fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `rel` under the current directory when it exists there (a clone, commands run from its
/// root), else under the repository this binary was built from.
pub fn in_repo(rel: &str) -> PathBuf {
    let here = PathBuf::from(rel);
    if here.exists() {
        here
    } else {
        source_root().join(rel)
    }
}

/// `arg`, else the environment variable `env`, else [`in_repo`]`(rel)`.
pub fn dir_from(arg: &Option<PathBuf>, env: &str, rel: &str) -> PathBuf {
    arg.clone().or_else(|| std::env::var_os(env).map(PathBuf::from)).unwrap_or_else(|| in_repo(rel))
}

/// The example topologies (`topologies/`; schema in `docs/topologies.md`).
pub fn topologies() -> PathBuf {
    in_repo("topologies")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topologies_ship_with_the_repository() {
        for file in ["two-brokers.toml", "gryphon-fig3.toml", "narada-22-sparse.toml", "narada-22-dense.toml"] {
            assert!(topologies().join(file).is_file(), "{file} is missing from {}", topologies().display());
        }
    }

    #[test]
    fn an_explicit_directory_wins_over_the_default() {
        let explicit = Some(PathBuf::from("/elsewhere"));
        assert_eq!(dir_from(&explicit, "TIDINGS_NO_SUCH_VARIABLE", "topologies"), PathBuf::from("/elsewhere"));
        assert!(dir_from(&None, "TIDINGS_NO_SUCH_VARIABLE", "topologies").join("two-brokers.toml").is_file());
    }
}
