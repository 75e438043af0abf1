//! The Gryphon failure-injection network of `topologies/gryphon-fig3.toml`, started as real
//! processes for the tests that need its relays and alternative paths.

use std::collections::BTreeMap;
use std::time::Duration;

use tidings_testkit::{wait_until, BrokerProcess};

use super::{links_up, Node};

/// The Gryphon failure-injection network (`topologies/gryphon-fig3.toml`): p1 in cell PHB;
/// IB1 = b1, b2; IB2 = b3, b4; s1, s2 under IB1; s3, s4, s5 under IB2 (every broker of a cell
/// linked to every broker of a linked cell, and to its mates). The link b1-s1 goes through a
/// cutting proxy. Started in dependency order, each dialling those before it.
pub(crate) struct Fig3 {
    _scratch: tempfile::TempDir,
    pub(crate) nodes: BTreeMap<&'static str, Node>,
    pub(crate) brokers: BTreeMap<&'static str, BrokerProcess>,
    pub(crate) proxy: tidings_testkit::FaultProxy,
}

pub(crate) const FIG3: [(&str, &str, &[&str]); 10] = [
    ("p1", "PHB", &[]),
    ("b1", "IB1", &["p1"]),
    ("b2", "IB1", &["p1", "b1"]),
    ("b3", "IB2", &["p1"]),
    ("b4", "IB2", &["p1", "b3"]),
    ("s1", "s1", &["b1", "b2"]),
    ("s2", "s2", &["b1", "b2"]),
    ("s3", "s3", &["b3", "b4"]),
    ("s4", "s4", &["b3", "b4"]),
    ("s5", "s5", &["b3", "b4"]),
];

impl Fig3 {
    /// The network up and linked, every broker's `[cluster]` table with `extra` lines.
    pub(crate) fn up(extra: &str) -> Fig3 {
        let scratch = tempfile::tempdir().unwrap();
        let mut nodes = BTreeMap::new();
        let mut brokers: BTreeMap<&'static str, BrokerProcess> = BTreeMap::new();
        let mut proxy = None;
        for (name, cell, peers) in FIG3 {
            let node = Node::configured(scratch.path(), name, cell, extra);
            let dial: Vec<String> = peers
                .iter()
                .map(|peer| {
                    let addr = brokers[peer].ready.cluster.unwrap();
                    if (name, *peer) == ("s1", "b1") {
                        let cut = tidings_testkit::FaultProxy::start(addr).unwrap();
                        let through = cut.addr().to_string();
                        proxy = Some(cut);
                        through
                    } else {
                        addr.to_string()
                    }
                })
                .collect();
            brokers.insert(name, node.start("127.0.0.1:0", "127.0.0.1:0", &dial));
            nodes.insert(name, node);
        }
        let fig = Fig3 { _scratch: scratch, nodes, brokers, proxy: proxy.unwrap() };
        fig.wait_linked(Duration::from_secs(30));
        fig
    }

    /// Each broker's expected number of links (b1 excluded once it is dead).
    pub(crate) fn wait_linked(&self, timeout: Duration) {
        let expected = |name: &str| match name {
            "p1" | "b1" | "b2" => 4.0,
            "b3" | "b4" => 5.0,
            _ => 2.0,
        };
        wait_until("the fig3 network links up", timeout, || {
            self.brokers.iter().all(|(name, b)| links_up(b, expected(name))())
        });
    }
}
