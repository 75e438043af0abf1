//! `tidings bench`: the command line. `EXPERIMENT [options] --out DIR` runs one seed
//! experiment, `all` runs every one; `tput`, `latency` and `index` are the one-number
//! foundation measurements ([`classic`]).

pub mod acked;
pub mod catchup;
pub mod classic;
pub mod measure;
pub mod mqtt;
pub mod patterns;
pub mod peers;
pub mod security;
pub mod takeover;

use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::ProgressBar;
use tidings_client::Transport;

use crate::experiments::{failures, fanout, hops, matching, network, overhead, persistent, proxy, sizes, subscribers};
use crate::parse::{above_zero, at_least_one};
use crate::paths::dir_from;
use crate::peer::{Anchors, NatsMode, NatsTools, Peers};
use crate::suite::{runner, Context, Links, Runnable, Scale};

/// `println!` that hands a write error back instead of panicking, so a closed stdout
/// (`tidings ... | head`) can end a command quietly: the caller propagates it with `?` and the
/// command's exit path turns a broken pipe into status 0.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// Which measurement.
#[derive(clap::Subcommand)]
pub enum Which {
    /// 1 publisher -> N subscribers, as fast as possible (one number).
    Tput(classic::TputArgs),
    /// End-to-end latency at a fixed publish rate with N subscribers (one number).
    Latency(classic::LatencyArgs),
    /// Publish throughput with many non-matching subscriptions versus none (one number).
    Index(classic::IndexArgs),
    /// Guaranteed publishing acknowledged after the sync, beside NATS JetStream with
    /// `sync_interval: always` (one number).
    Acked(acked::AckedArgs),
    /// A replicated pubend's leader SIGKILLed again and again: from each kill to the publisher's
    /// first acknowledgement by the successor, beside NATS JetStream R3 (issue 40).
    Takeover(takeover::TakeoverArgs),
    /// A durable subscriber replaying a backlog, and live guaranteed latency alone and
    /// during it (one number).
    CatchUp(catchup::CatchUpArgs),
    /// Request/reply round trips (1 requester, 1 echoing responder, through 1 or 2 brokers):
    /// p50/p99 sequential, and requests/s with many in flight (one number each).
    Request(patterns::RequestArgs),
    /// What security costs beside NATS with TLS (issue 43): TLS throughput 1->1, the
    /// permission check at 1,000 rules, connections/s with TLS and a password.
    Security(security::SecurityArgs),
    /// A queue group of N members on one broker: delivered msg/s, each message exactly once
    /// (one number).
    Queue(patterns::QueueArgs),
    /// MQTT beside mosquitto (and NATS's MQTT for QoS 1), one load generator for all: QoS 0
    /// msg/s to 1 and 100 subscribers, QoS 1 PUBACKs/s, memory per idle connection.
    Mqtt(mqtt::MqttArgs),
    /// Latency against 10 to 10,000 subscribers, TCP and UDP.
    Subscribers(SubscribersArgs),
    /// One publisher to one subscriber: throughput against message size.
    Sizes(SizesArgs),
    /// One publisher to 10 subscribers.
    Fanout(FanoutArgs),
    /// Through a second broker (`two-brokers.toml`), 1, 5, 7 and 10 subscribers.
    Proxy(ProxyArgs),
    /// 22 brokers: latency against publish rate, message size and matching rate.
    Matching(NaradaArgs),
    /// Latency against brokers on the path (1, 2, 4, 9).
    Hops(NaradaArgs),
    /// Persistent clients over 22 brokers (seed 004 §8.3.4): best effort, durable with one copy,
    /// and the seed's single (n7) and double (n10) replication, latency against rate and size.
    Persistent(NaradaArgs),
    /// One broker against two (throughput, CPU, latency), the 9-broker path, link faults.
    Network(SuiteArgs),
    /// Guaranteed delivery against best effort on two brokers (seed 001 §4.1): each broker's
    /// CPU and the local and remote latency against the number of subscribers.
    Overhead(OverheadArgs),
    /// Guaranteed delivery in `gryphon-fig3-replicated.toml` through a link cut and two broker
    /// crashes (seed 001's figure 6): latency and nacks over time, and the publishers' broker
    /// crash answered by a takeover in their cell.
    Failures(FailuresArgs),
    /// Every experiment above, in order, with a report and plots.
    All(SuiteArgs),
    /// Random, seeded fault schedules over real brokers and clients, every acknowledged publish
    /// checked against every subscriber's output (not part of `all`).
    Nemesis(tidings_nemesis::NemesisArgs),
}

