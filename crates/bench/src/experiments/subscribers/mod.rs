//! `subscribers` (seeds 003 and 000): latency against the number of subscribers, each on its
//! own connection, over TCP and over UDP; "dropped subscribers" and lost messages.

mod present;
mod rows;

pub use rows::Row;
use rows::{peer_row, row, At, Measured};

use std::time::Duration;

use tidings_client::Transport;

use crate::latency::{self, LatencySpec};
use crate::metrics::{self, Snapshot};
use crate::peer::{anchors::Point, nats, NatsTools};
use crate::stats::load_average;
use crate::suite::prelude::*;
use crate::suite::table::num;
use crate::target::Target;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Subscriber counts.
    pub counts: Vec<usize>,
    /// Transports.
    pub transports: Vec<Transport>,
    /// Payload bytes.
    pub size: usize,
    /// Publishing time per point.
    pub duration: Duration,
    /// Highest publish rate, msg/s.
    pub max_rate: f64,
    /// Highest deliveries per second (rate × subscribers).
    pub max_deliveries: f64,
    /// CPU-bound processes spinning beside the whole run ([`crate::busy`]): the machine busy
    /// with other work, as issue 45 measured UDP at.
    pub busy: usize,
}

impl Params {
    /// The seeds' parameters, or the quick version.
    pub fn new(scale: Scale) -> Params {
        let (counts, duration) = match scale {
            Scale::Full => (vec![10, 50, 100, 250, 500, 750, 1000, 10000], Duration::from_secs(5)),
            Scale::Quick => (vec![10, 100, 250], Duration::from_secs(2)),
        };
        Params {
            counts,
            transports: vec![Transport::Tcp, Transport::Udp],
            size: 200,
            duration,
            max_rate: 1000.0,
            max_deliveries: 1_000_000.0,
            busy: 0,
        }
    }

    /// Deliveries a UDP subscriber's client may hold for the application with `n` subscribers:
    /// each keeps its datagram's bytes alive (up to the broker's 1,472-byte datagrams) while it
    /// waits, so the default (65,536 per subscription) could pin gigabytes in all when the
    /// subscribers fall behind. About 4 GiB in all, between 8 and 1024 per subscriber; beyond
    /// it the kernel's socket buffer holds datagrams, then drops them.
    pub fn udp_capacity(n: usize) -> usize {
        ((4usize << 30) / (n.max(1) * 1472)).clamp(8, 1024)
    }

    /// Publish rate with `n` subscribers: 1000 msg/s, less where that passes 1 M deliveries/s.
    pub fn rate(&self, n: usize) -> f64 {
        self.max_rate.min(self.max_deliveries / n.max(1) as f64)
    }
}

/// The experiment.
pub struct Subscribers(pub Params);

/// The longest wait for stragglers, tidings and NATS alike.
const DRAIN: Duration = Duration::from_secs(120);

fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Tcp => "tidings-tcp",
        Transport::Udp => "tidings-udp",
    }
}

