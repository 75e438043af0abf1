//! `overhead` (seed 001 §4.1, figures 4 and 5): what guaranteed delivery costs against best
//! effort on the same traffic, in `two-brokers.toml`. A publisher at the publisher's broker
//! (phb) sends 2000 msg/s of 250 B; N subscribers at the subscribers' broker (shb), each on
//! its own connection, each get 2 msg/s; a few subscribers at phb give the local latency. Per
//! point: each broker's CPU, median and p99 latency local and remote, best effort and
//! guaranteed interleaved repetition by repetition. The run fails if a subscriber missed any
//! of its share, got a copy twice or out of order, or a guaranteed publish was not acknowledged
//! after the pubend log's sync that covered it (the publisher's broker counts each such ack).

mod nats;
mod point;
mod present;
mod rows;

pub use rows::Row;

use std::time::Duration;

use crate::engine::Drain;
use crate::network::Network;
use crate::stats::load_average;
use crate::suite::text::list;
use crate::suite::{About, Context, Experiment, Outcome, Scale};
use point::{AckEvidence, Brokers, Load};

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// The topology file.
    pub topology: String,
    /// Subscriber counts at the subscribers' broker.
    pub counts: Vec<usize>,
    /// Subscribers at the publisher's broker (local latency), each on its own group.
    pub local: usize,
    /// Topics the traffic is spread over: each subscriber gets rate / groups msg/s.
    pub groups: usize,
    /// Publish rate, msg/s.
    pub rate: f64,
    /// Payload bytes.
    pub size: usize,
    /// Publishing time per point.
    pub duration: Duration,
    /// The brokers' `[storage] linger` (`None`: their default).
    pub linger: Option<Duration>,
}

impl Params {
    /// The seed's parameters (16,000 connections where the open-file limit allows), or the
    /// quick version (a few seconds, 10 and 100 subscribers).
    pub fn new(scale: Scale) -> Params {
        let (counts, duration) = match scale {
            Scale::Full => (vec![100, 1000, 4000, 16000], Duration::from_secs(20)),
            Scale::Quick => (vec![10, 100], Duration::from_secs(3)),
        };
        Params {
            topology: "two-brokers.toml".into(),
            counts,
            local: 10,
            groups: 1000,
            rate: 2000.0,
            size: 250,
            duration,
            linger: None,
        }
    }

    fn load(&self, remote: usize, guaranteed: bool) -> Load {
        Load {
            remote,
            local: self.local,
            groups: self.groups,
            rate: self.rate,
            size: self.size,
            duration: self.duration,
            guaranteed,
            drain: Drain { idle: Duration::from_secs(10), max: Duration::from_secs(120) },
        }
    }
}

/// The experiment.
pub struct Overhead(pub Params);

impl Experiment for Overhead {
    const ABOUT: About = About {
        name: "overhead",
        title: "the price of guaranteed delivery: broker CPU and latency against best effort",
        seeds: "seed 001, §4.1 and figures 4 and 5",
    };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        let share = p.rate / p.groups as f64;
        vec![
            ("network", format!("`{}` (phb: publisher's broker, shb: subscribers' broker), `tidings net up`", p.topology)),
            ("publisher", format!("one at phb, {} msg/s of {} B, spread over {} topics", p.rate, p.size, p.groups)),
            ("subscribers at shb (remote), each its own connection", list(&p.counts)),
            ("subscribers at phb (local)", format!("{}, each its own connection", p.local)),
            ("each subscriber's share", format!("one topic: {share} msg/s")),
            ("modes", "best effort; guaranteed (guaranteed subscriptions, publishes acknowledged after the pubend log's sync, `fsync = always`)".into()),
            ("publishing per point", format!("{:?}", p.duration)),
            ("CPU", "utime + stime from `/proc/PID/stat` over the publishing, % of one core".into()),
            ("log writer linger (`[storage] linger`)", p.linger.map_or("the broker's default".into(), |l| format!("{l:?}"))),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        // Two modes of each system: best effort and guaranteed (core NATS and JetStream).
        (self.0.counts.len() * ctx.reps * 2 * ctx.sides()) as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
        ctx.log(format!("overhead: open-file limit {limit}"));
        let mut checks = Checks::default();
        let (mut table, mut skipped, mut peer_failures) = (Vec::new(), Vec::new(), Vec::new());
        for &n in &p.counts {
            // The subscribers' sockets are this process's; each broker is a process of its own.
            if (n + p.local) as u64 + 256 > limit {
                skipped.push(format!("{n} subscribers (open-file limit {limit})"));
                (0..ctx.reps * 2).for_each(|_| ctx.step(format!("skipped {n}")));
                continue;
            }
            let dir = ctx.scratch(&format!("overhead-{n}"))?;
            let mut extra = Vec::new();
            if let Some(linger) = p.linger {
                let config = dir.join("storage.toml");
                std::fs::write(&config, format!("[storage]\nlinger = \"{}us\"\n", linger.as_micros()))?;
                extra =
                    ["--", "--config"].map(String::from).into_iter().chain([config.display().to_string()]).collect();
            }
            let file = ctx.topologies.join(&p.topology);
            let net = Network::up_with(&ctx.tidings, &file, &dir, Duration::from_secs(60), &extra).await?;
            let pid = |name: &str| net.broker(name)?.process_id();
            let brokers = Brokers {
                phb: net.broker("phb")?.tcp.clone(),
                shb: net.broker("shb")?.tcp.clone(),
                pids: (pid("phb")?, pid("shb")?),
                phb_admin: net.broker("phb")?.admin_addr()?,
            };
            // Repetition by repetition, both modes, so a change in the machine's load falls on both.
            for rep in 1..=ctx.reps {
                for guaranteed in [false, true] {
                    let load = p.load(n, guaranteed);
                    let at = format!("{} n={n} rep {rep}", rows::mode(guaranteed));
                    let before = load_average();
                    match point::run(&brokers, &load).await {
                        Ok(m) => {
                            checks.ran.record(true, at.clone());
                            let row = rows::row(&load, rep, &m, [before, load_average()]);
                            record(&mut checks, &at, &row, m.acks);
                            ctx.step(format!("{at}: remote p50 {} µs", row.remote_p50_us));
                            table.push(row);
                        }
                        Err(e) => {
                            checks.ran.record(false, format!("{at}: {e:#}"));
                            ctx.step(format!("{at}: failed"));
                        }
                    }
                }
                // NATS's two modes right after, on the same counts (reported, never checked).
                let Some(tools) = ctx.peers.tools() else { continue };
                for js in [false, true] {
                    match nats::rep(tools, &dir, &p.load(n, js), rep).await {
                        Ok(row) => {
                            ctx.step(format!("{} n={n} rep {rep}: remote p50 {} µs", row.mode, row.remote_p50_us));
                            table.push(row);
                        }
                        Err(e) => peer_failures.push(format!("n={n} rep {rep} js={js}: {e:#}")),
                    }
                }
            }
        }
        let mut body = present::body(p, &table);
        if !skipped.is_empty() {
            body.push_str(&format!("\nNot run: {}.\n", skipped.join("; ")));
        }
        if !peer_failures.is_empty() {
            body.push_str(&format!("\nNATS runs that failed: {}.\n", peer_failures.join("; ")));
        }
        let checks = checks.into_checks();
        Outcome::typed(&table, present::figure(&table), body, checks)
    }
}

