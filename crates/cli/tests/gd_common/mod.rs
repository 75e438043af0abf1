//! Helpers shared by the guaranteed-delivery process tests: the `tidings` binary, `pub` and
//! `sub --guaranteed --json`, and the exactly-once, in-tick-order check.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test file uses a part

pub(crate) mod fig3;
pub(crate) mod work_queue;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use tidings_testkit::BrokerProcess;

pub(crate) fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

/// A broker on data directory `data` listening for clients on `listen` (a port to restart on,
/// or `127.0.0.1:0`), with `config`.
pub(crate) fn start_on(data: &Path, listen: &str, config: &Path) -> tidings_testkit::BrokerProcess {
    let data = data.display().to_string();
    let config = config.display().to_string();
    let args =
        ["broker", "--listen", listen, "--udp", "off", "--admin", "127.0.0.1:0", "--data", &data, "--config", &config];
    tidings_testkit::BrokerProcess::start_with_args(bin(), &args).unwrap()
}

/// Runs the `tidings` binary with `args`, its output piped. `sub --durable` keeps its
/// checkpoint files under a state directory of this test process, not the user's.
pub(crate) fn spawn(args: &[&str]) -> Child {
    let state = std::env::temp_dir().join(format!("tidings-test-state-{}", std::process::id()));
    Command::new(bin())
        .args(args)
        .env("XDG_STATE_HOME", state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `pub --guaranteed --json` of `count` messages on `topic`.
pub(crate) fn publish(server: &str, topic: &str, count: u64, extra: &[&str]) -> Child {
    let count = count.to_string();
    let mut args = vec!["pub", "--server", server, "--guaranteed", "--json", topic, "x", "--count", count.as_str()];
    args.extend_from_slice(extra);
    spawn(&args)
}

/// `(publisher, seq)` of a line of either command.
pub(crate) fn id(line: &Value) -> (String, u64) {
    let source = line.get("properties").unwrap_or(line);
    (source["publisher"].as_str().unwrap().to_string(), source["seq"].as_u64().unwrap())
}

/// A plain subscriber's lines against the acknowledged publishes.
pub(crate) struct Accounted<'a> {
    /// Publishes it got.
    pub(crate) delivered: usize,
    /// Acknowledged publishes it did not get.
    pub(crate) missed: usize,
    /// Its gap notices.
    pub(crate) gaps: Vec<&'a Value>,
    /// The seqs of those it did not get that no gap notice covers: lost without a word.
    pub(crate) silent: Vec<u64>,
}

pub(crate) fn account<'a>(got: &'a [Value], acked: &[Value]) -> Accounted<'a> {
    let delivered: std::collections::BTreeSet<(String, u64)> =
        got.iter().filter(|line| line.get("gap").is_none()).map(id).collect();
    let gaps: Vec<&Value> = got.iter().filter(|line| line.get("gap").is_some()).collect();
    let in_a_gap = |ack: &Value| {
        gaps.iter().any(|gap| {
            gap["pubend"] == ack["pubend"]
                && (gap["from"].as_u64().unwrap()..=gap["to"].as_u64().unwrap())
                    .contains(&ack["tick"].as_u64().unwrap())
        })
    };
    let silent = acked
        .iter()
        .filter(|ack| !delivered.contains(&id(ack)) && !in_a_gap(ack))
        .map(|ack| ack["seq"].as_u64().unwrap())
        .collect();
    let missed = acked.iter().filter(|ack| !delivered.contains(&id(ack))).count();
    Accounted { delivered: delivered.len(), missed, gaps, silent }
}