/// Options of every seed experiment.
#[derive(clap::Args, Clone)]
pub struct SuiteArgs {
    /// Output directory: EXPERIMENT.csv/.png/.svg, report.md, summary.json.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out: PathBuf,
    /// A small version that finishes in about a minute (labelled as such in the report).
    #[arg(long)]
    quick: bool,
    /// Repetitions per point; medians are reported with their min-max range (default: 3, or 1
    /// with --quick).
    #[arg(long, value_parser = at_least_one::<usize>)]
    reps: Option<usize>,
    /// Also measure NATS in this session (needs nats-server and the peer harness).
    #[arg(long)]
    nats: bool,
    /// The peer harness binary (default: $TIDINGS_PEERBENCH, else built from PEERS/harness
    /// with `go build`).
    #[arg(long, value_name = "PATH")]
    peerbench: Option<PathBuf>,
    /// nats-server (default: on PATH).
    #[arg(long, value_name = "PATH")]
    nats_server: Option<PathBuf>,
    /// How the broker links of the networks started behave: loopback, or shaped like a LAN or a
    /// WAN (each link through a shaping proxy; the report says which).
    #[arg(long, value_enum, default_value_t = Links::Loopback)]
    links: Links,
    /// The topology files (default: $TIDINGS_TOPOLOGIES, else the repository's topologies/).
    #[arg(long, value_name = "DIR")]
    topologies: Option<PathBuf>,
    /// The peer measurements, for the harness and the committed anchors (default:
    /// $TIDINGS_PEERS, else the repository's bench/peers/).
    #[arg(long, value_name = "DIR")]
    peers: Option<PathBuf>,
}

/// `tidings bench subscribers`.
#[derive(clap::Args)]
pub struct SubscribersArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Subscriber counts (default 10,50,100,250,500,750,1000,10000).
    #[arg(long, value_delimiter = ',', value_parser = at_least_one::<usize>)]
    counts: Option<Vec<usize>>,
    /// Transports: tcp, udp or both (default tcp,udp).
    #[arg(long, value_delimiter = ',', value_parser = transport)]
    transports: Option<Vec<Transport>>,
    /// Payload bytes (default 200).
    #[arg(long, value_parser = at_least_one::<usize>)]
    size: Option<usize>,
    /// Seconds of publishing per point (default 5).
    #[arg(long, value_parser = above_zero)]
    duration: Option<f64>,
    /// Keep N CPU-bound processes spinning beside the whole run (`sh -c 'while :; do :; done'`,
    /// at the bench's priority): the machine busy with other work. The cores they took per
    /// point are in the CSV.
    #[arg(long, value_name = "N", default_value_t = 0)]
    busy: usize,
}

/// `tidings bench failures`.
#[derive(clap::Args)]
pub struct FailuresArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// The seed's own network (`gryphon-fig3.toml`, p1 alone in its cell): the publishers wait
    /// for p1's restart instead of moving to a mate that took their pubends over.
    #[arg(long)]
    unreplicated: bool,
}

