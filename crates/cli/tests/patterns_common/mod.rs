//! Helpers shared by the messaging-pattern process tests (request/reply, retained values): the
//! `tidings` binary, commands started once their subscription is active, linked brokers.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test file uses a part

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use tidings_testkit::BrokerProcess;

pub(crate) fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

/// Runs `tidings ARGS` to its end (at most 20 s).
pub(crate) fn tidings(args: &[&str]) -> Output {
    let child = Command::new(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    tidings_testkit::finish_within(child, Duration::from_secs(20))
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A command started by [`start`]: killed if the test ends (or fails) before it is waited for.
pub(crate) struct Running(Option<Child>);

impl Running {
    /// Waits for the command to exit by itself (at most 20 s).
    pub(crate) fn finish(mut self) -> Output {
        let child = self.0.take().expect("a running command");
        tidings_testkit::finish_within(child, Duration::from_secs(20))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `tidings ARGS` (a `sub` or `reply`) and returns once its subscription is active at
/// `at`. Its stdout is piped if `keep_output`, else discarded: a pipe nobody reads stops a
/// command after 64 KiB of lines.
pub(crate) fn start(at: &BrokerProcess, args: &[&str], keep_output: bool) -> Running {
    let before = at.metric("tidings_subscriptions").unwrap();
    let stdout = if keep_output { Stdio::piped() } else { Stdio::null() };
    let child = Running(Some(Command::new(bin()).args(args).stdout(stdout).stderr(Stdio::inherit()).spawn().unwrap()));
    tidings_testkit::wait_until("the command subscribes", Duration::from_secs(10), || {
        at.metric("tidings_subscriptions").unwrap() > before
    });
    child
}

/// Waits for a command started with output kept and parses its JSON lines.
pub(crate) fn json_lines(child: Running) -> Vec<serde_json::Value> {
    let out = child.finish();
    assert!(out.status.success(), "the command failed: {}", text(&out.stderr));
    text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

/// Brokers named `a`, `b`, ... linked in a chain with `--peer`, returned once every link is up.
pub(crate) fn chain(n: usize) -> Vec<BrokerProcess> {
    chain_with(n, &[])
}

/// As [`chain`], each broker also given `extra` arguments (a `--config`, say).
pub(crate) fn chain_with(n: usize, extra: &[&str]) -> Vec<BrokerProcess> {
    chain_each(n, |_| extra.iter().map(|arg| arg.to_string()).collect())
}

/// As [`chain`], broker `i` also given the arguments `extra(i)`: a test whose brokers differ
/// (one with a small subscriber queue, its neighbour with the default) says so per broker.
pub(crate) fn chain_each(n: usize, extra: impl Fn(usize) -> Vec<String>) -> Vec<BrokerProcess> {
    let mut brokers: Vec<BrokerProcess> = Vec::new();
    for i in 0..n {
        let name = ((b'a' + i as u8) as char).to_string();
        let mut args = vec!["--name".to_string(), name, "--cluster-listen".into(), "127.0.0.1:0".into()];
        args.extend(extra(i));
        if let Some(previous) = brokers.last() {
            args.extend(["--peer".to_string(), previous.ready.cluster.unwrap().to_string()]);
        }
        brokers.push(BrokerProcess::start(bin(), &args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap());
    }
    let links = |p: &BrokerProcess| p.metric("tidings_links_up").unwrap_or(0.0);
    tidings_testkit::wait_until("the chain links", Duration::from_secs(20), || {
        brokers.iter().enumerate().all(|(i, b)| links(b) == [i > 0, i + 1 < n].iter().filter(|x| **x).count() as f64)
    });
    brokers
}

/// Whether `mosquitto_sub` and `mosquitto_pub` can run here; says why not otherwise. CI installs
/// them and sets `TIDINGS_REQUIRE_MQTT_CLIENTS=1`, so there a missing client fails the test
/// instead of skipping it.
pub(crate) fn mosquitto_present() -> bool {
    let present = ["mosquitto_sub", "mosquitto_pub"]
        .iter()
        .all(|tool| Command::new(tool).arg("--help").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok());
    if !present && std::env::var_os("TIDINGS_REQUIRE_MQTT_CLIENTS").is_some() {
        panic!("TIDINGS_REQUIRE_MQTT_CLIENTS is set but mosquitto_sub/mosquitto_pub cannot run");
    }
    if !present {
        eprintln!("SKIPPED: mosquitto_sub/mosquitto_pub not found (install Debian's mosquitto-clients)");
    }
    present
}

/// Runs `mosquitto_pub` or `mosquitto_sub` (`tool`) against 127.0.0.1:`port` to its end (at most
/// 20 s).
pub(crate) fn mosquitto(tool: &str, port: &str, args: &[&str]) -> Output {
    let child = Command::new(tool)
        .args(["-h", "127.0.0.1", "-p", port])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tidings_testkit::finish_within(child, Duration::from_secs(20))
}

/// The (topic, payload) of `sub --json` lines that must all be retained values, sorted.
pub(crate) fn retained_values(lines: &[serde_json::Value]) -> Vec<(String, String)> {
    let mut kept: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["retained"], true, "{l}");
            (l["topic"].as_str().unwrap().into(), l["payload"].as_str().unwrap().into())
        })
        .collect();
    kept.sort();
    kept
}