/// A subscriber's lines against the acknowledged publishes: the same `(publisher, seq)` set,
/// each once, in tick order, with the acknowledged tick and no gap notice.
pub(crate) fn assert_exactly_once_in_order(got: &[Value], acked: &[&Value]) {
    let mut expected: Vec<&Value> = acked.to_vec();
    expected.sort_by_key(|a| a["tick"].as_u64().unwrap());
    let got_ids: Vec<(String, u64)> = got.iter().map(id).collect();
    let want_ids: Vec<(String, u64)> = expected.iter().map(|a| id(a)).collect();
    if got_ids != want_ids {
        let seqs = |ids: &[(String, u64)]| ids.iter().map(|(_, seq)| *seq).collect::<Vec<u64>>();
        let (got_seqs, want_seqs) = (seqs(&got_ids), seqs(&want_ids));
        let mut missing: Vec<(u64, u64)> = Vec::new();
        for seq in want_seqs.iter().filter(|s| !got_seqs.contains(s)) {
            match missing.last_mut() {
                Some(run) if run.1 + 1 == *seq => run.1 = *seq,
                _ => missing.push((*seq, *seq)),
            }
        }
        let gaps: Vec<&Value> = got.iter().filter(|g| g["missed"] != 0).collect();
        let mut seen = std::collections::BTreeSet::new();
        let repeated: Vec<&(String, u64)> = got_ids.iter().filter(|id| !seen.insert(*id)).collect();
        eprintln!(
            "got {} of {}; missing seqs {missing:?}; repeated {repeated:?}; gap notices {gaps:?}",
            got.len(),
            acked.len()
        );
    }
    assert_eq!(got_ids, want_ids, "deliveries differ from the acknowledged publishes (order, loss or duplicates)");
    for (g, a) in got.iter().zip(&expected) {
        assert_eq!(g["tick"], a["tick"]);
        assert_eq!(g["pubend"], a["pubend"]);
        assert_eq!(g["missed"], 0, "a gap was notified: {g}");
    }
}

/// A broker's fixed setup: its name, data directory and config file, so it can be restarted
/// on the same (or an empty) data directory with the same ports.
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) data: PathBuf,
    pub(crate) config: PathBuf,
    pub(crate) key: PathBuf,
}

impl Node {
    pub(crate) fn new(scratch: &Path, name: &str) -> Node {
        Node::in_cell(scratch, name, name)
    }

    pub(crate) fn in_cell(scratch: &Path, name: &str, cell: &str) -> Node {
        Node::configured(scratch, name, cell, "")
    }

    /// With `extra` lines in the `[cluster]` table, then any other tables.
    pub(crate) fn configured(scratch: &Path, name: &str, cell: &str, extra: &str) -> Node {
        let config = scratch.join(format!("{name}.toml"));
        let text =
            format!("[cluster]\ncell = \"{cell}\"\nheartbeat_interval = \"100ms\"\nmissed_heartbeats = 5\n{extra}");
        std::fs::write(&config, text).unwrap();
        let key = scratch.join("cluster.key");
        tidings_testkit::write_private(&key, tidings_testkit::test_key_text()).unwrap();
        Node { name: name.into(), data: scratch.join(name), config, key }
    }

    /// Starts the broker on `listen` (client) and `cluster` (link listener), linking to `peers`.
    pub(crate) fn start(&self, listen: &str, cluster: &str, peers: &[String]) -> BrokerProcess {
        let (data, config, key) =
            (self.data.display().to_string(), self.config.display().to_string(), self.key.display().to_string());
        let mut args = vec!["broker", "--name", &self.name, "--listen", listen, "--udp", "off"];
        args.extend(["--admin", "127.0.0.1:0", "--data", &data, "--config", &config, "--cluster-key", &key]);
        args.extend(["--cluster-listen", cluster]);
        for peer in peers {
            args.extend(["--peer", peer.as_str()]);
        }
        BrokerProcess::start_with_args(bin(), &args).unwrap()
    }
}

pub(crate) fn cluster_addr(b: &BrokerProcess) -> String {
    b.ready.cluster.unwrap().to_string()
}

pub(crate) fn links_up(b: &BrokerProcess, n: f64) -> impl Fn() -> bool + '_ {
    move || b.metric("tidings_links_up").unwrap_or(-1.0) == n
}
