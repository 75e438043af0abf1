//! The clients of the guaranteed-delivery runs (the failures experiment and the nemesis) are the
//! command-line tools, `tidings pub --guaranteed --json` and `tidings sub --guaranteed --json`,
//! each writing its JSON lines to a file: the acknowledged
//! `(publisher, seq, tick)` and the deliveries (with `sent_us`, `received_us`) are then the
//! same contract an outside checker would read, and a crash of the publisher's broker is
//! survived by the client's own reconnection, not by anything of the bench.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::Value;

use crate::metrics::{self, GD_SUBSCRIPTIONS_CONFIRMED};

/// A client process whose stdout goes to `out`; killed on drop if still running.
pub struct Tool {
    /// What it is, for errors.
    pub name: String,
    /// Its JSON lines.
    pub out: PathBuf,
    child: Child,
}

impl Tool {
    /// Starts `program ARGS` with its stdout in `dir/NAME.jsonl` and its stderr in
    /// `dir/NAME.log`.
    pub fn spawn(program: &Path, dir: &Path, name: &str, args: &[String]) -> anyhow::Result<Tool> {
        let out = dir.join(format!("{name}.jsonl"));
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(dir.join(format!("{name}.log")))?)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Tool { name: name.to_string(), out, child })
    }

    /// Waits until it exits or `deadline` passes (then kills it); its status if it exited.
    pub async fn finish(&mut self, deadline: Instant) -> anyhow::Result<Option<ExitStatus>> {
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its process id (to read its CPU time).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its JSON lines so far (a line cut short by a kill is skipped).
    pub fn lines(&self) -> anyhow::Result<Vec<Value>> {
        let text = std::fs::read_to_string(&self.out)?;
        Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
    }
}

/// Waits for the publishers (each until `drain` from now) and then the subscribers (each for
/// `drain` more): the publishers that did not exit successfully, and the subscribers still
/// running when stopped (killed: they had not received their count).
pub async fn finish_all(
    pubs: &mut [Tool],
    subs: &mut [Tool],
    drain: Duration,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let deadline = Instant::now() + drain;
    let mut failed = Vec::new();
    for t in pubs.iter_mut() {
        if !t.finish(deadline).await?.is_some_and(|s| s.success()) {
            failed.push(t.name.clone());
        }
    }
    let mut unfinished = Vec::new();
    for t in subs.iter_mut() {
        if t.finish(Instant::now().max(deadline) + drain).await?.is_none() {
            unfinished.push(t.name.clone());
        }
    }
    Ok((failed, unfinished))
}

impl Drop for Tool {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `sub --guaranteed --json PATTERN --count N` at `server`, returned once its broker (admin
/// address `admin`) counts the subscription confirmed: it then gets every later publish.
pub async fn subscribe(
    tidings: &Path,
    dir: &Path,
    name: &str,
    (server, admin): (&str, &str),
    pattern: &str,
    count: u64,
) -> anyhow::Result<Tool> {
    let args = ["--guaranteed", "--json", pattern, "--count", &count.to_string()].map(String::from);
    subscribe_with(tidings, dir, name, (server, admin), &args).await
}

/// `sub --server SERVER ARGS` (a guaranteed or durable subscription), returned once its broker
/// (admin address `admin`) counts one more subscription confirmed.
pub async fn subscribe_with(
    tidings: &Path,
    dir: &Path,
    name: &str,
    (server, admin): (&str, &str),
    args: &[String],
) -> anyhow::Result<Tool> {
    let confirmed = || metrics::scrape(admin).map(|s| s.sum(GD_SUBSCRIPTIONS_CONFIRMED)).unwrap_or(0.0);
    let before = confirmed();
    let args: Vec<String> =
        ["sub", "--server", server].map(String::from).into_iter().chain(args.iter().cloned()).collect();
    let tool = Tool::spawn(tidings, dir, name, &args)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while confirmed() <= before {
        anyhow::ensure!(Instant::now() < deadline, "the guaranteed subscription of {name} was not confirmed in 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(tool)
}

/// `pub --guaranteed --json --pubend PUBEND TOPIC --count N --rate R --size S` at `server`.
pub fn publish(
    tidings: &Path,
    dir: &Path,
    server: &str,
    pubend: &str,
    (count, rate, size): (u64, f64, usize),
) -> anyhow::Result<Tool> {
    let topic = format!("failures.{pubend}");
    let args = [
        "pub",
        "--server",
        server,
        "--guaranteed",
        "--json",
        "--pubend",
        pubend,
        &topic,
        "x",
        "--count",
        &count.to_string(),
        "--rate",
        &rate.to_string(),
        "--size",
        &size.to_string(),
    ];
    Tool::spawn(tidings, dir, &format!("pub-{pubend}"), &args.map(String::from))
}