/// `tidings bench overhead`.
#[derive(clap::Args)]
pub struct OverheadArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Subscriber counts at the subscribers' broker (default 100,1000,4000,16000; with --quick
    /// 10,100). Counts past the open-file limit are skipped and listed as not run.
    #[arg(long, value_delimiter = ',', value_parser = at_least_one::<usize>)]
    counts: Option<Vec<usize>>,
    /// Seconds of publishing per point (default 20; with --quick 3).
    #[arg(long, value_parser = above_zero)]
    duration: Option<f64>,
    /// The brokers' `[storage] linger` (how long the log writer waits for more publishes
    /// before a sync), e.g. `0s` or `2ms`; default: the broker's own default.
    #[arg(long, value_parser = humantime::parse_duration)]
    linger: Option<std::time::Duration>,
}

/// `tidings bench sizes`.
#[derive(clap::Args)]
pub struct SizesArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Message sizes in bytes (default 1000,2000,...,10000).
    #[arg(long, value_delimiter = ',', value_parser = at_least_one::<usize>)]
    sizes: Option<Vec<usize>>,
    /// Messages per size (default 100000).
    #[arg(long, value_parser = at_least_one::<u64>)]
    count: Option<u64>,
}

/// `tidings bench fanout`.
#[derive(clap::Args)]
pub struct FanoutArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Subscribers (default 10).
    #[arg(long, value_parser = at_least_one::<usize>)]
    subs: Option<usize>,
    /// Message size in bytes (default 2000).
    #[arg(long, value_parser = at_least_one::<usize>)]
    size: Option<usize>,
    /// Messages (default 100000).
    #[arg(long, value_parser = at_least_one::<u64>)]
    count: Option<u64>,
}

/// `tidings bench proxy`.
#[derive(clap::Args)]
pub struct ProxyArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Subscriber counts on the second broker (default 1,5,7,10).
    #[arg(long, value_delimiter = ',', value_parser = at_least_one::<usize>)]
    subs: Option<Vec<usize>>,
    /// Message size in bytes (default 2000).
    #[arg(long, value_parser = at_least_one::<usize>)]
    size: Option<usize>,
    /// Messages per point (default 100000).
    #[arg(long, value_parser = at_least_one::<u64>)]
    count: Option<u64>,
}

/// `tidings bench matching` and `tidings bench hops`.
#[derive(clap::Args)]
pub struct NaradaArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Matching rates in percent.
    #[arg(long, value_delimiter = ',')]
    matching: Option<Vec<u32>>,
    /// Publish rates in msg/s.
    #[arg(long, value_delimiter = ',', value_parser = above_zero)]
    rates: Option<Vec<f64>>,
    /// Payload sizes in bytes.
    #[arg(long, value_delimiter = ',', value_parser = at_least_one::<usize>)]
    sizes: Option<Vec<usize>>,
    /// Seconds of publishing per point.
    #[arg(long, value_parser = above_zero)]
    seconds: Option<f64>,
}

fn transport(text: &str) -> Result<Transport, String> {
    match text {
        "tcp" => Ok(Transport::Tcp),
        "udp" => Ok(Transport::Udp),
        other => Err(format!("unknown transport {other:?} (tcp or udp)")),
    }
}

fn scale(suite: &SuiteArgs) -> Scale {
    if suite.quick {
        Scale::Quick
    } else {
        Scale::Full
    }
}

fn narada_grid(grid: &mut crate::experiments::narada::Grid, a: &NaradaArgs) {
    grid.matching = a.matching.clone().unwrap_or(grid.matching.clone());
    grid.rates = a.rates.clone().unwrap_or(grid.rates.clone());
    grid.sizes = a.sizes.clone().unwrap_or(grid.sizes.clone());
    grid.seconds = a.seconds.unwrap_or(grid.seconds);
}

