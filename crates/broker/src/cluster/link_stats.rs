//! LINK_STATS: how the web view of any broker shows the rates and queues of every link, not
//! only its own, without reaching the other brokers' admin ports (issue 44, item 4).
//!
//! Each broker measures its own links (data messages per second each way, queue depth). While
//! anyone watches, it floods that report over its links once a second, the way link-state
//! adverts travel: a receiver keeps a report only if it is newer (incarnation, then sequence)
//! than the one it holds from that origin, and passes on only what it kept, to every link but
//! the one it came on. So each report crosses each link at most twice, and a network of N
//! brokers carries at most N reports a second per link, only while someone watches.
//!
//! Who watches: a broker whose web view has a viewer flags its own reports `wanted`; a broker
//! that hears a wanted report reports its own links for the next [`WANTED_FOR`]. When the last
//! viewer leaves, reports stop within seconds, and nothing is measured or sent until the next.
//! Only links that negotiated peer protocol version 4 carry the frame (a version 3 broker
//! would close the link on its unknown type byte); brokers behind such a link are not heard.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidings_route::BrokerName;
use tidings_wire::peer::{Incarnation, LinkStat, LinkStats, PeerFrame, LINK_STATS_VERSION, MAX_LINK_STATS};
use tokio_util::sync::CancellationToken;

use super::Cluster;

/// How often a broker reports its links while anyone watches: at most once a second.
pub(super) const EVERY: Duration = Duration::from_secs(1);
/// How long a wanted report keeps the brokers that hear it reporting: a few of the viewer's
/// reports may be lost or late without the network going quiet.
const WANTED_FOR: Duration = Duration::from_secs(5);
/// How long a local viewer counts after the web view last said it watches (it says so with
/// every update, at least once a second).
const WATCHED_FOR: Duration = Duration::from_secs(3);
/// A report this old may be replaced by any report of its origin, even an older-looking one
/// (an origin restarted on an empty data directory numbers from 1 again); one report's flood
/// is over long before.
const REPLACEABLE_AFTER: Duration = Duration::from_secs(10);
/// Reports older than this are forgotten: a broker gone for this long is not shown with its
/// last rates.
const FORGET_AFTER: Duration = Duration::from_secs(120);
/// Most origins remembered, whatever peers send: a bound on the book's memory.
const MAX_ORIGINS: usize = 4096;

/// What this broker knows of the network's link reports, and what it needs to make its own.
#[derive(Default)]
pub(super) struct Book {
    heard: BTreeMap<BrokerName, Heard>,
    /// Until when a wanted report from elsewhere keeps this broker reporting.
    wanted_until: Option<Instant>,
    /// Until when a viewer of this broker's web view counts.
    watched_until: Option<Instant>,
    /// The number of this broker's last report.
    sequence: u64,
    /// This broker's link counters at its last report, for rates.
    last: Option<Sample>,
}

/// One origin's last report, as heard.
struct Heard {
    incarnation: u64,
    sequence: u64,
    at: Instant,
    links: Arc<[LinkStat]>,
}

/// This broker's link counters at one moment: per peer, data messages in and out.
struct Sample {
    at: Instant,
    counters: BTreeMap<BrokerName, (u64, u64)>,
}

/// One broker's last report, for the web view.
pub struct LinkReport {
    /// The broker that measured its links.
    pub origin: BrokerName,
    /// How long ago the report arrived here.
    pub age: Duration,
    /// Its links as it measured them.
    pub links: Arc<[LinkStat]>,
}

/// One of this broker's links as the link table has it now.
pub(super) struct OwnLink {
    pub(super) peer: BrokerName,
    pub(super) messages_in: u64,
    pub(super) messages_out: u64,
    pub(super) queued_messages: usize,
    pub(super) queued_bytes: usize,
}

