//! Helpers shared by the replication process tests (`replica.rs`, `takeover.rs`): a broker of a
//! cell on fixed ports, its links, and its replica group as `/state` shows it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;
use tidings_testkit::BrokerProcess;

use crate::gd_common::bin;

/// One broker: name, cell, data directory, config; started on fixed ports so a restart keeps
/// its address for the mates that dial it.
pub(crate) struct Node {
    pub(crate) name: &'static str,
    pub(crate) data: PathBuf,
    config: PathBuf,
    key: PathBuf,
}

impl Node {
    pub(crate) fn new(scratch: &Path, name: &'static str, cell: &str) -> Node {
        Node::with_config(scratch, name, cell, "")
    }

    /// As [`Node::new`], with `extra` appended to its config (whole TOML sections).
    pub(crate) fn with_config(scratch: &Path, name: &'static str, cell: &str, extra: &str) -> Node {
        let config = scratch.join(format!("{name}.toml"));
        let text =
            format!("[cluster]\ncell = \"{cell}\"\nheartbeat_interval = \"100ms\"\nmissed_heartbeats = 5\n{extra}");
        std::fs::write(&config, text).unwrap();
        let key = scratch.join("cluster.key");
        tidings_testkit::write_private(&key, tidings_testkit::test_key_text()).unwrap();
        Node { name, data: scratch.join(name), config, key }
    }

    pub(crate) fn start(&self, listen: &str, cluster: &str, peers: &[String]) -> BrokerProcess {
        let (data, config, key) =
            (self.data.display().to_string(), self.config.display().to_string(), self.key.display().to_string());
        let mut args = vec!["broker", "--name", self.name, "--listen", listen, "--udp", "off"];
        args.extend(["--admin", "127.0.0.1:0", "--data", &data, "--config", &config, "--cluster-key", &key]);
        args.extend(["--cluster-listen", cluster]);
        for peer in peers {
            args.extend(["--peer", peer.as_str()]);
        }
        BrokerProcess::start_with_args(bin(), &args).unwrap()
    }

    /// Starts again on the addresses `old` had (after `old` was killed).
    pub(crate) fn restart(&self, old: &BrokerProcess, peers: &[String]) -> BrokerProcess {
        self.start(&old.tcp(), &cluster(old), peers)
    }
}

/// The publishers' cell of `replicated-cell.toml` under `scratch`: p1, p2 and p3 in cell PUB,
/// linked to each other, and s1 in cell S linked to all three, once every link is up.
pub(crate) fn publishers_cell(scratch: &Path) -> ([Node; 3], [BrokerProcess; 3], BrokerProcess) {
    publishers_cell_with(scratch, "")
}

/// As [`publishers_cell`], with `extra` appended to the config of p1, p2 and p3.
pub(crate) fn publishers_cell_with(scratch: &Path, extra: &str) -> ([Node; 3], [BrokerProcess; 3], BrokerProcess) {
    let node = |name| Node::with_config(scratch, name, "PUB", extra);
    let nodes = [node("p1"), node("p2"), node("p3")];
    let any = "127.0.0.1:0";
    let b3 = nodes[2].start(any, any, &[]);
    let b2 = nodes[1].start(any, any, &[cluster(&b3)]);
    let b1 = nodes[0].start(any, any, &[cluster(&b2), cluster(&b3)]);
    let brokers = [b1, b2, b3];
    let peers: Vec<String> = brokers.iter().map(cluster).collect();
    let s1 = Node::new(scratch, "s1", "S").start(any, any, &peers);
    tidings_testkit::wait_until("the cell and s1 link up", Duration::from_secs(20), || {
        brokers.iter().all(|b| links(b) == 3.0) && links(&s1) == 3.0
    });
    (nodes, brokers, s1)
}

