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

/// `path` as a report shows it: relative to the repository when it lies inside it, else its
/// file name alone. Reports are committed (`docs/results/`), and the machine that wrote them
/// (its temporary directories, its checkout's absolute path) is nobody else's.
pub fn shown(path: &Path) -> String {
    let inside = |root: &Path| {
        let (path, root) = (path.canonicalize().ok()?, root.canonicalize().ok()?);
        path.strip_prefix(root).ok().map(Path::to_path_buf)
    };
    let relative = inside(&source_root()).or_else(|| std::env::current_dir().ok().and_then(|here| inside(&here)));
    match relative {
        Some(relative) => relative.display().to_string(),
        None => path.file_name().map_or_else(|| path.display().to_string(), |name| name.to_string_lossy().into_owned()),
    }
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
    fn a_report_names_a_path_inside_the_repository_from_its_root_and_any_other_by_its_file_name() {
        assert_eq!(shown(&source_root().join("crates/bench/../../topologies")), "topologies");
        let outside = std::env::temp_dir().join(format!("tidings-shown-{}", std::process::id()));
        std::fs::write(&outside, b"").unwrap();
        let name = outside.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(shown(&outside), name);
        std::fs::remove_file(&outside).unwrap();
        assert_eq!(shown(Path::new("/no/such/dir/peerbench")), "peerbench");
    }

    #[test]
    fn an_explicit_directory_wins_over_the_default() {
        let explicit = Some(PathBuf::from("/elsewhere"));
        assert_eq!(dir_from(&explicit, "TIDINGS_NO_SUCH_VARIABLE", "topologies"), PathBuf::from("/elsewhere"));
        assert!(dir_from(&None, "TIDINGS_NO_SUCH_VARIABLE", "topologies").join("two-brokers.toml").is_file());
    }
}