super::checks! {
    /// The run's checks, point by point (counts alone cannot say when an ack was sent; the
    /// broker's per-ack comparison can).
    struct Checks {
        ran: "every point ran to the end",
        share: "every subscriber received all of its share (no loss, no stream ended)",
        order: "no duplicate and no out-of-order delivery",
        acked: "every guaranteed publish acknowledged after its sync",
    }
}

/// Records one repetition's checks.
fn record(checks: &mut Checks, at: &str, r: &Row, acks: Option<AckEvidence>) {
    checks.share.record(r.lost == 0 && r.ended == 0, format!("{at}: {} lost, {} streams ended", r.lost, r.ended));
    let order = format!("{at}: {} duplicates, {} out of order", r.duplicates, r.out_of_order);
    checks.order.record(r.duplicates == 0 && r.out_of_order == 0, order);
    if r.mode == rows::mode(true) {
        let (held, detail) = acked_after_sync(r, acks);
        checks.acked.record(held, format!("{at}: {detail}"));
    }
}

/// Whether every guaranteed publish was acknowledged, each after the pubend log's sync that
/// covered it: the publisher received an ack for every publish, and the publisher's broker
/// counted exactly that many acks, every one sent when its log had reported the tick synced
/// (it compares each ack's tick with the log's synced position as it queues it).
fn acked_after_sync(r: &Row, acks: Option<AckEvidence>) -> (bool, String) {
    let received = format!("{} of {} acknowledged, {} failed", r.acked, r.sent, r.ack_failed);
    let Some(e) = acks else {
        return (false, format!("{received}; the publisher's broker gave no account of its acks"));
    };
    let held = r.acked == r.sent && r.ack_failed == 0 && e.sent == r.acked && e.after_sync == e.sent && e.syncs > 0;
    let broker = format!(
        "the broker sent {}, {} of them after the sync covering them, over {} syncs",
        e.sent, e.after_sync, e.syncs
    );
    (held, format!("{received}; {broker}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guaranteed(sent: u64, acked: u64) -> Row {
        Row { mode: rows::mode(true).into(), sent, acked, ..Row::default() }
    }

    #[test]
    fn the_ack_check_holds_only_when_every_ack_followed_its_sync() {
        let all = AckEvidence { sent: 100, after_sync: 100, syncs: 12 };
        assert!(acked_after_sync(&guaranteed(100, 100), Some(all)).0);
        let early = AckEvidence { after_sync: 99, ..all };
        let (held, detail) = acked_after_sync(&guaranteed(100, 100), Some(early));
        assert!(!held && detail.contains("99 of them after the sync"), "{detail}");
        assert!(!acked_after_sync(&guaranteed(100, 100), None).0, "no evidence is no pass");
        assert!(!acked_after_sync(&guaranteed(100, 100), Some(AckEvidence { syncs: 0, ..all })).0);
        assert!(!acked_after_sync(&guaranteed(100, 99), Some(all)).0, "an ack the publisher never got");
        let more = AckEvidence { sent: 101, after_sync: 101, syncs: 12 };
        assert!(!acked_after_sync(&guaranteed(100, 100), Some(more)).0, "acks the publisher did not ask for");
    }
}