/// Waits until `check` holds, failing the test after `timeout`.
pub(crate) fn wait_for(what: &str, timeout: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The acknowledged lines of a `pub --guaranteed --json` run that must acknowledge all.
pub(crate) fn acked(child: Child, count: usize) -> Vec<Value> {
    let out = tidings_testkit::finish_within(child, Duration::from_secs(60));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(out.status.success(), "not every publish was acknowledged: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(lines.len(), count);
    lines
}

/// A guaranteed subscriber on `g.>` at `b` for `count` messages, once its subscription is
/// confirmed.
pub(crate) fn subscribe(b: &BrokerProcess, count: usize) -> Lines {
    let (server, count) = (b.tcp(), count.to_string());
    let args = ["sub", "--server", &server, "--guaranteed", "--json", "g.>", "--count", &count];
    let sub = Lines::follow(crate::gd_common::spawn(&args));
    wait_for("the subscription is confirmed", Duration::from_secs(20), || {
        b.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 1.0
    });
    sub
}

pub(crate) fn cluster(b: &BrokerProcess) -> String {
    b.ready.cluster.unwrap().to_string()
}

pub(crate) fn links(b: &BrokerProcess) -> f64 {
    b.metric("tidings_links_up").unwrap_or(-1.0)
}

/// The one replica group `b` is in, from its `/state` (null while it is in none).
pub(crate) fn replica_group(b: &BrokerProcess) -> Value {
    let state: Value =
        serde_json::from_str(&tidings_testkit::http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    state["guaranteed"]["replicas"][0].clone()
}

/// A number of `b`'s replica group as `/state` shows it (0 while it is in none).
pub(crate) fn group_number(b: &BrokerProcess, field: &str) -> u64 {
    replica_group(b)[field].as_u64().unwrap_or(0)
}

/// Whether `b`'s `/state` shows `pubend` (by its hex id) hosted there; `None` without a stream.
pub(crate) fn hosted(b: &BrokerProcess, pubend: &str) -> Option<bool> {
    let state: Value =
        serde_json::from_str(&tidings_testkit::http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    let pubends = state["guaranteed"]["pubends"].as_array()?;
    pubends.iter().find(|p| p["pubend"] == pubend).and_then(|p| p["hosted"].as_bool())
}

/// Whether `b`'s replica is past its wipe fences and applied everything `leader` committed.
pub(crate) fn caught_up(b: &BrokerProcess, leader: &BrokerProcess) -> bool {
    let (mine, theirs) = (replica_group(b), replica_group(leader));
    mine["fenced"] == false
        && mine["applied"].as_u64() >= theirs["commit"].as_u64()
        && theirs["commit"].as_u64() > Some(0)
}

/// The JSON lines a running `pub` or `sub` prints, read as they come, each with when it was
/// read: a test can wait for a subscriber's progress, or time a publisher's acknowledgements.
pub(crate) struct Lines {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<(std::time::Instant, Value)>>>,
    /// Its standard error (connection changes), each line with when it was read.
    notes: std::sync::Arc<std::sync::Mutex<Vec<(std::time::Instant, String)>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Lines {
    /// Reads `child`'s standard output and standard error (both piped) line by line until
    /// they close.
    pub(crate) fn follow(mut child: std::process::Child) -> Lines {
        use std::io::BufRead as _;
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let notes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&lines);
        let out = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let value: Value = serde_json::from_str(&line).unwrap();
                sink.lock().unwrap().push((std::time::Instant::now(), value));
            }
        });
        let sink = std::sync::Arc::clone(&notes);
        let err = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push((std::time::Instant::now(), line));
            }
        });
        Lines { child, lines, notes, readers: vec![out, err] }
    }

    /// The standard error lines read so far, with when each was read.
    pub(crate) fn notes(&self) -> Vec<(std::time::Instant, String)> {
        self.notes.lock().unwrap().clone()
    }

    /// How many lines were read so far.
    pub(crate) fn count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// The lines read so far, with when each was read.
    pub(crate) fn timed(&self) -> Vec<(std::time::Instant, Value)> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits for the command to exit (killing it after `timeout`): every line, and its status.
    pub(crate) fn finish(mut self, timeout: std::time::Duration) -> (Vec<Value>, std::process::ExitStatus, String) {
        let pid = self.child.id();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&done);
        let killer = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + timeout;
            while !flag.load(std::sync::atomic::Ordering::SeqCst) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if !flag.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = tidings_testkit::send_signal(pid, tidings_testkit::Signal::Kill);
            }
        });
        let status = self.child.wait().unwrap();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        killer.join().unwrap();
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        let text = self.notes().into_iter().map(|(_, line)| line + "\n").collect();
        let lines = self.lines.lock().unwrap().iter().map(|(_, v)| v.clone()).collect();
        (lines, status, text)
    }
}

impl Drop for Lines {
    /// A command still running when its test ends (a subscriber without `--count`) is killed.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
