//! Links this broker is not on, as their ends reported them over the network's links
//! (LINK_STATS, see `cluster::link_stats`): the "network view from any broker".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tidings_wire::peer::LinkStat;

use crate::cluster::LinkReport;

/// A report older than this is shown as stale: its origin reports every second while anyone
/// watches, so a few seconds without one means it stopped (killed, cut off, or too old to speak
/// LINK_STATS).
pub(super) const STALE: Duration = Duration::from_secs(3);

/// A link between two other brokers, from the fresher of its ends' reports.
#[derive(Serialize, Debug, PartialEq)]
pub(super) struct SeenLink {
    /// Data messages per second from end `a` to end `b`, and back.
    a_to_b_per_s: f64,
    b_to_a_per_s: f64,
    /// Data messages queued at `a` towards `b`, and at `b` towards `a` (none: that end has not
    /// reported the link).
    queued_at_a: Option<u32>,
    queued_at_b: Option<u32>,
    /// How old the report the rates come from is, in milliseconds.
    age_ms: u64,
    /// Older than [`STALE`].
    stale: bool,
}

/// Every broker's last report, by origin.
pub(super) struct Reports(BTreeMap<String, (Duration, Arc<[LinkStat]>)>);

impl Reports {
    /// Indexes the reports the cluster holds.
    pub(super) fn new(reports: Vec<LinkReport>) -> Reports {
        Reports(reports.into_iter().map(|r| (r.origin.to_string(), (r.age, r.links))).collect())
    }

    /// The link between `a` and `b` as they reported it, if either did.
    pub(super) fn link(&self, a: &str, b: &str) -> Option<SeenLink> {
        let end = |from: &str, to: &str| {
            let (age, links) = self.0.get(from)?;
            links.iter().find(|link| link.peer == to).map(|link| (*age, link))
        };
        let (at_a, at_b) = (end(a, b), end(b, a));
        let per_s = |centi: u32| f64::from(centi) / 100.0;
        let (age, a_to_b_per_s, b_to_a_per_s) = match (at_a, at_b) {
            (Some((age_a, from_a)), Some((age_b, _))) if age_a <= age_b => {
                (age_a, per_s(from_a.out_centi), per_s(from_a.in_centi))
            }
            (_, Some((age_b, from_b))) => (age_b, per_s(from_b.in_centi), per_s(from_b.out_centi)),
            (Some((age_a, from_a)), None) => (age_a, per_s(from_a.out_centi), per_s(from_a.in_centi)),
            (None, None) => return None,
        };
        Some(SeenLink {
            a_to_b_per_s,
            b_to_a_per_s,
            queued_at_a: at_a.map(|(_, link)| link.queued_messages),
            queued_at_b: at_b.map(|(_, link)| link.queued_messages),
            age_ms: age.as_millis() as u64,
            stale: age > STALE,
        })
    }
}

#[cfg(test)]
mod tests {
    use tidings_route::BrokerName;

    use super::*;

    fn stat(peer: &str, out_centi: u32, in_centi: u32, queued_messages: u32) -> LinkStat {
        LinkStat { peer: peer.into(), out_centi, in_centi, queued_messages, queued_bytes: 0 }
    }

    fn report(origin: &str, age_ms: u64, links: Vec<LinkStat>) -> LinkReport {
        LinkReport { origin: BrokerName::new(origin), age: Duration::from_millis(age_ms), links: links.into() }
    }

    #[test]
    fn a_link_takes_its_rates_from_the_fresher_end_and_each_ends_queue() {
        let reports = Reports::new(vec![
            report("x", 500, vec![stat("y", 1250, 300, 4)]),
            report("y", 200, vec![stat("x", 310, 1240, 1)]),
            report("z", 9000, vec![stat("x", 100, 0, 0)]),
        ]);
        let xy = reports.link("x", "y").unwrap();
        let expected = SeenLink {
            a_to_b_per_s: 12.4,
            b_to_a_per_s: 3.1,
            queued_at_a: Some(4),
            queued_at_b: Some(1),
            age_ms: 200,
            stale: false,
        };
        assert_eq!(xy, expected, "y's report is fresher");
        let xz = reports.link("x", "z").unwrap();
        assert_eq!((xz.a_to_b_per_s, xz.b_to_a_per_s, xz.queued_at_a), (0.0, 1.0, None), "only z reported it");
        assert!(xz.stale, "9 s old");
        assert_eq!(reports.link("y", "z"), None, "neither end reported it");
    }
}
