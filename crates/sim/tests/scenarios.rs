//! Hand-written scenarios on the simulated network, each showing one behaviour.

// Test helpers: a broken setup should stop the test at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tidings_route::Tick;
use tidings_sim::check::drain;
use tidings_sim::scenario::converge;
use tidings_sim::topics::{filter, Content};
use tidings_sim::topology::seed_topology;
use tidings_sim::{Net, NoLayer, Rng};

fn node(net: &Net<NoLayer>, name: &str) -> usize {
    net.nodes.iter().position(|n| n.name.as_str() == name).unwrap()
}

fn settled(file: &str) -> (Net<NoLayer>, Rng) {
    let mut net = Net::new(&seed_topology(file).unwrap(), NoLayer, 7);
    let mut rng = Rng::new(7);
    converge(&mut net, &mut rng).unwrap();
    (net, rng)
}

fn content(topic: &str) -> Content {
    Content { topic: topic.to_string(), k: 1 }
}

/// Which of `candidates` a message reached.
fn reached(net: &Net<NoLayer>, msg: usize, candidates: &[usize]) -> Vec<usize> {
    candidates.iter().copied().filter(|c| net.arrivals.contains_key(&(msg, *c))).collect()
}

#[test]
fn messages_travel_only_toward_interest_and_stop_after_the_last_unsubscribe() {
    let (mut net, mut rng) = settled("gryphon-fig3.toml");
    let (p1, s4, s5) = (node(&net, "p1"), node(&net, "s4"), node(&net, "s5"));
    let b_cells: Vec<usize> = ["b1", "b2", "b3", "b4"].iter().map(|b| node(&net, b)).collect();
    let narrow = net.subscribe(s4, filter("a.b", None));
    let wide = net.subscribe(s5, filter("a.*", Some("k < 5")));
    converge(&mut net, &mut rng).unwrap();

    let msg = net.publish(p1, content("a.b"));
    drain(&mut net, &mut rng);
    assert_eq!((net.deliveries.get(&(msg, narrow)), net.deliveries.get(&(msg, wide))), (Some(&1), Some(&1)));
    assert!(reached(&net, msg, &b_cells[..2]).is_empty(), "IB1 has no subscriber below it, yet got the message");

    let msg = net.publish(p1, Content { topic: "a.c".into(), k: 9 });
    drain(&mut net, &mut rng);
    assert_eq!(reached(&net, msg, &b_cells), Vec::<usize>::new(), "the selector rules k = 9 out at the publisher");

    net.unsubscribe(s5, wide);
    net.unsubscribe(s4, narrow);
    converge(&mut net, &mut rng).unwrap();
    let msg = net.publish(p1, content("a.b"));
    drain(&mut net, &mut rng);
    assert_eq!(reached(&net, msg, &b_cells), Vec::<usize>::new(), "nobody wants a.b any more");
    assert!(net.violations.is_empty(), "{:?}", net.violations);
}

#[test]
fn a_cut_bundle_link_costs_a_sideways_hop_until_link_state_spreads_then_the_entry_moves() {
    let (mut net, mut rng) = settled("gryphon-fig3.toml");
    let (p1, b1, b2, s1) = (node(&net, "p1"), node(&net, "b1"), node(&net, "b2"), node(&net, "s1"));
    let sub = net.subscribe(s1, filter("a.>", None));
    converge(&mut net, &mut rng).unwrap();
    // A message whose pubend (p1's) enters cell IB1 at b1 or b2: find which.
    let msg = net.publish(p1, content("a.b"));
    drain(&mut net, &mut rng);
    let entry = reached(&net, msg, &[b1, b2]);
    assert_eq!(entry.len(), 1);
    let (entry, other) = if entry[0] == b1 { (b1, b2) } else { (b2, b1) };

    net.cut((entry.min(s1), entry.max(s1)), true);
    let sideways_before = net.sideways;
    let msg = net.publish(p1, content("a.c"));
    drain(&mut net, &mut rng);
    assert_eq!(net.deliveries.get(&(msg, sub)), Some(&1), "delivered once, through the cell mate");
    assert_eq!(reached(&net, msg, &[b1, b2]).len(), 2);
    assert_eq!(net.sideways, sideways_before + 1);

    converge(&mut net, &mut rng).unwrap();
    let msg = net.publish(p1, content("a.d"));
    drain(&mut net, &mut rng);
    assert_eq!(reached(&net, msg, &[b1, b2]), vec![other], "the entry moved to the broker with the link");
    assert_eq!(net.deliveries.get(&(msg, sub)), Some(&1));
    assert!(net.violations.is_empty(), "{:?}", net.violations);
}

#[test]
fn the_dense_narada_network_routes_n22_to_n10_over_four_brokers() {
    let (mut net, mut rng) = settled("narada-22-dense.toml");
    let (n22, n10) = (node(&net, "n22"), node(&net, "n10"));
    let sub = net.subscribe(n10, filter(">", None));
    converge(&mut net, &mut rng).unwrap();
    let msg = net.publish(n22, content("c"));
    drain(&mut net, &mut rng);
    assert_eq!(net.deliveries.get(&(msg, sub)), Some(&1));
    let path: Vec<&str> = (0..net.nodes.len())
        .filter(|n| net.arrivals.contains_key(&(msg, *n)))
        .map(|n| net.nodes[n].name.as_str())
        .collect();
    assert_eq!(path, vec!["n1", "n8", "n10", "n22"], "only the brokers on the path see the message");
}

#[test]
fn a_barrier_is_confirmed_with_the_next_tick_of_every_publisher_in_the_network() {
    let (mut net, mut rng) = settled("gryphon-fig3.toml");
    let (p1, s4) = (node(&net, "p1"), node(&net, "s4"));
    for _ in 0..3 {
        net.publish(p1, content("z"));
    }
    net.subscribe(s4, filter("a.b", None));
    let number = net.request_barrier(s4).unwrap();
    drain(&mut net, &mut rng);
    let confirmation = net.confirmations.iter().find(|c| c.node == s4 && c.number == number).unwrap();
    assert_eq!(confirmation.ticks.len(), net.nodes.len(), "every broker hosts one pubend");
    let p1_pubend = tidings_sim::net::home_pubend(&net.nodes[p1].name).id;
    assert!(confirmation.ticks.contains(&(p1_pubend, Tick(3))), "p1 published 3 messages: {:?}", confirmation.ticks);
}
