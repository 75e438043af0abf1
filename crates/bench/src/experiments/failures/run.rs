//! One run of `failures`: the network up with fault points and the seed's liveness profile
//! (and each pubend's log replicated in the publishers' cell, unless unreplicated), two
//! guaranteed subscribers, four guaranteed publishers given every broker of their cell, the
//! metrics sampled while the fault schedule runs, then everything read back from the tools'
//! files and the fault log.

use std::path::Path;
use std::time::Duration;

use tidings_client::now_us;

use super::faults::{self, Window};
use super::recovery::{recovery, Recovery};
use super::sampler::{Sample, Sampler};
use super::series::{self, Delivery, Series};
use super::verify::{verify, Verdict};
use super::Params;
use crate::network::Network;
use crate::suite::Context;
use crate::tools::{self, Tool};

/// What a run left behind.
pub(super) struct Run {
    /// When publishing began (Unix µs).
    pub t0_us: u64,
    /// The binned series.
    pub series: Series,
    /// The faults, as the fault log has them.
    pub windows: Vec<Window>,
    /// Per subscriber: its deliveries and its verdict.
    pub subscribers: Vec<(String, Vec<Delivery>, Verdict)>,
    /// Publishes sent and acknowledged, and publishers that exited with an error.
    pub published: (u64, usize, Vec<String>),
    /// Subscribers that did not get their count before the deadline (killed).
    pub unfinished: Vec<String>,
    /// Every acknowledgement: the publisher and when its client took it (Unix µs).
    pub acks: Vec<(String, u64)>,
}

/// The publisher and acknowledgement time of each acknowledgement line (`pub --json`'s and
/// the peer harness's `jspub`'s alike); a line without them is left out.
pub(super) fn acks(lines: &[serde_json::Value]) -> Vec<(String, u64)> {
    lines.iter().filter_map(|l| Some((l["publisher"].as_str()?.to_string(), l["acked_us"].as_u64()?))).collect()
}

/// Starts the network and runs the schedule; the logs are kept in `logs`.
pub(super) async fn run(ctx: &Context, p: &Params, logs: &Path) -> anyhow::Result<Run> {
    let dir = ctx.scratch("failures")?;
    let config = dir.join("liveness.toml");
    let storage = p.replicas.map(|n| format!("\n[storage]\nreplicas = {n}\n")).unwrap_or_default();
    std::fs::write(&config, format!("[guaranteed]\nliveness = \"{}\"\n{storage}", p.liveness))?;
    let net_dir = dir.join("net");
    std::fs::create_dir_all(&net_dir)?;
    let extra = ["--faults", "--", "--config"].map(String::from).into_iter().chain([config.display().to_string()]);
    let file = ctx.topologies.join(&p.topology);
    let net =
        Network::up_with(&ctx.tidings, &file, &net_dir, Duration::from_secs(90), &extra.collect::<Vec<_>>()).await?;
    ctx.step("network up");
    let admin = |name: &str| net.broker(name)?.admin_addr();
    let per_publisher = (p.rate * p.schedule().as_secs_f64()).round() as u64;
    let total = per_publisher * p.publishers as u64;
    let mut subs = Vec::new();
    for s in &p.subscribers {
        let server = (net.broker(s)?.tcp.as_str(), admin(s)?);
        subs.push(tools::subscribe(&ctx.tidings, &dir, s, (server.0, &server.1), "failures.>", total).await?);
    }
    let watched = p.watched.iter().map(|b| Ok((b.clone(), admin(b)?))).collect::<anyhow::Result<Vec<_>>>()?;
    let sampler = Sampler::start(watched, p.bin);
    let t0_us = now_us();
    // Every broker of the publishers' cell, theirs first: when it crashes they move on to a mate.
    let cell = p.cell.iter().map(|b| Ok(net.broker(b)?.tcp.clone())).collect::<anyhow::Result<Vec<_>>>()?;
    let servers = cell.join(",");
    let mut pubs = (1..=p.publishers)
        .map(|i| tools::publish(&ctx.tidings, &dir, &servers, &format!("f{i}"), (per_publisher, p.rate, p.size)))
        .collect::<anyhow::Result<Vec<Tool>>>()?;
    let (tidings, fault_dir, params) = (ctx.tidings.clone(), net.dir().to_path_buf(), p.clone());
    let injected = tokio::task::spawn_blocking(move || faults::inject(&tidings, &fault_dir, &params)).await?;
    ctx.step("faults injected");
    let (failed_publishers, unfinished) = tools::finish_all(&mut pubs, &mut subs, p.drain).await?;
    let end_us = now_us();
    let samples: Vec<(String, Vec<Sample>)> = sampler.finish();
    injected?;
    let windows = faults::windows(&std::fs::read_to_string(net.dir().join("faults.jsonl")).unwrap_or_default())?;
    let ends = (total, failed_publishers, unfinished);
    let run = Run::gather((&pubs, &subs, p.subscribers.clone()), (t0_us, end_us, p.bin), &samples, windows, ends);
    keep_logs(logs, &net_dir, &dir);
    run
}