impl Book {
    /// Keeps `stats` if it is newer than what is held of its origin; whether it was kept (and
    /// so is to be passed on).
    fn accept(&mut self, stats: &LinkStats, now: Instant) -> bool {
        let origin = BrokerName::new(&stats.origin);
        let newer = match self.heard.get(&origin) {
            Some(held) => {
                (stats.incarnation.0, stats.sequence) > (held.incarnation, held.sequence)
                    || now.duration_since(held.at) >= REPLACEABLE_AFTER
            }
            None => {
                if self.heard.len() >= MAX_ORIGINS {
                    self.heard.retain(|_, held| now.duration_since(held.at) < FORGET_AFTER);
                }
                self.heard.len() < MAX_ORIGINS
            }
        };
        if !newer {
            return false;
        }
        if stats.wanted {
            self.wanted_until = Some(now + WANTED_FOR);
        }
        let heard = Heard {
            incarnation: stats.incarnation.0,
            sequence: stats.sequence,
            at: now,
            links: stats.links.clone().into(),
        };
        self.heard.insert(origin, heard);
        true
    }

    /// Whether this broker reports now: a viewer here, or a wanted report heard lately.
    fn reporting(&self, now: Instant) -> bool {
        [self.watched_until, self.wanted_until].into_iter().flatten().any(|until| until > now)
    }

    /// This broker's next report from its links as they are `now`, rates since the last
    /// report. Without a last one there are no rates yet: the first report lists no links,
    /// and is sent only to carry a local viewer's `wanted` to the network at once.
    fn report(&mut self, me: &Cluster, links: Vec<OwnLink>, now: Instant) -> Option<LinkStats> {
        let wanted = self.watched_until.is_some_and(|until| until > now);
        let counters = links.iter().map(|l| (l.peer.clone(), (l.messages_in, l.messages_out))).collect();
        let last = self.last.replace(Sample { at: now, counters });
        let stats = match last {
            Some(last) => {
                let seconds = now.duration_since(last.at).as_secs_f64().max(0.001);
                let centi = |count: u64, then: Option<u64>| {
                    let per_s = count.saturating_sub(then.unwrap_or(count)) as f64 / seconds;
                    (per_s * 100.0).round().min(f64::from(u32::MAX)) as u32
                };
                let saturate = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                let stat = |l: &OwnLink| {
                    let then = last.counters.get(&l.peer);
                    LinkStat {
                        peer: l.peer.to_string(),
                        out_centi: centi(l.messages_out, then.map(|t| t.1)),
                        in_centi: centi(l.messages_in, then.map(|t| t.0)),
                        queued_messages: saturate(l.queued_messages),
                        queued_bytes: saturate(l.queued_bytes),
                    }
                };
                links.iter().take(MAX_LINK_STATS).map(stat).collect()
            }
            None if wanted => Vec::new(),
            None => return None,
        };
        self.sequence += 1;
        let incarnation = Incarnation(me.incarnation.0);
        Some(LinkStats { origin: me.name.to_string(), incarnation, sequence: self.sequence, wanted, links: stats })
    }
}

impl Cluster {
    /// A viewer watches this broker's web view: report this broker's links, and ask every
    /// broker to report theirs, for the next few seconds. Called with each update of the view.
    pub fn watching(&self) {
        self.link_stats.lock().watched_until = Some(Instant::now() + WATCHED_FOR);
    }

    /// The last report of every other broker heard from in the last two minutes, for the web
    /// view (which marks the old ones stale).
    pub fn link_reports(&self) -> Vec<LinkReport> {
        let now = Instant::now();
        let mut book = self.link_stats.lock();
        book.heard.retain(|_, held| now.duration_since(held.at) < FORGET_AFTER);
        let reports = book.heard.iter().map(|(origin, held)| LinkReport {
            origin: origin.clone(),
            age: now.duration_since(held.at),
            links: Arc::clone(&held.links),
        });
        reports.collect()
    }

