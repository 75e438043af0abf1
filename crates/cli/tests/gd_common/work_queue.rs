//! Guaranteed queue group members as real `tidings sub --queue w --guaranteed --json`
//! processes, and the exactly-once-in-total checks over what they printed, for the work queue
//! tests on one broker, three, and the Gryphon network.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tidings_testkit::{http_get, wait_until, BrokerProcess};

use super::{bin, id};

/// A `sub --queue w --guaranteed --json jobs.>` whose lines go to a file.
pub(crate) struct Member {
    pub(crate) child: Child,
    out: PathBuf,
}

impl Member {
    pub(crate) fn start(b: &BrokerProcess, dir: &Path, name: &str) -> Member {
        Member::start_with(b, dir, name, &[])
    }

    /// [`Member::start`] with `extra` arguments.
    pub(crate) fn start_with(b: &BrokerProcess, dir: &Path, name: &str, extra: &[&str]) -> Member {
        Member::start_at(b, b, dir, name, extra)
    }

    /// A member connected to `b` of the group kept at `home` (which counts every member).
    pub(crate) fn start_at(b: &BrokerProcess, home: &BrokerProcess, dir: &Path, name: &str, extra: &[&str]) -> Member {
        let before = home.metric("tidings_gd_group_members").unwrap();
        let out = dir.join(name);
        let server = b.tcp();
        let child = Command::new(bin())
            .args(["sub", "--server", &server, "--queue", "w", "--guaranteed", "--json", "jobs.>"])
            .args(extra)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        wait_until("the member joins", Duration::from_secs(10), || {
            home.metric("tidings_gd_group_members").unwrap() > before
        });
        Member { child, out }
    }

    /// The whole lines printed so far.
    pub(crate) fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap();
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    pub(crate) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The acknowledged publishes a finished `pub --guaranteed --json` printed.
pub(crate) fn acked(publisher: Child) -> Vec<Value> {
    let out = tidings_testkit::finish_within(publisher, Duration::from_secs(120));
    assert!(out.status.success(), "the publisher failed: {}", String::from_utf8_lossy(&out.stderr));
    BufReader::new(&out.stdout[..]).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect()
}

/// A publish, by its publisher and sequence number.
pub(crate) type Publish = (String, u64);

/// How many times each `(publisher, seq)` was printed by `members`, and how many of those
/// prints were flagged redelivered.
pub(crate) fn tally(members: &[&Member]) -> (BTreeMap<Publish, usize>, BTreeSet<Publish>) {
    let (mut times, mut flagged) = (BTreeMap::new(), BTreeSet::new());
    for line in members.iter().flat_map(|m| m.lines()) {
        assert_eq!(line["missed"], 0, "no gap: {line}");
        *times.entry(id(&line)).or_insert(0) += 1;
        if line["redelivered"] == true {
            flagged.insert(id(&line));
        }
    }
    (times, flagged)
}

/// Waits until `members` printed every acknowledged publish but those in `done` (printed,
/// and so perhaps acknowledged, by a member that died).
pub(crate) fn wait_for_all(members: &[&Member], acked: &[Value], done: &BTreeSet<(String, u64)>) {
    let want: BTreeSet<(String, u64)> = acked.iter().map(id).filter(|key| !done.contains(key)).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (times, _) = tally(members);
        let missing = want.iter().filter(|key| !times.contains_key(*key)).count();
        if missing == 0 {
            return;
        }
        let late = std::time::Instant::now() > deadline;
        assert!(!late, "{missing} of {} acknowledged publishes never reached a live member", want.len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The group's acknowledgement per pubend, from `/state`: its durable record `queue:w`.
pub(crate) fn group_acked(b: &BrokerProcess) -> Vec<u64> {
    let state: Value = serde_json::from_str(&http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    let durables = state["guaranteed"]["durables"].as_array().cloned().unwrap_or_default();
    let group = durables.iter().find(|d| d["name"] == "queue:w").expect("the group is kept as queue:w");
    group["pubends"].as_array().unwrap().iter().map(|p| p["acked"].as_u64().unwrap()).collect()
}

/// Every acknowledged publish reached a live member or was printed by a dead one, none twice
/// by live members, and each lease given back reached a member once, flagged.
pub(crate) fn assert_once_in_total(live: &[&Member], acked: &[Value], dead_had: &BTreeSet<Publish>, redeliveries: f64) {
    wait_for_all(live, acked, dead_had);
    std::thread::sleep(Duration::from_millis(500)); // anything printed twice would show by now
    let (times, flagged) = tally(live);
    let lost: Vec<_> = acked.iter().map(id).filter(|key| !times.contains_key(key) && !dead_had.contains(key)).collect();
    assert!(lost.is_empty(), "{} acknowledged publishes lost, e.g. {:?}", lost.len(), lost.first());
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "printed twice by live members: {twice:?}");
    assert!(redeliveries >= 1.0, "the dead held no lease: the test proved nothing");
    assert_eq!(flagged.len() as f64, redeliveries, "each given-back lease reached a member once, flagged");
    let per_member: Vec<usize> = live.iter().map(|m| m.lines().len()).collect();
    eprintln!("printed per live member {per_member:?}; {} redelivered, flagged", flagged.len());
}
