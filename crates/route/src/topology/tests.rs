use std::collections::BTreeSet;

use super::*;
use crate::tree::shortest_path_tree;

fn example_file(name: &str) -> Topology {
    let path = format!("{}/../../topologies/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    Topology::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn problems(text: &str) -> Vec<TopologyProblem> {
    match Topology::parse(text) {
        Err(TopologyError::Invalid { problems, .. }) => problems,
        other => panic!("expected validation problems, got {other:?}"),
    }
}

fn names(list: &[&str]) -> BTreeSet<BrokerName> {
    list.iter().map(BrokerName::new).collect()
}

/// Cells on the path from cell `from` to cell `to` (both included) along the shortest-path tree
/// rooted at `from`: the brokers on the path, as a broker links to every broker of a linked cell
/// (a lone broker's cell is its name).
fn brokers_on_path(topology: &Topology, from: &str, to: &str) -> u32 {
    let cells: Vec<&CellName> = topology.cells().keys().collect();
    let index = |cell: &CellName| cells.binary_search(&cell).unwrap();
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); cells.len()];
    for link in topology.cell_links() {
        edges[index(&link.a)].insert(index(&link.b));
        edges[index(&link.b)].insert(index(&link.a));
    }
    let edges: Vec<Vec<usize>> = edges.into_iter().map(|e| e.into_iter().collect()).collect();
    let tree = shortest_path_tree(&edges, index(&from.into()));
    tree.depth[index(&to.into())].unwrap() + 1
}

#[test]
fn two_brokers_is_one_link_between_two_cells_of_one() {
    let topology = example_file("two-brokers.toml");
    assert_eq!(topology.name(), "two-brokers");
    assert_eq!(topology.brokers().len(), 2);
    assert_eq!(topology.cells().len(), 2);
    assert_eq!(topology.expected_peers("phb").unwrap(), names(&["shb"]));
    assert_eq!(topology.connections(), vec![("phb".into(), "shb".into())]);
}

#[test]
fn gryphon_figure_3_has_ten_brokers_in_eight_cells_with_full_bundles() {
    let topology = example_file("gryphon-fig3.toml");
    assert_eq!(topology.brokers().len(), 10);
    assert_eq!(topology.cells().len(), 8);
    assert_eq!(topology.cells()[&CellName::new("IB1")], vec![BrokerName::new("b1"), BrokerName::new("b2")]);
    assert_eq!(topology.expected_peers("b1").unwrap(), names(&["b2", "p1", "s1", "s2"]));
    assert_eq!(topology.expected_peers("p1").unwrap(), names(&["b1", "b2", "b3", "b4"]));
    assert_eq!(topology.expected_peers("s4").unwrap(), names(&["b3", "b4"]));
    let bundles = topology.bundles();
    assert_eq!(bundles[0].links, vec![("p1".into(), "b1".into()), ("p1".into(), "b2".into())]);
    // 2 intra-cell links + 2 + 2 (PHB bundles) + 2 + 2 (IB1 bundles) + 3 * 2 (IB2 bundles).
    assert_eq!(topology.connections().len(), 2 + 4 + 4 + 6);
}

#[test]
fn narada_sparse_puts_nine_brokers_between_publisher_and_n10() {
    let topology = example_file("narada-22-sparse.toml");
    assert_eq!(topology.brokers().len(), 22);
    assert_eq!(topology.cell_links().len(), 23);
    assert_eq!(topology.broker("n7").unwrap().address.as_deref(), Some("SC2.B.1"));
    assert_eq!(brokers_on_path(&topology, "n22", "n10"), 9);
    assert_eq!(brokers_on_path(&topology, "n22", "n7"), 6);
    assert_eq!(brokers_on_path(&topology, "n22", "n1"), 2);
    assert_eq!(brokers_on_path(&topology, "n22", "n22"), 1);
}

#[test]
fn narada_dense_shortens_the_paths_to_n10_and_n7_to_four_brokers() {
    let topology = example_file("narada-22-dense.toml");
    assert_eq!(topology.cell_links().len(), 25);
    assert_eq!(brokers_on_path(&topology, "n22", "n10"), 4);
    assert_eq!(brokers_on_path(&topology, "n22", "n7"), 4);
    assert_eq!(topology.expected_peers("n8").unwrap(), names(&["n1", "n7", "n9", "n10"]));
}