/// Every experiment at `scale` with its default parameters, in report order.
pub fn all(scale: Scale) -> Vec<Box<dyn Runnable>> {
    vec![
        Box::new(subscribers::Subscribers(subscribers::Params::new(scale))),
        Box::new(sizes::Sizes(sizes::Params::new(scale))),
        Box::new(fanout::Fanout(fanout::Params::new(scale))),
        Box::new(proxy::Proxy(proxy::Params::new(scale))),
        Box::new(matching::Matching(matching::Params::new(scale))),
        Box::new(hops::Hops(hops::Params::new(scale))),
        Box::new(persistent::Persistent(persistent::Params::new(scale))),
        Box::new(network::Network(network::Params::new(scale))),
        Box::new(overhead::Overhead(overhead::Params::new(scale))),
        Box::new(failures::Failures(failures::Params::new(scale))),
    ]
}

/// Runs `tidings bench ...`.
pub async fn run(which: Which) -> anyhow::Result<ExitCode> {
    let (suite, experiment): (SuiteArgs, Option<Box<dyn Runnable>>) = match which {
        Which::Tput(a) => return measure::write_json(classic::tput(a).await?),
        Which::Latency(a) => return measure::write_json(classic::latency(a).await?),
        Which::Index(a) => return measure::write_json(classic::index(a).await?),
        Which::Acked(a) => return measure::write_json(acked::run(a).await?),
        Which::CatchUp(a) => return measure::write_json(catchup::run(a).await?),
        Which::Takeover(a) => return measure::write_json(takeover::run(a).await?),
        Which::Request(a) => return patterns::finish(patterns::request(a).await?),
        Which::Queue(a) => return patterns::finish(patterns::queue(a).await?),
        Which::Mqtt(a) => return measure::write_json(mqtt::run(a).await?),
        Which::Security(a) => return measure::write_json(security::run(a).await?),
        Which::Nemesis(a) => return tidings_nemesis::run(a).await,
        Which::All(suite) => (suite, None),
        Which::Network(suite) => {
            let p = network::Params::new(scale(&suite));
            (suite, Some(Box::new(network::Network(p))))
        }
        Which::Overhead(a) => {
            let mut p = overhead::Params::new(scale(&a.suite));
            p.counts = a.counts.unwrap_or(p.counts);
            p.duration = a.duration.map(std::time::Duration::from_secs_f64).unwrap_or(p.duration);
            p.linger = a.linger;
            (a.suite, Some(Box::new(overhead::Overhead(p))))
        }
        Which::Failures(a) => {
            let mut p = failures::Params::new(scale(&a.suite));
            if a.unreplicated {
                p.unreplicated();
            }
            (a.suite, Some(Box::new(failures::Failures(p))))
        }
        Which::Subscribers(a) => {
            let mut p = subscribers::Params::new(scale(&a.suite));
            p.counts = a.counts.unwrap_or(p.counts);
            p.transports = a.transports.unwrap_or(p.transports);
            p.size = a.size.unwrap_or(p.size);
            p.duration = a.duration.map(std::time::Duration::from_secs_f64).unwrap_or(p.duration);
            p.busy = a.busy;
            (a.suite, Some(Box::new(subscribers::Subscribers(p))))
        }
        Which::Sizes(a) => {
            let mut p = sizes::Params::new(scale(&a.suite));
            p.sizes = a.sizes.unwrap_or(p.sizes);
            p.count = a.count.unwrap_or(p.count);
            (a.suite, Some(Box::new(sizes::Sizes(p))))
        }
        Which::Fanout(a) => {
            let mut p = fanout::Params::new(scale(&a.suite));
            p.subscribers = a.subs.unwrap_or(p.subscribers);
            p.size = a.size.unwrap_or(p.size);
            p.count = a.count.unwrap_or(p.count);
            (a.suite, Some(Box::new(fanout::Fanout(p))))
        }
        Which::Proxy(a) => {
            let mut p = proxy::Params::new(scale(&a.suite));
            p.subscribers = a.subs.unwrap_or(p.subscribers);
            p.size = a.size.unwrap_or(p.size);
            p.count = a.count.unwrap_or(p.count);
            (a.suite, Some(Box::new(proxy::Proxy(p))))
        }
        Which::Matching(a) => {
            let mut p = matching::Params::new(scale(&a.suite));
            narada_grid(&mut p.grid, &a);
            (a.suite, Some(Box::new(matching::Matching(p))))
        }
        Which::Hops(a) => {
            let mut p = hops::Params::new(scale(&a.suite));
            narada_grid(&mut p.grid, &a);
            (a.suite, Some(Box::new(hops::Hops(p))))
        }
        Which::Persistent(a) => {
            let mut p = persistent::Params::new(scale(&a.suite));
            narada_grid(&mut p.grid, &a);
            (a.suite, Some(Box::new(persistent::Persistent(p))))
        }
    };
    let defaults = all(scale(&suite));
    let changed = experiment.as_deref().is_some_and(|e| changed(e, &defaults));
    let experiments = experiment.map(|e| vec![e]).unwrap_or(defaults);
    run_suite(&suite, &experiments, changed).await
}

