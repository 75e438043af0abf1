//! The barrier property: when a broker's barrier is confirmed, every broker between it and
//! every publisher's broker holds the summaries of the subscriptions it covers, so a message
//! published anywhere in its group right then reaches them.
//!
//! Judged by a dry run at the moment of confirmation: from every live broker of the group, a
//! message matching each covered subscription is routed hop by hop through the routers as they
//! are (no network in between), and must reach the subscriber's broker. The judgement applies
//! when the routes at confirmation are those the barrier climbed: the requester's view is the
//! one it had at the request, its whole group shares it, links are settled, and the requester
//! only gained subscriptions since (a removal may uncover a narrower filter whose delta
//! legitimately follows the barrier).

use std::collections::{BTreeMap, VecDeque};

use tidings_route::{Arrival, DataHeader, Forwarding, PubendId, ViewId};

use crate::check::{cells_whole, links_settled, reference};
use crate::layer::Layer;
use crate::net::{Confirmation, Net};
use crate::topics::{all_topics, Content};

/// A barrier request as the simulator recorded it.
#[derive(Clone, Debug)]
pub struct Request {
    /// The requester's view then.
    pub view: ViewId,
    /// Its subscriptions then (ids).
    pub subs: Vec<u64>,
    /// Its unsubscribe count then.
    pub removals: u64,
}

/// Outstanding requests per (node, number).
pub type Requests = BTreeMap<(usize, u64), Request>;

/// Asks a barrier at `node` and records it.
pub fn request<L: Layer>(net: &mut Net<L>, requests: &mut Requests, node: usize) {
    let Some(view) = net.router(node).map(|r| r.view()) else { return };
    let subs: Vec<u64> = net.nodes[node].subs.keys().copied().collect();
    let removals = net.nodes[node].removals;
    if let Some(number) = net.request_barrier(node) {
        // Requests joined into one number cover the later one's subscriptions too.
        requests.insert((node, number), Request { view, subs, removals });
    }
}

/// Judges every confirmation seen since the last call; returns how many were judged (not
/// skipped because routes moved).
pub fn judge<L: Layer>(net: &mut Net<L>, requests: &mut Requests) -> Result<usize, String> {
    let confirmations = std::mem::take(&mut net.confirmations);
    let mut judged = 0;
    for Confirmation { node, number, .. } in confirmations {
        let Some(request) = requests.remove(&(node, number)) else { continue };
        if !applies(net, node, &request) {
            continue;
        }
        judged += 1;
        check(net, node, &request).map_err(|e| format!("barrier {number} of {}: {e}", net.nodes[node].name))?;
    }
    Ok(judged)
}

fn applies<L: Layer>(net: &Net<L>, node: usize, request: &Request) -> bool {
    if net.nodes[node].removals != request.removals || links_settled(net).is_err() || !cells_whole(net) {
        return false;
    }
    let truth = reference(net);
    let group = truth.component[node];
    (0..net.nodes.len())
        .filter(|k| truth.component[*k] == group)
        .all(|k| net.router(k).is_some_and(|r| r.view() == request.view))
}

fn check<L: Layer>(net: &Net<L>, node: usize, request: &Request) -> Result<(), String> {
    let truth = reference(net);
    let group = truth.component[node];
    for sub in &request.subs {
        let Some(filter) = net.nodes[node].subs.get(sub) else { continue };
        let Some(content) = matching_content(|c| c.wanted_by(filter)) else { continue };
        for publisher in (0..net.nodes.len()).filter(|k| net.alive(*k) && truth.component[*k] == group) {
            if !dry_run(net, publisher, &content).contains(&node) {
                return Err(format!(
                    "a message {content:?} published at {} would not reach subscription {sub} ({filter:?}) at {}",
                    net.nodes[publisher].name, net.nodes[node].name
                ));
            }
        }
    }
    Ok(())
}

/// Some message the predicate accepts, if any.
fn matching_content(wanted: impl Fn(&Content) -> bool) -> Option<Content> {
    all_topics().into_iter().flat_map(|topic| (0..10).map(move |k| Content { topic: topic.clone(), k })).find(wanted)
}

/// The brokers that would deliver `content` locally if `publisher` published it now and every
/// copy arrived at once.
fn dry_run<L: Layer>(net: &Net<L>, publisher: usize, content: &Content) -> Vec<usize> {
    let probe = content.probe();
    let mut delivered = Vec::new();
    let mut queue: VecDeque<(usize, Option<(usize, DataHeader)>)> = VecDeque::from([(publisher, None)]);
    let mut forwarding = Forwarding::default();
    let mut steps = 0;
    while let Some((at, hop)) = queue.pop_front() {
        steps += 1;
        let Some(router) = net.router(at).filter(|_| steps < 10_000) else { continue };
        match &hop {
            None => router.route(Arrival::Published { pubend: PubendId(7) }, &probe, &mut forwarding),
            Some((from, header)) => {
                let from = &net.nodes[*from].name;
                router.route(Arrival::Received { from, header }, &probe, &mut forwarding);
            }
        }
        if forwarding.dropped.is_some() {
            continue;
        }
        if forwarding.deliver_locally {
            delivered.push(at);
        }
        for send in &forwarding.sends {
            queue.push_back((net.node_of(&send.to), Some((at, send.header.clone()))));
        }
    }
    delivered
}