#[test]
fn router_settings_carry_the_cell_of_the_file() {
    let topology = example_file("gryphon-fig3.toml");
    let settings = topology.router_settings("b3", Incarnation(4), LivenessSettings::default()).unwrap();
    assert_eq!(settings.cell.as_str(), "IB2");
    assert_eq!(settings.incarnation, Incarnation(4));
}

#[test]
fn an_unknown_broker_name_is_refused_with_the_names_there_are() {
    let topology = example_file("two-brokers.toml");
    let error = topology.expected_peers("nope").unwrap_err();
    assert_eq!(error.to_string(), "no broker named \"nope\" in topology \"two-brokers\" (brokers: phb, shb)");
}

#[test]
fn unknown_keys_are_refused_with_their_line() {
    let error = Topology::parse("name = \"x\"\n[[broker]]\nname = \"a\"\nadress = \"A.1\"\n").unwrap_err();
    let TopologyError::Syntax { message } = error else { panic!("expected a syntax error") };
    assert!(message.contains("adress") && message.contains("line 4"), "{message}");
}

#[test]
fn a_link_needs_exactly_two_cells() {
    let error = Topology::parse("name = \"x\"\n[[broker]]\nname = \"a\"\n[[link]]\nbetween = [\"a\"]\n").unwrap_err();
    assert!(matches!(error, TopologyError::Syntax { .. }), "{error}");
}

#[test]
fn a_missing_name_is_a_syntax_error() {
    let error = Topology::parse("[[broker]]\nname = \"a\"\n").unwrap_err();
    assert!(error.to_string().contains("name"), "{error}");
}

#[test]
fn every_problem_is_reported_at_once_with_its_key_path() {
    let text = r#"
name = "broken"
[[broker]]
name = "a"
[[broker]]
name = "a"
[[broker]]
name = "b c"
[[broker]]
name = "d"
cell = "D"
[[broker]]
name = "e"
[[link]]
between = ["a", "ghost"]
[[link]]
between = ["D", "D"]
[[link]]
between = ["a", "D"]
[[link]]
between = ["D", "a"]
"#;
    let found = problems(text);
    assert_eq!(
        found,
        vec![
            TopologyProblem::DuplicateBroker { path: "broker[1]".into(), name: "a".into(), first: 0 },
            TopologyProblem::BadName {
                path: "broker[2].name".into(),
                value: "b c".into(),
                reason: "must not contain spaces or control characters"
            },
            TopologyProblem::UnknownCell { path: "link[0].between[1]".into(), name: "ghost".into() },
            TopologyProblem::SelfLink { path: "link[1]".into(), cell: "D".into() },
            TopologyProblem::DuplicateLink { path: "link[3]".into(), a: "D".into(), b: "a".into(), first: 2 },
            TopologyProblem::Disconnected {
                groups: vec![vec!["D".into(), "a".into()], vec!["b c".into()], vec!["e".into()]]
            },
        ]
    );
    let message = Topology::parse(text).unwrap_err().to_string();
    assert!(message.starts_with("topology \"broken\" is invalid:\n  - broker[1]: broker name \"a\" is already used by broker[0]\n  - broker[2].name"), "{message}");
    assert!(message.contains("link[0].between[1] = \"ghost\": no cell or broker has this name"), "{message}");
    assert!(message.contains("3 disconnected groups: {D, a} {b c} {e}"), "{message}");
}

#[test]
fn a_broker_named_like_another_cell_is_ambiguous() {
    let text = "name = \"x\"\n[[broker]]\nname = \"IB1\"\ncell = \"P\"\n[[broker]]\nname = \"b1\"\ncell = \"IB1\"\n[[link]]\nbetween = [\"P\", \"IB1\"]\n";
    assert_eq!(
        problems(text),
        vec![TopologyProblem::NameIsForeignCell { path: "broker[0]".into(), name: "IB1".into(), cell: "P".into() }]
    );
}

#[test]
fn a_file_without_brokers_is_refused() {
    assert_eq!(problems("name = \"empty\"\n"), vec![TopologyProblem::NoBrokers]);
}

#[test]
fn a_single_broker_without_links_is_a_connected_network() {
    let topology = Topology::parse("name = \"solo\"\n[[broker]]\nname = \"a\"\n").unwrap();
    assert!(topology.expected_peers("a").unwrap().is_empty());
}

