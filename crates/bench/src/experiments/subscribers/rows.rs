//! The typed rows of `subscribers`: one per repetition at one point, of tidings, NATS now, or
//! a committed anchor; the CSV, the plot and the report's tables are made from them.

use crate::latency::LatencyResult;
use crate::peer::PeerRow;

/// Our measurement at one point.
pub(super) struct Measured {
    pub(super) latency: LatencyResult,
    pub(super) broker_drops: f64,
    /// The kernel's UDP drop counters over the point (machine-wide), if readable.
    pub(super) kernel: Option<crate::snmp::UdpCounters>,
}

/// One measured repetition at one point, of tidings (TCP or UDP), NATS now, or a committed NATS
/// anchor: the typed row behind the CSV, the plot and the report's tables. Latencies in µs from
/// the intended send time; `send_*` from the actual one.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Row {
    /// `tidings-tcp`, `tidings-udp`, `nats` or `nats-anchor`.
    pub system: String,
    /// `this session` or `committed anchor`.
    pub source: String,
    /// Subscriber connections.
    pub subscribers: usize,
    /// Publish rate asked for, msg/s.
    pub rate_msg_s: f64,
    /// Payload bytes.
    pub size_b: usize,
    /// Repetition, from 1.
    pub rep: usize,
    /// Messages published.
    pub sent: Option<f64>,
    /// Deliveries received (first copies, by number).
    pub received: Option<f64>,
    /// Deliveries that never arrived.
    pub lost: Option<f64>,
    /// Subscribers no longer served at the end: stream ended, or none of the last tenth of
    /// the messages arrived (NATS: the peer harness's slow consumers).
    pub dropped_subscribers: Option<f64>,
    /// Subscribers alive or not that lost anything.
    pub lossy_subscribers: Option<f64>,
    /// The most one subscriber lost.
    pub max_lost_per_subscriber: Option<f64>,
    /// Losses the subscribers were told of (`missed` of their deliveries: the broker's queue
    /// drops and, over UDP, gaps in the broker's datagram numbers).
    pub told_lost: Option<f64>,
    /// Losses no subscriber was told of.
    pub unattributed: Option<f64>,
    /// Mean latency.
    pub mean_us: Option<f64>,
    /// Its standard deviation.
    pub stdev_us: Option<f64>,
    /// Median latency.
    pub p50_us: Option<f64>,
    /// 99th percentile.
    pub p99_us: Option<f64>,
    /// Maximum.
    pub max_us: Option<f64>,
    /// Slow-consumer drops the broker counted (UDP: oldest datagrams dropped from a full queue).
    pub broker_drops: Option<f64>,
    /// Datagrams the kernel dropped at a full receiving socket buffer over the point
    /// (`RcvbufErrors`, machine-wide: the bench's own receivers on an idle machine).
    pub rcvbuf_errors: Option<f64>,
    /// Datagrams the kernel refused for a full send buffer (`SndbufErrors`, machine-wide).
    pub sndbuf_errors: Option<f64>,
    /// Seconds to connect and subscribe everyone.
    pub setup_s: Option<f64>,
    /// Publish rate achieved.
    pub achieved_rate_msg_s: Option<f64>,
    /// Median from the actual send time.
    pub send_p50_us: Option<f64>,
    /// 99th percentile from the actual send time.
    pub send_p99_us: Option<f64>,
    /// Load average before the point.
    pub load_before: Option<f64>,
    /// Load average after it.
    pub load_after: Option<f64>,
    /// Cores the `--busy` processes took over the point (1.0: a whole core).
    pub busy_cores: Option<f64>,
}

/// Which point a row belongs to, and the load around it.
pub(super) struct At<'a> {
    pub(super) system: &'a str,
    pub(super) source: &'a str,
    pub(super) n: usize,
    pub(super) rate: f64,
    pub(super) size: usize,
    pub(super) rep: usize,
    pub(super) load: [Option<f64>; 2],
    pub(super) busy_cores: Option<f64>,
}

impl At<'_> {
    /// A row of this point with nothing measured yet.
    fn row(&self) -> Row {
        Row {
            system: self.system.into(),
            source: self.source.into(),
            subscribers: self.n,
            rate_msg_s: self.rate,
            size_b: self.size,
            rep: self.rep,
            load_before: self.load[0],
            load_after: self.load[1],
            busy_cores: self.busy_cores,
            ..Row::default()
        }
    }
}

pub(super) fn row(at: &At<'_>, m: &Measured) -> Row {
    let r = &m.latency;
    let f = |v: u64| Some(v as f64);
    Row {
        sent: f(r.sent),
        received: f(r.received),
        lost: f(r.lost),
        dropped_subscribers: Some(r.dropped_subscribers as f64),
        lossy_subscribers: Some(r.lossy_subscribers as f64),
        max_lost_per_subscriber: f(r.max_lost),
        told_lost: f(r.missed),
        unattributed: f(r.unattributed),
        mean_us: Some(r.mean_us),
        stdev_us: Some(r.stdev_us),
        p50_us: f(r.p50_us),
        p99_us: f(r.p99_us),
        max_us: f(r.max_us),
        broker_drops: Some(m.broker_drops),
        rcvbuf_errors: m.kernel.map(|k| k.rcvbuf_errors as f64),
        sndbuf_errors: m.kernel.map(|k| k.sndbuf_errors as f64),
        setup_s: Some(r.setup_secs),
        achieved_rate_msg_s: Some(r.achieved_rate),
        send_p50_us: f(r.send_p50_us),
        send_p99_us: f(r.send_p99_us),
        ..at.row()
    }
}

pub(super) fn peer_row(at: &At<'_>, r: &PeerRow) -> Row {
    Row {
        sent: r.num("sent"),
        received: r.num("delivered"),
        lost: r.num("lost"),
        dropped_subscribers: r.num("dropped_subs"),
        mean_us: r.num("mean_us"),
        p50_us: r.num("p50_us"),
        p99_us: r.num("p99_us"),
        max_us: r.num("max_us"),
        setup_s: r.num("setup_secs"),
        achieved_rate_msg_s: r.num("achieved_rate"),
        send_p50_us: r.num("send_p50_us"),
        send_p99_us: r.num("send_p99_us"),
        ..at.row()
    }
}