impl Run {
    /// What the clients of a run wrote, tidings' or NATS's alike: the publishers'
    /// acknowledgements, each subscriber (named by `names`) verified against them, and the
    /// series binned from `t0_us` to `end_us` with the brokers' `samples`; `ends` are the
    /// publishes sent, the publishers that failed and the subscribers that did not finish.
    pub(super) fn gather(
        (pubs, subs, names): (&[Tool], &[Tool], Vec<String>),
        (t0_us, end_us, bin): (u64, u64, Duration),
        samples: &[(String, Vec<Sample>)],
        windows: Vec<Window>,
        (sent, failed, unfinished): (u64, Vec<String>, Vec<String>),
    ) -> anyhow::Result<Run> {
        let mut acked = Vec::new();
        for t in pubs {
            acked.extend(t.lines()?);
        }
        let mut subscribers = Vec::new();
        for (name, t) in names.into_iter().zip(subs) {
            let lines = t.lines()?;
            subscribers.push((name, series::deliveries(&lines), verify(&acked, &lines)?));
        }
        let binned: Vec<(String, Vec<Delivery>)> = subscribers.iter().map(|(n, d, _)| (n.clone(), d.clone())).collect();
        let acks = acks(&acked);
        let acked_us: Vec<u64> = acks.iter().map(|a| a.1).collect();
        let series = series::bin((t0_us, end_us, bin.as_micros() as u64), &binned, samples, &windows, &acked_us);
        let published = (sent, acked.len(), failed);
        Ok(Run { t0_us, series, windows, subscribers, published, unfinished, acks })
    }
}

impl Run {
    /// Where fault `k`'s aftermath ends (Unix ms): the next fault's stall, or the end of the run.
    pub(super) fn until_ms(&self, p: &Params, k: usize) -> u64 {
        let end_ms = self.t0_us / 1000 + self.series.t_s.len() as u64 * p.bin.as_millis() as u64;
        self.windows.get(k + 1).map_or(end_ms, |n| n.stalled_ms)
    }

    /// How subscriber `i` recovered from fault `k`.
    pub(super) fn recovery(&self, p: &Params, k: usize, i: usize) -> Recovery {
        let bins = (&self.series.latency[i].1[..], self.t0_us, p.bin.as_micros() as u64);
        let until = self.until_ms(p, k);
        recovery(&self.windows[k], &self.subscribers[i].1, bins, until, p.baseline.as_millis() as u64)
    }
}

/// Copies the network's fault log, the brokers' logs and the tools' lines to `to`, next to the
/// results, so a failed check can be looked into after the scratch directory is gone.
fn keep_logs(to: &Path, net_dir: &Path, dir: &Path) {
    // The brokers' own logs (NAME.log in the network directory, named as the tools that run
    // at them are) go along as broker-NAME.log.
    keep(net_dir, to, &["log"], "broker-");
    let _ = std::fs::copy(net_dir.join("faults.jsonl"), to.join("faults.jsonl"));
    keep(dir, to, &["jsonl", "log"], "");
}

/// Copies the files of `from` with one of `extensions` into `to` (created), each name after
/// `prefix`: the logs kept beside the results.
pub(super) fn keep(from: &Path, to: &Path, extensions: &[&str], prefix: &str) {
    if std::fs::create_dir_all(to).is_err() {
        return;
    }
    for entry in std::fs::read_dir(from).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| extensions.iter().any(|x| e == *x)) {
            let _ = std::fs::copy(&path, to.join(format!("{prefix}{}", entry.file_name().to_string_lossy())));
        }
    }
}
