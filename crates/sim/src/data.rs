//! The simulated data path: publishing, arrivals, local delivery and forwarding, each hop
//! recorded for the checks.

use std::collections::BTreeSet;

use tidings_route::{Arrival, DataHeader, Filter, Forwarding, Input, PubendId};

use crate::layer::Layer;
use crate::net::{home_pubend, HopRecord, MessageRecord, Net, Packet};
use crate::topics::Content;

impl<L: Layer> Net<L> {
    /// A local publisher at `node` publishes; returns the message id.
    pub fn publish(&mut self, node: usize, content: Content) -> usize {
        let msg = self.messages.len();
        self.messages.push(MessageRecord { probe: content.probe(), content, publisher: node, in_flight: 0 });
        let probe = &self.messages[msg].probe;
        let Some(router) = self.nodes[node].router.as_ref() else { return msg };
        let mut forwarding = Forwarding::default();
        let pubend: PubendId = home_pubend(&self.nodes[node].name).id;
        router.route_with_verdicts(Arrival::Published { pubend }, probe, &mut forwarding);
        self.accept(node, msg, forwarding);
        msg
    }

    pub(crate) fn data_arrival(&mut self, node: usize, from: usize, header: &DataHeader, msg: usize) {
        if self.nodes[node].router.is_none() {
            return;
        }
        // Data proves the link alive, as the broker's shell reports it.
        self.input(node, Input::Heard { peer: self.nodes[from].name.clone() });
        let Some(router) = self.nodes[node].router.as_ref() else { return };
        let probe = &self.messages[msg].probe;
        let mut forwarding = Forwarding::default();
        let arrival = Arrival::Received { from: &self.nodes[from].name, header };
        router.route_with_verdicts(arrival, probe, &mut forwarding);
        match forwarding.dropped {
            None => self.accept(node, msg, forwarding),
            Some(reason) => *self.drops.entry(format!("{reason:?}")).or_insert(0) += 1,
        }
    }

    /// Carries out a forwarding decision.
    fn accept(&mut self, node: usize, msg: usize, forwarding: Forwarding) {
        let count = self.arrivals.entry((msg, node)).or_insert(0);
        *count += 1;
        if *count > 1 {
            self.violations.push(format!("message {msg} reached {} {} times", self.nodes[node].name, count));
        }
        if forwarding.deliver_locally {
            let probe = &self.messages[msg].probe;
            for (sub, filter) in &self.nodes[node].subs {
                if filter.matches(probe) {
                    let delivered = self.deliveries.entry((msg, *sub)).or_insert(0);
                    *delivered += 1;
                    if *delivered > 1 {
                        self.violations.push(format!("message {msg} delivered {delivered} times to subscriber {sub}"));
                    }
                }
            }
        }
        let mut targets = BTreeSet::new();
        for send in &forwarding.sends {
            let to = self.node_of(&send.to);
            if !targets.insert(to) {
                self.violations.push(format!("{} sent message {msg} twice to {}", self.nodes[node].name, send.to));
            }
            if matches!(&send.header.hop, tidings_route::Hop::Within { across, .. } if !across.is_empty()) {
                self.sideways += 1;
            }
            self.hops.push(HopRecord { msg, from: node, to, header: send.header.clone(), verdict: send.verdict });
            self.enqueue(node, to, Packet::Data(send.header.clone(), msg));
        }
    }
}