impl Experiment for Subscribers {
    const ABOUT: About = About {
        name: "subscribers",
        title: "latency against the number of subscribers, TCP and UDP",
        seeds: "seeds 003 and 000",
    };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        let rates: Vec<String> = p.counts.iter().map(|&n| format!("{n}: {}", num(p.rate(n)))).collect();
        vec![
            ("subscribers (each its own connection)", list(&p.counts)),
            ("transports", p.transports.iter().map(|&t| transport_name(t)).collect::<Vec<_>>().join(", ")),
            ("publish rate, msg/s, by subscribers", rates.join("; ")),
            ("rule", format!("min({} msg/s, {} deliveries/s ÷ subscribers)", p.max_rate, p.max_deliveries)),
            ("payload", format!("{} B", p.size)),
            ("publishing per point", format!("{:?}", p.duration)),
            (
                "deliveries a UDP client holds for the application",
                p.counts.iter().map(|&n| format!("{n}: {}", Params::udp_capacity(n))).collect::<Vec<_>>().join("; ")
                    + " (each holds its datagram, at most 1,472 bytes; TCP clients keep the default 65,536)",
            ),
            ("broker", "one `tidings broker`, default settings, started fresh for every point".into()),
            (
                "busy neighbours",
                if p.busy == 0 {
                    "none".into()
                } else {
                    format!(
                        "{} spinning process(es) (`sh -c 'while :; do :; done'`) for the whole run, at the bench's \
                         priority; the cores they took per point are in the CSV (busy_cores)",
                        p.busy
                    )
                },
            ),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        (self.0.counts.len() * ctx.reps * (self.0.transports.len() + ctx.sides() - 1)) as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
        ctx.log(format!("subscribers: open-file limit {limit}"));
        let mut table: Vec<Row> = Vec::new();
        let mut checks = Checks::default();
        // Points whose setup failed once and was retried, with the error.
        let mut retries = Vec::new();
        let mut skipped = Vec::new();
        let mut nats_failures = Vec::new();
        let busy = crate::busy::Busy::start(p.busy)?;
        if p.busy > 0 {
            ctx.log(format!("subscribers: {} busy process(es) spinning beside the run", p.busy));
        }
        // Point by point: every transport of tidings, then NATS on a fresh server, repetition by
        // repetition, so that a change in the machine's load falls on both alike.
        for &n in &p.counts {
            // The subscribers' sockets are this process's; the broker is another process.
            if n as u64 + 256 > limit {
                skipped.push(format!("{n} subscribers (open-file limit {limit})"));
                ctx.step(format!("skipped {n}"));
                continue;
            }
            for rep in 1..=ctx.reps {
                for &transport in &p.transports {
                    let at = format!("{} n={n}", transport_name(transport));
                    let load_before = load_average();
                    let busy_before = busy.sample();
                    let r = match self.point(ctx, transport, n, &mut checks, &mut retries).await {
                        Ok(r) => r,
                        Err(e) => {
                            checks.ran.record(false, format!("{at}: {e:#}"));
                            ctx.step(format!("{at}: failed"));
                            continue;
                        }
                    };
                    checks.ran.record(true, at.clone());
                    let load = [load_before, load_average()];
                    let busy_cores = (p.busy > 0).then(|| crate::busy::cores_taken(&busy_before, &busy.sample()));
                    let cells = At {
                        system: transport_name(transport),
                        source: "this session",
                        n,
                        rate: p.rate(n),
                        size: p.size,
                        rep,
                        load,
                        busy_cores,
                    };
                    table.push(row(&cells, &r));
                    ctx.step(format!("{at}: mean {}", micros(r.latency.mean_us)));
                }
                if let Some(tools) = ctx.peers.tools() {
                    if let Err(e) = self.nats_point(ctx, tools, n, (rep, &busy), &mut table).await {
                        nats_failures.push(format!("{n} subscribers, rep {rep}: {e:#}"));
                    }
                    ctx.step(format!("nats n={n}"));
                }
            }
        }
        self.anchors(ctx, &mut table);
        let figure = self.figure(&table);
        let mut body = self.body(&table)?;
        if !skipped.is_empty() {
            let _ = writeln!(body, "\nNot run: {}.", skipped.join("; "));
        }
        if !retries.is_empty() {
            let _ = writeln!(body, "\nSetup retried once (nothing had been measured): {}.", retries.join("; "));
            checks.ran.note(format!("setup retried once at {} points", retries.len()));
        }
        if !nats_failures.is_empty() {
            let _ = writeln!(body, "\nNATS points that failed: {}.", nats_failures.join("; "));
        }
        Outcome::typed(&table, figure, body, checks.into_checks())
    }
}

super::checks! {
    /// What every point checks, and that every point ran.
    struct Checks {
        ran: "every point ran to the end (its setup retried at most once)",
        subscribed: "every subscription registered before publishing (broker gauge = subscribers)",
        published: "the broker counted every publish (TCP: equal; UDP: not more than sent)",
        order: "no duplicate deliveries; over TCP none out of order",
        accounted: "every delivery accounted (TCP: received = broker's messages out and sent × subscribers = \
                    received + broker drops; UDP: received ≤ broker's messages out)",
    }
}

