//! Hand-written scenarios on the simulated network, each showing one behaviour of the issue.

use crate::check::drain;
use crate::net::Net;
use crate::rng::Rng;
use crate::scenario::converge;
use crate::shared_topology;
use crate::topic::Pattern;

fn node(net: &Net, name: &str) -> usize {
    net.nodes.iter().position(|n| n.name.as_str() == name).unwrap()
}

fn settled(file: &str) -> (Net, Rng) {
    let mut net = Net::new(&shared_topology(file));
    let mut rng = Rng::new(7);
    converge(&mut net, &mut rng).unwrap();
    (net, rng)
}

/// Which of `candidates` a message reached.
fn reached(net: &Net, msg: usize, candidates: &[usize]) -> Vec<usize> {
    candidates.iter().copied().filter(|c| net.arrivals.contains_key(&(msg, *c))).collect()
}

#[test]
fn a_cut_bundle_link_costs_a_sideways_hop_until_link_state_spreads_then_the_entry_moves() {
    let (mut net, mut rng) = settled("gryphon-fig3.toml");
    let (p1, b1, b2, s1) = (node(&net, "p1"), node(&net, "b1"), node(&net, "b2"), node(&net, "s1"));
    let sub = net.subscribe(s1, Pattern::new("a.>"));
    converge(&mut net, &mut rng).unwrap();
    // A pubend whose messages enter cell IB1 at b1.
    let pubend = (0..64)
        .find(|pubend| {
            let msg = net.publish(p1, *pubend, "a.b");
            drain(&mut net, &mut rng);
            reached(&net, msg, &[b1, b2]) == vec![b1]
        })
        .unwrap();

    // b1 loses its link to s1; nobody else has heard yet when the next message is published.
    net.cut((b1.min(s1), b1.max(s1)), true);
    let sideways_before = net.sideways;
    let msg = net.publish(p1, pubend, "a.c");
    drain(&mut net, &mut rng);
    assert_eq!(net.deliveries.get(&(msg, sub)), Some(&1), "delivered once, through b2");
    assert_eq!(reached(&net, msg, &[b1, b2]), vec![b1, b2]);
    assert_eq!(net.sideways, sideways_before + 1);

    // Once link state has spread, p1 sends that pubend to b2, which still reaches s1.
    converge(&mut net, &mut rng).unwrap();
    let msg = net.publish(p1, pubend, "a.d");
    drain(&mut net, &mut rng);
    assert_eq!(reached(&net, msg, &[b1, b2]), vec![b2]);
    assert_eq!(net.deliveries.get(&(msg, sub)), Some(&1));
    assert_eq!(net.sideways, sideways_before + 1, "no more sideways hops");
    assert!(net.violations.is_empty(), "{:?}", net.violations);
}

#[test]
fn messages_travel_only_toward_interest_and_stop_after_the_last_unsubscribe() {
    let (mut net, mut rng) = settled("gryphon-fig3.toml");
    let (p1, s4, s5) = (node(&net, "p1"), node(&net, "s4"), node(&net, "s5"));
    let b_cells: Vec<usize> = ["b1", "b2", "b3", "b4"].iter().map(|b| node(&net, b)).collect();
    let narrow = net.subscribe(s4, Pattern::new("a.b"));
    let wide = net.subscribe(s5, Pattern::new("a.*"));
    converge(&mut net, &mut rng).unwrap();

    let msg = net.publish(p1, 1, "a.b");
    drain(&mut net, &mut rng);
    assert_eq!((net.deliveries.get(&(msg, narrow)), net.deliveries.get(&(msg, wide))), (Some(&1), Some(&1)));
    let ib1 = reached(&net, msg, &b_cells[..2]);
    assert!(ib1.is_empty(), "IB1 has no subscriber below it, yet got the message");

    net.unsubscribe(s5, wide);
    converge(&mut net, &mut rng).unwrap();
    let msg = net.publish(p1, 1, "a.c");
    drain(&mut net, &mut rng);
    assert_eq!(reached(&net, msg, &b_cells), Vec::<usize>::new(), "nobody wants a.c any more");

    net.unsubscribe(s4, narrow);
    converge(&mut net, &mut rng).unwrap();
    for router in net.nodes.iter().filter_map(|n| n.router.as_ref()) {
        let metrics = router.metrics();
        assert!(metrics.summary_size_received.values().all(|size| *size == 0), "{}: {metrics:?}", router.name());
    }
}

#[test]
fn the_dense_narada_network_routes_n22_to_n10_over_four_brokers() {
    let (mut net, mut rng) = settled("narada-22-dense.toml");
    let (n22, n10) = (node(&net, "n22"), node(&net, "n10"));
    let sub = net.subscribe(n10, Pattern::new(">"));
    converge(&mut net, &mut rng).unwrap();
    let msg = net.publish(n22, 3, "c");
    drain(&mut net, &mut rng);
    assert_eq!(net.deliveries.get(&(msg, sub)), Some(&1));
    let path: Vec<&str> = (0..net.nodes.len())
        .filter(|n| net.arrivals.contains_key(&(msg, *n)))
        .map(|n| net.nodes[n].name.as_str())
        .collect();
    assert_eq!(path, vec!["n1", "n8", "n10", "n22"], "only the brokers on the path see the message");
}