/// Whether `experiment`'s parameters differ from its defaults among `defaults`.
fn changed(experiment: &dyn Runnable, defaults: &[Box<dyn Runnable>]) -> bool {
    defaults.iter().find(|d| d.name() == experiment.name()).is_none_or(|d| d.parameters() != experiment.parameters())
}

async fn run_suite(suite: &SuiteArgs, experiments: &[Box<dyn Runnable>], changed: bool) -> anyhow::Result<ExitCode> {
    let reps = suite.reps.unwrap_or(if suite.quick { 1 } else { 3 });
    anyhow::ensure!(reps >= 1, "--reps must be at least 1");
    let peers_dir = dir_from(&suite.peers, "TIDINGS_PEERS", "bench/peers");
    let nats = match suite.nats.then(|| NatsTools::find(suite.nats_server.clone(), suite.peerbench.clone(), &peers_dir))
    {
        Some(Ok(tools)) => NatsMode::Measured(tools),
        Some(Err(why)) => NatsMode::Unavailable(why),
        None => NatsMode::NotRequested,
    };
    if let NatsMode::Unavailable(why) = &nats {
        eprintln!("warning: NATS will not be measured: {why}");
    }
    let mut ctx = Context {
        scale: scale(suite),
        changed,
        reps,
        tidings: measure::tidings_exe()?,
        topologies: dir_from(&suite.topologies, "TIDINGS_TOPOLOGIES", "topologies"),
        peers: Peers { nats, anchors: Anchors::load(&peers_dir) },
        out: suite.out.clone(),
        bar: ProgressBar::hidden(),
        links: suite.links,
    };
    let statuses = runner::run(&mut ctx, experiments).await?;
    let failed: Vec<String> = statuses
        .iter()
        .filter(|s| !s.passed())
        .map(|s| match &s.error {
            Some(e) => format!("{} (did not run: {e})", s.experiment),
            None => {
                let names: Vec<&str> = s.checks.iter().filter(|c| !c.passed).map(|c| c.name.as_str()).collect();
                format!("{} (failed checks: {})", s.experiment, names.join("; "))
            }
        })
        .collect();
    eprintln!("results in {}", suite.out.display());
    if failed.is_empty() {
        eprintln!("all {} experiments ran and every internal check held", statuses.len());
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("FAILED: {}", failed.join(" | "));
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_experiment_with_parameters_from_the_command_line_is_not_labelled_the_seeds() {
        let defaults = all(Scale::Full);
        let seed = overhead::Overhead(overhead::Params::new(Scale::Full));
        assert!(!changed(&seed, &defaults));
        let mut p = overhead::Params::new(Scale::Full);
        p.counts = vec![100, 1000];
        assert!(changed(&overhead::Overhead(p), &defaults));
        assert!(Scale::Full.label_changed().contains("not the seed's"));
    }
}