impl Subscribers {
    async fn point(
        &self,
        ctx: &Context,
        transport: Transport,
        n: usize,
        checks: &mut Checks,
        retries: &mut Vec<String>,
    ) -> anyhow::Result<Measured> {
        let p = &self.0;
        let spec = LatencySpec {
            size: p.size,
            subscribers: n,
            rate: p.rate(n),
            duration: p.duration,
            drain: DRAIN,
            idle: Duration::from_secs(5),
            transport,
            subscription_capacity: (transport == Transport::Udp).then(|| Params::udp_capacity(n)),
            ..LatencySpec::default()
        };
        // Setting up thousands of clients can time out on a loaded machine before anything is
        // measured; one fresh attempt is allowed, and reported.
        let mut target = Target::spawn(&ctx.tidings, &[])?;
        let prepared = match latency::prepare(target.addr(transport)?, &spec).await {
            Ok(prepared) => prepared,
            Err(e) => {
                let at = format!("{} n={n}", transport_name(transport));
                ctx.log(format!("{at}: setup failed ({e:#}); retrying once with a fresh broker"));
                retries.push(format!("{at}: {e:#}"));
                drop(target);
                target = Target::spawn(&ctx.tidings, &[])?;
                latency::prepare(target.addr(transport)?, &spec).await?
            }
        };
        let before = Snapshot::parse(&target.metrics()?);
        let kernel_before = crate::snmp::UdpCounters::read();
        let latency = prepared.run().await?;
        let kernel = crate::snmp::UdpCounters::read().zip(kernel_before).map(|(after, before)| after.since(&before));
        let after = Snapshot::parse(&target.metrics()?);
        let at = format!("{} n={n}", transport_name(transport));
        let gauge = before.sum(metrics::SUBSCRIPTIONS);
        checks.subscribed.record(gauge == n as f64, format!("{at}: gauge {gauge}"));
        let counted = after.delta(&before, metrics::MESSAGES_IN);
        // Probes are published before the data and counted by the broker too.
        let sent = (latency.sent + latency.probes) as f64;
        let published = if transport == Transport::Tcp { counted == sent } else { counted <= sent };
        checks.published.record(published, format!("{at}: broker counted {counted} of {sent} (data and probes)"));
        let in_order = latency.duplicates == 0 && (transport == Transport::Udp || latency.out_of_order == 0);
        let what = format!("{at}: {} duplicates, {} out of order", latency.duplicates, latency.out_of_order);
        checks.order.record(in_order, what);
        let (out, drops) = (after.delta(&before, metrics::MESSAGES_OUT), after.delta(&before, metrics::DROPS));
        if transport == Transport::Tcp {
            let disconnects = after.delta(&before, metrics::DISCONNECTS);
            let expected = latency.sent * n as u64;
            let held = disconnects == 0.0
                && (latency.received + latency.probes_received) as f64 == out
                && expected as f64 == latency.received as f64 + drops;
            let detail = format!(
                "{at}: sent×subs {expected}, received {} (+{} probes), broker out {out}, drops {drops}, disconnects {disconnects}",
                latency.received, latency.probes_received
            );
            checks.accounted.record(held, detail);
        } else {
            let (received, probes) = (latency.received, latency.probes_received);
            let what = format!("{at}: received {received} (+{probes} probes), broker out {out}");
            checks.accounted.record((received + probes) as f64 <= out, what);
        }
        Ok(Measured { latency, broker_drops: drops, kernel })
    }

    /// One repetition of NATS at `n` subscribers, on a fresh server, with tidings' drain wait.
    async fn nats_point(
        &self,
        ctx: &Context,
        tools: &NatsTools,
        n: usize,
        (rep, busy): (usize, &crate::busy::Busy),
        table: &mut Vec<Row>,
    ) -> anyhow::Result<()> {
        let p = &self.0;
        let dir = ctx.scratch("subscribers-nats")?;
        let load_before = load_average();
        let busy_before = busy.sample();
        let rate = p.rate(n);
        let run = nats::PeerRun {
            mode: nats::Mode::Latency,
            exp: "subscribers".into(),
            size: p.size,
            subs: n,
            rate: rate.round() as u64,
            reps: 1,
            duration: p.duration,
            drain: DRAIN,
            hops: 1,
            ..nats::PeerRun::default()
        };
        let rows = nats::run_async(tools, run, &dir).await?;
        let load = [load_before, load_average()];
        let busy_cores = (p.busy > 0).then(|| crate::busy::cores_taken(&busy_before, &busy.sample()));
        for r in &rows {
            let at = At { system: "nats", source: "this session", n, rate, size: p.size, rep, load, busy_cores };
            table.push(peer_row(&at, r));
        }
        Ok(())
    }

    /// The committed anchors of the peer harness, labelled as such.
    fn anchors(&self, ctx: &Context, table: &mut Vec<Row>) {
        let p = &self.0;
        if let Some(anchors) = &ctx.peers.anchors {
            for &n in p.counts.iter().filter(|&&n| p.rate(n) == 1000.0) {
                let rows =
                    anchors.latency(Point { exp: "E3", label: "nats", size: p.size as u64, subs: n as u64, hops: 1 });
                for (i, r) in rows.iter().enumerate() {
                    let at = At {
                        system: "nats-anchor",
                        source: "committed anchor",
                        n,
                        rate: 1000.0,
                        size: p.size,
                        rep: i + 1,
                        load: [None, None],
                        busy_cores: None,
                    };
                    table.push(peer_row(&at, r));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_keeps_deliveries_under_a_million_per_second() {
        let p = Params::new(Scale::Full);
        assert_eq!(p.rate(1000), 1000.0);
        assert_eq!(p.rate(10000), 100.0);
    }

    #[test]
    fn udp_buffers_stay_near_four_gibibytes_in_all() {
        assert_eq!(Params::udp_capacity(10), 1024);
        assert_eq!(Params::udp_capacity(1000), 1024);
        assert_eq!(Params::udp_capacity(10000), 291);
    }
}
