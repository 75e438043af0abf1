//! Queue groups on the routing trees of the seed topologies: the routers' own decisions,
//! followed hop by hop from every publishing broker, give each group exactly one member broker
//! per message, whichever brokers hold members (several of them in different subtrees, or
//! cell mates of the publisher).

// Test helpers: a broken setup should stop the test at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use tidings_matching::Pattern;
use tidings_route::matching::{Probe, RouteFilter};
use tidings_route::{Arrival, DataHeader, Forwarding, PubendId};
use tidings_sim::scenario::converge;
use tidings_sim::topology::seed_topology;
use tidings_sim::{Net, NoLayer, Rng};
use tidings_wire::Message;

/// Members: (broker, group, pattern).
type Members = [(&'static str, &'static str, &'static str)];

fn node(net: &Net<NoLayer>, name: &str) -> usize {
    net.nodes.iter().position(|n| n.name.as_str() == name).unwrap()
}

/// The groups broker `at` has a member for that matches `topic`.
fn local(net: &Net<NoLayer>, members: &Members, at: usize, topic: &str) -> Vec<String> {
    let mut groups: Vec<String> = members
        .iter()
        .filter(|(broker, _, pattern)| node(net, broker) == at && Pattern::parse(pattern).unwrap().matches(topic))
        .map(|(_, group, _)| group.to_string())
        .collect();
    groups.dedup();
    groups
}

/// Follows one message published at `publisher` through every router's decision; returns,
/// per broker that served a group, (broker, group).
fn served(net: &Net<NoLayer>, members: &Members, publisher: usize, topic: &str, pubend: u64) -> Vec<(usize, String)> {
    let message = Message::new(topic, &[], Bytes::new(), 0).unwrap();
    let probe = Probe::new(&message);
    let mut out = Vec::new();
    let mut forwarding = Forwarding::default();
    let here = local(net, members, publisher, topic);
    let arrival = Arrival::Published { pubend: PubendId(pubend) };
    net.router(publisher).unwrap().route_groups(arrival, &probe, &here, &mut forwarding);
    out.extend(here.into_iter().map(|group| (publisher, group)));
    let mut hops: Vec<(usize, DataHeader, usize)> =
        forwarding.sends.iter().map(|send| (publisher, send.header.clone(), node(net, send.to.as_str()))).collect();
    let mut steps = 0;
    while let Some((from, header, to)) = hops.pop() {
        steps += 1;
        assert!(steps < 1_000, "a loop");
        let ready: Vec<String> =
            local(net, members, to, topic).into_iter().filter(|group| header.groups.contains(group)).collect();
        let arrival = Arrival::Received { from: &net.nodes[from].name, header: &header };
        net.router(to).unwrap().route_groups(arrival, &probe, &ready, &mut forwarding);
        if forwarding.deliver_locally {
            out.extend(ready.into_iter().map(|group| (to, group)));
        }
        hops.extend(forwarding.sends.iter().map(|send| (to, send.header.clone(), node(net, send.to.as_str()))));
    }
    out
}

fn settled_with(file: &str, members: &Members) -> Net<NoLayer> {
    let mut net = Net::new(&seed_topology(file).unwrap(), NoLayer, 7);
    let mut rng = Rng::new(7);
    converge(&mut net, &mut rng).unwrap();
    for (broker, group, pattern) in members {
        let filter = RouteFilter::grouped(Pattern::parse(pattern).unwrap(), None, Some(group.to_string()));
        let at = node(&net, broker);
        net.subscribe(at, filter);
    }
    converge(&mut net, &mut rng).unwrap();
    net
}

/// Every broker publishes every topic; each group whose members match gets it exactly once.
fn check(file: &str, members: &Members, topics: &[&str]) {
    let net = settled_with(file, members);
    for publisher in 0..net.nodes.len() {
        for topic in topics {
            for pubend in 0..4 {
                let got = served(&net, members, publisher, topic, publisher as u64 * 100 + pubend);
                let mut groups: Vec<&str> = members
                    .iter()
                    .filter(|(_, _, pattern)| Pattern::parse(pattern).unwrap().matches(topic))
                    .map(|(_, group, _)| *group)
                    .collect();
                groups.sort();
                groups.dedup();
                let mut served_groups: Vec<&str> = got.iter().map(|(_, group)| group.as_str()).collect();
                served_groups.sort();
                let at = net.nodes[publisher].name.as_str();
                assert_eq!(served_groups, groups, "{topic} from {at}: served at {got:?}");
                let local = local(&net, members, publisher, topic);
                for (broker, group) in &got {
                    if local.contains(group) {
                        assert_eq!(*broker, publisher, "{topic} from {at}: members at the publisher's broker first");
                    }
                }
            }
        }
    }
}

#[test]
fn each_group_is_served_once_on_the_gryphon_network() {
    let members: &Members = &[
        ("s1", "w", "jobs.>"),
        ("s4", "w", "jobs.>"),
        ("s5", "w", "jobs.b.>"),
        ("b2", "w", "jobs.a.*"),
        ("s2", "v", "jobs.*.x"),
        ("s5", "v", "jobs.>"),
        ("p1", "v", "jobs.c.>"),
    ];
    check("gryphon-fig3.toml", members, &["jobs.a.x", "jobs.b.x", "jobs.c.y", "jobs.a.y.z", "other"]);
}

#[test]
fn each_group_is_served_once_on_a_chain_and_a_dense_network() {
    let members: &Members = &[("a", "w", "t.>"), ("c", "w", "t.>"), ("b", "v", "t.x")];
    check("chain-3.toml", members, &["t.x", "t.y"]);
    let members: &Members = &[("n3", "w", "t.>"), ("n17", "w", "t.>"), ("n9", "w", "t.x"), ("n21", "v", "t.>")];
    check("narada-22-dense.toml", members, &["t.x", "t.y"]);
}