    /// A LINK_STATS frame arrived from `from`: kept and passed on to every other link that
    /// speaks it if it is news, else dropped, which ends the flood. Our own report, back
    /// around a loop, is never news.
    pub(crate) fn link_stats_received(&self, from: &BrokerName, stats: LinkStats) {
        if stats.origin == self.name.as_str() || !self.link_stats.lock().accept(&stats, Instant::now()) {
            return;
        }
        if let Ok(bytes) = PeerFrame::LinkStats(stats).to_bytes() {
            self.flood(&bytes, Some(from));
        }
    }

    /// Sends this broker's report to every link that speaks LINK_STATS, if anyone watches;
    /// called every [`EVERY`]. Nobody watching costs one lock and a clock read.
    pub(crate) fn report_links(&self) {
        let now = Instant::now();
        {
            let mut book = self.link_stats.lock();
            if !book.reporting(now) {
                book.last = None;
                return;
            }
        }
        let links = self.own_links();
        let Some(stats) = self.link_stats.lock().report(self, links, now) else { return };
        match PeerFrame::LinkStats(stats).to_bytes() {
            Ok(bytes) => self.flood(&bytes, None),
            Err(e) => tracing::warn!(error = %e, "cannot encode this broker's link report"),
        }
    }

    /// This broker's up links, in name order.
    fn own_links(&self) -> Vec<OwnLink> {
        let core = self.core.read();
        let links = core.links.iter().map(|(peer, entry)| {
            let (queued_messages, queued_bytes) = entry.queue.backlog();
            let counters = entry.queue.counters();
            OwnLink {
                peer: peer.clone(),
                messages_in: counters.messages_in.get(),
                messages_out: counters.messages_out.get(),
                queued_messages,
                queued_bytes,
            }
        });
        links.collect()
    }

    /// Queues `bytes` as a control frame on every up link that negotiated LINK_STATS, but
    /// the one to `except`.
    fn flood(&self, bytes: &Bytes, except: Option<&BrokerName>) {
        let core = self.core.read();
        for (peer, entry) in &core.links {
            if entry.version >= LINK_STATS_VERSION && Some(peer) != except {
                entry.queue.push_control(bytes.clone());
            }
        }
    }
}

/// Reports this broker's links every [`EVERY`] while anyone watches, until `shutdown`.
pub async fn link_reporter(cluster: Arc<Cluster>, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = every.tick() => cluster.report_links(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(origin: &str, incarnation: u64, sequence: u64, wanted: bool) -> LinkStats {
        LinkStats { origin: origin.into(), incarnation: Incarnation(incarnation), sequence, wanted, links: vec![] }
    }

    #[test]
    fn a_report_is_kept_once_and_only_if_newer_so_the_flood_ends() {
        let mut book = Book::default();
        let now = Instant::now();
        assert!(book.accept(&stats("x", 2, 5, false), now));
        assert!(!book.accept(&stats("x", 2, 5, false), now), "the same report again: dropped");
        assert!(!book.accept(&stats("x", 2, 4, false), now), "an older one: dropped");
        assert!(!book.accept(&stats("x", 1, 9, false), now), "an older incarnation: dropped");
        assert!(book.accept(&stats("x", 2, 6, false), now));
        assert!(book.accept(&stats("x", 3, 1, false), now), "a restart numbers from 1");
        assert!(!book.reporting(now), "nobody wants reports yet");
        let later = now + REPLACEABLE_AFTER;
        assert!(book.accept(&stats("x", 1, 1, false), later), "an origin silent for long may start over");
    }

    #[test]
    fn a_wanted_report_keeps_this_broker_reporting_for_a_while_then_not() {
        let mut book = Book::default();
        let now = Instant::now();
        book.accept(&stats("viewer", 1, 1, true), now);
        assert!(book.reporting(now + WANTED_FOR - Duration::from_millis(1)));
        assert!(!book.reporting(now + WANTED_FOR));
    }
}