const SETTINGS: &str = r#"
name = "settings"
[[broker]]
name = "p1"
cell = "P"
[[broker]]
name = "p2"
cell = "P"
storage = { replicas = 0 }
[[broker]]
name = "s1"
cell = "S"
[[broker]]
name = "s2"
cell = "S"
[broker.durable]
store = "publisher"
[[link]]
between = ["P", "S"]
[cells.P.storage]
replicas = 2
[cells.S.durable]
store = "cell"
"#;

#[test]
fn a_broker_s_settings_are_its_cell_s_under_its_own() {
    let topology = Topology::parse(SETTINGS).unwrap();
    let settings = |name: &str| topology.broker(name).unwrap().settings.clone();
    assert_eq!(settings("p1"), BrokerSettings { replicas: Some(2), durable_store: None });
    assert_eq!(settings("p2"), BrokerSettings { replicas: Some(0), durable_store: None });
    assert_eq!(settings("s1"), BrokerSettings { replicas: None, durable_store: Some("cell".into()) });
    assert_eq!(settings("s2"), BrokerSettings { replicas: None, durable_store: Some("publisher".into()) });
    assert!(example_file("narada-22-sparse.toml").brokers().iter().all(|b| b.settings.is_empty()));
}

#[test]
fn settings_a_broker_would_refuse_are_problems_of_the_file() {
    let unknown_cell = format!("{SETTINGS}[cells.Q.storage]\nreplicas = 3\n");
    assert_eq!(
        problems(&unknown_cell),
        vec![TopologyProblem::UnknownCell { path: "cells.Q".into(), name: "Q".into() }]
    );
    let bad = SETTINGS.replace("replicas = 2", "replicas = 3").replace("store = \"publisher\"", "store = \"disk\"");
    let message = Topology::parse(&bad).unwrap_err().to_string();
    assert!(message.contains("broker[0] (p1): storage.replicas = 3: cell \"P\" has 2 brokers"), "{message}");
    assert!(
        message.contains("broker[3] (s2): durable.store = \"disk\": neither \"publisher\" nor \"cell\""),
        "{message}"
    );
    let alone = "name = \"x\"\n[[broker]]\nname = \"a\"\ndurable = { store = \"cell\" }\n";
    assert!(Topology::parse(alone).unwrap_err().to_string().contains("has no other broker"));
    let one = SETTINGS.replace("[cells.S.durable]", "[cells.S.storage]\nreplicas = 1\n[cells.S.durable]");
    assert!(Topology::parse(&one).unwrap_err().to_string().contains("storage.replicas = 1 keeps the copy"));
    let mixed = SETTINGS.replace("replicas = 0", "replicas = 1");
    let message = Topology::parse(&mixed).unwrap_err().to_string();
    assert!(message.contains("broker[1] (p2): storage.replicas = 1: it takes no part in its mates' replica groups, which p1 counts it in"), "{message}");
    for typo in ["[cells.P.storage]\nreplica = 2\n", "[cells.P]\nfsync = \"never\"\n"] {
        let text = SETTINGS.replace("[cells.P.storage]\nreplicas = 2\n", typo);
        assert!(matches!(Topology::parse(&text), Err(TopologyError::Syntax { .. })), "{typo}");
    }
}

#[test]
fn the_persistent_experiment_s_file_keeps_the_seed_s_paths_with_two_cells_of_three() {
    let topology = example_file("narada-22-replicated.toml");
    assert_eq!(topology.brokers().len(), 27);
    assert_eq!(topology.cells()[&CellName::new("C22")], vec![BrokerName::new("n22"), "n22b".into(), "n22c".into()]);
    assert_eq!(topology.cells()[&CellName::new("C10")], vec![BrokerName::new("n10"), "n10b".into(), "n10c".into()]);
    let settings = |name: &str| topology.broker(name).unwrap().settings.clone();
    assert_eq!(settings("n22"), BrokerSettings { replicas: Some(3), durable_store: None });
    assert_eq!(settings("n22c").replicas, Some(3));
    assert!(settings("n22u").is_empty());
    assert_eq!(settings("n10").durable_store.as_deref(), Some("cell"));
    assert_eq!(settings("n10b").durable_store.as_deref(), Some("publisher"));
    assert!(settings("n7").is_empty());
    assert_eq!(brokers_on_path(&topology, "C22", "C10"), 9);
    assert_eq!(brokers_on_path(&topology, "C22", "n7"), 6);
    assert_eq!(brokers_on_path(&topology, "n22u", "C10"), 9);
    assert_eq!(brokers_on_path(&topology, "n22u", "n7"), 6);
}
