//! Vouching (`Synced`): a parent whose tree just changed must not drop what a child's lagging
//! summary cannot rule out, and must go back to filtering once the child vouched.

use super::*;

fn published(wired: &Wired, at: &str, value: u32) -> Vec<String> {
    let out = wired.route(at, Arrival::Published { pubend: PubendId(1) }, value);
    out.sends.iter().map(|send| send.to.to_string()).collect()
}

/// Delivers queued messages, holding back those from `from` to `to` that `hold` picks.
fn pump_holding(
    wired: &mut Wired,
    from: &str,
    to: &str,
    hold: impl Fn(&PeerMessage<Range>) -> bool,
) -> Vec<(BrokerName, BrokerName, PeerMessage<Range>)> {
    let mut held = Vec::new();
    while let Some((sender, receiver, message)) = wired.queue.pop_front() {
        if sender.as_str() == from && receiver.as_str() == to && hold(&message) {
            held.push((sender, receiver, message));
        } else {
            wired.input(receiver.as_str(), Input::Received { from: sender, message });
        }
    }
    held
}

#[test]
fn a_healed_link_carries_what_the_lagging_summary_cannot_rule_out_until_the_child_vouches() {
    let mut wired = Wired::new(&[("a", "a"), ("b", "b"), ("c", "c")]);
    wired.link("a", "c");
    wired.link("b", "c");
    wired.input("b", Input::Subscribe { filter: Range(0, 10) });
    wired.pump();
    assert_eq!(published(&wired, "a", 5), ["c"], "before the direct link, a reaches b through c");

    // The direct link comes up; b's summary and vouching toward a are still on their way.
    wired.link("a", "b");
    let held = pump_holding(&mut wired, "b", "a", |m| matches!(m, PeerMessage::Summary(_) | PeerMessage::Synced(_)));
    assert!(!held.is_empty(), "b sent a nothing to hold back; the test proves nothing");
    assert_eq!(published(&wired, "a", 5), ["b"], "a dropped a message b's missing summary could not rule out");
    assert_eq!(published(&wired, "a", 50), ["b"], "unvouched, b gets even what it may not want");

    // Once b's summary and Synced arrive, a filters again.
    wired.queue.extend(held);
    wired.pump();
    assert_eq!(published(&wired, "a", 5), ["b"]);
    assert!(published(&wired, "a", 50).is_empty(), "after vouching, b's summary rules 50 out");
}

#[test]
fn a_cell_mate_is_handed_local_copies_until_its_first_synced() {
    let mut wired = Wired::new(&[("a1", "A"), ("a2", "A")]);
    wired.input("a2", Input::Subscribe { filter: Range(0, 10) });
    wired.link("a1", "a2");
    let held = pump_holding(&mut wired, "a2", "a1", |m| matches!(m, PeerMessage::Summary(_) | PeerMessage::Synced(_)));
    assert!(!held.is_empty());
    assert_eq!(published(&wired, "a1", 50), ["a2"], "an unvouched mate gets every copy");
    wired.queue.extend(held);
    wired.pump();
    assert_eq!(published(&wired, "a1", 5), ["a2"]);
    assert!(published(&wired, "a1", 50).is_empty(), "after vouching, the mate's summary rules 50 out");
}
